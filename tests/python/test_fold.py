"""Sliding blocks against PyTorch: Tensor.unfold (windows as a view), F.unfold / nn.Unfold (im2col)
and F.fold / nn.Fold (col2im), values and gradients on random geometry and layouts, and the
errors for bad arguments."""

import numpy as np
import pytest
import torch

import plugflow as pf

from helpers import assert_matches, assert_same_outcome, backward_both, random_pair, seeded_rng

LAYOUTS = ["contiguous", "transposed", "channels_last", "strided"]


def random_geometry(rng):
    pair = lambda high, low=1: tuple(int(v) for v in rng.integers(low, high + 1, 2))  # noqa: E731
    return {"kernel_size": pair(3), "dilation": pair(2), "padding": pair(2, 0), "stride": pair(3)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batched", [True, False])
def test_unfold_and_fold_match_torch(layout, batched):
    rng = seeded_rng()
    for _ in range(6):
        geometry = random_geometry(rng)
        size = tuple(int(v) for v in rng.integers(4, 9, 2))
        shape = ((int(rng.integers(1, 3)),) if batched else ()) + (int(rng.integers(1, 4)),) + size
        p, t = random_pair(rng, shape, layout=layout, grad=True)
        try:
            cols_t = torch.nn.functional.unfold(t if batched else t[None], **geometry)
        except RuntimeError:  # no block fits: both refuse
            assert_same_outcome(lambda lib: lib.nn.functional.unfold((p if lib is pf else t), **geometry))
            continue
        if not batched:
            cols_t = cols_t[0]
        cols_p = pf.nn.functional.unfold(p, **geometry)
        assert_matches(cols_p, cols_t)
        backward_both(rng, cols_p, cols_t)
        assert_matches(p.grad, t.grad)
        # fold is unfold's adjoint: back to the image, with overlaps summed
        c_p, c_t = random_pair(rng, tuple(cols_t.shape), layout="transposed" if layout != "contiguous" else layout,
                               grad=True)
        fold_t = torch.nn.functional.fold(c_t, size, **geometry)
        fold_p = pf.nn.functional.fold(c_p, size, **geometry)
        assert_matches(fold_p, fold_t)
        backward_both(rng, fold_p, fold_t)
        assert_matches(c_p.grad, c_t.grad)


def test_modules_match_torch():
    rng = seeded_rng()
    p, t = random_pair(rng, (2, 3, 6, 5))
    args = dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    unfold_p, unfold_t = pf.nn.Unfold(**args), torch.nn.Unfold(**args)
    assert repr(unfold_p) == repr(unfold_t)
    cols_p, cols_t = unfold_p(p), unfold_t(t)
    assert_matches(cols_p, cols_t)
    fold_p, fold_t = pf.nn.Fold((6, 5), **args), torch.nn.Fold((6, 5), **args)
    assert repr(fold_p) == repr(fold_t)
    assert_matches(fold_p(cols_p), fold_t(cols_t))


@pytest.mark.parametrize("case", [
    ((3, 4, 5), dict(kernel_size=0)), ((3, 4, 5), dict(kernel_size=2, stride=0)),
    ((3, 4, 5), dict(kernel_size=2, padding=-1)), ((3, 4, 5), dict(kernel_size=2, dilation=0)),
    ((3, 4, 5), dict(kernel_size=6)), ((2, 3, 4, 5, 6), dict(kernel_size=2)), ((4, 5), dict(kernel_size=2)), ((5,), dict(kernel_size=1)), ((), dict(kernel_size=1)),
    ((0, 3, 4, 5), dict(kernel_size=2)), ((2, 0, 4, 5), dict(kernel_size=2)), ((2, 3, 4, 5), dict(kernel_size=(2, 2, 2))),
], ids=str)
def test_unfold_bad_arguments_raise_as_torch(case):
    shape, kwargs = case
    assert_same_outcome(lambda lib: lib.nn.functional.unfold(lib.ones(shape), **kwargs))


@pytest.mark.parametrize("case", [
    ((1, 12, 9), (4, 4), dict(kernel_size=2)),     # 12 rows: divisible by 4, 9 blocks: right
    ((1, 10, 9), (4, 4), dict(kernel_size=2)),     # rows not divisible by kh*kw
    ((1, 12, 8), (4, 4), dict(kernel_size=2)),     # wrong number of blocks
    ((12, 9), (4, 4), dict(kernel_size=2)),        # unbatched
    ((1, 12, 9), (1, 1), dict(kernel_size=2)),     # no block fits the output
    ((1, 1, 12, 9), (4, 4), dict(kernel_size=2)),  # 4-d input
    ((0, 12, 9), (4, 4), dict(kernel_size=2)),     # empty batch
    ((12,), (4, 4), dict(kernel_size=2)),          # 1-d input
], ids=str)
def test_fold_arguments_behave_as_torch(case):
    shape, size, kwargs = case
    rng = seeded_rng()
    data = rng.standard_normal(shape)
    assert_same_outcome(lambda lib: lib.nn.functional.fold(lib.tensor(data), size, **kwargs))


def test_tensor_unfold_matches_torch():
    rng = seeded_rng()
    for _ in range(30):
        nd = int(rng.integers(0, 4))
        shape = tuple(int(v) for v in rng.integers(1, 7, nd))
        dim = int(rng.integers(-max(nd, 1), max(nd, 1)))
        length = shape[dim] if nd else 1
        size, step = int(rng.integers(0, length + 1)), int(rng.integers(1, 4))
        p, t = random_pair(rng, shape, layout=LAYOUTS[int(rng.integers(0, 4))], grad=True)
        out_p, out_t = p.unfold(dim, size, step), t.unfold(dim, size, step)
        assert out_p.stride() == out_t.stride()
        assert_matches(out_p, out_t)
        backward_both(rng, out_p, out_t)  # overlapping windows accumulate
        assert_matches(p.grad, t.grad)


@pytest.mark.parametrize("args", [(0, 7, 1), (0, 2, 0), (0, 2, -1), (2, 1, 1), (-2, 1, 1)], ids=str)
def test_tensor_unfold_bad_arguments_raise_as_torch(args):
    assert_same_outcome(lambda lib: lib.ones(5).unfold(*args))
