"""Memory formats against PyTorch 1.13: the format objects, memory_format= on contiguous /
is_contiguous / clone / to / empty / the *_like functions / Module.to, empty_strided, the
errors, and that channels-last inputs give PyTorch's values (and gradients) in the ops models run
on them. Results of ops are contiguous in plugflow (PyTorch propagates channels-last), so only
the tensors a memory_format argument makes are compared by strides."""

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
