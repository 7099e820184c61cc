"""PyTorch functions composed from plugflow's primitive ops (torch.allclose, torch.eye,
torch.nan_to_num, torch.finfo, torch.normal, ...), so autograd works through them where
PyTorch's does. Importing this module also installs the matching Tensor methods."""

import builtins
import math

from . import _C, _creation
from ._C import Tensor

__all__ = [
    "allclose", "isclose", "equal", "eye", "diag", "broadcast_to", "broadcast_tensors", "broadcast_shapes",
    "take_along_dim", "count_nonzero", "nan_to_num", "nan_to_num_", "finfo", "iinfo", "bernoulli", "normal",
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
        raise RuntimeError(f"{input.dtype} did not match {other.dtype}")
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol}")
    if input.dtype == _C.bool:
        return input == other
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
    rows = _creation.arange(n, device=device).unsqueeze(1)
    cols = _creation.arange(m, device=device).unsqueeze(0)
    result = (rows == cols).to(dtype or _creation.get_default_dtype())
    return _creation._finish(result, requires_grad)


def diag(input, diagonal=0):
    """1-d input: a square matrix with input on the given diagonal. 2-d input: that diagonal."""
    _check_tensor(input, "diag")
    k = diagonal
    if input.dim() == 1:
        n = input.shape[0]
        mask = _creation.arange(n, device=input.device)
        mask = mask.unsqueeze(1) == mask.unsqueeze(0)
        square = _C.where(mask, input.unsqueeze(0).expand(n, n), _creation.zeros((), dtype=input.dtype,
                                                                                 device=input.device))
        if k == 0:
            return square
        a = builtins.abs(k)
        side = _creation.zeros(n, a, dtype=input.dtype, device=input.device)
        wide = _C.cat([side, square] if k > 0 else [square, side], 1)
        band = _creation.zeros(a, n + a, dtype=input.dtype, device=input.device)
        return _C.cat([wide, band] if k > 0 else [band, wide], 0)
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
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be Long but got {indices.dtype}")
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

    def fill(v):
        return _creation.full((), v, dtype=input.dtype, device=input.device)

    result = _C.where(input.isnan(), fill(nan), input)
    result = _C.where(input == math.inf, fill(posinf), result)
    return _C.where(input == -math.inf, fill(neginf), result)


def nan_to_num_(input, nan=0.0, posinf=None, neginf=None):
    """nan_to_num in place."""
    from . import autograd
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
            raise RuntimeError(f"\"bernoulli_tensor_cpu_self_\" not implemented for '{repr(input.dtype).rpartition('.')[2].capitalize()}'")
        probs = input.detach()
        if builtins.bool(((probs < 0) | (probs > 1) | probs.isnan()).any().item()):
            raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
    else:
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
        probs = p
    return (_uniform_like(input, generator) < probs).to(input.dtype)


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
        raise RuntimeError(f"\"normal_kernel_cpu\" not implemented for '{repr(ref.dtype).rpartition('.')[2].capitalize()}'")
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


# ---------------------------------------------------------------- Tensor methods

def _take_along_dim_method(self, indices, dim=None):
    return take_along_dim(self, indices, dim)


def _bernoulli_method(self, p=None, *, generator=None):
    return bernoulli(self, p, generator=generator)


def _install():
    methods = {"allclose": allclose, "isclose": isclose, "equal": equal, "diag": diag,
               "broadcast_to": broadcast_to, "count_nonzero": count_nonzero, "nan_to_num": nan_to_num,
               "nan_to_num_": nan_to_num_, "bernoulli": _bernoulli_method, "take_along_dim": _take_along_dim_method}
    for name, fn in methods.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, fn)


_install()
