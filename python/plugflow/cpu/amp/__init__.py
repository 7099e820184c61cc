"""plugflow.cpu.amp: torch.cpu.amp.autocast of PyTorch 1.13 (bfloat16 autocast on the CPU)."""

from ...amp import autocast_mode as _autocast_mode
from ... import _C

__all__ = ["autocast"]


class autocast(_autocast_mode.autocast):
    """torch.cpu.amp.autocast(args...) is plugflow.autocast("cpu", args...)."""

    def __init__(self, enabled=True, dtype=_C.bfloat16, cache_enabled=True):
        super().__init__("cpu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)
