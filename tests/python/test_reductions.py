"""Reductions over dims (int or tuple), keepdim and dtype; max/min with indices; any/all."""

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_matches, from_torch, make_pair, pf_dtype, random_dims, random_shape, torch_dtype

SEEDS = range(8)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "prod"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_reductions(seed, op, dtype):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=4, max_size=5)
    a, ta = make_pair(rng, shape, dtype, low=0.5, high=1.5)  # keeps prod well conditioned
    dims = random_dims(rng, a.dim())
    if op == "prod" and isinstance(dims, tuple):
        dims = dims[0]  # torch.prod takes one dim
    for keepdim in (False, True):
        if dims is None:
            if keepdim:
                continue
            expected = getattr(torch, op)(ta)
            assert_matches(getattr(a, op)(), expected)
            assert_matches(getattr(pf, op)(a), expected)
        else:
            expected = getattr(torch, op)(ta, dims, keepdim=keepdim)
            assert_matches(getattr(a, op)(dims, keepdim=keepdim), expected)
            assert_matches(getattr(pf, op)(a, dim=dims, keepdim=keepdim), expected)
        if a.dim() >= 2 and dims is not None:  # a non-contiguous input
            t = a.transpose(0, -1)
            tt = ta.transpose(0, -1)
            assert_matches(getattr(t, op)(dims, keepdim=keepdim), getattr(torch, op)(tt, dims, keepdim=keepdim))


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int32", "int64"])
def test_integer_sum_and_prod_promote_to_int64(dtype):
    rng = np.random.default_rng(0)
    a, ta = make_pair(rng, (3, 4), dtype, low=-3, high=4)
    assert_matches(a.sum(), ta.sum())
    assert_matches(a.sum(1), ta.sum(1))
    assert_matches(a.prod(0), ta.prod(0))


@pytest.mark.parametrize("name", ["float64", "int32", "float32"])
def test_sum_dtype_argument(name):
    a = pf.tensor([[1, 2], [3, 4]], dtype=pf.int16)
    ta = torch.tensor([[1, 2], [3, 4]], dtype=torch.int16)
    assert_matches(a.sum(dtype=pf_dtype(name)), ta.sum(dtype=torch_dtype(name)))
    assert_matches(a.sum(0, dtype=pf_dtype(name)), ta.sum(0, dtype=torch_dtype(name)))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_with_dim_returns_values_and_indices(seed, op):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=3, max_size=5) or (3,)
    a, ta = make_pair(rng, shape, "int64", low=0, high=4)  # ties: the first index wins
    dim = int(rng.integers(-a.dim(), a.dim()))
    for keepdim in (False, True):
        got = getattr(a, op)(dim, keepdim=keepdim)
        expected = getattr(ta, op)(dim, keepdim=keepdim)
        assert_matches(got.values, expected.values)
        assert_matches(got.indices, expected.indices)
        values, indices = got
        assert_matches(values, expected[0])
        assert type(got).__name__ == op
    assert_matches(getattr(a, op)(), getattr(ta, op)())
    b, tb = make_pair(rng, shape, "int64")
    assert_matches(getattr(pf, op)(a, b), getattr(torch, op)(ta, tb))


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_argmin(op):
    rng = np.random.default_rng(3)
    a, ta = make_pair(rng, (4, 5, 3), "float32")
    assert_matches(getattr(a, op)(), getattr(ta, op)())
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            assert_matches(getattr(pf, op)(a, dim, keepdim), getattr(torch, op)(ta, dim, keepdim))


def test_nan_propagates_through_max():
    t = pf.tensor([1.0, float("nan"), 3.0])
    assert np.isnan(t.max().item())
    assert np.isnan(t.amax().item())
    assert t.argmax().item() == 1


@pytest.mark.parametrize("op", ["any", "all"])
@pytest.mark.parametrize("dtype", ["bool", "uint8", "int64", "float32"])
def test_any_all(op, dtype):
    data = [[0, 1, 0], [0, 0, 0], [1, 1, 1]]
    a, ta = pf.tensor(data, dtype=pf_dtype(dtype)), torch.tensor(data, dtype=torch_dtype(dtype))
    assert_matches(getattr(a, op)(), getattr(ta, op)())
    for dim in (0, 1, -1):
        assert_matches(getattr(a, op)(dim), getattr(ta, op)(dim))
        assert_matches(getattr(a, op)(dim, keepdim=True), getattr(ta, op)(dim, keepdim=True))


def test_reduction_errors():
    with pytest.raises(IndexError, match="Dimension out of range"):
        pf.ones(2, 3).sum(5)
    with pytest.raises(IndexError):
        pf.ones(2, 3).max(2)


def test_empty_sum_is_zero():
    assert_matches(pf.zeros(0, 3).sum(0), torch.zeros(0, 3).sum(0))
    assert pf.zeros(0).sum().item() == 0.0


def nan_pair(rng, shape, dtype):
    """Values in [-2, 2) with about a third NaN, as a plugflow and a torch tensor."""
    data = np.where(rng.random(shape) < 0.3, np.nan, rng.uniform(-2, 2, size=shape))
    t = torch.from_numpy(np.ascontiguousarray(data)).to(torch_dtype(dtype))
    return from_torch(t), t


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_nansum_skips_nan(seed, dtype):
    rng = np.random.default_rng(seed)
    a, ta = nan_pair(rng, random_shape(rng, max_dims=4, max_size=5), dtype)
    dims = random_dims(rng, a.dim())
    dim_args = () if dims is None else (dims,)
    for keepdim in (False, True):
        expected = torch.nansum(ta, *dim_args, keepdim=keepdim)
        assert_matches(pf.nansum(a, *dim_args, keepdim=keepdim), expected)
        assert_matches(a.nansum(*dim_args, keepdim=keepdim), expected)
    if a.dim() >= 2:  # a non-contiguous input
        assert_matches(a.transpose(0, -1).nansum(0), ta.transpose(0, -1).nansum(0))


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int32", "int64"])
def test_nansum_of_integers_is_int64(dtype):
    a, ta = make_pair(np.random.default_rng(0), (3, 4), dtype, low=-3, high=4)
    assert_matches(a.nansum(), ta.nansum())
    assert_matches(a.nansum(1, keepdim=True), ta.nansum(1, keepdim=True))
    assert_matches(a.nansum(0, dtype=pf.float64), ta.nansum(0, dtype=torch.float64))


def test_nansum_empty_out_and_backward():
    assert_matches(pf.zeros(0, 3).nansum(0), torch.zeros(0, 3).nansum(0))
    a, ta = nan_pair(np.random.default_rng(1), (3, 4), "float64")
    out, tout = pf.empty(0, dtype=pf.float64), torch.empty(0, dtype=torch.float64)
    assert pf.nansum(a, out=out) is out
    assert_matches(out, torch.nansum(ta, out=tout))
    a.requires_grad_(True)
    ta.requires_grad_(True)
    g = pf.nansum(a, 1)
    tg = torch.nansum(ta, 1)
    assert g.grad_fn.name() == tg.grad_fn.name()
    g.backward(pf.ones(3, dtype=pf.float64) * 2)
    tg.backward(torch.ones(3, dtype=torch.float64) * 2)
    assert_matches(a.grad, ta.grad)


def test_max_min_argument_errors_as_torch():
    # keepdim without dim is not one of PyTorch's overloads (TypeError); dim=None reads as a name.
    x = torch.randn(3, 4)
    for name in ("max", "min"):
        for call in (lambda lib, t: getattr(lib, name)(t, keepdim=True), lambda lib, t: getattr(lib, name)(t, dim=None),
                     lambda lib, t: getattr(lib, name)(t, t, keepdim=True), lambda lib, t: getattr(t, name)(keepdim=False)):
            outcomes = []
            for lib, t in ((torch, x), (pf, pf.tensor(x.numpy()))):
                try:
                    call(lib, t)
                    outcomes.append(None)
                except (TypeError, RuntimeError) as e:
                    outcomes.append(type(e))
            assert outcomes[0] is not None and outcomes[1] is outcomes[0]
