"""The norm family against PyTorch: F.batch_norm (training/eval, running-stat updates),
F.layer_norm, F.group_norm, F.instance_norm, F.embedding (padding_idx, scale_grad_by_freq,
max_norm), dropout and its variants, nll_loss/cross_entropy: values and gradients (input, weight,
bias; double backward) on fresh random inputs with odd sizes, size-1 and size-0 edges and
non-contiguous layouts, and PyTorch's exceptions for bad input.

Every test draws a fresh seed (printed, so a failure can be replayed with NORM_TEST_SEED=...)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn.functional as F
from helpers import assert_matches, backward_both, random_pair, seeded_rng

TOL = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-4)}
DTYPES = ["float32", "float64"]
LAYOUTS = ["contiguous", "transposed", "strided"]


@pytest.fixture
def rng():
    return seeded_rng("NORM_TEST_SEED")


def close(actual, expected, dtype="float64"):
    rtol, atol = TOL[dtype]
    if dtype == "float32" and expected.numel():
        # A norm's gradient scales with 1/sigma: a row of few, close values makes large entries
        # whose float32 rounding scales too. Measured against float64 over 300 random layer
        # norms, PyTorch's own float32 input gradient is off by up to 1.5e-4 of the largest
        # entry (plugflow's 5.6e-5; one case seen at 6.4e-4): compare within 1e-3 of it.
        atol = 1e-3 * max(1.0, float(expected.detach().double().abs().nan_to_num(0).max()))
    assert_matches(actual, expected.detach(), rtol=rtol, atol=atol)


def check_grads(rng, yp, yt, dtype, pairs):
    """Backpropagates one random upstream gradient through both outputs; then every (plugflow,
    torch) input pair has the same grad, except absent optional inputs (plugflow side None)."""
    backward_both(rng, yp, yt)
    for p, t in pairs:
        if p is not None:
            close(p.grad, t.grad, dtype)


def optional_pair(rng, present, shape, dtype, grad=True, low=-2.0, high=2.0):
    return random_pair(rng, shape, dtype, grad=grad, low=low, high=high) if present else (None, None)


def raises_like(exc, match, f):
    with pytest.raises(exc, match=match):
        f()


# ---- batch_norm ------------------------------------------------------------------------------------

def random_bn_shape(rng, ndim):
    shape = [int(rng.integers(2, 6)), int(rng.integers(1, 7))]
    shape += [int(rng.integers(1, 6)) for _ in range(ndim - 2)]
    return tuple(shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ndim", [2, 3, 4, 5])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_batch_norm_training(rng, dtype, ndim, layout):
    shape = random_bn_shape(rng, ndim)
    c = shape[1]
    has_w, has_b, has_running = (bool(v) for v in rng.integers(0, 2, size=3))
    momentum = float(rng.uniform(0, 1))
    eps = float(10 ** rng.uniform(-6, -2))
    xp, xt = random_pair(rng, shape, dtype, layout, grad=True, low=-3, high=5)
    wp, wt = optional_pair(rng, has_w, (c,), dtype)
    bp, bt = optional_pair(rng, has_b, (c,), dtype)
    rmp, rmt = optional_pair(rng, has_running, (c,), dtype, grad=False)
    rvp, rvt = optional_pair(rng, has_running, (c,), dtype, grad=False, low=0.5, high=2)
    yp = F.batch_norm(xp, rmp, rvp, wp, bp, True, momentum, eps)
    yt = TF.batch_norm(xt, rmt, rvt, wt, bt, True, momentum, eps)
    close(yp, yt, dtype)
    if has_running:
        close(rmp, rmt, dtype)
        close(rvp, rvt, dtype)
    check_grads(rng, yp, yt, dtype, [(xp, xt), (wp, wt), (bp, bt)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ndim", [2, 4])
def test_batch_norm_eval(rng, dtype, ndim):
    shape = random_bn_shape(rng, ndim)
    c = shape[1]
    xp, xt = random_pair(rng, shape, dtype, "transposed", grad=True)
    wp, wt = random_pair(rng, (c,), dtype, grad=True)
    bp, bt = random_pair(rng, (c,), dtype, grad=True)
    rmp, rmt = random_pair(rng, (c,), dtype)
    rvp, rvt = random_pair(rng, (c,), dtype, low=0.1, high=3)
    yp = F.batch_norm(xp, rmp, rvp, wp, bp, False)
    yt = TF.batch_norm(xt, rmt, rvt, wt, bt, False)
    close(yp, yt, dtype)
    backward_both(rng, yp, yt)
    for a, e in ((xp, xt), (wp, wt), (bp, bt), (rmp, rmt), (rvp, rvt)):
        close(a.grad if a.requires_grad else a, e.grad if e.requires_grad else e, dtype)


def test_batch_norm_running_stats_over_steps(rng):
    c = int(rng.integers(1, 6))
    rmp, rmt = pf.zeros(c), torch.zeros(c)
    rvp, rvt = pf.ones(c), torch.ones(c)
    for step in range(5):
        shape = (int(rng.integers(2, 9)), c, int(rng.integers(1, 5)))
        xp, xt = random_pair(rng, shape, "float32", low=step - 2, high=step + 3)
        momentum = 0.1 if step % 2 else 0.5
        F.batch_norm(xp, rmp, rvp, training=True, momentum=momentum)
        TF.batch_norm(xt, rmt, rvt, training=True, momentum=momentum)
    close(rmp, rmt, "float32")
    close(rvp, rvt, "float32")
    # Eval after training uses the accumulated statistics.
    xp, xt = random_pair(rng, (3, c), "float32")
    close(F.batch_norm(xp, rmp, rvp), TF.batch_norm(xt, rmt, rvt), "float32")


def test_norm_large_offset():
    """Accurate float32 results when the mean is large against the spread (more accurate than
    PyTorch's float32 kernels, which compute x * scale + shift: compare with float64)."""
    rng = np.random.default_rng()
    data = (1000.0 + rng.normal(0, 0.01, size=(64, 3, 17))).astype("float32")
    exact = TF.batch_norm(torch.from_numpy(data).double(), None, None, training=True).float()
    assert_matches(F.batch_norm(pf.from_numpy(data), None, None, training=True), exact, rtol=1e-4, atol=1e-4)
    # (N, C) inputs take another path; layer_norm and group_norm likewise.
    data2 = data.reshape(64 * 3, 17).T.copy()
    exact = TF.batch_norm(torch.from_numpy(data2).double(), None, None, training=True).float()
    assert_matches(F.batch_norm(pf.from_numpy(data2), None, None, training=True), exact, rtol=1e-4, atol=1e-4)
    exact = TF.layer_norm(torch.from_numpy(data).double(), (17,)).float()
    assert_matches(F.layer_norm(pf.from_numpy(data), (17,)), exact, rtol=1e-4, atol=1e-4)
    exact = TF.group_norm(torch.from_numpy(data).double(), 3).float()
    assert_matches(F.group_norm(pf.from_numpy(data), 3), exact, rtol=1e-4, atol=1e-4)


def test_batch_norm_edges(rng):
    # Empty batches give empty outputs and leave the running statistics alone.
    for shape in ((0, 3), (2, 3, 0)):
        rm, rv = pf.zeros(3), pf.ones(3)
        x = pf.zeros(shape, requires_grad=True)
        y = F.batch_norm(x, rm, rv, training=True)
        assert tuple(y.shape) == shape
        assert rm.tolist() == [0, 0, 0] and rv.tolist() == [1, 1, 1]
        y.sum().backward()
        assert tuple(x.grad.shape) == shape
    # A constant channel: variance 0, output = bias.
    x = pf.ones((4, 2, 3))
    b = pf.from_numpy(rng.uniform(-1, 1, size=2))
    y = F.batch_norm(x.double(), None, None, None, b, training=True)
    assert np.allclose(y.numpy(), np.broadcast_to(b.numpy()[None, :, None], (4, 2, 3)))
    # Two values per channel is enough.
    xp, xt = random_pair(rng, (2, 3), grad=True)
    close(F.batch_norm(xp, None, None, training=True), TF.batch_norm(xt, None, None, training=True))


def test_batch_norm_errors():
    x = pf.randn(1, 3)
    raises_like(ValueError, r"Expected more than 1 value per channel when training, got input size",
                lambda: F.batch_norm(x, pf.zeros(3), pf.ones(3), training=True))
    raises_like(ValueError, r"Expected more than 1 value per channel",
                lambda: F.batch_norm(pf.randn(1, 3, 1), None, None, training=True))
    raises_like(RuntimeError, r"running_mean must be defined in evaluation mode",
                lambda: F.batch_norm(pf.randn(2, 3), None, None))
    raises_like(RuntimeError, r"running_mean should contain 4 elements not 3",
                lambda: F.batch_norm(pf.randn(2, 4), pf.zeros(3), pf.ones(3), training=True))
    raises_like(RuntimeError, r"weight should contain 3 elements not 4",
                lambda: F.batch_norm(pf.randn(2, 3), pf.zeros(3), pf.ones(3), pf.ones(4)))
    raises_like(RuntimeError, r"not implemented for 'Long'",
                lambda: F.batch_norm(pf.ones((2, 3), dtype=pf.int64), None, None, training=True))
    raises_like(RuntimeError, r"mixed dtype \(CPU\): expect parameter to have scalar type of Float",
                lambda: F.batch_norm(pf.randn(2, 3), None, None, pf.ones(3, dtype=pf.float64), training=True))
    raises_like(RuntimeError, r"mixed dtype \(CPU\): expect input to have scalar type of BFloat16",
                lambda: F.batch_norm(pf.randn(2, 3, dtype=pf.float64), None, None, pf.ones(3), training=True))
    raises_like(TypeError, r"momentum",
                lambda: F.batch_norm(pf.randn(2, 3), pf.zeros(3), pf.ones(3), training=True, momentum=None))


# ---- layer_norm ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rep", range(3))
def test_layer_norm(rng, dtype, layout, rep):
    ndim = int(rng.integers(1, 5))
    shape = tuple(int(s) for s in rng.integers(1, 7, size=ndim))
    k = int(rng.integers(1, ndim + 1))
    normalized = shape[ndim - k:]
    has_w, has_b = (bool(v) for v in rng.integers(0, 2, size=2))
    eps = float(10 ** rng.uniform(-6, -2))
    xp, xt = random_pair(rng, shape, dtype, layout, grad=True)
    wp, wt = optional_pair(rng, has_w, normalized, dtype)
    bp, bt = optional_pair(rng, has_b, normalized, dtype)
    yp = F.layer_norm(xp, normalized, wp, bp, eps)
    yt = TF.layer_norm(xt, normalized, wt, bt, eps)
    close(yp, yt, dtype)
    check_grads(rng, yp, yt, dtype, [(xp, xt), (wp, wt), (bp, bt)])


def test_layer_norm_wide_rows(rng):
    """Long rows (vectorized paths, several row slices across threads)."""
    xp, xt = random_pair(rng, (37, 1031), "float32", grad=True)
    wp, wt = random_pair(rng, (1031,), "float32", grad=True)
    bp, bt = random_pair(rng, (1031,), "float32", grad=True)
    yp, yt = F.layer_norm(xp, (1031,), wp, bp), TF.layer_norm(xt, (1031,), wt, bt)
    close(yp, yt, "float32")
    backward_both(rng, yp, yt)
    for a, e in ((xp, xt), (wp, wt), (bp, bt)):
        assert_matches(a.grad, e.grad, rtol=1e-4, atol=1e-3)


def test_layer_norm_edges(rng):
    # Size-1 normalized dim: variance 0, the output is the bias.
    xp, xt = random_pair(rng, (4, 1), grad=True)
    bp, bt = random_pair(rng, (1,), grad=True)
    yp, yt = F.layer_norm(xp, (1,), None, bp), TF.layer_norm(xt, (1,), None, bt)
    close(yp, yt)
    backward_both(rng, yp, yt)
    close(xp.grad, xt.grad)
    close(bp.grad, bt.grad)
    # Empty inputs.
    x = pf.zeros((0, 3), requires_grad=True)
    w = pf.ones(3, requires_grad=True)
    y = F.layer_norm(x, (3,), w)
    assert tuple(y.shape) == (0, 3)
    y.sum().backward()
    assert w.grad.tolist() == [0, 0, 0]
    assert tuple(F.layer_norm(pf.zeros((2, 0)), (0,)).shape) == (2, 0)
    # torch.Size / list normalized_shape.
    xp, xt = random_pair(rng, (2, 3, 4))
    close(F.layer_norm(xp, xp.shape[1:]), TF.layer_norm(xt, xt.shape[1:]))
    close(F.layer_norm(xp, [4]), TF.layer_norm(xt, [4]))


def test_layer_norm_errors():
    raises_like(RuntimeError, r"Given normalized_shape=\[4\], expected input with shape \[\*, 4\], but got input of "
                              r"size\[2, 3\]", lambda: F.layer_norm(pf.randn(2, 3), (4,)))
    raises_like(RuntimeError, r"Expected weight to be of same shape as normalized_shape, but got weight of shape \[4\]",
                lambda: F.layer_norm(pf.randn(2, 3), (3,), pf.ones(4)))
    raises_like(TypeError, r"must be tuple of ints, not int", lambda: F.layer_norm(pf.randn(2, 3), 3))
    raises_like(RuntimeError, r"\"LayerNormKernelImpl\" not implemented for 'Long'",
                lambda: F.layer_norm(pf.ones((2, 3), dtype=pf.int64), (3,)))
    raises_like(RuntimeError, r"expected scalar type Float but found Double",
                lambda: F.layer_norm(pf.randn(2, 3), (3,), pf.ones(3, dtype=pf.float64)))


# ---- group_norm ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rep", range(3))
def test_group_norm(rng, dtype, layout, rep):
    groups = int(rng.integers(1, 4))
    c = groups * int(rng.integers(1, 4))
    shape = (int(rng.integers(1, 5)), c) + tuple(int(s) for s in rng.integers(2, 6, size=rng.integers(0, 3)))
    if shape[0] * (c // groups) * int(np.prod(shape[2:])) == 1:
        shape = (2,) + shape[1:]
    has_w, has_b = (bool(v) for v in rng.integers(0, 2, size=2))
    eps = float(10 ** rng.uniform(-6, -2))
    xp, xt = random_pair(rng, shape, dtype, layout, grad=True)
    wp, wt = optional_pair(rng, has_w, (c,), dtype)
    bp, bt = optional_pair(rng, has_b, (c,), dtype)
    yp = F.group_norm(xp, groups, wp, bp, eps)
    if has_b and not has_w:  # PyTorch 1.13's backward fails for a bias without weight; ones is the same
        wt = torch.ones(c, dtype=xt.dtype)
    yt = TF.group_norm(xt, groups, wt, bt, eps)
    close(yp, yt, dtype)
    check_grads(rng, yp, yt, dtype, [(xp, xt), (wp, wt), (bp, bt)])


def test_group_norm_errors():
    raises_like(RuntimeError, r"Expected number of channels in input to be divisible by num_groups, but got input of "
                              r"shape \[2, 6, 3\] and num_groups=4", lambda: F.group_norm(pf.randn(2, 6, 3), 4))
    raises_like(RuntimeError, r"Expected weight to be a vector of size equal to the number of channels in input, but "
                              r"got weight of shape \[5\]", lambda: F.group_norm(pf.randn(2, 6, 3), 3, pf.ones(5)))
    raises_like(IndexError, r"out of range", lambda: F.group_norm(pf.randn(6), 3))
    raises_like(ZeroDivisionError, r"", lambda: F.group_norm(pf.randn(2, 6, 2), 0))
    raises_like(ValueError, r"Expected more than 1 value per channel", lambda: F.group_norm(pf.randn(1, 3), 3))
    raises_like(RuntimeError, r"\"GroupNormKernelImpl\" not implemented for 'Long'",
                lambda: F.group_norm(pf.ones((2, 4), dtype=pf.int64), 2))
    assert tuple(F.group_norm(pf.zeros((0, 6, 2)), 3).shape) == (0, 6, 2)


# ---- instance_norm ------------------------------------------------------------------------------------------

def test_instance_norm(rng):
    n, c = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    xp, xt = random_pair(rng, (n, c, 5, 3), grad=True)
    wp, wt = random_pair(rng, (c,), grad=True)
    rmp, rmt = random_pair(rng, (c,))
    rvp, rvt = random_pair(rng, (c,), low=0.5, high=2)
    yp = F.instance_norm(xp, rmp, rvp, wp, None, True, 0.3)
    yt = TF.instance_norm(xt, rmt, rvt, wt, None, True, 0.3)
    close(yp, yt)
    close(rmp, rmt)
    close(rvp, rvt)
    backward_both(rng, yp, yt)
    close(xp.grad, xt.grad)
    close(wp.grad, wt.grad)


# ---- double backward -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["batch_norm", "layer_norm", "group_norm"])
def test_double_backward(rng, which):
    """grad(x) with create_graph, then the gradient of <grad(x), v> against x, weight and bias."""
    shape = (3, 4, 5)
    c = 4
    xp, xt = random_pair(rng, shape, grad=True)
    wshape = (5,) if which == "layer_norm" else (c,)
    wp, wt = random_pair(rng, wshape, grad=True)
    bp, bt = random_pair(rng, wshape, grad=True)

    def run(lib, fn, x, w, b):
        if which == "batch_norm":
            return fn.batch_norm(x, None, None, w, b, training=True)
        if which == "layer_norm":
            return fn.layer_norm(x, (5,), w, b)
        return fn.group_norm(x, 2, w, b)

    g = rng.uniform(-1, 1, size=shape)
    v = rng.uniform(-1, 1, size=shape)
    yt = run(torch, TF, xt, wt, bt)
    (gxt,) = torch.autograd.grad(yt, xt, torch.from_numpy(g), create_graph=True)
    (gxt * torch.from_numpy(v)).sum().backward()
    yp = run(pf, F, xp, wp, bp)
    (gxp,) = pf.autograd.grad(yp, xp, pf.from_numpy(g.copy()), create_graph=True)
    close(gxp, gxt)
    (gxp * pf.from_numpy(v.copy())).sum().backward()
    close(xp.grad, xt.grad)
    close(wp.grad, wt.grad)


# ---- embedding ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rep", range(3))
def test_embedding(rng, dtype, rep):
    v, d = int(rng.integers(1, 9)), int(rng.integers(1, 7))
    idx_shape = tuple(int(s) for s in rng.integers(1, 5, size=rng.integers(0, 3)))
    idx = rng.integers(0, v, size=idx_shape)
    padding_idx = None if rng.integers(0, 2) else int(rng.integers(-v, v))
    by_freq = bool(rng.integers(0, 2))
    layout = ["contiguous", "transposed"][int(rng.integers(0, 2))]
    wp, wt = random_pair(rng, (v, d), dtype, layout, grad=True)
    index_dtype = ["int64", "int32"][int(rng.integers(0, 2))]
    ip, it = pf.from_numpy(idx.astype(index_dtype)), torch.from_numpy(idx.astype(index_dtype))
    yp = F.embedding(ip, wp, padding_idx, scale_grad_by_freq=by_freq)
    yt = TF.embedding(it, wt, padding_idx, scale_grad_by_freq=by_freq)
    close(yp, yt, dtype)
    backward_both(rng, yp, yt)
    close(wp.grad, wt.grad, dtype)


def test_embedding_many_duplicates(rng):
    """Many rows hitting a few entries: every contribution accumulates (threads split rows)."""
    v, d = 50, 16
    idx = rng.integers(0, v, size=(4000,))
    wp, wt = random_pair(rng, (v, d), "float64", grad=True)
    yp, yt = F.embedding(pf.from_numpy(idx), wp, 3), TF.embedding(torch.from_numpy(idx), wt, 3)
    backward_both(rng, yp, yt)
    close(wp.grad, wt.grad)
    assert not wp.grad[3].any().item()


def test_embedding_max_norm(rng):
    v, d = 6, 4
    idx = rng.integers(0, v, size=(3, 2))
    wp, wt = random_pair(rng, (v, d), low=-3, high=3)
    wp.requires_grad_()
    wt.requires_grad_()
    max_norm = float(rng.uniform(0.5, 2))
    norm_type = float(rng.choice([1.0, 2.0, 3.5]))
    yp = F.embedding(pf.from_numpy(idx), wp, max_norm=max_norm, norm_type=norm_type)
    yt = TF.embedding(torch.from_numpy(idx), wt, max_norm=max_norm, norm_type=norm_type)
    close(yp, yt)
    close(wp, wt)  # renormalized in place
    backward_both(rng, yp, yt)
    close(wp.grad, wt.grad)


def test_embedding_errors():
    w = pf.randn(5, 3)
    with pytest.raises(IndexError, match=r"index out of range in self") as info:
        F.embedding(pf.tensor([0, 7]), w)
    assert "7" in str(info.value) and "5" in str(info.value)
    raises_like(IndexError, r"index out of range in self.*-1", lambda: F.embedding(pf.tensor([0, -1]), w))
    raises_like(RuntimeError, r"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                              r"Long, Int", lambda: F.embedding(pf.tensor([0.0, 1.0]), w))
    raises_like(AssertionError, r"Padding_idx must be within num_embeddings",
                lambda: F.embedding(pf.tensor([0]), w, padding_idx=5))
    raises_like(AssertionError, r"Padding_idx must be within num_embeddings",
                lambda: F.embedding(pf.tensor([0]), w, padding_idx=-6))
    raises_like(RuntimeError, r"'weight' must be 2-D", lambda: F.embedding(pf.tensor([0]), pf.randn(5)))
    raises_like(NotImplementedError, r"sparse", lambda: F.embedding(pf.tensor([0]), w, sparse=True))
    # Edges: no indices, a 0-d index.
    assert tuple(F.embedding(pf.tensor([], dtype=pf.int64), w).shape) == (0, 3)
    assert tuple(F.embedding(pf.tensor(2), w).shape) == (3,)


# ---- dropout ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_statistics_and_gradient(rng, dtype, p):
    shape = (101, 203)
    xp, _ = random_pair(rng, shape, dtype, "strided", grad=True, low=0.5, high=2)
    yp = F.dropout(xp, p)
    x, y = xp.detach().numpy(), yp.detach().numpy()
    kept = y != 0
    # Kept elements are scaled exactly like PyTorch's input * (1 / (1 - p)) in the input's dtype.
    scale = np.array(1 / (1 - p), dtype=dtype)
    assert np.array_equal(y[kept], x[kept] * scale)
    n = kept.size
    assert abs(kept.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n)
    g = rng.uniform(-1, 1, size=shape).astype(dtype)
    yp.backward(pf.from_numpy(g))
    assert np.array_equal(xp.grad.numpy(), g * kept * scale)


def test_dropout_edges(rng):
    x = pf.randn(4, 5, requires_grad=True)
    assert F.dropout(x, 0.0) is x
    assert F.dropout(x, 0.7, training=False) is x
    y = F.dropout(x, 1.0)
    assert not y.any().item()
    y.sum().backward()
    assert not x.grad.any().item()
    e = pf.zeros((0, 3))
    assert F.dropout(e, 0.5) is e
    for bad in (1.5, -0.1, 2):
        raises_like(ValueError, rf"dropout probability has to be between 0 and 1, but got {bad}",
                    lambda: F.dropout(x, bad))
        raises_like(ValueError, r"dropout probability", lambda: F.dropout2d(pf.randn(2, 3, 4, 4), bad))
        raises_like(ValueError, r"dropout probability", lambda: F.alpha_dropout(x, bad))
    raises_like(RuntimeError, r"not implemented for 'Long'", lambda: F.dropout(pf.ones(3, dtype=pf.int64), 0.5))


def philox4x32_10(seed, counters):
    """Philox4x32-10 (Salmon et al.) in numpy, one row of four 32-bit words per counter: the
    reference for the stream plugflow's random kernels document (core/include/plugflow/philox.h)."""
    m = np.uint64(0xFFFFFFFF)
    c = np.asarray(counters, dtype=np.uint64)
    c0, c1 = c & m, c >> np.uint64(32)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & m, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & m
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m, (k1 + np.uint64(0xBB67AE85)) & m
    return np.stack([c0, c1, c2, c3], axis=1).astype(np.uint32)


@pytest.mark.parametrize("numel", [1, 5, 63, 64, 65, 1003, 70001])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_draws_the_documented_philox_stream(numel, p):
    """Element i is kept when word i % 4 of Philox(seed, offset + i // 4), top 24 bits, is below
    ceil((1 - p) 2^24): the CPU kernel's vectorized generator gives the scalar stream bit for bit
    (and so the CUDA kernel's), whatever the size and the thread split."""
    pf.manual_seed(20261202)
    state = pf.get_rng_state().numpy().tobytes()
    seed, offset = int.from_bytes(state[8:16], "little"), int.from_bytes(state[16:24], "little")
    y = F.dropout(pf.ones(numel), p)
    i = np.arange(numel)
    words = philox4x32_10(seed, offset + i // 4)[i, i % 4]
    threshold = int(np.ceil((1 - p) * 2 ** 24))
    kept = (words >> 8) < threshold
    np.testing.assert_array_equal(y.numpy() != 0, kept)


@pytest.mark.parametrize("numel", [1, 15, 16, 17, 1003])
def test_random_kernels_draw_the_documented_philox_stream(numel):
    """rand, randint and randn: element i from counter offset + i (plugflow/philox.h's
    transforms), the CPU kernels' 16-counter vector Philox included."""
    def state():
        b = pf.get_rng_state().numpy().tobytes()
        return int.from_bytes(b[8:16], "little"), int.from_bytes(b[16:24], "little")
    pf.manual_seed(7)
    seed, offset = state()
    w = philox4x32_10(seed, offset + np.arange(numel))
    np.testing.assert_array_equal(pf.rand(numel).numpy(), (w[:, 0] >> 8).astype(np.float32) / np.float32(2 ** 24))
    seed, offset = state()
    w = philox4x32_10(seed, offset + np.arange(numel)).astype(np.uint64)
    bits = ((w[:, 0] << np.uint64(53 - 32)) ^ (w[:, 1] >> np.uint64(11))) & np.uint64(2 ** 53 - 1)
    np.testing.assert_array_equal(pf.rand(numel, dtype=pf.float64).numpy(), bits.astype(np.float64) / 2.0 ** 53)
    seed, offset = state()
    w = philox4x32_10(seed, offset + np.arange(numel)).astype(np.uint64)
    np.testing.assert_array_equal(pf.randint(-5, 1000, (numel,)).numpy(),
                                  (-5 + ((w[:, 0] << np.uint64(32)) | w[:, 1]) % np.uint64(1005)).astype(np.int64))
    seed, offset = state()
    w = philox4x32_10(seed, offset + np.arange(numel)).astype(np.float64)
    z = np.sqrt(-2 * np.log((w[:, 0] + 1) / 2.0 ** 32)) * np.cos(6.283185307179586 * (w[:, 1] / 2.0 ** 32))
    np.testing.assert_allclose(pf.randn(numel, dtype=pf.float64).numpy(), z, rtol=1e-14, atol=1e-14)


def test_dropout_seeding_and_inplace(rng):
    data = rng.uniform(1, 2, size=(7, 9)).astype("float32")
    pf.manual_seed(1234)
    a = F.dropout(pf.from_numpy(data.copy()), 0.4)
    b = F.dropout(pf.from_numpy(data.copy()), 0.4)
    pf.manual_seed(1234)
    c = F.dropout(pf.from_numpy(data.copy()), 0.4)
    assert np.array_equal(a.numpy(), c.numpy())
    assert not np.array_equal(a.numpy(), b.numpy())
    # In place: same object, same values as the out-of-place call from the same state.
    pf.manual_seed(99)
    t = pf.from_numpy(data.copy())
    r = F.dropout(t, 0.4, inplace=True)
    assert r is t
    pf.manual_seed(99)
    assert np.array_equal(t.numpy(), F.dropout(pf.from_numpy(data.copy()), 0.4).numpy())
    # In place on a non-leaf keeps the gradient right.
    x = pf.from_numpy(data.copy()).requires_grad_()
    y = x * 1
    F.dropout(y, 0.4, inplace=True)
    y.sum().backward()
    kept = y.detach().numpy() != 0
    assert np.allclose(x.grad.numpy(), kept / 0.6)


def test_feature_dropout(rng):
    shape = (6, 40, 3, 2)
    x = pf.from_numpy(rng.uniform(1, 2, size=shape)).requires_grad_()
    y = F.dropout2d(x, 0.5)
    yn = y.detach().numpy()
    per_channel = (yn != 0).reshape(6, 40, -1)
    assert (per_channel.all(axis=2) | ~per_channel.any(axis=2)).all()  # whole channels
    assert 0.2 < per_channel[:, :, 0].mean() < 0.8
    y.sum().backward()
    assert np.allclose(x.grad.numpy(), (yn != 0) * 2.0)
    # dropout1d on a (C, L) input and dropout3d on a (C, D, H, W) input drop along C.
    y1 = F.dropout1d(pf.ones((50, 4)), 0.5).numpy()
    assert ((y1 == 0).all(axis=1) | (y1 == 2).all(axis=1)).all()
    y3 = F.dropout3d(pf.ones((30, 2, 2, 2)), 0.5).numpy().reshape(30, -1)
    assert ((y3 == 0).all(axis=1) | (y3 == 2).all(axis=1)).all()
    t = pf.ones((3, 30, 4))
    assert F.dropout1d(t, 0.5, inplace=True) is t
    raises_like(RuntimeError, r"dropout1d: Expected 2D or 3D input, but received a 4D input",
                lambda: F.dropout1d(pf.randn(2, 3, 4, 5), 0.5))
    with pytest.warns(UserWarning, match="dropout2d: Received a 2-D input"):
        F.dropout2d(pf.randn(2, 3), 0.5)


def test_alpha_dropout(rng):
    x = pf.from_numpy(rng.normal(0, 1, size=(200, 500)))
    y = F.alpha_dropout(x, 0.3, training=True).numpy()
    assert abs(y.mean()) < 0.03 and abs(y.std() - 1) < 0.03
    alpha = 1.7580993408473766
    a = 1 / np.sqrt((alpha ** 2 * 0.3 + 1) * 0.7)
    dropped = np.isclose(y, -alpha * a + alpha * a * 0.3)
    assert abs(dropped.mean() - 0.3) < 0.01
    assert F.alpha_dropout(x, 0.3) is x  # training=False by default
    f = F.feature_alpha_dropout(pf.from_numpy(rng.normal(0, 1, size=(8, 50, 6))), 0.5, training=True).numpy()
    const = np.ptp(f, axis=2) == 0
    assert 0.2 < const.mean() < 0.8  # dropped channels are constant
    xg = pf.from_numpy(rng.normal(0, 1, size=(5, 7))).requires_grad_()
    yg = F.alpha_dropout(xg, 0.5, training=True)
    yg.sum().backward()
    a = 1 / np.sqrt((alpha ** 2 * 0.5 + 1) * 0.5)
    g = xg.grad.numpy()
    assert (np.isclose(g, 0) | np.isclose(g, a)).all()
    assert np.isclose(g, a).any() and np.isclose(g, 0).any()


# ---- losses -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("rep", range(2))
def test_cross_entropy_and_nll(rng, reduction, rep):
    n, c = int(rng.integers(1, 6)), int(rng.integers(2, 6))
    extra = tuple(int(s) for s in rng.integers(1, 4, size=rng.integers(0, 2)))
    xp, xt = random_pair(rng, (n, c) + extra, grad=True)
    target = rng.integers(0, c, size=(n,) + extra)
    ignore = int(rng.integers(0, c)) if rng.integers(0, 2) else -100
    target.flat[0] = 0 if ignore != 0 else 1  # at least one target used
    wp, wt = optional_pair(rng, bool(rng.integers(0, 2)), (c,), "float64", grad=False, low=0.1, high=2)
    smoothing = float(rng.choice([0.0, 0.25]))
    tp, tt = pf.from_numpy(target), torch.from_numpy(target)
    yp = F.cross_entropy(xp, tp, wp, ignore_index=ignore, reduction=reduction, label_smoothing=smoothing)
    yt = TF.cross_entropy(xt, tt, wt, ignore_index=ignore, reduction=reduction, label_smoothing=smoothing)
    close(yp, yt)
    backward_both(rng, yp, yt)
    close(xp.grad, xt.grad)
    lp, lt = random_pair(rng, (n, c) + extra, grad=True)
    close(F.nll_loss(lp, tp, wp, ignore_index=ignore, reduction=reduction),
          TF.nll_loss(lt, tt, wt, ignore_index=ignore, reduction=reduction))
    # Class-probability targets.
    probs = rng.dirichlet(np.ones(c), size=(n,) + extra)
    probs = np.moveaxis(probs, -1, 1).copy()
    xp2, xt2 = random_pair(rng, (n, c) + extra, grad=True)
    yp = F.cross_entropy(xp2, pf.from_numpy(probs), wp, reduction=reduction, label_smoothing=smoothing)
    yt = TF.cross_entropy(xt2, torch.from_numpy(probs), wt, reduction=reduction, label_smoothing=smoothing)
    close(yp, yt)
    backward_both(rng, yp, yt)
    close(xp2.grad, xt2.grad)


def test_loss_errors():
    x = pf.randn(3, 4)
    raises_like(ValueError, r"Expected input batch_size \(3\) to match target batch_size \(2\)",
                lambda: F.nll_loss(x, pf.tensor([1, 2])))
    raises_like(IndexError, r"Target 4 is out of bounds", lambda: F.cross_entropy(x, pf.tensor([1, 2, 4])))
    raises_like(RuntimeError, r"Expected target size \[3, 5\], got \[3\]",
                lambda: F.nll_loss(pf.randn(3, 4, 5), pf.tensor([1, 2, 3])))
    raises_like(RuntimeError, r"expected scalar type Long but found Int",
                lambda: F.nll_loss(x, pf.tensor([1, 2, 3], dtype=pf.int32)))
    raises_like(ValueError, r"foo is not a valid value for reduction",
                lambda: F.nll_loss(x, pf.tensor([1, 2, 3]), reduction="foo"))
    raises_like(RuntimeError, r"weight tensor should be defined either for all 4 classes or no classes",
                lambda: F.cross_entropy(x, pf.tensor([1, 2, 3]), weight=pf.ones(3)))
    raises_like(RuntimeError, r"label_smoothing must be between 0.0 and 1.0",
                lambda: F.cross_entropy(x, pf.tensor([1, 2, 3]), label_smoothing=1.5))
    # Unbatched (C) input with a 0-d target; everything ignored gives nan for "mean".
    xp, xt = random_pair(np.random.default_rng(), (4,), grad=True)
    close(F.cross_entropy(xp, pf.tensor(2)), TF.cross_entropy(xt, torch.tensor(2)))
    assert np.isnan(F.nll_loss(x, pf.tensor([-100, -100, -100])).item())


def test_inplace_op_on_results(rng):
    """An in-place op on a result keeps the gradient flowing to the inputs (results are plain
    tensors, not views of a kernel output)."""
    xp, xt = random_pair(rng, (3, 4, 5), grad=True)
    wp, wt = random_pair(rng, (6, 5), grad=True)
    ip, it = pf.tensor([[0, 5], [2, 2]]), torch.tensor([[0, 5], [2, 2]])
    outs_p = [F.batch_norm(xp, None, None, training=True), F.layer_norm(xp, (5,)), F.group_norm(xp, 2),
              F.embedding(ip, wp)]
    outs_t = [TF.batch_norm(xt, None, None, training=True), TF.layer_norm(xt, (5,)), TF.group_norm(xt, 2),
              TF.embedding(it, wt)]
    for yp, yt in zip(outs_p, outs_t):
        F.relu(yp, inplace=True)
        TF.relu(yt, inplace=True)
        backward_both(rng, yp, yt)
    close(xp.grad, xt.grad)
    close(wp.grad, wt.grad)


@pytest.mark.parametrize("which", ["batch_norm_eval", "embedding", "dropout"])
def test_double_backward_other(rng, which):
    """Gradients that depend on the incoming gradient only (linear backward) under create_graph."""
    if which == "batch_norm_eval":
        xp, xt = random_pair(rng, (4, 3, 2), grad=True)
        wp, wt = random_pair(rng, (3,), grad=True)
        rm, rv = rng.uniform(-1, 1, size=3), rng.uniform(0.5, 2, size=3)
        yp = F.batch_norm(xp, pf.from_numpy(rm), pf.from_numpy(rv), wp)
        yt = TF.batch_norm(xt, torch.from_numpy(rm), torch.from_numpy(rv), wt)
        inputs_p, inputs_t = (xp, wp), (xt, wt)
    elif which == "embedding":
        wp, wt = random_pair(rng, (5, 3), grad=True)
        idx = rng.integers(0, 5, size=(4,))
        # (Not scale_grad_by_freq: PyTorch's double backward ignores it, plugflow's does not.)
        yp = F.embedding(pf.from_numpy(idx), wp, padding_idx=1) ** 2
        yt = TF.embedding(torch.from_numpy(idx), wt, padding_idx=1) ** 2
        inputs_p, inputs_t = (wp,), (wt,)
    else:
        xp, xt = random_pair(rng, (6, 7), grad=True)
        yp = F.dropout(xp, 0.3)
        mask = torch.from_numpy(yp.detach().numpy() != 0).double() * (1 / 0.7)
        yt = (xt * mask) ** 2
        yp = yp ** 2
        inputs_p, inputs_t = (xp,), (xt,)
    g = rng.uniform(-1, 1, size=tuple(yt.shape))
    gt = torch.from_numpy(g).requires_grad_()
    gp = pf.from_numpy(g.copy()).requires_grad_()
    grads_t = torch.autograd.grad(yt, inputs_t, gt, create_graph=True)
    grads_p = pf.autograd.grad(yp, inputs_p, gp, create_graph=True)
    for a, e in zip(grads_p, grads_t):
        close(a, e)
    sum(((a * a).sum() for a in grads_p)).backward()
    sum(((a * a).sum() for a in grads_t)).backward()
    close(gp.grad, gt.grad)
    for a, e in zip(inputs_p, inputs_t):
        close(a.grad, e.grad)
