"""Names of the torch namespace that PyTorch scripts reach and that are thin forms of plugflow's
functions: the top-level aliases of nn.functional (with ATen's signatures: an integer reduction,
positional weight and bias), the deprecated linear-algebra wrappers (chain_matmul, cholesky,
frobenius_norm, nuclear_norm, matrix_rank), poisson / binomial, and the process-wide settings
(float32 matmul precision, inter-op threads, warn-always) with what plugflow has (has_*).
Importing this module installs Tensor.hardshrink."""

import warnings

from . import backends, linalg
from ._C import Tensor
from .nn import functional as _F
from .distributions import _discrete
from .nn._functional_loss import _type_name

__all__ = [
    "cosine_similarity", "pairwise_distance", "pixel_shuffle", "pixel_unshuffle", "binary_cross_entropy_with_logits",
    "kl_div", "bilinear", "instance_norm", "ctc_loss", "hinge_embedding_loss", "margin_ranking_loss",
    "poisson_nll_loss", "cosine_embedding_loss", "triplet_margin_loss", "channel_shuffle", "native_channel_shuffle",
    "hardshrink", "rrelu", "rrelu_", "prelu", "threshold", "threshold_",
    "chain_matmul", "frobenius_norm", "nuclear_norm", "matrix_rank", "cholesky", "poisson", "binomial",
    "set_float32_matmul_precision", "get_float32_matmul_precision", "get_num_interop_threads",
    "set_num_interop_threads", "is_warn_always_enabled", "set_warn_always", "compiled_with_cxx11_abi",
    "has_cuda", "has_cudnn", "has_lapack", "has_mkldnn", "has_openmp", "has_mkl", "has_spectral",
]


def _reduction_name(reduction):
    """ATen's reduction enum (0 none, 1 mean, 2 sum) as nn.functional's string; ATen treats any
    other integer as none, and refuses a string by type."""
    if isinstance(reduction, bool) or not isinstance(reduction, int):
        raise TypeError(f"argument 'reduction' must be int, not {type(reduction).__name__}")
    return {1: "mean", 2: "sum"}.get(reduction, "none")


# nn.functional's functions whose ATen form has the same arguments
cosine_similarity = _F.cosine_similarity
pairwise_distance = _F.pairwise_distance
pixel_shuffle = _F.pixel_shuffle
pixel_unshuffle = _F.pixel_unshuffle
bilinear = _F.bilinear
channel_shuffle = _F.channel_shuffle
native_channel_shuffle = _F.native_channel_shuffle
hardshrink = _F.hardshrink
prelu = _F.prelu
threshold_ = _F.threshold_
rrelu_ = _F.rrelu_


def threshold(input, threshold, value):
    return _F.threshold(input, threshold, value)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    if generator is not None:
        raise NotImplementedError("rrelu: plugflow's rrelu draws from the default generator only")
    return _F.rrelu(input, lower, upper, training)


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction=1):
    return _F.binary_cross_entropy_with_logits(input, target, weight, reduction=_reduction_name(reduction),
                                               pos_weight=pos_weight)


def kl_div(input, target, reduction=1, *, log_target=False):
    """F.kl_div reduced here: ATen's 'mean' does not give F's warning about 'batchmean'."""
    reduction = _reduction_name(reduction)
    loss = _F.kl_div(input, target, reduction="none", log_target=log_target)
    return loss if reduction == "none" else getattr(loss, reduction)()


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled):
    return _F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1, zero_infinity=False):
    return _F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, _reduction_name(reduction),
                       zero_infinity)


def hinge_embedding_loss(input, target, margin=1.0, reduction=1):
    return _F.hinge_embedding_loss(input, target, margin, reduction=_reduction_name(reduction))


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=1):
    return _F.margin_ranking_loss(input1, input2, target, margin, reduction=_reduction_name(reduction))


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    return _F.poisson_nll_loss(input, target, log_input, full, eps=eps, reduction=_reduction_name(reduction))


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=1):
    return _F.cosine_embedding_loss(input1, input2, target, margin, reduction=_reduction_name(reduction))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False, reduction=1):
    return _F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                  reduction=_reduction_name(reduction))


Tensor.hardshrink = hardshrink


# Deprecated linear algebra, over torch.linalg

_warned = set()


def _warn_once(key, message):
    """PyTorch's TORCH_WARN_ONCE: once per process, or every time under set_warn_always(True)."""
    if _warn_always or key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)

def chain_matmul(*matrices, out=None):
    """linalg.multi_dot of the arguments (deprecated in PyTorch); one matrix is returned copied."""
    _warn_once("chain_matmul", "torch.chain_matmul is deprecated and will be removed in a future PyTorch release. Use "
                  "torch.linalg.multi_dot instead, which accepts a list of two or more tensors rather than "
                  "multiple parameters.")
    if not matrices:
        raise RuntimeError("chain_matmul(): Expected one or more matrices")
    if len(matrices) == 1:
        if matrices[0].dim() != 2:
            raise RuntimeError(f"Tensor dimension is {matrices[0].dim()}, expected 2 instead.")
        result = matrices[0].clone()
        return result if out is None else out.resize_(result.shape).copy_(result)
    return linalg.multi_dot(matrices, out=out)


def frobenius_norm(input, dim=(0, 1), keepdim=False, *, out=None):
    """The 2-norm over at most two dims (PyTorch 1.13's frobenius_norm, without its warning)."""
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if len(dims) > 2:
        raise RuntimeError(f"Expected at most 2 dimensions, but got {len(dims)} dimensions instead.")
    return linalg.vector_norm(input, 2, dims if dims else None, keepdim, out=out)


def nuclear_norm(input, dim=None, keepdim=False, *, out=None):
    """The sum of singular values over the last two dims of a matrix, or the two dims given."""
    if isinstance(dim, bool):  # nuclear_norm(input, keepdim): ATen's first overload
        dim, keepdim = None, dim
    if dim is None:
        if input.dim() != 2:
            raise RuntimeError(f"Expected a tensor with 2 dimensions, but got a tensor with {input.dim()} "
                               f"dimension{'' if input.dim() == 1 else 's'} instead.")
        dim = (0, 1)
    return linalg.matrix_norm(input, "nuc", tuple(dim), keepdim, out=out)


def matrix_rank(*args, **kwargs):
    """Removed in PyTorch 1.9: raises as PyTorch 1.13 does."""
    raise RuntimeError("This function was deprecated since version 1.9 and is now removed.",
                       "Please use the `torch.linalg.matrix_rank` function instead.")


def cholesky(input, upper=False, *, out=None):
    """linalg.cholesky (deprecated in PyTorch)."""
    _warn_once(
        "cholesky", "torch.cholesky is deprecated in favor of torch.linalg.cholesky and will be removed in a future "
        "PyTorch release.\nL = torch.cholesky(A)\nshould be replaced with\nL = torch.linalg.cholesky(A)\nand\n"
        "U = torch.cholesky(A, upper=True)\nshould be replaced with\nU = torch.linalg.cholesky(A).mH().\n"
        "This transform will produce equivalent results for all valid (symmetric positive definite) inputs.")
    return linalg.cholesky(input, upper=upper, out=out)


def _require_float_sampler(tensor, kernel):
    if not tensor.is_floating_point():
        raise RuntimeError(f"\"{kernel}\" not implemented for '{_type_name(tensor.dtype)}'")


def poisson(input, generator=None):
    """A Poisson draw for each rate of input (float, non-negative)."""
    _require_float_sampler(input, "poisson_cpu")
    if not bool((input >= 0).all()):  # NaN too, as PyTorch's check
        raise RuntimeError("invalid Poisson rate, expected rate to be non-negative")
    return _discrete.poisson(input.detach(), generator)


def binomial(count, prob, generator=None):
    """A Binomial(count, prob) draw for each element; NaN where the parameters are invalid."""
    if count.dtype != prob.dtype:
        raise RuntimeError(f"Found dtype {_type_name(prob.dtype)} but expected "
                           f"{_type_name(count.dtype)}")
    _require_float_sampler(count, "binomial_cpu")
    return _discrete.binomial(count.detach(), prob.detach(), generator)


# Process-wide settings

_float32_matmul_precision = "highest"


def set_float32_matmul_precision(precision):
    """Stores the hint; plugflow's float32 matmuls always compute at 'highest' precision, which
    every setting allows (in PyTorch only CUDA's TF32 reads it). An unknown string warns and
    changes nothing, as in PyTorch."""
    global _float32_matmul_precision
    if precision not in ("highest", "high", "medium"):
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      "setFloat32MatmulPrecision call has no effect.")
        return
    _float32_matmul_precision = precision


def get_float32_matmul_precision():
    return _float32_matmul_precision


_num_interop_threads = None  # None until set: plugflow has one thread pool, so this is stored only


def get_num_interop_threads():
    return 1 if _num_interop_threads is None else _num_interop_threads


def set_num_interop_threads(num):
    """Stores the count (plugflow runs inter-op work on its one pool); as in PyTorch it can be set
    once, to a positive integer."""
    global _num_interop_threads
    if num <= 0:
        raise RuntimeError("set_num_interop_threads expects a positive integer")
    if _num_interop_threads is not None:
        raise RuntimeError("Error: cannot set number of interop threads after parallel work has started or "
                           "set_num_interop_threads called")
    _num_interop_threads = int(num)


_warn_always = False


def set_warn_always(b):
    """With True, the warnings PyTorch gives once per process (torch.cholesky's, ...) come every time."""
    global _warn_always
    _warn_always = bool(b)


def is_warn_always_enabled():
    return _warn_always


def compiled_with_cxx11_abi():
    return True  # plugflow's C++ is built with the default (new) libstdc++ ABI


has_cuda = backends.cuda.is_built()  # the CUDA plugin loaded and found a device
has_cudnn = backends.cudnn.is_available()
has_lapack = True   # the CPU plugin links LAPACK (linalg.solve, qr, svd, ...)
has_mkldnn = backends.mkldnn.is_available()  # oneDNN convolutions, sgemm, pooling on the CPU
has_openmp = True   # the CPU plugin's thread pool
has_mkl = False
has_spectral = False  # no torch.fft
