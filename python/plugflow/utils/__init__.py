"""plugflow.utils (torch.utils): data loading, hooks."""

from . import data, hooks  # noqa: F401  (plugflow.utils.data, .hooks after `import plugflow`)
