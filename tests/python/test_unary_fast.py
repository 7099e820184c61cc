"""The CPU plugin's float32 fast paths against PyTorch: the dense AVX kernels of erf, gelu (both
forms), silu and sigmoid (plugins/cpu/src/vec_math.h) and pow with a Python-number exponent
(x * x, sqrt, ...; plugins/cpu/src/binary.cpp). Sizes leave vector tails; special values,
strided inputs, the other float dtypes and the backward formulas that call these kernels are
checked too."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn.functional as F
from helpers import assert_matches, from_torch, to_torch

INF, NAN = math.inf, math.nan

UNARY = {
    "erf": lambda m, f, x: m.erf(x),
    "gelu": lambda m, f, x: f.gelu(x),
    "gelu_tanh": lambda m, f, x: f.gelu(x, approximate="tanh"),
    "silu": lambda m, f, x: f.silu(x),
    "sigmoid": lambda m, f, x: m.sigmoid(x),
}

SPECIAL = [INF, -INF, NAN, 0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1e-20, -1e-20, 0.5, -0.5, 1.0, -1.0,
           1.4142135, -1.4142135, 3.9192059, -3.9192059, 5.5, -5.5, 10.0, -10.0, 13.0, -13.0, 20.0, -20.0,
           88.8, -88.8, 1e30, -1e30, 3.4e38, -3.4e38]


def run_pf(op, x):
    return UNARY[op](pf, F, x)


def run_torch(op, x):
    return UNARY[op](torch, TF, x)


def reference(op, x):
    """torch in float64, rounded to float32: the correctly rounded result to within 1 ulp. gelu
    as x/2 erfc(-x / sqrt 2): PyTorch's 1 + erf cancels below about -8 even in float64."""
    d = x.double()
    if op == "gelu":
        return (0.5 * d * torch.special.erfc(-d / math.sqrt(2))).float()
    return run_torch(op, d).float()


def close_to_reference(actual, x, op):
    # gelu_tanh cancels in 1 + tanh below zero (as PyTorch's float32 does): absolute there.
    atol = 1e-6 if op == "gelu_tanh" else 1e-30
    torch.testing.assert_close(to_torch(actual), reference(op, x), rtol=6e-6, atol=atol, equal_nan=True)


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("n", [1, 3, 7, 8, 15, 16, 17, 31, 33, 1000, 4099, 65537])
def test_dense_float32_matches_torch(op, n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 4
    out = run_pf(op, from_torch(x))
    assert_matches(out, run_torch(op, x))
    close_to_reference(out, x, op)


@pytest.mark.parametrize("op", list(UNARY))
def test_wide_range_against_float64(op):
    # Every exponent from subnormal to huge, both signs, on one big dense tensor (threads split it).
    mag = torch.logspace(-44, 38, 200003, dtype=torch.float64).float()
    x = torch.cat([mag, -mag, torch.linspace(-15, 15, 100001)])
    close_to_reference(run_pf(op, from_torch(x)), x, op)


@pytest.mark.parametrize("op", list(UNARY))
def test_special_values(op):
    # Repeated to fill whole vectors and a tail, so every lane position sees each value.
    x = torch.tensor(SPECIAL * 3, dtype=torch.float32)
    out = to_torch(run_pf(op, from_torch(x)))
    expected = run_torch(op, x)
    ref64 = reference(op, x)
    assert torch.equal(torch.isnan(out), torch.isnan(expected)), (x[torch.isnan(out) != torch.isnan(expected)])
    inf = torch.isinf(expected)
    assert torch.equal(out[inf], expected[inf])
    torch.testing.assert_close(out, ref64, rtol=6e-6, atol=1e-6 if op == "gelu_tanh" else 1e-30, equal_nan=True)
    if op == "erf":  # odd: erf(-0) = -0
        assert torch.equal(torch.signbit(out), torch.signbit(expected))


def test_erf_exact_values():
    x = pf.tensor([INF, -INF, 0.0, -0.0, 4.0, -4.0, 1e-45])
    out = x.erf().tolist()
    assert out[:2] == [1.0, -1.0] and out[4:6] == [1.0, -1.0]
    assert math.copysign(1, out[3]) == -1 and math.copysign(1, out[2]) == 1
    assert out[6] == x.tolist()[6]  # 2/sqrt(pi) * the smallest subnormal rounds back to it
    assert math.isnan(pf.tensor([NAN]).erf().item())


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("layout", ["step", "transposed", "offset"])
def test_strided_inputs(op, layout):
    base = torch.randn(67, 45, generator=torch.Generator().manual_seed(3)) * 4
    if layout == "step":
        view = lambda t: t[:, ::2]
    elif layout == "transposed":
        view = lambda t: t.t()
    else:
        view = lambda t: t.reshape(-1)[5:]
    x = view(base)
    out = run_pf(op, view(from_torch(base)))
    assert_matches(out, run_torch(op, x))
    close_to_reference(out, x.contiguous(), op)


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_other_float_dtypes(op, dtype):
    x = (torch.randn(1001, generator=torch.Generator().manual_seed(5)) * 4).to(getattr(torch, dtype))
    # PyTorch 1.13 has no float16 CPU kernels for these: float math rounded to float16 instead.
    expected = run_torch(op, x.float()).half() if dtype == "float16" else run_torch(op, x)
    assert_matches(run_pf(op, from_torch(x)), expected)


def test_inplace():
    x = torch.randn(1027, generator=torch.Generator().manual_seed(9)) * 4
    p = from_torch(x)
    F.silu(p, inplace=True)
    assert_matches(p, TF.silu(x))
    p = from_torch(x)
    p.sigmoid_()
    assert_matches(p, x.sigmoid())


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_backward(op, dtype):
    x = torch.randn(1003, generator=torch.Generator().manual_seed(11), dtype=getattr(torch, dtype)) * 3
    xt = x.clone().requires_grad_()
    xp = from_torch(x).requires_grad_()
    g = torch.randn(1003, generator=torch.Generator().manual_seed(12), dtype=getattr(torch, dtype))
    run_torch(op, xt).backward(g)
    run_pf(op, xp).backward(from_torch(g))
    assert_matches(xp.grad, xt.grad)


# ---- pow with a scalar exponent -------------------------------------------------------------

POW_INPUT = [INF, -INF, NAN, 0.0, -0.0, 1e-45, -1e-45, 1e-20, -1e-20, 0.25, -0.25, 1.0, -1.0, 2.0, -2.0, 3.0,
             -3.0, 7.5, -7.5, 1e13, -1e13, 1e20, -1e20, 3.4e38, -3.4e38]
# PyTorch's pow_tensor_scalar special cases, and exponents that take std::pow.
EXPONENTS = [2, 3, 0.5, -0.5, -1, -2, 2.0, 3.0, -1.0, -2.0, 2.5, 1.5, -3, 4, 0, 1, 0.0, 1.0, -0.25]


def same_bits(actual, expected):
    a, e = to_torch(actual).numpy(), expected.numpy()
    assert a.dtype == e.dtype and a.shape == e.shape
    np.testing.assert_array_equal(a, e)  # NaN == NaN here
    np.testing.assert_array_equal(np.signbit(a), np.signbit(e))


@pytest.mark.parametrize("exponent", EXPONENTS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_scalar_special_values(exponent, dtype):
    x = torch.tensor(POW_INPUT * 3, dtype=getattr(torch, dtype))
    out = from_torch(x).pow(exponent)
    expected = x.pow(exponent)
    if exponent in (2, 3, 0.5, -0.5, -1, -2, 0, 1):
        same_bits(out, expected)  # the special cases are exact: PyTorch's results, signed zeros too
    else:
        assert_matches(out, expected, rtol=2e-7 if dtype == "float32" else 1e-15, atol=0)
        np.testing.assert_array_equal(np.isnan(to_torch(out).numpy()), np.isnan(expected.numpy()))


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -0.5, -1, -2, 2.5])
@pytest.mark.parametrize("n", [1, 7, 17, 1000, 65537])
def test_pow_scalar_sizes_and_operators(exponent, n):
    x = torch.rand(n, generator=torch.Generator().manual_seed(n)) * 10 - 2
    p = from_torch(x)
    rtol = 0 if exponent != 2.5 else 2e-7
    assert_matches(p.pow(exponent), x.pow(exponent), rtol=rtol, atol=0)
    assert_matches(p ** exponent, x ** exponent, rtol=rtol, atol=0)
    assert_matches(pf.pow(p, exponent), torch.pow(x, exponent), rtol=rtol, atol=0)
    p.pow_(exponent)
    assert_matches(p, x.pow(exponent), rtol=rtol, atol=0)


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -0.5, -1, -2])
def test_pow_scalar_strided(exponent):
    base = torch.rand(33, 40, generator=torch.Generator().manual_seed(1)) * 4 + 0.1
    for view in (lambda t: t[:, ::3], lambda t: t.t(), lambda t: t[1:, 2:]):
        assert_matches(view(from_torch(base)).pow(exponent), view(base).pow(exponent), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "int8", "uint8"])
@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 5])
def test_pow_scalar_integers_unchanged(dtype, exponent):
    x = torch.arange(-40, 60, dtype=torch.int64).to(getattr(torch, dtype))
    same_bits(from_torch(x).pow(exponent), x.pow(exponent))


def test_pow_tensor_exponents():
    # A full exponent tensor (std::pow), and a size-1 one that broadcasts: that one takes the
    # scalar path here (x * x), where PyTorch's vectorized pow may be 1 ulp off.
    x = torch.rand(1001, generator=torch.Generator().manual_seed(2)) * 4
    e = torch.rand(1001, generator=torch.Generator().manual_seed(3)) * 4 - 2
    assert_matches(from_torch(x) ** from_torch(e), x ** e, rtol=2e-7, atol=0)
    e1 = torch.tensor([2.0])
    assert_matches(from_torch(x) ** from_torch(e1), x ** e1, rtol=2e-7, atol=0)
    same_bits(from_torch(x) ** from_torch(e1), x * x)


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -0.5, -1, -2, 2.5])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_scalar_backward(exponent, dtype):
    x = torch.rand(515, generator=torch.Generator().manual_seed(4), dtype=getattr(torch, dtype)) * 3 + 0.2
    xt = x.clone().requires_grad_()
    xp = from_torch(x).requires_grad_()
    xt.pow(exponent).sum().backward()
    xp.pow(exponent).sum().backward()
    assert_matches(xp.grad, xt.grad)
