"""Memory statistics of a device's caching allocator, for any device (CPU by default):
plugflow.memory_stats(), memory_allocated(), max_memory_allocated(), reset_peak_memory_stats()
and empty_cache(). plugflow.cuda has the same functions for CUDA devices, as torch.cuda."""

from collections import OrderedDict

from . import _C

__all__ = ["memory_stats", "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "empty_cache"]


def _device(device):
    d = _C.device("cpu") if device is None else device if isinstance(device, _C.device) else _C.device(device)
    return d.type, 0 if d.index is None else d.index


def memory_allocated(device=None):
    """Bytes currently held by tensors on the device (allocator size classes)."""
    return _C.memory_allocated(*_device(device))


def max_memory_allocated(device=None):
    """Peak of memory_allocated() since the start or the last reset_peak_memory_stats()."""
    return _C.max_memory_allocated(*_device(device))


def reset_peak_memory_stats(device=None):
    _C.reset_peak_memory_stats(*_device(device))


def empty_cache(device=None):
    """Return the allocator's idle cached blocks to the system."""
    _C.empty_cache(*_device(device))


def memory_stats(device=None):
    """The allocator's counters, with torch.cuda.memory_stats' key names, sorted (an OrderedDict as
    PyTorch's). A backend that keeps no detailed counters reports its current and peak bytes."""
    stats = _C.memory_stats(*_device(device))
    if not stats:
        stats = {"allocated_bytes.all.current": memory_allocated(device),
                 "allocated_bytes.all.peak": max_memory_allocated(device)}
    return OrderedDict(sorted(stats.items()))
