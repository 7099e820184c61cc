"""plugflow.cuda: CUDA devices, as torch.cuda. Available when the CUDA plugin is loaded (it is
in the default config) and found a GPU; `python -m plugflow.info` says why not otherwise."""

import collections
import importlib

from .. import _C
from .._tensortype import legacy_types

__all__ = ["is_available", "device_count", "current_device", "synchronize", "memory_allocated",
           "max_memory_allocated", "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
           "empty_cache", "memory_stats", "Stream", "Event", "current_stream", "default_stream", "set_stream",
           "stream", "get_rng_state",
           "get_rng_state_all", "set_rng_state", "set_rng_state_all", "manual_seed", "manual_seed_all", "seed",
           "seed_all", "initial_seed"]


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
    """Bytes currently held by tensors on the device (0 without a CUDA device, as PyTorch)."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    """Peak of memory_allocated() since the start or the last reset_peak_memory_stats()."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    """Bytes the caching allocator holds from the driver: memory_allocated() plus its cache."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    """Peak of memory_reserved() since the start or the last reset_peak_memory_stats()."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    """Sets every peak counter of memory_stats() to its current value."""
    _C.reset_peak_memory_stats("cuda", _index(device))


def empty_cache():
    """Return cached, unused blocks of the CUDA allocator to the driver (memory_reserved() drops to
    memory_allocated(); tensors keep their memory)."""
    if is_available():
        _C.empty_cache("cuda", current_device())


def memory_stats(device=None):
    """The CUDA allocator's counters, as torch.cuda.memory_stats: an OrderedDict of
    "<stat>.<all|small_pool|large_pool>.<current|peak|allocated|freed>" for allocation,
    allocated_bytes, active, active_bytes, segment, reserved_bytes, inactive_split(_bytes), plus
    num_alloc_retries and num_ooms. Empty without a CUDA device (PyTorch's answer before CUDA
    initializes)."""
    from .._memory import memory_stats as device_memory_stats
    index = _index(device)
    if not is_available():
        return collections.OrderedDict()
    return device_memory_stats(_C.device("cuda", index))


from .streams import Stream, Event, current_stream, default_stream, set_stream, stream  # noqa: E402


# ---- random numbers ----------------------------------------------------------------------------
# plugflow has one default generator for every device (docs/design.md): CUDA random functions draw
# from plugflow.default_generator, and these functions read and set it. So a CUDA state is the CPU
# state (plugflow.get_rng_state()) and setting or seeding it sets the CPU stream too. As in
# PyTorch, the getters and initial_seed need a usable device; the setters and seeders, which
# PyTorch defers until CUDA initializes (never, without a device), do nothing without one, though
# a state that is not a plugflow state still raises.

def _check_device(device):
    _C.check_device("cuda", _index(device))


def get_rng_state(device="cuda"):
    """The generator state of a CUDA device: the default generator's (plugflow.get_rng_state())."""
    _check_device(device)
    return _C.default_generator.get_state()


def get_rng_state_all():
    """get_rng_state() of every CUDA device (an empty list without one)."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state, device="cuda"):
    """Sets the default generator's state, when there is a CUDA device."""
    if not is_available():
        _C.Generator().set_state(new_state)  # checked only
        return
    _check_device(device)
    _C.default_generator.set_state(new_state)


def set_rng_state_all(new_states):
    """set_rng_state() for device 0, 1, ...; with one generator, the last state is the one kept."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed):
    """Seeds the default generator, when there is a CUDA device."""
    if is_available():
        _C.default_generator.manual_seed(seed)


manual_seed_all = manual_seed


def seed():
    """Seeds the default generator with a non-deterministic number, when there is a CUDA device."""
    if is_available():
        _C.default_generator.seed()


seed_all = seed


def initial_seed():
    """The default generator's seed."""
    _check_device(None)
    return _C.default_generator.initial_seed()


globals().update(legacy_types("cuda"))  # torch.cuda.FloatTensor, ...: constructors and isinstance tests


def __getattr__(name):
    if name == "amp":  # plugflow.cuda.amp (GradScaler, autocast), loaded on first use
        return importlib.import_module(".amp", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
