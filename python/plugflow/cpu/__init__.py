"""plugflow.cpu: CPU-specific namespaces (torch.cpu): `plugflow.cpu.amp.autocast`."""

from . import amp  # noqa: F401
