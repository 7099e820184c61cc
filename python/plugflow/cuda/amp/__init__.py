"""plugflow.cuda.amp: torch.cuda.amp of PyTorch 1.13 (autocast with device_type 'cuda',
custom_fwd/custom_bwd for autograd.Function, GradScaler). Without a usable CUDA device autocast
and GradScaler warn and disable themselves, as PyTorch's do."""

from ...amp import autocast_mode as _autocast_mode
from ... import _C
from .grad_scaler import GradScaler

__all__ = ["autocast", "custom_fwd", "custom_bwd", "GradScaler"]


class autocast(_autocast_mode.autocast):
    """torch.cuda.amp.autocast(args...) is plugflow.autocast("cuda", args...)."""

    def __init__(self, enabled=True, dtype=_C.float16, cache_enabled=True):
        super().__init__("cuda", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    """Decorates an autograd.Function's forward for CUDA autocast (see plugflow.amp.custom_fwd)."""
    return _autocast_mode.custom_fwd(fwd, device_type="cuda", cast_inputs=cast_inputs)


def custom_bwd(bwd):
    """Decorates an autograd.Function's backward: it runs in its forward's autocast state."""
    return _autocast_mode.custom_bwd(bwd, device_type="cuda")
