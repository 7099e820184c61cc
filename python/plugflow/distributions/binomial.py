import plugflow
from . import _discrete, constraints
from .distribution import Distribution
from .utils import expand_probs_or_logits, lazy_property, logits_to_probs, probs_or_logits, probs_to_logits

__all__ = ["Binomial"]


def _clamp_by_zero(x):
    """clamp(x, min=0) with gradient 1/2 at 0, as PyTorch's."""
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


class Binomial(Distribution):
    """The number of successes in total_count independent trials of probability probs (or
    sigmoid(logits))."""
    arg_constraints = {"total_count": constraints.nonnegative_integer,
                       "probs": constraints.unit_interval,
                       "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        name, self._param, (total_count,), _ = probs_or_logits(probs, logits, total_count)
        setattr(self, name, self._param)
        self.total_count = total_count.type_as(self._param)
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Binomial, _instance)
        batch_shape = plugflow.Size(batch_shape)
        new.total_count = self.total_count.expand(batch_shape)
        expand_probs_or_logits(self, new, batch_shape)
        super(Binomial, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self):
        return self.total_count * self.probs

    @property
    def mode(self):
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.size()

    def sample(self, sample_shape=plugflow.Size()):
        shape = self._extended_shape(sample_shape)
        with plugflow.no_grad():
            return _discrete.binomial(self.total_count.expand(shape).contiguous(),
                                      self.probs.expand(shape).contiguous())

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_factorial_n = plugflow.lgamma(self.total_count + 1)
        log_factorial_k = plugflow.lgamma(value + 1)
        log_factorial_nmk = plugflow.lgamma(self.total_count - value + 1)
        # k log p + (n - k) log(1 - p) = k logit - n max(logit, 0) - n log1p(exp(-|logit|))
        normalize_term = (self.total_count * _clamp_by_zero(self.logits)
                          + self.total_count * plugflow.log1p(plugflow.exp(-plugflow.abs(self.logits)))
                          - log_factorial_n)
        return value * self.logits - log_factorial_k - log_factorial_nmk - normalize_term

    def entropy(self):
        total_count = int(self.total_count.max())
        if not self.total_count.min() == total_count:
            raise NotImplementedError("Inhomogeneous total count not supported by `entropy`.")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(plugflow.exp(log_prob) * log_prob).sum(0)

    def enumerate_support(self, expand=True):
        total_count = int(self.total_count.max())
        if not self.total_count.min() == total_count:
            raise NotImplementedError("Inhomogeneous total count not supported by `enumerate_support`.")
        values = plugflow.arange(1 + total_count, dtype=self._param.dtype, device=self._param.device)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + self._batch_shape)
        return values
