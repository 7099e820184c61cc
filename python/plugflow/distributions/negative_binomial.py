import plugflow
import plugflow.nn.functional as F
from . import constraints
from ._discrete import poisson
from .distribution import Distribution
from .gamma import Gamma
from .utils import expand_probs_or_logits, lazy_property, logits_to_probs, probs_or_logits, probs_to_logits

__all__ = ["NegativeBinomial"]


class NegativeBinomial(Distribution):
    """The number of successes of Bernoulli(probs) trials before total_count failures; sampled as
    Poisson(Gamma(total_count, rate=exp(-logits)))."""
    arg_constraints = {"total_count": constraints.greater_than_eq(0),
                       "probs": constraints.half_open_interval(0., 1.),
                       "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        name, self._param, (total_count,), _ = probs_or_logits(probs, logits, total_count)
        setattr(self, name, self._param)
        self.total_count = total_count.type_as(self._param)
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(NegativeBinomial, _instance)
        batch_shape = plugflow.Size(batch_shape)
        new.total_count = self.total_count.expand(batch_shape)
        expand_probs_or_logits(self, new, batch_shape)
        super(NegativeBinomial, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.total_count * plugflow.exp(self.logits)

    @property
    def mode(self):
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.)

    @property
    def variance(self):
        return self.mean / plugflow.sigmoid(-self.logits)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.size()

    @lazy_property
    def _gamma(self):
        return Gamma(concentration=self.total_count, rate=plugflow.exp(-self.logits), validate_args=False)

    def sample(self, sample_shape=plugflow.Size()):
        with plugflow.no_grad():
            return poisson(self._gamma.sample(sample_shape=sample_shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_unnormalized_prob = self.total_count * F.logsigmoid(-self.logits) + value * F.logsigmoid(self.logits)
        log_normalization = (-plugflow.lgamma(self.total_count + value) + plugflow.lgamma(1. + value)
                             + plugflow.lgamma(self.total_count))
        # no trials and no successes: probability 1 (lgamma(0) is inf)
        log_normalization = log_normalization.masked_fill(self.total_count + value == 0., 0.)
        return log_unnormalized_prob - log_normalization
