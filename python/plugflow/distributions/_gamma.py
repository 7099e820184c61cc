"""Gamma and Dirichlet draws (PyTorch's torch._standard_gamma and torch._sample_dirichlet) from
plugflow's generator: Marsaglia and Tsang's rejection method (2000), run on all elements at once,
each round redrawing the rejected ones; a concentration below 1 draws with concentration + 1 and
multiplies by U^(1/concentration).

Their reparameterized gradient with respect to the concentration (PyTorch's
_standard_gamma_grad / _dirichlet_grad, implicit differentiation of the CDF) is not built:
backpropagating to a concentration that requires grad raises NotImplementedError. Gradients with
respect to Gamma's rate, StudentT's loc and scale flow as usual."""

import plugflow
from plugflow.autograd.function import Function
from ._discrete import _until_done

_NO_CONCENTRATION_GRAD = ("the reparameterized gradient of Gamma, Chi2, Beta, Dirichlet and StudentT samples with "
                          "respect to the concentration (or df) is not in plugflow yet (PyTorch's "
                          "_standard_gamma_grad); detach it, or use the score-function (log_prob) gradient")


def _marsaglia_tsang(alpha):
    """Gamma(alpha, 1) draws for alpha >= 1 (1-d)."""
    d = alpha - 1 / 3
    c = 1 / (9 * d).sqrt()

    def step(d, c):
        z = plugflow.randn(d.shape, dtype=d.dtype, device=d.device)
        v = (1 + c * z) ** 3
        u = plugflow.rand(d.shape, dtype=d.dtype, device=d.device)
        v_safe = v.clamp(min=plugflow.finfo(v.dtype).tiny)
        done = (v > 0) & (u.log() < 0.5 * z * z + d - d * v_safe + d * v_safe.log())
        return done, d * v, (d, c)

    return _until_done(step, d, c)


def standard_gamma(concentration):
    """A Gamma(concentration, 1) draw for each element (no gradient), at least the dtype's
    smallest normal number; NaN where the concentration is not positive."""
    flat = concentration.detach().reshape(-1)
    valid = flat > 0
    alpha = plugflow.where(valid, flat, plugflow.ones_like(flat))
    boosted = alpha < 1
    draws = _marsaglia_tsang(plugflow.where(boosted, alpha + 1, alpha))
    u = plugflow.rand(flat.shape, dtype=flat.dtype, device=flat.device)
    draws = plugflow.where(boosted, draws * u.pow(1 / alpha), draws)
    draws = draws.clamp(min=plugflow.finfo(flat.dtype).tiny)
    return plugflow.where(valid, draws, plugflow.full_like(draws, plugflow.nan)).reshape(concentration.shape)


class _StandardGamma(Function):
    """standard_gamma as an autograd node, so that a concentration requiring grad is told that
    its gradient is missing rather than given none."""

    @staticmethod
    def forward(ctx, concentration):
        return standard_gamma(concentration)

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError(_NO_CONCENTRATION_GRAD)


class _Dirichlet(Function):
    """Dirichlet draws (normalized Gamma draws along the last dim) as an autograd node."""

    @staticmethod
    def forward(ctx, concentration):
        gammas = standard_gamma(concentration)
        return gammas / gammas.sum(-1, keepdim=True)

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError(_NO_CONCENTRATION_GRAD)


def rsample_standard_gamma(concentration):
    return _StandardGamma.apply(concentration) if concentration.requires_grad else standard_gamma(concentration)


def rsample_dirichlet(concentration):
    if concentration.requires_grad:
        return _Dirichlet.apply(concentration)
    gammas = standard_gamma(concentration)
    return gammas / gammas.sum(-1, keepdim=True)
