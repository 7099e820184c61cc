"""plugflow.distributed.algorithms (torch.distributed.algorithms): the Join context manager for
uneven inputs, and DistributedDataParallel's communication hooks (ddp_comm_hooks)."""

from .join import Join, Joinable, JoinHook

__all__ = ["Join", "Joinable", "JoinHook"]
