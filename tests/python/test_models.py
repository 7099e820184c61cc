"""Real model code, written once as PyTorch users write it and run on both frameworks with the
same weights: a ResNet (BasicBlocks with batch norm, downsampling shortcuts, in-place ReLU,
adaptive pooling) and a small BERT-style encoder (embeddings, hand-written multi-head
self-attention with a padding mask, GELU feed-forward, LayerNorm, a masked-token loss), plus
one built from nn.TransformerEncoder. Outputs, every gradient, and the parameters and buffers
after several optimizer steps are compared with PyTorch 1.13.
"""
import math

import numpy as np
import pytest
import torch

import plugflow as pf


def resnet(fw, widths=(8, 16, 32), num_classes=10):
    nn = fw.nn

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            return self.relu(out)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.inplanes = widths[0]
            self.conv1 = nn.Conv2d(3, widths[0], kernel_size=3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layers = nn.Sequential(*[self._make_layer(w, 2, stride=1 if i == 0 else 2)
                                          for i, w in enumerate(widths)])
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(widths[-1], num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def _make_layer(self, planes, blocks, stride):
            downsample = None
            if stride != 1 or self.inplanes != planes:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride=stride, bias=False),
                                           nn.BatchNorm2d(planes))
            layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes
            layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layers(x)
            x = fw.flatten(self.avgpool(x), 1)
            return self.fc(x)

    return ResNet()


def bert(fw, vocab=50, hidden=32, heads=4, layers=2, max_len=16):
    nn = fw.nn
    F = nn.functional

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads, self.head_dim = heads, hidden // heads
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)
            self.out = nn.Linear(hidden, hidden)

        def split(self, x):
            b, t, _ = x.size()
            return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

        def forward(self, x, pad_mask):
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
            scores = scores.masked_fill(pad_mask[:, None, None, :], float("-inf"))
            ctx = F.softmax(scores, dim=-1) @ v
            b, _, t, _ = ctx.shape
            return self.out(ctx.transpose(1, 2).contiguous().view(b, t, hidden))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = SelfAttention()
            self.ln1 = nn.LayerNorm(hidden)
            self.ffn = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
            self.ln2 = nn.LayerNorm(hidden)

        def forward(self, x, pad_mask):
            x = self.ln1(x + self.attn(x, pad_mask))
            return self.ln2(x + self.ffn(x))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, hidden, padding_idx=0)
            self.pos = nn.Embedding(max_len, hidden)
            self.ln = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList([Layer() for _ in range(layers)])
            self.head = nn.Linear(hidden, vocab)

        def forward(self, ids):
            pad_mask = ids == 0
            pos = fw.arange(ids.size(1)).unsqueeze(0).expand_as(ids)
            x = self.ln(self.tok(ids) + self.pos(pos))
            for layer in self.layers:
                x = layer(x, pad_mask)
            return self.head(x)

    return Bert()


def encoder(fw, vocab=40, d_model=24, heads=3):
    nn = fw.nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d_model)
            layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=48, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.enc = nn.TransformerEncoder(layer, num_layers=2)
            self.cls = nn.Linear(d_model, 5)

        def forward(self, ids, pad_mask):
            h = self.enc(self.emb(ids), src_key_padding_mask=pad_mask)
            keep = (~pad_mask).unsqueeze(-1).to(h.dtype)
            return self.cls((h * keep).sum(1) / keep.sum(1))

    return Encoder()


# ---- helpers ------------------------------------------------------------------------------------

def to_pf(t):
    return pf.from_numpy(t.detach().numpy().copy())


def copy_weights(tmodel, pmodel):
    missing, unexpected = pmodel.load_state_dict({k: to_pf(v) for k, v in tmodel.state_dict().items()})
    assert not missing and not unexpected


def assert_close(p, t, what, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(p.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=atol, err_msg=what)


def compare_state(pmodel, tmodel, rtol, atol, skip=()):
    tstate = tmodel.state_dict()
    for name, value in pmodel.state_dict().items():
        if name not in skip:
            assert_close(value, tstate[name], name, rtol, atol)


def compare_training(make, inputs, loss_fn, optim, steps, rtol=1e-4, atol=1e-5):
    """Same weights and inputs on both frameworks: outputs, every gradient, then `steps`
    optimizer steps and the resulting parameters and buffers."""
    torch.manual_seed(np.random.randint(1 << 30))
    tmodel = make(torch)
    pmodel = make(pf)
    copy_weights(tmodel, pmodel)
    tin = [torch.from_numpy(x) for x in inputs]
    pin = [pf.from_numpy(x.copy()) for x in inputs]
    topt = optim(torch, tmodel.parameters())
    popt = optim(pf, pmodel.parameters())
    # Parameters whose true gradient is zero (an attention key bias: softmax ignores a shift
    # shared by all keys) get rounding noise as gradient; Adam normalizes noise to full-size
    # steps of random sign, so their values after steps are not comparable. Their gradients are.
    noise_only = {name for name, _ in tmodel.named_parameters()}
    for step in range(steps):
        tloss = loss_fn(torch, tmodel(*tin[:-1]), tin[-1])
        ploss = loss_fn(pf, pmodel(*pin[:-1]), pin[-1])
        assert_close(ploss, tloss, f"loss at step {step}", rtol, atol)
        topt.zero_grad()
        popt.zero_grad()
        tloss.backward()
        ploss.backward()
        tgrads = dict(tmodel.named_parameters())
        largest = max(float(t.grad.abs().max()) for t in tgrads.values() if t.grad is not None and t.grad.numel())
        noise_only &= {n for n, t in tgrads.items() if t.grad is not None and float(t.grad.abs().max()) < 1e-5 * largest}
        for name, p in pmodel.named_parameters():
            assert p.grad is not None, name
            assert_close(p.grad, tgrads[name].grad, f"grad of {name} at step {step}", rtol * 10, atol * 10)
        topt.step()
        popt.step()
    compare_state(pmodel, tmodel, rtol * 10, atol * 10, skip=noise_only)
    return pmodel, tmodel


def cross_entropy(fw, logits, target):
    return fw.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=0)


# ---- the tests ----------------------------------------------------------------------------------

def test_resnet_train_steps_match_torch():
    # float64: in float32 a ReLU input within rounding of zero can fall on either side in either
    # framework and shift every gradient upstream by percents (batch norms over 4 images spread
    # it); test_torchvision_models checks float32 ResNets with a bound for such flips.
    x = np.random.randn(4, 3, 17, 17)  # odd size: exercises padding/stride edges
    y = np.random.randint(0, 10, size=4).astype(np.int64)
    pmodel, tmodel = compare_training(
        lambda fw: resnet(fw).double(), [x, y], lambda fw, out, t: fw.nn.functional.cross_entropy(out, t),
        lambda fw, params: fw.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4), steps=3)
    # Eval mode uses the running statistics the training steps updated.
    pmodel.eval()
    tmodel.eval()
    with torch.no_grad(), pf.no_grad():
        assert_close(pmodel(pf.from_numpy(x)), tmodel(torch.from_numpy(x)), "eval output", 1e-3, 1e-4)


def test_bert_style_encoder_train_steps_match_torch():
    ids = np.random.randint(1, 50, size=(3, 16)).astype(np.int64)
    ids[0, 11:] = 0  # padding: masked in attention, ignored by the loss
    ids[2, 5:] = 0
    labels = np.where(ids > 0, np.random.randint(1, 50, size=ids.shape), 0).astype(np.int64)
    compare_training(bert, [ids, labels], cross_entropy,
                     lambda fw, params: fw.optim.AdamW(params, lr=1e-3, weight_decay=0.01), steps=3)


def test_transformer_encoder_module_matches_torch():
    ids = np.random.randint(0, 40, size=(4, 9)).astype(np.int64)
    pad = np.zeros((4, 9), dtype=bool)
    pad[1, 6:] = True
    pad[3, 2:] = True
    y = np.random.randint(0, 5, size=4).astype(np.int64)
    compare_training(encoder, [ids, pad, y], lambda fw, out, t: fw.nn.functional.cross_entropy(out, t),
                     # SGD: in_proj_bias packs q, k and v biases, and k's gets noise gradients.
                     lambda fw, params: fw.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True), steps=3)


def test_checkpoint_crosses_frameworks(tmp_path):
    tmodel = resnet(torch)
    path = tmp_path / "resnet.pt"
    torch.save(tmodel.state_dict(), path)
    pmodel = resnet(pf)
    pmodel.load_state_dict(pf.load(path))  # a torch-written checkpoint, read without torch
    pmodel.eval()
    tmodel.eval()
    x = np.random.randn(2, 3, 16, 16).astype(np.float32)
    with torch.no_grad(), pf.no_grad():
        assert_close(pmodel(pf.from_numpy(x)), tmodel(torch.from_numpy(x)), "output after load", 1e-4, 1e-5)
    # And back: plugflow's checkpoint loads into the torch model.
    back = tmp_path / "back.pt"
    pf.save(pmodel.state_dict(), back)
    fresh = resnet(torch)
    fresh.load_state_dict(torch.load(back))
    for name, value in fresh.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), tmodel.state_dict()[name].numpy(), err_msg=name)


def test_load_state_dict_shape_mismatch_names_the_key():
    pmodel = resnet(pf)
    state = pmodel.state_dict()
    state["fc.weight"] = pf.zeros(3, 3)
    with pytest.raises(RuntimeError, match=r"size mismatch for fc\.weight"):
        pmodel.load_state_dict(state)
