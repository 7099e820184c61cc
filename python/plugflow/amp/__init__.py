"""plugflow.amp: automatic mixed precision. `autocast` regions run PyTorch's autocast op lists in
bfloat16 (CPU) or float16/bfloat16 (CUDA); `GradScaler` scales float16 losses and skips steps
with inf/NaN gradients. `plugflow.cuda.amp` and `plugflow.cpu.amp` are PyTorch 1.13's
device-specific spellings."""

from .autocast_mode import autocast, custom_fwd, custom_bwd
from .grad_scaler import GradScaler

__all__ = ["autocast", "custom_fwd", "custom_bwd", "GradScaler"]
