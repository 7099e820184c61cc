"""plugflow.futures (torch.futures): Future, the result of an asynchronous operation.

A Future is completed once, with a value (set_result) or an error (set_exception); then()
chains a callback that runs when it completes and gives the callback's return value as a new
Future. A Future made from a collective's Work (Work.get_future()) completes when it is waited
for, or when polled with done() after the operation finished: collectives run on their process
group's thread, and the callbacks run in the thread that waits, as DDP communication hooks
expect (their callbacks copy results into gradient buckets).
"""

__all__ = ["Future"]

_PENDING = object()


class Future:
    def __init__(self, *, devices=None):  # devices: PyTorch's CUDA stream sync, nothing to do here
        self._value = _PENDING
        self._error = None
        self._callbacks = []
        self._upstream = None  # blocks until this future can complete (a Work, a parent Future)
        self._poll = None  # True when waiting would no longer block

    def done(self):
        """True once the future holds a value or an error."""
        if self._value is _PENDING and self._error is None and self._poll is not None and self._poll():
            self.wait()
        return self._value is not _PENDING or self._error is not None

    def wait(self):
        """Blocks until the future completes; returns its value or raises its error."""
        if self._value is _PENDING and self._error is None:
            if self._upstream is None:
                raise RuntimeError("Future.wait: nothing will complete this future (call set_result)")
            upstream, self._upstream = self._upstream, None
            upstream()
        return self.value()

    def value(self):
        """The value of a completed future (its error is raised)."""
        if self._error is not None:
            raise self._error
        if self._value is _PENDING:
            raise RuntimeError("Future.value: the future is not completed yet (call wait() first)")
        return self._value

    def set_result(self, result):
        self._complete(result, None)

    def set_exception(self, result):
        if not isinstance(result, BaseException):
            raise TypeError(f"set_exception expects an exception, got {type(result).__name__}")
        self._complete(_PENDING, result)

    def then(self, callback):
        """A Future holding callback(self) once this one completes (or the callback's error)."""
        child = Future()

        def run(fut):
            try:
                child.set_result(callback(fut))
            except Exception as e:  # noqa: BLE001 (the error belongs to the child future)
                child.set_exception(e)

        def upstream():
            try:
                self.wait()
            except Exception:  # noqa: BLE001 (the callback sees the error through fut.value())
                pass

        child._upstream = upstream
        child._poll = lambda: self._finished() or (self._poll is not None and self._poll())
        self.add_done_callback(run)
        return child

    def add_done_callback(self, callback):
        """Runs callback(self) when the future completes (now, when it already has)."""
        if self._finished():
            callback(self)
        else:
            self._callbacks.append(callback)

    def _finished(self):
        return self._value is not _PENDING or self._error is not None

    def _complete(self, value, error):
        if self._finished():
            raise RuntimeError("Future can only be marked completed once.")
        self._value, self._error = value, error
        self._upstream = self._poll = None
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(self)

    @classmethod
    def _of_work(cls, work, value):
        """A future completed with `value` once `work` (a collective's handle) is done."""
        fut = cls()

        def finish():
            try:
                work.wait()
            except Exception as e:  # noqa: BLE001 (the operation's error is the future's)
                fut.set_exception(e)
                return
            fut.set_result(value)

        fut._upstream = finish
        fut._poll = work.is_completed
        return fut

    def __repr__(self):
        state = "completed" if self._finished() else "pending"
        return f"<plugflow.futures.Future ({state})>"
