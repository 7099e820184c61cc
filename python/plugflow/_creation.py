"""Tensor creation functions (torch.tensor, torch.zeros, torch.arange, ...).

Each one resolves PyTorch's defaults (dtype, device, the randint overloads) and makes one call
into the `_C` primitive, which parses sizes given either way: f(2, 3) or f((2, 3)).
"""

import math
import operator
import struct

from . import _C
from . import _memory_format as _mf
from ._C import Tensor

__all__ = [
    "get_default_dtype", "set_default_dtype", "is_tensor", "tensor", "as_tensor", "empty", "zeros", "ones", "full", "scalar_tensor", "arange",
    "linspace", "frombuffer", "rand", "randn", "randint", "empty_like", "zeros_like", "ones_like", "full_like",
    "rand_like", "randn_like", "randint_like", "randperm", "layout", "strided",
]


def get_default_dtype():
    """The dtype of tensors made from Python floats and of floating factories given no dtype:
    plugflow.float32 unless set_default_dtype changed it."""
    return _C._get_default_dtype()


def set_default_dtype(d):
    """Sets the default floating dtype (a floating plugflow.dtype; TypeError otherwise): tensors
    made from Python floats, floating factories given no dtype (zeros, rand, arange over floats,
    module parameters), integers promoted by true division and the float-only ops, and a Python
    float combined with an integer tensor. One setting for the whole process, as PyTorch's."""
    if not isinstance(d, _C.dtype):
        raise TypeError(f"set_default_dtype(): argument 'd' must be torch.dtype, not {type(d).__name__}")
    _C._set_default_dtype(d)


def is_tensor(obj):
    """True when obj is a plugflow.Tensor (or a subclass such as nn.Parameter)."""
    return isinstance(obj, Tensor)


def _sizes(size, kwargs, fn):
    """The positional sizes, or PyTorch's keyword form f(size=(2, 3)); one of them is required
    (f() is not a 0-d tensor: f(()) is)."""
    if not size and not kwargs:
        raise TypeError(f'{fn}() missing 1 required positional arguments: "size"')
    if kwargs:
        if set(kwargs) != {"size"} or size:
            bad = next(k for k in kwargs if k != "size") if set(kwargs) != {"size"} else "size"
            raise TypeError(f"got an unexpected keyword argument '{bad}'")
        return (kwargs["size"],)
    return size


def _device(device):
    if device is None or isinstance(device, _C.device):
        return device
    return _C.device(device)  # "cuda:1", "cpu", an int CUDA index


class layout:
    """torch.layout: how a tensor's elements are stored. plugflow has dense strided tensors only."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return f"torch.{self._name}"


strided = layout("strided")


def _check_layout(layout_):
    if layout_ is not None and layout_ is not strided:
        raise NotImplementedError(f"layout={layout_!r}: plugflow has only strided (dense) tensors")


def _number(x):
    """A number argument that may arrive as a one-element tensor (arange(t.size(0)) etc.)."""
    return x.item() if isinstance(x, Tensor) else x


def _finish(t, requires_grad):
    if requires_grad:
        if not hasattr(t, "requires_grad_"):
            raise NotImplementedError("requires_grad=True needs plugflow's autograd, which this build "
                                      "does not include")
        t.requires_grad_(True)
    return t


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of data: nested lists/tuples of numbers, a numpy array, a number
    or a tensor. The dtype is inferred as PyTorch does: bool -> bool, int -> int64,
    float -> the default dtype (float32), numpy arrays and numpy scalars keep theirs."""
    return _finish(_C._tensor(data, dtype, _device(device)), requires_grad)


def as_tensor(data, dtype=None, device=None):
    """Like tensor(), but shares memory when data already is a tensor or a CPU-compatible numpy
    array of the requested dtype and device."""
    device = _device(device)
    if isinstance(data, Tensor):
        return data.to(device=device, dtype=dtype)
    if type(data).__module__ == "numpy" and type(data).__name__ == "ndarray":
        try:
            t = _C.from_numpy(data)
        except (TypeError, ValueError):
            return tensor(data, dtype=dtype, device=device)
        return t.to(device=device, dtype=dtype)
    return tensor(data, dtype=dtype, device=device)


def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """A 1-d tensor over the memory of buffer (an object with the buffer protocol): count elements
    of dtype (all that fit by default) from byte offset on. It shares the memory, as in PyTorch,
    and keeps buffer alive."""
    import numpy as np

    if dtype == _C.bfloat16:
        raise TypeError("frombuffer: bfloat16 has no numpy counterpart to view the buffer with; read it as int16 "
                        "and convert")
    itemsize = _C._empty((0,), dtype, None).element_size()
    length = memoryview(buffer).nbytes
    if length == 0 or count == 0:
        raise ValueError(f"both buffer length ({length}) and count ({count}) must not be 0")
    if offset < 0 or offset >= length:
        raise ValueError(f"offset ({offset} bytes) must be non-negative and no greater than buffer length ({length} "
                         "bytes) minus 1")
    if count < 0:
        if (length - offset) % itemsize != 0:
            raise ValueError(f"buffer length ({length - offset} bytes) after offset ({offset} bytes) must be a multiple "
                             f"of element size ({itemsize})")
        count = (length - offset) // itemsize
    elif offset + count * itemsize > length:
        raise ValueError(f"requested buffer length ({count} * {itemsize} bytes) after offset ({offset} bytes) must not "
                         f"be greater than actual buffer length ({length} bytes)")
    array = np.frombuffer(buffer, dtype=repr(dtype).rpartition(".")[2], count=count, offset=offset)
    return _finish(_C.from_numpy(array), requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False, memory_format=None, **kwargs):
    """An uninitialized tensor (laid out as memory_format says, contiguous by default)."""
    sizes = _sizes(size, kwargs, "empty")
    if memory_format is not None and memory_format is not _mf.contiguous_format:
        _mf.check(memory_format, "empty")
        if memory_format is _mf.preserve_format:
            raise RuntimeError("empty(): preserve_format needs an input tensor to preserve (use empty_like)")
        return _finish(_mf.empty_in_format(sizes, memory_format, dtype or get_default_dtype(), _device(device)),
                       requires_grad)
    return _finish(_C._empty(sizes, dtype or get_default_dtype(), _device(device)), requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False, **kwargs):
    """A tensor filled with 0."""
    sizes = _sizes(size, kwargs, "zeros")
    return _finish(_C._zeros(sizes, dtype or get_default_dtype(), _device(device)), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False, **kwargs):
    """A tensor filled with 1."""
    sizes = _sizes(size, kwargs, "ones")
    return _finish(_C._ones(sizes, dtype or get_default_dtype(), _device(device)), requires_grad)


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    """A tensor filled with fill_value; without dtype, the dtype follows the value (bool, int64 or
    the default float)."""
    return _finish(_C._full((size,), fill_value, dtype, _device(device)), requires_grad)


def scalar_tensor(s, *, dtype=None, device=None, requires_grad=False):
    """A 0-d tensor holding the number s, of the default float dtype unless dtype is given."""
    return _finish(_C._full(((),), _number(s), dtype or get_default_dtype(), _device(device)), requires_grad)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """Values from start (default 0) up to end, exclusive, by step. int64 when every argument is
    an integer, else the default float dtype."""
    if end is None:
        start, end = 0, start
    return _finish(_C._arange(_number(start), _number(end), _number(step), dtype, _device(device)), requires_grad)


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False):
    """steps values evenly spaced from start to end, inclusive."""
    return _finish(_C._linspace(float(_number(start)), float(_number(end)), operator.index(steps),
                                dtype or get_default_dtype(), _device(device)), requires_grad)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False, **kwargs):
    """Uniform samples from [0, 1)."""
    return _finish(_C._rand(_sizes(size, kwargs, "rand"), dtype or get_default_dtype(), _device(device), generator),
                   requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False, **kwargs):
    """Standard normal samples."""
    return _finish(_C._randn(_sizes(size, kwargs, "randn"), dtype or get_default_dtype(), _device(device), generator),
                   requires_grad)


def randint(*args, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    """randint(high, size) or randint(low, high, size): integers uniform in [low, high) (int64)."""
    if size is None:
        if len(args) == 2:
            (high, size), low = args, 0
        elif len(args) == 3:
            low, high, size = args
        else:
            raise TypeError("randint() expects (high, size) or (low, high, size)")
    elif len(args) == 1:
        (high,), low = args, 0
    elif len(args) == 2:
        low, high = args
    else:
        raise TypeError("randint() expects (high, size) or (low, high, size)")
    low, high = operator.index(_number(low)), operator.index(_number(high))
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    dtype = dtype or _C.int64
    name = repr(dtype).rpartition(".")[2]
    if name in _INT_RANGES:  # PyTorch's check_from_to_in_range for integral dtypes
        lo, hi = _INT_RANGES[name]
        for value, what in ((low, "from"), (high - 1, "to - 1")):
            if not lo <= value <= hi:
                raise RuntimeError(f"{what} is out of bounds for {name}")
    elif name in _FLOAT_LIMITS:
        low, high = _float_bounds(low, high, name)
    if dtype is _C.bool:  # drawn as uint8 0/1 (the kernels have no bool), as PyTorch allows
        return _finish(_C._randint(low, high, (size,), _C.uint8, _device(device), generator).bool(), requires_grad)
    return _finish(_C._randint(low, high, (size,), dtype, _device(device), generator), requires_grad)


_INT_RANGES = {"bool": (0, 1), "uint8": (0, 255), "int8": (-128, 127), "int16": (-2**15, 2**15 - 1),
               "int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
# A floating dtype's (mantissa digits, largest finite value, PyTorch's name for it in messages).
_FLOAT_LIMITS = {"float16": (11, 65504.0, "c10::Half"), "bfloat16": (8, 3.3895313892515355e38, "c10::BFloat16"),
                 "float32": (24, 3.4028234663852886e38, "float"), "float64": (53, 1.7976931348623157e308, "double")}


def _as_float_and_back(value, name):
    """An int64 converted to the floating dtype and back as PyTorch's C++ static_casts do on x86:
    int64 -> float rounds to nearest even (float16 / bfloat16 round that float again); a result
    outside int64 on the way back, inf included, becomes -2**63."""
    if name == "float64":
        f = float(value)  # (Python's int -> float rounds to nearest even)
    else:
        f = _int_to_float32(value)
        if name == "float16":
            f = struct.unpack("e", struct.pack("e", f))[0] if abs(f) < 65520.0 else math.copysign(math.inf, f)
        elif name == "bfloat16":
            bits = struct.unpack("I", struct.pack("f", f))[0]
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
            f = struct.unpack("f", struct.pack("I", bits))[0]
    return int(f) if math.isfinite(f) and -2**63 <= f < 2**63 else -2**63


def _int_to_float32(value):
    """An int64 rounded once to float32 (nearest, ties to even), as a Python float."""
    drop = abs(value).bit_length() - 24
    if drop <= 0:
        return float(value)
    q, r = divmod(abs(value), 1 << drop)
    half = 1 << (drop - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return math.copysign(float(q << drop), value)


def _float_bounds(low, high, name):
    """PyTorch's random_(from, to) for a floating dtype: [from, to) narrowed to values the
    dtype holds (update_from / update_to), then checked against the dtype's range."""
    digits, largest, torch_name = _FLOAT_LIMITS[name]
    low_plus_1 = _as_float_and_back(low + 1, name)
    if low_plus_1 < low:
        low = low_plus_1 + (1 << (abs(low + 1).bit_length() - 1 - digits + 1))
    high_minus_1 = _as_float_and_back(high - 1, name)
    if high_minus_1 >= high:
        high = high_minus_1 - (1 << (abs(high - 1).bit_length() - 1 - digits + 1))
    if low >= high:
        raise RuntimeError("random_ expects 'from' casted to dtype to be less than 'to' casted to dtype, but got "
                           f"from={low} >= to={high}")
    for value, what in ((low, "from"), (high - 1, "to - 1")):
        if not -largest <= float(value) <= largest:
            raise RuntimeError(f"{what} is out of bounds for {torch_name}")
    return low, high


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False):
    """A random permutation of 0..n-1 (int64 by default)."""
    return _finish(_C._randperm(operator.index(_number(n)), dtype or _C.int64, _device(device), generator),
                   requires_grad)


# ---- *_like: the input's shape, and its dtype and device unless given --------------------------

def _like(input, dtype, device):
    if not isinstance(input, Tensor):
        raise TypeError(f"expected a Tensor as input, got {type(input).__name__}")
    return input.shape, dtype or input.dtype, _device(device) or input.device


def _like_in_format(input, dtype, device, memory_format, fill):
    """A *_like result laid out as memory_format says (None: contiguous), filled by `fill`
    (a function of the new tensor, or None to leave it uninitialized)."""
    size, dtype, device = _like(input, dtype, device)
    if memory_format is None:
        return None, size, dtype, device
    _mf.check(memory_format, "empty_like")
    out = _mf.empty_in_format(size, memory_format, dtype, device, like=input)
    if fill is not None:
        fill(out)
    return out, size, dtype, device


def empty_like(input, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    _check_layout(layout)
    out, size, dtype, device = _like_in_format(input, dtype, device, memory_format, None)
    return _finish(out if out is not None else _C._empty(size, dtype, device), requires_grad)


def zeros_like(input, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    _check_layout(layout)
    out, size, dtype, device = _like_in_format(input, dtype, device, memory_format, lambda t: t.zero_())
    return _finish(out if out is not None else _C._zeros(size, dtype, device), requires_grad)


def ones_like(input, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    _check_layout(layout)
    out, size, dtype, device = _like_in_format(input, dtype, device, memory_format, lambda t: t.fill_(1))
    return _finish(out if out is not None else _C._ones(size, dtype, device), requires_grad)


def full_like(input, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    _check_layout(layout)
    out, size, dtype, device = _like_in_format(input, dtype, device, memory_format,
                                               lambda t: t.copy_(_C._full(tuple(t.shape), fill_value, t.dtype,
                                                                          t.device)))
    return _finish(out if out is not None else _C._full(size, fill_value, dtype, device), requires_grad)


def rand_like(input, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    _check_layout(layout)
    out, size, dtype, device = _like_in_format(input, dtype, device, memory_format,
                                               lambda t: t.copy_(_C._rand(tuple(t.shape), t.dtype, t.device)))
    return _finish(out if out is not None else _C._rand(size, dtype, device), requires_grad)


def randn_like(input, *, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
    _check_layout(layout)
    out, size, dtype, device = _like_in_format(input, dtype, device, memory_format,
                                               lambda t: t.copy_(_C._randn(tuple(t.shape), t.dtype, t.device)))
    return _finish(out if out is not None else _C._randn(size, dtype, device), requires_grad)


def randint_like(input, low=0, high=None, *, dtype=None, device=None, requires_grad=False, memory_format=None):
    """randint_like(input, high) or randint_like(input, low, high)."""
    if high is None:
        low, high = 0, low
    size, dtype, device = _like(input, dtype, device)
    values = randint(low, high, size, dtype=dtype, device=device)
    if memory_format is not None:
        _mf.check(memory_format, "randint_like")
        values = _mf.empty_in_format(size, memory_format, dtype, device, like=input).copy_(values)
    return _finish(values, requires_grad)
