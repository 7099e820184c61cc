"""The reduction family against PyTorch: var/std (dims, correction/unbiased, keepdim),
var_mean/std_mean, logsumexp, norm (p = 2/1/inf/-inf/0/fro/other), all/any, cumsum/cumprod and
softmax/log_softmax: values and gradients on random inputs (non-contiguous layouts, sizes 0
and 1, infinities and NaN), double backward, and PyTorch's exceptions for bad input."""

import math
import re

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import (assert_matches, assert_same_outcome, backward_both, check_double_backward, from_torch, random_dims,
                     random_pair, tensor_pair, to_torch)

SEEDS = range(6)


# ---- helpers ------------------------------------------------------------------------------------

TOL = {"float64": (1e-9, 1e-9), "float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (2e-2, 2e-2)}


def close(actual, expected, dtype="float64", rtol=None, atol=None):
    r, a = TOL[dtype]
    assert_matches(actual, expected.detach(), rtol=rtol or r, atol=atol or a)


def random_shape(rng, max_dims=3, max_size=5, min_size=1):
    return tuple(int(s) for s in rng.integers(min_size, max_size + 1, size=rng.integers(1, max_dims + 1)))


LAYOUTS = ["contiguous", "transposed", "strided"]


# ---- var / std ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_var_std_values_and_grad(seed, op, dtype):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng)
    layout = LAYOUTS[seed % 3]
    p, t = random_pair(rng, shape, dtype=dtype, layout=layout, grad=True)
    dims = random_dims(rng, len(shape))
    keepdim = bool(seed % 2)
    variant = seed % 3
    if variant == 0:
        kwargs = {"unbiased": bool(seed % 4 < 2)}
    elif variant == 1:
        kwargs = {"correction": int(rng.integers(0, 3))}
    else:
        kwargs = {}
    out_p = getattr(p, op)(dims, keepdim=keepdim, **kwargs)
    out_t = getattr(t, op)(dims, keepdim=keepdim, **kwargs)
    close(out_p, out_t, dtype)
    close(getattr(pf, op)(p, dims, keepdim=keepdim, **kwargs), out_t, dtype)
    backward_both(rng, out_p, out_t)
    close(p.grad, t.grad, dtype, rtol=1e-4 if dtype == "float32" else None, atol=1e-4 if dtype == "float32" else None)


def test_var_std_overloads():
    rng = np.random.default_rng(0)
    p, t = random_pair(rng, (4, 5))
    close(p.var(), t.var())
    close(p.var(False), t.var(False))
    close(p.std(True), t.std(True))
    close(p.var(1, False, True), t.var(1, False, True))
    close(p.var(dim=0, correction=0), t.var(dim=0, correction=0))
    close(p.std(dim=[0, 1], keepdim=True), t.std(dim=[0, 1], keepdim=True))
    close(pf.var(p, 0, unbiased=False), torch.var(t, 0, unbiased=False))
    with pytest.raises(TypeError):
        p.var(0, unbiased=True, correction=1)


@pytest.mark.parametrize("op", ["var_mean", "std_mean"])
@pytest.mark.parametrize("seed", range(3))
def test_var_mean_std_mean(op, seed):
    rng = np.random.default_rng(seed)
    p, t = random_pair(rng, (3, 4, 2), layout=LAYOUTS[seed], grad=True)
    dims = [None, 1, (0, 2)][seed]
    vp, mp = getattr(pf, op)(p, dims, keepdim=bool(seed % 2), correction=seed % 2)
    vt, mt = getattr(torch, op)(t, dims, keepdim=bool(seed % 2), correction=seed % 2)
    close(vp, vt)
    close(mp, mt)
    assert vp.grad_fn.name() == ("VarMeanBackward0" if op == "var_mean" else "StdMeanBackward0")
    # Gradients through both outputs, and through each alone.
    g1 = rng.uniform(-1, 1, size=tuple(vt.shape))
    g2 = rng.uniform(-1, 1, size=tuple(mt.shape))
    (vp * pf.from_numpy(g1)).sum().backward(retain_graph=True)
    (mp * pf.from_numpy(g2)).sum().backward()
    ((vt * torch.from_numpy(g1)).sum() + (mt * torch.from_numpy(g2)).sum()).backward()
    close(p.grad, t.grad)


def eval_call(lib, f, x, call):
    """Evaluates a call written against `lib`, `f` and `x`; with `out=...` it returns whether the
    result is that out tensor, and the out tensor."""
    if "out=" in call:
        m = re.search(r"out=(.*)\)$", call)
        out = eval(m.group(1))  # noqa: S307
        res = eval(call[:m.start()] + "out=out)")  # noqa: S307
        return res is out, out
    return eval(call)  # noqa: S307


@pytest.mark.parametrize("op", ["var", "std", "var_mean", "std_mean"])
@pytest.mark.parametrize("call", [
    "f(x)", "f(x, True)", "f(x, False)", "f(x, 1)", "f(x, (0, 2), False, True)", "f(x, None, True)",
    "f(x, dim=[0, 1], correction=2, keepdim=True)", "f(x, correction=0)", "f(x, 1, unbiased=False, keepdim=True)",
    "f(x, -1, correction=1)", "f(x, True, keepdim=True)", "f(x, 1, correction=0.5)", "f(x, 1, correction=True)",
    "f(x, 1, unbiased=1)", "f(x, dim=1, unbiased=True, correction=1)", "f(x, 1.0)", "f(x, True, False)",
    "f(x, 1, out=lib.empty(0))", "f(x, (0, 1), True, True, out=lib.empty(0, dtype=lib.float64))",
    "f(x, None, correction=0, out=lib.empty(0))", "f(x, dim=None, out=lib.empty(0))", "f(x, out=lib.empty(0))",
    "f(x, True, out=lib.empty(0))", "f(x, correction=0, out=lib.empty(0))", "f(x, 1, out=lib.empty(0, dtype=lib.int64))",
    "f(x.requires_grad_(), 1, out=lib.empty(0))", "f(x.double(), 1, out=lib.empty(0, dtype=lib.float16))"])
def test_moments_overloads_and_out_match_torch(op, call):
    # var/std/var_mean/std_mean are the variants of one kernel (core/opdefs/moments.yaml): each
    # takes PyTorch 1.13's three overloads; var/std take out= with a dim (None included).
    data = np.random.default_rng(3).uniform(-2, 2, size=(3, 4, 2)).astype("float32")
    assert_same_outcome(lambda lib: eval_call(lib, getattr(lib, op), lib.tensor(data), call), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("op, node", [("var", "VarBackward0"), ("std", "StdBackward0")])
def test_var_std_node_names(op, node):
    assert getattr(pf.ones(2, 3, requires_grad=True), op)(1).grad_fn.name() == node
    assert getattr(torch.ones(2, 3, requires_grad=True), op)(1).grad_fn.name() == node


def test_var_edge_cases():
    # One element: nan (0/0) for the unbiased estimate; correction > N: inf; empty: nan.
    for data in ([1.5], [[1.0, 2.0]], []):
        p = pf.tensor(data, dtype=pf.float64)
        t = torch.tensor(data, dtype=torch.float64)
        close(p.var(), t.var())
        close(p.std(unbiased=False), t.std(unbiased=False))
        if p.dim() == 2:
            close(p.var(0), t.var(0))
            close(p.var(1, correction=3), t.var(1, correction=3))
    e = pf.zeros(0, 3, dtype=pf.float64)
    te = torch.zeros(0, 3, dtype=torch.float64)
    close(e.var(0), te.var(0))
    close(e.var(1), te.var(1))
    close(pf.tensor(2.5).var(), torch.tensor(2.5).var(), "float32")
    close(pf.tensor(2.5).std(0, unbiased=False), torch.tensor(2.5).std(0, unbiased=False), "float32")


def test_std_grad_at_zero_is_zero():
    p = pf.tensor([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]], dtype=pf.float64, requires_grad=True)
    t = torch.tensor([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]], dtype=torch.float64, requires_grad=True)
    p.std(1).sum().backward()
    t.std(1).sum().backward()
    close(p.grad, t.grad)


def test_var_half_precision():
    rng = np.random.default_rng(1)
    data = rng.uniform(-2, 2, size=(6, 7)).astype("float32")
    for name in ("float16", "bfloat16"):
        p = pf.from_numpy(data.copy()).to(getattr(pf, name))
        t = torch.from_numpy(data.copy()).to(getattr(torch, name))
        close(p.var(1), t.var(1), name)
        close(p.std(), t.std(), name)


def test_var_large_and_parallel():
    rng = np.random.default_rng(2)
    p, t = random_pair(rng, (300, 257), low=100, high=101)  # a large mean: Welford keeps precision
    close(p.var(0), t.var(0))
    close(p.var(1), t.var(1))
    close(p.var(), t.var())
    p32, t32 = random_pair(rng, (513, 130), low=1000, high=1001, dtype="float32")
    close(p32.var(0), t32.var(0), "float32", rtol=1e-4, atol=1e-4)
    close(p32.std(), t32.std(), "float32", rtol=1e-4, atol=1e-4)


def test_var_errors():
    with pytest.raises(RuntimeError, match="std and var only support floating point and complex dtypes"):
        pf.tensor([1, 2, 3]).var()
    with pytest.raises(RuntimeError, match="std and var only support floating point"):
        pf.std_mean(pf.tensor([1, 2, 3]))
    p = pf.ones(2, 3)
    with pytest.raises(IndexError, match="Dimension out of range"):
        p.var(5)
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times in the list of dims"):
        p.var((0, 0))
    with pytest.raises(TypeError):
        p.var(dim="a")


# ---- logsumexp ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_logsumexp(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng)
    p, t = random_pair(rng, shape, low=-30, high=30, layout=LAYOUTS[seed % 3], grad=True)
    dims = random_dims(rng, len(shape))
    if dims is None:
        dims = tuple(range(len(shape)))
    keepdim = bool(seed % 2)
    out_p = p.logsumexp(dims, keepdim=keepdim)
    out_t = t.logsumexp(dims, keepdim=keepdim)
    close(out_p, out_t)
    close(pf.logsumexp(p, dims, keepdim), out_t)
    assert out_p.grad_fn.name() == "LogsumexpBackward0"
    backward_both(rng, out_p, out_t)
    close(p.grad, t.grad)


@pytest.mark.parametrize("call", [
    "f(x, 1)", "f(x, (0, 2), True)", "f(x, dim=-1, keepdim=True)", "f(input=x, dim=1)", "f(x, [], True)",
    "x.logsumexp(1)", "x.logsumexp(dim=(0, 1), keepdim=False)", "f(x.int(), 0)", "f(x > 0, 1)",
    "f(x)", "x.logsumexp()", "f(x, None)", "x.logsumexp(dim=None)", "f(x, 1.0)", "f(x, [0, 1.0])", "f(x, 1, 1)",
    "f(x, 1, True, True)", "f(x, 1, foo=2)", "f(x, 1, dim=1)", "f(x, (0, 0))", "f(x, 5)",
    "f(x, 1, out=lib.empty(0))", "f(x, (0, 1), True, out=lib.empty(0, dtype=lib.float64))",
    "f(x.double(), 1, out=lib.empty(0))", "f(x.int(), 0, out=lib.empty(0, dtype=lib.float64))",
    "f(x.int(), 0, out=lib.empty(0, dtype=lib.int32))", "f(x > 0, 0, out=lib.empty(0, dtype=lib.bool))",
    "f(input=x, dim=1, out=lib.empty(0, dtype=lib.float64))", "f(x.requires_grad_(), 1, out=lib.empty(0))"])
def test_logsumexp_arguments_and_out_match_torch(call):
    # logsumexp is a composite op (core/opdefs/composite.yaml): its arguments, the float32
    # promotion of integers and out= (computed in out's dtype, which must be floating) come from
    # the definition.
    data = np.random.default_rng(4).uniform(-20, 20, size=(3, 4, 2)).astype("float32")
    assert_same_outcome(lambda lib: eval_call(lib, lib.logsumexp, lib.tensor(data), call), rtol=1e-6, atol=1e-6)


def test_logsumexp_special_values():
    inf, nan = math.inf, math.nan
    data = [[1000.0, 1000.0], [-inf, -inf], [inf, 1.0], [-inf, 2.0], [nan, 1.0], [-1000.0, -1000.5]]
    for dtype in ("float32", "float64"):
        p = pf.tensor(data, dtype=getattr(pf, dtype))
        t = torch.tensor(data, dtype=getattr(torch, dtype))
        close(p.logsumexp(1), t.logsumexp(1), dtype)
    close(pf.tensor([1, 2, 3]).logsumexp(0), torch.tensor([1, 2, 3]).logsumexp(0), "float32")
    close(pf.zeros(0, 3).logsumexp(0), torch.zeros(0, 3).logsumexp(0), "float32")
    close(pf.zeros(0, 3).logsumexp(1), torch.zeros(0, 3).logsumexp(1), "float32")
    close(pf.tensor(2.0).logsumexp(0), torch.tensor(2.0).logsumexp(0), "float32")
    h = pf.tensor([[60000.0, 60000.0], [-60000.0, 1.0]]).half()  # PyTorch 1.13 has no half logsumexp on CPU
    close(h.logsumexp(1), torch.tensor([[60000.0, 60000.0], [-60000.0, 1.0]]).logsumexp(1).half(), "float16")


# ---- norm --------------------------------------------------------------------------------------------

NORM_PS = [2, 1, 3.5, 0.5, 1.5, math.inf, -math.inf, 0, -1, "fro", None]


@pytest.mark.parametrize("p_value", NORM_PS, ids=str)
@pytest.mark.parametrize("seed", range(4))
def test_norm_values_and_grad(p_value, seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_size=4)
    data = rng.uniform(-2, 2, size=shape)
    flat = data.reshape(-1)
    if seed >= 2 and flat.size > 2:
        flat[0] = 0.0  # exact zeros: the backward's masking
        flat[-1] = 0.0
    p, t = tensor_pair(data, LAYOUTS[seed % 3], grad=True)
    dims = random_dims(rng, len(shape))
    keepdim = bool(seed % 2)
    kw = {} if p_value is None else {"p": p_value}
    if dims is not None:
        kw.update(dim=dims, keepdim=keepdim)
    out_p = p.norm(**kw)
    out_t = t.norm(**kw)
    close(out_p, out_t)
    close(pf.norm(p, **kw), out_t)
    if p_value in (0,):
        return
    backward_both(rng, out_p, out_t)
    close(p.grad, t.grad)


def test_norm_all_zero_slice_and_ties():
    data = [[0.0, 0.0, 0.0], [3.0, -3.0, 1.0]]
    for p_value in (2, 1, 3, 0.5, 1.5, math.inf, -math.inf):
        p = pf.tensor(data, dtype=pf.float64, requires_grad=True)
        t = torch.tensor(data, dtype=torch.float64, requires_grad=True)
        p.norm(p_value, dim=1).sum().backward()
        t.norm(p_value, dim=1).sum().backward()
        close(p.grad, t.grad)


def test_norm_dtype_and_edge_cases():
    rng = np.random.default_rng(3)
    p, t = random_pair(rng, (3, 4), dtype="float32")
    close(p.norm(p=2, dim=1, dtype=pf.float64), t.norm(p=2, dim=1, dtype=torch.float64))
    close(pf.norm(p, 3, dim=0, keepdim=True), torch.norm(t, 3, dim=0, keepdim=True), "float32")
    e = pf.zeros(0, 3)
    te = torch.zeros(0, 3)
    for p_value in (2, 1, math.inf, -math.inf, 0):
        close(e.norm(p_value), te.norm(p_value), "float32")
        close(e.norm(p_value, dim=0), te.norm(p_value, dim=0), "float32")
        close(e.norm(p_value, dim=1), te.norm(p_value, dim=1), "float32")
    close(pf.tensor(-3.0).norm(), torch.tensor(-3.0).norm(), "float32")
    nan = math.nan
    close(pf.tensor([1.0, nan]).norm(math.inf), torch.tensor([1.0, nan]).norm(math.inf), "float32")
    close(pf.tensor([nan, 1.0]).norm(-math.inf), torch.tensor([nan, 1.0]).norm(-math.inf), "float32")
    b = pf.tensor([[1.5, -2.0]]).bfloat16()
    close(b.norm(), torch.tensor([[1.5, -2.0]]).bfloat16().norm(), "bfloat16")
    out = pf.empty(4)
    assert pf.norm(p, dim=0, out=out) is out
    close(out, t.norm(dim=0), "float32")


def test_norm_errors():
    with pytest.raises(RuntimeError, match="norm\\(\\): input dtype should be either floating point or complex. "
                                           "Got Long instead."):
        pf.tensor([1, 2]).norm()
    p = pf.ones(2, 3)
    with pytest.raises(RuntimeError, match="only valid string values are 'fro' and 'nuc', found abc"):
        p.norm("abc")
    with pytest.raises(ValueError, match="dtype argument is not supported in frobenius norm"):
        p.norm(dtype=pf.float64)
    with pytest.raises(IndexError):
        p.norm(dim=3)
    with pytest.raises(RuntimeError):
        p.norm("nuc")


# ---- all / any -------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", ["bool", "uint8", "int32", "int64", "float32", "float64", "float16"])
def test_all_any(seed, dtype):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_size=4)
    values = rng.integers(0, 2 if seed % 2 else 6, size=shape)  # mostly zeros or mostly non-zeros
    data = (values > 0) if dtype == "bool" else values.astype(dtype)
    if dtype.startswith("float") and data.size:
        data.reshape(-1)[0] = np.nan  # NaN counts as non-zero
    p, t = tensor_pair(np.asarray(data), LAYOUTS[seed % 3])
    for op in ("all", "any"):
        assert_matches(getattr(p, op)(), getattr(t, op)())
        assert_matches(getattr(pf, op)(p), getattr(torch, op)(t))
        dim = int(rng.integers(-len(shape), len(shape)))
        for keepdim in (False, True):
            assert_matches(getattr(p, op)(dim, keepdim=keepdim), getattr(t, op)(dim, keepdim=keepdim))


def test_all_any_edge_cases():
    for shape in [(0,), (0, 3), (2, 0), (1,), ()]:
        p = pf.zeros(*shape) if shape else pf.tensor(0.0)
        t = torch.zeros(*shape) if shape else torch.tensor(0.0)
        for op in ("all", "any"):
            assert_matches(getattr(p, op)(), getattr(t, op)())
            if shape:
                for dim in range(len(shape)):
                    assert_matches(getattr(p, op)(dim), getattr(t, op)(dim))
            else:
                assert_matches(getattr(p, op)(0), getattr(t, op)(0))
    big = pf.ones(1000, 300)
    big[517, 3] = 0
    assert not big.all().item() and big.any().item()
    assert big.all(0).sum().item() == 299 and big.all(1).sum().item() == 999
    with pytest.raises(IndexError):
        pf.ones(2, 3).all(2)
    x = pf.ones(2, requires_grad=True)
    assert not x.all().requires_grad
    assert 1.0 in x and 5.0 not in x


# ---- cumsum / cumprod -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_scan_values_and_grad(seed, op):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng)
    p, t = random_pair(rng, shape, low=0.5, high=1.5, layout=LAYOUTS[seed % 3], grad=True)
    dim = int(rng.integers(-len(shape), len(shape)))
    out_p = getattr(p, op)(dim)
    out_t = getattr(t, op)(dim)
    close(out_p, out_t)
    close(getattr(pf, op)(p, dim), out_t)
    assert out_p.grad_fn.name() == ("CumsumBackward0" if op == "cumsum" else "CumprodBackward0")
    backward_both(rng, out_p, out_t)
    close(p.grad, t.grad)


@pytest.mark.parametrize("seed", range(4))
def test_cumprod_grad_with_zeros(seed):
    rng = np.random.default_rng(seed)
    data = rng.uniform(0.5, 1.5, size=(5, 6))
    data[0, 2] = 0.0  # one zero
    data[1, 1] = data[1, 4] = 0.0  # two zeros
    data[2, 0] = 0.0  # at the start
    data[3, 5] = 0.0  # at the end
    data[4, :] = 0.0  # all zeros
    if seed % 2:
        data = data.T.copy()
    p, t = tensor_pair(data, LAYOUTS[seed % 3], grad=True)
    dim = 1 - seed % 2
    out_p = p.cumprod(dim)
    out_t = t.cumprod(dim)
    close(out_p, out_t)
    backward_both(rng, out_p, out_t)
    close(p.grad, t.grad)


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32"])
def test_scan_dtypes(dtype):
    rng = np.random.default_rng(1)
    values = rng.integers(-3, 4, size=(4, 5))
    data = (values > 0) if dtype == "bool" else values.astype("float32" if dtype == "bfloat16" else dtype)
    if dtype == "uint8":
        data = np.abs(values).astype("uint8")
    t = torch.from_numpy(np.asarray(data).copy())
    if dtype == "bfloat16":
        t = t.bfloat16()
    p = from_torch(t)
    tol = dtype if dtype in TOL else None
    for op in ("cumsum", "cumprod"):
        for dim in (0, 1):
            # PyTorch 1.13 has no half scans on CPU: the float32 result, rounded.
            expected = getattr(t.float(), op)(dim).half() if dtype == "float16" else getattr(t, op)(dim)
            if tol:
                close(getattr(p, op)(dim), expected, tol)
            else:
                assert_matches(getattr(p, op)(dim), expected)
        if dtype != "bool":
            assert_matches(getattr(p, op)(1, dtype=pf.float64), getattr(t, op)(1, dtype=torch.float64))


def test_scan_integer_overflow_wraps_like_torch():
    big = [2 ** 62, 2 ** 62, 2 ** 62]
    assert_matches(pf.tensor(big).cumsum(0), torch.tensor(big).cumsum(0))
    assert_matches(pf.tensor([2 ** 40, 2 ** 40]).cumprod(0), torch.tensor([2 ** 40, 2 ** 40]).cumprod(0))


def test_scan_edge_sizes_and_large():
    for shape, dim in [((0,), 0), ((0, 3), 0), ((0, 3), 1), ((3, 0), 0), ((1,), 0), ((1, 1), 1)]:
        for op in ("cumsum", "cumprod"):
            assert_matches(getattr(pf.ones(*shape), op)(dim), getattr(torch.ones(*shape), op)(dim))
    p = pf.tensor(2.5, requires_grad=True)
    t = torch.tensor(2.5, requires_grad=True)
    close(p.cumsum(0), t.cumsum(0), "float32")
    close(p.cumprod(-1), t.cumprod(-1), "float32")
    p.cumprod(0).backward()
    t.cumprod(0).backward()
    close(p.grad, t.grad, "float32")
    rng = np.random.default_rng(5)
    for layout in LAYOUTS:
        p, t = random_pair(rng, (300, 257), layout=layout)
        for dim in (0, 1):
            close(p.cumsum(dim), t.cumsum(dim))
        p, t = random_pair(rng, (200, 3, 70), low=0.9, high=1.1, layout=layout)
        for dim in (0, 1, 2):
            close(p.cumprod(dim), t.cumprod(dim))


def test_scan_inplace_and_errors():
    p = pf.tensor([[1.0, 2.0], [3.0, 4.0]])
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert p.cumsum_(0) is p
    t.cumsum_(0)
    close(p, t, "float32")
    p.cumprod_(1)
    t.cumprod_(1)
    close(p, t, "float32")
    with pytest.raises(IndexError, match="Dimension out of range"):
        pf.ones(2, 3).cumsum(2)
    with pytest.raises(TypeError):
        pf.ones(2, 3).cumsum()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        pf.ones(2, requires_grad=True).cumsum_(0)


@pytest.mark.parametrize("op, in_dtype, out_dtype", [
    ("cumsum", "int64", "float32"), ("cumprod", "int64", "int32"), ("cumsum", "float32", "float64"),
    ("softmax", "float32", "float32"), ("log_softmax", "float64", "float64"), ("softmax", "float32", "float64")])
def test_along_dim_out(op, in_dtype, out_dtype):
    # out= from the definitions (core/opdefs/along_dim.yaml): a scan computes in out's dtype; a
    # softmax op's out must have the result's dtype (PyTorch's RuntimeError otherwise).
    data = np.random.default_rng(0).integers(1, 4, size=(2, 3)).astype(in_dtype)

    def run(lib):
        out = lib.empty(0, dtype=getattr(lib, out_dtype))
        res = getattr(lib, op)(lib.tensor(data), 1, out=out)
        return res is out, out
    assert_same_outcome(run)
    # An input that requires grad is refused as by every out= function. (PyTorch's softmax out=
    # instead returns a result whose backward raises; plugflow refuses softmax's too, earlier.)
    if op.startswith("cum"):
        assert_same_outcome(lambda lib: getattr(lib, op)(lib.ones(2, 3, requires_grad=True), 1, out=lib.empty(0)))
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        getattr(pf, op)(pf.ones(2, 3, requires_grad=True), 1, out=pf.empty(0))


# ---- softmax / log_softmax ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_values_and_grad(seed, op, dtype):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng)
    p, t = random_pair(rng, shape, low=-10, high=10, dtype=dtype, layout=LAYOUTS[seed % 3], grad=True)
    dim = int(rng.integers(-len(shape), len(shape)))
    out_p = getattr(p, op)(dim)
    out_t = getattr(t, op)(dim)
    close(out_p, out_t, dtype)
    close(getattr(pf, op)(p, dim), out_t, dtype)
    close(getattr(pf, op)(p, dim=dim), out_t, dtype)
    assert out_p.grad_fn.name() == ("SoftmaxBackward0" if op == "softmax" else "LogSoftmaxBackward0")
    backward_both(rng, out_p, out_t)
    close(p.grad, t.grad, dtype)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_softmax_16bit_lines_are_the_float32_result_rounded(op, dtype):
    """Dense 16-bit lines run the float32 kernel on a widened copy: the result is float32's
    softmax of the same values, rounded once (special rows and lines past one vector included)."""
    rng = np.random.default_rng()
    for n in (1, 7, 64, 1000, 3001):
        x = rng.uniform(-12, 12, (5, n))
        x[1, rng.integers(n)] = math.nan
        x[2, :] = -math.inf
        x[3, rng.integers(n)] = math.inf
        p = pf.from_numpy(x).to(getattr(pf, dtype))
        widened = torch.from_numpy(x).to(getattr(torch, dtype)).float()
        expected = getattr(widened, op)(1).to(getattr(torch, dtype))
        close(getattr(p, op)(1), expected, dtype)
        close(getattr(p, op)(1), to_torch(getattr(p.float(), op)(1).to(getattr(pf, dtype))), dtype)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_stability_and_special_values(op):
    inf, nan = math.inf, math.nan
    rows = [[1000.0, 1000.0, 999.0], [-1000.0, -1001.0, -1000.0], [-inf, -inf, 1.0], [-inf, -inf, -inf],
            [inf, 1.0, 2.0], [nan, 1.0, 2.0], [0.0, -inf, 0.0], [88.0, 89.0, -104.0]]
    for dtype in ("float32", "float64"):
        p = pf.tensor(rows, dtype=getattr(pf, dtype))
        t = torch.tensor(rows, dtype=getattr(torch, dtype))
        close(getattr(p, op)(1), getattr(t, op)(1), dtype)
        close(getattr(p.t(), op)(0), getattr(t.t(), op)(0), dtype)  # the tile path


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_dtype_sizes_and_large(op):
    rng = np.random.default_rng(4)
    p, t = random_pair(rng, (3, 4), dtype="float32")
    close(getattr(p, op)(1, dtype=pf.float64), getattr(t, op)(1, dtype=torch.float64))
    close(getattr(p, op)(0, pf.float64), getattr(t, op)(0, torch.float64))
    close(getattr(pf.tensor([1, 2, 3]), op)(0, dtype=pf.float32), getattr(torch.tensor([1, 2, 3]), op)(0, dtype=torch.float32), "float32")
    h = pf.tensor([[1.0, 2.0, 3.0]]).half()
    close(getattr(h, op)(1), getattr(torch.tensor([[1.0, 2.0, 3.0]]), op)(1).half(), "float16")
    for shape, dim in [((0,), 0), ((0, 3), 0), ((0, 3), 1), ((1,), 0), ((4, 1), 1), ((1, 4), 0)]:
        close(getattr(pf.ones(*shape), op)(dim), getattr(torch.ones(*shape), op)(dim), "float32")
    x = pf.tensor(3.0, requires_grad=True)
    tx = torch.tensor(3.0, requires_grad=True)
    close(getattr(x, op)(0), getattr(tx, op)(0), "float32")
    (getattr(x, op)(0) * 2).backward()
    (getattr(tx, op)(0) * 2).backward()
    close(x.grad, tx.grad, "float32")
    for layout in LAYOUTS:
        p, t = random_pair(rng, (300, 257), low=-5, high=5, dtype="float32", layout=layout)
        for dim in (0, 1):
            close(getattr(p, op)(dim), getattr(t, op)(dim), "float32")


def test_softmax_errors():
    with pytest.raises(RuntimeError, match="\"softmax_lastdim_kernel_impl\" not implemented for 'Long'"):
        pf.tensor([1, 2]).softmax(0)
    with pytest.raises(RuntimeError, match="\"log_softmax_lastdim_kernel_impl\" not implemented for 'Long'"):
        pf.tensor([1, 2]).log_softmax(0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        pf.ones(2, 3).softmax(2)
    with pytest.raises(RuntimeError, match="Please look up dimensions by name"):
        pf.softmax(pf.ones(2), dim=None)


# ---- double backward ---------------------------------------------------------------------------------

SECOND_ORDER = {
    "var": (lambda a: a.var(1, keepdim=True) * a, -2, 2),
    "std": (lambda a: a.std(0) * a, -2, 2),
    "var_mean": (lambda a: (lambda vm: vm[0] * vm[1])(pf.var_mean(a, 1)), -2, 2),
    "logsumexp": (lambda a: a.logsumexp(1, keepdim=True) * a, -2, 2),
    "norm2": (lambda a: a.norm(dim=1, keepdim=True) * a, 0.5, 2),
    "norm3": (lambda a: a.norm(3, dim=0) * a, 0.5, 2),
    "norm_inf": (lambda a: a.norm(math.inf, dim=1, keepdim=True) * a, 0.5, 2),
    "cumsum": (lambda a: a.cumsum(1) * a, -2, 2),
    "cumprod": (lambda a: a.cumprod(1), 0.5, 1.5),
    "cumprod_zeros": (lambda a: (a * pf.tensor([[1.0, 0.0, 1.0, 1.0]], dtype=pf.float64)).cumprod(1), 0.5, 1.5),
    "softmax": (lambda a: a.softmax(1), -2, 2),
    "log_softmax": (lambda a: a.log_softmax(0), -2, 2),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_double_backward(name):
    fn, low, high = SECOND_ORDER[name]
    check_double_backward(fn, low, high, seed=13)


def test_nn_functional_softmax_family():
    import warnings

    rng = np.random.default_rng(8)
    p, t = random_pair(rng, (2, 3, 4), dtype="float32")
    for name in ("softmax", "log_softmax", "softmin"):
        fp = getattr(pf.nn.functional, name)
        ft = getattr(torch.nn.functional, name)
        for dim in (0, 1, -1):
            close(fp(p, dim), ft(t, dim), "float32")
            close(fp(p, dim=dim, dtype=pf.float64), ft(t, dim=dim, dtype=torch.float64))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            close(fp(p), ft(t), "float32")  # PyTorch's implicit dim (0 for 3-d inputs)
            close(fp(p[0]), ft(t[0]), "float32")  # and 1 for 2-d



@pytest.mark.parametrize("code", ["lib.norm(lib.ones(2, 2, 2), p='fro', dim=(0, 1, 2))", "lib.ones(2, 2, 2).norm('fro', (0, 2))",
                                  "lib.ones(3, dtype=lib.int32).cumsum_(0, dtype=lib.int64)",
                                  "lib.ones(3, dtype=lib.float16).cumprod_(0, dtype=lib.float64)",
                                  "lib.ones(3, dtype=lib.int32).cumsum_(0, dtype=lib.int32)"])
def test_frobenius_dims_and_inplace_scan_dtype_match_torch(code):
    # Found by the fuzzer: p='fro' takes at most 2 dims; an in-place scan keeps self's dtype.
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307


@pytest.mark.parametrize("values", [[2.0, 3.0, 4.0], [0.0, 3.0, 4.0], [0.0, float("nan"), 2.0], [0.0, 0.0, float("nan")],
                                    [float("inf"), 0.0, 1.0], [0.0, 3.0, 0.0, float("inf")]])
@pytest.mark.parametrize("dim", [None, 0])
def test_prod_gradient_with_zeros_and_non_finite_values_matches_torch(values, dim):
    # Found by the fuzzer: with two zeros and a NaN the gradient was NaN where PyTorch's is 0;
    # the products of the other elements now propagate exactly as PyTorch's.
    grads = []
    for lib in (torch, pf):
        x = lib.tensor(values, dtype=lib.float64, requires_grad=True)
        (x.prod() if dim is None else x.prod(dim)).backward()
        grads.append(x.grad)
    assert_matches(grads[1], grads[0])


def test_prod_gradient_along_a_dim_with_zeros_matches_torch():
    rng = np.random.default_rng(0)
    data = rng.integers(-2, 3, size=(4, 5)).astype("float64")
    for dim in (0, 1):
        xt = torch.tensor(data, requires_grad=True)
        xp = pf.tensor(data, requires_grad=True)
        w = rng.uniform(-1, 1, size=data.shape[1 - dim])
        (xt.prod(dim) * torch.tensor(w)).sum().backward()
        (xp.prod(dim) * pf.tensor(w)).sum().backward()
        assert_matches(xp.grad, xt.grad)
    check_double_backward(lambda z: z.prod(1), -2, 2, seed=1)



@pytest.mark.parametrize("code", ["lib.mean(lib.tensor(1.), (0, 0))", "lib.var_mean(lib.tensor(1., dtype=lib.float64), (0, 0))",
                                  "lib.sum(lib.tensor(1.), (0, -1))", "lib.logsumexp(lib.ones(2, 3, dtype=lib.int16), (), keepdim=True)",
                                  "lib.cumsum(lib.tensor(float('inf'), dtype=lib.float64), -1, dtype=lib.int64)",
                                  "lib.cumsum(lib.tensor(2.5, dtype=lib.float64), 0, dtype=lib.int64)",
                                  "lib.cumprod(lib.tensor(300), 0, dtype=lib.uint8)"])
def test_0d_reduction_dims_logsumexp_over_no_dims_and_0d_scans_match_torch(code):
    # Found by the fuzzer: a repeated dim of a 0-d tensor raises; logsumexp(dim=()) reduces
    # every dim; a 0-d scan fills its result with the value, converted with overflow checks.
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307


@pytest.mark.parametrize("fn", ["max", "min"])
def test_full_max_min_share_the_gradient_as_torch(fn):
    """torch.max(x) / torch.min(x): the gradient is shared by the elements equal to the result
    (ties), a NaN result sharing it among the NaNs (MaxBackward1, not amax's NaN everywhere)."""
    rng = np.random.default_rng()
    for trial in range(20):
        a = rng.integers(-3, 4, size=(int(rng.integers(1, 5)), int(rng.integers(1, 6)))).astype(np.float64)
        if trial % 3 == 0:
            a.flat[rng.integers(0, a.size, size=int(rng.integers(1, 3)))] = np.nan
        x, tx = pf.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        y, ty = getattr(pf, fn)(x), getattr(torch, fn)(tx)
        assert y.grad_fn.name() == ty.grad_fn.name()
        (y * 3).backward()
        (ty * 3).backward()
        np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-15, atol=0)
