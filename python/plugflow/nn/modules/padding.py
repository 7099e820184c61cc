"""Padding modules (torch.nn.modules.padding): constant, zero, reflection and replication
padding of the last 1 or 2 dims, through F.pad."""

from .. import functional as F
from .module import Module

__all__ = ["ConstantPad1d", "ConstantPad2d", "ZeroPad2d", "ReflectionPad1d", "ReflectionPad2d",
           "ReplicationPad1d", "ReplicationPad2d"]


def _ntuple(padding, n):
    if isinstance(padding, int):
        return (padding,) * n
    padding = tuple(padding)
    if len(padding) != n:
        raise ValueError(f"padding must be an int or a tuple of {n} ints, got {padding}")
    return padding


class _ConstantPadNd(Module):
    __constants__ = ["padding", "value"]

    def __init__(self, value):
        super().__init__()
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pads the last dim with value: padding is an int or (left, right)."""

    def __init__(self, padding, value):
        super().__init__(value)
        self.padding = _ntuple(padding, 2)


class ConstantPad2d(_ConstantPadNd):
    """Pads the last two dims with value: padding is an int or (left, right, top, bottom)."""

    def __init__(self, padding, value):
        super().__init__(value)
        self.padding = _ntuple(padding, 4)


class ZeroPad2d(ConstantPad2d):
    """Pads the last two dims with zeros: padding is an int or (left, right, top, bottom)."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class _PadNd(Module):
    __constants__ = ["padding"]
    mode = None

    def forward(self, input):
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self):
        return f"{self.padding}"


class ReflectionPad1d(_PadNd):
    """Pads the last dim with its reflection (the edge not repeated)."""
    mode = "reflect"

    def __init__(self, padding):
        super().__init__()
        self.padding = _ntuple(padding, 2)


class ReflectionPad2d(_PadNd):
    """Pads the last two dims with their reflection (the edges not repeated)."""
    mode = "reflect"

    def __init__(self, padding):
        super().__init__()
        self.padding = _ntuple(padding, 4)


class ReplicationPad1d(_PadNd):
    """Pads the last dim by repeating its edge values."""
    mode = "replicate"

    def __init__(self, padding):
        super().__init__()
        self.padding = _ntuple(padding, 2)


class ReplicationPad2d(_PadNd):
    """Pads the last two dims by repeating their edge values."""
    mode = "replicate"

    def __init__(self, padding):
        super().__init__()
        self.padding = _ntuple(padding, 4)
