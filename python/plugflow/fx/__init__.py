"""plugflow.fx (torch.fx): the names of PyTorch's symbolic tracer, without the tracer.

plugflow runs modules eagerly and through nn.Graph; it has no torch.fx graphs. The package
exists so that code importing it at module level (torchvision's ops and feature extraction) loads:
wrap() returns what it is given (it only marks functions for the tracer), and symbolic_trace(),
Tracer, Graph, GraphModule, Node and Proxy raise NotImplementedError naming the call when used.
"""

from . import graph, graph_module, node, proxy  # noqa: F401
from ._refused import refused
from .graph import Graph
from .graph_module import GraphModule
from .node import Node
from .proxy import Proxy, Tracer

__all__ = ["symbolic_trace", "wrap", "Graph", "GraphModule", "Node", "Proxy", "Tracer"]


def symbolic_trace(root, concrete_args=None):
    """Raises NotImplementedError: plugflow has no symbolic tracer."""
    raise refused("torch.fx.symbolic_trace")


def wrap(fn_or_name):
    """Marks a global function as a leaf for the tracer; with no tracer, returns its argument."""
    return fn_or_name
