"""torch.cuda.amp.grad_scaler: GradScaler for CUDA losses and gradients (plugflow.amp.GradScaler
with device 'cuda')."""

from ...amp import grad_scaler as _grad_scaler
from ...amp.grad_scaler import OptState  # noqa: F401  (torch.cuda.amp.grad_scaler.OptState)

__all__ = ["GradScaler"]


class GradScaler(_grad_scaler.GradScaler):
    """torch.cuda.amp.GradScaler: warns and disables itself when no CUDA device is available, as
    PyTorch does (scale() then returns its argument, step() calls optimizer.step())."""

    def __init__(self, init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, enabled=True):
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)
