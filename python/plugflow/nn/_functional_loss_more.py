"""nn.functional's margin, embedding, likelihood and CTC losses (PyTorch 1.13 semantics).

Composed from existing ops as _functional_loss's are, so autograd gives the gradients and every
device runs them; the checks and messages are PyTorch's.
"""

import math

from .. import _C, _creation
from .._composite import broadcast_shapes
from ..autograd.function import Function as _Function
from ..autograd.grad_mode import is_grad_enabled, no_grad
from ._functional_loss import _reduce, _require_float, _resolve_reduction, _type_name

__all__ = ["margin_ranking_loss", "hinge_embedding_loss", "cosine_embedding_loss", "soft_margin_loss",
           "multilabel_soft_margin_loss", "multilabel_margin_loss", "multi_margin_loss", "triplet_margin_loss",
           "triplet_margin_with_distance_loss", "poisson_nll_loss", "gaussian_nll_loss", "ctc_loss"]


def _require_long(tensor):
    if tensor.dtype != _C.int64:
        raise RuntimeError(f"expected scalar type Long but found {_type_name(tensor.dtype)}")


def _not_differentiable(function, name, tensor):
    """PyTorch's fused kernels have no gradient for some arguments and refuse one that needs it."""
    if tensor is not None and tensor.requires_grad and is_grad_enabled():
        raise RuntimeError(f"The function '{function}' is not differentiable with respect to argument '{name}'. "
                           "This input cannot have requires_grad True.")


def _check_reduction_late(reduction):
    """The functions PyTorch writes in Python check the reduction with this message."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")


# ---- ranking and embedding losses -----------------------------------------------------------------

def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """max(0, -target * (input1 - input2) + margin): target 1 asks input1 to rank higher."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    if input1.dim() != input2.dim() or input1.dim() != target.dim():
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           f"input1: {input1.size()}, input2: {input2.size()}, target: {target.size()} ")
    return _reduce((-target * (input1 - input2) + margin).clamp_min(0), reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """input where target is 1, max(0, margin - input) where target is -1 (both where neither)."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    zero = _creation.zeros((), dtype=input.dtype, device=input.device)
    margin_clamp = (margin - input).clamp_min(0)
    if not input.dtype.is_floating_point:  # PyTorch keeps an integer input's dtype
        margin_clamp = margin_clamp.to(input.dtype)
    loss = _C.where(target != 1, margin_clamp, zero) + _C.where(target != -1, input, zero)
    if reduction == "mean" and not loss.dtype.is_floating_point:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {_type_name(loss.dtype)}")
    return _reduce(loss, reduction)


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1; the
    cosine along the last dim of (N, D) inputs with an (N,) target (or (D,) with a 0-d one)."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    target_dim = target.dim()
    if target_dim not in (0, 1):
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if target_dim == 1 and not (input1.dim() == 2 and input2.dim() == 2):
        raise RuntimeError(f"1D target tensor expects 2D input tensors, but found inputs with sizes "
                           f"{list(input1.shape)} and {list(input2.shape)}.")
    if target_dim == 0 and not (input1.dim() == 1 and input2.dim() == 1):
        raise RuntimeError(f"0D target tensor expects 1D input tensors, but found inputs with sizes "
                           f"{list(input1.shape)} and {list(input2.shape)}.")
    eps = 1e-12  # PyTorch's EPSILON, added to each squared magnitude
    prod_sum = (input1 * input2).sum(target_dim)
    mag_square1 = (input1 * input1).sum(target_dim) + eps
    mag_square2 = (input2 * input2).sum(target_dim) + eps
    cos = prod_sum / (mag_square1 * mag_square2).sqrt()
    zero = _creation.zeros((), dtype=cos.dtype, device=cos.device)
    loss = _C.where(target == 1, 1 - cos, zero) + _C.where(target == -1, (cos - margin).clamp_min(0), zero)
    return _reduce(loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """log(1 + exp(-target * input)), the logistic loss of +-1 targets (input's shape)."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    shape = broadcast_shapes(input.shape, target.shape)
    if tuple(shape) != tuple(input.shape):
        raise RuntimeError(f"output with shape {list(input.shape)} doesn't match the broadcast shape {list(shape)}")
    _not_differentiable("soft_margin_loss", "target", target)
    return _reduce((-input * target).exp().log1p(), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """Per-class logistic losses of 0/1 targets, (optionally weighted and) averaged over the
    classes (the last dim): one loss per sample."""
    from .functional import logsigmoid  # (functional imports this module)
    if size_average is not None or reduce is not None:
        reduction = _resolve_reduction(size_average, reduce, reduction)
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.dim() - 1
    loss = loss.sum(dim=class_dim) / input.size(class_dim)
    _check_reduction_late(reduction)
    return _reduce(loss, reduction)


def _margin_loss_frames(input, target, name):
    """(input as (N, C), target as (N, ...)) and whether the input had no batch dim; the input
    must be a non-empty vector or matrix (or 0-d), as PyTorch's margin losses check."""
    ndim = input.dim()
    if not ((ndim == 2 and input.size(1) != 0) or (ndim == 1 and input.size(0) != 0) or ndim == 0):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(input.shape)}")
    _require_float(input.dtype, name)
    return (input if ndim == 2 else input.reshape(1, -1)), ndim < 2


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """sum over target classes j and non-target classes i of max(0, 1 - (x[j] - x[i])) / C, per
    sample; each target row lists class indices, ended by the first -1."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    frames, unbatched = _margin_loss_frames(input, target, "multilabel_margin_loss_forward_out_frame")
    n_frames, n_classes = frames.shape
    if unbatched:
        consistent = target.dim() <= 1 and target.numel() == n_classes
    else:
        consistent = target.dim() == 2 and tuple(target.shape) == tuple(input.shape)
    if not consistent:
        raise RuntimeError(f"inconsistent size {list(target.shape)} for argument #2 'target'")
    _require_long(target)
    target = target.reshape(n_frames, n_classes)
    if ((target < -1).logical_or(target >= n_classes)).any():
        raise RuntimeError("argument #2 'target' is out of range")
    # Entries before each row's first -1 are its targets (duplicates count once per entry).
    listed = (target >= 0).to(_C.int64).cumprod(1).to(frames.dtype)
    safe_target = target.clamp(min=0)
    is_target = (_C.one_hot(safe_target, n_classes).to(frames.dtype) * listed.unsqueeze(2)).sum(1) > 0
    target_scores = frames.gather(1, safe_target)
    # hinge[n, j, i] = max(0, 1 - x[n, target j] + x[n, i]), over listed j and non-target i
    hinge = (1 - target_scores.unsqueeze(2) + frames.unsqueeze(1)).relu()
    hinge = hinge * listed.unsqueeze(2) * is_target.logical_not().to(frames.dtype).unsqueeze(1)
    loss = hinge.sum((1, 2)) / n_classes
    if unbatched:
        loss = loss.reshape(())
    return _reduce(loss, reduction)


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean"):
    """sum over classes i != y of max(0, margin - x[y] + x[i])^p (times weight[y]) / C per
    sample, y the target class; p is 1 or 2."""
    reduction = _resolve_reduction(size_average, reduce, reduction)
    if p != 1 and p != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.dim() != 1:
        raise ValueError("weight must be one-dimensional")
    frames, unbatched = _margin_loss_frames(input, target, "multi_margin_loss_cpu_kernel")
    n_frames, n_classes = frames.shape
    if target.dim() > 1 or target.numel() != n_frames:
        raise RuntimeError(f"inconsistent target size, expected {n_frames} but got {list(target.shape)}")
    _require_long(target)
    if weight is not None and weight.dtype != input.dtype:
        raise RuntimeError(f"expected scalar type {_type_name(input.dtype)} but found {_type_name(weight.dtype)}")
    _not_differentiable("multi_margin_loss", "weight", weight)
    target_shape = target.shape
    target = target.reshape(n_frames, 1)
    if ((target < 0).logical_or(target >= n_classes)).any():
        raise RuntimeError("target out of range")
    hinge = (margin - frames.gather(1, target) + frames).relu()
    if p == 2:
        hinge = hinge * hinge
    if weight is not None:
        hinge = hinge * weight[target]
    # The target class's own term (max(0, margin)^p) is left out.
    others = _C.one_hot(target.squeeze(1), n_classes).logical_not().to(frames.dtype)
    loss = ((hinge * others).sum(1) / n_classes).reshape(target_shape)
    return _reduce(loss, reduction)


# ---- triplet losses -------------------------------------------------------------------------------

def _check_triplet_dims(anchor, positive, negative):
    if not (anchor.dim() == positive.dim() == negative.dim()):
        raise RuntimeError(f"All inputs should have same dimension but got {anchor.dim()}D, {positive.dim()}D and "
                           f"{negative.dim()}D inputs.")


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)) with d the p-norm pairwise
    distance; swap uses min(d(a, n), d(p, n)) as the negative distance."""
    from ._functional_layers import pairwise_distance
    reduction = _resolve_reduction(size_average, reduce, reduction)
    _check_triplet_dims(anchor, positive, negative)
    dist_pos = pairwise_distance(anchor, positive, p, eps)
    dist_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        dist_neg = _C.minimum(dist_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + dist_pos - dist_neg).clamp_min(0), reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False,
                                      reduction="mean"):
    """triplet_margin_loss with any distance function (pairwise_distance by default)."""
    from ._functional_layers import pairwise_distance
    distance_function = distance_function if distance_function is not None else pairwise_distance
    positive_dist = distance_function(anchor, positive)
    negative_dist = distance_function(anchor, negative)
    if swap:
        negative_dist = _C.minimum(negative_dist, distance_function(positive, negative))
    loss = (positive_dist - negative_dist + margin).clamp(min=0.0)
    reduction = _resolve_reduction(None, None, reduction)
    return _reduce(loss, reduction)


# ---- likelihood losses ----------------------------------------------------------------------------

def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    """Poisson negative log likelihood: exp(input) - target * input for log-rate inputs, else
    input - target * log(input + eps); full adds Stirling's approximation of log(target!) where
    target > 1."""
    if size_average is not None or reduce is not None:
        reduction = _resolve_reduction(size_average, reduce, reduction)
    _check_reduction_late(reduction)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        stirling_term = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + stirling_term.masked_fill(target <= 1, 0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """Gaussian negative log likelihood 0.5 * (log(var) + (input - target)^2 / var) (+ 0.5 *
    log(2 pi) when full); var is input's shape or one (last) dim short of it, clamped at eps
    without stopping its gradient."""
    if var.size() != input.size():
        if input.size()[:-1] == var.size():
            var = var.unsqueeze(-1)
        elif not (input.size()[:-1] == var.size()[:-1] and var.size(-1) == 1):
            raise ValueError("var is of incorrect size")
    _check_reduction_late(reduction)
    if (var < 0).any():
        raise ValueError("var has negative entry/entries")
    var = var.clone()
    with no_grad():
        var.clamp_(min=eps)
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


# ---- CTC ------------------------------------------------------------------------------------------

def _lengths_list(lengths, name):
    if isinstance(lengths, _C.Tensor):
        if lengths.dtype.is_floating_point or lengths.dtype == _C.bool:
            raise RuntimeError(f"{name} must be integral")
        return [int(v) for v in lengths.reshape(-1).tolist()]
    return [int(v) for v in lengths]


def _log_add_exp(*terms):
    """log(sum(exp(terms))) elementwise, -inf where every term is -inf, with no NaN gradient
    there (the max is a constant: the softmax weights come from the exps alone)."""
    top = terms[0]
    for term in terms[1:]:
        top = _C.maximum(top, term)
    top = top.detach()
    finite = top > -math.inf
    shift = top.masked_fill(finite.logical_not(), 0.0)
    total = sum((term - shift).exp() for term in terms)
    return _C.where(finite, shift + total.masked_fill(finite.logical_not(), 1.0).log(), -math.inf)


class _CtcGradientShift(_Function):
    """A zero per sample whose gradient puts exp(log_probs) on each step t < input_length:
    PyTorch's CTC backward returns exp(log_probs) - posteriors, the gradient with respect to the
    logits of a log_softmax (its fused kernel assumes one), not d(loss)/d(log_probs) alone."""

    @staticmethod
    def forward(ctx, log_probs, valid_steps):
        ctx.save_for_backward(log_probs, valid_steps)
        return _creation.zeros((log_probs.shape[1],), dtype=log_probs.dtype, device=log_probs.device)

    @staticmethod
    def backward(ctx, grad):
        log_probs, valid_steps = ctx.saved_tensors
        return log_probs.exp() * valid_steps.unsqueeze(2) * grad.view(1, -1, 1), None


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """Connectionist temporal classification loss: -log of the total probability of the
    alignments of each target to its input, by the forward (alpha) recursion over time in log
    space. log_probs (T, N, C) (or (T, C)); targets (N, S) padded or 1-d concatenated; the
    lengths per sample. 'mean' divides each loss by its target length, then averages."""
    reduction = _resolve_reduction(None, None, reduction)
    batched = log_probs.dim() == 3
    if not batched:
        log_probs = log_probs.unsqueeze(1)
    if log_probs.dim() != 3:
        raise RuntimeError(f"Expected 3-dimensional tensor, but got {log_probs.dim()}-dimensional tensor for argument "
                           "#1 'log_probs' (while checking arguments for ctc_loss_cpu)")
    _require_float(log_probs.dtype, "ctc_loss_cpu")
    input_lengths = _lengths_list(input_lengths, "input_lengths")
    target_lengths = _lengths_list(target_lengths, "target_lengths")
    max_time, batch, n_classes = log_probs.shape
    if not 0 <= blank < n_classes:
        raise RuntimeError("blank must be in label range")
    if len(input_lengths) != batch:
        raise RuntimeError("input_lengths must be of size batch_size")
    if len(target_lengths) != batch:
        raise RuntimeError("target_lengths must be of size batch_size")
    if min(input_lengths + target_lengths, default=0) < 0:  # (PyTorch reads out of bounds)
        raise RuntimeError("ctc_loss: input_lengths and target_lengths must be non-negative")
    targets = targets.to(_C.int64)
    max_target = max(target_lengths, default=0)
    if targets.dim() == 1:
        if targets.size(0) != sum(target_lengths):
            raise RuntimeError(f"Expected tensor to have size {sum(target_lengths)} at dimension 0, but got size "
                               f"{targets.size(0)} for argument #2 'targets' (while checking arguments for "
                               "ctc_loss_cpu)")
        # (N, S) padded from the concatenation (the padding never counts: it lies past each length)
        starts = [sum(target_lengths[:b]) for b in range(batch)]
        last = max(targets.size(0) - 1, 0)
        index = [min(starts[b] + s, last) for b in range(batch) for s in range(max_target)]
        targets = targets.index_select(0, _creation.tensor(index, dtype=_C.int64, device=targets.device)).reshape(
            batch, max_target)
    else:
        if targets.dim() != 2 or targets.size(0) != batch:
            raise RuntimeError(f"Expected tensor to have size {batch} at dimension 0, but got size {targets.size(0)} "
                               "for argument #2 'targets' (while checking arguments for ctc_loss_cpu)")
        if targets.size(1) < max_target:
            raise RuntimeError(f"Expected tensor to have size at least {max_target} at dimension 1, but got size "
                               f"{targets.size(1)} for argument #2 'targets' (while checking arguments for "
                               "ctc_loss_cpu)")
        targets = targets[:, :max_target]
    for length in input_lengths:
        if length > max_time:
            raise RuntimeError(f"Expected input_lengths to have value at most {max_time}, but got value {length} "
                               "(while checking arguments for ctc_loss_cpu)")
    device = log_probs.device
    target_len = _creation.tensor(target_lengths, dtype=_C.int64, device=device)
    input_len = _creation.tensor(input_lengths, dtype=_C.int64, device=device)
    positions = _creation.arange(max_target, device=device)
    listed = positions.unsqueeze(0) < target_len.unsqueeze(1)
    targets = targets.masked_fill(listed.logical_not(), blank)
    # (PyTorch reads past its tables or returns a negative 'loss' for these: refused here)
    if ((targets < 0).logical_or(targets >= n_classes)).any():
        raise RuntimeError(f"ctc_loss: target values must lie in [0, {n_classes})")
    if (targets == blank).logical_and(listed).any():
        raise RuntimeError(f"ctc_loss: targets must not contain the blank label ({blank})")

    # Extended labels: blank, l1, blank, l2, ..., blank (2S + 1 states per sample).
    blanks = _creation.full((batch, max_target), blank, dtype=_C.int64, device=device)
    states = _C.cat([_C.stack([blanks, targets], 2).reshape(batch, 2 * max_target), blanks[:, :1]
                     if max_target else _creation.full((batch, 1), blank, dtype=_C.int64, device=device)], 1)
    n_states = states.size(1)
    state_log_probs = log_probs.gather(2, states.unsqueeze(0).expand(max_time, batch, n_states))
    # A state may be entered from two back (skipping a blank) unless it is a blank or repeats.
    can_skip = (states != blank).logical_and(
        _C.cat([_creation.full((batch, 2), blank, dtype=_C.int64, device=device), states[:, :-2]], 1) != states)
    can_skip[:, :2] = False
    no_path = _creation.full((batch, 2), -math.inf, dtype=log_probs.dtype, device=device)
    start = _creation.full((batch, n_states), -math.inf, dtype=log_probs.dtype, device=device)
    start[:, :2] = 0.0
    alpha = state_log_probs[0] + start if max_time else start
    for t in range(1, max_time):
        from_prev = _C.cat([no_path[:, :1], alpha[:, :-1]], 1)
        from_skip = _C.cat([no_path, alpha[:, :-2]], 1).masked_fill(can_skip.logical_not(), -math.inf)
        step = state_log_probs[t] + _log_add_exp(alpha, from_prev, from_skip)
        alpha = _C.where((input_len > t).unsqueeze(1), step, alpha)
    last = (2 * target_len).unsqueeze(1)
    end_blank = alpha.gather(1, last).squeeze(1)
    end_label = alpha.gather(1, (last - 1).clamp(min=0)).squeeze(1).masked_fill(target_len == 0, -math.inf)
    nll = -_log_add_exp(end_blank, end_label)
    # An empty input aligns only to an empty target.
    empty_input_nll = _creation.zeros((batch,), dtype=log_probs.dtype, device=device).masked_fill(target_len != 0,
                                                                                                 math.inf)
    nll = _C.where(input_len == 0, empty_input_nll, nll)
    valid_steps = (_creation.arange(max_time, device=device).unsqueeze(1) < input_len.unsqueeze(0)).to(
        log_probs.dtype)
    loss = nll + _CtcGradientShift.apply(log_probs, valid_steps)
    if zero_infinity:
        loss = _C.where(loss == math.inf, 0.0, loss)
    if reduction == "mean":
        return (loss / target_len.clamp(min=1).to(loss.dtype)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss if batched else loss.squeeze(0)
