"""nn.Graph: capture, replay and sharing with eager mode. Graph training must match eager
training step for step (float64 to 1e-10, float32 within float tolerance), and what cannot be
captured must raise GraphCaptureError naming the line of build()."""

import copy

import numpy as np
import pytest

import plugflow as pf
import plugflow.nn as nn
import plugflow.nn.functional as F

from helpers import seeded_rng

TOL = {pf.float64: dict(rtol=1e-10, atol=1e-12), pf.float32: dict(rtol=2e-5, atol=2e-6)}


def assert_close(a, b, dtype):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **TOL[dtype])


class TrainGraph(nn.Graph):
    def __init__(self, model, opt, loss_fn=F.cross_entropy, sched=None):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.add_optimizer(opt, lr_sch=sched)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


class EvalGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def mlp(dtype, dropout=0.0):
    layers = [nn.Linear(12, 32), nn.ReLU(), nn.Dropout(dropout), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 5)]
    return nn.Sequential(*layers).to(dtype)


def small_cnn(dtype):
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4)).to(dtype)


OPTIMIZERS = {
    "sgd": lambda ps: pf.optim.SGD(ps, lr=0.05),
    "sgd_momentum": lambda ps: pf.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3,
                                             nesterov=False),
    "sgd_nesterov": lambda ps: pf.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    "adam": lambda ps: pf.optim.Adam(ps, lr=1e-2, weight_decay=1e-3),
    "adamw_amsgrad": lambda ps: pf.optim.AdamW(ps, lr=1e-2, amsgrad=True),
}


@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
@pytest.mark.parametrize("dtype", [pf.float64, pf.float32])
@pytest.mark.parametrize("make_model", [mlp, small_cnn])
def test_graph_training_matches_eager_step_for_step(make_model, dtype, opt_name):
    rng = seeded_rng(seed_plugflow=True)
    eager = make_model(dtype)
    graphed = copy.deepcopy(eager)
    opt_e = OPTIMIZERS[opt_name](eager.parameters())
    opt_g = OPTIMIZERS[opt_name](graphed.parameters())
    g = TrainGraph(graphed, opt_g)
    if dtype is pf.float32:
        # oneDNN's fused epilogues (bias, residual sum) round float32 differently from separate
        # ops, and Adam turns the rounding noise of a gradient that is zero in exact arithmetic
        # (small_cnn's conv bias before batch norm) into whole steps of size lr; the fusion passes
        # are compared with float32 tolerance in test_graph_passes.py.
        g.config.allow_fuse_bias_act(False)
        g.config.allow_fuse_add_to_output(False)
    shape = (8, 12) if make_model is mlp else (4, 3, 8, 8)
    n_classes = 5 if make_model is mlp else 4
    for step in range(4):
        x = pf.from_numpy(rng.standard_normal(shape)).to(dtype)
        y = pf.from_numpy(rng.integers(0, n_classes, shape[0]))
        opt_e.zero_grad()
        loss_e = F.cross_entropy(eager(x), y)
        loss_e.backward()
        opt_e.step()
        loss_g = g(x, y)
        assert_close(loss_g, loss_e, dtype)
        for (name, pe), pg in zip(eager.named_parameters(), graphed.parameters()):
            assert_close(pg, pe, dtype)
            assert pg.grad is None, name  # the graph owns the gradients
        for be, bg in zip(eager.buffers(), graphed.buffers()):
            np.testing.assert_allclose(bg.numpy(), be.numpy(), **TOL[dtype])
    # The optimizer state is the eager one: a state_dict continues where the graph left off.
    assert opt_g.state_dict()["state"].keys() == opt_e.state_dict()["state"].keys()


def test_dropout_in_a_graph_draws_what_eager_draws():
    pf.manual_seed(3)
    eager = mlp(pf.float64, dropout=0.5)
    graphed = copy.deepcopy(eager)
    g = TrainGraph(graphed, pf.optim.SGD(graphed.parameters(), lr=0.1))
    opt = pf.optim.SGD(eager.parameters(), lr=0.1)
    x, y = pf.randn(16, 12, dtype=pf.float64), pf.randint(0, 5, (16,))
    pf.manual_seed(11)
    losses_g = [g(x, y).item() for _ in range(3)]
    pf.manual_seed(11)
    losses_e = []
    for _ in range(3):
        opt.zero_grad()
        loss = F.cross_entropy(eager(x), y)
        loss.backward()
        opt.step()
        losses_e.append(loss.item())
    np.testing.assert_allclose(losses_g, losses_e, rtol=1e-12)
    assert len(set(losses_g)) == 3  # fresh masks every call


def test_eager_and_graph_steps_interleave_and_share_state():
    pf.manual_seed(0)
    model = mlp(pf.float64)
    ref = copy.deepcopy(model)
    opt = pf.optim.Adam(model.parameters(), lr=1e-2)
    ref_opt = pf.optim.Adam(ref.parameters(), lr=1e-2)
    sched = pf.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    ref_sched = pf.optim.lr_scheduler.StepLR(ref_opt, step_size=2, gamma=0.5)
    g = TrainGraph(model, opt, sched=sched)
    x, y = pf.randn(8, 12, dtype=pf.float64), pf.randint(0, 5, (8,))

    def eager_step(m, o, s):
        o.zero_grad()
        F.cross_entropy(m(x), y).backward()
        o.step()
        s.step()

    for kind in ["eager", "graph", "graph", "eager", "graph", "eager"]:
        if kind == "graph":
            g(x, y)
        else:
            eager_step(model, opt, sched)
        eager_step(ref, ref_opt, ref_sched)
        for p, r in zip(model.parameters(), ref.parameters()):
            assert_close(p, r, pf.float64)
    assert opt.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"]
    assert opt.state[next(iter(model.parameters()))]["step"].item() == 6


def test_one_plan_per_signature():
    model = mlp(pf.float32)
    g = TrainGraph(model, pf.optim.SGD(model.parameters(), lr=0.1))
    for batch in [8, 8, 8, 5, 8, 5]:  # the last, smaller batch compiles once more, not every step
        g(pf.randn(batch, 12), pf.randint(0, 5, (batch,)))
    assert len(g._compiled) == 2
    model.eval()  # the train/eval state is part of the signature
    g(pf.randn(8, 12), pf.randint(0, 5, (8,)))
    assert len(g._compiled) == 3


def test_inference_graph_matches_eager_and_does_not_update():
    model = small_cnn(pf.float32).eval()
    g = EvalGraph(model)
    before = [p.clone() for p in model.parameters()]
    stats = [b.clone() for b in model.buffers()]
    for _ in range(3):
        x = pf.randn(2, 3, 8, 8)
        with pf.no_grad():
            expected = model(x)
        assert_close(g(x), expected, pf.float32)
    for p, b in zip(model.parameters(), before):
        assert pf.equal(p, b)
    for s, b in zip(model.buffers(), stats):
        assert pf.equal(s, b)


def test_outputs_are_fresh_tensors_every_call():
    model = mlp(pf.float32).eval()
    g = EvalGraph(model)
    x = pf.randn(4, 12)
    a = g(x)
    b = g(x * 2)
    assert a.data_ptr() != b.data_ptr()
    with pf.no_grad():
        assert_close(a, model(x), pf.float32)


def test_non_contiguous_inputs_are_accepted():
    model = mlp(pf.float64).eval()
    g = EvalGraph(model)
    x = pf.randn(12, 6, dtype=pf.float64)
    g(x.t().contiguous())
    with pf.no_grad():
        assert_close(g(x.t()), model(x.t()), pf.float64)


class ItemGraph(nn.Graph):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def build(self, x):
        y = self.lin(x)
        if y.sum() > 0:  # data-dependent Python control flow
            return y
        return -y


def test_capture_error_names_the_line_of_build():
    with pytest.raises(pf.nn.GraphCaptureError, match=r"test_graph.py:\d+: if y.sum\(\) > 0"):
        ItemGraph()(pf.randn(2, 4))


class BadGraph(nn.Graph):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def build(self, x):
        return self.body(x)


@pytest.mark.parametrize("body, what", [
    (lambda x: x.sum().item(), "item"),
    (lambda x: x.tolist(), "tolist"),
    (lambda x: x.numpy(), "numpy"),
    (lambda x: print(x), "tolist"),
    (lambda x: x[x > 0], "count"),
    (lambda x: x.nonzero(), "count"),
    (lambda x: x.add_(1), "writes in place into input 0"),
])
def test_uncapturable_builds_raise(body, what):
    with pytest.raises(pf.nn.GraphCaptureError, match=what):
        BadGraph(body)(pf.randn(3, 4))
    assert not pf._C._graph_capturing()  # the failed capture left capture mode


def test_tensors_kept_from_capture_hold_no_data():
    kept = []

    def body(x):
        y = x * 2
        kept.append(y)
        return y
    BadGraph(body)(pf.randn(3))
    with pytest.raises(RuntimeError, match="created while an nn.Graph was capturing"):
        kept[0] + 1


def test_backward_needs_an_optimizer_and_an_optimizer_needs_backward():
    model = mlp(pf.float32)

    class NoBackward(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(pf.optim.SGD(model.parameters(), lr=0.1))

        def build(self, x):
            return self.model(x).sum()
    with pytest.raises(RuntimeError, match="must call backward"):
        NoBackward()(pf.randn(2, 12))


def test_unsupported_optimizer_is_refused_clearly():
    model = mlp(pf.float32)
    with pytest.raises(NotImplementedError, match="RMSprop"):
        TrainGraph(model, pf.optim.RMSprop(model.parameters()))


def test_gradient_accumulation_matches_the_whole_batch():
    pf.manual_seed(0)
    model = mlp(pf.float64)
    ref = copy.deepcopy(model)
    g = TrainGraph(model, pf.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    g.config.set_gradient_accumulation_steps(4)
    ref_g = TrainGraph(ref, pf.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9))
    for _ in range(3):
        x, y = pf.randn(16, 12, dtype=pf.float64), pf.randint(0, 5, (16,))
        loss = g(x, y)
        ref_loss = ref_g(x, y)
        assert_close(loss, ref_loss, pf.float64)
        for p, r in zip(model.parameters(), ref.parameters()):
            assert_close(p, r, pf.float64)
    with pytest.raises(ValueError, match="multiple of 4"):
        g(pf.randn(6, 12, dtype=pf.float64), pf.randint(0, 5, (6,)))


def test_dump_and_debug_show_the_graph(tmp_path, capsys):
    model = small_cnn(pf.float32)
    g = TrainGraph(model, pf.optim.SGD(model.parameters(), lr=0.1))
    g.debug(1)
    g(pf.randn(2, 3, 8, 8), pf.randint(0, 4, (2,)))
    err = capsys.readouterr().err
    assert "conv2d" in err and "[cpu]" in err and "arena" in err
    g.dump(tmp_path / "dump")
    files = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert "00_captured.txt" in files and "00_captured.dot" in files and "plan.txt" in files
    text = (tmp_path / "dump" / "plan.txt").read_text()
    assert "conv2d_grad_weight" in text and "sgd_step_" in text and "# model.0" in text
    assert "digraph" in (tmp_path / "dump" / "00_captured.dot").read_text()
    assert "conv2d" in repr(g)


def test_memory_plan_reuses_temporaries():
    model = small_cnn(pf.float32)
    g = TrainGraph(model, pf.optim.SGD(model.parameters(), lr=0.1))
    g(pf.randn(8, 3, 16, 16), pf.randint(0, 4, (8,)))
    plan = g._last.plan
    assert 0 < plan.peak_live_bytes <= plan.arena_bytes < 0.75 * plan.unplanned_bytes
    assert plan.arena_bytes <= 1.1 * plan.peak_live_bytes  # placement close to the lower bound


def test_updates_run_as_soon_as_their_gradient_is_ready():
    model = small_cnn(pf.float32)
    g = TrainGraph(model, pf.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    g.config.allow_fuse_model_update_ops(False)
    g(pf.randn(4, 3, 8, 8), pf.randint(0, 4, (4,)))
    ops = [line.split(" = ")[1].split("(")[0] for line in g._last.plan.text().splitlines() if " = " in line]
    first_update = ops.index("sgd_step_")
    # the last layer's parameters are updated before the first layer's gradients are computed
    assert "conv2d_grad_weight" in ops[first_update:], ops


def test_graph_conv_algo_search_overrides_the_config(tmp_path):
    """graph.config.set_conv_algo_search('exhaustive') times the convolutions' algorithms on the
    first replay (reported as 'search'), while eager calls keep the config's heuristic."""
    import json
    import os
    import subprocess
    import sys
    import textwrap
    cfg = tmp_path / "heuristic.yaml"
    cfg.write_text(f"optimizations:\n  conv_algo_search: heuristic\n  algo_cache: {tmp_path / 'algos.yaml'}\n")
    code = textwrap.dedent("""
        import json
        import plugflow as pf, plugflow.nn as nn
        from plugflow import _C

        class G(nn.Graph):
            def __init__(self, m):
                super().__init__()
                self.m = m
            def build(self, x):
                return self.m(x)
        m = nn.Conv2d(3, 8, 3, padding=1).eval()
        g = G(m)
        g.config.set_conv_algo_search("exhaustive")
        g(pf.randn(2, 3, 12, 12))
        nn.Conv2d(3, 5, 3)(pf.randn(1, 3, 9, 9))  # eager, another problem
        print(json.dumps([c for c in _C.algo_choices() if c["provider"] == "cpu"]))
    """)
    env = dict(os.environ, PLUGFLOW_CONFIG=str(cfg))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    choices = json.loads(proc.stdout.strip().splitlines()[-1])
    by_batch = {c["key"].split("in=")[1].split("x")[0]: c["source"] for c in choices if c["op"] == "conv2d"}
    assert by_batch == {"2": "search", "1": "heuristic"}, choices


def residual_cnn(dtype):
    """conv-bn-relu, a residual block, pooling: the ops a channels-last graph runs channels last."""
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)

        def forward(self, x):
            return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + x)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), Block(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).to(dtype)


@pytest.mark.parametrize("dtype", [pf.float64, pf.float32])
def test_channels_last_graph_trains_like_eager(dtype):
    """graph.config.set_memory_format(channels_last): the graph converts its image argument to
    channels last inside (the caller's tensor is untouched) and trains step for step as the
    eager model on the row-major input; its convolutions' outputs are channels last."""
    rng = seeded_rng(seed_plugflow=True)
    eager = residual_cnn(dtype)
    graphed = copy.deepcopy(eager)
    opt_e, opt_g = (pf.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (eager, graphed))
    g = TrainGraph(graphed, opt_g)
    g.config.set_memory_format(pf.channels_last)
    for _ in range(3):
        x = pf.from_numpy(rng.standard_normal((4, 3, 10, 10))).to(dtype)
        y = pf.from_numpy(rng.integers(0, 4, 4))
        opt_e.zero_grad()
        loss_e = F.cross_entropy(eager(x), y)
        loss_e.backward()
        opt_e.step()
        loss_g = g(x, y)
        assert x.is_contiguous()
        assert_close(loss_g, loss_e, dtype)
        for pe, pg in zip(eager.parameters(), graphed.parameters()):
            np.testing.assert_allclose(pg.detach().numpy(), pe.detach().numpy(), **TOL[dtype])


@pytest.mark.parametrize("setting, amp, channels_last", [
    (pf.channels_last, False, True), (pf.contiguous_format, False, False), (None, False, False),
    (pf.channels_last, True, True), (None, True, False)])
def test_graph_memory_format_setting(setting, amp, channels_last):
    """What each setting does to an inference graph's convolution output (None: the config's
    default, the argument's own layout)."""
    m = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU()).eval()
    g = EvalGraph(m)
    if setting is not None:
        g.config.set_memory_format(setting)
    if amp:
        g.config.enable_amp(True, dtype=pf.bfloat16)
    x = pf.randn(2, 3, 7, 7)
    out = g(x)
    assert out.is_contiguous(memory_format=pf.channels_last) == channels_last
    assert out.is_contiguous() != channels_last
    with pf.no_grad(), pf.autocast("cpu", dtype=pf.bfloat16, enabled=amp):
        expected = m(x)
    np.testing.assert_allclose(out.float().numpy(), expected.float().numpy(), rtol=1e-2 if amp else 1e-5,
                               atol=1e-2 if amp else 1e-6)


def test_graph_memory_format_errors(tmp_path):
    with pytest.raises(ValueError, match="set_memory_format"):
        EvalGraph(nn.ReLU()).config.set_memory_format("auto")
    with pytest.raises(pf.ConfigError, match="graph_memory_format.*did you mean 'channels_last'"):
        pf._C.parse_config("optimizations:\n  graph_memory_format: channel_last\n", "inline.yaml")

