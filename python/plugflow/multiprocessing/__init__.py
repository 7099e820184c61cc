"""plugflow.multiprocessing (torch.multiprocessing): Python's multiprocessing, plus spawn().

Everything of Python's multiprocessing is here under the same names (Process, Queue, Pool,
get_context, set_start_method, ...). plugflow tensors pickle by value: one sent through a Queue,
a Pipe or as a Process argument arrives as a copy of its values, dtype, device and requires_grad
(a leaf; the autograd history stays behind), in any start method. Unlike PyTorch, the memory is
not shared: a change made in one process is not seen in another, and Tensor.share_memory_() and
Module.share_memory() raise. The sharing strategies (file_descriptor, file_system) are accepted
and reported, since they only choose how shared memory would be passed.
"""

import multiprocessing
from multiprocessing import *  # noqa: F401,F403

from .spawn import ProcessContext, ProcessException, ProcessExitedException, ProcessRaisedException, spawn, \
    start_processes  # noqa: F401

__all__ = ["set_sharing_strategy", "get_sharing_strategy", "get_all_sharing_strategies", "spawn", "start_processes",
           "ProcessContext", "ProcessException", "ProcessExitedException", "ProcessRaisedException",
           *multiprocessing.__all__]

_SHARING_STRATEGIES = {"file_descriptor", "file_system"}
_sharing_strategy = "file_descriptor"


def set_sharing_strategy(new_strategy):
    """Records the strategy (PyTorch's names); plugflow copies tensors between processes either way."""
    global _sharing_strategy
    if new_strategy not in _SHARING_STRATEGIES:
        raise AssertionError(f"invalid sharing strategy {new_strategy!r}; expected one of {sorted(_SHARING_STRATEGIES)}")
    _sharing_strategy = new_strategy


def get_sharing_strategy():
    return _sharing_strategy


def get_all_sharing_strategies():
    return set(_SHARING_STRATEGIES)
