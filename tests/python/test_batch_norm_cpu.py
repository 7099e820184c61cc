"""float32 batch norm on the CPU plugin: the kernels that run it, and the module-level behaviour
that test_norm.py does not cover, against PyTorch.

oneDNN 2.6 measured slower than the plugin's own batch_norm / batch_norm_backward kernels on
every shape tried (plugins/cpu/src/norm.cpp has the numbers), so float32 runs those
kernels like float64. These tests cover that path on ResNet-like channel/spatial mixes at small
sizes: BatchNorm1d/2d modules over several steps (momentum None's cumulative average included,
with and without affine and running statistics), train- and eval-mode backward, channels-last
and sliced input views, N=1 with spatial dims, (N, C) inputs (which run the kernels over rows
of channels, as channels-last ones), and eval-mode double backward. Every test draws a new
seed (printed; replay with BN_TEST_SEED=<n>)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn.functional as F
from plugflow import _C
from helpers import assert_matches, from_torch, load_from_torch, seeded_rng

TOL = {"float32": (1e-4, 1e-4), "float64": (1e-9, 1e-9)}


@pytest.fixture
def rng():
    return seeded_rng("BN_TEST_SEED")


def close(actual, expected, dtype):
    rtol, atol = TOL[dtype]
    assert_matches(actual, expected.detach().to(getattr(torch, dtype)), rtol=rtol, atol=atol)


def view_pair(rng, shape, dtype, layout):
    """The same values as a plugflow and a torch tensor (both leaves requiring grad) in a layout:
    contiguous, permuted (channels last: dim 1 last in memory; (N, C) transposed) or sliced (every
    other element of the last dim of a wider buffer)."""
    data = rng.uniform(-3, 5, size=shape)
    if layout == "permuted":
        order = (0, *range(2, len(shape)), 1) if len(shape) > 2 else (1, 0)
        base = np.ascontiguousarray(data.transpose(order))
        back = tuple(int(i) for i in np.argsort(order))
        views = [lib.from_numpy(base.astype(dtype)).permute(*back) for lib in (pf, torch)]
    elif layout == "sliced":
        wide = np.repeat(data, 2, axis=-1)
        views = [lib.from_numpy(wide.astype(dtype))[..., ::2] for lib in (pf, torch)]
    else:
        views = [lib.from_numpy(data.astype(dtype)) for lib in (pf, torch)]
    # A permuted size-1 dim leaves the view contiguous.
    assert layout == "contiguous" or not views[0].is_contiguous() or 1 in shape[2:]
    return [v.detach().requires_grad_() for v in views]


def test_float32_runs_the_plugin_kernels():
    """No Priority::Optimized (oneDNN) batch norm kernel: re-measure before registering one."""
    for op in ("batch_norm", "batch_norm_backward"):
        kinds = {(repr(k.dtype).split(".")[-1], k.priority) for k in _C.registered_kernels()
                 if k.op == op and k.provider == "cpu"}
        assert ("float32", "default") in kinds and ("float64", "default") in kinds, kinds
        assert ("float32", "optimized") not in kinds, kinds
        assert _C.chosen_provider(op, "cpu", pf.float32) == "cpu"


# ResNet-like channel/spatial mixes, scaled down; odd sizes. (N, C, *spatial)
SHAPES = [(4, 9, 13, 11), (3, 64, 7, 5), (2, 33, 29), (1, 5, 6, 7), (1, 3, 17), (6, 300), (5, 513, 1)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["contiguous", "permuted", "sliced"])
def test_train_and_eval_forward_backward(rng, dtype, shape, layout):
    c = shape[1]
    training = shape[0] * int(np.prod(shape[2:])) > 1 and bool(rng.integers(0, 2))
    has_w, has_b, has_running = (bool(v) for v in rng.integers(0, 2, size=3))
    has_running = has_running or not training
    eps = float(10 ** rng.uniform(-6, -2))
    momentum = float(rng.uniform(0, 1))
    xp, xt = view_pair(rng, shape, dtype, layout)
    wt = torch.from_numpy(rng.uniform(-2, 2, size=c).astype(dtype)).requires_grad_() if has_w else None
    bt = torch.from_numpy(rng.uniform(-2, 2, size=c).astype(dtype)).requires_grad_() if has_b else None
    wp = from_torch(wt).requires_grad_() if has_w else None
    bp = from_torch(bt).requires_grad_() if has_b else None
    rmt = torch.from_numpy(rng.uniform(-1, 1, size=c).astype(dtype)) if has_running else None
    rvt = torch.from_numpy(rng.uniform(0.1, 3, size=c).astype(dtype)) if has_running else None
    rmp = from_torch(rmt) if has_running else None
    rvp = from_torch(rvt) if has_running else None
    yp = F.batch_norm(xp, rmp, rvp, wp, bp, training, momentum, eps)
    # The reference in float64: float32 results are compared with the exact values.
    ref = [t.double() if t is not None else None for t in (xt, rmt, rvt, wt, bt)]
    yt = TF.batch_norm(*ref, training, momentum, eps)
    close(yp, yt, dtype)
    if has_running:
        close(rmp, ref[1], dtype)
        close(rvp, ref[2], dtype)
    g = rng.uniform(-1, 1, size=shape)
    yt.backward(torch.from_numpy(g))
    yp.backward(pf.from_numpy(g.astype(dtype)))
    for p, t in ((xp, xt), (wp, wt), (bp, bt)):
        if p is not None:
            close(p.grad, t.grad, dtype)


@pytest.mark.parametrize("module", ["BatchNorm1d", "BatchNorm2d"])
@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("track", [True, False])
def test_module_steps(rng, module, momentum, affine, track):
    """Three training steps (running statistics, num_batches_tracked, gradients), then eval."""
    c = int(rng.integers(2, 9))
    mt = getattr(torch.nn, module)(c, momentum=momentum, affine=affine, track_running_stats=track)
    mp = getattr(pf.nn, module)(c, momentum=momentum, affine=affine, track_running_stats=track)
    if affine:
        with torch.no_grad():
            mt.weight.uniform_(-2, 2)
            mt.bias.uniform_(-2, 2)
    load_from_torch(mp, mt)

    def shape():
        n = int(rng.integers(1, 5))
        spatial = [int(rng.integers(2, 7))] * (2 if module == "BatchNorm2d" else int(rng.integers(0, 2)))
        return (n + (not spatial), c, *spatial)

    for step in range(4):
        training = step < 3
        mt.train(training)
        mp.train(training)
        xp, xt = view_pair(rng, shape(), "float32", "permuted" if step % 2 else "sliced")
        yt, yp = mt(xt), mp(xp)
        assert_matches(yp, yt.detach(), rtol=1e-4, atol=1e-4)
        g = rng.uniform(-1, 1, size=tuple(yt.shape)).astype("float32")
        yt.backward(torch.from_numpy(g))
        yp.backward(pf.from_numpy(g))
        assert_matches(xp.grad, xt.grad, rtol=1e-4, atol=1e-4)
        if affine:
            assert_matches(mp.weight.grad, mt.weight.grad, rtol=1e-4, atol=1e-4)
            assert_matches(mp.bias.grad, mt.bias.grad, rtol=1e-4, atol=1e-4)
            mt.zero_grad()
            mp.zero_grad()
        if track:
            assert_matches(mp.running_mean, mt.running_mean, rtol=1e-5, atol=1e-6)
            assert_matches(mp.running_var, mt.running_var, rtol=1e-5, atol=1e-6)
            assert int(mp.num_batches_tracked.item()) == int(mt.num_batches_tracked)
        else:
            assert mp.running_mean is None and mp.running_var is None


@pytest.mark.parametrize("training", [True, False])
def test_double_backward(rng, training):
    """grad(x) with create_graph, then the gradient of <grad(x), v> against x and weight, in both
    modes (eval: the running statistics are constants)."""
    shape, c = (3, 4, 5, 2), 4
    data = [rng.uniform(-2, 2, size=s) for s in (shape, (c,), (c,), (c,))]
    rv = rng.uniform(0.5, 2, size=c)
    xt, wt, bt = (torch.from_numpy(d).requires_grad_() for d in data[:3])
    xp, wp, bp = (pf.from_numpy(d.copy()).requires_grad_() for d in data[:3])
    g, v = rng.uniform(-1, 1, size=shape), rng.uniform(-1, 1, size=shape)
    yt = TF.batch_norm(xt, torch.from_numpy(data[3]), torch.from_numpy(rv), wt, bt, training)
    yp = F.batch_norm(xp, pf.from_numpy(data[3].copy()), pf.from_numpy(rv.copy()), wp, bp, training)
    (gxt,) = torch.autograd.grad(yt, xt, torch.from_numpy(g), create_graph=True)
    (gxp,) = pf.autograd.grad(yp, xp, pf.from_numpy(g.copy()), create_graph=True)
    close(gxp, gxt, "float64")
    (gxt * torch.from_numpy(v)).sum().backward()
    (gxp * pf.from_numpy(v.copy())).sum().backward()
    close(wp.grad, wt.grad, "float64")
    if training:  # in eval grad(x) does not depend on x: both leave x.grad unset
        close(xp.grad, xt.grad, "float64")
    else:
        assert xp.grad is None and xt.grad is None


@pytest.mark.parametrize("shape", [(3, 2), (2, 3, 5)])
def test_eval_gradient_of_an_infinite_input_is_finite(shape):
    # Found by the fuzzer: eval mode's input gradient is grad * w / sqrt(running_var + eps);
    # the kernel added (x - mean) * 0, NaN for an infinite x.
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    x[0, 1] = np.inf
    mean, var, w = rng.standard_normal(shape[1]), rng.uniform(0.5, 2, shape[1]), rng.standard_normal(shape[1])
    grads = []
    for lib in (torch, pf):
        xt = lib.tensor(x, requires_grad=True)
        lib.nn.functional.batch_norm(xt, lib.tensor(mean), lib.tensor(var), lib.tensor(w), None, False).sum().backward()
        grads.append(xt.grad)
    assert np.isfinite(grads[1].numpy()).all()
    assert_matches(grads[1], grads[0])
