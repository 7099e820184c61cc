"""Autograd against PyTorch: the gradient of every differentiable op on fresh random inputs
(broadcasting, non-contiguous operands, sizes 0 and 1), double backward checked numerically,
and the engine's semantics (accumulation, retain_graph, hooks, grad modes, in-place ops on
leaves, views and saved tensors, autograd.grad, backward(inputs=...), autograd.Function)."""

import math
import weakref

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_matches, check_double_backward, from_torch, random_pair, seeded_rng

SEEDS = range(4)


# ---- helpers ------------------------------------------------------------------------------------

def leaves(rng, shape, low=-2.0, high=2.0, dtype="float64", layout="contiguous"):
    """The same random values as a plugflow leaf and a torch leaf, both requiring grad.

    layout: "contiguous", "transposed" (first and last dims swapped in memory) or "strided"
    (every other element of a bigger buffer along the last dim), as in helpers.tensor_pair."""
    p, t = random_pair(rng, shape, dtype, layout, grad=True, low=low, high=high)
    if layout != "contiguous" and len(shape) >= 1 and p.numel() > 1:
        assert not p.is_contiguous() or layout == "transposed"
    return p, t


def tolerance(dtype):
    return {"float64": (1e-9, 1e-9), "float32": (2e-5, 2e-5)}[dtype]


def assert_grad(actual, expected, dtype="float64", rtol=None, atol=None):
    """plugflow's .grad (or None) equals torch's."""
    if expected is None:
        assert actual is None, f"expected no gradient, got {actual}"
        return
    assert actual is not None, "expected a gradient, got None"
    r, a = tolerance(dtype)
    assert_matches(actual, expected.detach(), rtol=rtol or r, atol=atol or a)


def check(rng, fn_pf, fn_torch, pf_inputs, torch_inputs, dtype="float64", rtol=None, atol=None):
    """Runs fn on both, compares the outputs, backpropagates the same random output gradient
    and compares the gradients of every input."""
    out_p = fn_pf(*pf_inputs)
    out_t = fn_torch(*torch_inputs)
    r, a = tolerance(dtype)
    assert_matches(out_p.detach(), out_t.detach(), rtol=rtol or r, atol=atol or a)
    assert out_p.requires_grad == out_t.requires_grad
    if not out_t.requires_grad:
        return
    g = torch.from_numpy(rng.uniform(-1, 1, size=tuple(out_t.shape)).astype(str(out_t.dtype).split(".")[-1]))
    out_t.backward(g)
    out_p.backward(from_torch(g))
    for p, t in zip(pf_inputs, torch_inputs):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            assert_grad(p.grad, t.grad, dtype, rtol, atol)


def broadcast_shapes(rng, max_dims=3, max_size=4):
    """Two shapes that broadcast (dims set to 1 or dropped at random)."""
    out = tuple(int(s) for s in rng.integers(1, max_size + 1, size=rng.integers(1, max_dims + 1)))
    a = tuple(s if rng.random() < 0.7 else 1 for s in out)
    b = tuple(s if rng.random() < 0.7 else 1 for s in out)
    return a, b[int(rng.integers(0, len(b) + 1)):]


# ---- unary ops -------------------------------------------------------------------------------------

# name -> (low, high) of the inputs: inside the domain and away from non-differentiable points.
UNARY = {
    "exp": (-2, 2), "exp2": (-2, 2), "expm1": (-2, 2), "log": (0.2, 3), "log2": (0.2, 3), "log10": (0.2, 3),
    "log1p": (-0.5, 3), "sqrt": (0.2, 3), "rsqrt": (0.2, 3), "sin": (-3, 3), "cos": (-3, 3), "tan": (-1, 1),
    "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "atan": (-3, 3), "sinh": (-2, 2), "cosh": (-2, 2), "tanh": (-2, 2),
    "asinh": (-3, 3), "acosh": (1.2, 3), "atanh": (-0.9, 0.9), "sigmoid": (-3, 3), "erf": (-2, 2),
    "erfc": (-2, 2), "erfinv": (-0.9, 0.9), "reciprocal": (0.3, 3), "neg": (-3, 3), "abs": (-3, 3),
    "square": (-3, 3), "sign": (-3, 3), "relu": (-3, 3), "floor": (-3, 3), "ceil": (-3, 3), "round": (-3, 3),
    "trunc": (-3, 3), "frac": (-3, 3),
}
# PyTorch 1.13 has no derivative for these in-place forms (plugflow has; see test_inplace_unary_extra).
TORCH_NO_INPLACE_GRAD = {"acosh", "asinh", "atanh", "acos", "asin", "atan", "erfinv"}
FUNCTIONAL_UNARY = {"silu": (-3, 3), "mish": (-3, 3), "hardswish": (-4, 4), "hardsigmoid": (-4, 4)}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_grad(seed, op):
    rng = np.random.default_rng(seed)
    low, high = UNARY[op]
    layout = ["contiguous", "transposed", "strided", "contiguous"][seed]
    shape = [(3, 4), (2, 3, 2), (5,), ()][seed] if layout == "contiguous" else (3, 4)
    x, tx = leaves(rng, shape, low, high, layout=layout)
    check(rng, lambda a: getattr(a, op)(), lambda a: getattr(a, op)(), [x], [tx])
    # The function form and the in-place form on a non-leaf.
    x.grad = None
    tx.grad = None
    check(rng, lambda a: getattr(pf, op)(a * 1), lambda a: getattr(torch, op)(a * 1), [x], [tx])
    if op in TORCH_NO_INPLACE_GRAD:
        return
    x.grad = None
    tx.grad = None
    check(rng, lambda a: getattr(a * 1, op + "_")(), lambda a: getattr(a * 1, op + "_")(), [x], [tx])


@pytest.mark.parametrize("op", sorted(FUNCTIONAL_UNARY))
def test_functional_unary_grad(op):
    rng = np.random.default_rng(0)
    low, high = FUNCTIONAL_UNARY[op]
    x, tx = leaves(rng, (4, 5), low, high)
    # PyTorch's hardsigmoid backward multiplies by a float32 1/6, also for float64.
    rtol = 1e-6 if op == "hardsigmoid" else None
    check(rng, lambda a: getattr(pf._C, op)(a), lambda a: getattr(torch.nn.functional, op)(a), [x], [tx],
          rtol=rtol, atol=rtol)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (1,), (1, 1), ()])
def test_unary_edge_sizes(shape):
    rng = np.random.default_rng(0)
    x, tx = leaves(rng, shape, 0.5, 2)
    check(rng, lambda a: a.exp().log().sqrt(), lambda a: a.exp().log().sqrt(), [x], [tx])


def test_unary_float32():
    rng = np.random.default_rng(0)
    x, tx = leaves(rng, (6, 7), 0.2, 2, dtype="float32")
    check(rng, lambda a: (a.log() * a.sin()).tanh(), lambda a: (a.log() * a.sin()).tanh(), [x], [tx], "float32")


def test_integer_input_promotes_without_grad():
    a = pf.tensor([1, 2, 3])
    assert not a.exp().requires_grad
    with pytest.raises(RuntimeError, match="floating point"):
        a.requires_grad_()


# ---- binary ops --------------------------------------------------------------------------------------

BINARY = {  # name -> (a's range, b's range)
    "add": ((-3, 3), (-3, 3)), "sub": ((-3, 3), (-3, 3)), "mul": ((-3, 3), (-3, 3)), "div": ((-3, 3), (0.5, 3)),
    "pow": ((0.3, 3), (-2, 2)), "maximum": ((-3, 3), (-3, 3)), "minimum": ((-3, 3), (-3, 3)),
    "atan2": ((-3, 3), (-3, 3)), "remainder": ((-5, 5), (0.7, 2)), "fmod": ((-5, 5), (0.7, 2)),
    "copysign": ((-3, 3), (-3, 3)), "xlogy": ((-3, 3), (0.3, 3)), "hypot": ((-3, 3), (-3, 3)),
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_grad_broadcast(seed, op):
    rng = np.random.default_rng(seed)
    (alo, ahi), (blo, bhi) = BINARY[op]
    sa, sb = broadcast_shapes(rng)
    la = "transposed" if seed == 1 else "strided" if seed == 2 else "contiguous"
    a, ta = leaves(rng, sa, alo, ahi, layout=la)
    b, tb = leaves(rng, sb, blo, bhi, layout="strided" if seed == 3 else "contiguous")
    check(rng, lambda x, y: getattr(pf, op)(x, y), lambda x, y: getattr(torch, op)(x, y), [a, b], [ta, tb])


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_one_side_requires_grad(op):
    rng = np.random.default_rng(1)
    (alo, ahi), (blo, bhi) = BINARY[op]
    a, ta = leaves(rng, (3, 4), alo, ahi)
    b, tb = leaves(rng, (4,), blo, bhi)
    b.requires_grad_(False)
    tb.requires_grad_(False)
    check(rng, lambda x, y: getattr(pf, op)(x, y), lambda x, y: getattr(torch, op)(x, y), [a, b], [ta, tb])
    a.requires_grad_(False)
    ta.requires_grad_(False)
    b.requires_grad_(True)
    tb.requires_grad_(True)
    check(rng, lambda x, y: getattr(pf, op)(x, y), lambda x, y: getattr(torch, op)(x, y), [a, b], [ta, tb])


@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv", "pow", "mod"])
def test_binary_with_python_numbers(op):
    import operator

    f = getattr(operator, op)
    rng = np.random.default_rng(2)
    x, tx = leaves(rng, (3, 4), 0.5, 2)
    check(rng, lambda a: f(a, 1.5), lambda a: f(a, 1.5), [x], [tx])
    if op != "mod":  # PyTorch 1.13 has no derivative of remainder for a tensor divisor
        x.grad = tx.grad = None
        check(rng, lambda a: f(2.5, a), lambda a: f(2.5, a), [x], [tx])
    x.grad = tx.grad = None
    check(rng, lambda a: f(a, 2), lambda a: f(a, 2), [x], [tx])


def test_add_sub_alpha_and_inplace_binary():
    rng = np.random.default_rng(3)
    a, ta = leaves(rng, (3, 4))
    b, tb = leaves(rng, (4,))
    check(rng, lambda x, y: x.add(y, alpha=2.5), lambda x, y: x.add(y, alpha=2.5), [a, b], [ta, tb])
    a.grad = ta.grad = b.grad = tb.grad = None
    check(rng, lambda x, y: x.sub(y, alpha=-0.5), lambda x, y: x.sub(y, alpha=-0.5), [a, b], [ta, tb])
    for name in ["add_", "sub_", "mul_", "div_", "pow_"]:
        a.grad = ta.grad = b.grad = tb.grad = None

        def fp(x, y, name=name):
            return getattr(x.abs() + 0.5, name)(y)

        def ft(x, y, name=name):
            return getattr(x.abs() + 0.5, name)(y)

        check(rng, fp, ft, [a, b], [ta, tb])


def test_maximum_minimum_ties_split_gradient():
    a = pf.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = pf.tensor([1.0, 5.0, 3.0], requires_grad=True)
    ta = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    tb = torch.tensor([1.0, 5.0, 3.0], requires_grad=True)
    (pf.maximum(a, b) * pf.tensor([1.0, 2.0, 4.0])).sum().backward()
    (torch.maximum(ta, tb) * torch.tensor([1.0, 2.0, 4.0])).sum().backward()
    assert_grad(a.grad, ta.grad, "float32")
    assert_grad(b.grad, tb.grad, "float32")
    a.grad = b.grad = None
    ta.grad = tb.grad = None
    pf.minimum(a, b).sum().backward()
    torch.minimum(ta, tb).sum().backward()
    assert_grad(a.grad, ta.grad, "float32")
    assert_grad(b.grad, tb.grad, "float32")


def test_pow_at_zero():
    # d/da a^b at a = 0: 0 for b > 1, and d/db where a == 0 is 0 (PyTorch's masking).
    a = pf.tensor([0.0, 0.0, 2.0], dtype=pf.float64, requires_grad=True)
    b = pf.tensor([2.0, 3.0, 0.0], dtype=pf.float64, requires_grad=True)
    ta = torch.tensor([0.0, 0.0, 2.0], dtype=torch.float64, requires_grad=True)
    tb = torch.tensor([2.0, 3.0, 0.0], dtype=torch.float64, requires_grad=True)
    pf.pow(a, b).sum().backward()
    torch.pow(ta, tb).sum().backward()
    assert_grad(a.grad, ta.grad)
    assert_grad(b.grad, tb.grad)


def test_mixed_dtype_binary_grad_dtypes():
    # float32 * float64 computes in float64; each input's gradient has its own dtype.
    rng = np.random.default_rng(4)
    a, ta = leaves(rng, (3,), dtype="float32")
    b, tb = leaves(rng, (3,), dtype="float64")
    (a * b).sum().backward()
    (ta * tb).sum().backward()
    assert a.grad.dtype == pf.float32 and b.grad.dtype == pf.float64
    assert_grad(a.grad, ta.grad, "float32")
    assert_grad(b.grad, tb.grad)


def test_integer_tensor_operand_gets_no_grad():
    rng = np.random.default_rng(5)
    a, ta = leaves(rng, (2, 3))
    check(rng, lambda x: x * pf.tensor([1, 2, 3]), lambda x: x * torch.tensor([1, 2, 3]), [a], [ta])


# ---- reductions ------------------------------------------------------------------------------------

def random_dims(rng, ndim):
    if ndim == 0 or rng.random() < 0.3:
        return None
    if rng.random() < 0.5:
        return int(rng.integers(-ndim, ndim))
    count = int(rng.integers(1, ndim + 1))
    return tuple(int(d) for d in rng.permutation(ndim)[:count])


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
def test_reduction_grad(seed, op):
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(1, 5, size=rng.integers(0, 4)))
    layout = "transposed" if seed % 3 == 1 else "strided" if seed % 3 == 2 else "contiguous"
    x, tx = leaves(rng, shape, layout=layout)
    dims = random_dims(rng, x.dim())
    keepdim = bool(seed % 2)
    if dims is None:
        check(rng, lambda a: getattr(a, op)(), lambda a: getattr(a, op)(), [x], [tx])
    else:
        check(rng, lambda a: getattr(a, op)(dims, keepdim=keepdim), lambda a: getattr(a, op)(dims, keepdim=keepdim),
              [x], [tx])


def test_amax_amin_ties_share_gradient():
    x = pf.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], requires_grad=True)
    tx = torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], requires_grad=True)
    (x.amax(1) * pf.tensor([1.0, 10.0])).sum().backward()
    (tx.amax(1) * torch.tensor([1.0, 10.0])).sum().backward()
    assert_grad(x.grad, tx.grad, "float32")
    x.grad = tx.grad = None
    x.max().backward()
    tx.max().backward()
    assert_grad(x.grad, tx.grad, "float32")
    x.grad = tx.grad = None
    x.min().backward()
    tx.min().backward()
    assert_grad(x.grad, tx.grad, "float32")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_dim_grad(seed, op):
    rng = np.random.default_rng(seed)
    x, tx = leaves(rng, (3, 4, 2), layout="transposed" if seed % 2 else "contiguous")
    dim = int(rng.integers(-3, 3))
    keepdim = bool(seed % 2)
    check(rng, lambda a: getattr(a, op)(dim, keepdim)[0], lambda a: getattr(a, op)(dim, keepdim)[0], [x], [tx])
    vals, idx = getattr(x, op)(dim)
    assert not idx.requires_grad and idx.grad_fn is None
    assert vals.grad_fn.name() == ("MaxBackward0" if op == "max" else "MinBackward0")


@pytest.mark.parametrize("seed", SEEDS)
def test_prod_grad_with_zeros(seed):
    rng = np.random.default_rng(seed)
    data = rng.uniform(0.5, 1.5, size=(4, 5))
    data[0, 1] = 0.0  # one zero in row 0
    data[1, 0] = data[1, 3] = 0.0  # two zeros in row 1
    data[2, 2] = 0.0
    data[3, :] = 0.0
    if seed % 2:
        data = data.T.copy()
    x = pf.from_numpy(data.copy()).requires_grad_()
    tx = torch.from_numpy(data.copy()).requires_grad_()
    for dims in [None, 0, 1, -1]:
        for keepdim in (False, True):
            x.grad = tx.grad = None
            if dims is None:
                check(rng, lambda a: a.prod(), lambda a: a.prod(), [x], [tx])
            else:
                check(rng, lambda a: a.prod(dims, keepdim=keepdim), lambda a: a.prod(dims, keepdim=keepdim), [x], [tx])


def test_prod_grad_no_zeros_all():
    rng = np.random.default_rng(9)
    x, tx = leaves(rng, (2, 3, 2), 0.5, 1.5, layout="transposed")
    check(rng, lambda a: a.prod(), lambda a: a.prod(), [x], [tx])


@pytest.mark.parametrize("op", ["sum", "mean", "prod"])
@pytest.mark.parametrize("shape,dim", [((0,), 0), ((0, 3), 0), ((0, 3), 1), ((1,), 0), ((1, 1), 1), ((), 0)])
def test_reduction_edge_sizes(op, shape, dim):
    rng = np.random.default_rng(0)
    x, tx = leaves(rng, shape)
    check(rng, lambda a: getattr(a, op)(dim), lambda a: getattr(a, op)(dim), [x], [tx])
    x.grad = tx.grad = None
    check(rng, lambda a: getattr(a, op)(), lambda a: getattr(a, op)(), [x], [tx])


def test_sum_dtype_and_mean_float32():
    rng = np.random.default_rng(1)
    x, tx = leaves(rng, (3, 4), dtype="float32")
    check(rng, lambda a: a.sum(1, dtype=pf.float64), lambda a: a.sum(1, dtype=torch.float64), [x], [tx])
    assert x.grad.dtype == pf.float32
    x.grad = tx.grad = None
    check(rng, lambda a: a.mean(0), lambda a: a.mean(0), [x], [tx], "float32")


# ---- matrix products ------------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)),
    ((5, 2, 3), (5, 3, 4)), ((2, 1, 2, 3), (4, 3, 2)), ((5, 2, 3), (3,)), ((3,), (5, 3, 4)), ((1, 3), (3, 1)),
    ((0, 3), (3, 4)), ((2, 0), (0, 4)), ((2, 3), (3, 0)), ((4, 0, 3), (3, 2)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul_grad(sa, sb):
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    a, ta = leaves(rng, sa, layout="transposed")
    b, tb = leaves(rng, sb, layout="transposed")
    check(rng, lambda x, y: x @ y, lambda x, y: x @ y, [a, b], [ta, tb])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mm_bmm_grad(dtype):
    rng = np.random.default_rng(0)
    a, ta = leaves(rng, (4, 3), dtype=dtype, layout="transposed")
    b, tb = leaves(rng, (3, 5), dtype=dtype)
    check(rng, pf.mm, torch.mm, [a, b], [ta, tb], dtype)
    a, ta = leaves(rng, (2, 4, 3), dtype=dtype, layout="strided")
    b, tb = leaves(rng, (2, 3, 5), dtype=dtype, layout="transposed")
    check(rng, pf.bmm, torch.bmm, [a, b], [ta, tb], dtype)
    a, ta = leaves(rng, (2, 0, 3), dtype=dtype)
    b, tb = leaves(rng, (2, 3, 5), dtype=dtype)
    check(rng, pf.bmm, torch.bmm, [a, b], [ta, tb], dtype)
    a, ta = leaves(rng, (2, 3, 0), dtype=dtype)
    b, tb = leaves(rng, (2, 0, 5), dtype=dtype)
    check(rng, pf.bmm, torch.bmm, [a, b], [ta, tb], dtype)


# ---- views --------------------------------------------------------------------------------------------

VIEWS = {
    "view": (lambda t: t.view(4, 6), (2, 3, 4)),
    "view_infer": (lambda t: t.view(-1), (2, 3, 4)),
    "reshape": (lambda t: t.reshape(3, 8), (2, 3, 4)),
    "permute": (lambda t: t.permute(2, 0, 1), (2, 3, 4)),
    "transpose": (lambda t: t.transpose(0, 2), (2, 3, 4)),
    "T": (lambda t: t.T, (3, 4)),
    "t": (lambda t: t.t(), (3, 4)),
    "expand": (lambda t: t.expand(2, 3, 4), (3, 1)),
    "expand_as": (lambda t: t.expand(4, -1), (1, 5)),
    "squeeze": (lambda t: t.squeeze(), (1, 3, 1, 2)),
    "squeeze_dim": (lambda t: t.squeeze(2), (1, 3, 1, 2)),
    "unsqueeze": (lambda t: t.unsqueeze(1), (3, 4)),
    "slice": (lambda t: t[1:, ::2], (3, 5)),
    "slice_neg": (lambda t: t[:, -3:-1], (3, 5)),
    "select": (lambda t: t[1], (3, 5)),
    "select_neg": (lambda t: t.select(1, -1), (3, 5)),
    "narrow": (lambda t: t.narrow(1, 1, 2), (3, 5)),
    "flatten": (lambda t: t.flatten(1), (2, 3, 4)),
    "getitem_mixed": (lambda t: t[None, ..., 1, ::2], (2, 3, 4)),
    "chain": (lambda t: t.transpose(0, 1)[1:].reshape(-1)[::3], (3, 4, 2)),
    "empty_slice": (lambda t: t[2:2], (3, 4)),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_view_grad(name, layout):
    fn, shape = VIEWS[name]
    rng = np.random.default_rng(7)
    x, tx = leaves(rng, shape, layout=layout)
    if name.startswith("view") and layout == "transposed":  # not viewable, as in PyTorch
        for t in (x, tx):
            with pytest.raises(RuntimeError, match="view size is not compatible"):
                fn(t)
        return
    # A nonlinear use of the view, so that each position's gradient differs.
    check(rng, lambda a: fn(a * 1.5) ** 2, lambda a: fn(a * 1.5) ** 2, [x], [tx])
    x.grad = tx.grad = None
    check(rng, fn, fn, [x], [tx])


def test_view_edge_sizes():
    rng = np.random.default_rng(1)
    x, tx = leaves(rng, (0, 3))
    check(rng, lambda a: a.reshape(3, 0).t().unsqueeze(0), lambda a: a.reshape(3, 0).t().unsqueeze(0), [x], [tx])
    x, tx = leaves(rng, ())
    check(rng, lambda a: a.reshape(1, 1).expand(2, 3), lambda a: a.reshape(1, 1).expand(2, 3), [x], [tx])


def test_as_strided_grad():
    rng = np.random.default_rng(2)
    x, tx = leaves(rng, (4, 3))
    check(rng, lambda a: (a * 1).as_strided((2, 2), (3, 1), 1) * 3,
          lambda a: (a * 1).as_strided((2, 2), (3, 1), 1) * 3, [x], [tx])


# ---- casts and copies ------------------------------------------------------------------------------

def test_cast_grad():
    rng = np.random.default_rng(3)
    x, tx = leaves(rng, (3, 4), dtype="float32")
    check(rng, lambda a: a.double() * 2, lambda a: a.double() * 2, [x], [tx], "float32")
    assert x.grad.dtype == pf.float32
    x.grad = tx.grad = None
    check(rng, lambda a: a.to(pf.float64).sin(), lambda a: a.to(torch.float64).sin(), [x], [tx], "float32")
    x.grad = tx.grad = None
    check(rng, lambda a: a.to(dtype=pf.float16).float() * 3, lambda a: a.to(dtype=torch.float16).float() * 3,
          [x], [tx], "float32", rtol=1e-3, atol=1e-3)
    y = x.to(pf.float64)
    assert y.grad_fn.name() == "ToCopyBackward0"
    assert x.to(pf.float32) is x
    assert not x.long().requires_grad and x.long().grad_fn is None


def test_clone_and_contiguous_grad():
    rng = np.random.default_rng(4)
    x, tx = leaves(rng, (3, 4), layout="transposed")
    check(rng, lambda a: a.clone() * a, lambda a: a.clone() * a, [x], [tx])
    assert x.clone().grad_fn.name() == "CloneBackward0"
    x.grad = tx.grad = None
    check(rng, lambda a: a.contiguous() ** 2, lambda a: a.contiguous() ** 2, [x], [tx])


def test_copy_grad():
    rng = np.random.default_rng(5)
    x, tx = leaves(rng, (4,))
    w, tw = leaves(rng, (3, 4))

    def fp(a, b):
        y = b * 1
        y.copy_(a)  # broadcast source, old value of y gets no gradient
        return y * b

    def ft(a, b):
        y = b * 1
        y.copy_(a)
        return y * b

    check(rng, fp, ft, [x, w], [tx, tw])
    # Into a tensor that does not require grad, with a dtype change.
    x.grad = tx.grad = None

    def fp2(a):
        y = pf.zeros(2, 4, dtype=pf.float32)
        y.copy_(a)
        return y

    def ft2(a):
        y = torch.zeros(2, 4, dtype=torch.float32)
        y.copy_(a)
        return y

    check(rng, fp2, ft2, [x], [tx], "float32")
    assert x.grad.dtype == pf.float64


# ---- double backward -------------------------------------------------------------------------------

SECOND_ORDER = {  # name -> (function, low, high)
    "mul": (lambda a: a * a * 3, -2, 2),
    "div": (lambda a: 1 / (a + 3), -1, 1),
    "exp": (lambda a: a.exp(), -1, 1),
    "log": (lambda a: a.log(), 0.5, 2),
    "sin": (lambda a: a.sin(), -2, 2),
    "cos": (lambda a: a.cos(), -2, 2),
    "tanh": (lambda a: a.tanh(), -2, 2),
    "sigmoid": (lambda a: a.sigmoid(), -2, 2),
    "sqrt": (lambda a: a.sqrt(), 0.5, 2),
    "rsqrt": (lambda a: a.rsqrt(), 0.5, 2),
    "pow": (lambda a: a ** 3, -2, 2),
    "pow_tensor": (lambda a: a ** a, 0.5, 2),
    "reciprocal": (lambda a: a.reciprocal(), 0.5, 2),
    "atan": (lambda a: a.atan(), -2, 2),
    "erf": (lambda a: a.erf(), -1, 1),
    "silu": (lambda a: pf._C.silu(a), -2, 2),
    "sum": (lambda a: a.sum(1, keepdim=True) * a, -2, 2),
    "mean": (lambda a: a.mean(0) * a, -2, 2),
    "prod": (lambda a: a.prod(1, keepdim=True) * a, 0.5, 1.5),
    "matmul": (lambda a: (a @ a.t()) @ a, -1, 1),
    "views": (lambda a: a.t().reshape(-1)[::2].unsqueeze(0).expand(2, -1) ** 2, -2, 2),
    "amax": (lambda a: a.amax(1, keepdim=True) * a, -2, 2),
    "abs": (lambda a: a.abs() * a, -2, 2),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_double_backward_numerically(name):
    """d/dx <v, grad_x <w, f(x)>> computed by double backward equals a finite difference of the
    first derivative (computed by backward) along v."""
    fn, low, high = SECOND_ORDER[name]
    check_double_backward(fn, low, high, seed=11)


def test_double_backward_matches_torch():
    rng = np.random.default_rng(12)
    x, tx = leaves(rng, (3, 3), 0.5, 1.5)
    (g,) = pf.autograd.grad((x.sin() * x.exp()).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad((tx.sin() * tx.exp()).sum(), tx, create_graph=True)
    assert_grad(g, tg)
    (g * g).sum().backward()
    (tg * tg).sum().backward()
    assert_grad(x.grad, tx.grad)


def test_backward_create_graph_accumulates_differentiable_grad():
    x = pf.tensor([1.0, 2.0], dtype=pf.float64, requires_grad=True)
    (x ** 3).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    g = x.grad
    x.grad = None
    g.sum().backward()
    assert x.grad.tolist() == [6.0, 12.0]


# ---- engine semantics ---------------------------------------------------------------------------------

def test_gradients_accumulate():
    x = pf.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * 2).sum().backward()
    (x * x).sum().backward()
    assert x.grad.tolist() == [4.0, 6.0, 8.0]
    x.grad.zero_()
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0, 3.0]
    x.grad = None
    x.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0]


def test_shared_subexpression_and_reused_input():
    rng = np.random.default_rng(0)
    x, tx = leaves(rng, (4,))
    check(rng, lambda a: (lambda y: y * y + y.exp())(a.sin()), lambda a: (lambda y: y * y + y.exp())(a.sin()),
          [x], [tx])


def test_retain_graph():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 8.0]
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()
    # Nodes that saved nothing can run again (as in PyTorch).
    z = (x + 1).sum()
    z.backward()
    z.backward()


def test_backward_non_scalar():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        y.backward()
    y.backward(pf.tensor([1.0, 0.5]))
    assert x.grad.tolist() == [2.0, 1.0]
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(pf.tensor([1.0, 2.0, 3.0]))


def test_backward_without_grad_raises():
    x = pf.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        x.sum().backward()


def test_hooks():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    h = x.register_hook(lambda g: seen.append(g.tolist()))
    (x * 3).sum().backward()
    assert seen == [[3.0, 3.0]]
    h.remove()
    x.grad = None
    h2 = x.register_hook(lambda g: g * 10)
    (x * 3).sum().backward()
    assert x.grad.tolist() == [30.0, 30.0]
    h2.remove()
    x.grad = None
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    # A hook on an intermediate changes what flows further back.
    x.grad = None
    y = x * 2
    y.register_hook(lambda g: g + 1)
    (y * 5).sum().backward()
    assert x.grad.tolist() == [12.0, 12.0]
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        pf.tensor([1.0]).register_hook(lambda g: g)


def test_hook_matches_torch_on_intermediate_with_two_uses():
    for lib in (pf, torch):
        x = lib.tensor([1.0, -2.0], requires_grad=True)
        y = x * 2
        y.register_hook(lambda g: g * 3)
        (y * y).sum().backward()
        if lib is pf:
            ours = x.grad.tolist()
        else:
            theirs = x.grad.tolist()
    assert ours == theirs


def test_retain_grad():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    assert y.retains_grad and not x.retains_grad
    z = y * y
    z.sum().backward(retain_graph=True)
    assert y.grad.tolist() == [4.0, 8.0]
    assert z.grad is None
    (y * 1).sum().backward()
    assert y.grad.tolist() == [5.0, 9.0]  # accumulates, like a leaf's


def test_leaf_and_requires_grad_flags():
    x = pf.ones(2, requires_grad=True)
    y = x * 2
    assert x.is_leaf and not y.is_leaf and y.requires_grad
    assert x.grad_fn is None and y.grad_fn.name() == "MulBackward0"
    assert y.grad_fn.next_functions[0][0].name() == "AccumulateGrad"
    with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf variables"):
        y.requires_grad = False
    y.requires_grad = True  # allowed: already requires grad
    z = pf.ones(2)
    assert z.is_leaf and not z.requires_grad and z.grad is None
    z.requires_grad = True
    assert z.requires_grad


@pytest.mark.parametrize("fn", ["zeros", "ones", "rand", "randn", "empty"])
def test_creation_requires_grad(fn):
    t = getattr(pf, fn)(2, 3, requires_grad=True)
    assert t.requires_grad and t.is_leaf
    like = getattr(pf, fn + "_like")(t, requires_grad=True)
    assert like.requires_grad
    assert not getattr(pf, fn + "_like")(t).requires_grad


def test_creation_requires_grad_other():
    assert pf.tensor([1.0, 2.0], requires_grad=True).requires_grad
    assert pf.full((2,), 1.5, requires_grad=True).requires_grad
    assert pf.full_like(pf.ones(2), 3.0, requires_grad=True).requires_grad
    assert pf.arange(3.0, requires_grad=True).requires_grad
    assert pf.linspace(0, 1, 5, requires_grad=True).requires_grad
    assert pf.ones(2).new_zeros(3, requires_grad=True).requires_grad
    with pytest.raises(RuntimeError, match="floating point"):
        pf.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        pf.zeros(2, dtype=pf.int64, requires_grad=True)


def test_repr_shows_grad_fn_and_requires_grad():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    assert repr(x) == "tensor([1., 2.], requires_grad=True)"
    assert repr(x * 2) == "tensor([2., 4.], grad_fn=<MulBackward0>)"
    assert repr(x.sum()) == repr(torch.tensor([1.0, 2.0], requires_grad=True).sum()).replace("torch", "plugflow")
    assert repr(x.detach()) == "tensor([1., 2.])"
    d = pf.tensor([1.0, 2.0], dtype=pf.float64, requires_grad=True)
    assert repr(d) == "tensor([1., 2.], dtype=plugflow.float64, requires_grad=True)"
    assert repr(d[0]).endswith("grad_fn=<SelectBackward0>)")
    # printing does not record anything
    assert x.grad_fn is None and x.grad is None


def test_grad_modes():
    x = pf.ones(2, requires_grad=True)
    assert pf.is_grad_enabled()
    with pf.no_grad():
        assert not pf.is_grad_enabled()
        y = x * 2
        with pf.enable_grad():
            assert pf.is_grad_enabled()
            z = x * 2
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad
    with pf.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert pf.is_grad_enabled()
    pf.set_grad_enabled(False)
    assert not pf.is_grad_enabled()
    pf.set_grad_enabled(True)
    assert pf.is_grad_enabled()
    with pf.inference_mode():
        assert pf.is_inference_mode_enabled() and not pf.is_grad_enabled()
        assert not (x * 2).requires_grad
    assert not pf.is_inference_mode_enabled() and pf.is_grad_enabled()
    with pf.inference_mode(False):
        assert pf.is_grad_enabled()
    # Views of tensors that require grad created under no_grad don't require grad.
    with pf.no_grad():
        v = x[0]
    assert not v.requires_grad


def test_grad_mode_decorators():
    x = pf.ones(2, requires_grad=True)

    @pf.no_grad()
    def f(t):
        return t * 2

    @pf.enable_grad()
    def g(t):
        return t * 2

    @pf.inference_mode()
    def h(t):
        return t * 2

    @pf.set_grad_enabled(False)
    def k(t):
        return t * 2

    assert pf.is_grad_enabled()  # decorating with set_grad_enabled(False) leaves the mode alone
    assert not f(x).requires_grad
    assert not h(x).requires_grad
    assert not k(x).requires_grad
    with pf.no_grad():
        assert g(x).requires_grad
    assert pf.is_grad_enabled()

    @pf.no_grad()
    def gen():
        yield pf.is_grad_enabled()
        yield pf.is_grad_enabled()

    assert list(gen()) == [False, False]
    assert pf.is_grad_enabled()

    # Exceptions restore the mode.
    with pytest.raises(ValueError):
        with pf.no_grad():
            raise ValueError
    assert pf.is_grad_enabled()


def test_detach():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    d[0] = 10.0  # shares memory
    assert y[0].item() == 10.0
    y2 = x * 3
    y2.detach_()
    assert not y2.requires_grad and y2.is_leaf
    with pytest.raises(RuntimeError, match="Can't detach views in-place"):
        (x * 1)[0].detach_()


def test_inplace_on_leaf_requiring_grad_raises():
    x = pf.ones(3, requires_grad=True)
    msg = "a leaf Variable that requires grad is being used in an in-place operation."
    with pytest.raises(RuntimeError, match=msg):
        x.mul_(2)
    with pytest.raises(RuntimeError, match=msg):
        x += 1
    with pytest.raises(RuntimeError, match=msg):
        x.zero_()
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        x[0] = 5.0
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        x[1:].exp_()
    with pf.no_grad():  # allowed without grad mode (how optimizers update parameters)
        x.mul_(2)
        x[0] = 5.0
    assert x.tolist() == [5.0, 2.0, 2.0]
    assert x.is_leaf and x.grad_fn is None


def run_both(fn):
    """fn(lib, x) on a fresh float64 leaf for plugflow and torch; returns both x.grad."""
    data = np.arange(1.0, 13.0).reshape(3, 4) / 7
    out = []
    for lib, make in ((pf, pf.from_numpy), (torch, torch.from_numpy)):
        x = make(data.copy()).requires_grad_()
        fn(lib, x)
        out.append(x.grad)
    return out


def weights(lib, shape):
    n = int(np.prod(shape))
    return lib.from_numpy((np.arange(n, dtype=np.float64).reshape(shape) + 1) / 3)


INPLACE_CASES = {
    "imul_row": lambda lib, x: (lambda y: (y.__getitem__(0).mul_(3), (y * weights(lib, (3, 4))).sum().backward()))(x * 2),
    "setitem_scalar_col": lambda lib, x: (lambda y: (y.__setitem__((slice(None), 1), 0.0),
                                                     (y * weights(lib, (3, 4))).sum().backward()))(x * 2),
    "augassign_row": lambda lib, x: (lambda y: (exec("y[0] *= 3", {"y": y}),
                                                (y * y * weights(lib, (3, 4))).sum().backward()))(x * 2),
    "setitem_tensor": lambda lib, x: (lambda y: (y.__setitem__(1, x[0] * x[2]),
                                                 (y * weights(lib, (3, 4))).sum().backward()))(x.sin()),
    "view_of_view": lambda lib, x: (lambda y: (y[1:][:, ::2].sin_(), (y * weights(lib, (3, 4))).sum().backward()))(
        x * 1),
    "base_after_view": lambda lib, x: (lambda y: (lambda v: (y.mul_(x), (v * weights(lib, (4,))).sum().backward()))(
        y[0]))(x * 2),
    "view_after_base_change": lambda lib, x: (lambda y: (lambda v: (v.mul_(2), y.add_(1),
                                                                     (v * y[0]).sum().backward()))(y[1]))(x.sin()),
    "transposed_view": lambda lib, x: (lambda y: (y.t()[1].pow_(2), (y * weights(lib, (3, 4))).sum().backward()))(
        x * 1),
    "zero_view": lambda lib, x: (lambda y: (y[:, 2:].zero_(), (y * y).sum().backward()))(x + 0),
    "inplace_nonleaf": lambda lib, x: (lambda y: (y.mul_(2), y.add_(x), y.sub_(x * x), y.div_(x + 1), y.exp_(),
                                                (y * y).sum().backward()))(x * 1),
    "copy_into_view": lambda lib, x: (lambda y: (y[2].copy_(x[0] * 5), (y * weights(lib, (3, 4))).sum().backward()))(
        x * 1),
    "fill_leafless_base": lambda lib, x: (lambda y: (y[1].copy_(x[1]), (y * weights(lib, (3, 4))).sum().backward()))(
        lib.zeros(3, 4, dtype=lib.float64)),
}


@pytest.mark.parametrize("name", sorted(INPLACE_CASES))
def test_inplace_through_views(name):
    ours, theirs = run_both(INPLACE_CASES[name])
    assert_grad(ours, theirs)


def test_inplace_on_saved_output_raises_like_torch():
    for case in (lambda lib, x: (lambda y: (y.exp_(), y.mul_(2), y.sum().backward()))(x * 1),
                 lambda lib, x: (lambda y: (y.__setitem__(1, x[0]), y.sum().backward()))(x.exp())):
        for lib in (pf, torch):
            x = lib.ones(3, 4, dtype=lib.float64, requires_grad=True)
            with pytest.raises(RuntimeError, match="output 0 of ExpBackward0"):
                case(lib, x)


def test_inplace_view_grad_fn_names():
    x = pf.ones(3, 4, requires_grad=True)
    y = x * 2
    y[0] *= 3
    assert y.grad_fn.name() == "CopySlices"
    z = x * 1
    z.mul_(2)
    assert z.grad_fn.name() == "MulBackward0"
    v = (x * 1)[0]
    assert v.grad_fn.name() == "SelectBackward0"


def test_saved_tensor_modified_inplace_raises():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    z = y * y
    y.add_(1)
    with pytest.raises(RuntimeError) as info:
        z.sum().backward()
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    ty = tx * 1
    tz = ty * ty
    ty.add_(1)
    with pytest.raises(RuntimeError) as tinfo:
        tz.sum().backward()
    ours = str(info.value)
    assert "one of the variables needed for gradient computation has been modified by an inplace operation" in ours
    # PyTorch names the tensor's current grad_fn (the in-place add).
    assert "[plugflow.FloatTensor [2]], which is output 0 of AddBackward0, is at version 1; expected version 0 " \
           "instead" in ours
    assert str(tinfo.value).split("instead")[0].replace("torch.", "plugflow.") == ours.split("instead")[0]

    # An op's own saved output, modified in place.
    a = pf.tensor([1.0, 2.0], requires_grad=True)
    e = a.exp()
    e.mul_(2)
    with pytest.raises(RuntimeError, match="which is output 0 of ExpBackward0"):
        e.sum().backward()
    # An in-place change the formula does not read is fine.
    b = pf.tensor([1.0, 2.0], requires_grad=True)
    c = b * 1
    d = c + 2
    c.mul_(3)
    d.sum().backward()
    assert b.grad.tolist() == [1.0, 1.0]


def test_autograd_grad():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    y = pf.tensor([3.0], requires_grad=True)
    z = pf.tensor([5.0], requires_grad=True)
    out = (x * x).sum() + y.sum() * 2
    gx, gy = pf.autograd.grad(out, (x, y), retain_graph=True)
    assert gx.tolist() == [2.0, 4.0] and gy.tolist() == [2.0]
    assert x.grad is None and y.grad is None  # .grad untouched
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        pf.autograd.grad(out, (x, z), retain_graph=True)
    gx, gz = pf.autograd.grad(out, (x, z), allow_unused=True, retain_graph=True)
    assert gx.tolist() == [2.0, 4.0] and gz is None
    (g,) = pf.autograd.grad(x * 3, x, grad_outputs=pf.tensor([1.0, -1.0]))
    assert g.tolist() == [3.0, -3.0]
    with pytest.raises(RuntimeError, match="does not require grad"):
        pf.autograd.grad(out, pf.tensor([1.0]))
    # Gradients with respect to an intermediate.
    h = x * 2
    (gh,) = pf.autograd.grad((h * h).sum(), h)
    assert gh.tolist() == [4.0, 8.0]
    # Several outputs.
    a = x * 2
    b = x * 3
    (g,) = pf.autograd.grad([a.sum(), b.sum()], [x])
    assert g.tolist() == [5.0, 5.0]


def test_backward_inputs():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    y = pf.tensor([3.0, 4.0], requires_grad=True)
    (x * y).sum().backward(inputs=[x])
    assert x.grad.tolist() == [3.0, 4.0] and y.grad is None
    (x * y).sum().backward(inputs=[y])
    assert y.grad.tolist() == [1.0, 2.0] and x.grad.tolist() == [3.0, 4.0]
    pf.autograd.backward((x * y).sum(), inputs=[x, y])
    assert x.grad.tolist() == [6.0, 8.0] and y.grad.tolist() == [2.0, 4.0]
    with pytest.raises(RuntimeError, match="cannot be empty"):
        pf.autograd.backward((x * y).sum(), inputs=[])
    # A non-leaf input gets its .grad.
    h = x * 2
    (h * h).sum().backward(inputs=[h])
    assert h.grad.tolist() == [4.0, 8.0]


def test_autograd_backward_function():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    pf.autograd.backward([x * 2, x * 3], [pf.tensor([1.0, 1.0]), pf.tensor([1.0, 2.0])])
    assert x.grad.tolist() == [5.0, 8.0]


def test_data_assignment():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    d = x.data
    assert not d.requires_grad
    d.mul_(2)  # no error: .data is outside autograd
    assert x.tolist() == [2.0, 4.0]
    x.data = pf.tensor([7.0, 8.0, 9.0])
    assert x.tolist() == [7.0, 8.0, 9.0] and x.requires_grad and x.is_leaf
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_version_counter():
    x = pf.ones(2)
    v = x._version
    x.add_(1)
    assert x._version == v + 1
    x[0] = 3.0
    assert x._version == v + 2
    y = x.detach()
    y.mul_(2)
    assert x._version == v + 3


def test_graph_is_freed():
    x = pf.ones(2, requires_grad=True)
    y = x * 2
    ref = weakref.ref(y)
    del y
    assert ref() is None


# ---- autograd.Function ---------------------------------------------------------------------------

def cube_function(lib):
    """x ** 3 * scale as a custom autograd.Function of lib (plugflow or torch) named Cube."""
    class Cube(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            ctx.save_for_backward(x)
            ctx.scale = scale
            return x ** 3 * scale

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x ** 2 * ctx.scale, None

    return Cube


Cube = cube_function(pf)


class SplitSign(pf.autograd.Function):
    """Two outputs (a tuple), one marked non-differentiable."""

    @staticmethod
    def forward(ctx, x):
        pos = x.relu()
        mask = x > 0
        ctx.mark_non_differentiable(mask)
        ctx.save_for_backward(mask)
        return pos, mask

    @staticmethod
    def backward(ctx, g, g_mask):
        (mask,) = ctx.saved_tensors
        assert g_mask is None or not g_mask.any()
        return g * mask.double()


class MulPair(pf.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return (g * b if ctx.needs_input_grad[0] else None), (g * a if ctx.needs_input_grad[1] else None)


def test_function_basic():
    x = pf.tensor([1.0, 2.0], dtype=pf.float64, requires_grad=True)
    y = Cube.apply(x, 2.0)
    assert y.grad_fn.name() == "CubeBackward"
    assert y.tolist() == [2.0, 16.0]
    y.sum().backward()
    assert x.grad.tolist() == [6.0, 24.0]


def test_function_tuple_outputs_and_non_differentiable():
    x = pf.tensor([-1.0, 2.0, 3.0], dtype=pf.float64, requires_grad=True)
    pos, mask = SplitSign.apply(x)
    assert pos.requires_grad and not mask.requires_grad
    (pos * 2).sum().backward()
    assert x.grad.tolist() == [0.0, 2.0, 2.0]


def test_function_needs_input_grad():
    a = pf.tensor([1.0, 2.0], requires_grad=True)
    b = pf.tensor([3.0, 4.0])
    seen = {}

    class Probe(MulPair):
        @staticmethod
        def backward(ctx, g):
            seen["needs"] = ctx.needs_input_grad
            return MulPair.backward(ctx, g)

    Probe.apply(a, b).sum().backward()
    assert seen["needs"] == (True, False)
    assert a.grad.tolist() == [3.0, 4.0] and b.grad is None
    # Without any input requiring grad, no graph.
    assert Probe.apply(b, b).grad_fn is None


def test_function_saved_tensor_checks_and_retain_graph():
    x = pf.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1
    y = Cube.apply(h, 1.0)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    y = Cube.apply(x, 1.0)
    s = y.sum()
    s.backward(retain_graph=True)
    s.backward()
    assert x.grad.tolist() == [6.0, 24.0]
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        s.backward()


def test_function_double_backward():
    x = pf.tensor([1.0, 2.0], dtype=pf.float64, requires_grad=True)
    (g,) = pf.autograd.grad(Cube.apply(x, 1.0).sum(), x, create_graph=True)
    assert g.tolist() == [3.0, 12.0]
    g.sum().backward()
    assert x.grad.tolist() == [6.0, 12.0]


def test_function_wrong_number_of_grads():
    class Bad(pf.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g

    a = pf.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="returned an incorrect number of gradients"):
        Bad.apply(a, a).sum().backward()


def test_function_in_chain_matches_torch():
    TorchCube = cube_function(torch)
    rng = np.random.default_rng(0)
    x, tx = leaves(rng, (3, 4))
    check(rng, lambda a: Cube.apply(a.sin(), 0.5).exp(), lambda a: TorchCube.apply(a.sin(), 0.5).exp(), [x], [tx])


# ---- error messages --------------------------------------------------------------------------------

def test_grad_assignment_checks():
    x = pf.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="different size"):
        x.grad = pf.ones(3)
    with pytest.raises(RuntimeError, match="different type"):
        x.grad = pf.ones(2, dtype=pf.float64)
    x.grad = pf.ones(2)
    assert x.grad.tolist() == [1.0, 1.0]


def test_retain_grad_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
        pf.ones(2).retain_grad()


def test_nan_gradients_propagate():
    x = pf.tensor([0.0, 1.0], requires_grad=True)
    tx = torch.tensor([0.0, 1.0], requires_grad=True)
    (x.sqrt() * 0).sum().backward()
    (tx.sqrt() * 0).sum().backward()
    assert_grad(x.grad, tx.grad, "float32")
    assert math.isnan(x.grad[0].item())


# ---- hooks: order, capture, lifetime ----------------------------------------------------------------

def test_autograd_grad_captures_before_hooks():
    x = pf.ones(2, requires_grad=True)
    x.register_hook(lambda g: g * 10)
    assert pf.autograd.grad((x * 3).sum(), x)[0].tolist() == [3.0, 3.0]
    y = x * 2
    y.register_hook(lambda g: g * 10)
    assert pf.autograd.grad((y * 3).sum(), y)[0].tolist() == [3.0, 3.0]
    assert pf.autograd.grad((y * 3).sum(), x)[0].tolist() == [60.0, 60.0]


def test_retain_grad_runs_in_hook_order():
    x = pf.ones(2, requires_grad=True)
    z = x * 2
    z.retain_grad()
    z.register_hook(lambda g: g * 10)
    (z * 3).sum().backward()
    assert z.grad.tolist() == [3.0, 3.0]
    w = x * 2
    w.register_hook(lambda g: g * 10)
    w.retain_grad()
    (w * 3).sum().backward()
    assert w.grad.tolist() == [30.0, 30.0]


def test_hook_changing_size_raises():
    a = pf.ones(2, requires_grad=True)
    b = a * 2

    def bad(g):
        return pf.ones(3)

    b.register_hook(bad)
    with pytest.raises(RuntimeError, match="hook 'bad' has changed the size of value"):
        b.sum().backward()


def test_hook_outlives_its_tensor_and_follows_inplace():
    x = pf.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g * 10)
    z = y * 3
    del y
    z.sum().backward()
    assert x.grad.tolist() == [60.0, 60.0]
    # A hook registered before an in-place op still sees the gradient of the new value.
    for lib in (pf, torch):
        a = lib.ones(2, requires_grad=True)
        b = a * 2
        seen = []
        b.register_hook(lambda g: seen.append(g.tolist()))
        b.mul_(3)
        (b * lib.tensor([1.0, 2.0])).sum().backward()
        if lib is pf:
            ours = (seen, a.grad.tolist())
        else:
            theirs = (seen, a.grad.tolist())
    assert ours == theirs


def test_retain_grad_follows_inplace():
    a = pf.ones(2, requires_grad=True)
    b = a * 2
    b.retain_grad()
    b.mul_(3)
    (b * pf.tensor([1.0, 2.0])).sum().backward()
    assert b.grad.tolist() == [1.0, 2.0]
    assert a.grad.tolist() == [6.0, 12.0]


def test_binary_grads_at_special_values_match_torch():
    nan, inf = math.nan, math.inf
    cases = [
        ("pow", [0.0, 0.0, 0.0, -2.0, 2.0], [2.0, 0.0, -1.0, 0.5, 0.0]),
        ("maximum", [nan, 1.0, 2.0, 3.0], [1.0, nan, 2.0, -inf]),
        ("minimum", [nan, 1.0, 2.0, 3.0], [1.0, nan, 2.0, inf]),
        ("div", [1.0, 0.0, -1.0], [0.0, 0.0, 2.0]),
        ("atan2", [0.0, 1.0, 0.0], [0.0, 0.0, -1.0]),
        ("copysign", [0.0, -0.0, 2.0, -3.0, nan], [-1.0, 1.0, -0.0, nan, 1.0]),
        # xlogy, xlog1py: d/dx is 0 where x is 0 unless y is NaN; d/dy = x / y (0 / 0 is NaN)
        ("xlogy", [0.0, 0.0, 0.0, 0.0, 2.0, -1.0, 0.0, 3.0], [0.0, nan, -1.0, inf, 0.0, -2.0, 2.0, inf]),
        ("xlog1py", [0.0, 0.0, 0.0, 0.0, 2.0, -1.0, 0.0, 3.0], [-1.0, nan, -2.0, inf, -1.0, -0.5, 2.0, inf]),
        ("hypot", [0.0, 3.0, inf, nan, -0.0], [0.0, -4.0, 1.0, 1.0, 2.0]),
        ("float_power", [0.0, 0.0, -2.0, 2.0, 0.0], [2.0, 0.0, 0.5, 0.0, -1.0]),
    ]
    for op, da, db in cases:
        a = pf.tensor(da, dtype=pf.float64, requires_grad=True)
        b = pf.tensor(db, dtype=pf.float64, requires_grad=True)
        ta = torch.tensor(da, dtype=torch.float64, requires_grad=True)
        tb = torch.tensor(db, dtype=torch.float64, requires_grad=True)
        fn = (lambda lib: lib.special.xlog1py) if op == "xlog1py" else (lambda lib: getattr(lib, op))
        fn(pf)(a, b).sum().backward()
        fn(torch)(ta, tb).sum().backward()
        assert_grad(a.grad, ta.grad)
        assert_grad(b.grad, tb.grad)


@pytest.mark.parametrize("op", ["xlogy", "xlog1py", "hypot", "float_power"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_new_binary_grads_on_fresh_values(op, dtype):
    """Gradients of xlogy, special.xlog1py, hypot and float_power on fresh random values (zeros
    in x, y in and out of log's domain, broadcasting, a strided operand) and with a number on
    either side. float_power computes in float64 and its gradients come back in the input's
    dtype."""
    rng = seeded_rng()
    fn = {"xlog1py": lambda lib: lib.special.xlog1py}.get(op, lambda lib: getattr(lib, op))
    sa, sb = broadcast_shapes(rng)
    a, ta = leaves(rng, sa, -3, 3, dtype=dtype)
    b, tb = leaves(rng, sb, -0.9 if op == "xlog1py" else 0.2, 3, dtype=dtype, layout="strided")
    with pf.no_grad(), torch.no_grad():
        zero = torch.from_numpy(np.asarray(rng.random(sa) < 0.3))
        ta.masked_fill_(zero, 0.0)
        a.masked_fill_(from_torch(zero), 0.0)
    check(rng, lambda x, y: fn(pf)(x, y), lambda x, y: fn(torch)(x, y), [a, b], [ta, tb], dtype)
    if op == "hypot":
        return  # no number forms
    n = float(rng.uniform(0.5, 2))
    for la, lt in ((lambda x: fn(pf)(x, n), lambda x: fn(torch)(x, n)),
                   (lambda x: fn(pf)(n, x), lambda x: fn(torch)(n, x))):
        a.grad = ta.grad = b.grad = tb.grad = None
        check(rng, la, lt, [b], [tb], dtype)


def test_inplace_into_overlapping_memory_raises_like_torch():
    ops = {"add_": lambda t: t.add_(1), "exp_": lambda t: t.exp_(), "mul_": lambda t: t.mul_(t.new_ones(3, 4)),
           "copy_": lambda t: t.copy_(t.new_ones(3, 4)), "iadd": lambda t: t.__iadd__(2)}
    for name, fn in ops.items():
        for lib in (pf, torch):
            with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a "
                                                   "single memory location"):
                fn(lib.zeros(3, 1).expand(3, 4))
    # fill_ and zero_ (and t[i] = number) are allowed, as in PyTorch.
    x = pf.zeros(3, 1)
    x.expand(3, 4).fill_(2.0)
    assert x.flatten().tolist() == [2.0, 2.0, 2.0]


def test_backward_on_a_leaf_accumulates_into_it_like_torch():
    # An identity layer (torchvision's StochasticDepth in eval mode) returns its input, so the
    # caller's backward starts at a leaf: its accumulator must live through the pass.
    for fw in (pf, torch):
        x = fw.ones(2, requires_grad=True)
        x.backward(fw.tensor([3.0, 4.0]))
        x.backward(fw.tensor([1.0, 1.0]))
        assert x.grad.tolist() == [4.0, 5.0]
        s = fw.tensor(2.0, requires_grad=True)
        assert [g.item() for g in fw.autograd.grad(s, [s])] == [1.0]



@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_relu_backward_as_pytorch_threshold_backward(dtype, layout):
    # relu's backward is one fused kernel: zero where the result is <= 0, the gradient where it
    # is positive or NaN (PyTorch's threshold_backward), any layout.
    x = np.random.randn(33, 17).astype(dtype)
    x.flat[:3] = [np.nan, 0.0, -0.0]
    g = np.random.randn(17, 33).astype(dtype) if layout == "transposed" else np.random.randn(33, 17).astype(dtype)
    grads = []
    for lib in (torch, pf):
        t = lib.tensor(x, requires_grad=True)
        y = lib.relu(t.t()) if layout == "transposed" else lib.relu(t)
        y.backward(lib.tensor(g))
        grads.append(t.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])
    for lib in (torch, pf):  # double backward: linear in the incoming gradient
        t = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
        (d,) = lib.autograd.grad(lib.relu(t).sum(), t, create_graph=True)
        grads.append(d.tolist())
    assert grads[2] == grads[3]
