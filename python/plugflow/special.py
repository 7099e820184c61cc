"""plugflow.special (torch.special): the functions plugflow has so far, xlogy and xlog1py.

Both take a tensor or a number for either operand and out=, as PyTorch's do. The ops are defined
in core/opdefs/elementwise.yaml; those marked `special` there are bound on _C for this module only."""

from . import _C

__all__ = ["xlogy", *_C._special_functions]

xlogy = _C.xlogy  # torch.special.xlogy is torch.xlogy
globals().update({name: getattr(_C, name) for name in _C._special_functions})
