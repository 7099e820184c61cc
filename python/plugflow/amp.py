"""plugflow.amp (torch.amp): autocast, with PyTorch's rules for when it is disabled.

plugflow runs automatic mixed precision in nn.Graph (the config's `optimizations.amp`), not in
eager mode. autocast therefore takes PyTorch's arguments and applies PyTorch's checks: CUDA
autocast without a usable CUDA device warns and disables itself, CPU autocast with a dtype other
than bfloat16 warns and disables itself, and a disabled autocast (enabled=False) is a plain block.
An autocast that would be enabled raises NotImplementedError on entry, rather than silently
running in full precision.
"""

import functools
import warnings

from . import cuda
from ._C import bfloat16, float16

__all__ = ["autocast", "is_autocast_enabled"]


def is_autocast_enabled():
    """False: eager autocast never runs in plugflow."""
    return False


class autocast:
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None): a context manager
    and a decorator; see the module docstring."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type not in ("cuda", "cpu"):
            raise RuntimeError("User specified autocast device_type must be 'cuda' or 'cpu'")
        self.device = device_type
        self.fast_dtype = dtype if dtype is not None else (float16 if device_type == "cuda" else bfloat16)
        if enabled and device_type == "cuda" and not cuda.is_available():
            warnings.warn("User provided device_type of 'cuda', but CUDA is not available. Disabling")
            enabled = False
        if enabled and device_type == "cpu" and self.fast_dtype != bfloat16:
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
                          "CPU Autocast only supports dtype of torch.bfloat16 currently.")
            enabled = False
        self._enabled = bool(enabled)

    def __enter__(self):
        if self._enabled:
            raise NotImplementedError(f"autocast(device_type={self.device!r}, dtype={self.fast_dtype}): plugflow has no "
                                      "eager mixed precision; run the model in an nn.Graph with the config's "
                                      "optimizations.amp, or pass enabled=False")
        return self

    def __exit__(self, *exc_info):
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def decorated(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return decorated
