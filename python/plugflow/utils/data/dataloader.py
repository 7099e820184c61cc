"""DataLoader (torch.utils.data.DataLoader): batches from a dataset, in the main process or in
worker processes.

With num_workers > 0, each worker is a process (multiprocessing; fork by default on Linux) with
its own copy of the dataset. The main process sends tasks (a task index and the sample indices
of one batch) round-robin to per-worker queues, keeping prefetch_factor tasks per worker in
flight, and hands batches back in task order. Batches cross the process boundary pickled
(plugflow tensors pickle as numpy copies). A worker's exception comes back with its traceback and
is raised again in the main process; a worker that dies is noticed within
_worker.STATUS_CHECK_INTERVAL and raises RuntimeError instead of hanging.
"""

import atexit
import collections.abc
import itertools
import math
import multiprocessing
import multiprocessing.context
import os
import queue
import time
import warnings

from ... import _C, cuda
from . import _worker
from ._collate import default_collate, default_convert
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler, _random_seed

__all__ = ["DataLoader", "get_worker_info", "default_collate", "default_convert"]

get_worker_info = _worker.get_worker_info

# Set at interpreter exit: from then on multiprocessing's own exit handler stops the (daemonic)
# workers, and shutting them down from __del__ could block on half-torn-down queues.
_python_exiting = False


@atexit.register
def _mark_python_exiting():
    global _python_exiting
    _python_exiting = True


class _InfiniteConstantSampler(Sampler):
    """The index sampler of an iterable dataset: placeholders, forever (the dataset decides when
    to stop)."""

    def __iter__(self):
        while True:
            yield None


class DataLoader:
    """Iterates over a dataset in batches, as torch.utils.data.DataLoader (PyTorch 1.13's
    arguments, defaults and errors).

    batch_size=None turns batching off (each sample goes through collate_fn, by default
    default_convert). shuffle uses a RandomSampler driven by generator (a plugflow.Generator).
    pin_memory=True copies each batch's tensors into page-locked host memory when a CUDA device
    is available (as PyTorch 1.13: nothing happens without one), so `.to("cuda",
    non_blocking=True)` of a batch overlaps with the work already queued on the device.
    pin_memory_device is accepted and ignored (pinned memory serves every device).
    """

    __initialized = False

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=2, persistent_workers=False,
                 pin_memory_device=""):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor != 2:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                             "to enable multiprocessing.")
        if not prefetch_factor > 0:
            raise ValueError(f"prefetch_factor should be a positive integer, but got prefetch_factor={prefetch_factor}")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context

        if isinstance(dataset, IterableDataset):
            self._iterable = True
            if shuffle not in (False, None):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler option, but got "
                                 f"sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified batch_sampler option, but "
                                 f"got batch_sampler={batch_sampler}")
        else:
            self._iterable = False
            shuffle = bool(shuffle)

        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                                 "drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")

        if sampler is None:
            if self._iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self.__initialized = True
        self._IterableDataset_len_called = None  # len(self) of an iterable dataset, for a warning
        self._iterator = None
        self.check_worker_number_rationality()

    @property
    def multiprocessing_context(self):
        return self.__multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, context):
        if context is not None:
            if self.num_workers == 0:
                raise ValueError(f"multiprocessing_context can only be used with multi-process loading "
                                 f"(num_workers > 0), but got num_workers={self.num_workers}")
            if isinstance(context, str):
                methods = multiprocessing.get_all_start_methods()
                if context not in methods:
                    raise ValueError(f"multiprocessing_context option should specify a valid start method in "
                                     f"{methods!r}, but got multiprocessing_context={context!r}")
                context = multiprocessing.get_context(context)
            if not isinstance(context, multiprocessing.context.BaseContext):
                raise TypeError(f"multiprocessing_context option should be a valid context object or a string "
                                f"specifying the start method, but got multiprocessing_context={context}")
        self.__multiprocessing_context = context

    def __setattr__(self, attr, val):
        if self.__initialized and attr in ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                                           "persistent_workers"):
            raise ValueError(f"{attr} attribute should not be set after {type(self).__name__} is initialized")
        super().__setattr__(attr, val)

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        """What the iterators draw: batches of indices when batching, else single indices."""
        return self.batch_sampler if self._auto_collation else self.sampler

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        self.check_worker_number_rationality()
        return _MultiProcessingIter(self)

    def __iter__(self):
        # Persistent workers: one iterator (and its worker processes) for every epoch.
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None:
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    def __len__(self):
        if self._iterable:
            # The dataset's own estimate, batched; PyTorch trusts it (and warns when exceeded).
            length = self._IterableDataset_len_called = len(self.dataset)
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else math.ceil(length / self.batch_size)
            return length
        return len(self._index_sampler)

    def check_worker_number_rationality(self):
        """Warns when num_workers exceeds the CPUs this process may run on."""
        if not self.num_workers:
            return
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count()
        if cpus is not None and self.num_workers > cpus:
            warnings.warn(f"This DataLoader will create {self.num_workers} worker processes in total. Our suggested "
                          f"max number of worker in current system is {cpus}, which is smaller than what this "
                          "DataLoader is going to create. Please be aware that excessive worker creation might get "
                          "DataLoader running slow or even freeze, lower the worker number to avoid potential "
                          "slowness/freeze if necessary.")


def _pin_memory(data):
    """data with every tensor in pinned host memory (torch.utils.data._utils.pin_memory.pin_memory):
    through mappings, namedtuples, tuples, lists and objects with a pin_memory() method."""
    if isinstance(data, _C.Tensor):
        return data.pin_memory()
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        try:
            return type(data)({k: _pin_memory(v) for k, v in data.items()})
        except TypeError:  # a mapping type that cannot be built from a dict
            return {k: _pin_memory(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(_pin_memory(v) for v in data))
    if isinstance(data, tuple):
        return [_pin_memory(v) for v in data]  # PyTorch 1.13 turns tuples into lists here
    if isinstance(data, collections.abc.Sequence):
        try:
            return type(data)([_pin_memory(v) for v in data])
        except TypeError:
            return [_pin_memory(v) for v in data]
    if hasattr(data, "pin_memory"):
        return data.pin_memory()
    return data


class _BaseIter:
    def __init__(self, loader):
        self._dataset = loader.dataset
        self._iterable = loader._iterable
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        self._prefetch_factor = loader.prefetch_factor
        self._timeout = loader.timeout
        self._collate_fn = loader.collate_fn
        self._persistent_workers = loader.persistent_workers
        self._sampler_iter = iter(self._index_sampler)
        # Drawn from the loader's generator (the default one if None): seeds the workers.
        self._base_seed = _random_seed(loader.generator)
        self._num_yielded = 0
        self._len_reported = loader._IterableDataset_len_called
        self._pin_memory = loader.pin_memory and cuda.is_available()

    def __iter__(self):
        return self

    def _reset(self, loader, first_iter=False):
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0
        self._len_reported = loader._IterableDataset_len_called

    def _next_data(self):
        raise NotImplementedError

    def __next__(self):
        data = self._next_data()
        if self._pin_memory:
            data = _pin_memory(data)
        self._num_yielded += 1
        if self._iterable and self._len_reported is not None and self._num_yielded > self._len_reported:
            message = (f"Length of IterableDataset {self._dataset} was reported to be {self._len_reported} (when "
                       f"accessing len(dataloader)), but {self._num_yielded} samples have been fetched. ")
            if self._num_workers > 0:
                message += ("For multiprocessing data-loading, this could be caused by not properly configuring the "
                            "IterableDataset replica at each worker.")
            warnings.warn(message)
        return data

    def __len__(self):
        return len(self._index_sampler)

    def __getstate__(self):
        raise NotImplementedError(f"{type(self).__name__} cannot be pickled")


class _SingleProcessIter(_BaseIter):
    def __init__(self, loader):
        super().__init__(loader)
        self._fetcher = _worker.create_fetcher(self._iterable, self._dataset, self._auto_collation,
                                               self._collate_fn, self._drop_last)

    def _next_data(self):
        index = next(self._sampler_iter)  # StopIteration ends the epoch
        return self._fetcher.fetch(index)  # so does an iterable dataset's


class _MultiProcessingIter(_BaseIter):
    """Tasks are numbered in sampler order. _task_info[i] is (worker,) while task i is out and
    (worker, data) once it arrived ahead of its turn; _rcvd_idx is the next task to return."""

    def __init__(self, loader):
        super().__init__(loader)
        context = loader.multiprocessing_context or multiprocessing.get_context()
        self._owner_pid = os.getpid()
        self._shutdown = False
        self._workers_status = [True] * self._num_workers  # False: exhausted (iterable) or shut down
        self._workers = []
        self._index_queues = []
        self._workers_done_event = context.Event()
        self._data_queue = _worker.ResultQueue(context)
        for worker_id in range(self._num_workers):
            index_queue = context.Queue()
            index_queue.cancel_join_thread()  # never block exit on tasks nobody will take
            worker = context.Process(
                target=_worker.worker_loop,
                args=(self._iterable, self._dataset, index_queue, self._data_queue, self._workers_done_event,
                      self._auto_collation, self._collate_fn, self._drop_last, self._base_seed,
                      loader.worker_init_fn, worker_id, self._num_workers),
                daemon=True)
            worker.start()
            self._index_queues.append(index_queue)
            self._workers.append(worker)
        self._reset(loader, first_iter=True)

    def _reset(self, loader, first_iter=False):
        super()._reset(loader, first_iter)
        self._send_idx = 0
        self._rcvd_idx = 0
        self._task_info = {}
        self._tasks_outstanding = 0
        self._workers_status = [True] * self._num_workers  # False: exhausted (iterable) or shut down
        self._worker_queue_idx_cycle = itertools.cycle(range(self._num_workers))
        if not first_iter:
            # Persistent workers: restart each worker's fetcher, dropping whatever the last epoch
            # left in flight, and wait until every worker has acknowledged.
            for index_queue in self._index_queues:
                index_queue.put(_worker.ResumeIteration())
            pending = self._num_workers
            while pending:
                idx, _ = self._get_data()
                if isinstance(idx, _worker.ResumeIteration):
                    pending -= 1
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _try_get_data(self, timeout):
        try:
            return True, self._data_queue.get(timeout=timeout)
        except queue.Empty:
            failed = [w for worker_id, w in enumerate(self._workers)
                      if self._workers_status[worker_id] and not w.is_alive()]
            if failed:
                for w in failed:
                    self._mark_worker_as_unavailable(self._workers.index(w))
                pids = ", ".join(str(w.pid) for w in failed)
                raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly") from None
            return False, None

    def _get_data(self):
        if self._timeout > 0:
            deadline = time.monotonic() + self._timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
                ok, data = self._try_get_data(min(remaining, _worker.STATUS_CHECK_INTERVAL))
                if ok:
                    return data
        while True:
            ok, data = self._try_get_data(_worker.STATUS_CHECK_INTERVAL)
            if ok:
                return data

    def _next_data(self):
        while True:
            # Skip tasks that will never arrive: sent to a worker whose iterable dataset ended.
            while self._rcvd_idx < self._send_idx:
                info = self._task_info[self._rcvd_idx]
                if len(info) == 2 or self._workers_status[info[0]]:
                    break
                del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
            else:
                if not self._persistent_workers:
                    self._shutdown_workers()
                raise StopIteration
            if len(self._task_info[self._rcvd_idx]) == 2:  # arrived earlier, out of order
                return self._process_data(self._task_info.pop(self._rcvd_idx)[1])
            idx, data = self._get_data()
            self._tasks_outstanding -= 1
            if isinstance(data, _worker.IterableDatasetStopIteration):
                if self._persistent_workers:
                    self._workers_status[data.worker_id] = False
                else:
                    self._mark_worker_as_unavailable(data.worker_id)
                self._try_put_index()
                continue
            if idx != self._rcvd_idx:
                self._task_info[idx] += (data,)
            else:
                del self._task_info[idx]
                return self._process_data(data)

    def _try_put_index(self):
        try:
            index = next(self._sampler_iter)
        except StopIteration:
            return
        for _ in range(self._num_workers):  # the next worker still taking tasks, if any
            worker_id = next(self._worker_queue_idx_cycle)
            if self._workers_status[worker_id]:
                break
        else:
            return
        self._index_queues[worker_id].put((self._send_idx, index))
        self._task_info[self._send_idx] = (worker_id,)
        self._tasks_outstanding += 1
        self._send_idx += 1

    def _process_data(self, data):
        self._rcvd_idx += 1
        self._try_put_index()
        if isinstance(data, _worker.ExceptionWrapper):
            data.reraise()
        return data

    def _mark_worker_as_unavailable(self, worker_id):
        """Tells a worker to exit (it finishes its current task first)."""
        self._index_queues[worker_id].put(None)
        self._workers_status[worker_id] = False

    def _shutdown_workers(self):
        # A forked worker inherits its parent's iterators: collecting one there must not touch them.
        if _python_exiting or self._shutdown or os.getpid() != self._owner_pid:
            return
        self._shutdown = True
        try:
            self._workers_done_event.set()  # workers drop the tasks still queued
            for worker_id in range(len(self._workers)):
                if self._persistent_workers or self._workers_status[worker_id]:
                    self._mark_worker_as_unavailable(worker_id)
            # Idle workers notice done_event within one interval; busy ones are terminated below.
            deadline = time.monotonic() + 2 * _worker.STATUS_CHECK_INTERVAL
            for w in self._workers:
                w.join(timeout=max(0.0, deadline - time.monotonic()))
            for index_queue in self._index_queues:
                index_queue.cancel_join_thread()
                index_queue.close()
            self._data_queue.cancel_join_thread()
            self._data_queue.close()
        finally:
            for w in self._workers:
                if w.is_alive():
                    w.terminate()
                    w.join()

    def __del__(self):
        if hasattr(self, "_shutdown"):  # __init__ got as far as starting workers
            self._shutdown_workers()
