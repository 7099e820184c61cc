"""nn.functional's losses (PyTorch 1.13 semantics), composed from existing ops.

log_softmax, gather, where, softplus and reductions carry the math, so every device runs these
and autograd gives the gradients (PyTorch's formulas, up to rounding). The signatures are
PyTorch's, so a fused kernel can later replace a body without changing callers. Legacy
`size_average`/`reduce` arguments map to `reduction` with PyTorch's deprecation warning.
"""

import math
import warnings

from .. import _C, _creation
from ..autograd.function import Function as _Function
from ..amp.autocast_mode import _autocast_op

__all__ = ["cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "kl_div"]

_REDUCTIONS = ("none", "mean", "sum")


# ---- shared helpers -----------------------------------------------------------------------------

def _legacy_get_string(size_average, reduce, emit_warning=True):
    """The reduction the deprecated (size_average, reduce) pair stands for."""
    if size_average is None:
        size_average = True
    if reduce is None:
        reduce = True
    if size_average and reduce:
        reduction = "mean"
    elif reduce:
        reduction = "sum"
    else:
        reduction = "none"
    if emit_warning:
        warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{reduction}' instead.")
    return reduction


def _resolve_reduction(size_average, reduce, reduction, allowed=_REDUCTIONS):
    if size_average is not None or reduce is not None:
        reduction = _legacy_get_string(size_average, reduce)
    if reduction not in allowed:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _type_name(dtype):
    """PyTorch's scalar type name in messages: Float, Double, Long, ..."""
    names = {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
             "float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double"}
    name = repr(dtype).rpartition(".")[2]
    return names.get(name, name)


def _require_float(dtype, kernel):
    if not dtype.is_floating_point:
        raise RuntimeError(f'"{kernel}" not implemented for \'{_type_name(dtype)}\'')


def _warn_if_size_differs(input, target):
    if target.shape != input.shape:
        warnings.warn(f"Using a target size ({target.size()}) that is different to the input size ({input.size()}). "
                      "This will likely lead to incorrect results due to broadcasting. Please ensure they have the "
                      "same size.", stacklevel=3)


def _check_class_weight(weight, n_classes, input_dtype, who=""):
    if weight is None:
        return
    if weight.dim() != 1 or weight.numel() != n_classes:
        raise RuntimeError(f"{who}weight tensor should be defined either for all {n_classes} classes or no classes but "
                           f"got weight tensor of shape: {list(weight.shape)}")
    if weight.dtype != input_dtype:
        raise RuntimeError(f"expected scalar type {_type_name(input_dtype)} but found {_type_name(weight.dtype)}")


def _class_weight_view(weight, ndim, class_dim):
    """weight (C,) shaped to broadcast along class_dim of an ndim-d input."""
    shape = [1] * ndim
    shape[class_dim] = weight.numel()
    return weight.view(shape)


# ---- classification ------------------------------------------------------------------------------

def _nll_loss_nd(input, target, weight, ignore_index, reduction):
    """nll_loss on input (C), (N, C) or (N, C, d1, ...) with class-index target (), (N) or (N, d1, ...)."""
    if input.dim() < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.dim()})")
    if input.dim() != 1 and input.shape[0] != (target.shape[0] if target.dim() > 0 else 0):
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                         f"({target.shape[0] if target.dim() > 0 else 0}).")
    if input.dim() <= 2:
        if target.dim() > 1:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        if not (input.dim() == 1 and target.dim() == 0) and input.shape[0] != target.shape[0]:
            raise RuntimeError(f"size mismatch (got input: {list(input.shape)}, target: {list(target.shape)})")
    else:
        expected = [input.shape[0]] + list(input.shape[2:])
        if list(target.shape) != expected:
            raise RuntimeError(f"Expected target size {expected}, got {list(target.shape)}")
    n_classes = input.shape[-1] if input.dim() == 1 else input.shape[1]
    _check_class_weight(weight, n_classes, input.dtype)
    if target.dtype != _C.int64:
        raise RuntimeError(f"expected scalar type Long but found {_type_name(target.dtype)}")
    _require_float(input.dtype, "nll_loss_out_frame")

    keep = target != ignore_index
    safe_target = target.masked_fill(keep.logical_not(), 0)
    # (Checked on the host in eager mode; a static graph cannot, and gather's kernel raises.)
    out_of_range = None if _C._graph_capturing() else keep.logical_and(
        (safe_target < 0).logical_or(safe_target >= n_classes))
    if out_of_range is not None and out_of_range.any():
        raise IndexError(f"Target {_C.masked_select(target, out_of_range)[0].item()} is out of bounds.")

    # The class dim last, so one gather along it picks each element's target class.
    scores = input if input.dim() == 1 else input.movedim(1, -1)
    picked = scores.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)
    zero = _creation.zeros((), dtype=input.dtype, device=input.device)
    if weight is None:
        loss = _C.where(keep, -picked, zero)
        if reduction == "mean":
            return loss.sum() / keep.sum().to(input.dtype)
    else:
        target_weight = _C.where(keep, weight[safe_target], zero)
        loss = _C.where(keep, -picked * target_weight, zero)
        if reduction == "mean":
            return loss.sum() / target_weight.sum()
    return loss.sum() if reduction == "sum" else loss


@_autocast_op("nll_loss")
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """Negative log likelihood of class indices: loss_i = -weight[t_i] * input[i, t_i]; input
    holds log-probabilities with classes along dim 1 (dim 0 when 1-d). Targets equal to
    ignore_index contribute nothing; 'mean' divides by the summed weights of the rest."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    return _nll_loss_nd(input, target, weight, ignore_index, reduction)


@_autocast_op("cross_entropy")
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """log_softmax over the class dim followed by nll_loss (target of class indices) or by
    -sum(target * log_softmax) (target of class probabilities, same shape as input).
    label_smoothing mixes the target with the uniform distribution over classes."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    if label_smoothing > 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    class_dim = 0 if input.dim() == 1 else 1
    _require_float(input.dtype, "log_softmax_lastdim_kernel_impl")

    if input.shape == target.shape:  # class probabilities
        if not target.is_floating_point():
            raise RuntimeError("Expected floating point type for target with class probabilities, got "
                               f"{_type_name(target.dtype)}")
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        n_classes = input.shape[class_dim]
        _check_class_weight(weight, n_classes, input.dtype, "cross_entropy: ")
        log_probs = _C.log_softmax(input, class_dim)
        if label_smoothing > 0.0:
            target = target * (1 - label_smoothing) + label_smoothing / n_classes
        weighted = log_probs * target
        if weight is not None:
            weighted = weighted * _class_weight_view(weight, input.dim(), class_dim)
        loss = -weighted.sum(class_dim)
        if reduction == "mean":
            # Divided by the number of samples (not by the weights), as PyTorch.
            return loss.sum() / (input.numel() // n_classes if n_classes else 0)
        return loss.sum() if reduction == "sum" else loss

    if input.dim() == 0:
        raise ValueError(f"Expected 1 or more dimensions (got {input.dim()})")
    log_probs = _C.log_softmax(input, class_dim)
    nll = _nll_loss_nd(log_probs, target, weight, ignore_index, reduction)
    if label_smoothing <= 0.0:
        return nll

    # Smoothing term: -sum_c weight_c * log_probs_c for every non-ignored element.
    n_classes = input.shape[class_dim]
    if weight is not None:
        smooth_loss = -(log_probs * _class_weight_view(weight, input.dim(), class_dim)).sum(class_dim)
    else:
        smooth_loss = -log_probs.sum(class_dim)
    ignored = target == ignore_index
    smooth_loss = smooth_loss.masked_fill(ignored, 0.0)
    if reduction == "mean":
        kept = ignored.logical_not()
        if weight is not None:
            # Normalized by the targets' weights, consistently with nll_loss.
            smooth = smooth_loss.sum() / weight[_C.masked_select(target, kept)].sum()
        else:
            smooth = smooth_loss.sum() / kept.sum().to(smooth_loss.dtype)
    elif reduction == "sum":
        smooth = smooth_loss.sum()
    else:
        smooth = smooth_loss
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / n_classes)


# ---- regression ----------------------------------------------------------------------------------

@_autocast_op("mse_loss")
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """(input - target)^2, broadcast (with PyTorch's warning when the shapes differ)."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    _warn_if_size_differs(input, target)
    _require_float(_C.promote_types(input.dtype, target.dtype), "mse_cpu")
    return _MseLoss.apply(input, target, reduction)


class _MseLoss(_Function):
    """mse_loss with PyTorch's gradient, (norm * (input - target)) * grad with norm = 2 / numel
    for 'mean' (2 otherwise): in that order a difference near the dtype's limit keeps a finite
    gradient where differentiating mean(square(d)), grad / n * (2 * d), overflows."""

    @staticmethod
    def forward(ctx, input, target, reduction):
        ctx.save_for_backward(input, target)
        ctx.reduction = reduction
        return _reduce((input - target).square(), reduction)

    @staticmethod
    def backward(ctx, grad):
        input, target = ctx.saved_tensors
        d = input - target
        norm = 2.0 / d.numel() if ctx.reduction == "mean" and d.numel() else 2.0
        g = (d * norm) * grad
        return (g.sum_to_size(input.shape) if ctx.needs_input_grad[0] else None,
                (-g).sum_to_size(target.shape) if ctx.needs_input_grad[1] else None, None)


@_autocast_op("l1_loss")
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """|input - target|, broadcast."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    _warn_if_size_differs(input, target)
    return _reduce((input - target).abs(), reduction)


def _huber_branches(d, delta):
    """PyTorch's huber / smooth-L1 branches, picked on the signed difference d as its backward
    picks them: (outside, linear, inside). outside: d <= -delta or d >= delta, where the loss is
    linear (|d| - delta / 2); inside: d where the loss is quadratic (NaN included), 0 elsewhere.
    Each branch sees only its own elements, so an infinity in one never turns another branch's
    gradient into 0 * inf = NaN."""
    below, above = d <= -delta, d >= delta
    outside = below | above
    linear = _C.where(below, 0 - d, d) - 0.5 * delta  # (0 - d: +0 at d = 0, as |d|)
    return outside, linear, _C.where(outside, 0.0, d)


@_autocast_op("smooth_l1_loss")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target)."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    _warn_if_size_differs(input, target)
    d = input - target
    outside, linear, inside = _huber_branches(d, beta)
    if beta > 0:
        return _reduce(_C.where(outside, linear, inside.square() * 0.5 / beta), reduction)
    # beta = 0: only NaN is inside, where PyTorch's gradient d / beta is NaN, as d^2's is. At
    # d = 0 its gradient is -1 for input and target alike (target's backward runs with the two
    # swapped): a zero whose gradient is -1 in each.
    loss = _C.where(outside, linear, inside.square())
    tie = (input.detach() - input) + (target.detach() - target)
    return _reduce(_C.where(d == 0, tie, loss), reduction)


@_autocast_op("huber_loss")
def huber_loss(input, target, reduction="mean", delta=1.0):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (d = input - target)."""
    reduction = _resolve_reduction(None, None, reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    _warn_if_size_differs(input, target)
    outside, linear, inside = _huber_branches(input - target, delta)
    return _reduce(_C.where(outside, linear * delta, inside.square() * 0.5), reduction)


# ---- binary classification -----------------------------------------------------------------------

def _log_clamped(x):
    """log(x) clamped below at -100 as PyTorch's binary_cross_entropy does; where x is 0 the
    result is -100 with a zero gradient (not 0 * inf = NaN)."""
    positive = x > 0
    return x.masked_fill(positive.logical_not(), 1.0).log().clamp(min=-100).masked_fill(positive.logical_not(), -100.0)


@_autocast_op("binary_cross_entropy")
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-weight * (target * log(input) + (1 - target) * log(1 - input)); input holds
    probabilities in [0, 1], logs clamped at -100."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    if target.shape != input.shape:
        raise ValueError(f"Using a target size ({target.size()}) that is different to the input size ({input.size()}) "
                         "is deprecated. Please ensure they have the same size.")
    if target.dtype != input.dtype:
        raise RuntimeError(f"Found dtype {_type_name(target.dtype)} but expected {_type_name(input.dtype)}")
    _require_float(input.dtype, "binary_cross_entropy")
    if not ((input >= 0).logical_and(input <= 1)).all():  # NaN fails too
        raise RuntimeError("all elements of input should be between 0 and 1")
    loss = -(target * _log_clamped(input) + (1 - target) * _log_clamped(1 - input))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@_autocast_op("binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """binary_cross_entropy(sigmoid(input), target) computed stably from logits, in PyTorch's
    arrangement: (1 - t) x + (1 + (pos_weight - 1) t) log(1 + exp(-x)), times weight (so an
    input of -inf gives NaN there too)."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    if target.shape != input.shape:
        raise ValueError(f"Target size ({target.size()}) must be the same as input size ({input.size()})")
    if not target.is_floating_point():
        raise RuntimeError(f"result type {_type_name(input.dtype)} can't be cast to the desired output type "
                           f"{_type_name(target.dtype)}")
    # log(1 + exp(-x)) as PyTorch computes it, -x + log(exp(x) + 1) for x < 0 and log(1 + exp(-x))
    # otherwise, each branch fed only its own elements: at x = -inf the gradient is then
    # PyTorch's sigmoid(x) - target, not exp(inf - inf) = NaN.
    negative = input < 0
    x_neg, x_pos = _C.where(negative, input, 0.0), _C.where(negative, 0.0, input)
    log_one_plus_exp = _C.where(negative, (x_neg.exp() + 1).log() - x_neg, ((-x_pos).exp() + 1).log())
    if pos_weight is not None:
        log_one_plus_exp = log_one_plus_exp * ((pos_weight - 1) * target + 1)
    # PyTorch's value at x = -inf is NaN whatever the target (exp(inf - inf)): added as a
    # constant, so that the gradients stay its finite ones.
    loss = (1 - target) * input + log_one_plus_exp + _C.where(input == -math.inf, math.nan, 0.0)
    if weight is not None:
        loss = loss * weight
    # PyTorch accumulates in place into (1 - target): the loss has target's dtype (a float64 input
    # with a float32 target, as in torchvision's RPN, gives a float32 loss)
    if loss.dtype != target.dtype:
        loss = loss.to(target.dtype)
    return _reduce(loss, reduction)


# ---- distributions -------------------------------------------------------------------------------

@_autocast_op("kl_div")
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Pointwise KL divergence target * (log(target) - input) with input as log-probabilities
    (target as log-probabilities too when log_target). 'batchmean' divides the sum by the batch
    size, which is the mathematical KL divergence; 'mean' divides by every element (warned)."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_get_string(size_average, reduce)
    elif reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.")
    if reduction not in _REDUCTIONS + ("batchmean",):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if log_target:
        loss = target.exp() * (target - input)
    else:
        # xlogy(target, target): 0 where target is 0 (log evaluated at 1 there, so no NaN gradient).
        is_zero = target == 0
        target_log_target = _C.where(is_zero, _creation.zeros((), dtype=target.dtype, device=target.device),
                                     target * target.masked_fill(is_zero, 1).log())
        loss = target_log_target - target * input
    if reduction == "batchmean":
        summed = loss.sum()
        return summed / input.shape[0] if input.dim() != 0 else summed
    return _reduce(loss, reduction)
