"""A BERT encoder with its masked-LM head (Devlin et al. 2018; the layout of Google's
reference implementation and of HuggingFace's BertForMaskedLM), written against the
torch-compatible API so it runs on plugflow and on PyTorch alike:

    embeddings: word + position + token type, LayerNorm, dropout
    each layer: self-attention (query/key/value projections, scaled dot product with the additive
                -10000 mask of padded keys, attention dropout, output projection, dropout,
                residual + LayerNorm), then the feed-forward block (intermediate dense + GELU,
                output dense, dropout, residual + LayerNorm)
    MLM head:   dense + GELU + LayerNorm, decoder tied to the word embeddings, own bias

BertConfig.base() is BERT-base (12 layers, hidden 768, 12 heads, intermediate 3072, vocab 30522,
512 positions, 110M parameters)."""

import math


class BertConfig:
    def __init__(self, vocab_size, hidden_size, num_layers, num_heads, intermediate_size, max_positions=512,
                 type_vocab_size=2, dropout=0.1, layer_norm_eps=1e-12):
        self.vocab_size, self.hidden_size, self.num_layers, self.num_heads = vocab_size, hidden_size, num_layers, num_heads
        self.intermediate_size, self.max_positions, self.type_vocab_size = intermediate_size, max_positions, type_vocab_size
        self.dropout, self.layer_norm_eps = dropout, layer_norm_eps

    @classmethod
    def base(cls, dropout=0.1):
        return cls(30522, 768, 12, 12, 3072, dropout=dropout)

    @classmethod
    def tiny(cls, dropout=0.1):
        """Two layers of width 64: the CPU dry run."""
        return cls(1000, 64, 2, 2, 256, max_positions=64, dropout=dropout)


def build_bert_for_mlm(torch, config):
    """BertForMaskedLM for the framework module `torch` (plugflow or PyTorch)."""
    nn, F = torch.nn, torch.nn.functional
    c = config

    class Embeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
            self.position_embeddings = nn.Embedding(c.max_positions, c.hidden_size)
            self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
            self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
            self.dropout = nn.Dropout(c.dropout)

        def forward(self, input_ids, token_type_ids):
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            h = self.word_embeddings(input_ids) + self.position_embeddings(positions) + \
                self.token_type_embeddings(token_type_ids)
            return self.dropout(self.LayerNorm(h))

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.head_dim = c.hidden_size // c.num_heads
            self.query = nn.Linear(c.hidden_size, c.hidden_size)
            self.key = nn.Linear(c.hidden_size, c.hidden_size)
            self.value = nn.Linear(c.hidden_size, c.hidden_size)
            self.dropout = nn.Dropout(c.dropout)

        def heads(self, x):  # (B, S, H) -> (B, heads, S, head_dim)
            b, s, _ = x.shape
            return x.view(b, s, c.num_heads, self.head_dim).permute(0, 2, 1, 3)

        def forward(self, h, mask_bias):
            q, k, v = self.heads(self.query(h)), self.heads(self.key(h)), self.heads(self.value(h))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask_bias
            probs = self.dropout(F.softmax(scores, dim=-1))
            ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
            return ctx.view(h.shape[0], h.shape[1], c.hidden_size)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = SelfAttention()
            self.attention_output = nn.Linear(c.hidden_size, c.hidden_size)
            self.attention_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
            self.intermediate = nn.Linear(c.hidden_size, c.intermediate_size)
            self.output = nn.Linear(c.intermediate_size, c.hidden_size)
            self.output_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
            self.dropout = nn.Dropout(c.dropout)

        def forward(self, h, mask_bias):
            a = self.attention_norm(h + self.dropout(self.attention_output(self.attention(h, mask_bias))))
            return self.output_norm(a + self.dropout(self.output(F.gelu(self.intermediate(a)))))

    class BertForMaskedLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = Embeddings()
            self.layers = nn.ModuleList([Layer() for _ in range(c.num_layers)])
            self.transform = nn.Linear(c.hidden_size, c.hidden_size)
            self.transform_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
            self.decoder_bias = nn.Parameter(torch.zeros(c.vocab_size))
            self.apply(self._init_weights)

        @staticmethod
        def _init_weights(m):  # BERT's truncated-normal-like init: N(0, 0.02), zero biases, unit norms
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.data.zero_()
            if isinstance(m, nn.LayerNorm):
                m.weight.data.fill_(1.0)
                m.bias.data.zero_()

        def forward(self, input_ids, token_type_ids, attention_mask, labels):
            # Padded keys (mask 0) get -10000 before the softmax, as the reference implementation.
            mask_bias = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
            h = self.embeddings(input_ids, token_type_ids)
            for layer in self.layers:
                h = layer(h, mask_bias)
            h = self.transform_norm(F.gelu(self.transform(h)))
            logits = F.linear(h, self.embeddings.word_embeddings.weight, self.decoder_bias)  # tied decoder
            return F.cross_entropy(logits.view(-1, c.vocab_size).float(), labels.view(-1), ignore_index=-100)

    return BertForMaskedLM()


def mlm_batch(torch, config, batch, seq, generator_seed):
    """Random token ids, two segments, a few padded tail positions and 15% masked-LM labels
    (-100 elsewhere), made on the CPU so every device trains on the same numbers."""
    g = torch.Generator().manual_seed(generator_seed)
    ids = torch.randint(0, config.vocab_size, (batch, seq), generator=g)
    token_types = (torch.arange(seq) >= seq // 2).long().unsqueeze(0).expand(batch, seq).contiguous()
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[:, seq - seq // 8:] = 0  # the last eighth of every sequence is padding
    chosen = (torch.rand(batch, seq, generator=g) < 0.15) & (mask == 1)
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    return ids, token_types, mask, labels
