"""The benchmark workloads, written once as ordinary PyTorch code against a framework module
`fw` (torch or plugflow), so both frameworks run exactly the same model code.

Each `make_<name>(fw)` builds the model, data and optimizer and returns a zero-argument step
function; one call is one timed unit (a training step or an inference).
"""


def make_small_op(fw):
    """The eager overhead: 1000 calls of a.add(b) on 100 floats per step."""
    a, b = fw.rand(100), fw.rand(100)

    def step():
        for _ in range(1000):
            a.add(b)
    return step


def _train_step(fw, model, optimizer, loss_fn, inputs, target):
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


def _resnet18(fw, num_classes, cifar_stem):
    """torchvision's ResNet-18, written out (BasicBlock x [2, 2, 2, 2]); the CIFAR stem is a 3x3
    stride-1 conv without the max pool."""
    nn = fw.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
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

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            if cifar_stem:
                self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True))
            else:
                self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                          nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
                layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x):
            x = self.pool(self.layers(self.stem(x)))
            return self.fc(fw.flatten(x, 1))

    return ResNet18()


def make_resnet18_cifar_train(fw):
    """A CIFAR-size ResNet-18 training step: batch 16, 3x32x32, SGD with momentum."""
    model = _resnet18(fw, 10, cifar_stem=True)
    optimizer = fw.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = fw.randn(16, 3, 32, 32), fw.randint(0, 10, (16,))
    return _train_step(fw, model, optimizer, fw.nn.functional.cross_entropy, x, y)


def make_resnet18_infer(fw):
    """ResNet-18 inference at batch 1, 3x224x224 (eval mode, no grad)."""
    model = _resnet18(fw, 1000, cifar_stem=False).eval()
    x = fw.randn(1, 3, 224, 224)

    def step():
        with fw.no_grad():
            model(x)
    return step


def make_bert_tiny_train(fw):
    """A BERT-tiny training step: 2 post-norm encoder layers, d_model 128, 2 heads, FFN 512,
    GELU, seq 128, batch 8, vocab 1000, masked-token loss over every position, AdamW."""
    nn = fw.nn

    class BertTiny(nn.Module):
        def __init__(self, vocab=1000, d_model=128, heads=2, layers=2, seq=128):
            super().__init__()
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(seq, d_model)
            self.norm = nn.LayerNorm(d_model)
            layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.1, activation="gelu",
                                               batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers)
            self.head = nn.Linear(d_model, vocab)
            self.register_buffer("positions", fw.arange(seq))

        def forward(self, ids):
            h = self.norm(self.tok(ids) + self.pos(self.positions[: ids.shape[1]]))
            return self.head(self.encoder(h))

    model = BertTiny()
    optimizer = fw.optim.AdamW(model.parameters(), lr=1e-4)
    ids, labels = fw.randint(0, 1000, (8, 128)), fw.randint(0, 1000, (8, 128))

    def loss_fn(logits, target):
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    return _train_step(fw, model, optimizer, loss_fn, ids, labels)


WORKLOADS = {
    "small_op": (make_small_op, "1000 x a.add(b), 100 floats"),
    "mlp_train": (make_mlp, "MLP 64-256-256-10 train step, batch 64"),
    "resnet18_cifar_train": (make_resnet18_cifar_train, "ResNet-18 train step, batch 16, 32x32"),
    "bert_tiny_train": (make_bert_tiny_train, "BERT-tiny train step, batch 8, seq 128"),
    "resnet18_infer": (make_resnet18_infer, "ResNet-18 inference, batch 1, 224x224"),
}
