"""The conv family against PyTorch 1.13: conv1d/conv2d (int/tuple/'same'/'valid' padding,
stride, dilation, groups, bias, unbatched input), conv_transpose1d/2d, max/avg/adaptive pooling
(1-d and 2-d, ceil_mode, count_include_pad, divisor_override, indices) and interpolate
(nearest, linear, bilinear and bicubic with align_corners, area; size or scale_factor). Values and
gradients (input, weight, bias; double backward) on fresh random inputs in three memory
layouts, batch size 0, and PyTorch's exceptions for bad input.

Every test draws a new seed (printed, so a failure can be replayed with SEED=<n>)."""

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn.functional as F
from helpers import assert_matches, backward_both, random_pair, seeded_rng, to_torch

CASES = range(8)  # random configurations per parametrized test
TOL = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-4)}
LAYOUTS = ["contiguous", "channels_last", "strided"]
# random_pair with the values in [-1, 1): pair(rng, shape, dtype="float64", layout="contiguous", grad=False)
pair = functools.partial(random_pair, low=-1.0, high=1.0)


@pytest.fixture
def rng():
    return seeded_rng("SEED")


def close(actual, expected, dtype="float64"):
    rtol, atol = TOL[dtype]
    assert_matches(actual, expected.detach(), rtol=rtol, atol=atol)


def check_grads(pairs, dtype):
    for p, t in pairs:
        if t.grad is None:
            assert p.grad is None or not p.grad.abs().sum().item()
        else:
            close(p.grad, t.grad, dtype)


def raises_like_torch(fn_pf, fn_torch, match):
    """Both raise; plugflow with the exception type torch uses and a message matching `match`."""
    with pytest.raises(Exception) as torch_err:
        fn_torch()
    with pytest.raises(type(torch_err.value), match=match):
        fn_pf()


# ---- conv2d -------------------------------------------------------------------------------------

def random_conv(rng):
    """A valid random conv2d configuration (the kernel fits the padded input)."""
    while True:
        groups = int(rng.integers(1, 4))
        cin, cout = groups * int(rng.integers(1, 4)), groups * int(rng.integers(1, 4))
        k = tuple(int(v) for v in rng.integers(1, 5, size=2))
        stride = tuple(int(v) for v in rng.integers(1, 4, size=2))
        padding = tuple(int(v) for v in rng.integers(0, 3, size=2))
        dilation = tuple(int(v) for v in rng.integers(1, 3, size=2))
        hw = tuple(int(v) for v in rng.integers(1, 12, size=2))
        if all(hw[i] + 2 * padding[i] >= dilation[i] * (k[i] - 1) + 1 for i in range(2)):
            return dict(n=int(rng.integers(1, 4)), cin=cin, cout=cout, k=k, hw=hw,
                        kwargs=dict(stride=stride, padding=padding, dilation=dilation, groups=groups))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv2d_random(rng, case, dtype):
    cfg = random_conv(rng)
    layout = LAYOUTS[case % 3]
    xp, xt = pair(rng, (cfg["n"], cfg["cin"]) + cfg["hw"], dtype, layout, grad=True)
    wp, wt = pair(rng, (cfg["cout"], cfg["cin"] // cfg["kwargs"]["groups"]) + cfg["k"], dtype, LAYOUTS[case % 2],
                  grad=True)
    with_bias = case % 4 != 3
    bp, bt = pair(rng, (cfg["cout"],), dtype, grad=True) if with_bias else (None, None)
    out_p = F.conv2d(xp, wp, bp, **cfg["kwargs"])
    out_t = TF.conv2d(xt, wt, bt, **cfg["kwargs"])
    close(out_p, out_t, dtype)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (wp, wt)] + ([(bp, bt)] if with_bias else []), dtype)


@pytest.mark.parametrize("k,dilation", [((3, 3), (1, 1)), ((2, 4), (1, 1)), ((3, 2), (2, 3)), ((1, 1), (1, 1))])
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv2d_padding_strings(rng, k, dilation, padding):
    xp, xt = pair(rng, (2, 3, 7, 8), grad=True)
    wp, wt = pair(rng, (4, 3) + k, grad=True)
    out_p = F.conv2d(xp, wp, padding=padding, dilation=dilation)
    out_t = TF.conv2d(xt, wt, padding=padding, dilation=dilation)
    close(out_p, out_t)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (wp, wt)], "float64")


def test_conv2d_pointwise_and_int_args(rng):
    """1x1 stride-1 convolution (no im2col) on dense and non-dense input; int arguments."""
    for layout in LAYOUTS:
        xp, xt = pair(rng, (3, 5, 6, 7), layout=layout, grad=True)
        wp, wt = pair(rng, (4, 5, 1, 1), grad=True)
        out_p, out_t = F.conv2d(xp, wp, stride=1, padding=0), TF.conv2d(xt, wt, stride=1, padding=0)
        close(out_p, out_t)
        backward_both(rng, out_p, out_t)
        check_grads([(xp, xt), (wp, wt)], "float64")


def test_conv2d_strided_upstream_gradient(rng):
    """Gradients arriving as non-contiguous views (here through a transpose of the output)."""
    xp, xt = pair(rng, (3, 4, 7, 6), grad=True)
    wp, wt = pair(rng, (6, 2, 2, 3), grad=True)
    out_p = F.conv2d(xp, wp, stride=(1, 2), padding=1, groups=2).transpose(2, 3)
    out_t = TF.conv2d(xt, wt, stride=(1, 2), padding=1, groups=2).transpose(2, 3)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (wp, wt)], "float64")
    xp, xt = pair(rng, (2, 4, 5, 5), grad=True)
    wp, wt = pair(rng, (4, 3, 3, 3), grad=True)
    out_p = F.conv_transpose2d(xp, wp, stride=2).permute(0, 2, 3, 1)
    out_t = TF.conv_transpose2d(xt, wt, stride=2).permute(0, 2, 3, 1)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (wp, wt)], "float64")


def test_conv2d_unbatched(rng):
    xp, xt = pair(rng, (3, 6, 5), grad=True)
    wp, wt = pair(rng, (2, 3, 3, 2), grad=True)
    bp, bt = pair(rng, (2,), grad=True)
    out_p, out_t = F.conv2d(xp, wp, bp, padding=1), TF.conv2d(xt, wt, bt, padding=1)
    assert tuple(out_p.shape) == tuple(out_t.shape)
    close(out_p, out_t)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (wp, wt), (bp, bt)], "float64")


def test_conv2d_batch_zero(rng):
    xp, xt = pair(rng, (0, 4, 5, 5), grad=True)
    wp, wt = pair(rng, (6, 2, 3, 3), grad=True)
    bp, bt = pair(rng, (6,), grad=True)
    out_p, out_t = F.conv2d(xp, wp, bp, groups=2), TF.conv2d(xt, wt, bt, groups=2)
    assert tuple(out_p.shape) == tuple(out_t.shape) == (0, 6, 3, 3)
    out_p.sum().backward()
    out_t.sum().backward()
    check_grads([(xp, xt), (wp, wt), (bp, bt)], "float64")


def test_conv1d(rng):
    for case in range(4):
        groups = 1 + case % 2
        xp, xt = pair(rng, (2, 2 * groups, int(rng.integers(5, 12))), layout=LAYOUTS[case % 3], grad=True)
        wp, wt = pair(rng, (3 * groups, 2, int(rng.integers(1, 4))), grad=True)
        bp, bt = pair(rng, (3 * groups,), grad=True)
        kwargs = dict(stride=int(rng.integers(1, 3)), padding=int(rng.integers(0, 2)), dilation=int(rng.integers(1, 3)),
                      groups=groups)
        out_p, out_t = F.conv1d(xp, wp, bp, **kwargs), TF.conv1d(xt, wt, bt, **kwargs)
        close(out_p, out_t)
        backward_both(rng, out_p, out_t)
        check_grads([(xp, xt), (wp, wt), (bp, bt)], "float64")
    xp, xt = pair(rng, (3, 9))  # unbatched, 'same'
    wp, wt = pair(rng, (2, 3, 4))
    close(F.conv1d(xp, wp, padding="same"), TF.conv1d(xt, wt, padding="same"))


# ---- conv_transpose ------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv_transpose2d_random(rng, case, dtype):
    while True:  # a configuration with a non-empty output
        groups = int(rng.integers(1, 3))
        cin, cout = groups * int(rng.integers(1, 4)), groups * int(rng.integers(1, 4))
        k = tuple(int(v) for v in rng.integers(1, 4, size=2))
        stride = tuple(int(v) for v in rng.integers(1, 4, size=2))
        dilation = tuple(int(v) for v in rng.integers(1, 3, size=2))
        padding = tuple(int(v) for v in rng.integers(0, 2, size=2))
        output_padding = tuple(int(rng.integers(0, max(stride[i], dilation[i]))) for i in range(2))
        hw = tuple(int(v) for v in rng.integers(1, 8, size=2))
        if all((hw[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k[i] - 1) + output_padding[i] >= 0
               for i in range(2)):
            break
    kwargs = dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups, dilation=dilation)
    xp, xt = pair(rng, (int(rng.integers(1, 3)), cin) + hw, dtype, LAYOUTS[case % 3], grad=True)
    wp, wt = pair(rng, (cin, cout // groups) + k, dtype, grad=True)
    bp, bt = pair(rng, (cout,), dtype, grad=True)
    out_t = TF.conv_transpose2d(xt, wt, bt, **kwargs)
    out_p = F.conv_transpose2d(xp, wp, bp, **kwargs)
    close(out_p, out_t, dtype)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (wp, wt), (bp, bt)], dtype)


def test_conv_transpose1d_and_unbatched(rng):
    xp, xt = pair(rng, (2, 4, 6), grad=True)
    wp, wt = pair(rng, (4, 3, 3), grad=True)
    out_p = F.conv_transpose1d(xp, wp, stride=2, padding=1, output_padding=1)
    out_t = TF.conv_transpose1d(xt, wt, stride=2, padding=1, output_padding=1)
    close(out_p, out_t)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt), (wp, wt)], "float64")
    xp, xt = pair(rng, (4, 5, 3))
    wp, wt = pair(rng, (4, 2, 2, 3))
    close(F.conv_transpose2d(xp, wp, stride=(2, 1)), TF.conv_transpose2d(xt, wt, stride=(2, 1)))


# ---- double backward ----------------------------------------------------------------------------------

DOUBLE_BACKWARD = [
    ("conv2d", "conv2d", (2, 4, 7, 8), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    # output_padding >= stride (allowed because < dilation): the transposed output has rows
    # that no conv2d position reads
    ("conv_transpose2d", "conv_transpose2d", (2, 4, 5, 6), (4, 3, 3, 2),
     dict(stride=(1, 2), padding=(1, 0), output_padding=(1, 1), dilation=(2, 2))),
]


@pytest.mark.parametrize("fn,fn_torch,xshape,wshape,kwargs", DOUBLE_BACKWARD, ids=[c[0] for c in DOUBLE_BACKWARD])
def test_conv_double_backward(rng, fn, fn_torch, xshape, wshape, kwargs):
    """d/d(x, w) of <v, d(<u, conv(x, w)>)/d(x, w)>: exercises the input and weight gradients'
    own backward formulas."""
    xp, xt = pair(rng, xshape, grad=True)
    wp, wt = pair(rng, wshape, grad=True)
    out_t, out_p = getattr(TF, fn_torch)(xt, wt, **kwargs), getattr(F, fn)(xp, wp, **kwargs)
    up, ut = pair(rng, tuple(out_t.shape))
    gx_t, gw_t = torch.autograd.grad((out_t * ut).sum(), (xt, wt), create_graph=True)
    gx_p, gw_p = pf.autograd.grad((out_p * up).sum(), (xp, wp), create_graph=True)
    close(gx_p, gx_t)
    close(gw_p, gw_t)
    vxp, vxt = pair(rng, tuple(xt.shape))
    vwp, vwt = pair(rng, tuple(wt.shape))
    second_t = torch.autograd.grad((gx_t * vxt).sum() + (gw_t * vwt).sum(), (xt, wt))
    second_p = pf.autograd.grad((gx_p * vxp).sum() + (gw_p * vwp).sum(), (xp, wp))
    for a, e in zip(second_p, second_t):
        close(a, e)


# ---- conv errors ---------------------------------------------------------------------------------------

CONV_ERRORS = [
    ("input 2-d", lambda M: M.conv2d(M.zeros(3, 3), M.zeros(6, 4, 3, 3)), "Expected 3D \\(unbatched\\) or 4D"),
    ("input 5-d", lambda M: M.conv2d(M.zeros(1, 4, 3, 3, 3), M.zeros(6, 4, 3, 3)), "Expected 3D \\(unbatched\\) or 4D"),
    ("weight 3-d", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 3)), "Expected 4-dimensional weight"),
    ("empty kernel", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 0, 3)), "Expected a non-empty kernel"),
    ("channels", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 3, 3, 3)),
     "Given groups=1, weight of size \\[6, 3, 3, 3\\], expected input\\[2, 4, 5, 5\\] to have 3 channels, but got 4"),
    ("groups in", lambda M: M.conv2d(M.zeros(2, 5, 5, 5), M.zeros(6, 2, 3, 3), groups=2), "to have 4 channels"),
    ("groups out", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(5, 2, 3, 3), groups=2),
     "expected weight to be divisible by 2 at dimension 0"),
    ("groups 0", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 3, 3), groups=0), "non-positive groups"),
    ("kernel too big", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 7, 7)),
     "Calculated padded input size per channel: \\(5 x 5\\). Kernel size: \\(7 x 7\\)"),
    ("dilated kernel too big", lambda M: M.conv2d(M.zeros(1, 1, 5, 5), M.zeros(1, 1, 3, 3), dilation=3),
     "Kernel size can't be greater than actual input size"),
    ("negative padding", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 3, 3), padding=-1),
     "negative padding is not supported"),
    ("stride 0", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 3, 3), stride=0), "non-positive stride"),
    ("dilation 0", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 3, 3), dilation=0), "non-positive dilation"),
    ("bias size", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 3, 3), M.zeros(5)),
     "expected bias to be 1-dimensional with 6 elements, but got bias of size \\[5\\]"),
    ("same with stride", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 3, 3), stride=2, padding="same"),
     "padding='same' is not supported for strided convolutions"),
    ("bad padding string", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 3, 3), padding="full"),
     "Invalid padding string: 'full'"),
    ("stride length", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 3, 3), stride=(1, 1, 1)),
     "expected stride to be a single integer value or a list of 2 values"),
    ("dtype mismatch", lambda M: M.conv2d(M.zeros(2, 4, 5, 5), M.zeros(6, 4, 3, 3, dtype=M.float64)),
     "Input type .* and weight type .* should be the same"),
    ("conv1d 4-d", lambda M: M.conv1d(M.zeros(1, 2, 3, 4), M.zeros(2, 2, 1)), "Expected 2D \\(unbatched\\) or 3D"),
    ("transpose output_padding", lambda M: M.conv_transpose2d(M.zeros(2, 4, 5, 5), M.zeros(4, 3, 3, 3),
                                                               output_padding=1),
     "output padding must be smaller than either stride or dilation"),
    ("transpose channels", lambda M: M.conv_transpose2d(M.zeros(2, 4, 5, 5), M.zeros(3, 3, 3, 3)),
     "Given transposed=1, weight of size \\[3, 3, 3, 3\\], expected input\\[2, 4, 5, 5\\] to have 3 channels"),
]


class _Torch:
    """torch with torch.nn.functional's names, to run the same lambda on both libraries."""
    def __getattr__(self, name):
        return getattr(TF, name) if hasattr(TF, name) else getattr(torch, name)


class _Plugflow:
    def __getattr__(self, name):
        return getattr(F, name) if hasattr(F, name) else getattr(pf, name)


@pytest.mark.parametrize("name,fn,match", CONV_ERRORS, ids=[c[0] for c in CONV_ERRORS])
def test_conv_errors(name, fn, match):
    raises_like_torch(lambda: fn(_Plugflow()), lambda: fn(_Torch()), match)


def test_conv_integer_input_refused():
    with pytest.raises(RuntimeError, match="not implemented for 'int64'"):
        F.conv2d(pf.zeros(1, 1, 3, 3, dtype=pf.int64), pf.zeros(1, 1, 2, 2, dtype=pf.int64))


# ---- max pooling -----------------------------------------------------------------------------------------

def random_pool(rng, dilation=True):
    k = tuple(int(v) for v in rng.integers(1, 4, size=2))
    stride = None if rng.random() < 0.3 else tuple(int(v) for v in rng.integers(1, 4, size=2))
    padding = tuple(int(rng.integers(0, k[i] // 2 + 1)) for i in range(2))
    d = tuple(int(v) for v in rng.integers(1, 3, size=2)) if dilation else (1, 1)
    hw = tuple(max(int(v), d[i] * (k[i] - 1) + 1) for i, v in enumerate(rng.integers(1, 10, size=2)))
    return k, stride, padding, d, hw


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_max_pool2d_random(rng, case, dtype):
    k, stride, padding, d, hw = random_pool(rng)
    ceil_mode = bool(case % 2)
    shape = ((int(rng.integers(1, 3)), int(rng.integers(1, 4))) if case % 4 != 3 else (int(rng.integers(1, 4)),)) + hw
    xp, xt = pair(rng, shape, dtype, LAYOUTS[case % 3], grad=True)
    kwargs = dict(kernel_size=k, stride=stride, padding=padding, dilation=d, ceil_mode=ceil_mode, return_indices=True)
    vp, ip = F.max_pool2d(xp, **kwargs)
    vt, it = TF.max_pool2d(xt, **kwargs)
    close(vp, vt, dtype)
    assert_matches(ip, it)
    backward_both(rng, vp, vt)
    check_grads([(xp, xt)], dtype)


def test_max_pool2d_nan_inf_and_overlap(rng):
    data = rng.uniform(-1, 1, size=(2, 3, 6, 7))
    data[0, 0, 1, 1] = np.nan
    data[1, 2] = -np.inf
    xp, xt = pf.from_numpy(data.copy()).requires_grad_(), torch.from_numpy(data.copy()).requires_grad_()
    vp, ip = F.max_pool2d(xp, 3, stride=1, padding=1, return_indices=True)  # overlapping windows
    vt, it = TF.max_pool2d(xt, 3, stride=1, padding=1, return_indices=True)
    close(vp, vt)
    assert_matches(ip, it)
    backward_both(rng, vp, vt)
    close(xp.grad, xt.grad)


def test_max_pool1d_and_batch_zero(rng):
    xp, xt = pair(rng, (2, 3, 11), layout="strided", grad=True)
    vp, ip = F.max_pool1d(xp, 3, stride=2, padding=1, dilation=2, return_indices=True)
    vt, it = TF.max_pool1d(xt, 3, stride=2, padding=1, dilation=2, return_indices=True)
    close(vp, vt)
    assert_matches(ip, it)
    backward_both(rng, vp, vt)
    close(xp.grad, xt.grad)
    xp, xt = pair(rng, (3, 8))
    close(F.max_pool1d(xp, 2, ceil_mode=True), TF.max_pool1d(xt, 2, ceil_mode=True))
    xp, xt = pair(rng, (0, 4, 5, 5), grad=True)
    vp, vt = F.max_pool2d(xp, 2), TF.max_pool2d(xt, 2)
    assert tuple(vp.shape) == tuple(vt.shape)
    vp.sum().backward()
    assert tuple(xp.grad.shape) == (0, 4, 5, 5)


# ---- average pooling -------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_avg_pool2d_random(rng, case, dtype):
    k, stride, padding, _, hw = random_pool(rng, dilation=False)
    kwargs = dict(kernel_size=k, stride=stride, padding=padding, ceil_mode=bool(case % 2),
                  count_include_pad=bool(case % 3), divisor_override=None if case % 4 else int(rng.integers(1, 6)))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4))) + hw
    xp, xt = pair(rng, shape if case % 5 else shape[1:], dtype, LAYOUTS[case % 3], grad=True)
    out_p, out_t = F.avg_pool2d(xp, **kwargs), TF.avg_pool2d(xt, **kwargs)
    close(out_p, out_t, dtype)
    backward_both(rng, out_p, out_t)
    check_grads([(xp, xt)], dtype)


def test_avg_pool1d(rng):
    xp, xt = pair(rng, (2, 3, 10), grad=True)
    kwargs = dict(kernel_size=4, stride=3, padding=2, ceil_mode=True, count_include_pad=False)
    out_p, out_t = F.avg_pool1d(xp, **kwargs), TF.avg_pool1d(xt, **kwargs)
    close(out_p, out_t)
    backward_both(rng, out_p, out_t)
    close(xp.grad, xt.grad)


def test_pool_double_backward(rng):
    """The backward ops' own gradients (avg: the forward again; max: a gather by the indices)."""
    for fp, ft in [(lambda x: F.avg_pool2d(x, 3, 2, 1), lambda x: TF.avg_pool2d(x, 3, 2, 1)),
                   (lambda x: F.max_pool2d(x, 2), lambda x: TF.max_pool2d(x, 2)),
                   (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), lambda x: TF.adaptive_avg_pool2d(x, (3, 2))),
                   (lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"),
                    lambda x: TF.interpolate(x, scale_factor=1.5, mode="bilinear"))]:
        xp, xt = pair(rng, (2, 2, 7, 6), grad=True)
        out_p, out_t = fp(xp), ft(xt)
        up, ut = pair(rng, tuple(out_t.shape), grad=True)
        (gt,) = torch.autograd.grad((out_t * ut).sum(), xt, create_graph=True)
        (gp,) = pf.autograd.grad((out_p * up).sum(), xp, create_graph=True)
        close(gp, gt)
        vp, vt = pair(rng, tuple(xt.shape))
        (st,) = torch.autograd.grad((gt * vt).sum(), ut)
        (sp,) = pf.autograd.grad((gp * vp).sum(), up)
        close(sp, st)


# ---- adaptive pooling -------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
def test_adaptive_pool2d_random(rng, case):
    hw = tuple(int(v) for v in rng.integers(1, 10, size=2))
    out_size = tuple(None if rng.random() < 0.2 else int(v) for v in rng.integers(1, 12, size=2))
    if case % 3 == 0:
        out_size = int(rng.integers(1, 6))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4))) + hw
    xp, xt = pair(rng, shape if case % 4 else shape[1:], layout=LAYOUTS[case % 3], grad=True)
    out_p, out_t = F.adaptive_avg_pool2d(xp, out_size), TF.adaptive_avg_pool2d(xt, out_size)
    close(out_p, out_t)
    backward_both(rng, out_p, out_t)
    close(xp.grad, xt.grad)
    xp.grad = None
    xt.grad = None
    (vp, ip), (vt, it) = F.adaptive_max_pool2d(xp, out_size, True), TF.adaptive_max_pool2d(xt, out_size, True)
    close(vp, vt)
    assert_matches(ip, it)
    backward_both(rng, vp, vt)
    close(xp.grad, xt.grad)


def test_adaptive_pool1d(rng):
    xp, xt = pair(rng, (2, 3, 13), grad=True)
    out_p, out_t = F.adaptive_avg_pool1d(xp, 5), TF.adaptive_avg_pool1d(xt, 5)
    close(out_p, out_t)
    (vp, ip), (vt, it) = F.adaptive_max_pool1d(xp, 4, True), TF.adaptive_max_pool1d(xt, 4, True)
    close(vp, vt)
    assert_matches(ip, it)
    backward_both(rng, out_p + vp.sum(), out_t + vt.sum())
    close(xp.grad, xt.grad)


# ---- interpolate -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", ["nearest", "bilinear", "area"])
def test_interpolate_2d_random(rng, case, mode):
    hw = tuple(int(v) for v in rng.integers(1, 9, size=2))
    if case % 2:
        kwargs = dict(size=tuple(int(v) for v in rng.integers(1, 14, size=2)) if case % 3 else int(rng.integers(1, 9)))
    else:  # non-integer scales too, where PyTorch samples with 1/scale rather than in/out
        while True:
            scale = tuple(float(v) for v in np.round(rng.uniform(0.5, 3.0, size=2), 2))
            if case % 4 == 0:
                scale = (scale[0], scale[0])
            out = [int(hw[i] * scale[i]) for i in range(2)]
            # a scale giving out == in or 2 in: PyTorch 1.13's kernels disagree with each other
            # (see test_interpolate_nearest_layout); plugflow matches its NCHW forward
            if min(out) >= 1 and not any(o in (h, 2 * h) for o, h in zip(out, hw)):
                break
        kwargs = dict(scale_factor=scale if case % 4 else scale[0], recompute_scale_factor=bool(case % 3 == 0) or None)
    if mode == "bilinear":
        kwargs["align_corners"] = bool(case % 4 < 2)
    xp, xt = pair(rng, (int(rng.integers(1, 3)), int(rng.integers(1, 4))) + hw, layout=LAYOUTS[case % 3], grad=True)
    out_t = TF.interpolate(xt, mode=mode, **kwargs)
    out_p = F.interpolate(xp, mode=mode, **kwargs)
    close(out_p, out_t)
    backward_both(rng, out_p, out_t)
    close(xp.grad, xt.grad)


@pytest.mark.parametrize("mode,align_corners", [("nearest", None), ("linear", False), ("linear", True),
                                                ("area", None)])
def test_interpolate_1d(rng, mode, align_corners):
    xp, xt = pair(rng, (2, 3, 7), grad=True)
    for kwargs in (dict(size=12), dict(scale_factor=0.7), dict(scale_factor=2.5)):
        xp.grad = None
        xt.grad = None
        out_t = TF.interpolate(xt, mode=mode, align_corners=align_corners, **kwargs)
        out_p = F.interpolate(xp, mode=mode, align_corners=align_corners, **kwargs)
        close(out_p, out_t)
        backward_both(rng, out_p, out_t)
        close(xp.grad, xt.grad)


def test_interpolate_nearest_layout(rng):
    """A scale factor whose output keeps a dim's size: PyTorch 1.13's NCHW kernel samples
    floor(o / scale) (here rows 0, 0, 1), its channels-last kernel and its backward copy
    (rows 0, 1, 2). plugflow uses the NCHW formula for every layout and for the backward."""
    xp, xt = pair(rng, (2, 3, 3, 3))
    out_p = F.interpolate(xp, scale_factor=1.15)
    close(out_p, TF.interpolate(xt, scale_factor=1.15))
    assert torch.equal(to_torch(out_p)[:, :, 1], to_torch(out_p)[:, :, 0])  # both from input row 0
    mem = xp.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # channels-last
    close(F.interpolate(mem, scale_factor=1.15), TF.interpolate(xt, scale_factor=1.15))


def test_interpolate_float32_and_aliases(rng):
    xp, xt = pair(rng, (2, 3, 5, 6), "float32")
    close(F.interpolate(xp, scale_factor=2), TF.interpolate(xt, scale_factor=2), "float32")
    with pytest.warns(UserWarning):
        close(F.upsample_bilinear(xp, size=(7, 9)), TF.interpolate(xt, size=(7, 9), mode="bilinear",
                                                                  align_corners=True), "float32")
    xp, xt = pair(rng, (0, 3, 5, 6))
    assert tuple(F.interpolate(xp, size=4).shape) == tuple(TF.interpolate(xt, size=4).shape)


# ---- bicubic -------------------------------------------------------------------------------------------------

def random_bicubic_kwargs(rng, case, hw):
    """size or scale_factor (up or down, per dim or one), recompute_scale_factor, align_corners."""
    if case % 2:
        kwargs = dict(size=tuple(int(v) for v in rng.integers(1, 17, size=2)))
    else:  # with recompute_scale_factor False PyTorch places taps by 1/scale rather than in/out
        while True:
            scale = tuple(float(v) for v in rng.uniform(0.3, 3.0, size=2))
            if case % 4 == 0:
                scale = (scale[0], scale[0])
            out = [int(h * s) for h, s in zip(hw, scale)]
            # a scale that keeps a dim's size: PyTorch 1.13's backward copies the gradient there
            # while its forward samples by 1/scale (plugflow's backward stays the forward's adjoint)
            if min(out) >= 1 and not any(o == h for o, h in zip(out, hw)):
                break
        kwargs = dict(scale_factor=scale if case % 4 else scale[0], recompute_scale_factor=bool(case % 8 < 4))
    kwargs["align_corners"] = bool(case % 3 == 0)
    return kwargs


@pytest.mark.parametrize("case", range(12))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_interpolate_bicubic_random(rng, case, dtype):
    """Up and down, odd sizes, size or scale_factor, both align_corners and
    recompute_scale_factor, four memory layouts: values and input gradients."""
    hw = tuple(int(v) for v in rng.integers(1, 12, size=2))
    kwargs = random_bicubic_kwargs(rng, case, hw)
    layout = (LAYOUTS + ["transposed"])[case % 4]
    xp, xt = pair(rng, (int(rng.integers(1, 3)), int(rng.integers(1, 4))) + hw, dtype, layout, grad=True)
    out_t = TF.interpolate(xt, mode="bicubic", **kwargs)
    out_p = F.interpolate(xp, mode="bicubic", **kwargs)
    close(out_p, out_t, dtype)
    backward_both(rng, out_p, out_t)
    close(xp.grad, xt.grad, dtype)


@pytest.mark.parametrize("case", range(4))
def test_interpolate_bicubic_backward_is_the_adjoint(rng, case):
    """<up(x), g> = <x, up^T(g)> in float64, independently of PyTorch."""
    hw = tuple(int(v) for v in rng.integers(1, 12, size=2))
    kwargs = random_bicubic_kwargs(rng, case, hw)
    xp, _ = pair(rng, (2, 3) + hw, grad=True)
    out = F.interpolate(xp, mode="bicubic", **kwargs)
    g = pf.from_numpy(rng.uniform(-1, 1, size=tuple(out.shape)))
    out.backward(g)
    lhs = float((out.detach() * g).sum().item())
    rhs = float((xp.detach() * xp.grad).sum().item())
    assert abs(lhs - rhs) <= 1e-10 * max(1.0, abs(lhs)), (lhs, rhs)


@pytest.mark.parametrize("in_hw,kwargs", [((1, 1), dict(size=(5, 7))), ((6, 5), dict(size=(1, 1))),
                                          ((1, 1), dict(size=(1, 1))), ((1, 1), dict(scale_factor=3.5)),
                                          ((1, 9), dict(size=(4, 1))), ((7, 4), dict(scale_factor=(0.2, 1.0)))])
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_bicubic_single_pixels(rng, in_hw, kwargs, align_corners):
    xp, xt = pair(rng, (2, 3) + in_hw, grad=True)
    out_t = TF.interpolate(xt, mode="bicubic", align_corners=align_corners, **kwargs)
    out_p = F.interpolate(xp, mode="bicubic", align_corners=align_corners, **kwargs)
    close(out_p, out_t)
    backward_both(rng, out_p, out_t)
    close(xp.grad, xt.grad)


def test_interpolate_bicubic_same_size_scale(rng):
    """A scale factor that keeps the size: PyTorch 1.13's forward samples by 1/scale, its backward
    copies the gradient (as if the scale were 1). plugflow's backward is its forward's adjoint,
    checked against the transpose of PyTorch's forward as a matrix (its images of the one-hot
    inputs)."""
    xp, xt = pair(rng, (2, 3, 8, 10), grad=True)
    kwargs = dict(scale_factor=1.05, mode="bicubic", recompute_scale_factor=False)
    out_p, out_t = F.interpolate(xp, **kwargs), TF.interpolate(xt, **kwargs)
    assert tuple(out_p.shape) == (2, 3, 8, 10)
    close(out_p, out_t)
    g = rng.uniform(-1, 1, size=(2, 3, 8, 10))
    out_p.backward(pf.from_numpy(g))
    one_hot = torch.eye(80, dtype=torch.float64).reshape(80, 1, 8, 10)
    forward = TF.interpolate(one_hot, **kwargs).reshape(80, 80)  # row i: the image of input pixel i
    want = (torch.from_numpy(g).reshape(6, 80) @ forward.T).reshape(2, 3, 8, 10)
    close(xp.grad, want)
    assert not torch.allclose(want, torch.from_numpy(g))  # not the copy PyTorch's backward makes


def test_interpolate_bicubic_empty_batch_and_bfloat16(rng):
    xp, xt = pair(rng, (0, 3, 5, 6), grad=True)
    out_p, out_t = F.interpolate(xp, size=(7, 4), mode="bicubic"), TF.interpolate(xt, size=(7, 4), mode="bicubic")
    assert tuple(out_p.shape) == tuple(out_t.shape) == (0, 3, 7, 4)
    out_p.sum().backward()
    assert tuple(xp.grad.shape) == (0, 3, 5, 6)
    # bfloat16 (autocast's type) runs in float32 and rounds once: within bfloat16's precision of
    # PyTorch's float32 result on the same values
    xp, xt = pair(rng, (2, 3, 5, 6))
    xp, xt = xp.to(pf.bfloat16), xt.to(torch.bfloat16)
    out_p = F.interpolate(xp, scale_factor=1.7, mode="bicubic", align_corners=True)
    assert out_p.dtype == pf.bfloat16
    want = TF.interpolate(xt.float(), scale_factor=1.7, mode="bicubic", align_corners=True)
    np.testing.assert_allclose(to_torch(out_p.float()).numpy(), want.numpy(), rtol=2**-7, atol=2**-7)


def test_top_level_aliases(rng):
    """torch.conv2d, torch.max_pool2d, torch.adaptive_max_pool1d (a tuple), ... exist at the top level."""
    xp, xt = pair(rng, (2, 3, 7, 6))
    wp, wt = pair(rng, (4, 3, 3, 2))
    close(pf.conv2d(xp, wp, None, 1, 1), torch.conv2d(xt, wt, None, 1, 1))
    close(pf.conv_transpose2d(xp, wp.transpose(0, 1), stride=2),
          torch.conv_transpose2d(xt, wt.transpose(0, 1), stride=2))
    close(pf.max_pool2d(xp, 2), torch.max_pool2d(xt, 2))
    yp, yt = pair(rng, (2, 3, 9))
    close(pf.conv1d(yp, wp[:, :, 0]), torch.conv1d(yt, wt[:, :, 0]))
    close(pf.avg_pool1d(yp, 3), torch.avg_pool1d(yt, 3))
    close(pf.adaptive_avg_pool1d(yp, 4), torch.adaptive_avg_pool1d(yt, 4))
    (vp, ip), (vt, it) = pf.adaptive_max_pool1d(yp, 4), torch.adaptive_max_pool1d(yt, 4)
    close(vp, vt)
    assert_matches(ip, it)


# ---- pooling and interpolate errors ----------------------------------------------------------------------------

POOL_ERRORS = [
    ("max 2-d input", lambda M: M.max_pool2d(M.zeros(4, 4), 2), "3D or 4D"),
    ("max pad too big", lambda M: M.max_pool2d(M.zeros(1, 2, 5, 5), 3, padding=2),
     "pad should be at most half of kernel size"),
    ("max output too small", lambda M: M.max_pool2d(M.zeros(1, 4, 5, 5), 7),
     "Given input size: \\(4x5x5\\). Calculated output size: \\(4x0x0\\). Output size is too small"),
    ("max zero channels", lambda M: M.max_pool2d(M.zeros(2, 0, 5, 5), 2, return_indices=True),
     "Expected 3D or 4D \\(batch mode\\) tensor with optional 0 dim batch size for input"),
    ("avg pad too big", lambda M: M.avg_pool2d(M.zeros(1, 2, 5, 5), 3, padding=2),
     "pad should be at most half of kernel size"),
    ("avg divisor 0", lambda M: M.avg_pool2d(M.zeros(1, 2, 5, 5), 2, divisor_override=0), "divisor must be not zero"),
    ("avg output too small", lambda M: M.avg_pool2d(M.zeros(1, 4, 5, 5), 7), "Output size is too small"),
    ("adaptive 2-d input", lambda M: M.adaptive_avg_pool2d(M.zeros(4, 4), 2), "Expected 3D or 4D tensor"),
    ("adaptive negative", lambda M: M.adaptive_avg_pool2d(M.zeros(1, 2, 4, 4), -1),
     "elements of output_size must be greater than or equal to 0"),
    ("adaptive empty", lambda M: M.adaptive_avg_pool2d(M.zeros(1, 2, 0, 3), 2),
     "Expected input to have non-zero size for non-batch dimensions"),
    ("adaptive max 2-d", lambda M: M.adaptive_max_pool2d(M.zeros(4, 4), 2), "Expected 3D or 4D tensor"),
    ("interp both", lambda M: M.interpolate(M.zeros(1, 1, 4, 4), size=3, scale_factor=2),
     "only one of size or scale_factor should be defined"),
    ("interp neither", lambda M: M.interpolate(M.zeros(1, 1, 4, 4)), "either size or scale_factor should be defined"),
    ("interp align nearest", lambda M: M.interpolate(M.zeros(1, 1, 4, 4), size=3, align_corners=True),
     "align_corners option can only be set with the interpolating modes"),
    ("interp size length", lambda M: M.interpolate(M.zeros(1, 1, 4, 4), size=(3, 3, 3)),
     "Input and output must have the same number of spatial dimensions"),
    ("interp bilinear 3-d", lambda M: M.interpolate(M.zeros(2, 3, 4), size=3, mode="bilinear"),
     "Got 3D input, but bilinear mode needs 4D input"),
    ("interp linear 4-d", lambda M: M.interpolate(M.zeros(1, 2, 3, 4), size=3, mode="linear"),
     "Got 4D input, but linear mode needs 3D input"),
    ("interp bad mode", lambda M: M.interpolate(M.zeros(1, 2, 3, 4), size=3, mode="cubic"), "got cubic"),
    ("bicubic 3-d", lambda M: M.interpolate(M.zeros(2, 3, 4), size=3, mode="bicubic"),
     "Only 3D, 4D and 5D input Tensors supported \\(got 3D\\).*\\(got bicubic\\)"),
    ("bicubic 5-d", lambda M: M.interpolate(M.zeros(1, 2, 3, 4, 4), size=3, mode="bicubic"),
     "Only 3D, 4D and 5D input Tensors supported \\(got 5D\\).*\\(got bicubic\\)"),
    ("bicubic size 0", lambda M: M.interpolate(M.zeros(1, 2, 3, 4), size=(0, 2), mode="bicubic"),
     "Input and output sizes should be greater than 0"),
    ("bicubic empty input", lambda M: M.interpolate(M.zeros(1, 2, 0, 4), size=3, mode="bicubic"),
     "Input and output sizes should be greater than 0"),
    ("bicubic integer input", lambda M: M.interpolate(M.zeros(1, 2, 3, 4, dtype=M.int64), size=3, mode="bicubic"),
     "not implemented for"),
    ("upsample no channels", lambda M: M.interpolate(M.zeros(1, 0, 3, 4), size=3, mode="bicubic"),
     "Non-empty 4D data tensor expected but got a tensor with sizes \\[1, 0, 3, 4\\]"),
    ("upsample no channels bilinear", lambda M: M.interpolate(M.zeros(2, 0, 3, 4), size=3, mode="bilinear"),
     "Non-empty 4D data tensor expected"),
    ("interp size overflow", lambda M: M.interpolate(M.zeros(1, 2, 3, 4), size=2**40), "overflow"),
    ("adaptive size overflow", lambda M: M.adaptive_avg_pool2d(M.zeros(1, 2, 3, 4), 2**40), "overflow"),
    ("interp size 0", lambda M: M.interpolate(M.zeros(1, 2, 3, 4), size=0),
     "Input and output sizes should be greater than 0"),
]


@pytest.mark.parametrize("name,fn,match", POOL_ERRORS, ids=[c[0] for c in POOL_ERRORS])
def test_pool_errors(name, fn, match):
    raises_like_torch(lambda: fn(_Plugflow()), lambda: fn(_Torch()), match)


@pytest.mark.parametrize("size, stride", [((1, 1, 7, 7), (0, 0, 1, 1)), ((2, 3, 5, 5), (1, 1, 1, 1)),
                                          ((1, 2, 7, 3), (2, 2, 3, 1))])
def test_conv2d_of_an_input_whose_elements_share_memory(size, stride):
    # Found by the fuzzer: oneDNN refused overlapping strides ("could not construct a memory
    # descriptor using strides"); such an input is copied dense first.
    buf = torch.randn(200)
    w = torch.randn(3, size[1], 2, 1)
    x = buf.as_strided(size, stride).requires_grad_(False)
    xp = pf.from_numpy(buf.numpy().copy()).as_strided(size, stride)
    assert_matches(pf.nn.functional.conv2d(xp, pf.from_numpy(w.numpy().copy())), torch.nn.functional.conv2d(x, w))
