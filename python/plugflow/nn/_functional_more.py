"""nn.functional's less common layers (PyTorch 1.13 semantics), composed from existing ops so
that autograd gives the gradients: local response norm, LP pooling, channel shuffle, pdist,
gumbel softmax, embedding bags, max unpooling and fractional max pooling."""

import warnings

from .. import _C, _creation
from ..autograd.function import Function as _Function
from ._functional_conv import avg_pool1d, avg_pool2d, avg_pool3d
from ._functional_loss import _require_float, _type_name

__all__ = ["local_response_norm", "lp_pool1d", "lp_pool2d", "channel_shuffle", "native_channel_shuffle", "pdist",
           "gumbel_softmax", "embedding_bag", "max_unpool1d", "max_unpool2d", "max_unpool3d",
           "fractional_max_pool2d", "fractional_max_pool2d_with_indices", "fractional_max_pool3d",
           "fractional_max_pool3d_with_indices"]


def _ntuple(n):
    """x -> (x,) * n for a single value, tuple(x) for a sequence (torch.nn.modules.utils', which
    this module cannot import: nn.modules imports nn.functional)."""
    return lambda x: tuple(x) if isinstance(x, (tuple, list)) else (x,) * n


_single, _pair, _triple = _ntuple(1), _ntuple(2), _ntuple(3)


# ---- normalization and pooling ------------------------------------------------------------------

def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta, as PyTorch composes it."""
    from .functional import pad
    dim = input.dim()
    if dim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {dim} dimensions)")
    if input.numel() == 0:
        return input
    div = input.mul(input).unsqueeze(1)
    if dim == 3:
        div = pad(div, (0, 0, size // 2, (size - 1) // 2))
        div = avg_pool2d(div, (size, 1), stride=1).squeeze(1)
    else:
        sizes = input.size()
        div = div.view(sizes[0], 1, sizes[1], sizes[2], -1)
        div = pad(div, (0, 0, 0, 0, size // 2, (size - 1) // 2))
        div = avg_pool3d(div, (size, 1, 1), stride=1).squeeze(1)
        div = div.view(sizes)
    div = div.mul(alpha).add(k).pow(beta)
    return input / div


class _CrossMapLRN2d(_Function):
    """Legacy (Lua Torch) cross-channel LRN on (N, C, H, W), with PyTorch's forward and backward
    windows: its forward window always includes channel 0 and its backward is not that
    forward's exact derivative, so both are spelled out as channel-mixing matrices."""

    @staticmethod
    def forward(ctx, input, size, alpha, beta, k):
        channels = input.size(1)
        pre_pad = int((size - 1) / 2 + 1)
        # forward: channel c sums squares over [0, c + pre_pad) minus [1, c - pre_pad]
        window = [[1.0 if (j < c + pre_pad and not 1 <= j <= c - pre_pad) else 0.0 for j in range(channels)]
                  for c in range(channels)]
        scale = _mix_channels(input * input, window).mul(alpha / size).add(k)
        output = scale.pow(-beta) * input
        ctx.save_for_backward(input, output, scale)
        ctx.size, ctx.alpha, ctx.beta = size, alpha, beta
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, output, scale = ctx.saved_tensors
        size, channels = ctx.size, input.size(1)
        inverse_pre_pad = int(size - (size - 1) / 2)
        # backward: channel c gathers the ratios of [c - inverse_pre_pad, c + size - 1 - inverse_pre_pad]
        window = [[1.0 if c - inverse_pre_pad <= j <= c + size - 1 - inverse_pre_pad else 0.0
                   for j in range(channels)] for c in range(channels)]
        accum = _mix_channels(grad_output * output / scale, window)
        grad_input = scale.pow(-ctx.beta) * grad_output - (2 * ctx.alpha * ctx.beta / size) * input * accum
        return grad_input, None, None, None, None


def _mix_channels(x, matrix):
    """out[:, c] = sum_j matrix[c][j] * x[:, j] for an (N, C, ...) x."""
    m = _creation.tensor(matrix, dtype=x.dtype, device=x.device)
    return (x.movedim(1, -1) @ m.t()).movedim(-1, 1)


def _cross_map_lrn2d(input, size, alpha=1e-4, beta=0.75, k=1):
    if input.dim() != 4:
        raise AssertionError("CrossMapLRN2d expects a 4-d (N, C, H, W) input")
    _require_float(input.dtype, "cross_map_lrn2d")
    return _CrossMapLRN2d.apply(input, size, alpha, beta, k)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """(sum over each window of x^p)^(1/p)."""
    if stride is not None:
        out = avg_pool1d(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    else:
        out = avg_pool1d(input.pow(norm_type), kernel_size, padding=0, ceil_mode=ceil_mode)
    return (out.sign() * out.abs().relu()).mul(kernel_size).pow(1.0 / norm_type)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """(sum over each window of x^p)^(1/p)."""
    kw, kh = _pair(kernel_size)
    if stride is not None:
        out = avg_pool2d(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    else:
        out = avg_pool2d(input.pow(norm_type), kernel_size, padding=0, ceil_mode=ceil_mode)
    return (out.sign() * out.abs().relu()).mul(kw * kh).pow(1.0 / norm_type)


# ---- shuffles and distances -----------------------------------------------------------------------

def channel_shuffle(input, groups):
    """(N, g * c, ...) -> channels regrouped as (c, g): ShuffleNet's channel shuffle."""
    if input.dim() <= 2:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with sizes "
                           f"{list(input.shape)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    channels = input.size(1)
    if channels % groups != 0:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {channels} channels and "
                           f"{groups} groups.")
    rest = list(input.shape[2:])
    return input.reshape([input.size(0), groups, channels // groups] + rest).transpose(1, 2).reshape(input.shape)


native_channel_shuffle = channel_shuffle  # (PyTorch's skips the divisibility check and reads past the end)


def pdist(input, p=2):
    """The p-norm distances between the rows of an (N, M) input, for each pair i < j in row-major
    order: N (N - 1) / 2 values."""
    if input.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.dim()}D")
    if not input.dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    if not p >= 0:  # (NaN too)
        raise RuntimeError("pdist only supports non-negative p values")
    n = input.size(0)
    if n < 2:
        return input.sum(1)[:0]
    from .. import triu_indices
    rows, cols = triu_indices(n, n, 1, device=input.device)
    diff = (input[rows] - input[cols]).abs()
    if p == 0:
        return (diff != 0).to(input.dtype).sum(1)
    if p == float("inf"):
        return diff.amax(1) if diff.size(1) else diff.sum(1)
    # (each |d|^p with a zero gradient where d is 0, as PyTorch's; its 2-norm's at a zero distance is 0 too)
    total = diff.pow(p).sum(1)
    zero = total == 0
    return _C.where(zero, 0.0, total.masked_fill(zero, 1.0).pow(1.0 / p))


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1):
    """softmax((logits + Gumbel noise) / tau) along dim; hard=True returns the one-hot argmax
    with the soft sample's gradient (straight-through)."""
    from .. import rand
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.")
    exponential = -(-rand(logits.shape, dtype=logits.dtype, device=logits.device)).log1p()
    gumbels = (logits - exponential.log()) / tau
    y_soft = gumbels.softmax(dim)
    if not hard:
        return y_soft
    index = y_soft.max(dim, keepdim=True)[1]
    y_hard = _creation.zeros(logits.shape, dtype=logits.dtype, device=logits.device).scatter(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


# ---- embedding bags -----------------------------------------------------------------------------

def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """Sums, means or maxima of bags of embedding rows without building the per-index
    embeddings' batch: a 2-d input holds one bag per row; a 1-d one is cut into bags at
    `offsets`. padding_idx entries count in no bag; an empty bag gives zeros."""
    from ._functional_norm import embedding
    if weight.dtype == _C.int64 and input.is_floating_point():
        warnings.warn("Argument order of nn.functional.embedding_bag was changed. Usage `embedding_bag(weight, "
                      "input, ...)` is deprecated, and should now be `embedding_bag(input, weight, ...)`.")
        weight, input = input, weight
    if per_sample_weights is not None and input.size() != per_sample_weights.size():
        raise ValueError(f"embedding_bag: If per_sample_weights ({per_sample_weights.shape}) is not None, then it "
                         f"must have the same shape as the input ({input.shape})")
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             f"fixed length sequences. However, found offsets of type {type(offsets)}")
        offsets = _creation.arange(0, input.numel(), input.size(1), dtype=input.dtype, device=input.device)
        input = input.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif input.dim() == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if offsets.dim() != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.dim()}")
    if mode == "max":
        if scale_grad_by_freq:
            raise ValueError("max mode does not support scaling the gradient by the frequency")
        if sparse:
            raise ValueError("max mode does not support sparse weights")
    elif mode not in ("sum", "mean"):
        raise ValueError("mode has to be one of sum, mean or max")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{mode}'). Please open a feature request on "
                                  "GitHub.")
    for name, t in (("indices", input), ("offsets", offsets)):
        if t.dtype not in (_C.int64, _C.int32):
            raise RuntimeError(f"Expected tensor for argument #1 '{name}' to have one of the following scalar types: "
                               f"Long, Int; but got {_type_name(t.dtype)} instead")
    if not weight.dtype.is_floating_point:
        raise RuntimeError(f"Expected tensor for argument #1 'weight' to have one of the following scalar types: "
                           f"Half, Float, Double; but got {_type_name(weight.dtype)} instead")
    if weight.dim() != 2:
        raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but got 1)")
    if per_sample_weights is not None and per_sample_weights.dtype != weight.dtype:
        raise RuntimeError("Expected tensor for argument #1 'weight' to have the same type as tensor for argument "
                           "#1 'per_sample_weights'")
    n_rows, length = weight.size(0), input.numel()
    if padding_idx is not None:
        if not -n_rows <= padding_idx < n_rows:
            raise RuntimeError(f"padding_idx must be within the number of embeddings, {-n_rows} through "
                               f"{n_rows - 1}, but got {padding_idx}")
        padding_idx = padding_idx % n_rows
    starts = [int(v) for v in offsets.tolist()]
    if include_last_offset:
        if not starts:
            raise RuntimeError("include_last_offset: number of offset should be at least 1")
        starts, ends = starts[:-1], starts[1:]
    else:
        ends = starts[1:] + [length]
    if starts and starts[0] != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                           f"position 0. However, got {starts[0]}")
    if (ends and ends[-1] > length) or (starts and starts[-1] > length):
        raise RuntimeError(f"offsets[-1] can not be greater than input's length {length} but got offsets[-1] of "
                           f"{max(ends[-1] if ends else 0, starts[-1])}")
    if any(b < a for a, b in zip(starts, ends)):
        raise RuntimeError("embedding_bag: offsets must be non-decreasing")
    input = input.to(_C.int64)
    if length and ((input < 0).logical_or(input >= n_rows)).any():
        raise IndexError("index out of range in self")
    if max_norm is not None:
        _C.embedding_renorm_(weight, input.contiguous(), float(max_norm), float(norm_type))

    # Bags as a dense (bags, longest, dim) block of rows, the missing places masked out.
    n_bags, longest = len(starts), max([b - a for a, b in zip(starts, ends)], default=0)
    device = weight.device
    place = [[a + j if a + j < b else -1 for j in range(longest)] for a, b in zip(starts, ends)]
    place = _creation.tensor(place, dtype=_C.int64, device=device).reshape(n_bags, longest)
    present = place >= 0
    # (looked up once per index, so that scale_grad_by_freq counts the input's indices)
    rows = embedding(input, weight, None, None, 2.0, scale_grad_by_freq, sparse)[place.clamp(min=0)]
    if padding_idx is not None:
        present = present.logical_and(input[place.clamp(min=0)] != padding_idx)
    mask = present.unsqueeze(2)
    if mode == "max":
        neg_inf = _creation.full((), float("-inf"), dtype=weight.dtype, device=device)
        best = _C.where(mask, rows, neg_inf).amax(1) if longest else rows.sum(1)
        return _C.where(present.any(1, keepdim=True), best, 0.0)
    if per_sample_weights is not None:
        sample_weights = per_sample_weights[place.clamp(min=0)] if length else \
            _creation.zeros((n_bags, longest), dtype=weight.dtype, device=device)
        rows = rows * sample_weights.unsqueeze(2)
    total = _C.where(mask, rows, 0.0).sum(1)
    if mode == "mean":
        total = total / present.sum(1, keepdim=True).clamp(min=1).to(weight.dtype)
    return total


# ---- max unpooling --------------------------------------------------------------------------------

def _unpool_output_size(input, kernel_size, stride, padding, output_size):
    input_size = input.size()
    default_size = [(input_size[-len(kernel_size) + d] - 1) * stride[d] + kernel_size[d] - 2 * padding[d]
                    for d in range(len(kernel_size))]
    if output_size is None:
        return default_size
    output_size = list(output_size)
    if len(output_size) == len(kernel_size) + 2:
        output_size = output_size[2:]
    if len(output_size) != len(kernel_size):
        raise ValueError(f"output_size should be a sequence containing {len(kernel_size)} or {len(kernel_size) + 2} "
                         f"elements, but it has a length of '{len(output_size)}'")
    for d in range(len(kernel_size)):
        min_size, max_size = default_size[d] - stride[d], default_size[d] + stride[d]
        if not min_size < output_size[d] < max_size:
            raise ValueError(f'invalid output_size "{output_size}" (dim {d} must be between {min_size} and '
                             f'{max_size})')
    return output_size


def _max_unpool(input, indices, output_size, name):
    """Scatters each (sample, channel)'s values to their flat indices in a zero output."""
    spatial = len(output_size)
    if input.dim() not in (spatial + 1, spatial + 2):
        raise RuntimeError(f"{name}(): Expected {spatial + 1}d or {spatial + 2}d input, got {input.dim()}d")
    if indices.shape != input.shape:
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor ({list(input.shape)}) "
                           f"but got indices tensor with shape: {list(indices.shape)}")
    if indices.dtype != _C.int64:
        raise RuntimeError(f"elements in indices should be type int64 but got: {_type_name(indices.dtype)}")
    if any(s <= 0 for s in output_size):
        raise RuntimeError(f"{name}(): output_size must be positive, got {list(output_size)}")
    lead = list(input.shape[:-spatial])
    volume = 1
    for s in output_size:
        volume *= s
    flat_indices = indices.reshape(lead + [-1])
    if flat_indices.numel() and ((flat_indices < 0).logical_or(flat_indices >= volume)).any():
        bad = _C.masked_select(flat_indices, (flat_indices < 0).logical_or(flat_indices >= volume))[0].item()
        raise RuntimeError(f"Found an invalid max index: {bad} (output volumes are of size "
                           f"{'x'.join(str(s) for s in output_size)}")
    out = _creation.zeros(lead + [volume], dtype=input.dtype, device=input.device)
    out = out.scatter(-1, flat_indices, input.reshape(lead + [-1]))
    return out.reshape(lead + list(output_size))


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of max_pool1d: each value put back at its index, zeros elsewhere."""
    kernel_size = _single(kernel_size)
    stride = _single(stride) if stride is not None else kernel_size
    output_size = _unpool_output_size(input, kernel_size, stride, _single(padding), output_size)
    return _max_unpool(input, indices, output_size, "max_unpooling1d")


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of max_pool2d: each value put back at its index, zeros elsewhere."""
    kernel_size = _pair(kernel_size)
    stride = _pair(stride) if stride is not None else kernel_size
    output_size = _unpool_output_size(input, kernel_size, stride, _pair(padding), output_size)
    return _max_unpool(input, indices, output_size, "max_unpooling2d_forward_out")


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of max_pool3d: each value put back at its index, zeros elsewhere."""
    kernel_size = _triple(kernel_size)
    stride = _triple(stride) if stride is not None else kernel_size
    output_size = _unpool_output_size(input, kernel_size, stride, _triple(padding), output_size)
    return _max_unpool(input, indices, output_size, "max_unpooling3d_forward_out")


# ---- fractional max pooling -------------------------------------------------------------------------

def _fractional_starts(samples, input_size, output_size, pool_size):
    """PyTorch's pseudo-random window starts for each (sample, channel): start_i =
    int((i + u) * alpha) - int(u * alpha), alpha = (input - pool) / (output - 1), the last
    window flush with the end; computed in the samples' dtype as PyTorch computes them."""
    lead = list(samples.shape)
    if output_size == 0:
        return _creation.zeros(lead + [0], dtype=_C.int64, device=samples.device)
    if output_size == 1:
        return _creation.full(lead + [1], input_size - pool_size, dtype=_C.int64, device=samples.device)
    dtype = samples.dtype
    alpha = _creation.tensor(float(input_size - pool_size), dtype=dtype) / _creation.tensor(
        float(output_size - 1), dtype=dtype)
    alpha = alpha.to(samples.device)
    steps = _creation.arange(output_size, dtype=dtype, device=samples.device)
    u = samples.unsqueeze(-1)
    starts = ((steps + u) * alpha).trunc().to(_C.int64) - (u * alpha).trunc().to(_C.int64)
    starts[..., -1] = input_size - pool_size
    return starts


def _fractional_max_pool(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, spatial):
    name = f"fractional_max_pool{spatial}d"
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
    ntuple = _pair if spatial == 2 else _triple
    kernel_size = ntuple(kernel_size)
    if any(k <= 0 for k in kernel_size):  # (PyTorch pools empty windows into -inf)
        raise RuntimeError(f"{name}(): kernel_size must be greater than zero, but got {list(kernel_size)}")
    if output_size is None:
        ratio = ntuple(output_ratio)
        output_size = [int(input.size(-spatial + d) * ratio[d]) for d in range(spatial)]
    output_size = list(ntuple(output_size))
    if input.dim() not in (spatial + 1, spatial + 2):
        raise RuntimeError(f"{name}(): Expected {spatial + 1}D or {spatial + 2}D tensor, but got: {list(input.shape)}")
    _require_float(input.dtype, name)
    batched = input.dim() == spatial + 2
    x = input if batched else input.unsqueeze(0)
    n, c = x.size(0), x.size(1)
    sizes = list(x.shape[2:])
    if 0 in sizes:
        raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but got "
                           f"{list(input.shape)} with dimension {sizes.index(0) + input.dim() - spatial} being empty.")
    for d in range(spatial):
        # (PyTorch's 3-d pooling also refuses a last window flush with the end)
        if output_size[d] + kernel_size[d] - 1 > sizes[d] - (spatial == 3):
            raise RuntimeError(f"{name}(): pool size {kernel_size[d]} too large relative to input size {sizes[d]} "
                               f"for output size {output_size[d]} in dim {d}")
    if _random_samples is None:
        from .. import rand
        _random_samples = rand(n, c, spatial, dtype=input.dtype, device=input.device)
    if list(_random_samples.shape) != [n, c, spatial]:
        raise RuntimeError(f"{name}(): expected _random_samples of shape {[n, c, spatial]}, got "
                           f"{list(_random_samples.shape)}")
    # PyTorch's 2-d pooling takes its first sample for the width, the 3-d one for the depth.
    sample_of_dim = [1, 0] if spatial == 2 else [0, 1, 2]
    flat = None
    strides = [1] * spatial
    for d in range(spatial - 2, -1, -1):
        strides[d] = strides[d + 1] * sizes[d + 1]
    for d in range(spatial):
        starts = _fractional_starts(_random_samples[:, :, sample_of_dim[d]], sizes[d], output_size[d], kernel_size[d])
        offsets = _creation.arange(kernel_size[d], device=input.device)
        # (n, c, out_d, k_d) positions along dim d, placed on their own axes of the window grid
        pos = (starts.unsqueeze(-1) + offsets) * strides[d]
        shape = [n, c] + [1] * (2 * spatial)
        shape[2 + d] = output_size[d]
        shape[2 + spatial + d] = kernel_size[d]
        pos = pos.reshape(shape)
        flat = pos if flat is None else flat + pos
    window = 1
    for k in kernel_size:
        window *= k
    flat = flat.reshape(n, c, -1, window)
    candidates = x.reshape(n, c, -1).gather(2, flat.reshape(n, c, -1)).reshape(n, c, -1, window)
    best, which = candidates.max(3)
    indices = flat.gather(3, which.unsqueeze(3)).squeeze(3)
    best = best.reshape([n, c] + output_size)
    indices = indices.reshape([n, c] + output_size)
    if not batched:
        best, indices = best.squeeze(0), indices.squeeze(0)
    return (best, indices) if return_indices else best


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    """Max pooling over pseudo-random overlapping windows (Graham's fractional max pooling)."""
    return _fractional_max_pool(input, kernel_size, output_size, output_ratio, True, _random_samples, 2)


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """Max pooling over pseudo-random overlapping windows (Graham's fractional max pooling)."""
    return _fractional_max_pool(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, 2)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    """3-d fractional max pooling."""
    return _fractional_max_pool(input, kernel_size, output_size, output_ratio, True, _random_samples, 3)


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """3-d fractional max pooling."""
    return _fractional_max_pool(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, 3)
