"""dtype objects, type promotion for every pair (tensors, 0-d tensors, Python scalars) and
casts between every pair of dtypes, against PyTorch."""

import copy
import itertools
import pickle

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import DTYPE_NAMES, FLOAT_NAMES, assert_matches, dtype_name, pf_dtype, torch_dtype

PAIRS = list(itertools.product(DTYPE_NAMES, DTYPE_NAMES))


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_dtype_objects(name):
    dt, tdt = pf_dtype(name), torch_dtype(name)
    assert repr(dt) == f"plugflow.{name}" == str(dt)
    assert dt.is_floating_point == tdt.is_floating_point
    assert dt.itemsize == torch.empty(0, dtype=tdt).element_size()
    assert dt.is_signed == tdt.is_signed
    assert not dt.is_complex
    assert pf.zeros(1, dtype=dt).dtype is dt
    assert pickle.loads(pickle.dumps(dt)) is dt
    assert copy.deepcopy(dt) is dt
    assert isinstance(dt, pf.dtype)


def test_aliases_and_python_types():
    assert pf.float is pf.float32 and pf.double is pf.float64 and pf.half is pf.float16
    assert pf.long is pf.int64 and pf.int is pf.int32 and pf.short is pf.int16
    # PyTorch accepts the Python types as dtypes.
    assert pf.zeros(1, dtype=float).dtype is pf.float64
    assert pf.zeros(1, dtype=int).dtype is pf.int64
    assert pf.zeros(1, dtype=bool).dtype is pf.bool
    assert pf.zeros(1, dtype="float16").dtype is pf.float16
    with pytest.raises(TypeError, match="unknown dtype 'floatx'"):
        pf.zeros(1, dtype="floatx")
    with pytest.raises(TypeError):
        pf.zeros(1, dtype=3)


@pytest.mark.parametrize("a,b", PAIRS)
def test_promote_types(a, b):
    assert dtype_name(pf.promote_types(pf_dtype(a), pf_dtype(b))) == \
        dtype_name(torch.promote_types(torch_dtype(a), torch_dtype(b)))


@pytest.mark.parametrize("a,b", PAIRS)
def test_binary_result_dtype_tensors(a, b):
    x, y = pf.ones(2, dtype=pf_dtype(a)), pf.ones(3, 1, dtype=pf_dtype(b))
    tx, ty = torch.ones(2, dtype=torch_dtype(a)), torch.ones(3, 1, dtype=torch_dtype(b))
    expected = dtype_name(torch.result_type(tx, ty))
    assert dtype_name(pf.result_type(x, y)) == expected
    if a == b == "bool":
        assert (x + y).dtype is pf.bool
    else:
        assert dtype_name((x + y).dtype) == expected
        assert dtype_name((x * y).dtype) == expected
    assert (x == y).dtype is pf.bool


@pytest.mark.parametrize("a,b", PAIRS)
def test_binary_result_dtype_zero_dim(a, b):
    # A 0-d tensor only wins when it is of a higher category (bool < int < float).
    x, y = pf.ones(2, dtype=pf_dtype(a)), pf.ones((), dtype=pf_dtype(b))
    tx, ty = torch.ones(2, dtype=torch_dtype(a)), torch.ones((), dtype=torch_dtype(b))
    assert dtype_name(pf.result_type(x, y)) == dtype_name(torch.result_type(tx, ty))
    assert dtype_name(pf.result_type(y, x)) == dtype_name(torch.result_type(ty, tx))
    if not a == b == "bool":
        assert dtype_name((x * y).dtype) == dtype_name((tx * ty).dtype)


@pytest.mark.parametrize("a", DTYPE_NAMES)
@pytest.mark.parametrize("scalar", [True, 2, 2.5], ids=["bool", "int", "float"])
def test_binary_result_dtype_python_scalar(a, scalar):
    x, tx = pf.ones(2, dtype=pf_dtype(a)), torch.ones(2, dtype=torch_dtype(a))
    expected = torch.result_type(tx, scalar)
    assert dtype_name(pf.result_type(x, scalar)) == dtype_name(expected)
    assert dtype_name((x * scalar).dtype) == dtype_name((tx * scalar).dtype)
    assert dtype_name((scalar * x).dtype) == dtype_name((scalar * tx).dtype)
    if a != "bool":
        assert dtype_name((x + scalar).dtype) == dtype_name((tx + scalar).dtype)
    if a != "bool" and scalar is not True:
        assert dtype_name((scalar - x).dtype) == dtype_name((scalar - tx).dtype)
    else:  # PyTorch refuses `-` on bools: plugflow too
        with pytest.raises(RuntimeError, match="Subtraction"):
            scalar - x
    assert dtype_name((x / scalar).dtype) == dtype_name((tx / scalar).dtype)


def test_numpy_scalars_are_numbers():
    x = pf.ones(2, dtype=pf.int32)
    assert (x + np.int64(2)).dtype is pf.int32
    assert (x * np.float32(1.5)).dtype is pf.float32
    assert (x + np.float64(0.5)).tolist() == [1.5, 1.5]


CAST_VALUES = [0.0, 1.0, 2.0, 3.75, -1.0, -2.5, 100.5, 0.25]


@pytest.mark.parametrize("src,dst", PAIRS)
def test_cast_every_pair(src, dst):
    values = CAST_VALUES
    if dst == "uint8" or src == "uint8":
        values = [abs(v) for v in values]  # negative -> uint8 is undefined behaviour
    t_src = torch.tensor(values, dtype=torch.float64).to(torch_dtype(src))
    p_src = pf.tensor(values, dtype=pf.float64).to(pf_dtype(src))
    assert_matches(p_src, t_src)
    out = p_src.to(pf_dtype(dst))
    assert_matches(out, t_src.to(torch_dtype(dst)))
    # Casting a non-contiguous view goes through the same path.
    assert_matches(p_src[::2].to(pf_dtype(dst)), t_src[::2].to(torch_dtype(dst)))


@pytest.mark.parametrize("method,name", [("float", "float32"), ("double", "float64"), ("half", "float16"),
                                         ("bfloat16", "bfloat16"), ("long", "int64"), ("int", "int32"),
                                         ("short", "int16"), ("char", "int8"), ("byte", "uint8"),
                                         ("bool", "bool")])
def test_cast_methods(method, name):
    t = pf.tensor([0.0, 1.5, 3.0])
    out = getattr(t, method)()
    assert out.dtype is pf_dtype(name)
    assert_matches(out, getattr(torch.tensor([0.0, 1.5, 3.0]), method)())


def test_to_returns_self_when_nothing_changes():
    t = pf.ones(3)
    assert t.to(pf.float32) is t
    assert t.float() is t
    assert t.to("cpu") is t
    assert t.cpu() is t
    assert t.to(pf.float32, copy=True) is not t
    assert t.to(t) is t
    assert t.to(device="cpu", dtype=pf.float64).dtype is pf.float64
    assert t.to(None, pf.int32).dtype is pf.int32
    assert t.type_as(pf.ones(1, dtype=pf.int16)).dtype is pf.int16
    with pytest.raises(TypeError, match="argument 'memory_format' must be torch.memory_format"):
        t.to(memory_format=1)
    assert t.to(memory_format=pf.contiguous_format) is t and t.to(memory_format=pf.preserve_format) is t


@pytest.mark.parametrize("name", FLOAT_NAMES)
def test_float_special_values_survive_casts(name):
    values = [float("inf"), -float("inf"), float("nan"), -0.0]
    t = pf.tensor(values).to(pf_dtype(name))
    assert_matches(t, torch.tensor(values).to(torch_dtype(name)))
    assert_matches(t.to(pf.float64), torch.tensor(values, dtype=torch.float64))
