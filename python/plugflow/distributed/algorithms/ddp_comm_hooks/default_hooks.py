"""PyTorch 1.13's default DDP communication hooks. A hook is ``hook(state, bucket) -> Future``:
`state` is what register_comm_hook was given (here: the process group, None for the default
one), `bucket` a plugflow.distributed.GradBucket whose buffer() holds the bucket's gradients
summed over nothing yet (not divided by the world size), and the Future's value is the tensor
that becomes the bucket's averaged gradients."""

from .... import distributed as dist
from ...._C import bfloat16, float16

__all__ = ["allreduce_hook", "fp16_compress_hook", "bf16_compress_hook"]


def _allreduce_fut(process_group, tensor):
    """Averages `tensor` over the group in place; a Future of it."""
    group = process_group if process_group is not None else dist.group.WORLD
    tensor.div_(dist.get_world_size(group))
    return dist.all_reduce(tensor, group=group, async_op=True).get_future().then(lambda fut: fut.value()[0])


def allreduce_hook(process_group, bucket):
    """What DDP does without a hook: the bucket averaged with one all_reduce."""
    return _allreduce_fut(process_group, bucket.buffer())


def _compress_hook(dtype, process_group, bucket):
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    compressed = buffer.to(dtype).div_(dist.get_world_size(group))
    fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(fut):
        buffer.copy_(fut.value()[0])  # back to the bucket's dtype, in place
        return buffer

    return fut.then(decompress)


def fp16_compress_hook(process_group, bucket):
    """Averages the bucket in float16 (half the bytes on the wire; float16's precision)."""
    return _compress_hook(float16, process_group, bucket)


def bf16_compress_hook(process_group, bucket):
    """Averages the bucket in bfloat16 (half the bytes on the wire; bfloat16's precision)."""
    return _compress_hook(bfloat16, process_group, bucket)
