"""plugflow.fx.proxy (torch.fx.proxy): Proxy, and Tracer, which records through proxies."""

from ._refused import RefusedConstruction

__all__ = ["Proxy", "Tracer"]


class Proxy(RefusedConstruction):
    _fx_name = "Proxy"


class Tracer(RefusedConstruction):
    """torch.fx.Tracer; subclasses (such as torchvision's feature-extraction tracers) can be
    defined, and constructing one raises NotImplementedError."""

    _fx_name = "Tracer"
