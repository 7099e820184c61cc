"""nn.Parameter: a Tensor that a Module registers as one of its parameters (torch.nn.Parameter).

plugflow.Tensor is a pybind11 class whose `Tensor(other)` constructor makes a new tensor object
sharing other's storage with a fresh autograd identity. That is exactly what PyTorch's
`Tensor._make_subclass(cls, data, requires_grad)` does, so a Parameter is a Python subclass of
Tensor built that way: a leaf, detached from data's history, sharing its memory. Ops on a
Parameter return plain Tensors (the C++ side always builds plugflow.Tensor).
"""

from .. import _creation
from .._C import Tensor

__all__ = ["Parameter"]


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
