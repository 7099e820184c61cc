"""F.grid_sample and F.affine_grid against PyTorch 1.13: every interpolation mode (bilinear,
nearest, bicubic in 2-d), padding mode (zeros, border, reflection) and align_corners, 4-d and 5-d,
values and both gradients (input and grid) on fresh random inputs with odd sizes in several memory
layouts, grid points inside and outside [-1, 1], float32 and float64; affine_grid's grid and its
gradient in theta; empty batches and grids; PyTorch's exceptions and warnings for bad input.

Every test draws a new seed (printed, so a failure can be replayed with SEED=<n>)."""

import functools
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn.functional as F
from helpers import assert_matches, backward_both, random_pair, seeded_rng

CASES = range(4)  # random configurations per parametrized test
TOL = {"float64": (1e-10, 1e-10), "float32": (1e-5, 1e-5)}
INPUT_LAYOUTS = ["contiguous", "channels_last", "strided", "transposed"]
GRID_LAYOUTS = ["contiguous", "transposed", "strided"]
MODES_2D = ["bilinear", "nearest", "bicubic"]
MODES_3D = ["bilinear", "nearest"]
PADDINGS = ["zeros", "border", "reflection"]
# grid points up to 30% outside [-1, 1], so every padding mode is exercised
grid_pair = functools.partial(random_pair, low=-1.3, high=1.3)


@pytest.fixture
def rng():
    return seeded_rng("SEED")


def close(actual, expected, dtype):
    rtol, atol = TOL[dtype]
    assert_matches(actual, expected.detach(), rtol=rtol, atol=atol)


def ints(rng, low, high, n):
    return tuple(int(v) for v in rng.integers(low, high, size=n))


def check_sample(rng, case, dtype, mode, padding, align, spatial):
    """grid_sample of random odd-sized input and grid (spatial = 2 or 3) in the case's layouts:
    output, input gradient and grid gradient against torch."""
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    in_size, out_size = ints(rng, 1, 7, spatial), ints(rng, 1, 6, spatial)
    xp, xt = random_pair(rng, (n, c) + in_size, dtype, INPUT_LAYOUTS[case % 4], grad=True)
    gp, gt = grid_pair(rng, (n,) + out_size + (spatial,), dtype, GRID_LAYOUTS[case % 3], grad=True)
    out_p = F.grid_sample(xp, gp, mode=mode, padding_mode=padding, align_corners=align)
    out_t = TF.grid_sample(xt, gt, mode=mode, padding_mode=padding, align_corners=align)
    close(out_p, out_t, dtype)
    backward_both(rng, out_p, out_t)
    close(xp.grad, xt.grad, dtype)
    close(gp.grad, gt.grad, dtype)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES_2D)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_grid_sample_2d(rng, dtype, mode, padding, align, case):
    check_sample(rng, case, dtype, mode, padding, align, 2)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES_3D)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_grid_sample_3d(rng, dtype, mode, padding, align, case):
    check_sample(rng, case, dtype, mode, padding, align, 3)


@pytest.mark.parametrize("spatial", [2, 3])
def test_grid_sample_one_gradient(rng, spatial):
    """Only the input, or only the grid, requires grad (the backward skips the other)."""
    shape = (2, 3) + (5,) * spatial
    for grad_input in (True, False):
        xp, xt = random_pair(rng, shape, grad=grad_input)
        gp, gt = grid_pair(rng, (2,) + (4,) * spatial + (spatial,), grad=not grad_input)
        out_p, out_t = F.grid_sample(xp, gp, align_corners=False), TF.grid_sample(xt, gt, align_corners=False)
        backward_both(rng, out_p, out_t)
        if grad_input:
            close(xp.grad, xt.grad, "float64")
            assert gp.grad is None
        else:
            close(gp.grad, gt.grad, "float64")
            assert xp.grad is None


def test_grid_sample_pixel_centres(rng):
    """An identity grid (affine_grid of the identity) reproduces the input in every mode."""
    xp, xt = random_pair(rng, (2, 3, 5, 7))
    theta = torch.eye(2, 3, dtype=torch.float64).expand(2, 2, 3)
    for align in (False, True):
        gp = F.affine_grid(pf.from_numpy(theta.numpy().copy()), [2, 3, 5, 7], align_corners=align)
        for mode in MODES_2D:
            out_p = F.grid_sample(xp, gp, mode=mode, align_corners=align)
            close(out_p, xt, "float64")


@pytest.mark.parametrize("spatial", [2, 3])
def test_grid_sample_empty(rng, spatial):
    """Empty batches and empty output grids give empty outputs and zero gradients."""
    for n, out in ((0, 3), (2, 0)):
        xp, xt = random_pair(rng, (n, 2) + (4,) * spatial, grad=True)
        gp, gt = grid_pair(rng, (n,) + (out,) * spatial + (spatial,), grad=True)
        out_p, out_t = F.grid_sample(xp, gp, align_corners=True), TF.grid_sample(xt, gt, align_corners=True)
        close(out_p, out_t, "float64")
        out_p.sum().backward()
        out_t.sum().backward()
        close(xp.grad, xt.grad, "float64")
        close(gp.grad, gt.grad, "float64")


def test_grid_sample_no_double_backward(rng):
    """As in PyTorch, grid_sample's backward has no derivative of its own."""
    xp, _ = random_pair(rng, (1, 2, 4, 4), grad=True)
    gp, _ = grid_pair(rng, (1, 3, 3, 2), grad=True)
    out = F.grid_sample(xp, gp, align_corners=False)
    (gx,) = pf.autograd.grad(out.sum(), [gp], create_graph=True)
    with pytest.raises(RuntimeError, match="derivative for aten::grid_sampler_2d_backward is not implemented"):
        gx.sum().backward()


# ---- affine_grid ---------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("spatial", [2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_affine_grid(rng, dtype, spatial, align, case):
    n = int(rng.integers(1, 4))
    size = [n, int(rng.integers(1, 4))] + list(ints(rng, 1 + align, 7, spatial))  # align: no unit sizes
    tp, tt = random_pair(rng, (n, spatial, spatial + 1), dtype, "transposed" if case % 2 else "contiguous",
                         grad=True)
    grid_p, grid_t = F.affine_grid(tp, size, align_corners=align), TF.affine_grid(tt, size, align_corners=align)
    close(grid_p, grid_t, dtype)
    backward_both(rng, grid_p, grid_t)
    close(tp.grad, tt.grad, dtype)
    # and the usual pipeline: warp an image by the grid, differentiable in theta
    xp, xt = random_pair(rng, size, dtype)
    close(F.grid_sample(xp, grid_p, align_corners=align), TF.grid_sample(xt, grid_t, align_corners=align), dtype)


def test_affine_grid_unit_size(rng):
    """A unit-size dim with align_corners=True warns as PyTorch and samples the centre."""
    tp, tt = random_pair(rng, (2, 2, 3))
    with pytest.warns(UserWarning, match="affine_grid behavior has changed for unit-size grids"):
        grid_p = F.affine_grid(tp, [2, 1, 1, 5], align_corners=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        close(grid_p, TF.affine_grid(tt, [2, 1, 1, 5], align_corners=True), "float64")


def test_default_align_corners_warns(rng):
    xp, _ = random_pair(rng, (1, 1, 3, 3))
    gp, _ = grid_pair(rng, (1, 2, 2, 2))
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior has changed"):
        F.grid_sample(xp, gp)
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior has changed"):
        F.affine_grid(pf.zeros(1, 2, 3), [1, 1, 3, 3])


class _Torch:
    def __getattr__(self, name):
        return getattr(TF, name) if hasattr(TF, name) else getattr(torch, name)


class _Plugflow:
    def __getattr__(self, name):
        return getattr(F, name) if hasattr(F, name) else getattr(pf, name)


def _sample(M, input_shape, grid_shape, dtype=None, grid_dtype=None, **kwargs):
    kwargs.setdefault("align_corners", False)
    return M.grid_sample(M.zeros(*input_shape, dtype=dtype or M.float32),
                         M.zeros(*grid_shape, dtype=grid_dtype or dtype or M.float32), **kwargs)


ERRORS = [
    ("mode", lambda M: _sample(M, (1, 1, 2, 2), (1, 2, 2, 2), mode="linear"),
     ValueError, "expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: 'linear'"),
    ("padding", lambda M: _sample(M, (1, 1, 2, 2), (1, 2, 2, 2), padding_mode="wrap"),
     ValueError, "expected padding_mode to be 'zeros', 'border', or 'reflection', but got: 'wrap'"),
    ("bicubic 3-d", lambda M: _sample(M, (1, 1, 2, 2, 2), (1, 2, 2, 2, 3), mode="bicubic"),
     RuntimeError, "bicubic interpolation only supports 4D input"),
    ("rank mismatch", lambda M: _sample(M, (1, 1, 2, 2), (1, 2, 2, 2, 3)),
     RuntimeError, "grid_sampler\\(\\): expected"),
    ("3-d input", lambda M: _sample(M, (1, 2, 2), (1, 2, 2)),
     RuntimeError, "grid_sampler\\(\\): expected"),
    ("batch", lambda M: _sample(M, (2, 1, 2, 2), (1, 2, 2, 2)),
     RuntimeError, "expected grid and input to have same batch size"),
    ("grid last dim", lambda M: _sample(M, (1, 1, 2, 2), (1, 2, 2, 3)),
     RuntimeError, "expected grid to have size 2 in last dimension"),
    ("empty input", lambda M: _sample(M, (1, 1, 0, 2), (1, 2, 2, 2)),
     RuntimeError, "expected input to have non-empty spatial dimensions"),
    ("integer input", lambda M: _sample(M, (1, 1, 2, 2), (1, 2, 2, 2), dtype=M.int64),
     RuntimeError, "not implemented for"),
    ("affine theta dtype", lambda M: M.affine_grid(M.zeros(1, 2, 3, dtype=M.int64), [1, 1, 2, 2], align_corners=False),
     ValueError, "Expected theta to have floating point type"),
    ("affine theta shape", lambda M: M.affine_grid(M.zeros(1, 3, 4), [1, 1, 2, 2], align_corners=False),
     ValueError, "Expected a batch of 2D affine matrices of shape Nx2x3"),
    ("affine 3-d theta shape", lambda M: M.affine_grid(M.zeros(1, 2, 3), [1, 1, 2, 2, 2], align_corners=False),
     ValueError, "Expected a batch of 3D affine matrices of shape Nx3x4"),
    ("affine size rank", lambda M: M.affine_grid(M.zeros(1, 2, 3), [1, 1, 2], align_corners=False),
     NotImplementedError, "affine_grid only supports 4D and 5D sizes"),
    ("affine zero size", lambda M: M.affine_grid(M.zeros(1, 2, 3), [1, 1, 0, 2], align_corners=False),
     ValueError, "Expected non-zero, positive output size"),
]


@pytest.mark.parametrize("name,fn,error,match", ERRORS, ids=[c[0] for c in ERRORS])
def test_errors(name, fn, error, match):
    with pytest.raises(error, match=match):
        fn(_Torch())
    with pytest.raises(error, match=match):
        fn(_Plugflow())


def test_mismatched_batch_of_theta():
    """theta's batch must be size[0]: PyTorch's view raises RuntimeError, as plugflow does."""
    with pytest.raises(RuntimeError):
        TF.affine_grid(torch.zeros(2, 2, 3), [3, 1, 2, 2], align_corners=False)
    with pytest.raises(RuntimeError):
        F.affine_grid(pf.zeros(2, 2, 3), [3, 1, 2, 2], align_corners=False)


def test_grid_sample_matches_torch_on_nan_grid():
    """A NaN grid point gives PyTorch's output (NaN for bilinear under zeros padding, the clipped
    pixel under border padding)."""
    x = np.arange(12, dtype=np.float64).reshape(1, 1, 3, 4)
    g = np.array([[[[np.nan, 0.2], [0.3, -0.4]]]])
    for padding in PADDINGS:
        for mode in MODES_2D:
            out_t = TF.grid_sample(torch.from_numpy(x), torch.from_numpy(g), mode=mode, padding_mode=padding,
                                   align_corners=False)
            out_p = F.grid_sample(pf.from_numpy(x), pf.from_numpy(g), mode=mode, padding_mode=padding,
                                  align_corners=False)
            close(out_p, out_t, "float64")
