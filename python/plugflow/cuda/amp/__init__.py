"""plugflow.cuda.amp (torch.cuda.amp): autocast, custom_fwd/custom_bwd and GradScaler.

As in PyTorch on a machine without CUDA, autocast and GradScaler warn and disable themselves
when no CUDA device is usable; a disabled GradScaler passes losses and steps through unchanged.
With a CUDA device, GradScaler scales losses and skips steps whose gradients overflowed, as
PyTorch's does, and autocast raises NotImplementedError on entry (plugflow.amp explains why).
"""

import functools

from ...amp import autocast as _autocast
from .grad_scaler import GradScaler

__all__ = ["autocast", "custom_fwd", "custom_bwd", "GradScaler"]


class autocast(_autocast):
    """torch.cuda.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)."""

    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    """Decorates a custom Function's forward for autocast. Without eager autocast (so inside no
    autocast region) there is nothing to cast, and forward runs as written."""
    if fwd is None:
        return functools.partial(custom_fwd, cast_inputs=cast_inputs)
    return fwd


def custom_bwd(bwd):
    """Decorates a custom Function's backward for autocast; see custom_fwd."""
    return bwd
