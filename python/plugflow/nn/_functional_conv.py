"""Convolution, pooling and upsampling for plugflow.nn.functional (torch.nn.functional's
signatures and argument rules, PyTorch 1.13).

The 2-d and 3-d ops run the core's conv family through _C; the 1-d ones are the 2-d ones on a
height-1 view (an unsqueezed dim), and interpolate's 'area' mode is adaptive average pooling, as
in PyTorch. grid_sample and affine_grid run the core's grid sampling (_C.grid_sampler,
_C.affine_grid_generator) after PyTorch's Python-level checks and warnings.
"""

import math
import operator
import warnings

from .. import _C, _creation
from ..amp.autocast_mode import _autocast_op

__all__ = [
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices", "max_pool2d_with_indices",
    "max_pool3d_with_indices",
    "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices",
    "interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "grid_sample", "affine_grid",
    "unfold", "fold",
]


# ---- argument helpers ---------------------------------------------------------------------------

def _ints(value, n, name):
    """An int or a sequence of n (or 1) ints as a list of n ints; other lengths pass through
    unchanged so that the core reports them with PyTorch's message."""
    if isinstance(value, (list, tuple)) or (hasattr(value, "__len__") and not isinstance(value, str)):
        items = [operator.index(v) for v in value]
        return items * n if len(items) == 1 else items
    try:
        return [operator.index(value)] * n
    except TypeError:
        raise TypeError(f"{name} must be an int or a tuple of {n} ints, not {type(value).__name__}") from None


def _pool_arg(value, n, op, name, allow_empty=False):
    """A pooling argument as n ints: an int, or a tuple of one or n ints (or empty for stride).
    PyTorch words the error for avg_pool3d differently from the others."""
    items = _ints(value, n, name)
    if len(items) != n and not (allow_empty and len(items) == 0):
        count = {2: "two", 3: "three"}[n]
        if op == "avg_pool3d":
            what = {"kernel_size": "must be a single int, or a tuple of three ints",
                    "stride": "must be omitted, a single int, or a tuple of three ints",
                    "padding": "must be a single int, or a tuple of three ints"}[name]
        else:
            what = {"kernel_size": f"must either be a single int, or a tuple of {count} ints",
                    "stride": f"must either be omitted, a single int, or a tuple of {count} ints",
                    "padding": f"must be either be a single int, or a tuple of {count} ints",
                    "dilation": f"must be either a single int, or a tuple of {count} ints"}[name]
        raise RuntimeError(f"{op}: {name} {what}")
    return items


def _single(value, op, name, allow_empty=False):
    """A 1-d pooling argument as one int (or None for an omitted stride)."""
    items = _ints(value, 1, name)
    if allow_empty and len(items) == 0:
        return None
    if len(items) != 1:
        raise RuntimeError(f"{op}: {name} must be a single int, or a tuple of one int")
    return items[0]


def _check_dim(input, dims, op):
    if input.dim() not in dims:
        names = " or ".join(f"{d}D" for d in dims)
        raise RuntimeError(f"{op}() Expected {names} input, but got input of size: {list(input.shape)}")


# ---- convolution ----------------------------------------------------------------------------------

def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d cross-correlation of (N, C, H, W) or (C, H, W) input with (O, C/groups, kH, kW)
    weight; padding may be an int, a pair, 'valid' or 'same'."""
    if not isinstance(padding, str):
        padding = _ints(padding, 2, "padding")
    return _C._conv2d(input, weight, bias, _ints(stride, 2, "stride"), padding, _ints(dilation, 2, "dilation"),
                      operator.index(groups))


@_autocast_op("conv1d")
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d cross-correlation: conv2d on a height-1 view of (N, C, L) or (C, L) input."""
    if input.dim() not in (2, 3):
        raise RuntimeError("Expected 2D (unbatched) or 3D (batched) input to conv1d, but got input of size: "
                           f"{list(input.shape)}")
    if weight.dim() != 3:
        raise RuntimeError(f"Expected 3-dimensional weight for conv1d, but got weight of size {list(weight.shape)}")
    if not isinstance(padding, str):
        padding = [0] + _ints(padding, 1, "padding")
    out = _C._conv2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias, [1] + _ints(stride, 1, "stride"), padding,
                     [1] + _ints(dilation, 1, "dilation"), operator.index(groups))
    return out.squeeze(-2)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-d cross-correlation of (N, C, D, H, W) or (C, D, H, W) input with (O, C/groups, kD, kH, kW)
    weight; padding may be an int, a triple, 'valid' or 'same'."""
    if not isinstance(padding, str):
        padding = _ints(padding, 3, "padding")
    return _C._conv3d(input, weight, bias, _ints(stride, 3, "stride"), padding, _ints(dilation, 3, "dilation"),
                      operator.index(groups))


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transposed 2-d convolution (the gradient of conv2d with respect to its input);
    weight is (C_in, C_out/groups, kH, kW)."""
    return _C._conv_transpose2d(input, weight, bias, _ints(stride, 2, "stride"), _ints(padding, 2, "padding"),
                                _ints(output_padding, 2, "output_padding"), operator.index(groups),
                                _ints(dilation, 2, "dilation"))


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transposed 3-d convolution (the gradient of conv3d with respect to its input);
    weight is (C_in, C_out/groups, kD, kH, kW)."""
    return _C._conv_transpose3d(input, weight, bias, _ints(stride, 3, "stride"), _ints(padding, 3, "padding"),
                                _ints(output_padding, 3, "output_padding"), operator.index(groups),
                                _ints(dilation, 3, "dilation"))


@_autocast_op("conv_transpose1d")
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transposed 1-d convolution: conv_transpose2d on a height-1 view."""
    if input.dim() not in (2, 3):
        raise RuntimeError("Expected 2D (unbatched) or 3D (batched) input to conv_transpose1d, but got input of "
                           f"size: {list(input.shape)}")
    if weight.dim() != 3:
        raise RuntimeError("Expected 3-dimensional weight for conv_transpose1d, but got weight of size "
                           f"{list(weight.shape)}")
    out = _C._conv_transpose2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias, [1] + _ints(stride, 1, "stride"),
                               [0] + _ints(padding, 1, "padding"), [0] + _ints(output_padding, 1, "output_padding"),
                               operator.index(groups), [1] + _ints(dilation, 1, "dilation"))
    return out.squeeze(-2)


# ---- pooling ----------------------------------------------------------------------------------------

def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """(values, indices) of 2-d max pooling; indices are positions h * W + w in each input plane."""
    op = "max_pool2d"
    return _C._max_pool2d_with_indices(input, _pool_arg(kernel_size, 2, op, "kernel_size"),
                                       [] if stride is None else _pool_arg(stride, 2, op, "stride", True),
                                       _pool_arg(padding, 2, op, "padding"), _pool_arg(dilation, 2, op, "dilation"),
                                       bool(ceil_mode))


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """2-d max pooling over (N, C, H, W) or (C, H, W); with return_indices, (values, indices)."""
    out = max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)
    return out if return_indices else out[0]


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """(values, indices) of 3-d max pooling; indices are positions (d * H + h) * W + w in each
    input volume."""
    op = "max_pool3d"
    return _C._max_pool3d_with_indices(input, _pool_arg(kernel_size, 3, op, "kernel_size"),
                                       [] if stride is None else _pool_arg(stride, 3, op, "stride", True),
                                       _pool_arg(padding, 3, op, "padding"), _pool_arg(dilation, 3, op, "dilation"),
                                       bool(ceil_mode))


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """3-d max pooling over (N, C, D, H, W) or (C, D, H, W); with return_indices, (values, indices)."""
    out = max_pool3d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)
    return out if return_indices else out[0]


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """(values, indices) of 1-d max pooling over (N, C, L) or (C, L)."""
    op = "max_pool1d"
    _check_dim(input, (2, 3), op)
    stride = _single(stride, op, "stride", True) if stride is not None else None
    kernel = _single(kernel_size, op, "kernel_size")
    values, indices = _C._max_pool2d_with_indices(
        input.unsqueeze(-2), [1, kernel], [1, kernel if stride is None else stride],
        [0, _single(padding, op, "padding")], [1, _single(dilation, op, "dilation")], bool(ceil_mode))
    return values.squeeze(-2), indices.squeeze(-2)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """1-d max pooling; with return_indices, (values, indices)."""
    out = max_pool1d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)
    return out if return_indices else out[0]


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """2-d average pooling over (N, C, H, W) or (C, H, W)."""
    op = "avg_pool2d"
    if divisor_override is not None:
        divisor_override = operator.index(divisor_override)
    return _C._avg_pool2d(input, _pool_arg(kernel_size, 2, op, "kernel_size"),
                          [] if stride is None else _pool_arg(stride, 2, op, "stride", True),
                          _pool_arg(padding, 2, op, "padding"), bool(ceil_mode), bool(count_include_pad),
                          divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """3-d average pooling over (N, C, D, H, W) or (C, D, H, W)."""
    op = "avg_pool3d"
    if divisor_override is not None:
        divisor_override = operator.index(divisor_override)
    return _C._avg_pool3d(input, _pool_arg(kernel_size, 3, op, "kernel_size"),
                          [] if stride is None else _pool_arg(stride, 3, op, "stride", True),
                          _pool_arg(padding, 3, op, "padding"), bool(ceil_mode), bool(count_include_pad),
                          divisor_override)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """1-d average pooling over (N, C, L) or (C, L)."""
    op = "avg_pool1d"
    _check_dim(input, (2, 3), op)
    kernel = _single(kernel_size, op, "kernel_size")
    stride = _single(stride, op, "stride", True) if stride is not None else None
    out = _C._avg_pool2d(input.unsqueeze(-2), [1, kernel], [1, kernel if stride is None else stride],
                         [0, _single(padding, op, "padding")], bool(ceil_mode), bool(count_include_pad), None)
    return out.squeeze(-2)


def _adaptive_size(output_size, n, op):
    """An int, or a tuple with None entries (keep the input's size) -> n ints, -1 for None."""
    if output_size is None:
        return [-1] * n
    if isinstance(output_size, (list, tuple)) or hasattr(output_size, "__len__"):
        items = [None if v is None else operator.index(v) for v in output_size]
        if len(items) == 1:
            items = items * n
        if len(items) != n:
            raise RuntimeError(f"{op}: output_size must be {n} values, got {len(items)}")
    else:
        items = [operator.index(output_size)] * n
    if any(v is not None and v < 0 for v in items):
        shown = ", ".join(str(v) for v in items)
        raise RuntimeError(f"{op}: elements of output_size must be greater than or equal to 0 but received {{{shown}}}")
    return [-1 if v is None else v for v in items]


def adaptive_avg_pool2d(input, output_size):
    """Averages over PyTorch's adaptive windows to output_size (None entries keep the input's size)."""
    return _C._adaptive_avg_pool2d(input, _adaptive_size(output_size, 2, "adaptive_avg_pool2d"))


def adaptive_avg_pool3d(input, output_size):
    """Averages over PyTorch's adaptive windows to output_size (D, H, W); None entries keep the
    input's size."""
    return _C._adaptive_avg_pool3d(input, _adaptive_size(output_size, 3, "adaptive_avg_pool3d"))


def adaptive_avg_pool1d(input, output_size):
    """1-d adaptive average pooling over (N, C, L) or (C, L)."""
    _check_dim(input, (2, 3), "adaptive_avg_pool1d")
    size = [1] + _adaptive_size(output_size, 1, "adaptive_avg_pool1d")
    return _C._adaptive_avg_pool2d(input.unsqueeze(-2), size).squeeze(-2)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):
    """(values, indices) of 2-d adaptive max pooling."""
    return _C._adaptive_max_pool2d(input, _adaptive_size(output_size, 2, "adaptive_max_pool2d"))


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """2-d adaptive max pooling; with return_indices, (values, indices)."""
    out = adaptive_max_pool2d_with_indices(input, output_size)
    return out if return_indices else out[0]


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=False):
    """(values, indices) of 3-d adaptive max pooling."""
    return _C._adaptive_max_pool3d(input, _adaptive_size(output_size, 3, "adaptive_max_pool3d"))


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """3-d adaptive max pooling; with return_indices, (values, indices)."""
    out = adaptive_max_pool3d_with_indices(input, output_size)
    return out if return_indices else out[0]


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):
    """(values, indices) of 1-d adaptive max pooling over (N, C, L) or (C, L)."""
    _check_dim(input, (2, 3), "adaptive_max_pool1d")
    size = [1] + _adaptive_size(output_size, 1, "adaptive_max_pool1d")
    values, indices = _C._adaptive_max_pool2d(input.unsqueeze(-2), size)
    return values.squeeze(-2), indices.squeeze(-2)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """1-d adaptive max pooling; with return_indices, (values, indices)."""
    out = adaptive_max_pool1d_with_indices(input, output_size)
    return out if return_indices else out[0]


# ---- upsampling -------------------------------------------------------------------------------------

def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resizes (N, C, L) or (N, C, H, W) input to `size` or by `scale_factor`: modes 'nearest',
    'linear' (3-d), 'bilinear' and 'bicubic' (4-d, align_corners) and 'area' (adaptive average
    pooling)."""
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    dim = input.dim() - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        scale_factors = None
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError("Input and output must have the same number of spatial dimensions, but got input "
                                 f"with spatial dimensions of {list(input.shape[2:])} and output size of {size}. "
                                 "Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in "
                                 "(o1, o2, ...,oK) format.")
            output_size = [operator.index(s) for s in size]
        else:
            output_size = [operator.index(size)] * dim
    elif scale_factor is not None:
        output_size = None
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError("Input and scale_factor must have the same number of spatial dimensions, but got "
                                 f"input with spatial dimensions of {list(input.shape[2:])} and scale_factor of shape "
                                 f"{scale_factor}. Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                                 "scale_factor in (s1, s2, ...,sK) format.")
            scale_factors = [float(s) for s in scale_factor]
        else:
            scale_factors = [float(scale_factor)] * dim
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if mode == "area" and output_size is None:
        recompute_scale_factor = True  # 'area' needs an explicit size
    if output_size is None:
        # PyTorch: floor(in * scale) (recompute) or the op's int64(in * scale); equal for in, scale >= 0
        output_size = [math.floor(float(input.shape[i + 2]) * scale_factors[i]) for i in range(dim)]
        if recompute_scale_factor:
            scale_factors = None
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported by plugflow")

    if (mode not in ("nearest", "linear", "bilinear", "bicubic", "area") or input.dim() not in (3, 4)
            or (mode == "bicubic" and input.dim() == 3)):
        if input.dim() in (3, 4, 5) and mode in ("trilinear", "nearest-exact", "nearest", "area"):
            raise NotImplementedError(f"interpolate: mode '{mode}' for {input.dim()}D input is not supported by "
                                      "plugflow")
        # PyTorch's message, also for bicubic (4-d only) on 3-d or 5-d input
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.dim()}D) for "
                                  "the modes: nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact"
                                  f" (got {mode})")
    if input.dim() == 3 and mode == "bilinear":
        raise NotImplementedError("Got 3D input, but bilinear mode needs 4D input")
    if input.dim() == 4 and mode == "linear":
        raise NotImplementedError("Got 4D input, but linear mode needs 3D input")

    if mode == "area":
        if input.dim() == 3:
            return adaptive_avg_pool1d(input, output_size)
        return adaptive_avg_pool2d(input, output_size)
    if input.dim() == 3:  # 1-d: the 2-d op on a height-1 view
        x = input.unsqueeze(2)
        size2 = [1] + list(output_size)
        scales2 = [] if scale_factors is None else [1.0] + list(scale_factors)
        if mode == "nearest":
            return _C._upsample_nearest2d(x, size2, scales2).squeeze(2)
        return _C._upsample_bilinear2d(x, size2, bool(align_corners), scales2).squeeze(2)
    scales = [] if scale_factors is None else list(scale_factors)
    if mode == "nearest":
        return _C._upsample_nearest2d(input, list(output_size), scales)
    if mode == "bicubic":
        return _C._upsample_bicubic2d(input, list(output_size), bool(align_corners), scales)
    return _C._upsample_bilinear2d(input, list(output_size), bool(align_corners), scales)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated alias of interpolate."""
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate instead.")
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: interpolate(mode='nearest')."""
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use nn.functional.interpolate instead.")
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: interpolate(mode='bilinear', align_corners=True)."""
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use nn.functional.interpolate instead.")
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# ---- grid sampling ----------------------------------------------------------------------------------

_GRID_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_GRID_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}


def _default_align_corners(align_corners):
    if align_corners is None:
        warnings.warn("Default grid_sample and affine_grid behavior has changed to align_corners=False since 1.3.0. "
                      "Please specify align_corners=True if the old behavior is desired. See the documentation of "
                      "grid_sample for details.")
        return False
    return bool(align_corners)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Samples input (N, C, H, W) at grid (N, OH, OW, 2), or (N, C, D, H, W) at (N, OD, OH, OW, 3),
    whose last dim holds (x, y[, z]) in [-1, 1] across the input; modes 'bilinear', 'nearest',
    'bicubic' (4-d only), padding 'zeros', 'border', 'reflection'. Differentiable in input and
    grid."""
    if mode not in _GRID_MODES:
        raise ValueError("nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but "
                         f"got: '{mode}'")
    if padding_mode not in _GRID_PADDINGS:
        raise ValueError("nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    return _C.grid_sampler(input, grid, _GRID_MODES[mode], _GRID_PADDINGS[padding_mode],
                           _default_align_corners(align_corners))


def affine_grid(theta, size, align_corners=None):
    """The sampling grid of a batch of affine maps theta (N, 2, 3) for an output of size
    (N, C, H, W), or (N, 3, 4) for (N, C, D, H, W): grid_sample's grid argument."""
    align_corners = _default_align_corners(align_corners)
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    if len(size) == 4:
        if theta.dim() != 3 or theta.shape[-2] != 2 or theta.shape[-1] != 3:
            raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {size}. Got "
                             f"{theta.shape}.")
    elif len(size) == 5:
        if theta.dim() != 3 or theta.shape[-2] != 3 or theta.shape[-1] != 4:
            raise ValueError(f"Expected a batch of 3D affine matrices of shape Nx3x4 for size {size}. Got "
                             f"{theta.shape}.")
    else:
        raise NotImplementedError("affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {size}.")
    if align_corners and min(size[2:]) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
                      "align_corners=True. This is not an intended use case of affine_grid. See the documentation "
                      "of affine_grid for details.")
    elif min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    return _C.affine_grid_generator(theta, [operator.index(s) for s in size], align_corners)


# ---- sliding blocks (im2col / col2im) ------------------------------------------------------------

def _block_geometry(fn, kernel_size, dilation, padding, stride):
    kernel, dil, pad, step = (_ints(v, 2, name) for v, name in ((kernel_size, "kernel_size"), (dilation, "dilation"),
                                                                (padding, "padding"), (stride, "stride")))
    for values, what, low in ((kernel, "kernel size", 1), (dil, "dilation", 1), (step, "stride", 1), (pad, "padding", 0)):
        if len(values) != 2:
            raise RuntimeError(f"{fn}: {what} must have 2 elements, got {len(values)}")
        if min(values) < low:
            raise RuntimeError(f"{fn}: {what} should be {'greater than zero' if low else 'non-negative'}, "
                               f"but got {what}: {tuple(values)}")
    return kernel, dil, pad, step


def _block_counts(fn, size, kernel, dil, pad, step):
    counts = [(size[i] + 2 * pad[i] - (dil[i] * (kernel[i] - 1) + 1)) // step[i] + 1 for i in range(2)]
    if min(counts) < 1:
        raise RuntimeError(f"{fn}: given input with spatial size {tuple(size)}, kernel_size {tuple(kernel)}, "
                           f"dilation {tuple(dil)}, padding {tuple(pad)}, stride {tuple(step)}, calculated shape of "
                           f"the array of sliding blocks as {tuple(counts)}, but its components must be at least one.")
    return counts


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding local blocks (im2col): (N, C*kh*kw, L) from (N, C, H, W), or unbatched (C, H, W);
    rows run over channels, then kernel rows, then kernel columns, columns over blocks in
    row-major order, as PyTorch's. Built from views (pad, two Tensor.unfold windows, dilation
    as a step) and one copy; differentiable (overlapping blocks accumulate their gradients)."""
    kernel, dil, pad, step = _block_geometry("unfold", kernel_size, dilation, padding, stride)
    if input.dim() < 3:  # PyTorch's im2col reads the spatial sizes before it checks the rank
        nd = input.dim()
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {nd})"
                         if nd else "Dimension specified as 1 but tensor has no dimensions")
    if input.dim() not in (3, 4) or (input.dim() == 4 and 0 in input.shape[1:]) or (
            input.dim() == 3 and 0 in input.shape):
        raise RuntimeError("Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, "
                           f"but got: {list(input.shape)}")
    x = input if input.dim() == 4 else input.unsqueeze(0)
    n, c, h, w = x.shape
    oh, ow = _block_counts("unfold", (h, w), kernel, dil, pad, step)
    if pad[0] or pad[1]:
        x = _C.constant_pad_nd(x, [pad[1], pad[1], pad[0], pad[0]], 0.0)
    spans = [dil[i] * (kernel[i] - 1) + 1 for i in range(2)]
    blocks = x.unfold(2, spans[0], step[0]).unfold(3, spans[1], step[1])[..., ::dil[0], ::dil[1]]
    cols = blocks.permute(0, 1, 4, 5, 2, 3).reshape(n, c * kernel[0] * kernel[1], oh * ow)
    return cols if input.dim() == 4 else cols.squeeze(0)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sums sliding local blocks into an image (col2im), the adjoint of unfold: (N, C*kh*kw, L)
    or unbatched (C*kh*kw, L) into (N, C, H, W) / (C, H, W). One index_add of every block
    element into the padded image, then the padding cropped; differentiable."""
    kernel, dil, pad, step = _block_geometry("fold", kernel_size, dilation, padding, stride)
    size = _ints(output_size, 2, "output_size")
    if len(size) != 2:
        raise RuntimeError(f"fold: output_size must have 2 elements, got {len(size)}")
    if input.dim() not in (2, 3) or (input.dim() == 3 and 0 in input.shape[1:]) or (
            input.dim() == 2 and 0 in input.shape):
        raise RuntimeError("Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size for input, "
                           f"but got: {list(input.shape)}")
    x = input if input.dim() == 3 else input.unsqueeze(0)
    n, rows, length = x.shape
    per_channel = kernel[0] * kernel[1]
    if rows % per_channel:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, "
                           f"but got input.size(1)={rows} and kernel_size={tuple(kernel)}")
    oh, ow = _block_counts("fold", size, kernel, dil, pad, step)
    if length != oh * ow:
        raise RuntimeError(f"Given output_size={tuple(size)}, kernel_size={tuple(kernel)}, dilation={tuple(dil)}, "
                           f"padding={tuple(pad)}, stride={tuple(step)}, expected size of input's dimension 2 to "
                           f"match the calculated number of sliding blocks {oh} * {ow} = {oh * ow}, but got "
                           f"input.size(2)={length}.")
    c = rows // per_channel
    hp, wp = size[0] + 2 * pad[0], size[1] + 2 * pad[1]
    # Flat position in the padded image of kernel tap (ki, kj) of block (bi, bj), in input order.
    ki = _creation.arange(kernel[0], dtype=_C.int64).reshape(-1, 1, 1, 1) * dil[0]
    kj = _creation.arange(kernel[1], dtype=_C.int64).reshape(1, -1, 1, 1) * dil[1]
    bi = _creation.arange(oh, dtype=_C.int64).reshape(1, 1, -1, 1) * step[0]
    bj = _creation.arange(ow, dtype=_C.int64).reshape(1, 1, 1, -1) * step[1]
    index = ((ki + bi) * wp + (kj + bj)).reshape(-1).to(x.device)
    image = _creation.zeros((n, c, hp * wp), dtype=x.dtype, device=x.device)
    image = image.index_add(2, index, x.reshape(n, c, per_channel * length))
    image = image.reshape(n, c, hp, wp)[:, :, pad[0]:pad[0] + size[0], pad[1]:pad[1] + size[1]]
    return image if input.dim() == 3 else image.squeeze(0)
