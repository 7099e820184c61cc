"""What runs inside a DataLoader worker process: seeding, WorkerInfo, the fetch loop, and the
wrapper that carries an exception with its traceback back to the main process."""

import multiprocessing.queues
import os
import queue
import random
import sys
import traceback
from dataclasses import dataclass

import plugflow

# How often a blocked worker checks that the main process is still alive, and how often the main
# process checks that its workers are (seconds). Waiting costs nothing; only failure detection
# waits this long.
STATUS_CHECK_INTERVAL = 0.5

_worker_info = None


class WorkerInfo:
    """What get_worker_info() returns inside a worker: id, num_workers, seed and dataset (this
    worker's copy). Read-only."""

    __initialized = False

    def __init__(self, **kwargs):
        for key, value in kwargs.items():
            setattr(self, key, value)
        self.__keys = tuple(kwargs)
        self.__initialized = True

    def __setattr__(self, key, value):
        if self.__initialized:
            raise RuntimeError(f"Cannot assign attributes to {type(self).__name__} objects")
        super().__setattr__(key, value)

    def __repr__(self):
        fields = ", ".join(f"{key}={getattr(self, key)}" for key in self.__keys)
        return f"{type(self).__name__}({fields})"


def get_worker_info():
    """In a DataLoader worker: its WorkerInfo (id, num_workers, seed, dataset). In the main
    process: None."""
    return _worker_info


class _KeyErrorMessage(str):
    """A KeyError's message printed as is (KeyError repr()s its argument)."""

    def __repr__(self):
        return self


class ExceptionWrapper:
    """An exception caught in a worker: its type and formatted traceback, picklable."""

    def __init__(self, exc_info=None, where="in background"):
        exc_info = exc_info or sys.exc_info()
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self):
        """Raises the same exception type in this process, its message holding the worker's
        traceback; RuntimeError when the type cannot be built from one message."""
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            msg = _KeyErrorMessage(msg)
        try:
            exception = self.exc_type(msg)
        except Exception:
            raise RuntimeError(msg) from None
        raise exception


@dataclass(frozen=True)
class IterableDatasetStopIteration:
    """A worker's iterable dataset is exhausted."""
    worker_id: int


@dataclass(frozen=True)
class ResumeIteration:
    """Persistent workers: start a new epoch (the worker acknowledges with this object)."""


class ResultQueue(multiprocessing.queues.Queue):
    """The queue workers put results on. A batch that cannot be pickled (say, it holds a lambda)
    fails in the queue's feeder thread, where multiprocessing would print the error and drop the
    batch, leaving the main process waiting for it; here it becomes that batch's error."""

    def __init__(self, ctx):
        super().__init__(ctx=ctx)

    def _on_queue_feeder_error(self, e, obj):  # multiprocessing's hook for exactly this
        if not (isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], int)):
            return super()._on_queue_feeder_error(e, obj)
        idx, data = obj
        if isinstance(data, ExceptionWrapper) and data.exc_type is not RuntimeError:
            data.exc_type = RuntimeError  # its own type cannot be pickled; the traceback still names it
            self.put((idx, data))
            return
        where = f"in DataLoader worker process {_worker_info.id if _worker_info else '?'}"
        self.put((idx, ExceptionWrapper((type(e), e, e.__traceback__), where=where)))


def create_fetcher(iterable, dataset, auto_collation, collate_fn, drop_last):
    return (_IterableFetcher if iterable else _MapFetcher)(dataset, auto_collation, collate_fn, drop_last)


class _MapFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset, self.auto_collation, self.collate_fn = dataset, auto_collation, collate_fn

    def fetch(self, index):
        if not self.auto_collation:
            return self.collate_fn(self.dataset[index])
        getitems = getattr(self.dataset, "__getitems__", None)
        data = getitems(index) if getitems else [self.dataset[i] for i in index]
        return self.collate_fn(data)


class _IterableFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.auto_collation, self.collate_fn, self.drop_last = auto_collation, collate_fn, drop_last
        self.dataset_iter = iter(dataset)
        self.ended = False

    def fetch(self, index):
        """index is a batch of placeholders (its length is the batch size), or None."""
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self.dataset_iter))
        data = []
        for _ in index:
            try:
                data.append(next(self.dataset_iter))
            except StopIteration:
                self.ended = True
                break
        if not data or (self.drop_last and len(data) < len(index)):
            raise StopIteration
        return self.collate_fn(data)


def _seed_worker(base_seed, worker_id):
    """Seeds Python's, plugflow's and numpy's global generators differently in every worker
    (base_seed comes from the main process's generator, so a seeded run repeats)."""
    seed = base_seed + worker_id
    random.seed(seed)
    plugflow.manual_seed(seed)
    import numpy as np

    np.random.seed(np.random.SeedSequence([worker_id, base_seed]).generate_state(4))
    return seed


def worker_loop(iterable, dataset, index_queue, data_queue, done_event, auto_collation, collate_fn, drop_last,
                base_seed, init_fn, worker_id, num_workers):
    """A worker: takes (task index, sample indices) from index_queue, puts (task index, batch or
    ExceptionWrapper) on data_queue, until it gets None or the main process dies."""
    global _worker_info
    try:
        plugflow.set_num_threads(1)  # num_workers processes already share the cores
        seed = _seed_worker(base_seed, worker_id)
        _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
        init_error = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = create_fetcher(iterable, dataset, auto_collation, collate_fn, drop_last)
        except Exception:
            init_error = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
        iteration_end = False
        parent = os.getppid()
        while os.getppid() == parent:  # a worker whose main process died exits
            try:
                task = index_queue.get(timeout=STATUS_CHECK_INTERVAL)
            except queue.Empty:
                if done_event.is_set():
                    break  # shut down; the None that says so may never come (its queue was collected)
                continue
            if isinstance(task, ResumeIteration):
                data_queue.put((task, None))
                iteration_end = False
                if init_error is None:
                    fetcher = create_fetcher(iterable, dataset, auto_collation, collate_fn, drop_last)
                continue
            if task is None:
                break
            if done_event.is_set() or iteration_end:
                continue  # draining: the main process no longer wants results
            idx, index = task
            if init_error is not None:  # worker_init_fn or the dataset's __iter__ failed: every task fails
                data = init_error
            else:
                try:
                    data = fetcher.fetch(index)
                except StopIteration:
                    if not iterable:
                        data = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
                    else:
                        data = IterableDatasetStopIteration(worker_id)
                        iteration_end = True
                except Exception:
                    data = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
            data_queue.put((idx, data))
            del data, idx, index, task  # release the batch before blocking for the next task
    except KeyboardInterrupt:
        pass  # the main process handles Ctrl-C
    if done_event.is_set():
        data_queue.cancel_join_thread()
        data_queue.close()
