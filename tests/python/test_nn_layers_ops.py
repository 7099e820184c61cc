"""nn layers built on the conv/pool/interpolate and norm/embedding/dropout ops
(F.conv1d/2d, F.conv_transpose1d/2d, F.max_pool1d/2d, F.avg_pool1d/2d, F.adaptive_*_pool1d/2d,
F.interpolate, F.batch_norm, F.layer_norm, F.group_norm, F.embedding, F.dropout*), against
PyTorch 1.13 with the SAME weights: Conv1d/Conv2d (stride, padding incl. 'same'/'valid',
dilation, groups, bias, padding modes), ConvTranspose1d/2d (output_padding, output_size),
max/avg/adaptive pooling, Upsample, BatchNorm1d/2d (running statistics, momentum incl. None,
track_running_stats, eval), LayerNorm, GroupNorm, Embedding (padding_idx), the dropouts, and
TransformerEncoderLayer / TransformerEncoder / Transformer (dropout=0, post/pre-norm, masks).
Outputs, input and parameter gradients, buffers, reprs. Fresh random inputs per run."""

import re

import numpy as np
import pytest
import torch

import plugflow as pf
import plugflow.nn as pnn
from helpers import assert_matches, assert_param_grads_match, load_from_torch, seeded_rng, tensor_pair


@pytest.fixture
def rng():
    return seeded_rng(seed_plugflow=True)


def compare(rng, out_p, out_t, inputs, module_p=None, module_t=None, rtol=1e-9, atol=1e-9):
    """Same outputs; then one random upstream gradient gives the same input and parameter grads."""
    assert_matches(out_p, out_t.detach(), rtol=rtol, atol=atol)
    g = rng.normal(size=tuple(out_t.shape))
    out_t.backward(torch.from_numpy(g))
    out_p.backward(pf.from_numpy(g))
    for p, t in inputs:
        assert_matches(p.grad, t.grad, rtol=rtol, atol=atol)
    if module_t is not None:
        assert_param_grads_match(module_p, module_t, rtol=rtol, atol=atol)


def compare_buffers(module_p, module_t):
    buffers_t = dict(module_t.named_buffers())
    for name, b in module_p.named_buffers():
        assert_matches(b, buffers_t[name], rtol=1e-9, atol=1e-9)


def same_modules(rng, cls, *args, **kwargs):
    m_t = getattr(torch.nn, cls)(*args, **kwargs).double()
    m_p = getattr(pnn, cls)(*args, **kwargs).double()
    load_from_torch(m_p, m_t)
    assert repr(m_p) == repr(m_t)
    return m_p, m_t


# ---- convolutions ------------------------------------------------------------------------------------

CONV2D = [
    dict(kernel_size=3),
    dict(kernel_size=(2, 3), stride=2, padding=1),
    dict(kernel_size=3, padding="same", dilation=2),
    dict(kernel_size=(3, 2), padding="valid", stride=(1, 2)),
    dict(kernel_size=3, padding=(1, 2), groups=2, bias=False),
    dict(kernel_size=3, padding=1, padding_mode="reflect"),
    dict(kernel_size=3, padding=2, padding_mode="circular", dilation=(1, 2)),
    dict(kernel_size=2, padding="same", padding_mode="replicate"),
]


@pytest.mark.parametrize("config", CONV2D, ids=[str(c) for c in CONV2D])
def test_conv2d(rng, config):
    conv_p, conv_t = same_modules(rng, "Conv2d", 4, 6, **config)
    shapes = [(2, 4, 7, 8), (1, 4, 5, 5)]
    if config.get("padding_mode") != "circular":  # PyTorch 1.13 pads unbatched inputs circularly for 1-d only
        shapes.append((4, 6, 9))
    for shape in shapes:
        x_p, x_t = tensor_pair(rng.normal(size=shape), "transposed", grad=True)
        compare(rng, conv_p(x_p), conv_t(x_t), [(x_p, x_t)], conv_p, conv_t)
        conv_p.zero_grad(set_to_none=True)
        conv_t.zero_grad(set_to_none=True)


@pytest.mark.parametrize("config", [dict(kernel_size=3), dict(kernel_size=2, stride=2, padding=1, dilation=2),
                                    dict(kernel_size=3, padding="same", groups=2),
                                    dict(kernel_size=3, padding=1, padding_mode="reflect", bias=False)])
def test_conv1d(rng, config):
    conv_p, conv_t = same_modules(rng, "Conv1d", 4, 6, **config)
    for shape in [(3, 4, 9), (4, 7)]:
        x_p, x_t = tensor_pair(rng.normal(size=shape), grad=True)
        compare(rng, conv_p(x_p), conv_t(x_t), [(x_p, x_t)], conv_p, conv_t)
        conv_p.zero_grad(set_to_none=True)
        conv_t.zero_grad(set_to_none=True)


@pytest.mark.parametrize("config", [dict(kernel_size=3), dict(kernel_size=3, stride=2, padding=1, output_padding=1),
                                    dict(kernel_size=(2, 3), stride=(2, 1), groups=2, bias=False, dilation=2)])
def test_conv_transpose2d(rng, config):
    conv_p, conv_t = same_modules(rng, "ConvTranspose2d", 4, 6, **config)
    x_p, x_t = tensor_pair(rng.normal(size=(2, 4, 5, 6)), "transposed", grad=True)
    compare(rng, conv_p(x_p), conv_t(x_t), [(x_p, x_t)], conv_p, conv_t)


@pytest.mark.parametrize("config", [dict(kernel_size=3), dict(kernel_size=4, stride=3, padding=1, output_padding=2,
                                                               groups=2, dilation=1, bias=False)])
def test_conv_transpose1d(rng, config):
    conv_p, conv_t = same_modules(rng, "ConvTranspose1d", 4, 6, **config)
    for shape in [(2, 4, 5), (4, 3)]:
        x_p, x_t = tensor_pair(rng.normal(size=shape), grad=True)
        compare(rng, conv_p(x_p), conv_t(x_t), [(x_p, x_t)], conv_p, conv_t)
        conv_p.zero_grad(set_to_none=True)
        conv_t.zero_grad(set_to_none=True)
    x = rng.normal(size=(1, 4, 5))
    x_p, x_t = tensor_pair(x, grad=True)
    size = [15] if config.get("stride", 1) > 1 else None  # valid sizes: 14..16 for this input
    compare(rng, conv_p(x_p, output_size=size), conv_t(x_t, output_size=size), [(x_p, x_t)])


def test_conv_transpose2d_output_size(rng):
    conv_p, conv_t = same_modules(rng, "ConvTranspose2d", 2, 3, 3, stride=2, padding=1)
    x = rng.normal(size=(1, 2, 4, 4))
    for size in [(7, 7), (8, 8), [1, 3, 8, 7]]:
        x_p, x_t = tensor_pair(x, grad=True)
        compare(rng, conv_p(x_p, output_size=size), conv_t(x_t, output_size=size), [(x_p, x_t)])
    with pytest.raises(ValueError, match="requested an output size of"):
        conv_p(pf.from_numpy(x), output_size=(10, 10))


CONV_ERRORS = [
    lambda lib: lib.nn.Conv2d(3, 4, 3, groups=2),
    lambda lib: lib.nn.Conv2d(4, 3, 3, groups=2),
    lambda lib: lib.nn.Conv2d(4, 4, 3, groups=0),
    lambda lib: lib.nn.Conv2d(4, 4, 3, padding="full"),
    lambda lib: lib.nn.Conv2d(4, 4, 3, padding="same", stride=2),
    lambda lib: lib.nn.Conv2d(4, 4, 3, padding_mode="mirror"),
    lambda lib: lib.nn.ConvTranspose2d(4, 4, 3, padding_mode="reflect"),
]


def _sorted_sets(message):
    """message with each printed set's items sorted (set order varies between processes)."""
    return re.sub(r"\{([^{}]*)\}", lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", message)


@pytest.mark.parametrize("index", range(len(CONV_ERRORS)))
def test_conv_constructor_errors(index):
    with pytest.raises(ValueError) as expected:
        CONV_ERRORS[index](torch)
    with pytest.raises(ValueError) as actual:
        CONV_ERRORS[index](pf)
    assert _sorted_sets(str(actual.value)) == _sorted_sets(str(expected.value))


# ---- pooling and upsampling --------------------------------------------------------------------------

@pytest.mark.parametrize("cls,kwargs", [
    ("MaxPool1d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("AvgPool1d", dict(kernel_size=2, padding=1, count_include_pad=False)),
    ("AdaptiveAvgPool1d", dict(output_size=3)),
    ("AdaptiveMaxPool1d", dict(output_size=2)),
    ("MaxPool2d", dict(kernel_size=2)),
    ("MaxPool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("MaxPool2d", dict(kernel_size=(2, 3), dilation=(2, 1))),
    ("AvgPool2d", dict(kernel_size=2)),
    ("AvgPool2d", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("AvgPool2d", dict(kernel_size=3, stride=1, ceil_mode=True, divisor_override=2)),
    ("AdaptiveAvgPool2d", dict(output_size=(3, 2))),
    ("AdaptiveAvgPool2d", dict(output_size=1)),
    ("AdaptiveAvgPool2d", dict(output_size=(None, 4))),
    ("AdaptiveMaxPool2d", dict(output_size=(2, 3))),
])
def test_pooling(rng, cls, kwargs):
    pool_p, pool_t = same_modules(rng, cls, **kwargs)
    shapes = [(2, 3, 7), (6, 5)] if cls.endswith("1d") else [(2, 3, 7, 8), (3, 6, 5)]
    for shape in shapes:
        x_p, x_t = tensor_pair(rng.normal(size=shape), "transposed", grad=True)
        compare(rng, pool_p(x_p), pool_t(x_t), [(x_p, x_t)])


@pytest.mark.parametrize("cls,arg", [("MaxPool2d", 2), ("MaxPool1d", 3), ("AdaptiveMaxPool2d", (2, 2)),
                                     ("AdaptiveMaxPool1d", 2)])
def test_max_pool_return_indices(rng, cls, arg):
    pool_p, pool_t = same_modules(rng, cls, arg, return_indices=True)
    x = rng.normal(size=(2, 3, 6, 6) if cls.endswith("2d") else (2, 3, 7))
    (out_p, idx_p), (out_t, idx_t) = pool_p(pf.from_numpy(x)), pool_t(torch.from_numpy(x))
    assert_matches(out_p, out_t)
    assert_matches(idx_p, idx_t)


@pytest.mark.parametrize("kwargs", [dict(scale_factor=2), dict(size=(5, 7)), dict(scale_factor=1.5, mode="bilinear"),
                                    dict(size=4, mode="bilinear", align_corners=True),
                                    dict(scale_factor=1.5, mode="bicubic")])
def test_upsample(rng, kwargs):
    up_p, up_t = same_modules(rng, "Upsample", **kwargs)
    x_p, x_t = tensor_pair(rng.normal(size=(2, 3, 4, 5)), grad=True)
    compare(rng, up_p(x_p), up_t(x_t), [(x_p, x_t)])
    assert repr(pnn.UpsamplingNearest2d(scale_factor=2)) == repr(torch.nn.UpsamplingNearest2d(scale_factor=2))
    assert repr(pnn.UpsamplingBilinear2d(size=3)) == repr(torch.nn.UpsamplingBilinear2d(size=3))


# ---- normalization ----------------------------------------------------------------------------------

@pytest.mark.parametrize("cls,shape", [("BatchNorm1d", (6, 4)), ("BatchNorm1d", (5, 4, 3)),
                                       ("BatchNorm2d", (3, 4, 5, 2))])
@pytest.mark.parametrize("momentum", [0.1, 0.35, None])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_training_and_eval(rng, cls, shape, momentum, affine):
    bn_p, bn_t = same_modules(rng, cls, 4, momentum=momentum, affine=affine, eps=1e-3)
    for step in range(3):  # running statistics accumulate over several batches
        x_p, x_t = tensor_pair(rng.normal(rng.uniform(-2, 2), rng.uniform(0.5, 3), size=shape), "transposed", grad=True)
        compare(rng, bn_p(x_p), bn_t(x_t), [(x_p, x_t)], bn_p, bn_t)
        compare_buffers(bn_p, bn_t)
        bn_p.zero_grad(set_to_none=True)
        bn_t.zero_grad(set_to_none=True)
    assert bn_p.num_batches_tracked.item() == 3
    bn_p.eval()
    bn_t.eval()
    x_p, x_t = tensor_pair(rng.normal(size=shape), grad=True)
    compare(rng, bn_p(x_p), bn_t(x_t), [(x_p, x_t)], bn_p, bn_t)
    compare_buffers(bn_p, bn_t)


def test_batch_norm_without_running_stats(rng):
    bn_p, bn_t = same_modules(rng, "BatchNorm2d", 3, track_running_stats=False)
    assert bn_p.running_mean is None and list(bn_p.state_dict()) == ["weight", "bias"]
    for mode in ("train", "eval"):  # batch statistics either way
        getattr(bn_p, mode)()
        getattr(bn_t, mode)()
        x_p, x_t = tensor_pair(rng.normal(size=(2, 3, 4, 4)), grad=True)
        compare(rng, bn_p(x_p), bn_t(x_t), [(x_p, x_t)], bn_p, bn_t)


def test_batch_norm_input_checks_and_state():
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        pnn.BatchNorm1d(3)(pf.zeros(2, 3, 4, 5))
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        pnn.BatchNorm2d(3)(pf.zeros(2, 3, 4))
    bn = pnn.BatchNorm2d(3)
    assert list(bn.state_dict()) == list(torch.nn.BatchNorm2d(3).state_dict())
    sd = bn.state_dict()
    del sd["num_batches_tracked"]
    sd._metadata[""]["version"] = 1  # an old checkpoint without num_batches_tracked still loads
    bn.load_state_dict(sd)


@pytest.mark.parametrize("shape,normalized", [((3, 5), 5), ((2, 3, 4), (3, 4)), ((4, 1, 6), [6])])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(rng, shape, normalized, affine):
    ln_p, ln_t = same_modules(rng, "LayerNorm", normalized, eps=1e-4, elementwise_affine=affine)
    with torch.no_grad():  # non-trivial affine parameters
        for p in ln_t.parameters():
            p.copy_(torch.from_numpy(rng.normal(size=tuple(p.shape))))
    load_from_torch(ln_p, ln_t)
    x_p, x_t = tensor_pair(rng.normal(size=shape), "transposed", grad=True)
    compare(rng, ln_p(x_p), ln_t(x_t), [(x_p, x_t)], ln_p, ln_t)


@pytest.mark.parametrize("groups,channels,shape", [(2, 4, (3, 4, 5)), (3, 6, (2, 6, 2, 3)), (1, 3, (4, 3))])
def test_group_norm(rng, groups, channels, shape):
    gn_p, gn_t = same_modules(rng, "GroupNorm", groups, channels, eps=1e-4)
    x_p, x_t = tensor_pair(rng.normal(size=shape), grad=True)
    compare(rng, gn_p(x_p), gn_t(x_t), [(x_p, x_t)], gn_p, gn_t)
    with pytest.raises(ValueError, match="num_channels must be divisible by num_groups"):
        pnn.GroupNorm(4, 6)


# ---- embedding and dropout -------------------------------------------------------------------------

@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding(rng, padding_idx):
    emb_p, emb_t = same_modules(rng, "Embedding", 7, 3, padding_idx=padding_idx)
    idx = rng.integers(0, 7, size=(4, 5))
    out_t = emb_t(torch.from_numpy(idx))
    out_p = emb_p(pf.from_numpy(idx))
    compare(rng, out_p, out_t, [], emb_p, emb_t)
    if padding_idx is not None:
        assert not bool(emb_p.weight.grad[padding_idx].any())


def test_embedding_from_pretrained(rng):
    weights = rng.normal(size=(5, 2))
    emb_p = pnn.Embedding.from_pretrained(pf.from_numpy(weights))
    emb_t = torch.nn.Embedding.from_pretrained(torch.from_numpy(weights))
    assert repr(emb_p) == repr(emb_t) and not emb_p.weight.requires_grad
    idx = rng.integers(0, 5, size=6)
    assert_matches(emb_p(pf.from_numpy(idx)), emb_t(torch.from_numpy(idx)))


@pytest.mark.parametrize("cls,shape", [("Dropout1d", (4, 300, 5)), ("Dropout2d", (4, 300, 2, 3)),
                                       ("Dropout3d", (2, 300, 2, 2, 2)), ("FeatureAlphaDropout", (4, 300, 3, 2))])
def test_channel_dropout(rng, cls, shape):
    """Whole channels are dropped together; eval mode is the identity."""
    drop_p = getattr(pnn, cls)(0.4)
    assert repr(drop_p) == repr(getattr(torch.nn, cls)(0.4))
    x = pf.from_numpy(rng.uniform(1, 2, size=shape))
    out = drop_p(x).numpy()
    per_channel = out.reshape(shape[0], shape[1], -1)
    dropped = (per_channel == per_channel[..., :1]).all(-1) if cls == "FeatureAlphaDropout" else \
        (per_channel == 0).all(-1)
    assert dropped.any() and not dropped.all()
    assert abs(dropped.mean() - 0.4) < 5 * np.sqrt(0.24 / dropped.size)
    drop_p.eval()
    assert bool((drop_p(x) == x).all())


def test_alpha_dropout_keeps_statistics(rng):
    drop = pnn.AlphaDropout(0.3)
    assert repr(drop) == repr(torch.nn.AlphaDropout(0.3))
    out = drop(pf.from_numpy(rng.normal(size=40000))).numpy()
    assert abs(out.mean()) < 0.05 and abs(out.std() - 1) < 0.05  # SELU's fixed point survives
    drop.eval()
    x = pf.from_numpy(rng.normal(size=5))
    assert bool((drop(x) == x).all())


def test_dropout(rng):
    drop = pnn.Dropout(0.3)
    assert repr(drop) == repr(torch.nn.Dropout(0.3))
    x = pf.ones(20000, dtype=pf.float64)
    out = drop(x).numpy()
    kept = out != 0
    assert np.allclose(out[kept], 1 / 0.7)
    assert abs(kept.mean() - 0.7) < 5 * np.sqrt(0.21 / kept.size)
    drop.eval()
    assert bool((drop(x) == x).all())
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        pnn.Dropout(1.5)


# ---- transformer -------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer(rng, batch_first, norm_first, activation):
    layer_p, layer_t = same_modules(rng, "TransformerEncoderLayer", 8, 2, dim_feedforward=12, dropout=0.0,
                                    activation=activation, batch_first=batch_first, norm_first=norm_first)
    batch, seq = 3, 5
    shape = (batch, seq, 8) if batch_first else (seq, batch, 8)
    x_p, x_t = tensor_pair(rng.normal(size=shape), grad=True)
    src_mask = np.triu(np.full((seq, seq), -np.inf), 1)  # causal float mask
    pad = rng.random((batch, seq)) < 0.3
    pad[:, 0] = False
    out_t = layer_t(x_t, src_mask=torch.from_numpy(src_mask), src_key_padding_mask=torch.from_numpy(pad))
    out_p = layer_p(x_p, src_mask=pf.from_numpy(src_mask), src_key_padding_mask=pf.from_numpy(pad))
    compare(rng, out_p, out_t, [(x_p, x_t)], layer_p, layer_t)


def test_transformer_encoder(rng):
    layer_t = torch.nn.TransformerEncoderLayer(8, 4, dim_feedforward=16, dropout=0.0, batch_first=True).double()
    layer_p = pnn.TransformerEncoderLayer(8, 4, dim_feedforward=16, dropout=0.0, batch_first=True).double()
    enc_t = torch.nn.TransformerEncoder(layer_t, 2, norm=torch.nn.LayerNorm(8).double())
    enc_p = pnn.TransformerEncoder(layer_p, 2, norm=pnn.LayerNorm(8).double())
    assert repr(enc_p) == repr(enc_t)
    load_from_torch(enc_p, enc_t)
    x_p, x_t = tensor_pair(rng.normal(size=(2, 6, 8)), grad=True)
    pad = np.zeros((2, 6), dtype=bool)
    pad[1, 4:] = True
    out_t = enc_t(x_t, src_key_padding_mask=torch.from_numpy(pad))
    out_p = enc_p(x_p, src_key_padding_mask=pf.from_numpy(pad))
    compare(rng, out_p, out_t, [(x_p, x_t)], enc_p, enc_t)


def test_transformer_encoder_layer_unbatched_and_callable_activation(rng):
    layer_p, layer_t = same_modules(rng, "TransformerEncoderLayer", 4, 2, dim_feedforward=6, dropout=0.0)
    layer_p.activation, layer_t.activation = pnn.SiLU(), torch.nn.SiLU()
    x_p, x_t = tensor_pair(rng.normal(size=(5, 4)), grad=True)
    compare(rng, layer_p(x_p), layer_t(x_t), [(x_p, x_t)], layer_p, layer_t)


def test_transformer_decoder(rng):
    model_t = torch.nn.Transformer(8, 2, 1, 2, dim_feedforward=10, dropout=0.0).double()
    model_p = pnn.Transformer(8, 2, 1, 2, dim_feedforward=10, dropout=0.0).double()
    load_from_torch(model_p, model_t)
    src_p, src_t = tensor_pair(rng.normal(size=(5, 2, 8)), grad=True)
    tgt_p, tgt_t = tensor_pair(rng.normal(size=(4, 2, 8)), grad=True)
    mask_t = torch.nn.Transformer.generate_square_subsequent_mask(4).double()
    mask_p = pnn.Transformer.generate_square_subsequent_mask(4).double()
    assert_matches(mask_p, mask_t)
    compare(rng, model_p(src_p, tgt_p, tgt_mask=mask_p), model_t(src_t, tgt_t, tgt_mask=mask_t),
            [(src_p, src_t), (tgt_p, tgt_t)], model_p, model_t)


def test_embedding_checks_indices_of_an_empty_embedding():
    # Found by the fuzzer: with no columns no kernel runs, but the indices are still checked.
    with pytest.raises(RuntimeError):
        torch.nn.functional.embedding(torch.tensor([-1]), torch.zeros(3, 0))
    with pytest.raises(RuntimeError):
        pf.nn.functional.embedding(pf.tensor([-1]), pf.zeros(3, 0))
    assert pf.nn.functional.embedding(pf.tensor([[2, 0]]), pf.zeros(3, 0)).shape == (1, 2, 0)


@pytest.mark.parametrize("fn, kwargs", [("elu", {}), ("celu", {"alpha": 0.5}), ("selu", {}), ("elu", {"alpha": 2.0})])
def test_elu_family_gradient_of_large_and_nan_inputs_matches_torch(fn, kwargs):
    # Found by the fuzzer: the exponential branch's exp(x) was multiplied by 0 for large x
    # (inf * 0 = NaN); PyTorch picks the branch (x <= 0), a NaN input taking the linear one.
    x = [1e300, 800.0, 0.0, -3.0, float("nan"), -1e300]
    grads = []
    for lib in (torch, pf):
        xt = lib.tensor(x, dtype=lib.float64, requires_grad=True)
        getattr(lib.nn.functional, fn)(xt, **kwargs).sum().backward()
        grads.append(xt.grad)
    assert_matches(grads[1], grads[0])
