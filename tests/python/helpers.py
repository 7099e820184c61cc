"""Shared helpers for the plugflow pytest suite: dtype tables, conversion to and from torch
(through numpy, so the comparison never goes through plugflow's own printing or ops), and
assertions against PyTorch results."""

import os
from collections import OrderedDict

import numpy as np
import pytest
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
    """A torch tensor with t's values, dtype and shape (a copy, without autograd history)."""
    t = t.detach()
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


def assert_bf16_batch_norm_close(results):
    """A bfloat16 batch norm against PyTorch's float32 one: `results` pairs each plugflow output,
    gradient or running statistic with the torch value, in the order y, grad_input, grad_weight,
    grad_bias, running_mean, running_var; each within its own rounding (bfloat16 for y and
    grad_input, float32 for the rest), relative to the expected value's largest magnitude."""
    tolerances = [(2**-8, 1e-5), (2**-8, 1e-4), (1e-5, 1e-6), (1e-5, 1e-6), (1e-6, 1e-7), (1e-6, 1e-7)]
    assert len(results) == len(tolerances)
    for (actual, expected), (rtol, scale) in zip(results, tolerances):
        expected = expected.detach()
        torch.testing.assert_close(to_torch(actual).double(), expected, rtol=rtol,
                                   atol=scale * expected.abs().max().item())


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


def assert_same_outcome(fn, rtol=None, atol=None):
    """fn(lib) with lib = torch and plugflow: both raise the same exception class, or both return
    matching tensors (assert_matches; tuples item by item) or equal other values."""
    try:
        expected = fn(torch)
    except Exception as e:  # noqa: BLE001 - any exception class is compared
        with pytest.raises(Exception) as got:
            fn(pf)
        assert type(got.value).__name__ == type(e).__name__, (got.value, e)
        return
    actual = fn(pf)
    pairs = zip(actual, expected) if isinstance(expected, tuple) else [(actual, expected)]
    for a, e in pairs:
        if isinstance(e, torch.Tensor):
            assert_matches(a, e, rtol, atol)
        else:
            assert a == e, (a, e)


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


# ---- random generators, tensor pairs and module weights --------------------------------------------

def seeded_rng(env_var=None, seed_plugflow=False):
    """A numpy Generator with a fresh seed that is printed (pytest shows it when the test fails).

    With env_var the seed is taken from that environment variable when it is set (so a failure
    can be replayed with ENV_VAR=<seed>) and printed as ENV_VAR=<seed>; without, it is a full
    entropy seed printed as 'numpy seed: <seed>'. seed_plugflow also seeds plugflow's own
    generator from it, so that plugflow's draws (nn.init, dropout) differ per run too."""
    if env_var is None:
        seed = int(np.random.SeedSequence().entropy)
        print(f"numpy seed: {seed}")
    else:
        seed = int(os.environ.get(env_var, np.random.SeedSequence().entropy % 2**32))
        print(f"{env_var}={seed}")
    if seed_plugflow:
        pf.manual_seed(int(seed % 2**63))
    return np.random.default_rng(seed)


def tensor_pair(data, layout="contiguous", grad=False):
    """numpy data as a plugflow and a torch tensor with the same values (copies), in a layout:

    - "contiguous": row-major;
    - "transposed": dims 0 and -1 swapped in memory (needs 2+ dims, else contiguous);
    - "channels_last": dim 1 is the last dim of memory (needs 3+ dims, else contiguous);
    - "strided": every other element of a buffer twice as wide in the last dim (needs 1+ dims,
      else contiguous).

    With grad both are leaves that require grad."""
    data = np.array(data, order="C", copy=True)
    shape = data.shape
    if layout == "transposed" and len(shape) >= 2:
        mem = np.ascontiguousarray(np.swapaxes(data, 0, -1))
        p = pf.from_numpy(mem.copy()).transpose(0, -1)
        t = torch.from_numpy(mem.copy()).transpose(0, -1)
    elif layout == "channels_last" and len(shape) >= 3:
        mem = np.ascontiguousarray(np.moveaxis(data, 1, -1))
        p = pf.from_numpy(mem.copy()).movedim(-1, 1)
        t = torch.from_numpy(mem.copy()).movedim(-1, 1)
    elif layout == "strided" and len(shape) >= 1:
        big = np.zeros(tuple(shape[:-1]) + (2 * shape[-1],), dtype=data.dtype)
        big[..., ::2] = data
        p = pf.from_numpy(big.copy())[..., ::2]
        t = torch.from_numpy(big.copy())[..., ::2]
    else:
        p = pf.from_numpy(data.copy())
        t = torch.from_numpy(data.copy())
    if grad:
        p = p.detach().requires_grad_()
        t = t.detach().requires_grad_()
    return p, t


def random_pair(rng, shape, dtype="float64", layout="contiguous", grad=False, *, low=-2.0, high=2.0):
    """tensor_pair of uniform random values in [low, high) of a numpy dtype."""
    return tensor_pair(rng.uniform(low, high, size=shape).astype(dtype), layout, grad)


def backward_both(rng, out_p, out_t):
    """Backpropagates the same random upstream gradient (uniform in [-1, 1)) through both outputs."""
    g = torch.from_numpy(rng.uniform(-1, 1, size=tuple(out_t.shape))).to(out_t.dtype)
    out_t.backward(g)
    out_p.backward(from_torch(g))


def window_always_valid(n, out, k, s, p, d):
    """Whether every pooling window along one dim (input size n, out windows, kernel k, stride s,
    padding p, dilation d) holds an input element: PyTorch's max-pooling index for a window
    entirely in the padding is an arbitrary out-of-window position (not compared)."""
    return all(any(0 <= o * s - p + j * d < n for j in range(k)) for o in range(out))


def random_dims(rng, ndim):
    """A random `dim` argument: None, one dim (maybe negative) or a tuple of distinct dims."""
    if ndim == 0:
        return None
    kind = rng.integers(0, 3)
    if kind == 0:
        return None
    if kind == 1:
        return int(rng.integers(-ndim, ndim))
    count = int(rng.integers(1, ndim + 1))
    return tuple(int(d) for d in rng.permutation(ndim)[:count])


def load_from_torch(module_p, module_t):
    """Copies a torch module's parameters and buffers into the plugflow module (strict); returns
    what load_state_dict returns."""
    state = OrderedDict((k, from_torch(v)) for k, v in module_t.state_dict().items())
    return module_p.load_state_dict(state)


def check_double_backward(fn, low, high, seed, shape=(3, 4), eps=1e-6, rtol=1e-5, atol=1e-6):
    """Double backward of a plugflow function of one float64 tensor against finite differences:
    d/dx <v, grad_x <w, fn(x)>> computed by double backward (autograd.grad with create_graph)
    equals the central difference (first(x + eps v) - first(x - eps v)) / 2eps of the first
    derivative computed by backward, for x uniform in [low, high) of a shape and random w and v
    drawn from np.random.default_rng(seed)."""
    rng = np.random.default_rng(seed)
    x = pf.from_numpy(rng.uniform(low, high, size=shape)).requires_grad_()
    w = pf.from_numpy(rng.uniform(-1, 1, size=tuple(fn(x).shape)))
    v = pf.from_numpy(rng.uniform(-1, 1, size=shape))

    def first(z):
        with pf.enable_grad():
            z = z.detach().requires_grad_()
            (g,) = pf.autograd.grad((fn(z) * w).sum(), z)
        return g

    (g,) = pf.autograd.grad((fn(x) * w).sum(), x, create_graph=True)
    assert g.requires_grad
    (hv,) = pf.autograd.grad((g * v).sum(), x)
    with pf.no_grad():
        expected = (first(x.detach() + eps * v) - first(x.detach() - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv.numpy(), expected.numpy(), rtol=rtol, atol=atol)


def assert_param_grads_match(module_p, module_t, rtol=None, atol=None):
    """Each parameter of the plugflow module has the .grad of the torch module's parameter of the
    same name: None where torch's is None, else the same values (assert_matches tolerances)."""
    grads_t = {n: q.grad for n, q in module_t.named_parameters()}
    for name, q in module_p.named_parameters():
        if grads_t[name] is None:
            assert q.grad is None, name
        else:
            assert q.grad is not None, name
            assert_matches(q.grad, grads_t[name], rtol=rtol, atol=atol)
