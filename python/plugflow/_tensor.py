"""The parts of plugflow.Tensor written in Python.

plugflow.Tensor is the C++ class from _C (so every op returns exactly this type); the methods
here are the ones where Python is the clearer language and speed does not matter: printing,
formatting, the new_* constructors, deepcopy, pickling, the in-place view methods (unsqueeze_,
...), type(), record_stream's argument checks and PyTorch's device and layout predicates (is_xpu,
is_sparse, ...).
"""

from . import _C, _creation, _tensor_str
from ._C import Tensor
from ._tensortype import tensor_type


def _repr(self):
    return _tensor_str._str(self)


def _format(self, format_spec):
    # f"{t:.3f}" works on one-element tensors, as in PyTorch.
    if self.dim() == 0:
        return self.item().__format__(format_spec)
    return object.__format__(self, format_spec)


def _new_size(size):
    """new_zeros(2, 3), new_zeros((2, 3)) and new_zeros(torch.Size) alike; a bare int is one dim."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return size


def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
    """An uninitialized tensor with this tensor's dtype and device unless given."""
    return _creation.empty(_new_size(size), dtype=dtype or self.dtype, device=device or self.device,
                           requires_grad=requires_grad)


def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
    """Zeros with this tensor's dtype and device unless given."""
    return _creation.zeros(_new_size(size), dtype=dtype or self.dtype, device=device or self.device,
                           requires_grad=requires_grad)


def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
    """Ones with this tensor's dtype and device unless given."""
    return _creation.ones(_new_size(size), dtype=dtype or self.dtype, device=device or self.device,
                          requires_grad=requires_grad)


def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    """fill_value everywhere, with this tensor's dtype and device unless given."""
    size = tuple(size) if isinstance(size, (tuple, list)) else (size,)
    return _creation.full(size, fill_value, dtype=dtype or self.dtype, device=device or self.device,
                          requires_grad=requires_grad)


def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
    """A copy of data with this tensor's dtype and device unless given."""
    return _creation.tensor(data, dtype=dtype or self.dtype, device=device or self.device,
                            requires_grad=requires_grad)


def __deepcopy__(self, memo):
    if id(self) in memo:
        return memo[id(self)]
    new = self.clone()
    if type(self) is not Tensor:  # keep the subclass; Tensor(t) aliases t's fresh storage
        sub = type(self).__new__(type(self))
        Tensor.__init__(sub, new)
        new = sub
    memo[id(self)] = new
    state = getattr(self, "__dict__", None)
    if state:
        import copy

        new.__dict__.update(copy.deepcopy(state, memo))
    return new


def _rebuild_tensor(array, dtype_name, device, requires_grad, cls=None):
    """Unpickles what __reduce_ex__ wrote. Names only plugflow and numpy, so a pickled tensor loads
    without torch and through plugflow.load's restricted unpickler."""
    dtype = getattr(_C, dtype_name, None)
    if not isinstance(dtype, _C.dtype) or (cls is not None and not issubclass(cls, Tensor)):
        raise TypeError(f"invalid pickled tensor: dtype {dtype_name!r}, class {cls!r}")
    t = _C.from_numpy(array).to(dtype=dtype, device=device)
    if cls is not None and cls is not Tensor:
        sub = cls.__new__(cls)
        Tensor.__init__(sub, t)
        t = sub
    if requires_grad:
        t.requires_grad_(True)
    return t


def __reduce_ex__(self, protocol):
    # Tensors cross process boundaries (DataLoader workers, multiprocessing) as a numpy copy of
    # their values: the pickle is self-contained (no shared memory) and a view carries only its
    # own elements. As in PyTorch, the autograd history is not pickled: the copy is a leaf.
    data = self.detach().cpu()
    if data.dtype is _C.bfloat16:  # numpy has no bfloat16; float32 holds every value exactly
        data = data.float()
    state = getattr(self, "__dict__", None) or None
    cls = None if type(self) is Tensor else type(self)
    args = (data.numpy(), repr(self.dtype).rpartition(".")[2], str(self.device), self.requires_grad, cls)
    return _rebuild_tensor, args, state


def _restride_(self, view, name):
    """Makes self take view's shape and strides (same memory): the in-place view methods."""
    if self.requires_grad and _C.is_grad_enabled():
        raise RuntimeError(f"{name}: plugflow does not record in-place view changes of a tensor that requires grad; "
                           f"use the out-of-place {name.rstrip('_')}()")
    self.data = view
    return self


def unsqueeze_(self, dim):
    return _restride_(self, self.unsqueeze(dim), "unsqueeze_")


def squeeze_(self, dim=None):
    return _restride_(self, self.squeeze() if dim is None else self.squeeze(dim), "squeeze_")


def transpose_(self, dim0, dim1):
    return _restride_(self, self.transpose(dim0, dim1), "transpose_")


def t_(self):
    return _restride_(self, self.t(), "t_")


def share_memory_(self):
    raise NotImplementedError("share_memory_: plugflow tensors cannot be shared between processes; they cross process "
                       "boundaries (multiprocessing, DataLoader workers) as copies, so updates made in one process "
                       "are not seen by the others")


def is_shared(self):
    """False: plugflow tensors are never in memory shared between processes."""
    return False


def _device_predicate(device_type):
    return property(lambda self: self.device.type == device_type,
                    doc=f"Whether the tensor is on a {device_type!r} device.")


def record_stream(self, stream):
    """Marks this CUDA tensor's memory as used by work queued on `stream` (a plugflow.cuda.Stream)
    besides the stream it was allocated on: once the tensor is freed, its memory is not reused
    until the work queued on `stream` by then has finished."""
    from .cuda.streams import Stream
    if not isinstance(stream, Stream):
        # RuntimeError as PyTorch 1.13's argument parser raises for this argument.
        raise RuntimeError(f"record_stream(): argument 's' (position 1) must be Stream, not {type(stream).__name__}")
    if self.device.type != "cuda":
        raise NotImplementedError(f"Could not run 'aten::record_stream' with arguments from the "
                                  f"'{self.device.type.upper()}' backend: record_stream needs a CUDA tensor")
    if (self.device.index or 0) != stream.device_index:
        raise NotImplementedError(f"record_stream: the stream is on cuda:{stream.device_index}, the tensor on "
                                  f"{self.device}; plugflow records streams of the tensor's own device only")
    _C._record_stream(self, stream.cuda_stream)


# Layouts and kinds of tensor plugflow does not have: every tensor is dense, strided and not quantized.
_ALWAYS_FALSE = ("is_sparse", "is_sparse_csr", "is_mkldnn", "is_quantized", "is_nested")


def _with_memory_format(Tensor):
    """contiguous / is_contiguous / clone / to with PyTorch's memory_format argument (the
    C++ methods stay the path without one; see _memory_format)."""
    from . import _memory_format as mf
    contiguous, is_contiguous, clone, to = Tensor.contiguous, Tensor.is_contiguous, Tensor.clone, Tensor.to

    def contiguous_(self, memory_format=mf.contiguous_format):
        return contiguous(self) if memory_format is mf.contiguous_format else mf.contiguous(self, memory_format)

    def is_contiguous_(self, memory_format=mf.contiguous_format):
        return is_contiguous(self) if memory_format is mf.contiguous_format else mf.is_contiguous(self, memory_format)

    def clone_(self, *, memory_format=None):
        """A copy (contiguous without memory_format; see _memory_format)."""
        return clone(self) if memory_format is None else mf.clone(self, memory_format)

    def to_(self, *args, memory_format=None, **kwargs):
        if memory_format is not None:
            mf.check(memory_format, "to")
        out = to(self, *args, **kwargs)
        if memory_format is None or memory_format is mf.preserve_format:
            return out
        if mf.is_contiguous(out, memory_format):
            return out
        return mf.clone(out, memory_format)

    for name, fn in (("contiguous", contiguous_), ("is_contiguous", is_contiguous_), ("clone", clone_), ("to", to_)):
        fn.__name__ = name
        setattr(Tensor, name, fn)


def _install():
    _with_memory_format(Tensor)
    Tensor.__repr__ = _repr
    Tensor.__format__ = _format
    Tensor.__deepcopy__ = __deepcopy__
    Tensor.__reduce_ex__ = __reduce_ex__
    Tensor.__module__ = "plugflow"
    for fn in (new_empty, new_zeros, new_ones, new_full, new_tensor, share_memory_, is_shared, unsqueeze_, squeeze_,
               transpose_, t_, record_stream):
        setattr(Tensor, fn.__name__, fn)
    Tensor.type = tensor_type
    # PyTorch's device predicates for device types other than cpu and cuda (which _C defines): a
    # plugin may register any of them ("xpu" for a vendor's accelerator).
    for device_type in ("xpu", "ipu", "mps", "meta", "vulkan", "ort"):
        setattr(Tensor, "is_" + device_type, _device_predicate(device_type))
    for name in _ALWAYS_FALSE:
        setattr(Tensor, name, property(lambda self: False))
    _C.dtype.__module__ = "plugflow"
    _C.device.__module__ = "plugflow"


_install()
