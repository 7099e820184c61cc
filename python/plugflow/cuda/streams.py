"""torch.cuda.Stream and torch.cuda.Event over the device backend's streams and events.

Kernels and copies of a device run on the calling thread's current stream (current_stream());
`with plugflow.cuda.stream(s):` makes `s` current for the block. Memory is allocated for the
current stream and, once freed, reused at once by later work on that stream. A tensor allocated
on one stream and used by work on another needs `tensor.record_stream(other)`, as in PyTorch: when
it is freed, its memory is reused only after the work queued on `other` by then has finished
(checked on later allocations; synchronize() and empty_cache() wait for it). Without it, keep the
tensor alive until that stream is done with it (synchronize, or wait on an event)."""

import contextlib

from .. import _C

__all__ = ["Stream", "Event", "current_stream", "default_stream", "set_stream", "stream"]


def _device_index(device):
    from . import _index
    return _index(device)


class Stream:
    """A queue of device work. Stream(device=None, priority=0) creates a new stream on the device
    (priority is accepted for compatibility; every stream has the default priority)."""

    def __init__(self, device=None, priority=0, _handle=None):
        self.device_index = _device_index(device)
        self._owned = _handle is None
        self.cuda_stream = _C._stream_create("cuda", self.device_index) if _handle is None else _handle
        self.priority = priority

    @property
    def device(self):
        return _C.device("cuda", self.device_index)

    def __del__(self):
        if getattr(self, "_owned", False):
            try:
                _C._stream_destroy("cuda", self.device_index, self.cuda_stream)
            except Exception:  # interpreter shutdown, or the backend is gone
                pass

    def wait_event(self, event):
        """Work queued on this stream after the call waits for the event's work."""
        event.wait(self)

    def wait_stream(self, stream):
        """Work queued on this stream after the call waits for the work queued on `stream` so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        """Records an event (a new one by default) on this stream and returns it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def query(self):
        """True when all work queued on the stream has finished."""
        return _C._stream_query("cuda", self.device_index, self.cuda_stream)

    def synchronize(self):
        """Waits until all work queued on the stream has finished."""
        _C._stream_synchronize("cuda", self.device_index, self.cuda_stream)

    def __eq__(self, other):
        return isinstance(other, Stream) and (self.cuda_stream, self.device_index) == (other.cuda_stream,
                                                                                      other.device_index)

    def __hash__(self):
        return hash((self.cuda_stream, self.device_index))

    def __repr__(self):
        return f"<plugflow.cuda.Stream device=cuda:{self.device_index} cuda_stream={self.cuda_stream:#x}>"


class Event:
    """A marker in a stream: record() it, then wait(), synchronize(), query() or time
    (elapsed_time, with enable_timing=True). blocking and interprocess are accepted; events
    always wait by polling the driver, and interprocess events are not supported."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        if interprocess:
            raise NotImplementedError("plugflow.cuda.Event: interprocess events are not supported")
        self.enable_timing = enable_timing
        self.blocking = blocking
        self._handle = None
        self._device_index = None

    def _ensure(self, device_index):
        if self._handle is None:
            self._device_index = device_index
            self._handle = _C._event_create("cuda", device_index, self.enable_timing)
        elif device_index != self._device_index:
            raise ValueError(f"Event device cuda:{device_index} does not match the recorded device "
                             f"cuda:{self._device_index}")

    def record(self, stream=None):
        """Records the event on `stream` (default: the current stream)."""
        if stream is None:
            stream = current_stream()
        self._ensure(stream.device_index)
        _C._event_record("cuda", stream.device_index, self._handle, stream.cuda_stream)

    def wait(self, stream=None):
        """Makes `stream` (default: the current stream) wait for the recorded work."""
        if stream is None:
            stream = current_stream()
        if self._handle is not None:
            _C._stream_wait_event("cuda", stream.device_index, stream.cuda_stream, self._handle)

    def query(self):
        """True when the recorded work has finished (or nothing was recorded)."""
        return self._handle is None or _C._event_query("cuda", self._device_index, self._handle)

    def synchronize(self):
        """Waits until the recorded work has finished."""
        if self._handle is not None:
            _C._event_synchronize("cuda", self._device_index, self._handle)

    def elapsed_time(self, end_event):
        """Milliseconds between this event and end_event (both recorded, with enable_timing)."""
        if self._handle is None or end_event._handle is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return _C._event_elapsed_ms("cuda", self._device_index, self._handle, end_event._handle)

    @property
    def cuda_event(self):
        return self._handle

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            try:
                _C._event_destroy("cuda", self._device_index, self._handle)
            except Exception:  # interpreter shutdown, or the backend is gone
                pass

    def __repr__(self):
        return f"<plugflow.cuda.Event {'uninitialized' if self._handle is None else hex(self._handle)}>"


def current_stream(device=None):
    """The calling thread's current stream of the device."""
    index = _device_index(device)
    return Stream(index, _handle=_C._stream_current("cuda", index))


def default_stream(device=None):
    """The device's default stream."""
    index = _device_index(device)
    return Stream(index, _handle=_C._stream_default("cuda", index))


def set_stream(stream_):
    """Makes `stream_` the calling thread's current stream of its device."""
    if stream_ is not None:
        _C._stream_set_current("cuda", stream_.device_index, stream_.cuda_stream)


@contextlib.contextmanager
def stream(stream_):
    """Context manager: `stream_` is the current stream of its device inside the block (None:
    no change), the previous one after it."""
    if stream_ is None:
        yield
        return
    previous = current_stream(stream_.device_index)
    set_stream(stream_)
    try:
        yield
    finally:
        set_stream(previous)
