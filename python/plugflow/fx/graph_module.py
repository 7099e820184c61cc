"""plugflow.fx.graph_module (torch.fx.graph_module): GraphModule and _copy_attr."""

from ..nn.modules.module import Module
from ..nn.parameter import Parameter
from .._C import Tensor
from ._refused import refused

__all__ = ["GraphModule"]


class GraphModule(Module):
    """Constructing one raises NotImplementedError: there are no torch.fx graphs to run."""

    def __init__(self, *args, **kwargs):
        raise refused("torch.fx.GraphModule")


def _copy_attr(from_module, to_module, target):
    """Copies the attribute at the dotted path target of from_module to the same path on
    to_module, creating empty Modules on the way (a plain tensor is registered as a buffer)."""
    *prefix, field = target.split(".")
    for item in prefix:
        f = getattr(from_module, item)
        t = getattr(to_module, item, None)
        if f is t:  # a parent already installed: it carries this attribute
            return
        if t is None:
            t = Module()
            setattr(to_module, item, t)
        from_module, to_module = f, t
    orig = getattr(from_module, field)
    if isinstance(orig, Tensor) and not isinstance(orig, Parameter):
        to_module.register_buffer(field, orig)
    else:
        setattr(to_module, field, orig)
