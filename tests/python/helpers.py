"""Shared helpers for the plugflow pytest suite: dtype tables, conversion to and from torch
(through numpy, so the comparison never goes through plugflow's own printing or ops), and
assertions against PyTorch results."""

import numpy as np
import torch

import plugflow as pf

DTYPE_NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
               "float64"]
FLOAT_NAMES = ["float16", "bfloat16", "float32", "float64"]
INT_NAMES = ["uint8", "int8", "int16", "int32", "int64"]


def pf_dtype(name):
    return getattr(pf, name)


def torch_dtype(name):
    return getattr(torch, name)


def dtype_name(dtype):
    """'float32' for plugflow.float32 and torch.float32 alike."""
    return repr(dtype).split(".")[-1]


def to_torch(t):
    """A torch tensor with t's values, dtype and shape (a copy)."""
    if t.dtype is pf.bfloat16:
        return torch.from_numpy(t.float().cpu().numpy().copy()).bfloat16()
    return torch.from_numpy(t.cpu().numpy().copy())


def from_torch(t):
    """A plugflow tensor with t's values, dtype and shape (a copy)."""
    if t.dtype == torch.bfloat16:
        return pf.from_numpy(t.float().numpy().copy()).bfloat16()
    return pf.from_numpy(t.detach().contiguous().numpy().copy())


# Default (rtol, atol) per dtype: loose enough for a different but correct libm/BLAS.
TOLERANCE = {"float16": (2e-3, 1e-3), "bfloat16": (1.6e-2, 1e-2), "float32": (1e-5, 1e-5),
             "float64": (1e-10, 1e-10)}


def assert_matches(actual, expected, rtol=None, atol=None):
    """actual (plugflow) has expected's (torch) dtype, shape and values (NaNs equal)."""
    assert isinstance(actual, pf.Tensor), f"expected a plugflow.Tensor, got {type(actual)}"
    name = dtype_name(actual.dtype)
    assert name == dtype_name(expected.dtype), (actual.dtype, expected.dtype)
    assert tuple(actual.shape) == tuple(expected.shape), (actual.shape, expected.shape)
    a = to_torch(actual)
    if name in TOLERANCE:
        default_rtol, default_atol = TOLERANCE[name]
        torch.testing.assert_close(a.double(), expected.double(), equal_nan=True,
                                   rtol=default_rtol if rtol is None else rtol,
                                   atol=default_atol if atol is None else atol)
    else:
        assert torch.equal(a, expected), f"\n{a}\n!=\n{expected}"


def random_data(rng, shape, dtype_name_, low=-5, high=5):
    """numpy data of a dtype: floats in [low, high), ints in [low, high), random bools."""
    if dtype_name_ == "bool":
        return rng.random(shape) < 0.5
    if dtype_name_ in INT_NAMES:
        lo = max(low, 0) if dtype_name_ == "uint8" else low
        return rng.integers(lo, high, size=shape).astype(dtype_name_)
    data = rng.uniform(low, high, size=shape)
    return data.astype("float32" if dtype_name_ == "bfloat16" else dtype_name_)


def make_pair(rng, shape, dtype_name_, low=-5, high=5):
    """The same random values as a plugflow tensor and a torch tensor."""
    data = random_data(rng, shape, dtype_name_, low, high)
    t = torch.from_numpy(np.ascontiguousarray(data))
    if dtype_name_ == "bfloat16":
        t = t.bfloat16()
    return from_torch(t), t


def random_shape(rng, max_dims=4, max_size=5):
    return tuple(int(s) for s in rng.integers(1, max_size + 1, size=rng.integers(0, max_dims + 1)))
