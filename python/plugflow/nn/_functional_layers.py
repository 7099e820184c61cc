"""nn.functional's linear layers and attention (linear, bilinear, multi_head_attention_forward) and
the activations that need no kernel of their own (glu, hardshrink, softshrink, prelu, rrelu).

All are compositions of existing ops (matmul/bmm, views, where), so every device runs them and autograd
gives their gradients. multi_head_attention_forward follows PyTorch 1.13's (the reference
path, without the fused inference fast path, which computes the same values).
"""

import math
import warnings

from .. import _C, _creation
from ..amp.autocast_mode import _autocast_op
from ._functional_loss import _require_float

__all__ = ["linear", "bilinear", "multi_head_attention_forward", "glu", "hardshrink", "softshrink", "prelu", "rrelu",
           "rrelu_", "cosine_similarity", "pairwise_distance", "normalize", "pixel_shuffle", "pixel_unshuffle"]


def linear(input, weight, bias=None):
    """y = input @ weight.T + bias, for input (*, in_features) and weight (out_features, in_features)."""
    return _C._linear(input, weight, bias)


@_autocast_op("bilinear")
def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = sum_ij input1[..., i] * weight[o, i, j] * input2[..., j] + bias[o]."""
    if input1.dim() != input2.dim():
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.dim()} and {input2.dim()}")
    for i in range(input1.dim() - 1):
        if input1.size(i) != input2.size(i):
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {i}: got {input1.size(i)} "
                               f"and {input2.size(i)}")
    if weight.dim() != 3:
        raise RuntimeError(f"bilinear(): weight must be 3-D (out_features, in1_features, in2_features), got "
                           f"{weight.dim()}-D")
    out_features, in1, in2 = weight.shape
    if input1.size(-1) != in1:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got {input1.size(-1)} but expected "
                           f"{in1}")
    if input2.size(-1) != in2:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got {input2.size(-1)} but expected "
                           f"{in2}")
    if bias is not None and bias.size(0) != out_features:
        raise RuntimeError(f"bilinear(): bias size does not match weight size: got {bias.size(0)} but expected "
                           f"{out_features}")
    batch_shape = tuple(input1.shape[:-1])
    x1 = input1.reshape(-1, in1)
    x2 = input2.reshape(-1, in2)
    # (N, in1) @ (in1, out * in2) -> (N, out, in2), then a batched dot with x2 over in2.
    left = _C.matmul(x1, weight.permute(1, 0, 2).reshape(in1, out_features * in2)).view(-1, out_features, in2)
    # PyTorch sums its (autocast: lower-precision) products into an output of input1's dtype.
    output = _C.bmm(left, x2.unsqueeze(-1)).squeeze(-1).to(input1.dtype)
    if bias is not None:
        output = output + bias
    return output.reshape(batch_shape + (out_features,))


# ---- multi-head attention ------------------------------------------------------------------------

def _in_projection_packed(q, k, v, w, b=None):
    """q, k, v projected by the packed (3E, E) weight, sharing one GEMM when they are the same tensor."""
    E = q.size(-1)
    if k is v:
        if q is k:  # self-attention
            return linear(q, w, b).chunk(3, dim=-1)
        w_q, w_kv = w.split([E, E * 2])  # encoder-decoder attention
        b_q, b_kv = (None, None) if b is None else b.split([E, E * 2])
        return (linear(q, w_q, b_q),) + tuple(linear(k, w_kv, b_kv).chunk(2, dim=-1))
    w_q, w_k, w_v = w.chunk(3)
    b_q, b_k, b_v = (None, None, None) if b is None else b.chunk(3)
    return linear(q, w_q, b_q), linear(k, w_k, b_k), linear(v, w_v, b_v)


def _in_projection(q, k, v, w_q, w_k, w_v, b_q=None, b_k=None, b_v=None):
    """q, k, v projected by separate weights (kdim/vdim may differ from embed_dim)."""
    Eq, Ek, Ev = q.size(-1), k.size(-1), v.size(-1)
    assert w_q.shape == (Eq, Eq), f"expecting query weights shape of {(Eq, Eq)}, but got {w_q.shape}"
    assert w_k.shape == (Eq, Ek), f"expecting key weights shape of {(Eq, Ek)}, but got {w_k.shape}"
    assert w_v.shape == (Eq, Ev), f"expecting value weights shape of {(Eq, Ev)}, but got {w_v.shape}"
    assert b_q is None or b_q.shape == (Eq,), f"expecting query bias shape of {(Eq,)}, but got {b_q.shape}"
    assert b_k is None or b_k.shape == (Eq,), f"expecting key bias shape of {(Eq,)}, but got {b_k.shape}"
    assert b_v is None or b_v.shape == (Eq,), f"expecting value bias shape of {(Eq,)}, but got {b_v.shape}"
    return linear(q, w_q, b_q), linear(k, w_k, b_k), linear(v, w_v, b_v)


def _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
    """True for batched (3-D) inputs, False for unbatched (2-D); AssertionError (PyTorch's) otherwise."""
    def check(ok, message):  # raised explicitly: `assert` disappears under python -O
        if not ok:
            raise AssertionError(message)

    d = query.dim()
    check(d in (2, 3), f"query should be unbatched 2D or batched 3D tensor but received {d}-D query tensor")
    kind = "batched (3-D)" if d == 3 else "unbatched (2-D)"
    check(key.dim() == d and value.dim() == d,
          f"For {kind} `query`, expected `key` and `value` to be {d}-D but found "
          f"{key.dim()}-D and {value.dim()}-D tensors respectively")
    if key_padding_mask is not None:
        check(key_padding_mask.dim() == d - 1,
              f"For {kind} `query`, expected `key_padding_mask` to be `None` or {d - 1}-D but found "
              f"{key_padding_mask.dim()}-D tensor instead")
    if attn_mask is not None:
        check(attn_mask.dim() in (2, 3),
              f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
              f"{attn_mask.dim()}-D tensor instead")
        if d == 2 and attn_mask.dim() == 3:
            expected_shape = (num_heads, query.shape[0], key.shape[0])
            check(attn_mask.shape == expected_shape,
                  f"Expected `attn_mask` shape to be {expected_shape} but got {attn_mask.shape}")
    return d == 3


def _pad_last(t, count=1):
    """t with `count` zeros (False for bool) appended along its last dim."""
    from .functional import pad
    return pad(t, (0, count))


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True):
    """Multi-head attention on sequence-first inputs: query (L, N, E) or (L, E), key/value
    (S, N, E_k/E_v) or (S, E_k/E_v). Returns (output (L, N, E), weights (N, L, S) averaged over
    heads, (N, heads, L, S) when not average_attn_weights, or None when not need_weights).
    Bool masks mark positions that may NOT be attended; float masks are added to the scores."""
    is_batched = _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not is_batched:  # pretend there is a batch of one; squeezed again at the end
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)

    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    if key_padding_mask is not None and key_padding_mask.dtype != _C.bool and \
            not key_padding_mask.is_floating_point():
        raise AssertionError("only bool and floating types of key_padding_mask are supported")
    assert embed_dim == embed_dim_to_check, \
        f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}"
    head_dim = embed_dim // num_heads
    assert head_dim * num_heads == embed_dim, f"embed_dim {embed_dim} not divisible by num_heads {num_heads}"
    if use_separate_proj_weight:
        assert key.shape[:2] == value.shape[:2], \
            f"key's sequence and batch dims {key.shape[:2]} do not match value's {value.shape[:2]}"
    else:
        assert key.shape == value.shape, f"key shape {key.shape} does not match value shape {value.shape}"

    # in-projection
    if not use_separate_proj_weight:
        assert in_proj_weight is not None, "use_separate_proj_weight is False but in_proj_weight is None"
        q, k, v = _in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)
    else:
        assert q_proj_weight is not None, "use_separate_proj_weight is True but q_proj_weight is None"
        assert k_proj_weight is not None, "use_separate_proj_weight is True but k_proj_weight is None"
        assert v_proj_weight is not None, "use_separate_proj_weight is True but v_proj_weight is None"
        b_q, b_k, b_v = (None, None, None) if in_proj_bias is None else in_proj_bias.chunk(3)
        q, k, v = _in_projection(query, key, value, q_proj_weight, k_proj_weight, v_proj_weight, b_q, b_k, b_v)

    # attention mask: 3-D (bsz * heads, L, S), bool or float
    if attn_mask is not None:
        if attn_mask.dtype == _C.uint8:
            warnings.warn("Byte tensor for attn_mask in nn.MultiheadAttention is deprecated. Use bool tensor instead.")
            attn_mask = attn_mask.to(_C.bool)
        else:
            assert attn_mask.is_floating_point() or attn_mask.dtype == _C.bool, \
                f"Only float, byte, and bool types are supported for attn_mask, not {attn_mask.dtype}"
        if attn_mask.dim() == 2:
            correct_2d_size = (tgt_len, src_len)
            if attn_mask.shape != correct_2d_size:
                raise RuntimeError(f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be "
                                   f"{correct_2d_size}.")
            attn_mask = attn_mask.unsqueeze(0)
        elif attn_mask.dim() == 3:
            correct_3d_size = (bsz * num_heads, tgt_len, src_len)
            if attn_mask.shape != correct_3d_size:
                raise RuntimeError(f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be "
                                   f"{correct_3d_size}.")
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.dim()} is not supported")

    # learned key/value biases: one more source position
    if bias_k is not None and bias_v is not None:
        assert static_k is None, "bias cannot be added to static key."
        assert static_v is None, "bias cannot be added to static value."
        k = _C.cat([k, bias_k.repeat(1, bsz, 1)])
        v = _C.cat([v, bias_v.repeat(1, bsz, 1)])
        if attn_mask is not None:
            attn_mask = _pad_last(attn_mask)
        if key_padding_mask is not None:
            key_padding_mask = _pad_last(key_padding_mask)
    else:
        assert bias_k is None
        assert bias_v is None

    # heads into the batch dim: (bsz * heads, len, head_dim)
    q = q.contiguous().view(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    if static_k is None:
        k = k.contiguous().view(k.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    else:
        assert static_k.size(0) == bsz * num_heads, \
            f"expecting static_k.size(0) of {bsz * num_heads}, but got {static_k.size(0)}"
        assert static_k.size(2) == head_dim, f"expecting static_k.size(2) of {head_dim}, but got {static_k.size(2)}"
        k = static_k
    if static_v is None:
        v = v.contiguous().view(v.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    else:
        assert static_v.size(0) == bsz * num_heads, \
            f"expecting static_v.size(0) of {bsz * num_heads}, but got {static_v.size(0)}"
        assert static_v.size(2) == head_dim, f"expecting static_v.size(2) of {head_dim}, but got {static_v.size(2)}"
        v = static_v

    if add_zero_attn:  # one more all-zero key/value position
        zero_attn_shape = (bsz * num_heads, 1, head_dim)
        k = _C.cat([k, _creation.zeros(zero_attn_shape, dtype=k.dtype, device=k.device)], dim=1)
        v = _C.cat([v, _creation.zeros(zero_attn_shape, dtype=v.dtype, device=v.device)], dim=1)
        if attn_mask is not None:
            attn_mask = _pad_last(attn_mask)
        if key_padding_mask is not None:
            key_padding_mask = _pad_last(key_padding_mask)
    src_len = k.size(1)

    # merge the key padding mask into the attention mask
    if key_padding_mask is not None:
        assert key_padding_mask.shape == (bsz, src_len), \
            f"expecting key_padding_mask shape of {(bsz, src_len)}, but got {key_padding_mask.shape}"
        key_padding_mask = key_padding_mask.view(bsz, 1, 1, src_len).expand(-1, num_heads, -1, -1) \
            .reshape(bsz * num_heads, 1, src_len)
        if attn_mask is None:
            attn_mask = key_padding_mask
        elif attn_mask.dtype == _C.bool:
            attn_mask = attn_mask.logical_or(key_padding_mask)
        else:
            attn_mask = attn_mask.masked_fill(key_padding_mask, float("-inf"))
    if attn_mask is not None and attn_mask.dtype == _C.bool:
        attn_mask = _creation.zeros_like(attn_mask, dtype=q.dtype).masked_fill_(attn_mask, float("-inf"))

    if not training:
        dropout_p = 0.0

    # scaled dot-product attention and the out-projection
    q_scaled = q / math.sqrt(q.size(-1))
    if attn_mask is not None:
        attn_output_weights = _C.baddbmm(attn_mask, q_scaled, k.transpose(-2, -1))
    else:
        attn_output_weights = _C.bmm(q_scaled, k.transpose(-2, -1))
    attn_output_weights = _C.softmax(attn_output_weights, -1)
    if dropout_p > 0.0:
        from .functional import dropout
        attn_output_weights = dropout(attn_output_weights, p=dropout_p)
    attn_output = _C.bmm(attn_output_weights, v)
    attn_output = attn_output.transpose(0, 1).contiguous().view(tgt_len * bsz, embed_dim)
    attn_output = linear(attn_output, out_proj_weight, out_proj_bias)
    attn_output = attn_output.view(tgt_len, bsz, attn_output.size(1))

    if not need_weights:
        return (attn_output if is_batched else attn_output.squeeze(1)), None
    attn_output_weights = attn_output_weights.view(bsz, num_heads, tgt_len, src_len)
    if average_attn_weights:
        attn_output_weights = attn_output_weights.sum(dim=1) / num_heads
    if not is_batched:
        attn_output = attn_output.squeeze(1)
        attn_output_weights = attn_output_weights.squeeze(0)
    return attn_output, attn_output_weights


# ---- activations without a kernel of their own ---------------------------------------------------

def glu(input, dim=-1):
    """Gated linear unit: a * sigmoid(b) where a, b are the two halves of input along dim."""
    if input.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    size = input.size(dim)
    if size % 2 != 0:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim % input.dim()} is size {size}")
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


def hardshrink(input, lambd=0.5):
    """input where |input| > lambd, else 0 (floating inputs, as PyTorch's kernel)."""
    _require_float(input.dtype, "hardshrink_cpu")
    return input.masked_fill(input.abs() <= lambd, 0)


def softshrink(input, lambd=0.5):
    """input - lambd above lambd, input + lambd below -lambd, 0 in between."""
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd:g}.")
    _require_float(input.dtype, "softshrink_cpu")
    return input - input.clamp(-lambd, lambd)  # x - lambd, x + lambd or 0


@_autocast_op("prelu")
def prelu(input, weight):
    """input where input >= 0, else weight * input; a weight of C elements applies per channel
    (dim 1), one element applies everywhere."""
    if weight.numel() != 1:
        channels = input.size(1) if input.dim() >= 2 else 1
        if weight.numel() != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               f"{weight.numel()} and channel size = {channels}.")
        weight = weight.view([1, -1] + [1] * (input.dim() - 2))
    else:
        weight = weight.reshape(())
    return _C.where(input >= 0, input, weight * input)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky ReLU: negative inputs scaled by a slope drawn from U(lower, upper) per
    element in training, by the fixed (lower + upper) / 2 otherwise."""
    if not training:
        from .functional import leaky_relu
        return leaky_relu(input, (lower + upper) / 2, inplace)
    slope = _creation.empty_like(input).uniform_(lower, upper)
    result = _C.where(input >= 0, input, input * slope)
    return input.copy_(result) if inplace else result


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, True)


@_autocast_op("cosine_similarity")
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps)) along dim, x1 and x2 broadcast."""
    if x1.dtype != x2.dtype:
        raise RuntimeError(f"expected common dtype for x1 and x2, but got {x1.dtype} and {x2.dtype}")
    from .._composite import broadcast_tensors
    x1, x2 = broadcast_tensors(x1, x2)
    n1 = x1.norm(2, dim, True)
    n2 = x2.norm(2, dim, True)
    with _no_grad():
        n1c = n1.clamp_min(eps)
        n2c = n2.clamp_min(eps)
    # PyTorch 1.13 clamps the norms in place under no_grad: the gradient goes through the
    # unclamped norms, the values use the clamped ones.
    n1 = n1 + (n1c - n1).detach()
    n2 = n2 + (n2c - n2).detach()
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def _no_grad():
    from .. import autograd
    return autograd.no_grad()


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """The p-norm of x1 - x2 + eps along the last dim."""
    # (0-d inputs too: dim -1 of a 0-d tensor is its one element, and the norm's gradient at an
    # infinite difference is NaN there as everywhere)
    return (x1 - x2 + eps).norm(p, max(x1.dim(), x2.dim()) - 1, keepdim)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """input divided by its p-norm along dim (at least eps)."""
    if out is not None:
        raise NotImplementedError("normalize(): out= is not supported by plugflow")
    denom = input.norm(p, dim, True).clamp_min(eps)
    return input / denom


def pixel_shuffle(input, upscale_factor):
    """(*, C * r * r, H, W) -> (*, C, H * r, W * r)."""
    if input.dim() < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.dim()} dimension(s)")
    r = int(upscale_factor)
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    c, h, w = input.shape[-3:]
    if c % (r * r) != 0:
        raise RuntimeError("pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
                           f"of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    batch = tuple(input.shape[:-3])
    nb = len(batch)
    x = input.reshape(batch + (c // (r * r), r, r, h, w))
    x = x.permute(*range(nb), nb, nb + 3, nb + 1, nb + 4, nb + 2)
    return x.reshape(batch + (c // (r * r), h * r, w * r))


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H * r, W * r) -> (*, C * r * r, H, W)."""
    if input.dim() < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.dim()} dimension(s)")
    r = int(downscale_factor)
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    c, h, w = input.shape[-3:]
    if h % r != 0:
        raise RuntimeError("pixel_unshuffle expects height to be divisible by downscale_factor, but "
                           f"input.size(-2)={h} is not divisible by {r}")
    if w % r != 0:
        raise RuntimeError("pixel_unshuffle expects width to be divisible by downscale_factor, but "
                           f"input.size(-1)={w} is not divisible by {r}")
    batch = tuple(input.shape[:-3])
    nb = len(batch)
    x = input.reshape(batch + (c, h // r, r, w // r, r))
    x = x.permute(*range(nb), nb, nb + 2, nb + 4, nb + 1, nb + 3)
    return x.reshape(batch + (c * r * r, h // r, w // r))
