"""The benchmark workloads, written once as ordinary PyTorch code against a framework module
`fw` (torch or plugflow), so both frameworks run exactly the same model code.

Each `make_<name>(fw)` builds the model, data and optimizer and returns a zero-argument step
function; one call is one timed unit (a training step or an inference). With `MODE` set to
"graph" (plugflow only), the same training step or inference runs as a plugflow.nn.Graph, and
"graph-bf16" adds bfloat16 mixed precision to it.
"""

MODE = "eager"  # "eager" | "graph" | "graph-bf16"; set by benchmarks/run.py's worker


def _graph(fw, build, modules, optimizer=None, channels_last=False):
    """A plugflow.nn.Graph running build(*inputs), for MODE "graph" / "graph-bf16"; the CNNs'
    graphs run their activations channels last where their make_ function says so
    (graph.config.set_memory_format)."""
    class BenchGraph(fw.nn.Graph):
        def __init__(self):
            super().__init__()
            for i, m in enumerate(modules):
                setattr(self, f"m{i}", m)
            if optimizer is not None:
                self.add_optimizer(optimizer)
            if MODE == "graph-bf16":
                self.config.enable_amp(True, dtype=fw.bfloat16)
            if channels_last:
                self.config.set_memory_format(fw.channels_last)

        def build(self, *inputs):
            return build(*inputs)
    return BenchGraph()


def make_small_op(fw):
    """The eager overhead: 1000 calls of a.add(b) on 100 floats per step."""
    a, b = fw.rand(100), fw.rand(100)

    def step():
        for _ in range(1000):
            a.add(b)
    return step


def _train_step(fw, model, optimizer, loss_fn, inputs, target, channels_last=False):
    if MODE != "eager":
        def build(x, y):
            loss = loss_fn(model(x), y)
            loss.backward()
            return loss
        graph = _graph(fw, build, [model], optimizer, channels_last)
        return lambda: graph(inputs, target)

    def step():
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), target)
        loss.backward()
        optimizer.step()
    return step


def make_mlp(fw):
    """An MLP training step: 64 -> 256 -> 256 -> 10, batch 64, SGD with momentum."""
    nn = fw.nn
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = fw.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = fw.randn(64, 64), fw.randint(0, 10, (64,))
    return _train_step(fw, model, optimizer, nn.functional.cross_entropy, x, y)


def _resnet(fw, depth, num_classes, cifar_stem):
    """torchvision's ResNet-18 (BasicBlock x [2, 2, 2, 2]) or ResNet-50 (Bottleneck x
    [3, 4, 6, 3]), written out; the CIFAR stem is a 3x3 stride-1 conv without the max pool."""
    nn = fw.nn

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * self.expansion
            self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * self.expansion
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    block, counts = {18: (BasicBlock, [2, 2, 2, 2]), 50: (Bottleneck, [3, 4, 6, 3])}[depth]

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            if cifar_stem:
                self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True))
            else:
                self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                          nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for i, (width, n) in enumerate(zip([64, 128, 256, 512], counts)):
                for j in range(n):
                    layers.append(block(cin, width, 2 if i > 0 and j == 0 else 1))
                    cin = width * block.expansion
            self.layers = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, num_classes)

        def forward(self, x):
            x = self.pool(self.layers(self.stem(x)))
            return self.fc(fw.flatten(x, 1))

    return ResNet()


def resnet50(fw, num_classes=1000):
    """ResNet-50 with the ImageNet stem, initialized as torchvision's (He-normal convolutions,
    fan_out): the GPU check compares its training losses across devices and precisions."""
    model = _resnet(fw, 50, num_classes, cifar_stem=False)
    for m in model.modules():
        if isinstance(m, fw.nn.Conv2d):
            fw.nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model


def make_resnet18_cifar_train(fw):
    """A CIFAR-size ResNet-18 training step: batch 16, 3x32x32, SGD with momentum. Its bfloat16
    graph runs channels last; the float32 one row-major, where oneDNN's blocked Winograd kernels
    beat its channels-last ones (docs/graph.md, "Layouts between convolutions")."""
    model = _resnet(fw, 18, 10, cifar_stem=True)
    optimizer = fw.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = fw.randn(16, 3, 32, 32), fw.randint(0, 10, (16,))
    return _train_step(fw, model, optimizer, fw.nn.functional.cross_entropy, x, y,
                       channels_last=MODE == "graph-bf16")


def make_resnet18_infer(fw):
    """ResNet-18 inference at batch 1, 3x224x224 (eval mode, no grad). Its bfloat16 graph runs
    channels last; the float32 one row-major, its activations channel-blocked between the
    convolutions (docs/graph.md, "Channel-blocked activations")."""
    model = _resnet(fw, 18, 1000, cifar_stem=False).eval()
    x = fw.randn(1, 3, 224, 224)
    if MODE != "eager":
        graph = _graph(fw, model, [model], channels_last=MODE == "graph-bf16")
        return lambda: graph(x)

    def step():
        with fw.no_grad():
            model(x)
    return step


class _BertConfig:
    def __init__(self, vocab, d_model, heads, layers, seq, batch):
        self.vocab, self.d_model, self.heads, self.layers, self.seq, self.batch = vocab, d_model, heads, layers, seq, batch


def _bert_train(fw, cfg, device="cpu"):
    """A BERT-style masked-LM training step: post-norm encoder layers (FFN 4 x d_model, GELU),
    a token-prediction loss over every position, AdamW."""
    nn = fw.nn

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
            self.pos = nn.Embedding(cfg.seq, cfg.d_model)
            self.norm = nn.LayerNorm(cfg.d_model)
            layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.heads, 4 * cfg.d_model, dropout=0.1,
                                               activation="gelu", batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, cfg.layers)
            self.head = nn.Linear(cfg.d_model, cfg.vocab)
            self.register_buffer("positions", fw.arange(cfg.seq))

        def forward(self, ids):
            h = self.norm(self.tok(ids) + self.pos(self.positions[: ids.shape[1]]))
            return self.head(self.encoder(h))

    model = Bert().to(device)
    optimizer = fw.optim.AdamW(model.parameters(), lr=1e-4)
    ids = fw.randint(0, cfg.vocab, (cfg.batch, cfg.seq), device=device)
    labels = fw.randint(0, cfg.vocab, (cfg.batch, cfg.seq), device=device)

    def loss_fn(logits, target):
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    return _train_step(fw, model, optimizer, loss_fn, ids, labels)


def make_bert_tiny_train(fw):
    """A BERT-tiny training step: 2 layers, d_model 128, 2 heads, seq 128, batch 8, vocab 1000."""
    return _bert_train(fw, _BertConfig(vocab=1000, d_model=128, heads=2, layers=2, seq=128, batch=8))


# name -> (make, label, steps per timed round: enough that a round lasts well over the time idle
# worker threads take to wake up)
WORKLOADS = {
    "small_op": (make_small_op, "1000 x a.add(b), 100 floats", 50),
    "mlp_train": (make_mlp, "MLP 64-256-256-10 train step, batch 64", 100),
    "resnet18_cifar_train": (make_resnet18_cifar_train, "ResNet-18 train step, batch 16, 32x32", 3),
    "bert_tiny_train": (make_bert_tiny_train, "BERT-tiny train step, batch 8, seq 128", 5),
    "resnet18_infer": (make_resnet18_infer, "ResNet-18 inference, batch 1, 224x224", 20),
}


# ---- throughput (DLPerf-style): samples per second of training, on cuda when present -------------

def _device(fw):
    return "cuda" if fw.cuda.is_available() else "cpu"


def make_resnet50_throughput(fw, batch=None):
    """ResNet-50 training at 224x224, SGD with momentum; batch 8 on CPU, 64 on a GPU."""
    device = _device(fw)
    batch = batch or (64 if device == "cuda" else 8)
    model = resnet50(fw).to(device)
    optimizer = fw.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = fw.randn(batch, 3, 224, 224, device=device)
    y = fw.randint(0, 1000, (batch,), device=device)
    return _train_step(fw, model, optimizer, fw.nn.functional.cross_entropy, x, y), batch


def make_bert_base_throughput(fw, batch=None):
    """BERT-base (12 layers, d_model 768, 12 heads, vocab 30522) training at seq 128; batch 4 on
    CPU, 32 on a GPU."""
    device = _device(fw)
    batch = batch or (32 if device == "cuda" else 4)
    cfg = _BertConfig(vocab=30522, d_model=768, heads=12, layers=12, seq=128, batch=batch)
    return _bert_train(fw, cfg, device), batch


THROUGHPUT = {
    "resnet50": (make_resnet50_throughput, "ResNet-50 train, 224x224", 2),
    "bert_base": (make_bert_base_throughput, "BERT-base train, seq 128", 2),
}
