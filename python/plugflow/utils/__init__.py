"""plugflow.utils (torch.utils): data loading."""

from . import data  # noqa: F401  (plugflow.utils.data after `import plugflow`)
