from numbers import Number

import plugflow
from . import constraints
from ._gamma import rsample_standard_gamma
from .exp_family import ExponentialFamily
from .utils import broadcast_all

__all__ = ["Gamma"]


class Gamma(ExponentialFamily):
    """The Gamma distribution with shape `concentration` and inverse scale `rate`. rsample is
    differentiable with respect to rate; with respect to concentration see _gamma."""
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        scalars = isinstance(concentration, Number) and isinstance(rate, Number)
        super().__init__(plugflow.Size() if scalars else self.concentration.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Gamma, _instance)
        batch_shape = plugflow.Size(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        new.rate = self.rate.expand(batch_shape)
        super(Gamma, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=plugflow.Size()):
        shape = self._extended_shape(sample_shape)
        value = rsample_standard_gamma(self.concentration.expand(shape)) / self.rate.expand(shape)
        # at least the smallest normal number, without changing the gradient (as PyTorch)
        return value + (value.detach().clamp(min=plugflow.finfo(value.dtype).tiny) - value.detach())

    def log_prob(self, value):
        value = plugflow.as_tensor(value, dtype=self.rate.dtype, device=self.rate.device)
        if self._validate_args:
            self._validate_sample(value)
        return (plugflow.xlogy(self.concentration, self.rate) + plugflow.xlogy(self.concentration - 1, value)
                - self.rate * value - plugflow.lgamma(self.concentration))

    def entropy(self):
        return (self.concentration - plugflow.log(self.rate) + plugflow.lgamma(self.concentration)
                + (1.0 - self.concentration) * plugflow.digamma(self.concentration))

    @property
    def _natural_params(self):
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return plugflow.lgamma(x + 1) + (x + 1) * plugflow.log(-y.reciprocal())
