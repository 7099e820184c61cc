"""plugflow.cuda: CUDA devices, as torch.cuda. Available when the CUDA plugin is loaded (it is
in the default config) and found a GPU; `python -m plugflow.info` says why not otherwise."""

from .. import _C

__all__ = ["is_available", "device_count", "current_device", "synchronize", "memory_allocated",
           "max_memory_allocated", "reset_peak_memory_stats", "empty_cache", "memory_stats"]


def is_available():
    """True when at least one CUDA device can be used."""
    return _C.device_count("cuda") > 0


def device_count():
    """The number of usable CUDA devices (0 without the plugin or a GPU)."""
    return _C.device_count("cuda")


def current_device():
    """The index of the current CUDA device. plugflow uses device 0 unless a tensor names another."""
    return 0


def _index(device):
    if device is None:
        return current_device()
    d = device if isinstance(device, _C.device) else _C.device(device)
    if d.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {d}")
    return current_device() if d.index is None else d.index


def synchronize(device=None):
    """Wait until every queued operation on the device has finished."""
    _C.synchronize("cuda", _index(device))


def memory_allocated(device=None):
    """Bytes currently held by tensors on the device."""
    return _C.memory_allocated("cuda", _index(device))


def max_memory_allocated(device=None):
    """Peak of memory_allocated() since the start or the last reset_peak_memory_stats()."""
    return _C.max_memory_allocated("cuda", _index(device))


def reset_peak_memory_stats(device=None):
    _C.reset_peak_memory_stats("cuda", _index(device))


def empty_cache():
    """Return cached, unused blocks of the CUDA allocator to the driver."""
    if is_available():
        _C.empty_cache("cuda", current_device())


def memory_stats(device=None):
    """The CUDA allocator's counters, with torch.cuda.memory_stats' key names."""
    from .._memory import memory_stats as device_memory_stats
    return device_memory_stats(_C.device("cuda", _index(device)))
