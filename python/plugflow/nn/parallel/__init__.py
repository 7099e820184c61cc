"""plugflow.nn.parallel (torch.nn.parallel): DataParallel and DistributedDataParallel.

DataParallel runs the module on one device: without CUDA it is the module itself (as in PyTorch
without GPUs); with one CUDA device it moves the module there and each call's tensor arguments
to it. Splitting a batch over several GPUs (replicate/scatter/gather) is not built: naming more
than one device raises NotImplementedError at construction. DistributedDataParallel (one
process per device or CPU replica, gradients averaged across processes) is in distributed.py.
"""

from ... import _C, cuda
from ..modules.module import Module

__all__ = ["DataParallel", "DistributedDataParallel"]


def _device_index(device):
    if isinstance(device, int):
        return device
    device = device if isinstance(device, _C.device) else _C.device(device)
    if device.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {device}")
    return device.index if device.index is not None else cuda.current_device()


def _to_device(obj, device):
    """obj with every tensor inside (tuples, lists, dicts) moved to device."""
    if isinstance(obj, _C.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return type(obj)(*(_to_device(v, device) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_device(v, device) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((k, _to_device(v, device)) for k, v in obj.items())
    return obj


class DataParallel(Module):
    """module on one device (see the package docstring); its state dict keys gain "module."."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        self.module = module
        self.dim = dim
        if not cuda.is_available():
            self.device_ids = []
            return
        if device_ids is None:
            device_ids = list(range(cuda.device_count()))
        self.device_ids = [_device_index(d) for d in device_ids]
        if len(self.device_ids) > 1:
            raise NotImplementedError(f"DataParallel over {len(self.device_ids)} devices: plugflow does not split a "
                                      "batch across GPUs; pass device_ids=[0] (or one device)")
        self.output_device = _device_index(output_device if output_device is not None else self.device_ids[0])
        self.src_device_obj = _C.device("cuda", self.device_ids[0])
        self.module.to(self.src_device_obj)

    def forward(self, *inputs, **kwargs):
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        for t in list(self.module.parameters()) + list(self.module.buffers()):
            if t.device != self.src_device_obj:
                raise RuntimeError(f"module must have its parameters and buffers on device {self.src_device_obj} "
                                   f"(device_ids[0]) but found one of them on device: {t.device}")
        return self.module(*_to_device(inputs, self.src_device_obj), **_to_device(kwargs, self.src_device_obj))


from .distributed import DistributedDataParallel  # noqa: E402 (uses the helpers above)
