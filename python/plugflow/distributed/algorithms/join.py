"""Join (torch.distributed.algorithms.join): training on inputs of different lengths per rank.

    with ddp_model.join():
        for x, y in loader:          # may run out earlier on some ranks
            ...

Inside the context every forward of a Joinable (DistributedDataParallel) first tells the others
that its rank is still training (an all-reduce of ones). A rank that runs out of inputs leaves
the body and, in __exit__, counts the ranks still training (an all-reduce of zeros, matching
theirs); while some are, it runs its Joinables' join hooks, which issue the collectives a
training step of theirs expects (DDP: the buffer broadcast, zero gradient buckets), so the
others never wait for it. When every rank has joined, the post hooks run (DDP: every rank takes
the parameters of a rank that joined last).
"""

import warnings
from abc import ABC, abstractmethod
from typing import NamedTuple

from ... import distributed as dist
from ..._creation import ones, zeros

__all__ = ["Join", "Joinable", "JoinHook"]


class JoinHook:
    """What a joined rank runs for a Joinable: main_hook() once per step the others still take,
    post_hook(is_last_joiner) once all ranks have joined."""

    def main_hook(self):
        pass

    def post_hook(self, is_last_joiner):
        pass


class _JoinConfig(NamedTuple):
    enable: bool
    throw_on_early_termination: bool
    is_first_joinable: bool

    @staticmethod
    def construct_disabled_join_config():
        return _JoinConfig(enable=False, throw_on_early_termination=False, is_first_joinable=False)


class Joinable(ABC):
    """A class that can take part in a Join: it calls Join.notify_join_context(self) at the
    start of each step and gives a JoinHook, its device and its process group."""

    @abstractmethod
    def __init__(self):
        super().__init__()
        self._join_config = _JoinConfig.construct_disabled_join_config()

    @abstractmethod
    def join_hook(self, **kwargs):
        ...

    @property
    @abstractmethod
    def join_device(self):
        ...

    @property
    @abstractmethod
    def join_process_group(self):
        ...


class Join:
    """The context manager (see the module docstring). joinables: the Joinables of the training
    loop, all on one process group. enable=False makes it do nothing. throw_on_early_termination:
    once a rank runs out, every rank raises RuntimeError at its next step instead of shadowing.
    Other keyword arguments go to each joinable's join_hook()."""

    def __init__(self, joinables, enable=True, throw_on_early_termination=False, **kwargs):
        if len(joinables) == 0:
            raise ValueError("The join context manager requires at least one joinable")
        self._joinables = joinables
        self._join_hooks = [joinable.join_hook(**kwargs) for joinable in self._joinables]
        self._enable = enable
        self._throw_on_early_termination = throw_on_early_termination
        for i, joinable in enumerate(self._joinables):
            joinable._join_config = _JoinConfig(enable=enable, throw_on_early_termination=throw_on_early_termination,
                                                is_first_joinable=i == 0)
        self._process_group = None
        self._device = None
        for joinable in self._joinables:
            if self._process_group is None:
                self._process_group = joinable.join_process_group
            elif self._process_group is not joinable.join_process_group:
                raise ValueError("Using join context manager with multiple process groups")
            if self._device is None:
                self._device = joinable.join_device
        self._rank = dist.get_rank(self._process_group)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if not self._enable or exc_type is not None:
                return  # an exception propagates as it is
            all_joined = False
            is_last_joiner = True
            shadowed = 0
            while not all_joined:
                if shadowed == 1000:
                    warnings.warn(f"Detected uneven input skew of greater than 1000. This means that rank "
                                  f"{self._rank} has at least 1000 fewer inputs than other currently-active "
                                  f"ranks. This level of skew could lead to performance degradation during "
                                  f"training.")
                if self._num_nonjoined_procs() == 0:
                    all_joined = True
                else:
                    if self._throw_on_early_termination:
                        self._notify_procs_to_terminate()
                    for hook in self._join_hooks:
                        hook.main_hook()
                    is_last_joiner = False
                    shadowed += 1
            for hook in self._join_hooks:
                hook.post_hook(is_last_joiner)
        finally:
            for joinable in self._joinables:
                joinable._join_config = _JoinConfig.construct_disabled_join_config()

    def _num_nonjoined_procs(self):
        count = zeros(1, device=self._device)
        dist.all_reduce(count, group=self._process_group)
        return int(count.item())

    def _notify_procs_to_terminate(self):
        dist.all_reduce(ones(1, device=self._device), group=self._process_group)
        raise RuntimeError(f"Rank {self._rank} exhausted all inputs.")

    @staticmethod
    def notify_join_context(joinable):
        """Called by a Joinable at the start of each step: tells the joined ranks that this one
        still trains (an async all-reduce of ones, whose Work is returned: after it, its result
        is the number of ranks still training). None outside an enabled Join, and for all but
        the first joinable."""
        config = getattr(joinable, "_join_config", None)
        if config is None:
            raise RuntimeError("Check that the Joinable's __init__() calls Joinable.__init__() (it sets _join_config)")
        if not config.is_first_joinable or not config.enable:
            return None
        device, group = joinable.join_device, joinable.join_process_group
        count = ones(1, device=device)
        work = dist.all_reduce(count, group=group, async_op=True)
        if config.throw_on_early_termination:
            should_throw = zeros(1, device=device)
            dist.all_reduce(should_throw, group=group)
            if should_throw.item():
                raise RuntimeError("Detected at least one rank that exhausted inputs. Throwing across all ranks.")
        return work
