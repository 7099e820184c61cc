"""plugflow.fx.graph (torch.fx.graph): Graph."""

from ._refused import RefusedConstruction

__all__ = ["Graph"]


class Graph(RefusedConstruction):
    _fx_name = "Graph"
