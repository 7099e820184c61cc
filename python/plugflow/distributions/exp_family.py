"""ExponentialFamily (torch.distributions.exp_family): the base of the distributions whose density
is exp(<t(x), theta> - F(theta) + k(x)); its entropy and the KL between two members of one family
follow from the log normalizer F by autograd (Bregman divergences)."""

import plugflow
from .distribution import Distribution

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    @property
    def _natural_params(self):
        """The natural parameters theta, a tuple of tensors."""
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        """F(theta)."""
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self):
        """E[k(x)], which the entropy needs."""
        raise NotImplementedError

    def entropy(self):
        """-E[k(x)] + F(theta) - <theta, grad F(theta)>."""
        result = -self._mean_carrier_measure
        nparams = [p.detach().requires_grad_() for p in self._natural_params]
        lg_normal = self._log_normalizer(*nparams)
        gradients = plugflow.autograd.grad(lg_normal.sum(), nparams, create_graph=True)
        result += lg_normal
        for param, grad in zip(nparams, gradients):
            result -= (param * grad).reshape(self._batch_shape + (-1,)).sum(-1)
        return result
