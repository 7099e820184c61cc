"""Memory formats (torch.memory_format): the order in which a tensor's dims are laid out.

plugflow tensors carry any strides, so a channels-last tensor is an ordinary (N, C, H, W) view
whose C stride is 1. What this module gives, with PyTorch's meaning:
  - the format objects: contiguous_format, channels_last (4-d), channels_last_3d (5-d),
    preserve_format (keep a dense input's strides);
  - `memory_format=` on Tensor.contiguous / is_contiguous / clone / to, the *_like creation
    functions, empty, and Module.to (4-d and 5-d parameters and buffers);
  - empty_strided.
Ops propagate channels last as PyTorch's do for elementwise ops, Tensor.to, 2-d convolutions,
batch norm, 2-d pooling, upsampling and leaf gradients (docs/kernels.md, "Memory formats");
other ops, and `clone()` without memory_format, return contiguous results. docs/compat.md says so.
"""

import builtins



class memory_format:
    """A layout of a tensor's dims in memory (PyTorch's torch.memory_format)."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return f"plugflow.{self._name}"

    def __reduce__(self):  # pickled by name, as the module global it is
        return self._name


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")


def check(fmt, fn):
    if not isinstance(fmt, memory_format):
        raise TypeError(f"{fn}(): argument 'memory_format' must be torch.memory_format, not {type(fmt).__name__}")


def _row_major(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= builtins.max(n, 1)
    return tuple(reversed(strides))


def _is_dense(t):
    """No two elements share memory and the elements fill a block without gaps (any order)."""
    dims = sorted((s, n) for s, n in zip(t.stride(), t.shape) if n != 1)
    expected = 1
    for s, n in dims:
        if n == 0:
            return True
        if s != expected:
            return False
        expected *= n
    return True


def strides(shape, fmt, like=None):
    """The strides of a new tensor of `shape` in format `fmt` (preserve_format: `like`'s when
    `like` is dense, else contiguous)."""
    shape = tuple(shape)
    if fmt is preserve_format:
        if like is not None and _is_dense(like):
            return tuple(like.stride())
        return _row_major(shape)
    if fmt is contiguous_format:
        return _row_major(shape)
    rank = 4 if fmt is channels_last else 5
    if len(shape) != rank:
        raise RuntimeError(f"required rank {rank} tensor to use {fmt._name} format")
    # (N, C, *spatial) laid out as (N, *spatial, C); PyTorch's products, a size 0 included.
    out, step = [0] * rank, 1
    for d in (1, *range(rank - 1, 1, -1), 0):
        out[d] = step
        step *= shape[d]
    return tuple(out)


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False):
    """An uninitialized tensor of `size` with `stride` (overlapping strides allowed, as PyTorch's)."""
    size, stride = tuple(int(n) for n in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"dimensionality of sizes ({len(size)}) must match dimensionality of strides ({len(stride)})")
    if any(n < 0 for n in size) or any(s < 0 for s in stride):
        raise RuntimeError(f"empty_strided: sizes and strides must be non-negative, got {list(size)}, {list(stride)}")
    from ._creation import empty
    extent = 0 if 0 in size else 1 + builtins.sum((n - 1) * s for n, s in zip(size, stride))
    out = empty(extent, dtype=dtype, device=device).as_strided(size, stride)
    return out.requires_grad_() if requires_grad else out


def empty_in_format(shape, fmt, dtype, device, like=None):
    """An uninitialized tensor of `shape` laid out as `fmt` says."""
    st = strides(shape, fmt, like)
    if st == _row_major(tuple(shape)):
        from ._creation import empty
        return empty(tuple(shape), dtype=dtype, device=device)
    return empty_strided(shape, st, dtype=dtype, device=device)


def is_contiguous(t, fmt):
    """Tensor.is_contiguous(memory_format=fmt): t's strides are fmt's (size-1 dims' strides are
    never used to address, so any is accepted)."""
    check(fmt, "is_contiguous")
    if fmt is contiguous_format or fmt is preserve_format:  # (PyTorch answers preserve_format as contiguous)
        return t.is_contiguous()
    if t.dim() != (4 if fmt is channels_last else 5):
        return False
    # PyTorch's check, empty tensors included: dense in the order C, spatial dims innermost first, N.
    shape, stride, expected = t.shape, t.stride(), 1
    for d in (1, *range(t.dim() - 1, 1, -1), 0):
        if shape[d] != 1:
            if stride[d] != expected:
                return False
            expected *= shape[d]
    return True


def clone(t, fmt):
    """t copied into a new tensor laid out as `fmt` (differentiable, as clone)."""
    check(fmt, "clone")
    if fmt is channels_last or fmt is channels_last_3d:
        strides(t.shape, fmt)  # the rank check
        return t._clone_channels_last()  # one core op: an nn.Graph captures it as a copy
    return empty_in_format(t.shape, fmt, t.dtype, t.device, like=t).copy_(t)


def contiguous(t, fmt):
    check(fmt, "contiguous")
    if is_contiguous(t, fmt):
        return t
    if fmt is preserve_format:
        raise RuntimeError("preserve memory format is unsupported by the contiguous operator")
    return clone(t, fmt)


def convert_module_tensor(t, fmt):
    """Module.to(memory_format=fmt): 4-d (channels_last) or 5-d (channels_last_3d) tensors take
    the format, others stay as they are (PyTorch's rule)."""
    if fmt is None or t.dim() not in (4, 5):
        return t
    if (fmt is channels_last and t.dim() != 4) or (fmt is channels_last_3d and t.dim() != 5):
        return t
    return contiguous(t, fmt)


__all__ = ["memory_format", "contiguous_format", "channels_last", "channels_last_3d", "preserve_format",
           "empty_strided"]
