"""nn.Graph with amp: the graph computes what eager autocast computes (it is captured under
autocast), with float32 master weights; inference graphs cast each weight once per version;
the fusion passes apply to bfloat16 graphs too (as close to float32 as eager autocast);
graph.config.enable_amp and the YAML optimizations.amp switch it; loss scaling in graphs."""

import copy
import textwrap

import numpy as np
import pytest

import plugflow as pf
import plugflow.nn as nn
import plugflow.nn.functional as F

from helpers import seeded_rng


def cnn():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
        nn.Conv2d(16, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


class Residual(nn.Module):
    """ResNet's basic block between a stem and a head: conv-bn-relu, and bn + add + relu."""
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.conv1, self.bn1 = nn.Conv2d(16, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        x = self.stem(x)
        y = F.relu(self.bn1(self.conv1(x)))
        return self.head(F.relu(self.bn2(self.conv2(y)) + x))


def randomize_batch_norms(model, rng):
    """Statistics and affine parameters far from the identity, so that folding them matters."""
    with pf.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(pf.from_numpy(rng.standard_normal(c).astype("float32")))
                m.running_var.copy_(pf.from_numpy(rng.uniform(0.2, 3.0, c).astype("float32")))
                m.weight.copy_(pf.from_numpy(rng.uniform(0.5, 2.0, c).astype("float32")))
                m.bias.copy_(pf.from_numpy(rng.standard_normal(c).astype("float32")))
    return model


FUSIONS = ("allow_fuse_pad_conv", "allow_fuse_conv_bn", "allow_fuse_bias_act", "allow_fuse_add_to_output")


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(50, 32)
        self.pos = nn.Embedding(16, 32)
        layer = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(32, 50)

    def forward(self, ids):
        return self.head(self.encoder(self.tok(ids) + self.pos(pf.arange(ids.shape[1]))))


class EvalGraph(nn.Graph):
    def __init__(self, model, amp=True, fuse=True):
        super().__init__()
        self.model = model
        if amp:
            self.config.enable_amp(True, dtype=pf.bfloat16)
        for allow in FUSIONS:
            getattr(self.config, allow)(fuse)

    def build(self, x):
        return self.model(x)


class TrainGraph(nn.Graph):
    def __init__(self, model, opt, loss_fn, scaler=None):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.add_optimizer(opt)
        self.config.enable_amp(True, dtype=pf.bfloat16)
        if scaler is not None:
            self.set_grad_scaler(scaler)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def images(rng, n=2):
    return pf.from_numpy(rng.standard_normal((n, 3, 32, 32)).astype("float32"))


def assert_same(a, b):
    assert a.dtype is b.dtype and tuple(a.shape) == tuple(b.shape)
    np.testing.assert_array_equal(a.float().detach().numpy(), b.float().detach().numpy())


def assert_close_to_float32(out, expected, exact):
    """A fused bfloat16 graph is not bit-equal to eager autocast (batch norm folds into the
    weights before their one rounding; epilogues add in float32): it must be as close to the
    float32 result as eager autocast is: within twice eager's error, or within a few bfloat16
    epsilons (2**-8) of the output's scale. Over 300 seeded runs both stay under 2.6 epsilons; a
    wrong fold or a stale weight is off by the output's scale itself."""
    exact = exact.numpy()
    error = np.abs(out.float().numpy() - exact).max()
    autocast_error = np.abs(expected.float().numpy() - exact).max()
    bound = max(2 * autocast_error, 5 * 2.0 ** -8 * np.abs(exact).max())
    assert error <= bound, (error, autocast_error, bound)


@pytest.mark.parametrize("model_name", ["cnn", "residual"])
@pytest.mark.parametrize("fuse", [False, True])
def test_inference_graph_equals_eager_autocast(model_name, fuse):
    """Without the fusion passes the graph computes exactly what eager autocast computes. With
    them, batch norm folds into the bfloat16 convolutions (the float32 weights folded, then
    rounded once) and bias, residual and relu join their epilogues (added in float32 before one
    rounding): the outputs are then as close to float32 as eager autocast's, not bit-equal."""
    rng = seeded_rng("PF_GRAPH_AMP_SEED", seed_plugflow=True)
    model = randomize_batch_norms(cnn() if model_name == "cnn" else Residual(), rng).eval()
    g = EvalGraph(model, fuse=fuse)
    for _ in range(3):
        x = images(rng)
        with pf.no_grad(), pf.autocast("cpu"):
            expected = model(x)
        out = g(x)
        assert out.dtype is pf.bfloat16
        if not fuse:
            assert_same(out, expected)
            continue
        with pf.no_grad():
            exact = model(x)
        assert not np.array_equal(expected.float().numpy(), exact.numpy())  # bfloat16 rounding shows
        assert_close_to_float32(out, expected, exact)
    text = "\n".join(f"{name}: {report}" for name, report, _ in g._last.pass_reports)
    assert "amp: " in text and "run once per parameter version" in text, text
    if fuse:
        assert "folded into" in text and "conv2d_fused" in g._last.plan.text(), text
    assert all(p.dtype is pf.float32 for p in model.parameters())


@pytest.mark.parametrize("fuse", [False, True])
def test_inference_graph_sees_weight_changes(fuse):
    """The weight casts (and, fused, the folded weights) are cached per weight version: an eager
    in-place change of a weight is seen on the next call."""
    rng = seeded_rng("PF_GRAPH_AMP_SEED", seed_plugflow=True)
    model = randomize_batch_norms(cnn(), rng).eval()
    g = EvalGraph(model, fuse=fuse)
    x = images(rng)
    before = g(x)
    with pf.no_grad():
        model[0].weight.mul_(1.5)
        model[1].running_var.mul_(4.0)
        model[9].bias.add_(1.0)
    with pf.no_grad(), pf.autocast("cpu"):
        expected = model(x)
    out = g(x)
    if not fuse:
        assert_same(out, expected)
        return
    with pf.no_grad():
        exact = model(x)
    assert_close_to_float32(out, expected, exact)
    # The change is large enough that a stale cache could not pass the check above.
    assert np.abs(before.float().numpy() - exact.numpy()).max() > 0.5


def test_amp_off_graph_stays_float32():
    model = cnn().eval()
    out = EvalGraph(model, amp=False)(images(seeded_rng()))
    assert out.dtype is pf.float32


@pytest.mark.parametrize("model_name", ["cnn", "residual", "bert"])
def test_training_graph_equals_eager_autocast(model_name):
    """Step for step: the graph's losses and parameters equal eager autocast training's, with
    the bfloat16 batch norm + (add +) relu kernels and their backward, which round as the op
    chains do."""
    rng = seeded_rng("PF_GRAPH_AMP_SEED", seed_plugflow=True)
    if model_name != "bert":
        eager_model = cnn() if model_name == "cnn" else Residual()
        data = [(images(rng, 4), pf.from_numpy(rng.integers(0, 10, 4))) for _ in range(3)]
        loss_fn = F.cross_entropy
    else:
        eager_model = Bert()
        data = [(pf.from_numpy(rng.integers(0, 50, (2, 16))), pf.from_numpy(rng.integers(0, 50, (2, 16))))
                for _ in range(3)]

        def loss_fn(out, y):
            return F.cross_entropy(out.reshape(-1, 50), y.reshape(-1))
    graph_model = copy.deepcopy(eager_model)
    eager_opt = pf.optim.SGD(eager_model.parameters(), lr=0.05, momentum=0.9)
    graph_opt = pf.optim.SGD(graph_model.parameters(), lr=0.05, momentum=0.9)
    g = TrainGraph(graph_model, graph_opt, loss_fn)
    for x, y in data:
        eager_opt.zero_grad()
        with pf.autocast("cpu"):
            eager_loss = loss_fn(eager_model(x), y)
        eager_loss.backward()
        eager_opt.step()
        graph_loss = g(x, y)
        assert graph_loss.dtype is pf.float32
        np.testing.assert_allclose(graph_loss.item(), eager_loss.item(), rtol=1e-6)
    for (name, p), q in zip(eager_model.named_parameters(), graph_model.parameters()):
        assert q.dtype is pf.float32
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    if model_name != "bert":
        text = "\n".join(report for _, report, _ in g._last.pass_reports)
        assert "batch norm + relu fused, and its backward" in text, text
        if model_name == "residual":
            assert "batch norm + add + relu fused, and its backward" in text, text


def test_graph_inside_an_eager_region_is_captured_with_it():
    model = nn.Linear(4, 3)
    g = EvalGraph(model, amp=False)
    x = pf.ones(2, 4)
    with pf.autocast("cpu"):
        assert g(x).dtype is pf.bfloat16
    assert g(x).dtype is pf.float32  # another signature: compiled again without autocast


def test_float16_amp_on_cpu_is_refused():
    g = EvalGraph(nn.Linear(4, 3), amp=False)
    g.config.enable_amp(True, dtype=pf.float16)
    with pytest.raises(RuntimeError, match="CPU autocast computes in bfloat16 only"):
        g(pf.ones(2, 4))
    with pytest.raises(ValueError, match="bfloat16 or plugflow.float16"):
        g.config.enable_amp(True, dtype=pf.float32)


def test_yaml_amp_is_the_default_of_every_graph(tmp_path):
    cfg = tmp_path / "amp.yaml"
    cfg.write_text(textwrap.dedent("""\
        optimizations:
          amp: bf16
        """))
    pf.init(str(cfg))
    try:
        g = EvalGraph(nn.Linear(4, 3), amp=False)
        assert g.config._amp == "bf16"
        assert g(pf.ones(2, 4)).dtype is pf.bfloat16
        g.config.enable_amp(False)
        assert g(pf.ones(2, 4)).dtype is pf.float32
    finally:
        pf.init()
    assert EvalGraph(nn.Linear(4, 3), amp=False).config._amp == "off"


# ---- loss scaling in graphs ---------------------------------------------------------------------------

class ScaledGraph(nn.Graph):
    def __init__(self, model, opt, scaler):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        self.set_grad_scaler(scaler)

    def build(self, x, y):
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        return loss


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_grad_scaler_in_a_graph_equals_eager_scaling(optimizer):
    """scaler.scale(loss).backward(); scaler.step(opt); scaler.update() eagerly, and the same
    inside a graph: equal losses, parameters, optimizer state, scale and growth tracker, with a
    step whose gradients are inf skipped by both."""
    rng = seeded_rng("PF_GRAPH_AMP_SEED", seed_plugflow=True)
    eager_model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    graph_model = copy.deepcopy(eager_model)

    def make_opt(m):
        if optimizer == "sgd":
            return pf.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, dampening=0.2)
        return pf.optim.Adam(m.parameters(), lr=0.01)
    eager_opt, graph_opt = make_opt(eager_model), make_opt(graph_model)
    eager_scaler = pf.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=2)
    graph_scaler = pf.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=2)
    g = ScaledGraph(graph_model, graph_opt, graph_scaler)
    steps = []
    for i in range(6):
        x = rng.standard_normal((5, 4)).astype("float32")
        if i in (0, 3):  # inf gradients: the first step (momentum buffer creation) and a later one
            x[0, 0] = np.inf
        steps.append((pf.from_numpy(x), pf.from_numpy(rng.standard_normal((5, 2)).astype("float32"))))
    scales = []
    for x, y in steps:
        eager_opt.zero_grad()
        eager_loss = F.mse_loss(eager_model(x), y)
        eager_scaler.scale(eager_loss).backward()
        eager_scaler.step(eager_opt)
        eager_scaler.update()
        graph_loss = g(x, y)
        np.testing.assert_allclose(graph_loss.item(), eager_loss.item(), rtol=1e-6)
        assert graph_scaler.get_scale() == eager_scaler.get_scale()
        scales.append(graph_scaler.get_scale())
        assert graph_scaler._get_growth_tracker() == eager_scaler._get_growth_tracker()
        for p, q in zip(eager_model.parameters(), graph_model.parameters()):
            np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert scales == [128.0, 128.0, 256.0, 128.0, 128.0, 256.0]  # backed off after each inf, grew after 2 good
    if optimizer == "adam":
        for p, q in zip(eager_model.parameters(), graph_model.parameters()):
            assert graph_opt.state[q]["step"].item() == eager_opt.state[p]["step"].item() == 4


def test_grad_scaler_needs_a_training_graph():
    g = EvalGraph(nn.Linear(2, 2), amp=False)
    g.set_grad_scaler(pf.amp.GradScaler("cpu"))
    with pytest.raises(RuntimeError, match="set_grad_scaler needs an optimizer"):
        g(pf.ones(1, 2))
    with pytest.raises(TypeError, match="expects a plugflow.amp.GradScaler"):
        g.set_grad_scaler(object())
