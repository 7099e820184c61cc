"""The CPU plugin's vectorized float32/float64 reductions (sum, mean, amax, amin, max, min,
argmax, argmin over all elements, a contiguous dim and a non-last dim): sizes that leave vector and row-group
tails, long sums' accuracy, NaN/inf/-0.0 and strided inputs, against PyTorch."""

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_matches, from_torch

# Around the kernels' 64 lanes, 8-row groups and 2048-wide tiles, and long enough to be split
# across threads.
LENGTHS = [1, 7, 63, 64, 65, 127, 1000, 1023, 1024 + 65, 4097, 100003]
SHAPES = [(1, 65), (8, 64), (9, 7), (13, 37), (31, 129), (64, 1024), (1000, 3), (17, 2049), (100003, 5), (4096, 33)]


def rand(shape, dtype, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape)).to(getattr(torch, dtype))


def ops(t, dim=None):
    """The reductions under test over all elements (dim None) or one dim."""
    if dim is None:
        return {"sum": t.sum(), "mean": t.mean(), "amax": t.amax(), "amin": t.amin(), "max": t.max(), "min": t.min(),
                "argmax": t.argmax(), "argmin": t.argmin()}
    mx, mn = t.max(dim), t.min(dim)
    return {"sum": t.sum(dim), "mean": t.mean(dim), "amax": t.amax(dim), "amin": t.amin(dim),
            "max": mx.values, "min": mn.values, "max.indices": mx.indices, "min.indices": mn.indices,
            "argmax": t.argmax(dim), "argmin": t.argmin(dim)}


def assert_all(p, t, dim=None):
    got, want = ops(p, dim), ops(t, dim)
    for name in want:
        assert_matches(got[name], want[name])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", LENGTHS)
def test_all_elements(dtype, n):
    t = rand(n, dtype, n)
    assert_all(from_torch(t), t)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES)
def test_along_dims(dtype, shape):
    t = rand(shape, dtype, shape[0])
    p = from_torch(t)
    for dim in (0, 1):
        assert_all(p, t, dim)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 1000), (5, 64), (2, 4097), (6000,)])
def test_ties_first_index(dtype, shape):
    # Few distinct values: the extremes repeat, and the first index must win.
    t = torch.from_numpy(np.random.default_rng(3).integers(-3, 4, shape)).to(getattr(torch, dtype))
    p = from_torch(t)
    assert_all(p, t)
    assert_all(p, t, len(shape) - 1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_three_dims(dtype):
    t = rand((6, 130, 70), dtype)
    p = from_torch(t)
    for dim in (0, 1, 2, (0, 2), (1, 2)):
        assert_matches(p.sum(dim), t.sum(dim))
        assert_matches(p.amax(dim), t.amax(dim))
        assert_matches(p.amin(dim), t.amin(dim))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_strided_inputs(dtype):
    t = rand((300, 260), dtype)
    p = from_torch(t)
    for view_p, view_t in [(p.t(), t.t()), (p[:, ::3], t[:, ::3]), (p[::2, 1:], t[::2, 1:])]:
        assert_all(view_p, view_t)
        for dim in (0, 1):
            assert_all(view_p, view_t, dim)


def test_long_float32_sums_accurate():
    # float32 0.1 summed 2^22 times: the float64 sum of the same float32 values is the exact
    # answer to ~1e-16. PyTorch's cascade gets ~1.5e-7 relative; plugflow must do no worse.
    n = 1 << 22
    x = np.full(n, 0.1, np.float32)
    exact = x.astype(np.float64).sum()
    p = pf.from_numpy(x)
    assert abs(p.sum().item() - exact) / exact < 1.5e-7
    assert abs(p.mean().item() - exact / n) / (exact / n) < 1.5e-7
    rows = p.view(1024, 4096)
    # Within one float32 ulp of the correctly rounded sums.
    assert np.allclose(rows.sum(1).numpy(), np.float32(exact / 1024), rtol=1.2e-7, atol=0)
    cols = p.view(1 << 16, 64)
    assert np.allclose(cols.sum(0).numpy(), np.float32(exact / 64), rtol=1.2e-7, atol=0)
    # Random signs: the error scale is the sum of magnitudes.
    y = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    ref = y.astype(np.float64)
    assert abs(pf.from_numpy(y).sum().item() - ref.sum()) < 1e-7 * np.abs(ref).sum()
    ym = pf.from_numpy(y).view(2048, 2048)
    assert np.allclose(ym.sum(0).numpy(), ref.reshape(2048, 2048).sum(0), rtol=0, atol=1e-5 * 2048)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("width", [200, 1024])  # the kernels' short and long runs
@pytest.mark.parametrize("pos", [0, 5, 63, 64, 150, 199])
def test_nan_propagates(dtype, width, pos):
    pos = pos * width // 200
    t = rand((4, width), dtype)
    t[1, pos] = float("nan")
    t[3, pos] = float("nan")
    t[3, width - 1 - pos] = float("nan")
    p = from_torch(t)
    assert_all(p, t)
    for dim in (0, 1):
        assert_all(p, t, dim)
    flat_t = t.reshape(-1)[: width + pos + 1]  # the NaN is the last element
    assert_all(from_torch(flat_t.contiguous()), flat_t)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_infinities(dtype):
    t = rand((16, 300), dtype)
    t[2, 7] = float("inf")
    t[5, 200] = float("-inf")
    t[9] = float("-inf")  # a row of only -inf: amax is -inf
    t[11] = float("inf")
    p = from_torch(t)
    assert_all(p, t)
    for dim in (0, 1):
        assert_all(p, t, dim)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_signed_zeros(dtype):
    for n in (3, 100, 4097):
        neg = torch.full((n,), -0.0, dtype=getattr(torch, dtype))
        p = from_torch(neg)
        # All -0.0: the extremes are -0.0; the sum is +0.0 as PyTorch's.
        for name in ("amax", "amin", "max", "min"):
            v = getattr(p, name)().item()
            assert v == 0 and np.signbit(v), (name, n)
        assert not np.signbit(p.sum().item())
        assert not np.signbit(torch.sum(neg).item())
        # Mixed zeros: the sign of the extreme is unspecified (PyTorch's depends on the layout).
        mixed = from_torch(torch.tensor([-0.0, 0.0] * n, dtype=getattr(torch, dtype)))
        assert mixed.amax().item() == 0 and mixed.amin().item() == 0
        # max/min with an index: the first zero, and its sign.
        values, indices = mixed.max(0)
        assert indices.item() == 0 and np.signbit(values.item())
        values, indices = from_torch(torch.tensor([0.0, -0.0] * n, dtype=getattr(torch, dtype))).min(0)
        assert indices.item() == 0 and not np.signbit(values.item())
    cols = from_torch(torch.full((20, 70), -0.0, dtype=getattr(torch, dtype)))
    assert np.signbit(cols.amax(0).numpy()).all() and np.signbit(cols.amin(1).numpy()).all()


def test_empty():
    e = torch.zeros((0, 5))
    p = from_torch(e)
    assert_matches(p.sum(), e.sum())
    assert_matches(p.sum(0), e.sum(0))
    assert_matches(p.mean(0), e.mean(0))
    assert_matches(p.sum(1), e.sum(1))
    with pytest.raises(Exception):
        p.amax()


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_int_unchanged(dtype):
    t = torch.from_numpy(np.random.default_rng(2).integers(-1000, 1000, (130, 70))).to(getattr(torch, dtype))
    p = from_torch(t)
    for args in ((), (0,), (1,)):
        for op in ("sum", "amax", "amin"):
            assert_matches(getattr(p, op)(*args), getattr(t, op)(*args))
