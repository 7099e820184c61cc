"""PyTorch functions composed from plugflow's primitive ops (torch.allclose, torch.eye,
torch.nan_to_num, torch.finfo, torch.normal, ...), so autograd works through them where
PyTorch's does. Importing this module also installs the matching Tensor methods."""

import builtins
import functools
import math

from . import _C, _creation
from ._C import Tensor
from . import return_types as _return_types
from .nn._functional_loss import _type_name
from .autograd import no_grad
from .autograd.function import Function as _Function
from .amp.autocast_mode import _autocast_op

__all__ = [
    "allclose", "isclose", "equal", "eye", "diag", "broadcast_to", "broadcast_tensors", "broadcast_shapes",
    "take_along_dim", "count_nonzero", "nan_to_num", "nan_to_num_", "finfo", "iinfo", "bernoulli", "normal",
    "median", "nanmedian", "quantile", "nanquantile", "kthvalue", "mode", "bincount", "searchsorted", "bucketize",
    "histc", "diff", "cdist", "cross", "diagonal", "diag_embed", "trace", "tril_indices", "triu_indices", "rot90",
    "multinomial", "aminmax", "heaviside", "logaddexp", "index_fill", "float_power", "max", "min", "sort", "topk",
]

_FLOATS = (_C.float16, _C.bfloat16, _C.float32, _C.float64)
_INTS = (_C.uint8, _C.int8, _C.int16, _C.int32, _C.int64)


def _check_tensor(x, fn, name="input"):
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument '{name}' (position 1) must be Tensor, not {type(x).__name__}")


# ---------------------------------------------------------------- comparisons

def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|input - other| <= atol + rtol * |other|, elementwise (infinities equal only themselves;
    NaNs equal each other when equal_nan)."""
    _check_tensor(input, "isclose")
    _check_tensor(other, "isclose", "other")
    if input.dtype != other.dtype:
        raise RuntimeError(f"{_type_name(input.dtype)} did not match {_type_name(other.dtype)}")
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol}")
    close = input == other
    if equal_nan and input.dtype in _FLOATS:
        close = close | (input.isnan() & other.isnan())
    if input.dtype in _FLOATS:
        a, b = input.detach(), other.detach()
    else:
        a, b = input.detach().to(_C.float64), other.detach().to(_C.float64)
    diff = (a - b).abs()
    allowed = (b.abs() * rtol) + atol
    finite = diff.isfinite()
    return close | (finite & (diff <= allowed))


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when isclose(input, other, ...) holds everywhere (a Python bool)."""
    return builtins.bool(isclose(input, other, rtol, atol, equal_nan).all().item())


def equal(input, other):
    """True when both tensors have the same size and elements (a Python bool)."""
    _check_tensor(input, "equal")
    _check_tensor(other, "equal", "other")
    if tuple(input.shape) != tuple(other.shape):
        return False
    if input.dtype != other.dtype:
        common = _C.promote_types(input.dtype, other.dtype)
        input, other = input.to(common), other.to(common)
    return builtins.bool((input == other).all().item())


# ---------------------------------------------------------------- creation / shapes

def eye(n, m=None, *, dtype=None, device=None, requires_grad=False, out=None):
    """A 2-d tensor with ones on the diagonal and zeros elsewhere (n rows, m columns)."""
    if out is not None:
        raise NotImplementedError("eye(): out= is not supported by plugflow")
    def as_int(v, name, pos):
        v = _creation._number(v)
        if isinstance(v, builtins.bool) or not isinstance(v, int):
            raise TypeError(f"eye(): argument '{name}' (position {pos}) must be int, not {type(v).__name__}")
        return v

    n = as_int(n, "n", 1)
    m = n if m is None else as_int(m, "m", 2)
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    # The result first, then its diagonal: no work in n or m before the (n, m) allocation, and
    # eye(2**40, 0) is empty, as PyTorch's.
    result = _creation.zeros(n, m, dtype=dtype or _creation.get_default_dtype(), device=device)
    result.diagonal().fill_(1)
    return _creation._finish(result, requires_grad)


def diag(input, diagonal=0):
    """1-d input: a square matrix with input on the given diagonal. 2-d input: that diagonal."""
    _check_tensor(input, "diag")
    k = diagonal
    if input.dim() == 1:
        # diag_embed allocates the (n + |k|)^2 result before any work: a vector too long for it
        # fails at once (a comparison mask of n^2 elements first took minutes at n = 2**16)
        return diag_embed(input, k)
    if input.dim() == 2:
        r, c = input.shape
        if k >= 0:
            length = builtins.max(builtins.min(r, c - k), 0)
            rows, start = input[:length], k
        else:
            length = builtins.max(builtins.min(r + k, c), 0)
            rows, start = input[-k:-k + length], 0
        if length == 0:
            return input.reshape(-1)[:0]
        index = (_creation.arange(length, device=input.device) + start).unsqueeze(1)
        return rows.gather(1, index).squeeze(1)
    raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " f"{input.dim()}D")


def broadcast_shapes(*shapes):
    """The shape tensors of the given shapes broadcast to (torch.broadcast_shapes)."""
    result = []
    for shape in shapes:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        for i, s in enumerate(reversed(shape)):
            if i >= len(result):
                result.insert(0, s)
                continue
            j = len(result) - 1 - i
            if result[j] == 1:
                result[j] = s
            elif s != 1 and s != result[j]:
                raise RuntimeError(f"Shape mismatch: objects cannot be broadcast to a single shape. "
                                   f"Mismatch is between {result[j]} and {s} at non-singleton dimension {i}")
    from ._size import Size
    return Size(result)


def broadcast_to(input, size):
    """input expanded (a view) to size, as torch.broadcast_to."""
    _check_tensor(input, "broadcast_to")
    return input.expand(*size) if not isinstance(size, int) else input.expand(size)


def broadcast_tensors(*tensors):
    """The tensors expanded to their common broadcast shape (a tuple of views)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    shape = broadcast_shapes(*(tuple(t.shape) for t in tensors))
    return tuple(t.expand(*shape) for t in tensors)


def take_along_dim(input, indices, dim=None):
    """input's values at indices along dim (the whole flattened tensor when dim is None);
    the other dims of input and indices broadcast."""
    _check_tensor(input, "take_along_dim")
    _check_tensor(indices, "take_along_dim", "indices")
    if indices.dtype != _C.int64:
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be Long but got {_type_name(indices.dtype)}")
    if dim is None:
        return input.reshape(-1).gather(0, indices.reshape(-1))
    if input.dim() != indices.dim():
        raise RuntimeError("torch.take_along_dim(): input and indices should have the same number of "
                           f"dimensions, but got {input.dim()} dimensions for input, and {indices.dim()} "
                           "dimensions for indices")
    nd = input.dim()
    d = dim + nd if dim < 0 else dim
    if not 0 <= d < builtins.max(nd, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})")
    in_shape, idx_shape = list(input.shape), list(indices.shape)
    in_shape[d] = idx_shape[d] = 1
    common = list(broadcast_shapes(in_shape, idx_shape))
    a, b = list(common), list(common)
    a[d], b[d] = input.shape[d], indices.shape[d]
    return input.expand(*a).gather(d, indices.expand(*b))


def count_nonzero(input, dim=None):
    """The number of non-zero values (along dim: an int or a tuple of ints), as int64."""
    _check_tensor(input, "count_nonzero")
    nz = (input != 0).to(_C.int64)
    if dim is None:
        return nz.sum()
    if isinstance(dim, (list, tuple)):
        if len(set(d % builtins.max(input.dim(), 1) for d in dim)) != len(dim):
            raise RuntimeError("dim appears multiple times in the list of dims")
        if len(dim) == 0:
            return nz.sum()
        return nz.sum(tuple(dim))
    return nz.sum(dim)


def nan_to_num(input, nan=0.0, posinf=None, neginf=None, *, out=None):
    """NaN replaced by nan, +inf by posinf, -inf by neginf (default: the dtype's largest and
    lowest finite values); integer and bool tensors come back unchanged (a copy)."""
    _check_tensor(input, "nan_to_num")
    if out is not None:
        raise NotImplementedError("nan_to_num(): out= is not supported by plugflow")
    if input.dtype not in _FLOATS:
        return input.clone()
    info = finfo(input.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf

    def fill(v):  # PyTorch casts the replacements unchecked (3.4e38 into float16 is inf)
        return _creation.full((), float(v), dtype=_C.float64, device=input.device).to(input.dtype)

    result = _C.where(input.isnan(), fill(nan), input)
    result = _C.where(input == math.inf, fill(posinf), result)
    return _C.where(input == -math.inf, fill(neginf), result)


def nan_to_num_(input, nan=0.0, posinf=None, neginf=None):
    """nan_to_num in place (integer and bool tensors are left as they are, unwritten)."""
    from . import autograd
    _check_tensor(input, "nan_to_num_")
    if input.dtype not in _FLOATS:
        return input
    with autograd.no_grad():
        return input.copy_(nan_to_num(input, nan, posinf, neginf))


# ---------------------------------------------------------------- dtype info

class finfo:
    """Machine limits of a floating-point dtype: bits, eps, max, min, tiny (= smallest_normal),
    resolution and dtype, as torch.finfo."""

    _TABLE = {
        # dtype name: bits, eps, max, tiny, resolution
        "float16": (16, 2.0 ** -10, 65504.0, 2.0 ** -14, 0.001),
        "bfloat16": (16, 2.0 ** -7, 3.3895313892515355e+38, 1.1754943508222875e-38, 0.01),
        "float32": (32, 2.0 ** -23, 3.4028234663852886e+38, 1.1754943508222875e-38, 1e-06),
        "float64": (64, 2.0 ** -52, 1.7976931348623157e+308, 2.2250738585072014e-308, 1e-15),
    }

    def __init__(self, type=None):  # noqa: A002
        type = _creation.get_default_dtype() if type is None else type
        if not isinstance(type, _C.dtype):
            raise TypeError(f"finfo(): argument 'type' (position 1) must be torch.dtype, not {builtins.type(type).__name__}")
        name = repr(type).rpartition(".")[2]
        if name not in self._TABLE:
            raise TypeError("torch.finfo() requires a floating point input type. Use torch.iinfo to handle "
                            "'torch.finfo'")
        self.bits, self.eps, self.max, self.tiny, self.resolution = self._TABLE[name]
        self.min = -self.max
        self.smallest_normal = self.tiny
        self.dtype = name

    def __eq__(self, other):
        return isinstance(other, finfo) and self.dtype == other.dtype

    def __hash__(self):
        return hash(("finfo", self.dtype))

    def __repr__(self):
        return (f"finfo(resolution={self.resolution}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.tiny:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Machine limits of an integer dtype: bits, max, min and dtype, as torch.iinfo."""

    _TABLE = {"uint8": (8, 0, 255), "int8": (8, -128, 127), "int16": (16, -2 ** 15, 2 ** 15 - 1),
              "int32": (32, -2 ** 31, 2 ** 31 - 1), "int64": (64, -2 ** 63, 2 ** 63 - 1)}

    def __init__(self, type):  # noqa: A002
        if not isinstance(type, _C.dtype):
            raise TypeError(f"iinfo(): argument 'type' (position 1) must be torch.dtype, not {builtins.type(type).__name__}")
        name = repr(type).rpartition(".")[2]
        if name not in self._TABLE:
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo to handle "
                            "'torch.iinfo'")
        self.bits, self.min, self.max = self._TABLE[name]
        self.dtype = name

    def __eq__(self, other):
        return isinstance(other, iinfo) and self.dtype == other.dtype

    def __hash__(self):
        return hash(("iinfo", self.dtype))

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


# ---------------------------------------------------------------- random

def _uniform_like(input, generator):
    return _C._rand(tuple(input.shape), input.dtype if input.dtype in _FLOATS else _C.float32,
                    input.device, generator)


def bernoulli(input, p=None, *, generator=None, out=None):
    """1 with probability input (or p, when given) at each element, else 0; input's dtype."""
    _check_tensor(input, "bernoulli")
    if out is not None:
        raise NotImplementedError("bernoulli(): out= is not supported by plugflow")
    if p is None:
        if input.dtype not in _FLOATS:
            raise RuntimeError(f"\"bernoulli_tensor_cpu_self_\" not implemented for '{_type_name(input.dtype)}'")
        probs = _checked_probabilities(input)
    else:
        probs = _checked_probabilities(p)
    return (_uniform_like(input, generator) < probs).to(input.dtype)


def _checked_probabilities(p):
    """p (a number or a tensor, detached) after PyTorch's check that it lies in [0, 1]."""
    if not isinstance(p, Tensor):
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
        return p
    probs = p.detach()
    if builtins.bool(((probs < 0) | (probs > 1) | probs.isnan()).any().item()):
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
    return probs


def normal(mean, std=1.0, size=None, *, generator=None, out=None, dtype=None, device=None, requires_grad=False):
    """Normal samples: normal(mean_tensor, std_tensor_or_float), normal(mean_float, std_tensor),
    or normal(mean_float, std_float, size). Gradients flow to tensor mean and std."""
    if out is not None:
        raise NotImplementedError("normal(): out= is not supported by plugflow")
    mean_t, std_t = isinstance(mean, Tensor), isinstance(std, Tensor)
    if not mean_t and not std_t:
        if size is None:
            raise TypeError("normal() received an invalid combination of arguments - got (float, float), "
                            "but expected (float mean, float std, tuple of ints size, *, ...)")
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        sample = _creation.randn(*((size,) if isinstance(size, int) else (tuple(size),)), generator=generator,
                                 dtype=dtype, device=device)
        return _creation._finish(sample * std + mean, requires_grad)
    if size is not None:
        raise TypeError("normal() received an invalid combination of arguments - size is only accepted "
                        "with float mean and std")
    ref = mean if mean_t else std
    if ref.dtype not in _FLOATS:
        raise RuntimeError(f"\"normal_kernel_cpu\" not implemented for '{_type_name(ref.dtype)}'")
    if std_t:
        if builtins.bool((std.detach() < 0).any().item()):
            raise RuntimeError("normal expects all elements of std >= 0.0")
    elif std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    if mean_t and std_t:
        shape = broadcast_shapes(tuple(mean.shape), tuple(std.shape))
    else:
        shape = tuple(ref.shape)
    sample = _C._randn(tuple(shape), ref.dtype, ref.device, generator)
    return sample * std + mean


# ---------------------------------------------------------------- order statistics

for _name, _fields in (("median", ("values", "indices")), ("nanmedian", ("values", "indices")),
                       ("kthvalue", ("values", "indices")), ("mode", ("values", "indices")),
                       ("aminmax", ("min", "max"))):
    if not hasattr(_return_types, _name):
        setattr(_return_types, _name, _return_types._structseq(_name, _fields))
        _return_types.__all__.append(_name)


def _wrap_dim(dim, ndim, allow_scalar=True):
    n = builtins.max(ndim, 1) if allow_scalar else ndim
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def _sorted_last(x):
    """x (..., n) sorted along the last dim (NaN last, stable) and the count of NaNs (..., 1)."""
    values, indices = _C.sort(x, dim=-1, stable=True)
    if x.dtype in _FLOATS:
        nans = x.isnan().sum(-1, keepdim=True)
    else:
        nans = _creation.zeros(tuple(x.shape[:-1]) + (1,), dtype=_C.int64, device=x.device)
    return values, indices, nans


def _select_along(input, dim, keepdim, fn, pick):
    """Reduce input along dim by picking, per slice, position pick(n, nans) of the sorted slice."""
    if input.dim() == 0:
        _wrap_dim(dim, 0)  # a 0-d tensor takes dim 0 or -1
        x = input.reshape(1)
        dim = 0
    else:
        dim = _wrap_dim(dim, input.dim())
        if input.shape[dim] == 0:
            raise IndexError(f"{fn}(): Expected reduction dim {dim} to have non-zero size.")
        x = input.movedim(dim, -1)
    values, indices, nans = _sorted_last(x)
    k = pick(x.shape[-1], nans).clamp(0, x.shape[-1] - 1)
    v = values.gather(-1, k).squeeze(-1)
    i = indices.gather(-1, k).squeeze(-1)
    if keepdim and input.dim() > 0:
        v, i = v.unsqueeze(dim), i.unsqueeze(dim)
    return getattr(_return_types, fn)((v, i))


def _median_impl(input, dim, keepdim, fn, ignore_nan):
    _check_tensor(input, fn)

    def pick(n, nans):
        if ignore_nan:
            return (n - nans - 1).div(2, rounding_mode="floor")
        # NaN propagates: the first NaN (sorted last) when any, else the lower median
        return _C.where(nans > 0, n - nans, _creation.full((), (n - 1) // 2, dtype=_C.int64, device=input.device)
                        + nans * 0)

    if dim is None:
        if input.numel() == 0:  # NaN (cast as PyTorch casts it for integers), attached to autograd
            if input.dtype in _FLOATS:
                return input.sum() * 0 + math.nan
            return _creation.full((), math.nan, dtype=_C.float64, device=input.device).to(input.dtype)
        with no_grad():
            value = _select_along(input.reshape(-1), 0, False, fn, pick)[0]
        return _EvenlyDistributed.apply(input, value)
    return _select_along(input, dim, keepdim, fn, pick)


class _EvenlyDistributed(_Function):
    """A value picked from all of input (median() and nanmedian() without dim) with PyTorch's
    evenly_distribute_backward: the gradient is split equally among the elements equal to the
    value (among the NaNs when it is NaN), not given to one of them."""

    @staticmethod
    def forward(ctx, input, value):
        ctx.save_for_backward(input, value)
        return value

    @staticmethod
    def backward(ctx, grad):
        input, value = ctx.saved_tensors
        mask = input.isnan() if bool(value.isnan().item()) else input == value
        return _C.where(mask, grad / mask.sum(), _creation.zeros((), dtype=grad.dtype, device=grad.device)), None


def median(input, dim=None, keepdim=False, *, out=None):
    """The lower median (of all elements, or values and indices along dim); NaN propagates."""
    return _median_impl(input, dim, keepdim, "median", False)


def nanmedian(input, dim=None, keepdim=False, *, out=None):
    """median ignoring NaNs (NaN only where a slice is all NaN)."""
    return _median_impl(input, dim, keepdim, "nanmedian", True)


def kthvalue(input, k, dim=-1, keepdim=False, *, out=None):
    """The k-th smallest element (1-based) along dim, with its index."""
    _check_tensor(input, "kthvalue")
    d = _wrap_dim(dim, input.dim())
    n = input.shape[d] if input.dim() > 0 else 1
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    return _select_along(input, d, keepdim, "kthvalue",
                         lambda n, nans: nans * 0 + (k - 1))


def mode(input, dim=-1, keepdim=False, *, out=None):
    """The most frequent value along dim (smallest among ties) and the last index it occurs at."""
    _check_tensor(input, "mode")
    dim = _wrap_dim(dim, input.dim())
    if input.dim() == 0:
        return _return_types.mode((input.clone(), _creation.zeros((), dtype=_C.int64, device=input.device)))
    x = input.detach().movedim(dim, -1)
    n = x.shape[-1]
    # Occurrences of each element: its run in the sorted row, found by two binary searches
    # (O(n log n); NaN counts 0, as NaN != NaN).
    srt = _C.sort(x, dim=-1)[0].contiguous()
    counts = searchsorted(srt, x.contiguous(), right=True) - searchsorted(srt, x.contiguous())
    best = counts.amax(-1, keepdim=True)
    cand = counts == best
    sorted_vals = _C.sort(_C.where(cand, x, x.amax(-1, keepdim=True)), dim=-1)[0]
    value = sorted_vals.narrow(-1, 0, 1)                         # smallest value among the most frequent
    pos = _creation.arange(n, dtype=_C.int64, device=x.device)
    # (a row of NaN only has no value equal to itself: its first element, as PyTorch)
    last = _C.where(x == value, pos, pos * 0 - 1).amax(-1).clamp_min(0)
    v = input.movedim(dim, -1).gather(-1, last.unsqueeze(-1)).squeeze(-1)
    if keepdim:
        v, last = v.unsqueeze(dim), last.unsqueeze(dim)
    return _return_types.mode((v, last))


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_impl(input, q, dim, keepdim, interpolation, fn, ignore_nan):
    _check_tensor(input, fn)
    if not isinstance(q, Tensor) and not 0 <= q <= 1:
        raise RuntimeError(f"{fn}() q must be in the range [0, 1] but got {q}")
    if input.numel() == 0:  # (PyTorch's message names quantile for nanquantile too)
        raise RuntimeError("quantile() input tensor must be non-empty")
    if input.dtype not in (_C.float32, _C.float64):
        raise RuntimeError(f"{fn}() input tensor must be either float or double dtype")
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(f"{fn}() interpolation must be one of linear, lower, higher, midpoint or nearest, "
                           f"but got {interpolation}")
    scalar_q = not isinstance(q, Tensor)
    if scalar_q:
        qt = _creation.full((1,), float(q), dtype=input.dtype, device=input.device)
    else:
        if q.dim() > 1:
            raise RuntimeError(f"{fn}() q must be a scalar or 1D tensor")
        if q.dtype != input.dtype:
            raise RuntimeError(f"{fn}() q tensor must be same dtype as the input tensor")
        qd = q.detach()
        if q.numel() and builtins.bool(((qd < 0) | (qd > 1)).any().item()):
            raise RuntimeError(f"{fn}() q values must be in the range [0, 1]")
        scalar_q = q.dim() == 0
        qt = q.detach().reshape(-1)
    if dim is None:
        x = input.reshape(-1)
        out_shape = [1] * input.dim() if keepdim else []
    else:
        d = _wrap_dim(dim, input.dim())
        x = input.movedim(d, -1) if input.dim() > 0 else input.reshape(1)
        out_shape = list(input.shape)
        if input.dim() > 0:
            if keepdim:
                out_shape[d] = 1
            else:
                del out_shape[d]
    nq = qt.shape[0]
    n = x.shape[-1]
    values, _, nans = _sorted_last(x)
    valid = (n - nans).to(input.dtype)                                  # (..., 1)
    if ignore_nan:
        ranks = qt * (valid - 1)
        ranks = _C.where(ranks < 0, ranks * 0, ranks)
    else:
        ranks = qt * (n - 1) + valid * 0
        ranks = _C.where(nans > 0, ranks * 0 + (n - 1), ranks)
    if interpolation == "lower":
        ranks = ranks.floor()
    elif interpolation == "higher":
        ranks = ranks.ceil()
    elif interpolation == "nearest":
        ranks = ranks.round()
    below = ranks.floor().to(_C.int64)
    above = ranks.ceil().to(_C.int64).clamp(0, n - 1)
    v_below = values.gather(-1, below)
    if interpolation in ("lower", "higher", "nearest"):
        result = v_below
    else:
        weights = ranks - below.to(input.dtype) if interpolation == "linear" else ranks * 0 + 0.5
        v_above = values.gather(-1, above)
        result = v_below.lerp(v_above, weights)  # (PyTorch's lerp: -inf and a finite value at 0.75 is -inf)
    result = result.movedim(-1, 0).reshape(tuple([nq] + out_shape))
    if scalar_q:
        result = result.squeeze(0)
    return result


@_autocast_op("quantile")
def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    """The q-th quantiles of input (flattened, or along dim); q a float or a 0/1-D tensor whose
    dimension leads the result; NaN propagates."""
    return _quantile_impl(input, q, dim, keepdim, interpolation, "quantile", False)


@_autocast_op("nanquantile")
def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    """quantile ignoring NaNs."""
    return _quantile_impl(input, q, dim, keepdim, interpolation, "nanquantile", True)


def aminmax(input, *, dim=None, keepdim=False, out=None):
    """(min, max) of input, overall or along dim."""
    _check_tensor(input, "aminmax")
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation "
                               "has no identity.")
        lo, hi = input.amin(), input.amax()
        if keepdim:
            shape = (1,) * input.dim()
            lo, hi = lo.reshape(shape), hi.reshape(shape)
        return _return_types.aminmax((lo, hi))
    d = _wrap_dim(dim, input.dim())
    if input.dim() > 0 and input.shape[d] == 0:
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation "
                           "has no identity.")
    if input.dim() == 0:
        return _return_types.aminmax((input.clone(), input.clone()))
    return _return_types.aminmax((input.amin(d, keepdim=keepdim), input.amax(d, keepdim=keepdim)))


# ---------------------------------------------------------------- index_fill

def index_fill_(input, dim, index, value):
    """Fills input's slices at `index` (a 1-D or 0-d int64 tensor) along `dim` with value (a
    number or a 0-d tensor), in place."""
    _check_tensor(input, "index_fill_")
    _check_tensor(index, "index_fill_", "index")
    if index.dtype is not _C.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if index.dim() > 1:
        raise RuntimeError("Index has to be a vector/scalar")
    if isinstance(value, Tensor):
        if value.dim() != 0:
            raise RuntimeError("index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value.dim()} dimension(s).")
        # As PyTorch (which fills with value.item()): any dtype that fits; the cast keeps autograd.
        _C._check_scalar_fits(value.item(), input.dtype)
        value = value.to(input.dtype)
    else:
        _C._check_scalar_fits(value, input.dtype)
    d = _wrap_dim(dim, input.dim())
    n = input.shape[d] if input.dim() else 1
    flat = index.reshape(-1)
    if flat.numel() and builtins.bool(((flat < -n) | (flat >= n)).any().item()):
        bad = flat[((flat < -n) | (flat >= n)).nonzero()[0, 0]].item()
        raise IndexError(f"index {bad} is out of bounds for dimension {d} with size {n}")
    if input.dim() == 0:
        if flat.numel():
            input.fill_(value)
        return input
    input[(slice(None),) * d + (flat,)] = value
    return input


def index_fill(input, dim, index, value):
    """A copy of input with index_fill_ applied."""
    _check_tensor(input, "index_fill")
    return index_fill_(input.clone(), dim, index, value)


# ---------------------------------------------------------------- counting and searching

def bincount(input, weights=None, minlength=0):
    """Occurrences of each non-negative integer in the 1-D input (summed weights when given)."""
    _check_tensor(input, "bincount")
    if input.dtype not in _INTS:
        raise RuntimeError(f"\"bincount_cpu\" not implemented for '{_type_name(input.dtype)}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if input.dim() != 1 or (input.numel() and builtins.bool((input < 0).any().item())):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != input.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    if input.numel() == 0:  # PyTorch: int64 zeros, weights or not
        return _creation.zeros(minlength, dtype=_C.int64, device=input.device)
    size = builtins.max(int(input.max().item()) + 1, minlength)
    idx = input.to(_C.int64)
    if weights is None:
        src = _creation.ones(input.shape[0], dtype=_C.int64, device=input.device)
    else:
        src = weights.to(_C.float32 if weights.dtype == _C.float32 else _C.float64)
    return _creation.zeros(size, dtype=src.dtype, device=input.device).scatter_add(0, idx, src)


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None, out=None):
    """Indices at which input's values would be inserted into the innermost dim of sorted_sequence
    to keep it sorted (after equal entries with right=True or side='right')."""
    _check_tensor(sorted_sequence, "searchsorted", "sorted_sequence")
    if sorter is not None:
        raise NotImplementedError("searchsorted(): sorter= is not supported by plugflow")
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of "
                               "left while right was True")
        right = side == "right"
    scalar = not isinstance(input, Tensor)
    if scalar:
        input = _creation.tensor(input, device=sorted_sequence.device)
    seq = sorted_sequence.detach()
    values = input.detach()
    if seq.dim() > 1 and (values.dim() != seq.dim() or tuple(values.shape[:-1]) != tuple(seq.shape[:-1])):
        raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                           "dimensions of boundaries tensor and input value tensor must match, but we got "
                           f"boundaries tensor {list(seq.shape)} and input value tensor {list(values.shape)}")
    # A merge by sorting, O((n + m) log(n + m)) per row: in one stable sort of boundaries and values
    # together, a value's insertion point is the number of boundaries before it. Values go first
    # for 'left' (a boundary equal to a value sorts after it), boundaries first for 'right'. NaN
    # values sort last, past every boundary (as PyTorch's binary search places them).
    out_dtype = _C.int32 if out_int32 else _C.int64
    if seq.numel() == 0 or values.numel() == 0:
        return _creation.zeros(values.shape, dtype=out_dtype, device=values.device)
    rows = seq.reshape(1, -1) if seq.dim() <= 1 else seq.reshape(-1, seq.shape[-1])
    vals = values.reshape(1, -1) if seq.dim() <= 1 else values.reshape(rows.shape[0], -1)
    n, m = rows.shape[1], vals.shape[1]
    common = _C.result_type(seq, values)  # PyTorch's rule: a 0-d value takes the boundaries' dtype
    vals, rows = vals.to(common), rows.to(common)
    r = rows.shape[0]
    zeros_v = _creation.zeros((r, m), dtype=_C.int64, device=values.device)
    ones_b = _creation.ones((r, n), dtype=_C.int64, device=values.device)
    if right:
        merged, is_boundary, first_value = _C.cat([rows, vals], -1), _C.cat([ones_b, zeros_v], -1), n
    else:
        merged, is_boundary, first_value = _C.cat([vals, rows], -1), _C.cat([zeros_v, ones_b], -1), 0
    order = merged.argsort(-1, stable=True)
    boundaries_before = is_boundary.gather(-1, order).cumsum(-1)
    position = _creation.empty(order.shape, dtype=_C.int64, device=values.device)  # inverse permutation
    position.scatter_(-1, order, _creation.arange(n + m, device=values.device).expand(r, n + m).contiguous())
    result = boundaries_before.gather(-1, position[:, first_value:first_value + m])
    return result.reshape(values.shape).to(out_dtype)


def bucketize(input, boundaries, *, out_int32=False, right=False, out=None):
    """The bucket of each input value given 1-D sorted boundaries (searchsorted with 1-D boundaries)."""
    if not isinstance(boundaries, Tensor) or boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def histc(input, bins=100, min=0, max=0, *, out=None):  # noqa: A002
    """Histogram of input with bins equal-width bins over [min, max] (the data's range when
    min == max); values outside are ignored."""
    _check_tensor(input, "histc")
    if input.dtype not in _FLOATS:
        raise RuntimeError(f"\"histogram_cpu\" not implemented for '{_type_name(input.dtype)}'")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    if min > max:
        raise RuntimeError("torch.histc: max must be larger than min")
    x = input.detach().reshape(-1)
    lo, hi = float(min), float(max)
    if lo == hi and x.numel():
        lo, hi = float(x.amin().item()), float(x.amax().item())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if math.isinf(lo) or math.isinf(hi) or math.isnan(lo) or math.isnan(hi):
        raise RuntimeError(f"torch.histc: range of [{lo}, {hi}] is not finite")
    if not lo < hi:  # a single value too large for +-1 to move (3.4e38)
        raise RuntimeError("torch.histc: max must be larger than min")
    inside = (x >= lo) & (x <= hi)
    # The bin in double, as PyTorch: (x - lo) / (hi - lo) * bins (in bfloat16 0.898 * 10 is 9.0).
    pos = ((x.double() - lo) / (hi - lo) * bins).floor().to(_C.int64).clamp(0, bins - 1)
    # Counted in double, then rounded to the dtype once (counted in float16, 2048 + 1 stayed 2048).
    counts = _creation.zeros(bins, dtype=_C.float64, device=input.device)
    return counts.scatter_add(0, pos, inside.to(_C.float64)).to(input.dtype)


# ---------------------------------------------------------------- differences and geometry

def diff(input, n=1, dim=-1, prepend=None, append=None):
    """n-th forward difference along dim, after concatenating prepend and append."""
    _check_tensor(input, "diff")
    if input.dim() == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    for other in (prepend, append):  # checked whatever n, as PyTorch (dim only when one is given)
        if other is None:
            continue
        dim = _wrap_dim(dim, input.dim())
        if other.dim() != input.dim():
            raise RuntimeError("diff expects prepend or append to be the same dimension as input")
        for i in range(input.dim()):
            if i != dim and other.shape[i] != input.shape[i]:
                raise RuntimeError("diff expects the shape of tensor to prepend or append to match that of input "
                                   f"except along the differencing dimension; input.size({i}) = {input.shape[i]}, "
                                   f"but got tensor.size({i}) = {other.shape[i]}")
    if n == 0:  # PyTorch ignores prepend and append then
        return input.clone()
    dim = _wrap_dim(dim, input.dim())
    parts = [t for t in (prepend, input, append) if t is not None]
    x = _C.cat(parts, dim) if len(parts) > 1 else input
    for _ in range(n):
        length = x.shape[dim]
        if length == 0:
            break
        a, b = x.narrow(dim, 1, length - 1), x.narrow(dim, 0, length - 1)
        x = (a != b) if x.dtype == _C.bool else a - b
    return x


@_autocast_op("cdist")
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """p-norm distances between the rows of x1 (..., P, M) and x2 (..., R, M): (..., P, R)."""
    _check_tensor(x1, "cdist", "x1")
    _check_tensor(x2, "cdist", "x2")
    if x1.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.dim()}D")
    if x2.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X2 got: {x2.dim()}D")
    if x1.dtype not in _FLOATS:
        raise RuntimeError(f"cdist only supports floating-point dtypes, X1 got: {_type_name(x1.dtype)}")
    if x2.dtype not in _FLOATS:
        raise RuntimeError(f"cdist only supports floating-point dtypes, X2 got: {_type_name(x2.dtype)}")
    if x1.dtype != x2.dtype:
        raise RuntimeError(f"expected scalar type {_type_name(x1.dtype)} but found {_type_name(x2.dtype)}")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    modes = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")
    if compute_mode not in modes:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    use_mm = p == 2 and (compute_mode == "use_mm_for_euclid_dist" or (
        compute_mode == "use_mm_for_euclid_dist_if_necessary" and (x1.shape[-2] > 25 or x2.shape[-2] > 25)))
    return _Cdist.apply(x1, x2, float(p), use_mm)


def _cdist_values(x1, x2, p, use_mm):
    if use_mm:
        sq1 = (x1 * x1).sum(-1, keepdim=True)
        sq2 = (x2 * x2).sum(-1, keepdim=True)
        d2 = sq1 - 2 * x1.matmul(x2.transpose(-1, -2)) + sq2.transpose(-1, -2)
        return d2.clamp_min(0).sqrt()
    diff_ = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()
    if p == 0:  # PyTorch's min(ceil(|d|), 1): a NaN difference makes the distance NaN
        return diff_.ceil().clamp_max(1).sum(-1)
    if math.isinf(p):  # points without coordinates are all 0 apart (amax has no identity)
        return diff_.amax(-1) if diff_.shape[-1] else diff_.sum(-1)
    if p == 1:
        return diff_.sum(-1)
    if p == 2:
        return (diff_ * diff_).sum(-1).sqrt()
    return diff_.pow(p).sum(-1).pow(1.0 / p)


class _Cdist(_Function):
    """cdist with PyTorch's backward: a zero subgradient where a distance or a coordinate
    difference is zero (coincident points), instead of the 0 * inf of differentiating sqrt or
    pow at zero."""

    @staticmethod
    def forward(ctx, x1, x2, p, use_mm):
        dist = _cdist_values(x1, x2, p, use_mm)
        ctx.save_for_backward(x1, x2, dist)
        ctx.p = p
        return dist

    @staticmethod
    def backward(ctx, grad):
        x1, x2, dist = ctx.saved_tensors
        p = ctx.p
        if p == 0:
            return _creation.zeros_like(x1), _creation.zeros_like(x2), None, None
        diff_ = x1.unsqueeze(-2) - x2.unsqueeze(-3)  # (..., P, R, M)
        d = dist.unsqueeze(-1)
        if p == 1:
            t = diff_.sign()
        elif math.isinf(p):
            t = diff_.sign() * (diff_.abs() == d).to(diff_.dtype)
        elif p == 2:
            t = diff_ / d
        elif p < 2:
            t = diff_.sign() * diff_.abs().pow(p - 1) / d.pow(p - 1)
        else:
            t = diff_ * diff_.abs().pow(p - 2) / d.pow(p - 1)
        t = _C.where((d == 0) | (diff_ == 0), 0.0, t) * grad.unsqueeze(-1)
        return sum_to_size(t.sum(-2), x1.shape), sum_to_size(-t.sum(-3), x2.shape), None, None


def sum_to_size(input, *size):
    """input summed over its broadcast dims down to `size` (which input must broadcast from)."""
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
    if len(shape) > input.dim() or any(s != 1 and s != n for s, n in zip(shape, input.shape[input.dim() - len(shape):])):
        raise RuntimeError(f"size {{{list(shape)}}} is not expandable to size {{{list(input.shape)}}}.")
    lead = input.dim() - len(shape)
    out = input.sum(tuple(range(lead))) if lead else input
    dims = tuple(i for i, s in enumerate(shape) if s == 1 and out.shape[i] != 1)
    return out.sum(dims, keepdim=True) if dims else out


@_autocast_op("cross")
def cross(input, other, dim=None, *, out=None):
    """Cross product of 3-vectors along dim (the first dim of size 3 when None)."""
    _check_tensor(input, "cross")
    if input.dtype != other.dtype:
        raise RuntimeError(f"expected scalar type {_type_name(input.dtype)} but found {_type_name(other.dtype)}")
    shape = broadcast_shapes(tuple(input.shape), tuple(other.shape))
    a, b = input.expand(shape), other.expand(shape)
    if dim is None:
        dims = [i for i, s in enumerate(shape) if s == 3]
        if not dims:
            raise RuntimeError("no dimension of size 3 in input")
        dim = dims[0]
    else:
        dim = _wrap_dim(dim, len(shape))
        if shape[dim] != 3 or input.dim() != other.dim() or input.shape[dim] != 3 or other.shape[dim] != 3:
            raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. "
                               f"Got {input.shape[dim]} and {other.shape[dim]}")
    return a.roll(-1, dim) * b.roll(-2, dim) - a.roll(-2, dim) * b.roll(-1, dim)


def diagonal(input, offset=0, dim1=0, dim2=1):
    """The diagonal (offset above/below the main one) of the dim1 x dim2 planes, as the last dim:
    a view of input, as PyTorch's (one stride steps along both dims)."""
    _check_tensor(input, "diagonal")
    d1, d2 = _wrap_dim(dim1, input.dim(), False), _wrap_dim(dim2, input.dim(), False)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rows, cols = input.shape[d1], input.shape[d2]
    n = builtins.max(0, builtins.min(rows, cols - offset) if offset >= 0 else builtins.min(rows + offset, cols))
    stride = input.stride()
    start = builtins.max(-offset, 0) * stride[d1] + builtins.max(offset, 0) * stride[d2] if n else 0
    others = [i for i in range(input.dim()) if i not in (d1, d2)]
    return input.as_strided([input.shape[i] for i in others] + [n], [stride[i] for i in others] +
                            [stride[d1] + stride[d2]], input.storage_offset() + start)


def _unfold_method(self, dimension, size, step):
    """Tensor.unfold: the slices of `size` elements along `dimension`, `step` apart, as a new last
    dim of that size (a view; windows may overlap, and the gradient then accumulates)."""
    nd = self.dim()
    d = _wrap_dim(dimension, builtins.max(nd, 1), False)
    length = self.shape[d] if nd else 1
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if size > length:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {length} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    sizes, strides = list(self.shape), list(self.stride())
    if nd == 0:
        return self.as_strided([size], [1], self.storage_offset())
    sizes[d], strides[d] = (length - size) // step + 1, strides[d] * step
    return self.as_strided(sizes + [size], strides + [self.stride()[d]], self.storage_offset())


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """Tensor whose dim1 x dim2 planes have input's last dim on their offset diagonal."""
    _check_tensor(input, "diag_embed")
    nd = input.dim() + 1
    d1, d2 = _wrap_dim(dim1, nd, False), _wrap_dim(dim2, nd, False)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = input.shape[-1] if input.dim() else 1
    x = input if input.dim() else input.reshape(1)
    m = n + abs(offset)
    k = _creation.arange(n, dtype=_C.int64, device=input.device)
    flat_idx = (k + builtins.max(-offset, 0)) * m + (k + builtins.max(offset, 0))
    lead = tuple(x.shape[:-1])
    out = _creation.zeros(lead + (m * m,), dtype=input.dtype, device=input.device)
    out = out.scatter_add(-1, flat_idx.expand(lead + (n,)), x).reshape(lead + (m, m))
    return out.movedim((-2, -1), (d1, d2))


@_autocast_op("trace")
def trace(input):
    """Sum of the main diagonal of a matrix."""
    _check_tensor(input, "trace")
    if input.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.dim()}")
    return diagonal(input).sum()


def _tri_indices(fn, row, col, offset, dtype, device, lower):
    dtype = _C.int64 if dtype is None else dtype
    if dtype not in _INTS:
        raise RuntimeError(f"\"{fn}\" not implemented for '{_type_name(dtype)}'")
    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    # Row-major positions of the triangle, from a (row, col) grid of indices and a mask.
    r = _creation.arange(row, device=device).unsqueeze(1).expand(row, col)
    c = _creation.arange(col, device=device).unsqueeze(0).expand(row, col)
    mask = (c - r <= offset) if lower else (c - r >= offset)
    return _C.stack([_C.masked_select(r, mask), _C.masked_select(c, mask)]).to(dtype)


def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    """2 x N row/column indices of the lower triangle (on and below the offset diagonal)."""
    return _tri_indices("tril_indices", row, col, offset, dtype, device, True)


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    """2 x N row/column indices of the upper triangle (on and above the offset diagonal)."""
    return _tri_indices("triu_indices", row, col, offset, dtype, device, False)


def rot90(input, k=1, dims=(0, 1)):
    """input rotated by 90 degrees k times in the plane of dims (from the first towards the second)."""
    _check_tensor(input, "rot90")
    dims = list(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.dim() < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.dim()}")
    d0, d1 = _wrap_dim(dims[0], input.dim()), _wrap_dim(dims[1], input.dim())
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
    k %= 4
    if k == 1:
        return input.flip([d1]).transpose(d0, d1)
    if k == 2:
        return input.flip([d0, d1])
    if k == 3:
        return input.flip([d0]).transpose(d0, d1)
    return input.clone()


# ---------------------------------------------------------------- sampling and elementwise

def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    """num_samples category indices per row of the (1-D or 2-D) non-negative weights input."""
    _check_tensor(input, "multinomial")
    if input.dtype not in _FLOATS:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {_type_name(input.dtype)}")
    if input.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    n = input.shape[-1]
    if not replacement and num_samples > n:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    w = input.detach().to(_C.float64)
    if builtins.bool(((w < 0) | w.isnan() | w.isinf()).any().item()):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    total = w.sum(-1, keepdim=True)
    if builtins.bool((total <= 0).any().item()):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    lead = tuple(w.shape[:-1])
    if replacement:
        cdf = (w / total).cumsum(-1)
        u = _C._rand(lead + (num_samples,), _C.float64, input.device, generator)
        if w.dim() == 1:
            idx = (cdf.unsqueeze(0) <= u.unsqueeze(-1)).sum(-1)
        else:
            idx = (cdf.unsqueeze(-2) <= u.unsqueeze(-1)).sum(-1)
        return idx.clamp(0, n - 1).to(_C.int64)
    u = _C._rand(tuple(w.shape), _C.float64, input.device, generator)
    keys = w.log() - (-(u.clamp_min(1e-300)).log()).log()         # Gumbel-top-k
    return keys.topk(num_samples, dim=-1)[1].to(_C.int64)


def heaviside(input, values, *, out=None):
    """0 where input < 0, values where input == 0, 1 where input > 0. Not differentiable (as in
    PyTorch: backward raises)."""
    _check_tensor(input, "heaviside")
    if input.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    return _Heaviside.apply(input, values)


class _Heaviside(_Function):
    @staticmethod
    def forward(ctx, input, values):
        return _C.where(input == 0, values.to(input.dtype), (input > 0).to(input.dtype))

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("derivative for aten::heaviside is not implemented")


def _heaviside_(self, values):
    """heaviside in place."""
    return self.copy_(heaviside(self, values))


def logaddexp(input, other, *, out=None):
    """log(exp(input) + exp(other)) without overflow."""
    _check_tensor(input, "logaddexp")
    _check_tensor(other, "logaddexp", "other")
    common = _C.result_type(input, other)  # an integer operand promotes (int8 and bfloat16: bfloat16)
    if common not in _FLOATS:
        raise RuntimeError(f"\"logaddexp_cpu\" not implemented for '{_type_name(common)}'")
    return _Logaddexp.apply(input.to(common), other.to(common))


class _Logaddexp(_Function):
    """logaddexp with PyTorch's gradients, grad / (1 + exp(other - input)) for input (1 at
    input = inf beside a finite other, where differentiating the stable forward gives NaN)."""

    @staticmethod
    def forward(ctx, input, other):
        ctx.save_for_backward(input, other)
        m = _C.maximum(input, other)
        safe = _C.where(m.isinf(), _creation.zeros((), dtype=m.dtype, device=m.device), m)
        result = safe + ((input - safe).exp() + (other - safe).exp()).log()
        return _C.where(m.isinf() & (input == other), m, result)

    @staticmethod
    def backward(ctx, grad):
        input, other = ctx.saved_tensors
        grad_input = (grad / (1 + (other - input).exp())).sum_to_size(input.shape) if ctx.needs_input_grad[0] else None
        grad_other = (grad / (1 + (input - other).exp())).sum_to_size(other.shape) if ctx.needs_input_grad[1] else None
        return grad_input, grad_other


def _float_power_operands(input, exponent):
    """input and exponent as float_power computes them: tensors in float64, numbers as floats
    (plugflow has no complex dtype, so PyTorch's complex128 case cannot arise)."""
    if not isinstance(input, Tensor) and not isinstance(exponent, Tensor):
        raise TypeError(f"float_power() received an invalid combination of arguments - got "
                        f"({type(input).__name__}, {type(exponent).__name__}), but expected one of: "
                        "(Tensor input, Tensor exponent), (Number self, Tensor exponent), (Tensor input, Number exponent)")

    def double(x, name):
        if isinstance(x, Tensor):
            return x.to(_C.float64)
        if isinstance(x, int) and not isinstance(x, builtins.bool) and not -2**63 <= x < 2**63:
            raise RuntimeError("Overflow when unpacking long")  # PyTorch's argument parser
        if isinstance(x, (builtins.bool, int, float)):
            return float(x)
        raise TypeError(f"float_power(): argument '{name}' must be Tensor or Number, not {type(x).__name__}")
    return double(input, "input"), double(exponent, "exponent")


def float_power(input, exponent, *, out=None):
    """input ** exponent computed in float64 whatever the operands' dtypes (PyTorch's: pow of the
    operands cast to double; the gradient flows back through the casts)."""
    base, exp = _float_power_operands(input, exponent)
    if out is None:
        return _C.pow(base, exp)
    if isinstance(out, Tensor) and out.dtype != _C.float64:
        raise RuntimeError(f"the output given to float_power has dtype {_type_name(out.dtype)} but the "
                           "operation's result requires dtype Double")
    return _C.pow(base, exp, out=out)


def _float_power_(self, exponent):
    """float_power in place: self must already be float64 (PyTorch's rule)."""
    if self.dtype != _C.float64:
        raise RuntimeError(f"the base given to float_power_ has dtype {_type_name(self.dtype)} but the "
                           "operation's result requires dtype Double")
    return self.pow_(_float_power_operands(self, exponent)[1])


# ---------------------------------------------------------------- out=

def _with_out(fn, name=None):
    """fn computes its result; out= (a tensor, or a tuple for (values, indices) results) receives
    it with PyTorch's rules: each out tensor must have its result's dtype and is resized to its
    shape (with PyTorch's warning when it had elements). A tuple result comes back as the same
    named tuple of the out tensors."""
    name = name or fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        result = fn(*args, **kwargs)
        if isinstance(result, tuple):
            if not isinstance(out, (tuple, list)):
                raise TypeError(f"{name}(): argument 'out' must be tuple of Tensors, not {type(out).__name__}")
            if len(out) != len(result):
                raise TypeError(f"expected tuple of {len(result)} elements but got {len(out)}")
            for o, r in zip(out, result):
                if not isinstance(o, Tensor):
                    raise TypeError(f"{name}(): argument 'out' must be tuple of Tensors, not {type(o).__name__}")
                _C._write_out(name, o, r)
            return type(result)(tuple(out))
        if not isinstance(out, Tensor):
            raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
        _C._write_out(name, out, result)
        return out
    return wrapper


for _name in ("median", "nanmedian", "kthvalue", "mode", "quantile", "nanquantile", "aminmax", "searchsorted",
              "bucketize", "histc", "cross", "multinomial", "heaviside", "logaddexp"):
    globals()[_name] = _with_out(globals()[_name])


def _extreme_with_out(name, elementwise):
    """torch.max / torch.min: out= is a (values, indices) tuple for the overload with a dim, a
    tensor for the elementwise one (torch.max(a, b, out=t) is torch.maximum's)."""
    reduce = _with_out(getattr(_C, name), name)

    @functools.wraps(getattr(_C, name))
    def wrapper(*args, out=None, **kwargs):
        if out is not None and isinstance(kwargs.get("other", args[1] if len(args) > 1 else None), Tensor):
            return elementwise(*args, out=out, **kwargs)
        if out is not None and "dim" not in kwargs and len(args) < 2:
            raise TypeError(f"{name}() received an invalid combination of arguments - got out= without dim (only "
                            f"{name}(input, dim, keepdim) and {name}(input, other) take out=)")
        return reduce(*args, out=out, **kwargs)
    return wrapper


max = _extreme_with_out("max", _C.maximum)  # noqa: A001
min = _extreme_with_out("min", _C.minimum)  # noqa: A001
sort = _with_out(_C.sort, "sort")
topk = _with_out(_C.topk, "topk")


# ---------------------------------------------------------------- Tensor methods

def _take_along_dim_method(self, indices, dim=None):
    return take_along_dim(self, indices, dim)


def _bernoulli_method(self, p=None, *, generator=None):
    return bernoulli(self, p, generator=generator)


def _bernoulli_inplace_method(self, p=0.5, *, generator=None):
    """Fills self with 1 with probability p (a number, or a tensor that broadcasts to self), else 0."""
    return self.copy_(_uniform_like(self, generator) < _checked_probabilities(p))


def _install():
    methods = {"bernoulli_": _bernoulli_inplace_method, "allclose": allclose, "isclose": isclose, "equal": equal, "diag": diag,
               "broadcast_to": broadcast_to, "count_nonzero": count_nonzero, "nan_to_num": nan_to_num,
               "nan_to_num_": nan_to_num_, "bernoulli": _bernoulli_method, "take_along_dim": _take_along_dim_method,
               "median": median, "nanmedian": nanmedian, "quantile": quantile, "nanquantile": nanquantile,
               "kthvalue": kthvalue, "mode": mode, "bincount": bincount, "histc": histc, "diff": diff,
               "cross": cross, "diagonal": diagonal, "diag_embed": diag_embed, "trace": trace, "rot90": rot90,
               "multinomial": multinomial, "aminmax": aminmax, "heaviside": heaviside, "heaviside_": _heaviside_, "logaddexp": logaddexp,
               "index_fill": index_fill, "index_fill_": index_fill_, "sum_to_size": sum_to_size,
               "unfold": _unfold_method, "float_power": float_power, "float_power_": _float_power_}
    for name, fn in methods.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, fn)


_install()
