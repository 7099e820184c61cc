"""torch.backends.cuda's flags: matmul.allow_tf32 and matmul.allow_fp16_reduced_precision_reduction
(stored only; they change nothing in plugflow yet)."""

from .. import _C


class _Matmul:
    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True


matmul = _Matmul()


def is_built():
    """True when plugflow's CUDA plugin found a device."""
    return _C.device_count("cuda") > 0
