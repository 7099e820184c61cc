"""Helpers shared by the distributions (torch.distributions.utils)."""

import functools
from numbers import Number

import plugflow

__all__ = ["broadcast_all", "logits_to_probs", "probs_to_logits", "clamp_probs", "lazy_property",
           "tril_matrix_to_vec", "vec_to_tril_matrix", "euler_constant"]

euler_constant = 0.57721566490153286060  # the Euler-Mascheroni constant


def broadcast_all(*values):
    """The values (tensors or numbers) broadcast to one shape; numbers become tensors of the first
    tensor's dtype and device (the default dtype when all are numbers)."""
    if not all(isinstance(v, (plugflow.Tensor, Number)) for v in values):
        raise ValueError("Input arguments must all be instances of numbers.Number, "
                         "torch.Tensor or objects implementing __torch_function__.")
    if not all(isinstance(v, plugflow.Tensor) for v in values):
        options = dict(dtype=plugflow.get_default_dtype())
        for value in values:
            if isinstance(value, plugflow.Tensor):
                options = dict(dtype=value.dtype, device=value.device)
                break
        values = [v if isinstance(v, plugflow.Tensor) else plugflow.tensor(v, **options) for v in values]
    return plugflow.broadcast_tensors(*values)


def probs_or_logits(probs, logits, *others):
    """The distributions parametrized by probs or by logits: exactly one must be given
    (ValueError otherwise). Returns its name, it broadcast with `others` (broadcast_all), the
    broadcast others, and whether it was a number (a scalar batch shape)."""
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")
    name, value = ("probs", probs) if probs is not None else ("logits", logits)
    *rest, param = broadcast_all(*others, value)
    return name, param, rest, isinstance(value, Number)


def expand_probs_or_logits(source, new, shape):
    """expand() of such a distribution: whichever of probs / logits `source` holds (given, or
    computed by its lazy property) expanded to `shape` on `new`, `_param` the given one."""
    for name in ("probs", "logits"):
        if name in source.__dict__:
            setattr(new, name, getattr(source, name).expand(shape))
            new._param = getattr(new, name)


def _standard_normal(shape, dtype, device):
    """N(0, 1) draws from plugflow's default generator."""
    return plugflow.empty(shape, dtype=dtype, device=device).normal_()


def _sum_rightmost(value, dim):
    """value summed over its `dim` rightmost dimensions."""
    if dim == 0:
        return value
    return value.reshape(value.shape[:-dim] + (-1,)).sum(-1)


def logits_to_probs(logits, is_binary=False):
    """Probabilities from log-odds (binary) or unnormalized log-probabilities (the last dim)."""
    if is_binary:
        return plugflow.sigmoid(logits)
    return plugflow.nn.functional.softmax(logits, dim=-1)


def clamp_probs(probs):
    """probs kept within [eps, 1 - eps] of its dtype, so that their logs are finite."""
    eps = plugflow.finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary=False):
    """Log-odds (binary) or log-probabilities from probabilities (clamped away from 0 and 1)."""
    ps_clamped = clamp_probs(probs)
    if is_binary:
        return plugflow.log(ps_clamped) - plugflow.log1p(-ps_clamped)
    return plugflow.log(ps_clamped)


class lazy_property:
    """A method computed on first access and then stored on the instance (probs from logits and
    the reverse): a non-data descriptor, so the stored value shadows it."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        functools.update_wrapper(self, wrapped)

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        with plugflow.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


def _tril_mask(n, diag, device):
    arange = plugflow.arange(n, device=device)
    return arange < arange.view(-1, 1) + (diag + 1)


def tril_matrix_to_vec(mat, diag=0):
    """The lower-triangular entries (below diagonal `diag`) of a (batch of) square matrices, row
    by row."""
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    return mat[..., _tril_mask(n, diag, mat.device)]


def vec_to_tril_matrix(vec, diag=0):
    """The inverse of tril_matrix_to_vec: a (batch of) lower-triangular D x D matrices."""
    # the positive root of D**2 + (1 + 2 diag) D - |diag| (diag + 1) - 2 len = 0
    n = (-(1 + 2 * diag) + ((1 + 2 * diag) ** 2 + 8 * vec.shape[-1] + 4 * abs(diag) * (diag + 1)) ** 0.5) / 2
    if round(n) - n > plugflow.finfo(vec.dtype).eps:
        raise ValueError(f"The size of last dimension is {vec.shape[-1]} which cannot be expressed as "
                         "the lower triangular part of a square D x D matrix.")
    n = round(n)
    mat = vec.new_zeros(vec.shape[:-1] + plugflow.Size((n, n)))
    mat[..., _tril_mask(n, diag, vec.device)] = vec
    return mat
