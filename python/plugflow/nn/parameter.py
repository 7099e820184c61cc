"""nn.Parameter: a Tensor that a Module registers as one of its parameters (torch.nn.Parameter).

plugflow.Tensor is a pybind11 class whose `Tensor(other)` constructor makes a new tensor object
sharing other's storage with a fresh autograd identity. That is exactly what PyTorch's
`Tensor._make_subclass(cls, data, requires_grad)` does, so a Parameter is a Python subclass of
Tensor built that way: a leaf, detached from data's history, sharing its memory. Ops on a
Parameter return plain Tensors (the C++ side always builds plugflow.Tensor).
"""

from .. import _creation
from .._C import Tensor

__all__ = ["Parameter", "UninitializedParameter", "UninitializedBuffer"]


class Parameter(Tensor):
    r"""A Tensor that is a module parameter: assigning it as a Module attribute registers it.

    Args:
        data (Tensor): the parameter's values (shared, not copied). Default: an empty tensor.
        requires_grad (bool): whether the parameter requires gradient. Default: True.
    """

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = _creation.empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(): argument 'data' must be Tensor, not {type(data).__name__}")
        param = Tensor.__new__(cls)
        Tensor.__init__(param, data)  # shares data's storage, no autograd history
        param.requires_grad_(requires_grad)
        return param

    def __init__(self, data=None, requires_grad=True):
        pass  # everything happens in __new__; Tensor.__init__ must not run a second time

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = type(self)(self.data.clone(), self.requires_grad)
        memo[id(self)] = result
        return result

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, protocol):
        # Hooks are not serialized, as in PyTorch.
        return (_rebuild_parameter, (self.data, self.requires_grad))


def _rebuild_parameter(data, requires_grad):
    return Parameter(data, requires_grad)


class UninitializedTensorMixin:
    """A parameter or buffer whose shape is not known yet (a lazy module's, before its first
    forward): it holds an empty tensor of the dtype and device to materialize with. Unlike
    PyTorch's, plugflow's ops do not refuse it by type: an op on it sees that empty tensor."""

    cls_to_become = None

    def materialize(self, shape, device=None, dtype=None):
        """Gives the tensor `shape` (uninitialized memory) and makes it a Parameter (or Tensor)."""
        device = self.data.device if device is None else device
        dtype = self.data.dtype if dtype is None else dtype
        self.data = _creation.empty(tuple(shape), device=device, dtype=dtype)
        self.__class__ = self.cls_to_become

    def share_memory_(self):
        raise RuntimeError("Can't share memory on an uninitialized parameter or buffer. Call `forward` to initialize "
                           "the parameters before calling `module.share_memory()`.")

    def __repr__(self):
        return f"<{self.__class__.__name__}>"

    def __reduce_ex__(self, protocol):
        return (self.__class__, (self.requires_grad,))


def is_lazy(param):
    """Whether param is an uninitialized (lazy) parameter or buffer."""
    return isinstance(param, UninitializedTensorMixin)


class UninitializedParameter(UninitializedTensorMixin, Parameter):
    """A Parameter whose shape a lazy module infers on its first forward (materialize)."""

    cls_to_become = Parameter

    def __new__(cls, requires_grad=True, device=None, dtype=None):
        return Parameter.__new__(cls, _creation.empty(0, device=device, dtype=dtype), requires_grad)

    def __init__(self, requires_grad=True, device=None, dtype=None):
        pass

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, self.data.device, self.data.dtype)
        return memo[id(self)]


class _MaterializedBuffer(Tensor):
    """A materialized UninitializedBuffer, until its lazy module swaps it for a plain Tensor
    sharing its memory (a Python object cannot become a plugflow.Tensor in place)."""


class UninitializedBuffer(UninitializedTensorMixin, Tensor):
    """A buffer whose shape a lazy module infers on its first forward (materialize)."""

    cls_to_become = _MaterializedBuffer

    def __new__(cls, requires_grad=False, device=None, dtype=None):
        buffer = Tensor.__new__(cls)
        Tensor.__init__(buffer, _creation.empty(0, device=device, dtype=dtype))
        buffer.requires_grad_(requires_grad)
        return buffer

    def __init__(self, requires_grad=False, device=None, dtype=None):
        pass

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, self.data.device, self.data.dtype)
        return memo[id(self)]
