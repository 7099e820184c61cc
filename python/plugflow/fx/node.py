"""plugflow.fx.node (torch.fx.node): Node and the type names annotations use."""

from typing import Any, Callable, Union

from ._refused import RefusedConstruction

__all__ = ["Node", "Target", "Argument"]

Target = Union[Callable[..., Any], str]
Argument = Any


class Node(RefusedConstruction):
    _fx_name = "Node"
