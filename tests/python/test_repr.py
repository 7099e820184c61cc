"""repr/str of tensors, dtypes, devices and sizes: PyTorch's, with plugflow's names."""

import math

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import from_torch


def torch_style(text):
    return text.replace("torch.", "plugflow.")


def rng_values(seed, shape, scale=1.0):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape) * scale).float()


CASES = {
    "int-valued floats": lambda: torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
    "fractions": lambda: torch.tensor([0.5, -1.25, 3.14159]),
    "random 2-d": lambda: rng_values(0, (3, 4)),
    "random 3-d": lambda: rng_values(1, (2, 3, 2)),
    "sci large": lambda: torch.tensor([1e10, 1.0, -3.5]),
    "sci small": lambda: torch.tensor([1e-5, 1.0]),
    "sci ints": lambda: torch.tensor([1e9, 1.0]),
    "int mode wide": lambda: torch.tensor([10000.0, 1.0]),
    "nan inf": lambda: torch.tensor([float("nan"), float("inf"), -float("inf"), 1.5]),
    "nan inf int-mode": lambda: torch.tensor([float("nan"), float("inf"), 2.0]),
    "all zero": lambda: torch.zeros(2, 2),
    "negative zero": lambda: torch.tensor([-0.0, 1.0]),
    "int64": lambda: torch.tensor([[1, -20], [300, 4]]),
    "int32": lambda: torch.tensor([1, 2], dtype=torch.int32),
    "uint8": lambda: torch.tensor([0, 255], dtype=torch.uint8),
    "int8": lambda: torch.tensor([-128, 127], dtype=torch.int8),
    "bool": lambda: torch.tensor([[True, False], [False, True]]),
    "float64": lambda: torch.tensor([1.5, 2.0], dtype=torch.float64),
    "float64 int-valued": lambda: torch.tensor([1.0, 2.0], dtype=torch.float64),
    "float16": lambda: torch.tensor([0.1, 2.0], dtype=torch.float16),
    "bfloat16": lambda: torch.tensor([0.1, 2.0], dtype=torch.bfloat16),
    "0-d float": lambda: torch.tensor(3.25),
    "0-d int": lambda: torch.tensor(7),
    "0-d float64": lambda: torch.tensor(1.0, dtype=torch.float64),
    "0-d bool": lambda: torch.tensor(True),
    "empty": lambda: torch.zeros(0),
    "empty 2-d": lambda: torch.zeros(0, 3),
    "empty int64": lambda: torch.zeros(0, dtype=torch.int64),
    "empty int32 2-d": lambda: torch.zeros(2, 0, dtype=torch.int32),
    "wrapped line": lambda: rng_values(2, (30,)),
    "wrapped ints": lambda: torch.arange(40) * 1000,
    "summarized 1-d": lambda: torch.arange(2000),
    "summarized float 1-d": lambda: torch.arange(1001, dtype=torch.float32) / 7,
    "summarized 2-d": lambda: torch.arange(2000).reshape(40, 50),
    "summarized 3-d": lambda: rng_values(3, (10, 11, 12)),
    "threshold edge 1000": lambda: torch.arange(1000.0),
    "4-d": lambda: torch.arange(16).reshape(2, 2, 2, 2),
    "long dtype suffix wrap": lambda: rng_values(4, (2, 9)).double(),
    "huge range": lambda: torch.tensor([1e-10, 1e10]),
    "large ints float": lambda: torch.tensor([123456789.0, 1.0]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_repr_matches_torch(name):
    expected = CASES[name]()
    got = from_torch(expected)
    assert repr(got) == torch_style(repr(expected))
    assert str(got) == torch_style(str(expected))


def test_repr_of_non_contiguous_views():
    t = torch.arange(24.0).reshape(4, 6) / 3
    p = from_torch(t)
    assert repr(p.t()) == torch_style(repr(t.t()))
    assert repr(p[:, ::2]) == torch_style(repr(t[:, ::2]))
    assert repr(p[1]) == torch_style(repr(t[1]))


def test_printoptions():
    t = torch.tensor([1.123456, 2.5])
    p = from_torch(t)
    try:
        pf.set_printoptions(precision=2)
        torch.set_printoptions(precision=2)
        assert repr(p) == torch_style(repr(t))
        pf.set_printoptions(sci_mode=True)
        torch.set_printoptions(sci_mode=True)
        assert repr(p) == torch_style(repr(t))
    finally:
        pf.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")
    assert pf.get_printoptions()["precision"] == 4


def test_format_spec():
    assert f"{pf.tensor(2.5):.3f}" == "2.500"
    assert f"{pf.tensor(3):>4}" == "   3"
    assert f"{pf.ones(2)}" == repr(pf.ones(2))


def test_object_reprs():
    assert repr(pf.float32) == "plugflow.float32"
    assert repr(pf.device("cuda", 1)) == "device(type='cuda', index=1)"
    assert repr(pf.device("cuda")) == "device(type='cuda')"
    assert repr(pf.device("cpu")) == "device(type='cpu')"
    assert str(pf.device("cuda:2")) == "cuda:2" and str(pf.device("cpu")) == "cpu"
    assert repr(pf.ones(2, 3).shape) == "plugflow.Size([2, 3])"
    m = pf.tensor([[1, 5], [7, 2]]).max(1)
    tm = torch.tensor([[1, 5], [7, 2]]).max(1)
    assert repr(m) == torch_style(repr(tm))
    assert repr(pf.Tensor) == "<class 'plugflow.Tensor'>"


def test_subclass_repr_uses_its_name():
    class MyTensor(pf.Tensor):
        pass

    t = MyTensor(pf.ones(2))
    assert repr(t) == "MyTensor([1., 1.])"
    assert math.isclose(float(t.sum()), 2.0)
