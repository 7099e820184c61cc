"""Pooling and upsampling of channels-last inputs against PyTorch 1.13's CPU kernels.

Their layout rules, which plugflow follows: 2-d max / average / adaptive pooling and nearest /
bilinear upsampling return channels-last results for a channels-last input (max pooling's
indices too, still flat h * W + w positions in each plane); 3-d pooling and bicubic upsampling
return row-major results. Input gradients: max pooling's as PyTorch's (the input's layout in
2-d, row-major in 3-d); average pooling's and upsampling's the input's layout (docs/kernels.md,
"Memory formats": where PyTorch's differ — a 1x1 adaptive average, 3-d average pooling,
upsampling after a row-major upstream gradient — plugflow keeps the input's). Values, indices, strides and gradients (for upstream gradients expanded from sum(),
row-major and channels last) are compared on random geometries with odd sizes (a batch or a
channel of one, 1x1 outputs, ceil_mode, padding, dilation), through oneDNN (float32 images of
4096+ elements) and through the native kernels. Layouts are compared wherever both libraries
read the input's layout alike: an image that is row-major too (one channel, a 1x1 image) is
channels last to PyTorch by the strides of its size-1 dims and row-major to plugflow (see
`ambiguous`; values are compared all the same).

Every test draws a new seed (printed, so a failure can be replayed with SEED=<n>)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn.functional as F
from helpers import from_torch, seeded_rng, tensor_pair, to_torch, window_always_valid

CASES = 8  # random calls per test
TOL = {"bfloat16": 1.6e-2, "float32": 1e-5, "float64": 1e-10}


@pytest.fixture
def rng():
    return seeded_rng("SEED")


def channels_last_pair(data, dtype):
    """numpy data as channels-last plugflow and torch leaves that require grad (bfloat16 made in
    memory order, so that the conversion keeps the layout)."""
    if dtype != "bfloat16":
        return tensor_pair(data.astype(dtype), "channels_last", grad=True)
    mem = torch.from_numpy(np.ascontiguousarray(np.moveaxis(data.astype("float32"), 1, -1))).bfloat16()
    p, t = from_torch(mem).movedim(-1, 1), mem.movedim(-1, 1)
    return p.detach().requires_grad_(), t.detach().requires_grad_()


def random_image(rng, shape, dtype, specials=False):
    """Uniform values, or small integers (ties) a third of the time; with specials, a few NaN and
    -inf (max pooling: NaN wins, a window of -inf gives -inf)."""
    data = rng.integers(-3, 4, size=shape).astype("float64") if rng.random() < 1 / 3 else rng.uniform(-2, 2, size=shape)
    if specials and data.size > 4:
        flat = data.reshape(-1)
        flat[rng.integers(0, flat.size, size=2)] = np.nan
        flat[rng.integers(0, flat.size, size=3)] = -np.inf
    return channels_last_pair(data, dtype)


def random_upstream(rng, shape, dtype, kind):
    """An upstream gradient pair: None for sum() (expanded), else random values row-major or
    channels last."""
    if kind == "sum":
        return None
    data = rng.uniform(-1, 1, size=shape)
    if kind == "channels_last":
        p, t = channels_last_pair(data, dtype)
        return p.detach(), t.detach()
    t = torch.from_numpy(data).to(getattr(torch, dtype))
    return from_torch(t), t


def layout(t):
    """The strides that address memory: those of dims longer than 1."""
    return tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)


def ambiguous(t):
    """Whether a channels-last image is row-major too (one channel, or a 1x1 image). PyTorch
    then guesses its layout from the strides of its size-1 dims (channels last for one made
    channels last); plugflow calls it row-major, so results made from it differ in layout."""
    return t.shape[1] == 1 or all(n == 1 for n in t.shape[2:])


def assert_same(actual, expected, dtype, exact=False, layouts=True):
    """Same layout (unless layouts is False) and values (integers and max pooling's values
    exactly)."""
    if layouts:
        assert layout(actual) == layout(expected), (tuple(expected.shape), actual.stride(), expected.stride())
    if expected.dtype == torch.int64:
        assert torch.equal(to_torch(actual), expected)
        return
    tol = 0 if exact else TOL[dtype]
    torch.testing.assert_close(to_torch(actual).double(), expected.detach().double(), rtol=tol, atol=tol,
                               equal_nan=True)


def check(rng, pf_fn, torch_fn, xp, xt, dtype, exact=False, grad_in_input_layout=False):
    """The call's outputs, then the input gradient for each kind of upstream gradient, equal
    PyTorch's (layouts too, except for an ambiguous image; with grad_in_input_layout the
    gradients' layout is the input's instead of PyTorch's); the leaf's .grad last."""
    layouts = not ambiguous(xt)
    out_p, out_t = pf_fn(xp), torch_fn(xt)
    out_p = out_p if isinstance(out_p, tuple) else (out_p,)
    out_t = out_t if isinstance(out_t, tuple) else (out_t,)
    for a, e in zip(out_p, out_t):
        assert_same(a, e, dtype, exact, layouts)
    for kind in ("sum", "contiguous", "channels_last"):
        g = random_upstream(rng, tuple(out_t[0].shape), dtype, kind)
        if g is None:
            gp = pf.autograd.grad(out_p[0].sum(), xp, retain_graph=True)[0]
            gt = torch.autograd.grad(out_t[0].sum(), xt, retain_graph=True)[0]
        else:
            gp = pf.autograd.grad(out_p[0], xp, g[0], retain_graph=True)[0]
            gt = torch.autograd.grad(out_t[0], xt, g[1], retain_graph=True)[0]
        if grad_in_input_layout and layouts:
            assert layout(gp) == layout(xp), (gp.stride(), xp.stride())
        assert_same(gp, gt, dtype, layouts=layouts and not grad_in_input_layout)
    out_p[0].sum().backward()
    out_t[0].sum().backward()
    assert_same(xp.grad, xt.grad, dtype)


def random_shape(rng, S, large):
    """(N, C, *spatial): small odd sizes (native kernels), or large enough for oneDNN."""
    if large:
        return (int(rng.integers(1, 3)), int(rng.choice([16, 19, 32])), *(int(v) for v in rng.integers(12, 30, size=S)))
    return (int(rng.choice([1, 1, 2, 3])), int(rng.choice([1, 2, 3, 5, 8])),
            *(int(v) for v in rng.integers(1, 12 if S == 2 else 7, size=S)))


def random_pool_call(rng, S, kind):
    """A random max or average pooling call PyTorch accepts whose every window holds an input
    element (PyTorch's index for a window entirely in the padding is arbitrary): (shape, kwargs)."""
    while True:
        k = [int(v) for v in rng.integers(1, 5, size=S)]
        kw = dict(kernel_size=tuple(k), stride=tuple(int(v) for v in rng.integers(1, 4, size=S)),
                  padding=tuple(int(rng.integers(0, v // 2 + 1)) for v in k), ceil_mode=bool(rng.integers(2)))
        if kind == "max":
            kw["dilation"] = tuple(int(v) for v in rng.integers(1, 3, size=S)) if rng.random() < 0.3 else (1,) * S
        else:
            kw["count_include_pad"] = bool(rng.integers(2))
            kw["divisor_override"] = [None, int(rng.integers(1, 10))][int(rng.integers(2))]
        shape = random_shape(rng, S, large=S == 2 and rng.random() < 0.5)
        fn = getattr(TF, f"{kind}_pool{S}d")
        try:
            out = fn(torch.zeros(shape), **kw)
        except RuntimeError:
            continue
        d = kw.get("dilation", (1,) * S)
        if all(window_always_valid(shape[2 + i], out.shape[2 + i], k[i], kw["stride"][i], kw["padding"][i], d[i])
               for i in range(S)):
            return shape, kw


@pytest.mark.parametrize("S, dtype", [(2, "float32"), (2, "float64"), (2, "bfloat16"), (3, "float32"),
                                      (3, "float64")])
def test_max_pool(rng, S, dtype):
    for _ in range(CASES):
        shape, kw = random_pool_call(rng, S, "max")
        xp, xt = random_image(rng, shape, dtype, specials=rng.random() < 0.25)
        name = f"max_pool{S}d"
        check(rng, lambda x: getattr(F, name)(x, return_indices=True, **kw),
              lambda x: getattr(TF, name)(x, return_indices=True, **kw), xp, xt, dtype, exact=True)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_max_pool_infinite_and_nan_windows(rng, dtype):
    """Windows of only -inf (PyTorch's value -inf and index: the window's first tap) and NaN
    (wins, with its index) in the channels-last loop."""
    data = rng.uniform(-2, 2, size=(2, 19, 13, 12))
    data[:, :, :7, :6] = -np.inf
    data[0, 3, 9, 8] = data[1, 18, 0, 11] = np.nan
    for kw in (dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=3, stride=2, dilation=2, ceil_mode=True)):
        xp, xt = channels_last_pair(data, dtype)
        check(rng, lambda x: F.max_pool2d(x, return_indices=True, **kw),
              lambda x: TF.max_pool2d(x, return_indices=True, **kw), xp, xt, dtype, exact=True)


@pytest.mark.parametrize("S, dtype", [(2, "float32"), (2, "float64"), (3, "float32"), (3, "float64")])
def test_avg_pool(rng, S, dtype):
    for _ in range(CASES):
        shape, kw = random_pool_call(rng, S, "avg")
        xp, xt = random_image(rng, shape, dtype)
        name = f"avg_pool{S}d"
        check(rng, lambda x: getattr(F, name)(x, **kw), lambda x: getattr(TF, name)(x, **kw), xp, xt, dtype,
              grad_in_input_layout=True)


@pytest.mark.parametrize("S, dtype", [(2, "float32"), (2, "float64"), (3, "float32"), (3, "float64")])
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_pool(rng, S, dtype, kind):
    for i in range(CASES):
        shape = random_shape(rng, S, large=S == 2 and rng.random() < 0.5)
        # 1x1 (global) outputs, outputs that do and do not divide the input, larger ones
        size = (1,) * S if i % 3 == 0 else tuple(int(rng.integers(1, n + 3)) for n in shape[2:])
        xp, xt = random_image(rng, shape, dtype, specials=kind == "max" and rng.random() < 0.25)
        name = f"adaptive_{kind}_pool{S}d"
        extra = {"return_indices": True} if kind == "max" else {}
        check(rng, lambda x: getattr(F, name)(x, size, **extra), lambda x: getattr(TF, name)(x, size, **extra),
              xp, xt, dtype, exact=kind == "max", grad_in_input_layout=kind == "avg")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_resnet_pools(rng, dtype):
    """The stem's 3x3/2 max pooling and the global average pooling of ResNet, in its two
    spellings (adaptive to 1x1, and a 7x7 window: different gradient layouts in PyTorch)."""
    xp, xt = random_image(rng, (2, 64, 32, 32), dtype)
    check(rng, lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
          lambda x: TF.max_pool2d(x, 3, 2, 1, return_indices=True), xp, xt, dtype, exact=True)
    xp, xt = random_image(rng, (3, 128, 7, 7), dtype)
    check(rng, lambda x: F.adaptive_avg_pool2d(x, 1), lambda x: TF.adaptive_avg_pool2d(x, 1), xp, xt, dtype,
          grad_in_input_layout=True)
    # the (N, C, 1, 1) result has PyTorch's strides exactly (those of a channels-last tensor)
    yp, yt = F.adaptive_avg_pool2d(xp, 1), TF.adaptive_avg_pool2d(xt, 1)
    assert yp.stride() == yt.stride() == (128, 1, 128, 128)
    check(rng, lambda x: F.avg_pool2d(x, 7), lambda x: TF.avg_pool2d(x, 7), xp, xt, dtype, grad_in_input_layout=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_upsample(rng, dtype, mode):
    for i in range(CASES):
        shape = random_shape(rng, 2, large=rng.random() < 0.3)
        if i % 2:
            kw = dict(scale_factor=float(rng.choice([0.5, 1.5, 2.0, 3.0])))
        else:
            kw = dict(size=(int(rng.integers(1, 20)), int(rng.integers(1, 20))))
        if mode != "nearest":
            kw["align_corners"] = bool(rng.integers(2))
        try:
            TF.interpolate(torch.zeros(shape), mode=mode, **kw)
        except RuntimeError:
            continue
        xp, xt = random_image(rng, shape, dtype)
        check(rng, lambda x: F.interpolate(x, mode=mode, **kw), lambda x: TF.interpolate(x, mode=mode, **kw),
              xp, xt, dtype, grad_in_input_layout=True)


@pytest.mark.parametrize("op", ["max", "avg", "adaptive_avg"])
def test_double_backward(rng, op):
    """Second-order gradients through the channels-last backward (max pooling: the scatter's
    gather; average pooling: the forward op again)."""
    fn = {"max": lambda lib, x: lib.nn.functional.max_pool2d(x, 3, 2, 1),
          "avg": lambda lib, x: lib.nn.functional.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
          "adaptive_avg": lambda lib, x: lib.nn.functional.adaptive_avg_pool2d(x, (3, 2))}[op]
    xp, xt = random_image(rng, (2, 5, 9, 7), "float64")
    gp, gt = random_upstream(rng, tuple(fn(torch, xt).shape), "float64", "channels_last")
    gp.requires_grad_()
    gt.requires_grad_()
    first_p = pf.autograd.grad(fn(pf, xp), xp, gp, create_graph=True)[0]
    first_t = torch.autograd.grad(fn(torch, xt), xt, gt, create_graph=True)[0]
    assert_same(first_p, first_t, "float64")
    w = rng.uniform(-1, 1, size=tuple(xt.shape))
    second_p = pf.autograd.grad((first_p * from_torch(torch.from_numpy(w))).sum(), gp)[0]
    second_t = torch.autograd.grad((first_t * torch.from_numpy(w)).sum(), gt)[0]
    # (values only: PyTorch's max-pooling double backward gathers from a row-major copy, where
    # plugflow's gathers in the channels-last order)
    assert_same(second_p.contiguous(), second_t.contiguous(), "float64")


def test_strided_channels_last_views(rng):
    """Channels-last-ordered views that are not dense (a slice along H or C) give PyTorch's
    values and gradients. (PyTorch also makes their results channels last, judging the layout by
    the stride order alone; plugflow's results are row-major for them.)"""
    for _ in range(CASES):
        data = rng.uniform(-2, 2, size=(2, 12, 10, 9))
        bp, bt = channels_last_pair(data, "float32")
        view = [lambda x: x[:, :, ::2], lambda x: x[:, 3:9]][int(rng.integers(2))]
        for fp, ft in [(lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: TF.max_pool2d(x, 3, 2, 1)),
                       (lambda x: F.avg_pool2d(x, 2, ceil_mode=True), lambda x: TF.avg_pool2d(x, 2, ceil_mode=True)),
                       (lambda x: F.adaptive_avg_pool2d(x, (2, 3)), lambda x: TF.adaptive_avg_pool2d(x, (2, 3)))]:
            yp, yt = fp(view(bp)), ft(view(bt))
            torch.testing.assert_close(to_torch(yp), yt.detach(), rtol=1e-6, atol=1e-6)
            gp = pf.autograd.grad(yp.sum(), bp)[0]
            gt = torch.autograd.grad(yt.sum(), bt)[0]
            torch.testing.assert_close(to_torch(gp), gt, rtol=1e-6, atol=1e-6)
