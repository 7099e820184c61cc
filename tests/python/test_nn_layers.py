"""nn layers that need no new kernels, against PyTorch 1.13 with the SAME weights (the torch
module's state_dict is loaded into the plugflow module): Linear, Bilinear, Identity,
Flatten/Unflatten, the activation modules (and F.glu/hardshrink/softshrink/prelu/rrelu) and
MultiheadAttention (batch_first, masks of both kinds, key_padding_mask, kdim/vdim, bias,
add_bias_kv, add_zero_attn, need_weights, average_attn_weights, unbatched inputs). Outputs and
gradients (inputs and parameters), reprs, and PyTorch's errors. Fresh random inputs per run."""

import numpy as np
import pytest
import torch

import plugflow as pf
import plugflow.nn as pnn
import plugflow.nn.functional as PF
from helpers import assert_matches, assert_param_grads_match, load_from_torch, seeded_rng, tensor_pair


@pytest.fixture
def rng():
    return seeded_rng()


TOL = {np.float64: dict(rtol=1e-9, atol=1e-9), np.float32: dict(rtol=2e-5, atol=2e-5)}


def compare(rng, out_p, out_t, inputs, module_p=None, module_t=None, dtype=np.float64, **grad_tolerance):
    """Same outputs; then one random upstream gradient gives the same input and parameter grads
    (within grad_tolerance when given)."""
    outs_p = out_p if isinstance(out_p, tuple) else (out_p,)
    outs_t = out_t if isinstance(out_t, tuple) else (out_t,)
    for a, b in zip(outs_p, outs_t):
        if b is None:
            assert a is None
        else:
            assert_matches(a, b.detach(), **TOL[dtype])
    total_t, total_p = 0, 0
    for a, b in zip(outs_p, outs_t):
        if b is not None and b.requires_grad:
            g = rng.normal(size=tuple(b.shape)).astype(dtype)
            total_t = total_t + (b * torch.from_numpy(g)).sum()
            total_p = total_p + (a * pf.from_numpy(g)).sum()
    total_t.backward()
    total_p.backward()
    grad_tolerance = grad_tolerance or TOL[dtype]
    for p, t in inputs:
        if t.grad is None:
            assert p.grad is None or not bool(p.grad.any())
        else:
            assert_matches(p.grad, t.grad, **grad_tolerance)
    if module_t is not None:
        assert_param_grads_match(module_p, module_t, **grad_tolerance)


# ---- Linear, Bilinear, Identity, Flatten -------------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_linear(rng, bias, dtype):
    for batch in [(), (1,), (4,), (2, 3), (0,)]:
        in_f, out_f = int(rng.integers(1, 7)), int(rng.integers(1, 7))
        lin_t = torch.nn.Linear(in_f, out_f, bias=bias).to(torch.float64 if dtype is np.float64 else torch.float32)
        lin_p = pnn.Linear(in_f, out_f, bias=bias).to(pf.float64 if dtype is np.float64 else pf.float32)
        load_from_torch(lin_p, lin_t)
        layout = "transposed" if len(batch) >= 1 and rng.random() < 0.5 else "contiguous"
        x_p, x_t = tensor_pair(rng.normal(size=batch + (in_f,)).astype(dtype), layout, grad=True)
        compare(rng, lin_p(x_p), lin_t(x_t), [(x_p, x_t)], lin_p, lin_t, dtype)
        assert repr(lin_p) == repr(lin_t)


def test_linear_functional_and_errors(rng):
    x_p, x_t = tensor_pair(rng.normal(size=(3, 4)), grad=True)
    w_p, w_t = tensor_pair(rng.normal(size=(5, 4)), grad=True)
    b_p, b_t = tensor_pair(rng.normal(size=5), grad=True)
    compare(rng, PF.linear(x_p, w_p, b_p), torch.nn.functional.linear(x_t, w_t, b_t), [(x_p, x_t), (w_p, w_t),
                                                                                     (b_p, b_t)])
    with pytest.raises(RuntimeError):
        pnn.Linear(3, 2)(pf.zeros(4, 5))


@pytest.mark.parametrize("bias", [True, False])
def test_bilinear(rng, bias):
    for batch in [(), (1,), (5,), (2, 3)]:
        in1, in2, out = (int(v) for v in rng.integers(1, 6, size=3))
        bl_t = torch.nn.Bilinear(in1, in2, out, bias=bias).double()
        bl_p = pnn.Bilinear(in1, in2, out, bias=bias).double()
        load_from_torch(bl_p, bl_t)
        x1_p, x1_t = tensor_pair(rng.normal(size=batch + (in1,)), "transposed" if batch else "contiguous", grad=True)
        x2_p, x2_t = tensor_pair(rng.normal(size=batch + (in2,)), grad=True)
        compare(rng, bl_p(x1_p, x2_p), bl_t(x1_t, x2_t), [(x1_p, x1_t), (x2_p, x2_t)], bl_p, bl_t)
        assert repr(bl_p) == repr(bl_t)


BILINEAR_ERRORS = [
    lambda lib: lib.nn.functional.bilinear(lib.zeros(3, 2), lib.zeros(3), lib.zeros(1, 2, 1)),
    lambda lib: lib.nn.functional.bilinear(lib.zeros(3, 2), lib.zeros(4, 1), lib.zeros(1, 2, 1)),
    lambda lib: lib.nn.functional.bilinear(lib.zeros(3, 3), lib.zeros(3, 1), lib.zeros(1, 2, 1)),
    lambda lib: lib.nn.functional.bilinear(lib.zeros(3, 2), lib.zeros(3, 2), lib.zeros(1, 2, 1)),
    lambda lib: lib.nn.functional.bilinear(lib.zeros(3, 2), lib.zeros(3, 1), lib.zeros(1, 2, 1), lib.zeros(2)),
]


@pytest.mark.parametrize("index", range(len(BILINEAR_ERRORS)))
def test_bilinear_errors(index):
    with pytest.raises(RuntimeError) as expected:
        BILINEAR_ERRORS[index](torch)
    with pytest.raises(RuntimeError) as actual:
        BILINEAR_ERRORS[index](pf)
    assert str(actual.value) == str(expected.value)


def test_identity_flatten_unflatten(rng):
    x_p, x_t = tensor_pair(rng.normal(size=(2, 3, 4, 5)), "transposed", grad=True)
    assert pnn.Identity(3, unused=True)(x_p) is x_p
    for args in [(), (0,), (1, 2), (-3, -1), (0, -1)]:
        fl_p, fl_t = pnn.Flatten(*args), torch.nn.Flatten(*args)
        assert repr(fl_p) == repr(fl_t)
        assert_matches(fl_p(x_p), fl_t(x_t).detach())
    un_p, un_t = pnn.Unflatten(1, (3, 1)), torch.nn.Unflatten(1, (3, 1))
    assert repr(un_p) == repr(un_t)
    y_p, y_t = un_p(pnn.Flatten()(x_p)[:, :3]), un_t(torch.nn.Flatten()(x_t)[:, :3])
    compare(rng, y_p, y_t, [(x_p, x_t)])
    assert_matches(pnn.Unflatten(-2, [2, -1])(x_p).detach(), torch.nn.Unflatten(-2, [2, -1])(x_t).detach())
    with pytest.raises(TypeError, match="unflattened_size must be tuple of ints, but found element of type float"):
        pnn.Unflatten(1, (2, 2.0))
    with pytest.raises(TypeError, match="invalid argument type for dim parameter"):
        pnn.Unflatten(1.0, (2, 2))


# ---- activations -------------------------------------------------------------------------------------

ACTIVATIONS = [
    ("ReLU", ()), ("ReLU6", ()), ("LeakyReLU", (0.2,)), ("ELU", (0.7,)), ("CELU", (1.3,)), ("SELU", ()),
    ("GELU", ()), ("GELU", ("tanh",)), ("SiLU", ()), ("Sigmoid", ()), ("Tanh", ()), ("Softplus", (2, 5)),
    ("Hardswish", ()), ("Hardsigmoid", ()), ("Mish", ()), ("Hardtanh", (-0.5, 0.7)), ("LogSigmoid", ()),
    ("Softsign", ()), ("Tanhshrink", ()), ("Threshold", (0.1, -1.0)), ("Hardshrink", (0.3,)),
    ("Softshrink", (0.4,)), ("GLU", ()), ("GLU", (1,)), ("PReLU", ()), ("PReLU", (4, 0.1)), ("Softmax", (1,)),
    ("LogSoftmax", (-1,)), ("Softmin", (0,)), ("Softmax2d", ()), ("RReLU", (0.1, 0.3)),
]


@pytest.mark.parametrize("name,args", ACTIVATIONS, ids=[f"{n}{a}" for n, a in ACTIVATIONS])
def test_activation_modules(rng, name, args):
    act_t = getattr(torch.nn, name)(*args).double()
    act_p = getattr(pnn, name)(*args).double()
    assert repr(act_p) == repr(act_t)
    load_from_torch(act_p, act_t)
    if name == "RReLU":  # random slopes in training; compare the deterministic eval mode
        act_t.eval()
        act_p.eval()
    shapes = [(2, 4, 3, 2), (4, 3, 2), (0, 4, 2, 2)] if name == "Softmax2d" else [(2, 4, 3, 2), (5, 4), (0, 4, 2, 2)]
    # PyTorch computes these two gradients with a float32 constant (1.0f / 6, celu's
    # 1 / alpha.toFloat()), so float64 results agree to float32 precision only.
    tolerance = dict(rtol=1e-6, atol=1e-7) if name in ("CELU", "Hardsigmoid") else {}
    for shape in shapes:
        x = rng.normal(0, 2, size=shape)
        x[np.abs(x) < 1e-3] = 0.5  # keep away from kinks where one-sided derivatives are a choice
        x_p, x_t = tensor_pair(x, "transposed", grad=True)
        compare(rng, act_p(x_p), act_t(x_t), [(x_p, x_t)], act_p, act_t, **tolerance)


@pytest.mark.parametrize("name", ["ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "SiLU", "Hardswish", "Mish",
                                  "Threshold"])
def test_inplace_activations(rng, name):
    args = (0.1, -1.0) if name == "Threshold" else ()
    act_t = getattr(torch.nn, name)(*args, inplace=True)
    act_p = getattr(pnn, name)(*args, inplace=True)
    assert repr(act_p) == repr(act_t)
    x = rng.normal(size=(3, 4))
    x_p, x_t = pf.from_numpy(x.copy()), torch.from_numpy(x.copy())
    out_p = act_p(x_p)
    act_t(x_t)
    assert_matches(x_p, x_t)  # the input itself was modified
    assert out_p.data_ptr() == x_p.data_ptr()


def test_rrelu_training_slopes(rng):
    x = pf.from_numpy(-rng.uniform(0.5, 2, size=20000))
    out = pnn.RReLU(0.1, 0.3)(x)
    slopes = (out / x).numpy()
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3
    assert abs(slopes.mean() - 0.2) < 5 * 0.2 / np.sqrt(12 * slopes.size)


ACTIVATION_ERRORS = [
    lambda lib: lib.nn.functional.glu(lib.zeros(3, 5)),
    lambda lib: lib.nn.functional.glu(lib.tensor(1.0)),
    lambda lib: lib.nn.functional.softshrink(lib.zeros(3), -1.0),
    lambda lib: lib.nn.functional.prelu(lib.zeros(2, 3), lib.ones(4)),
]


@pytest.mark.parametrize("index", range(len(ACTIVATION_ERRORS)))
def test_activation_errors(index):
    with pytest.raises(RuntimeError) as expected:
        ACTIVATION_ERRORS[index](torch)
    with pytest.raises(RuntimeError) as actual:
        ACTIVATION_ERRORS[index](pf)
    assert str(actual.value) == str(expected.value)


def test_softmax2d_rejects_2d():
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D, got 2D instead"):
        pnn.Softmax2d()(pf.zeros(2, 3))


# ---- MultiheadAttention --------------------------------------------------------------------------------

def _mask_pair(rng, kind, shape):
    if kind == "bool":
        m = rng.random(shape) < 0.3
        m[..., 0] = False  # every query keeps at least one key, so no row is all -inf
    else:
        m = rng.normal(0, 1, size=shape)
    return pf.from_numpy(m.copy()), torch.from_numpy(m.copy())


# (module options, masks): every option appears with at least one kind of mask. masks: none;
# "bool": bool attn_mask and key_padding_mask; "float": a float (additive) key_padding_mask alone;
# "mixed": a float attn_mask with a bool key_padding_mask. (A float key_padding_mask with a float
# attn_mask goes through masked_fill with a float mask, which PyTorch 1.13 rejects.)
MHA_CASES = [
    (dict(), "none"),
    (dict(), "bool"),
    (dict(), "float"),
    (dict(), "mixed"),
    (dict(batch_first=True), "mixed"),
    (dict(bias=False), "bool"),
    (dict(kdim=3, vdim=5), "float"),
    (dict(kdim=3, vdim=5, batch_first=True, bias=False), "bool"),
    (dict(add_bias_kv=True), "mixed"),
    (dict(add_zero_attn=True), "bool"),
    (dict(add_bias_kv=True, add_zero_attn=True, batch_first=True), "float"),
]


@pytest.mark.parametrize("config,masks", MHA_CASES, ids=[f"{c}-{m}" for c, m in MHA_CASES])
def test_multihead_attention(rng, config, masks):
    embed, heads = 6, 3
    batch, tgt_len, src_len = int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(1, 5))
    mha_t = torch.nn.MultiheadAttention(embed, heads, dropout=0.0, **config).double()
    mha_p = pnn.MultiheadAttention(embed, heads, dropout=0.0, **config).double()
    load_from_torch(mha_p, mha_t)
    assert repr(mha_p) == repr(mha_t)
    bf = config.get("batch_first", False)
    kdim, vdim = config.get("kdim", embed), config.get("vdim", embed)
    shape = (lambda L, E: (batch, L, E)) if bf else (lambda L, E: (L, batch, E))
    q_p, q_t = tensor_pair(rng.normal(size=shape(tgt_len, embed)), grad=True)
    k_p, k_t = tensor_pair(rng.normal(size=shape(src_len, kdim)), "transposed", grad=True)
    v_p, v_t = tensor_pair(rng.normal(size=shape(src_len, vdim)), grad=True)
    kwargs_p, kwargs_t = {}, {}
    if masks in ("bool", "mixed"):
        attn_shape = (tgt_len, src_len) if rng.random() < 0.5 else (batch * heads, tgt_len, src_len)
        kwargs_p["attn_mask"], kwargs_t["attn_mask"] = _mask_pair(rng, "float" if masks == "mixed" else "bool",
                                                                  attn_shape)
    if masks != "none":
        kwargs_p["key_padding_mask"], kwargs_t["key_padding_mask"] = _mask_pair(rng, "float" if masks == "float"
                                                                                else "bool", (batch, src_len))
    for need_weights, average in [(True, True), (True, False), (False, True)]:
        for t in (q_t, k_t, v_t, *mha_t.parameters()):
            t.grad = None
        for t in (q_p, k_p, v_p, *mha_p.parameters()):
            t.grad = None
        out_t = mha_t(q_t, k_t, v_t, need_weights=need_weights, average_attn_weights=average, **kwargs_t)
        out_p = mha_p(q_p, k_p, v_p, need_weights=need_weights, average_attn_weights=average, **kwargs_p)
        compare(rng, out_p, out_t, [(q_p, q_t), (k_p, k_t), (v_p, v_t)], mha_p, mha_t)


def test_multihead_self_attention_unbatched(rng):
    mha_t = torch.nn.MultiheadAttention(4, 2).double()
    mha_p = pnn.MultiheadAttention(4, 2).double()
    load_from_torch(mha_p, mha_t)
    x_p, x_t = tensor_pair(rng.normal(size=(5, 4)), grad=True)
    pad = rng.random(5) < 0.4
    pad[0] = False
    out_t = mha_t(x_t, x_t, x_t, key_padding_mask=torch.from_numpy(pad))
    out_p = mha_p(x_p, x_p, x_p, key_padding_mask=pf.from_numpy(pad))
    compare(rng, out_p, out_t, [(x_p, x_t)], mha_p, mha_t)


def test_multihead_attention_fully_masked_row(rng):
    """A query whose keys are all masked gets NaN, as in PyTorch's reference path."""
    mha_t = torch.nn.MultiheadAttention(4, 1).double()
    mha_p = pnn.MultiheadAttention(4, 1).double()
    load_from_torch(mha_p, mha_t)
    x = rng.normal(size=(3, 1, 4))
    mask = np.zeros((3, 3), dtype=bool)
    mask[1] = True
    out_t, w_t = mha_t(*(torch.from_numpy(x),) * 3, attn_mask=torch.from_numpy(mask))
    out_p, w_p = mha_p(*(pf.from_numpy(x),) * 3, attn_mask=pf.from_numpy(mask))
    assert_matches(out_p, out_t.detach(), rtol=1e-9, atol=1e-9)
    assert_matches(w_p, w_t.detach(), rtol=1e-9, atol=1e-9)


MHA_ERRORS = [
    ("embed not divisible", lambda lib: lib.nn.MultiheadAttention(5, 2)),
    ("2-d mask shape", lambda lib: lib.nn.MultiheadAttention(4, 2)(
        lib.zeros(3, 1, 4), lib.zeros(2, 1, 4), lib.zeros(2, 1, 4), attn_mask=lib.zeros(3, 3))),
    ("3-d mask shape", lambda lib: lib.nn.MultiheadAttention(4, 2)(
        lib.zeros(3, 1, 4), lib.zeros(2, 1, 4), lib.zeros(2, 1, 4), attn_mask=lib.zeros(1, 3, 2))),
    ("int mask", lambda lib: lib.nn.MultiheadAttention(4, 2)(
        lib.zeros(3, 1, 4), lib.zeros(2, 1, 4), lib.zeros(2, 1, 4), attn_mask=lib.zeros(3, 2, dtype=lib.int64))),
    ("int padding mask", lambda lib: lib.nn.MultiheadAttention(4, 2)(
        lib.zeros(3, 1, 4), lib.zeros(2, 1, 4), lib.zeros(2, 1, 4), key_padding_mask=lib.zeros(1, 2,
                                                                                               dtype=lib.int64))),
    ("padding mask shape", lambda lib: lib.nn.MultiheadAttention(4, 2)(
        lib.zeros(3, 1, 4), lib.zeros(2, 1, 4), lib.zeros(2, 1, 4), key_padding_mask=lib.zeros(1, 3,
                                                                                               dtype=lib.bool))),
    ("4-d query", lambda lib: lib.nn.MultiheadAttention(4, 2)(
        lib.zeros(1, 3, 1, 4), lib.zeros(1, 2, 1, 4), lib.zeros(1, 2, 1, 4))),
    ("embed mismatch", lambda lib: lib.nn.MultiheadAttention(4, 2)(
        lib.zeros(3, 1, 6), lib.zeros(2, 1, 6), lib.zeros(2, 1, 6))),
    ("key/value mismatch", lambda lib: lib.nn.MultiheadAttention(4, 2)(
        lib.zeros(3, 1, 4), lib.zeros(2, 1, 4), lib.zeros(3, 1, 4))),
]


@pytest.mark.parametrize("name", [n for n, _ in MHA_ERRORS])
def test_multihead_attention_errors(name):
    call = dict(MHA_ERRORS)[name]
    with pytest.raises(Exception) as expected:
        call(torch)
    with pytest.raises(Exception) as actual:
        call(pf)
    assert type(actual.value) is type(expected.value)
    assert str(actual.value) == str(expected.value).replace("torch.", "plugflow.")
