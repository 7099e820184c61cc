"""plugflow.utils.hooks (torch.utils.hooks): RemovableHandle, the handle every register_*_hook
returns (defined with nn.Module, which uses it)."""

from ..nn.modules.module import RemovableHandle

__all__ = ["RemovableHandle"]
