import math

import plugflow
from plugflow.nn.functional import binary_cross_entropy_with_logits
from . import constraints
from .exp_family import ExponentialFamily
from .utils import (broadcast_all, clamp_probs, expand_probs_or_logits, lazy_property, logits_to_probs,
                    probs_or_logits, probs_to_logits)

__all__ = ["ContinuousBernoulli"]


class ContinuousBernoulli(ExponentialFamily):
    """The continuous Bernoulli distribution on [0, 1] (Loaiza-Ganem and Cunningham, 2019): density
    proportional to probs**x (1 - probs)**(1 - x). Within lims around probs = 1/2, where the closed
    forms lose precision, Taylor expansions replace them (as PyTorch's)."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    _mean_carrier_measure = 0
    has_rsample = True

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args=None):
        name, param, _, is_scalar = probs_or_logits(probs, logits)
        setattr(self, name, param)
        if probs is not None:
            # checked before the clamp below hides values out of [0, 1], as PyTorch's (only when
            # validate_args is given explicitly)
            if validate_args is not None and not self.arg_constraints["probs"].check(self.probs).all():
                raise ValueError("The parameter probs has invalid values")
            self.probs = clamp_probs(self.probs)
        self._param = self.probs if probs is not None else self.logits
        batch_shape = plugflow.Size() if is_scalar else self._param.size()
        self._lims = lims
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ContinuousBernoulli, _instance)
        new._lims = self._lims
        batch_shape = plugflow.Size(batch_shape)
        expand_probs_or_logits(self, new, batch_shape)
        super(ContinuousBernoulli, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _outside_unstable_region(self):
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self):
        return plugflow.where(self._outside_unstable_region(), self.probs,
                              self._lims[0] * plugflow.ones_like(self.probs))

    def _cont_bern_log_norm(self):
        """The log normalizing constant, as a function of probs."""
        cut_probs = self._cut_probs()
        cut_probs_below_half = plugflow.where(cut_probs <= 0.5, cut_probs, plugflow.zeros_like(cut_probs))
        cut_probs_above_half = plugflow.where(cut_probs >= 0.5, cut_probs, plugflow.ones_like(cut_probs))
        log_norm = plugflow.log(plugflow.abs(plugflow.log1p(-cut_probs) - plugflow.log(cut_probs))) - plugflow.where(
            cut_probs <= 0.5, plugflow.log1p(-2.0 * cut_probs_below_half),
            plugflow.log(2.0 * cut_probs_above_half - 1.0))
        x = plugflow.pow(self.probs - 0.5, 2)
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return plugflow.where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self):
        cut_probs = self._cut_probs()
        mus = cut_probs / (2.0 * cut_probs - 1.0) + 1.0 / (plugflow.log1p(-cut_probs) - plugflow.log(cut_probs))
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * plugflow.pow(x, 2)) * x
        return plugflow.where(self._outside_unstable_region(), mus, taylor)

    @property
    def stddev(self):
        return plugflow.sqrt(self.variance)

    @property
    def variance(self):
        cut_probs = self._cut_probs()
        variances = (cut_probs * (cut_probs - 1.0) / plugflow.pow(1.0 - 2.0 * cut_probs, 2)
                     + 1.0 / plugflow.pow(plugflow.log1p(-cut_probs) - plugflow.log(cut_probs), 2))
        x = plugflow.pow(self.probs - 0.5, 2)
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128. / 945.0 * x) * x
        return plugflow.where(self._outside_unstable_region(), variances, taylor)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    @property
    def param_shape(self):
        return self._param.size()

    def sample(self, sample_shape=plugflow.Size()):
        shape = self._extended_shape(sample_shape)
        u = plugflow.rand(shape, dtype=self.probs.dtype, device=self.probs.device)
        with plugflow.no_grad():
            return self.icdf(u)

    def rsample(self, sample_shape=plugflow.Size()):
        shape = self._extended_shape(sample_shape)
        u = plugflow.rand(shape, dtype=self.probs.dtype, device=self.probs.device)
        return self.icdf(u)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -binary_cross_entropy_with_logits(logits, value, reduction="none") + self._cont_bern_log_norm()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        cut_probs = self._cut_probs()
        cdfs = ((plugflow.pow(cut_probs, value) * plugflow.pow(1.0 - cut_probs, 1.0 - value) + cut_probs - 1.0)
                / (2.0 * cut_probs - 1.0))
        unbounded_cdfs = plugflow.where(self._outside_unstable_region(), cdfs, value)
        return plugflow.where(value <= 0.0, plugflow.zeros_like(value),
                              plugflow.where(value >= 1.0, plugflow.ones_like(value), unbounded_cdfs))

    def icdf(self, value):
        cut_probs = self._cut_probs()
        return plugflow.where(
            self._outside_unstable_region(),
            (plugflow.log1p(-cut_probs + value * (2.0 * cut_probs - 1.0)) - plugflow.log1p(-cut_probs))
            / (plugflow.log(cut_probs) - plugflow.log1p(-cut_probs)),
            value)

    def entropy(self):
        log_probs0 = plugflow.log1p(-self.probs)
        log_probs1 = plugflow.log(self.probs)
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0

    @property
    def _natural_params(self):
        return (self.logits,)

    def _log_normalizer(self, x):
        """The log normalizing constant, as a function of the natural parameter."""
        out_unst_reg = (x <= self._lims[0] - 0.5) | (x > self._lims[1] - 0.5)
        cut_nat_params = plugflow.where(out_unst_reg, x, (self._lims[0] - 0.5) * plugflow.ones_like(x))
        log_norm = (plugflow.log(plugflow.abs(plugflow.exp(cut_nat_params) - 1.0))
                    - plugflow.log(plugflow.abs(cut_nat_params)))
        taylor = 0.5 * x + plugflow.pow(x, 2) / 24.0 - plugflow.pow(x, 4) / 2880.0
        return plugflow.where(out_unst_reg, log_norm, taylor)
