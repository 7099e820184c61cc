"""plugflow.utils.data (torch.utils.data): datasets, samplers and the DataLoader.

The loading side (DataLoader, collation, workers) imports multiprocessing and numpy, so it loads
on first use rather than with `import plugflow`."""

import importlib

from .dataset import (Dataset, IterableDataset, TensorDataset, ConcatDataset, ChainDataset, Subset,  # noqa: F401
                      random_split)
from .sampler import (Sampler, SequentialSampler, RandomSampler, SubsetRandomSampler,  # noqa: F401
                      WeightedRandomSampler, BatchSampler)
from .distributed import DistributedSampler  # noqa: F401

_LAZY = {"DataLoader": ".dataloader", "get_worker_info": "._worker", "default_collate": "._collate",
         "default_convert": "._collate"}

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset", "Subset", "random_split",
           "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
           "BatchSampler", "DistributedSampler", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # once loaded, a plain attribute
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
