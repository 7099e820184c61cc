"""DistributedDataParallel communication hooks (torch.distributed.algorithms.ddp_comm_hooks):
register one with ``ddp.register_comm_hook(state, hook)``; default_hooks has PyTorch's
allreduce_hook, fp16_compress_hook and bf16_compress_hook."""

from . import default_hooks

__all__ = ["default_hooks"]
