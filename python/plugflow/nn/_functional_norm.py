"""torch.nn.functional's normalization, embedding and dropout (the losses live in _functional_loss).

batch_norm, layer_norm, group_norm, embedding and dropout run the core's fused kernels (the norm
family, through plugflow._C); this module adds torch.nn.functional's argument handling: the
Python-side checks and their messages.
"""

import warnings

from .. import _C

__all__ = [
    "batch_norm", "instance_norm", "layer_norm", "group_norm",
    "embedding",
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
]


def _verify_batch_size(size):
    size_prods = size[0]
    for s in size[2:]:
        size_prods *= s
    if size_prods == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {size}")


def _verify_spatial_size(size):
    size_prods = 1
    for s in size[2:]:
        size_prods *= s
    if size_prods == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {size}")


def _check_p(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


# ---- normalization ---------------------------------------------------------------------------------

def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-5):
    """Normalizes over every dim but 1 with the batch's statistics (training, which also updates
    running_mean/running_var in place with the unbiased variance) or the running ones (eval)."""
    if training:
        _verify_batch_size(input.size())
    return _C.batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """batch_norm of each (sample, channel) separately: the (N, C, *) input viewed as (1, N*C, *),
    as PyTorch computes it; running statistics (if given) average over the batch."""
    if use_input_stats:
        _verify_spatial_size(input.size())
    n, c = input.shape[0], input.shape[1]
    shape = (1, n * c) + tuple(input.shape[2:])
    rm = running_mean.repeat(n) if running_mean is not None else None
    rv = running_var.repeat(n) if running_var is not None else None
    w = weight.repeat(n) if weight is not None else None
    b = bias.repeat(n) if bias is not None else None
    out = _C.batch_norm(input.reshape(shape), w, b, rm, rv, use_input_stats, momentum, eps)
    if use_input_stats and running_mean is not None:
        from .. import autograd
        with autograd.no_grad():
            running_mean.copy_(rm.view(n, c).mean(0))
            running_var.copy_(rv.view(n, c).mean(0))
    return out.view(input.shape)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalizes over the trailing dims normalized_shape (a tuple of ints)."""
    return _C.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalizes each of num_groups channel groups of a (N, C, *) input separately."""
    _verify_batch_size([input.size(0) * input.size(1) // num_groups, num_groups] + list(input.size()[2:]))
    return _C.group_norm(input, num_groups, weight, bias, eps)


# ---- embedding ---------------------------------------------------------------------------------------

def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of weight for the int64/int32 indices in input. padding_idx's row gets no gradient;
    max_norm renormalizes (in place) the referenced rows whose norm exceeds it."""
    if padding_idx is not None:
        if padding_idx > 0:
            if padding_idx >= weight.size(0):
                raise AssertionError("Padding_idx must be within num_embeddings")
        elif padding_idx < 0:
            if padding_idx < -weight.size(0):
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx = weight.size(0) + padding_idx
    else:
        padding_idx = -1
    if max_norm is not None:
        _C.embedding_renorm_(weight, input.contiguous(), float(max_norm), float(norm_type))
    return _C.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)


# ---- dropout ------------------------------------------------------------------------------------------

def dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes elements with probability p and scales the others by 1 / (1 - p)."""
    _check_p(p)
    return _C.dropout_(input, p, training) if inplace else _C.dropout(input, p, training)


def _feature_dropout(input, p, training, inplace, batched):
    """Channel-wise dropout; an unbatched input gets a batch dim of 1 for the call."""
    if batched:
        return _C.feature_dropout_(input, p, training) if inplace else _C.feature_dropout(input, p, training)
    if inplace:
        _C.feature_dropout_(input.unsqueeze(0), p, training)  # writes input through the view
        return input
    return _C.feature_dropout(input.unsqueeze(0), p, training).squeeze(0)


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of a (N, C, L) or (C, L) input with probability p."""
    _check_p(p)
    inp_dim = input.dim()
    if inp_dim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {inp_dim}D input. "
                           "Note that dropout1d exists to provide channel-wise dropout on inputs with 1 "
                           "spatial dimension, a channel dimension, and an optional batch dimension "
                           "(i.e. 2D or 3D inputs).")
    return _feature_dropout(input, p, training, inplace, inp_dim == 3)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of a (N, C, H, W) input with probability p (a 3-d input is taken as
    (N, C, L), with PyTorch 1.13's warning)."""
    _check_p(p)
    inp_dim = input.dim()
    if inp_dim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {inp_dim}-D input to dropout2d, which is deprecated "
                      "and will result in an error in a future release. To retain the behavior "
                      "and silence this warning, please use dropout instead. Note that dropout2d "
                      "exists to provide channel-wise dropout on inputs with 2 spatial dimensions, "
                      "a channel dimension, and an optional batch dimension (i.e. 3D or 4D inputs).")
    if inp_dim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise "
                      "1D dropout behavior is desired - input is interpreted as shape (N, C, L), where C "
                      "is the channel dim. This behavior will change in a future release to interpret the "
                      "input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D "
                      "channel-wise dropout behavior, please switch to using dropout1d instead.")
    return _feature_dropout(input, p, training, inplace, True)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of a (N, C, D, H, W) or (C, D, H, W) input with probability p."""
    _check_p(p)
    inp_dim = input.dim()
    if inp_dim not in (4, 5):
        warnings.warn(f"dropout3d: Received a {inp_dim}-D input to dropout3d, which is deprecated "
                      "and will result in an error in a future release. To retain the behavior "
                      "and silence this warning, please use dropout instead. Note that dropout3d "
                      "exists to provide channel-wise dropout on inputs with 3 spatial dimensions, "
                      "a channel dimension, and an optional batch dimension (i.e. 4D or 5D inputs).")
    return _feature_dropout(input, p, training, inplace, inp_dim == 5)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout for SELU networks: keeps mean 0 and variance 1 (note training=False by default,
    as in PyTorch)."""
    _check_p(p)
    return _C.alpha_dropout_(input, p, training) if inplace else _C.alpha_dropout(input, p, training)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """alpha_dropout of whole channels."""
    _check_p(p)
    if inplace:
        return _C.feature_alpha_dropout_(input, p, training)
    return _C.feature_alpha_dropout(input, p, training)
