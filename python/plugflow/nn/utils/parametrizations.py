"""Parametrizations built on nn.utils.parametrize (torch.nn.utils.parametrizations, PyTorch 1.13):
spectral_norm. orthogonal is not provided: it needs a matrix exponential, a QR decomposition or
Householder products, which plugflow does not compute."""

from ...autograd.grad_mode import no_grad
from .. import functional as F
from ..modules.module import Module
from . import parametrize
from .spectral_norm import _default_dim

__all__ = ["spectral_norm"]


def _pf():
    import plugflow
    return plugflow


class _SpectralNorm(Module):
    """weight / sigma(weight) (a 1-d weight is normalized), sigma by power iteration with the
    vectors in the buffers _u and _v (15 iterations at construction, n_power_iterations per
    training forward)."""

    def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got n_power_iterations={}".format(
                n_power_iterations))
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            weight_mat = self._reshape_weight_to_matrix(weight)
            h, w = weight_mat.size()
            u = weight_mat.new_empty(h).normal_(0, 1)
            v = weight_mat.new_empty(w).normal_(0, 1)
            self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
            self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
            self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.dim()) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, weight_mat, n_power_iterations):
        pf = _pf()
        with no_grad():
            for _ in range(n_power_iterations):
                self._u.copy_(F.normalize(pf.mv(weight_mat, self._v), dim=0, eps=self.eps))
                self._v.copy_(F.normalize(pf.mv(weight_mat.t(), self._u), dim=0, eps=self.eps))

    def forward(self, weight):
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        # Copies, so that backward sees this forward's vectors even if the buffers change.
        u, v = self._u.clone(), self._v.clone()
        sigma = _pf().dot(u, _pf().mv(weight_mat, v))
        return weight / sigma

    def right_inverse(self, value):
        return value


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Registers the spectral-norm parametrization on module.<name>; returns the module."""
    weight = getattr(module, name, None)
    if not isinstance(weight, _pf().Tensor):
        raise ValueError("Module '{}' has no parameter or buffer with name '{}'".format(module, name))
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, _default_dim(module) if dim is None else dim, eps))
    return module
