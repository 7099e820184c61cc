"""plugflow.ao (torch.ao): PyTorch's architecture-optimization namespace; only quantization's
names, for code that imports them (plugflow.ao.quantization)."""

from . import quantization  # noqa: F401  (torch.ao.quantization after `import torch`, as in PyTorch)
