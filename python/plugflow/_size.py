"""plugflow.Size: the type of ``Tensor.shape``, a tuple of ints (torch.Size)."""


class Size(tuple):
    """A tensor's sizes. A tuple whose slices and concatenations stay Sizes."""

    __slots__ = ()
    __module__ = "plugflow"

    def __repr__(self):
        return "plugflow.Size([" + ", ".join(str(s) for s in self) + "])"

    def numel(self):
        """The number of elements of a tensor of this shape."""
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, key):
        item = super().__getitem__(key)
        return Size(item) if isinstance(key, slice) else item

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple(self) + tuple(other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple(other) + tuple(self))

    def __mul__(self, n):
        return Size(tuple(self) * n)

    __rmul__ = __mul__

    def __reduce__(self):
        return (Size, (tuple(self),))
