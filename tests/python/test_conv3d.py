"""The 3-d conv family against PyTorch 1.13: conv3d (int/tuple/'same'/'valid' padding, stride,
dilation, groups, bias, unbatched input), conv_transpose3d (output_padding, groups, dilation,
output_size), max/avg/adaptive pooling in 3-d (ceil_mode, count_include_pad, divisor_override,
dilation, indices into the volume), BatchNorm3d and the modules. Values and gradients (input,
weight, bias; double backward) on fresh random inputs in three memory layouts, float32 (oneDNN)
and float64 (vol2col + GEMM), batch size 0, and PyTorch's exceptions for bad input.

Every test draws a new seed (printed, so a failure can be replayed with SEED=<n>)."""

import functools
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn.functional as F
from helpers import assert_matches, backward_both, load_from_torch, random_pair, seeded_rng, to_torch

CASES = range(6)  # random configurations per parametrized test
TOL = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-4)}
LAYOUTS = ["contiguous", "channels_last", "strided"]
pair = functools.partial(random_pair, low=-1.0, high=1.0)


@pytest.fixture
def rng():
    return seeded_rng("SEED")


def close(actual, expected, dtype="float64"):
    rtol, atol = TOL[dtype]
    assert_matches(actual, expected.detach(), rtol=rtol, atol=atol)


def check_grads(pairs, dtype):
    for p, t in pairs:
        close(p.grad, t.grad, dtype)


def ints(rng, low, high, n=3):
    return tuple(int(v) for v in rng.integers(low, high, size=n))


# ---- conv3d ------------------------------------------------------------------------------------

def random_conv3d(rng):
    """A valid random conv3d configuration (the kernel fits the padded input)."""
    while True:
        groups = int(rng.integers(1, 3))
        cin, cout = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 4))
        k, stride, padding, dilation = ints(rng, 1, 4), ints(rng, 1, 3), ints(rng, 0, 3), ints(rng, 1, 3)
        size = ints(rng, 1, 8)
        if all(size[i] + 2 * padding[i] >= dilation[i] * (k[i] - 1) + 1 for i in range(3)):
            return dict(n=int(rng.integers(1, 3)), cin=cin, cout=cout, k=k, size=size,
                        kwargs=dict(stride=stride, padding=padding, dilation=dilation, groups=groups))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv3d_random(rng, case, dtype):
    cfg = random_conv3d(rng)
    xp, xt = pair(rng, (cfg["n"], cfg["cin"]) + cfg["size"], dtype, LAYOUTS[case % 3], grad=True)
    wp, wt = pair(rng, (cfg["cout"], cfg["cin"] // cfg["kwargs"]["groups"]) + cfg["k"], dtype, LAYOUTS[case % 2],
                  grad=True)
    with_bias = case % 3 != 2
    bp, bt = pair(rng, (cfg["cout"],), dtype, grad=True) if with_bias else (None, None)
    out_p = F.conv3d(xp, wp, bp, **cfg["kwargs"])
    out_t = TF.conv3d(xt, wt, bt, **cfg["kwargs"])
    close(out_p, out_t, dtype)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (wp, wt)] + ([(bp, bt)] if with_bias else []), dtype)


@pytest.mark.parametrize("k,dilation", [((3, 3, 3), (1, 1, 1)), ((2, 3, 4), (1, 1, 1)), ((3, 2, 2), (2, 1, 3))])
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv3d_padding_strings(rng, k, dilation, padding):
    xp, xt = pair(rng, (2, 3, 6, 7, 5), grad=True)
    wp, wt = pair(rng, (4, 3) + k, grad=True)
    out_p = F.conv3d(xp, wp, padding=padding, dilation=dilation)
    with warnings.catch_warnings():  # PyTorch warns about the copy an even 'same' padding makes
        warnings.simplefilter("ignore")
        out_t = TF.conv3d(xt, wt, padding=padding, dilation=dilation)
    close(out_p, out_t)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (wp, wt)], "float64")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv3d_pointwise_unbatched_and_batch_zero(rng, dtype):
    """1x1x1 stride-1 convolution (the image is its own column matrix) on dense and non-dense
    input; an unbatched (C, D, H, W) input; a batch of 0 (zero weight gradient)."""
    for layout in LAYOUTS:
        xp, xt = pair(rng, (2, 5, 3, 4, 6), dtype, layout, grad=True)
        wp, wt = pair(rng, (4, 5, 1, 1, 1), dtype, grad=True)
        out_p, out_t = F.conv3d(xp, wp), TF.conv3d(xt, wt)
        close(out_p, out_t, dtype)
        backward_both(rng, out_p, out_t)
        check_grads([(xp, xt), (wp, wt)], dtype)
    xp, xt = pair(rng, (3, 4, 5, 6), dtype, grad=True)
    wp, wt = pair(rng, (2, 3, 2, 3, 2), dtype, grad=True)
    bp, bt = pair(rng, (2,), dtype, grad=True)
    out_p, out_t = F.conv3d(xp, wp, bp, padding=1), TF.conv3d(xt, wt, bt, padding=1)
    assert tuple(out_p.shape) == tuple(out_t.shape)
    close(out_p, out_t, dtype)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (wp, wt), (bp, bt)], dtype)
    xp, xt = pair(rng, (0, 4, 3, 3, 3), dtype, grad=True)
    wp, wt = pair(rng, (6, 2, 2, 2, 2), dtype, grad=True)
    out_p, out_t = F.conv3d(xp, wp, groups=2), TF.conv3d(xt, wt, groups=2)
    assert tuple(out_p.shape) == tuple(out_t.shape) == (0, 6, 2, 2, 2)
    out_p.sum().backward()
    out_t.sum().backward()
    check_grads([(xp, xt), (wp, wt)], dtype)


def test_conv3d_double_backward(rng):
    """The input and weight gradients recorded with create_graph differentiate again (each side
    of the bilinear map is written with the other two)."""
    results = []
    for lib, fn in ((pf, F.conv3d), (torch, TF.conv3d)):
        g = np.random.default_rng(1)
        x = lib.from_numpy(g.uniform(-1, 1, (2, 2, 4, 5, 4))).requires_grad_()
        w = lib.from_numpy(g.uniform(-1, 1, (4, 1, 2, 3, 2))).requires_grad_()
        y = fn(x, w, stride=(1, 2, 1), padding=(0, 1, 0), dilation=(2, 1, 1), groups=2)
        v = lib.from_numpy(g.uniform(-1, 1, tuple(y.shape)))
        gx, gw = (lib.autograd.grad if lib is torch else pf.autograd.grad)((y * v).sum(), (x, w), create_graph=True)
        second = (gx * gx).sum() + (gw ** 3).sum()
        second.backward()
        results.append((gx, gw, x.grad, w.grad))
    for p, t in zip(*results):
        close(p, t)


# ---- conv_transpose3d ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv_transpose3d_random(rng, case, dtype):
    groups = int(rng.integers(1, 3))
    cin, cout = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
    k, stride, dilation = ints(rng, 1, 4), ints(rng, 1, 3), ints(rng, 1, 3)
    padding = tuple(int(rng.integers(0, (dilation[i] * (k[i] - 1)) // 2 + 1)) for i in range(3))
    output_padding = tuple(int(rng.integers(0, max(stride[i], dilation[i]))) for i in range(3))
    xp, xt = pair(rng, (int(rng.integers(1, 3)), cin) + ints(rng, 1, 5), dtype, LAYOUTS[case % 3], grad=True)
    wp, wt = pair(rng, (cin, cout // groups) + k, dtype, grad=True)
    bp, bt = pair(rng, (cout,), dtype, grad=True)
    kwargs = dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups, dilation=dilation)
    out_p, out_t = F.conv_transpose3d(xp, wp, bp, **kwargs), TF.conv_transpose3d(xt, wt, bt, **kwargs)
    close(out_p, out_t, dtype)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (wp, wt), (bp, bt)], dtype)


def test_conv3d_modules(rng):
    """Conv3d (padding modes, 'same'), ConvTranspose3d (output_size) with torch's weights."""
    for kwargs in (dict(kernel_size=3, padding=1, padding_mode="zeros"), dict(kernel_size=(2, 3, 1), padding="same"),
                   dict(kernel_size=3, padding=(1, 2, 1), padding_mode="reflect", stride=2),
                   dict(kernel_size=2, padding=1, padding_mode="circular", groups=2, bias=False),
                   dict(kernel_size=3, padding=1, padding_mode="replicate", dilation=(1, 2, 1))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyTorch's warning about an even 'same' padding
            mt = torch.nn.Conv3d(4, 6, **kwargs).double()
        mp = pf.nn.Conv3d(4, 6, **kwargs).double()
        load_from_torch(mp, mt)
        assert repr(mp) == repr(mt)
        xp, xt = pair(rng, (2, 4, 5, 6, 7), grad=True)
        out_p, out_t = mp(xp), mt(xt)
        close(out_p, out_t)
        backward_both(rng, out_p, out_t)
        check_grads([(xp, xt), (mp.weight, mt.weight)], "float64")
    mt = torch.nn.ConvTranspose3d(4, 2, 3, stride=2, padding=1).double()
    mp = pf.nn.ConvTranspose3d(4, 2, 3, stride=2, padding=1).double()
    load_from_torch(mp, mt)
    assert repr(mp) == repr(mt)
    xp, xt = pair(rng, (1, 4, 3, 4, 2), grad=True)
    out_p, out_t = mp(xp, output_size=(6, 8, 4)), mt(xt, output_size=(6, 8, 4))
    assert tuple(out_p.shape) == tuple(out_t.shape) == (1, 2, 6, 8, 4)
    close(out_p, out_t)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (mp.weight, mt.weight), (mp.bias, mt.bias)], "float64")


def test_top_level_aliases(rng):
    """torch.conv3d, torch.conv_transpose3d, torch.max_pool3d."""
    xp, xt = pair(rng, (2, 3, 4, 5, 6), "float32")
    wp, wt = pair(rng, (4, 3, 3, 2, 3), "float32")
    close(pf.conv3d(xp, wp, None, 1, 1), torch.conv3d(xt, wt, None, 1, 1), "float32")
    close(pf.conv_transpose3d(xp, wp.transpose(0, 1), stride=2),
          torch.conv_transpose3d(xt, wt.transpose(0, 1), stride=2), "float32")
    close(pf.max_pool3d(xp, 2), torch.max_pool3d(xt, 2), "float32")


# ---- pooling ------------------------------------------------------------------------------------

def every_window_has_a_tap(k, stride, padding, dilation, size):
    """PyTorch 1.13's max_pool3d backward writes out of bounds (heap corruption, an abort of the
    test process) when a window lies entirely in the padding; such problems are not drawn."""
    for i in range(3):
        span = dilation[i] * (k[i] - 1) + 1
        n_out = -(-(size[i] + 2 * padding[i] - span) // stride[i]) + 1  # ceil_mode's count, the larger
        for o in range(max(n_out, 0)):
            if not any(0 <= o * stride[i] - padding[i] + j * dilation[i] < size[i] for j in range(k[i])):
                return False
    return True


def random_pool(rng, dilation=True):
    while True:
        pool = random_pool_once(rng, dilation)
        if every_window_has_a_tap(*pool):
            return pool


def random_pool_once(rng, dilation):
    k = ints(rng, 1, 4)
    stride = ints(rng, 1, 4)
    padding = tuple(int(rng.integers(0, k[i] // 2 + 1)) for i in range(3))
    dil = ints(rng, 1, 3) if dilation else (1, 1, 1)
    # (3-d average pooling needs a whole window inside the unpadded input)
    least = [dil[i] * (k[i] - 1) + 1 - 2 * padding[i] if dilation else k[i] for i in range(3)]
    size = tuple(max(int(rng.integers(1, 9)), least[i]) for i in range(3))
    return k, stride, padding, dil, size


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_max_pool3d_random(rng, case, dtype):
    k, stride, padding, dilation, size = random_pool(rng)
    ceil_mode = bool(case % 2)
    xp, xt = pair(rng, (2, 3) + size, dtype, LAYOUTS[case % 3], grad=True)
    kwargs = dict(stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode, return_indices=True)
    (vp, ip), (vt, it) = F.max_pool3d(xp, k, **kwargs), TF.max_pool3d(xt, k, **kwargs)
    close(vp, vt, dtype)
    assert torch.equal(to_torch(ip), it)
    backward_both(rng, vp, vt)
    check_grads([(xp, xt)], dtype)


def test_max_pool3d_nan_inf_and_unbatched(rng):
    data = rng.uniform(-1, 1, (3, 4, 5, 6))
    data[0, 1, 2, 3] = np.nan
    data[1, :2, :2, :2] = -np.inf
    xp, xt = torch_pair = pf.from_numpy(data.copy()).requires_grad_(), torch.from_numpy(data.copy()).requires_grad_()
    (vp, ip), (vt, it) = (F.max_pool3d(xp, 2, padding=1, return_indices=True),
                          TF.max_pool3d(xt, 2, padding=1, return_indices=True))
    np.testing.assert_array_equal(vp.detach().numpy(), vt.detach().numpy())  # NaN and -inf where torch has them
    assert torch.equal(to_torch(ip), it)
    backward_both(rng, vp, vt)
    close(xp.grad, xt.grad)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_avg_pool3d_random(rng, case, dtype):
    k, stride, padding, _, size = random_pool(rng, dilation=False)
    kwargs = dict(stride=stride, padding=padding, ceil_mode=bool(case % 2), count_include_pad=case % 3 != 1,
                  divisor_override=int(rng.integers(1, 9)) if case % 3 == 2 else None)
    xp, xt = pair(rng, (2, 3) + size, dtype, LAYOUTS[case % 3], grad=True)
    out_p, out_t = F.avg_pool3d(xp, k, **kwargs), TF.avg_pool3d(xt, k, **kwargs)
    close(out_p, out_t, dtype)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt)], dtype)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adaptive_pool3d_random(rng, case, dtype):
    size = ints(rng, 1, 9)
    out = tuple(int(rng.integers(1, 9)) if rng.integers(0, 4) else None for _ in range(3))
    shape = (2, 3) + size if case % 2 else (3,) + size  # unbatched in odd cases
    xp, xt = pair(rng, shape, dtype, LAYOUTS[case % 3], grad=True)
    out_p, out_t = F.adaptive_avg_pool3d(xp, out), TF.adaptive_avg_pool3d(xt, out)
    close(out_p, out_t, dtype)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt)], dtype)
    xp.grad, xt.grad = None, None
    (vp, ip), (vt, it) = F.adaptive_max_pool3d(xp, out, True), TF.adaptive_max_pool3d(xt, out, True)
    close(vp, vt, dtype)
    assert torch.equal(to_torch(ip), it)
    backward_both(rng, vp, vt)
    check_grads([(xp, xt)], dtype)


def test_pool3d_double_backward(rng):
    """Average pooling and its backward are adjoints; max pooling's backward is a scatter whose
    gradient is a gather: second derivatives through both as torch's."""
    results = []
    for lib, M in ((pf, F), (torch, TF)):
        g = np.random.default_rng(2)
        x = lib.from_numpy(g.uniform(-1, 1, (2, 2, 5, 4, 6))).requires_grad_()
        loss = ((M.avg_pool3d(x, 3, stride=2, padding=1, ceil_mode=True) * 2) ** 2).sum() + (
            M.max_pool3d(x, 2, ceil_mode=True) ** 3).sum()
        (gx,) = (torch.autograd.grad if lib is torch else pf.autograd.grad)(loss, (x,), create_graph=True)
        (gx * gx).sum().backward()
        results.append((gx, x.grad))
    for p, t in zip(*results):
        close(p, t)


def test_pool3d_modules_and_batch_norm3d(rng):
    for mt, mp in ((torch.nn.MaxPool3d(3, stride=2, padding=1, ceil_mode=True), pf.nn.MaxPool3d(3, 2, 1, ceil_mode=True)),
                   (torch.nn.AvgPool3d((2, 3, 2), count_include_pad=False), pf.nn.AvgPool3d((2, 3, 2),
                                                                                             count_include_pad=False)),
                   (torch.nn.AdaptiveAvgPool3d((2, None, 3)), pf.nn.AdaptiveAvgPool3d((2, None, 3))),
                   (torch.nn.AdaptiveMaxPool3d(2), pf.nn.AdaptiveMaxPool3d(2))):
        assert repr(mp) == repr(mt)
        xp, xt = pair(rng, (2, 3, 5, 6, 7), grad=True)
        out_p, out_t = mp(xp), mt(xt)
        close(out_p, out_t)
        backward_both(rng, out_p, out_t)
        close(xp.grad, xt.grad)
    for kwargs in (dict(), dict(affine=False, momentum=None), dict(track_running_stats=False)):
        mt, mp = torch.nn.BatchNorm3d(3, **kwargs).double(), pf.nn.BatchNorm3d(3, **kwargs).double()
        load_from_torch(mp, mt)
        assert repr(mp) == repr(mt)
        for training in (True, True, False):
            mt.train(training)
            mp.train(training)
            xp, xt = pair(rng, (2, 3, 4, 3, 5), grad=True)
            out_p, out_t = mp(xp), mt(xt)
            close(out_p, out_t)
            backward_both(rng, out_p, out_t)
            close(xp.grad, xt.grad)
        for name, buf in mt.named_buffers():
            close(dict(mp.named_buffers())[name], buf)
    with pytest.raises(ValueError, match="expected 5D input \\(got 4D input\\)"):
        pf.nn.BatchNorm3d(3)(pf.zeros(2, 3, 4, 4))


# ---- errors -------------------------------------------------------------------------------------

class _Torch:
    def __getattr__(self, name):
        return getattr(TF, name) if hasattr(TF, name) else getattr(torch, name)


class _Plugflow:
    def __getattr__(self, name):
        return getattr(F, name) if hasattr(F, name) else getattr(pf, name)


ERRORS = [
    ("conv 3-d input", lambda M: M.conv3d(M.zeros(4, 5, 6), M.zeros(2, 4, 1, 1, 1)),
     "Expected 4D \\(unbatched\\) or 5D \\(batched\\) input to conv3d, but got input of size: \\[4, 5, 6\\]"),
    ("conv channels", lambda M: M.conv3d(M.zeros(2, 4, 5, 6, 7), M.zeros(6, 2, 3, 3, 3), groups=3),
     "Given groups=3, weight of size \\[6, 2, 3, 3, 3\\], expected input\\[2, 4, 5, 6, 7\\] to have 6 channels"),
    ("conv bias", lambda M: M.conv3d(M.zeros(2, 4, 5, 6, 7), M.zeros(6, 2, 3, 3, 3), M.zeros(5), groups=2),
     "expected bias to be 1-dimensional with 6 elements, but got bias of size \\[5\\]"),
    ("conv kernel too big", lambda M: M.conv3d(M.zeros(2, 4, 5, 6, 7), M.zeros(6, 2, 9, 3, 3), groups=2),
     "Calculated padded input size per channel: \\(5 x 6 x 7\\). Kernel size: \\(9 x 3 x 3\\). Kernel size can't"),
    ("conv stride length", lambda M: M.conv3d(M.zeros(2, 4, 5, 6, 7), M.zeros(6, 4, 3, 3, 3), stride=(1, 2)),
     "expected stride to be a single integer value or a list of 3 values"),
    ("conv stride 0", lambda M: M.conv3d(M.zeros(2, 4, 5, 6, 7), M.zeros(6, 4, 3, 3, 3), stride=0),
     "non-positive stride is not supported"),
    ("conv negative padding", lambda M: M.conv3d(M.zeros(2, 4, 5, 6, 7), M.zeros(6, 4, 3, 3, 3), padding=-1),
     "negative padding is not supported"),
    ("conv same strided", lambda M: M.conv3d(M.zeros(2, 4, 5, 6, 7), M.zeros(6, 4, 3, 3, 3), padding="same",
                                             stride=2), "padding='same' is not supported for strided convolutions"),
    ("conv bad padding string", lambda M: M.conv3d(M.zeros(2, 4, 5, 6, 7), M.zeros(6, 4, 3, 3, 3), padding="foo"),
     "Invalid padding string: 'foo'"),
    ("transpose output padding", lambda M: M.conv_transpose3d(M.zeros(2, 4, 5, 6, 7), M.zeros(4, 3, 3, 3, 3),
                                                              output_padding=1),
     "output padding must be smaller than either stride or dilation, but got output_padding_depth: 1"),
    ("transpose channels", lambda M: M.conv_transpose3d(M.zeros(2, 4, 5, 6, 7), M.zeros(5, 3, 3, 3, 3)),
     "Given transposed=1, weight of size \\[5, 3, 3, 3, 3\\], expected input\\[2, 4, 5, 6, 7\\] to have 5 channels"),
    ("max kernel tuple", lambda M: M.max_pool3d(M.zeros(2, 3, 4, 5, 6), (2, 2)),
     "max_pool3d: kernel_size must either be a single int, or a tuple of three ints"),
    ("max pad too big", lambda M: M.max_pool3d(M.zeros(2, 3, 4, 5, 6), 3, padding=2),
     "pad should be at most half of kernel size, but got pad=2 and kernel_size=3"),
    ("max output too small", lambda M: M.max_pool3d(M.zeros(2, 3, 4, 5, 6), 5),
     "Given input size: \\(3x4x5x6\\). Calculated output size: \\(3x0x1x1\\). Output size is too small"),
    ("max 2-d input", lambda M: M.max_pool3d(M.zeros(2, 3), 2), "4D or 5D \\(batch mode\\) tensor expected"),
    ("max dilation 0", lambda M: M.max_pool3d(M.zeros(2, 3, 4, 5, 6), 2, dilation=0),
     "dilation should be greater than zero, but got dilationT: 0 dilationH: 0 dilationW: 0"),
    ("avg kernel tuple", lambda M: M.avg_pool3d(M.zeros(2, 3, 4, 5, 6), (2, 2)),
     "avg_pool3d: kernel_size must be a single int, or a tuple of three ints"),
    ("avg divisor 0", lambda M: M.avg_pool3d(M.zeros(2, 3, 4, 5, 6), 2, divisor_override=0),
     "divisor must be not zero"),
    ("avg pad too big", lambda M: M.avg_pool3d(M.zeros(2, 3, 4, 5, 6), 2, padding=2),
     "pad should be at most half of kernel size"),
    ("avg window too big", lambda M: M.avg_pool3d(M.zeros(2, 3, 4, 2, 7), (3, 3, 1), padding=1),
     "input image \\(T: 4 H: 2 W: 7\\) smaller than kernel size \\(kT: 3 kH: 3 kW: 1\\)"),
    ("adaptive 2-d input", lambda M: M.adaptive_avg_pool3d(M.zeros(2, 3), 2),
     "adaptive_avg_pool3d\\(\\): Expected 4D or 5D tensor, but got \\[2, 3\\]"),
    ("adaptive empty", lambda M: M.adaptive_avg_pool3d(M.zeros(2, 3, 0, 4, 4), 2),
     "Expected input to have non-zero size for non-batch dimensions, but input has sizes \\[2, 3, 0, 4, 4\\] with "
     "dimension 2 being empty"),
    ("adaptive max 2-d", lambda M: M.adaptive_max_pool3d(M.zeros(2, 3), 2),
     "adaptive_max_pool3d\\(\\): Expected 4D or 5D tensor, but got: \\[2, 3\\]"),
    ("max int input", lambda M: M.max_pool3d(M.zeros(2, 3, 4, 5, 6, dtype=M.int32), 2), "not implemented for"),
]


@pytest.mark.parametrize("name,fn,match", ERRORS, ids=[c[0] for c in ERRORS])
def test_errors(name, fn, match):
    with pytest.raises(Exception) as torch_err:
        fn(_Torch())
    with pytest.raises(type(torch_err.value), match=match):
        fn(_Plugflow())
