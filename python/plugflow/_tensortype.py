"""PyTorch's legacy typed-tensor names: torch.FloatTensor, torch.cuda.LongTensor, ... and
Tensor.type().

Each name is a constructor (FloatTensor(2, 3) is an uninitialized 2x3 float32 CPU tensor,
LongTensor([1, 2]) a copy of the data as int64, FloatTensor() an empty one) and an isinstance
test (isinstance(t, torch.ByteTensor): t is a uint8 tensor on the CPU). Tensors are always
plugflow.Tensor; these classes only describe a (dtype, device type) pair, as in PyTorch.
t.type() names that pair ("torch.FloatTensor", "torch.cuda.HalfTensor"), t.type(T) converts.
"""

import numbers

from . import _C, _creation
from ._C import Tensor
from ._size import Size

# Each dtype's legacy class name.
_NAMES = {"bool": "BoolTensor", "uint8": "ByteTensor", "int8": "CharTensor", "int16": "ShortTensor",
          "int32": "IntTensor", "int64": "LongTensor", "float16": "HalfTensor", "bfloat16": "BFloat16Tensor",
          "float32": "FloatTensor", "float64": "DoubleTensor"}
_DTYPE_BY_NAME = {name: getattr(_C, dtype) for dtype, name in _NAMES.items()}


def _dtype_name(dtype):
    return repr(dtype).rpartition(".")[2]


def type_name(dtype, device_type):
    """'torch.FloatTensor' for (float32, 'cpu'), 'torch.cuda.FloatTensor' for (float32, 'cuda')."""
    prefix = "torch." if device_type == "cpu" else f"torch.{device_type}."
    return prefix + _NAMES[_dtype_name(dtype)]


class _TensorType(type):
    """The metaclass of the legacy classes: isinstance and the constructor call."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype and obj.device.type == cls._device_type

    def __repr__(cls):
        return f"<class '{type_name(cls.dtype, cls._device_type)}'>"

    def __call__(cls, *args, device=None):
        if device is not None and _C.device(device).type != cls._device_type:
            raise RuntimeError(f"legacy constructor expects device type: {cls._device_type} but device type: "
                               f"{_C.device(device).type} was passed")
        device = device if device is not None else cls._device_type
        if len(args) == 1 and isinstance(args[0], Tensor):
            other = args[0]
            if other.dtype != cls.dtype or other.device.type != cls._device_type:
                raise TypeError(f"expected {type_name(cls.dtype, cls._device_type)} (got "
                                f"{type_name(other.dtype, other.device.type)})")
            return other.detach()  # a new tensor sharing the data, as in PyTorch
        if len(args) == 1 and isinstance(args[0], (tuple, Size)) and all(isinstance(s, int) for s in args[0]):
            return _creation.empty(tuple(args[0]), dtype=cls.dtype, device=device)
        if all(isinstance(s, int) and not isinstance(s, bool) for s in args):
            return _creation.empty(args if args else (0,), dtype=cls.dtype, device=device)
        if len(args) == 1:
            if isinstance(args[0], numbers.Number):
                raise TypeError(f"new(): data must be a sequence (got {type(args[0]).__name__})")
            return _creation.tensor(args[0], dtype=cls.dtype, device=device)
        bad = next(a for a in args if not isinstance(a, int))
        raise TypeError(f"new(): argument 'size' must be tuple of ints, but found element of type {type(bad).__name__} "
                        f"at pos {args.index(bad) + 1}")


def legacy_types(device_type):
    """{'FloatTensor': class, ...} for one device type."""
    module = "plugflow" if device_type == "cpu" else f"plugflow.{device_type}"
    return {name: _TensorType(name, (), {"dtype": dtype, "_device_type": device_type, "is_cuda": device_type == "cuda",
                                         "__module__": module, "__doc__": f"Tensors of dtype {dtype} on {device_type}: "
                                         "a constructor and an isinstance test."})
            for name, dtype in _DTYPE_BY_NAME.items()}


def _target(spec):
    """(dtype, device type) for Tensor.type's argument: a dtype, a legacy class or its name."""
    if isinstance(spec, _C.dtype):
        return spec, None
    if isinstance(spec, _TensorType):
        return spec.dtype, spec._device_type
    if isinstance(spec, str):
        parts = spec.split(".")
        if parts[0] == "torch" and len(parts) in (2, 3) and parts[-1] in _DTYPE_BY_NAME:
            return _DTYPE_BY_NAME[parts[-1]], ("cpu" if len(parts) == 2 else parts[1])
        raise ValueError(f"invalid type: {spec!r}")
    raise TypeError(f"type(): argument 'dtype' must be a dtype, a tensor type or its name, not {type(spec).__name__}")


def tensor_type(self, dtype=None, non_blocking=False, **kwargs):
    """Tensor.type(): with no argument, the legacy type name ("torch.FloatTensor"); with a dtype,
    a legacy class or its name, this tensor converted to it (itself when it already is)."""
    if "async" in kwargs:  # PyTorch's old name for non_blocking
        non_blocking = kwargs.pop("async")
    if kwargs:
        raise TypeError(f"type() got an unexpected keyword argument '{next(iter(kwargs))}'")
    if dtype is None:
        return type_name(self.dtype, self.device.type)
    target_dtype, device_type = _target(dtype)
    if target_dtype == self.dtype and device_type in (None, self.device.type):
        return self
    device = self.device if device_type in (None, self.device.type) else device_type
    return self.to(device=device, dtype=target_dtype, non_blocking=non_blocking)
