"""Memory formats against PyTorch 1.13: the format objects, memory_format= on contiguous /
is_contiguous / clone / to / empty / the *_like functions / Module.to, empty_strided, the
errors, and that channels-last inputs give PyTorch's values (and gradients) in the ops models run
on them, with PyTorch's result layouts where plugflow propagates channels last (elementwise ops,
convolutions and their gradients, leaf gradients)."""

import pickle

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_matches, seeded_rng


def both(fn):
    """fn(lib) for torch and plugflow."""
    return fn(torch), fn(pf)


@pytest.mark.parametrize("fmt, shape", [("channels_last", (2, 3, 4, 5)), ("channels_last_3d", (2, 3, 4, 5, 6)),
                                        ("contiguous_format", (2, 3, 4)), ("channels_last", (1, 1, 1, 1)),
                                        ("channels_last", (2, 0, 3, 1)), ("channels_last", (3, 5, 1, 7))])
def test_layouts_match_torch(fmt, shape):
    rng = seeded_rng()
    x = rng.standard_normal(shape).astype("float32")

    def made(lib):
        f = getattr(lib, fmt)
        t = lib.from_numpy(x)
        y = t.contiguous(memory_format=f)
        return [y.stride(), y.is_contiguous(memory_format=f), t.is_contiguous(memory_format=f),
                lib.empty(*shape, memory_format=f).stride(), t.clone(memory_format=f).stride(),
                t.to(memory_format=f).stride(), y.to(lib.float64, memory_format=f).stride(),
                lib.zeros_like(y, memory_format=lib.preserve_format).stride(),
                lib.ones_like(t, memory_format=f).stride(), lib.empty_like(y, memory_format=lib.contiguous_format).stride(),
                y.clone(memory_format=lib.preserve_format).stride(), y.numpy().tolist()]
    t_out, p_out = both(made)
    # Strides of size-1 dims never address memory; PyTorch picks them by its own rules (and any
    # stride is valid for a tensor without elements).
    for a, b in zip(t_out[:-1], p_out[:-1]):
        if isinstance(a, tuple) and 0 in shape:
            continue
        if isinstance(a, tuple):
            a = tuple(s for s, n in zip(a, shape) if n > 1)
            b = tuple(s for s, n in zip(b, shape) if n > 1)
        assert a == b, (t_out, p_out)
    assert t_out[-1] == p_out[-1]


def test_like_functions_fill_in_the_format():
    x = pf.randn(2, 3, 4, 5).contiguous(memory_format=pf.channels_last)
    assert pf.zeros_like(x, memory_format=pf.preserve_format).abs().sum().item() == 0
    assert pf.ones_like(x, memory_format=pf.channels_last).sum().item() == x.numel()
    assert pf.full_like(x, 7.0, memory_format=pf.channels_last).unique().tolist() == [7.0]
    for fn in (pf.rand_like, pf.randn_like):
        r = fn(x, memory_format=pf.preserve_format)
        assert r.is_contiguous(memory_format=pf.channels_last) and r.std().item() > 0
    r = pf.randint_like(x, 3, 9, memory_format=pf.channels_last)
    assert r.is_contiguous(memory_format=pf.channels_last) and 3 <= r.min().item() and r.max().item() < 9
    # A non-dense input: preserve_format falls back to contiguous, as in PyTorch.
    stepped = pf.randn(4, 6)[:, ::2]
    assert pf.zeros_like(stepped, memory_format=pf.preserve_format).stride() == (3, 1)


def test_errors_match_torch():
    for lib in (torch, pf):
        with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
            lib.randn(2, 3).contiguous(memory_format=lib.channels_last)
        with pytest.raises(RuntimeError, match="required rank 5 tensor to use channels_last_3d format"):
            lib.randn(2, 3, 4, 5).to(memory_format=lib.channels_last_3d)
        with pytest.raises(TypeError, match="must be torch.memory_format"):
            lib.randn(2, 3).contiguous(memory_format="channels_last")
        with pytest.raises(RuntimeError, match="preserve memory format is unsupported"):
            lib.randn(2, 3).t().contiguous(memory_format=lib.preserve_format)
        assert lib.randn(2, 3).is_contiguous(memory_format=lib.preserve_format)
        with pytest.raises(RuntimeError, match="dimensionality of sizes"):
            lib.empty_strided((2, 3), (1,))
    with pytest.raises(RuntimeError, match="non-negative"):
        pf.empty_strided((2, -3), (1, 1))


def test_format_objects_pickle_and_print():
    assert repr(pf.channels_last) == "plugflow.channels_last"
    for f in (pf.contiguous_format, pf.channels_last, pf.channels_last_3d, pf.preserve_format):
        assert pickle.loads(pickle.dumps(f)) is f
    assert isinstance(pf.channels_last, pf.memory_format)


def test_empty_strided_matches_torch():
    for size, stride in [((2, 3), (1, 2)), ((4,), (0,)), ((2, 0, 3), (3, 1, 1)), ((3, 2), (2, 1))]:
        t, p = both(lambda lib: lib.empty_strided(size, stride, dtype=lib.float64))
        assert t.stride() == p.stride() and tuple(t.shape) == tuple(p.shape) and p.dtype == pf.float64


def test_gradient_through_a_format_conversion():
    rng = seeded_rng()
    x = rng.standard_normal((2, 3, 4, 5))
    grads = []
    for lib in (torch, pf):
        t = lib.from_numpy(x.copy()).requires_grad_()
        y = t.contiguous(memory_format=lib.channels_last) * lib.from_numpy(x)
        (y.clone(memory_format=lib.contiguous_format) ** 2).sum().backward()
        grads.append(t.grad)
    assert_matches(grads[1], grads[0])


def test_a_channels_last_model_trains_like_torch():
    """A small CNN moved to channels_last (its 4-d weights and its input) gives PyTorch's loss and
    gradients: convolution, batch norm, relu, max pooling and the residual add read the
    channels-last strides."""
    rng = seeded_rng()
    x = rng.standard_normal((4, 3, 12, 12))

    def run(lib):
        lib.manual_seed(0)
        conv1, bn, conv2 = lib.nn.Conv2d(3, 8, 3, padding=1), lib.nn.BatchNorm2d(8), lib.nn.Conv2d(8, 8, 3, padding=1)
        net = lib.nn.ModuleList([conv1, bn, conv2]).double()
        return net

    t_net, p_net = run(torch), run(pf)
    with torch.no_grad():
        for (name, tp), pp in zip(t_net.named_parameters(), p_net.parameters()):
            tp.copy_(torch.from_numpy(pp.detach().numpy()))
    results = []
    for lib, net in ((torch, t_net), (pf, p_net)):
        net.to(memory_format=lib.channels_last)
        conv1, bn, conv2 = net
        assert conv1.weight.is_contiguous(memory_format=lib.channels_last) and conv1.bias.dim() == 1
        inp = lib.from_numpy(x).contiguous(memory_format=lib.channels_last)
        h = lib.relu(bn(conv1(inp)))
        out = lib.nn.functional.max_pool2d(conv2(h) + h, 2)
        loss = (out ** 2).mean()
        loss.backward()
        results.append((loss.detach(), conv1.weight.grad, bn.weight.grad, conv2.weight.grad))
    for p, t in zip(results[1], results[0]):
        assert_matches(p, t, rtol=1e-10, atol=1e-12)


def test_module_to_leaves_other_ranks_alone():
    lin = pf.nn.Linear(3, 4).to(memory_format=pf.channels_last)
    assert lin.weight.is_contiguous()
    conv3 = pf.nn.Conv3d(2, 3, 2).to(memory_format=pf.channels_last_3d)
    assert conv3.weight.is_contiguous(memory_format=pf.channels_last_3d)
    conv2 = pf.nn.Conv2d(2, 3, 2).to(memory_format=pf.channels_last_3d)  # (a 4-d weight: not 5-d, unchanged)
    assert conv2.weight.is_contiguous()
    with pytest.raises(TypeError, match="memory_format"):
        lin.to(memory_format="channels_last")
    assert np.isfinite(conv3(pf.randn(1, 2, 3, 3, 3)).sum().item())


def layout_flags(t, fmt="channels_last"):
    """(row-major?, in `fmt`?) of a torch or plugflow tensor."""
    lib = torch if isinstance(t, torch.Tensor) else pf
    return t.is_contiguous(), t.is_contiguous(memory_format=getattr(lib, fmt))


def in_format(lib, x, fmt):
    return lib.from_numpy(x.copy()).contiguous(memory_format=getattr(lib, fmt))


ELEMENTWISE = [
    ("relu", lambda lib, a, b: lib.relu(a)),
    ("exp", lambda lib, a, b: a.exp()),
    ("neg", lambda lib, a, b: -a),
    ("add", lambda lib, a, b: a + b),
    ("mul_number", lambda lib, a, b: a * 2.5),
    ("sub_reversed", lambda lib, a, b: b - a),
    ("bias_first", lambda lib, a, b: lib.ones(1, a.shape[1], 1, 1, dtype=a.dtype) + a),
    ("gt", lambda lib, a, b: a > b),
    ("where", lambda lib, a, b: lib.where(a > 0, a, b)),
    ("sigmoid", lambda lib, a, b: lib.sigmoid(a)),
    ("to_double", lambda lib, a, b: a.double()),  # .to() keeps the layout (preserve_format)
]


@pytest.mark.parametrize("name, fn", ELEMENTWISE, ids=[n for n, _ in ELEMENTWISE])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 5, 1, 7), (3, 1, 4, 4), (2, 6, 1, 1), (2, 0, 3, 3)])
@pytest.mark.parametrize("layouts", [("channels_last", "channels_last"), ("channels_last", "contiguous_format"),
                                     ("contiguous_format", "channels_last")])
def test_elementwise_results_take_the_layout_torch_gives(name, fn, shape, layouts):
    """An elementwise op on channels-last operands returns a channels-last result (the first
    operand with an unambiguous layout decides, as PyTorch's TensorIterator), with PyTorch's values."""
    rng = seeded_rng()
    x, y = rng.standard_normal(shape).astype("float32"), rng.standard_normal(shape).astype("float32")
    results = [fn(lib, in_format(lib, x, layouts[0]), in_format(lib, y, layouts[1])) for lib in (torch, pf)]
    assert_matches(results[1], results[0])
    assert layout_flags(results[1]) == layout_flags(results[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", [
    dict(x=(2, 6, 9, 7), w=(8, 6, 3, 3), stride=1, padding=1, groups=1),
    dict(x=(3, 4, 8, 5), w=(6, 2, 3, 1), stride=2, padding=(1, 0), groups=2),
    dict(x=(1, 8, 6, 6), w=(8, 1, 3, 3), stride=1, padding=1, groups=8),
    dict(x=(2, 5, 7, 7), w=(4, 5, 1, 1), stride=2, padding=0, groups=1),
])
@pytest.mark.parametrize("which", ["input", "weight", "both"])
def test_channels_last_convolution_matches_torch(dtype, case, which):
    """conv2d with a channels-last input, weight or both: PyTorch's output layout (channels last when
    either is), values and gradients; the input's gradient in the input's layout, also for an
    expanded upstream gradient (sum())."""
    rng = seeded_rng()
    x = rng.standard_normal(case["x"]).astype(dtype)
    w = rng.standard_normal(case["w"]).astype(dtype)
    b = rng.standard_normal(case["w"][0]).astype(dtype)
    results = []
    for lib in (torch, pf):
        xt = in_format(lib, x, "channels_last" if which in ("input", "both") else "contiguous_format")
        wt = in_format(lib, w, "channels_last" if which in ("weight", "both") else "contiguous_format")
        xt.requires_grad_(), wt.requires_grad_()
        bt = lib.from_numpy(b.copy()).requires_grad_()
        y = lib.nn.functional.conv2d(xt, wt, bt, stride=case["stride"], padding=case["padding"], groups=case["groups"])
        (y * y).sum().backward()
        gx_sum = lib.autograd.grad(lib.nn.functional.conv2d(xt, wt, stride=case["stride"], padding=case["padding"],
                                                            groups=case["groups"]).sum(), [xt])[0]
        results.append((y, xt.grad, wt.grad, bt.grad, gx_sum))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    for p, t in zip(results[1], results[0]):
        assert_matches(p, t, **tol)
        assert layout_flags(p) == layout_flags(t)


def test_channels_last_3d_convolution_matches_torch():
    rng = seeded_rng()
    x = rng.standard_normal((2, 3, 5, 6, 4))
    w = rng.standard_normal((4, 3, 3, 3, 3))
    results = []
    for lib in (torch, pf):
        xt = in_format(lib, x, "channels_last_3d").requires_grad_()
        wt = lib.from_numpy(w.copy()).requires_grad_()
        y = lib.nn.functional.conv3d(xt, wt, padding=1)
        (y * y).sum().backward()
        results.append((y, xt.grad, wt.grad))
    for p, t in zip(results[1], results[0]):
        assert_matches(p, t, rtol=1e-10, atol=1e-10)
        assert layout_flags(p, "channels_last_3d") == layout_flags(t, "channels_last_3d")
