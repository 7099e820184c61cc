"""Samplers (torch.utils.data.sampler): the orders in which a DataLoader visits a map-style
dataset. Random ones draw from a plugflow.Generator (or, without one, from a generator seeded
from the default one), so a seeded generator gives the same order every run."""

from typing import Generic, TypeVar

import plugflow

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
           "BatchSampler"]

T_co = TypeVar("T_co", covariant=True)


def _random_seed(generator=None):
    """A fresh 63-bit seed drawn from generator (the default generator when None), as PyTorch's
    `torch.empty((), dtype=torch.int64).random_(generator=generator)`."""
    return plugflow.randint(0, 2**63 - 1, (1,), generator=generator).item()


def _is_positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class Sampler(Generic[T_co]):
    """Base class: subclasses define __iter__ over indices (or batches of them) and, for
    len(DataLoader), __len__."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler[int]):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """A random permutation of the dataset (repeated, then truncated, when num_samples exceeds
    its length), or num_samples indices drawn with replacement."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={self.replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        generator = self.generator
        if generator is None:  # each epoch a new order, seeded from the default generator
            generator = plugflow.Generator()
            generator.manual_seed(_random_seed())
        if self.replacement:
            # In chunks of 32, as PyTorch: the same generator gives the same indices.
            for _ in range(self.num_samples // 32):
                yield from plugflow.randint(n, size=(32,), generator=generator).tolist()
            yield from plugflow.randint(n, size=(self.num_samples % 32,), generator=generator).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from plugflow.randperm(n, generator=generator).tolist()
            yield from plugflow.randperm(n, generator=generator).tolist()[:self.num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given indices in a random order."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        for i in plugflow.randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


def _multinomial(weights, num_samples, replacement, generator):
    """torch.multinomial for one row of float64 weights, as a list of ints. plugflow has no
    multinomial op; the draws come from the generator, the rest is index arithmetic in numpy:
    with replacement by inverting the CDF, without replacement by the exponential race (each
    category's arrival time -log(1 - u) / w; the first num_samples to arrive win)."""
    import numpy as np

    w = weights.detach().numpy()
    if np.any(w < 0):
        raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
    if not np.all(np.isfinite(w)):
        raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity or NaN)")
    if not w.sum() > 0:
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    if not replacement:
        if num_samples > w.size:
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        if num_samples > np.count_nonzero(w):
            raise RuntimeError("invalid multinomial distribution (with replacement=False, not enough non-negative "
                               "category to sample)")
    u = plugflow.rand(num_samples if replacement else w.size, dtype=plugflow.float64, generator=generator).numpy()
    if replacement:
        cdf = np.cumsum(w)
        picks = np.searchsorted(cdf, u * cdf[-1], side="right")
        return np.minimum(picks, np.flatnonzero(w)[-1]).tolist()  # u * total may round up to the total
    with np.errstate(divide="ignore"):
        arrival = -np.log1p(-u) / w  # zero weights never arrive (inf)
    return np.argsort(arrival, kind="stable")[:num_samples].tolist()


class WeightedRandomSampler(Sampler[int]):
    """num_samples indices in [0, len(weights)), index i drawn with probability proportional to
    weights[i], with or without replacement."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        if not _is_positive_int(num_samples):
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        weights = plugflow.as_tensor(weights, dtype=plugflow.float64)
        if weights.dim() != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {tuple(weights.shape)}")
        self.weights = weights
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self):
        yield from _multinomial(self.weights, self.num_samples, self.replacement, self.generator)

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler[list]):
    """Groups another sampler's indices into lists of batch_size (the last one shorter, or
    dropped with drop_last)."""

    def __init__(self, sampler, batch_size, drop_last):
        if not _is_positive_int(batch_size):
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
