"""Batch norm on channels-last activations, against PyTorch: the input flows through without a
copy, y and the input gradient come back channels last (PyTorch's strides), and the numbers
match: functional batch_norm in training and eval (running statistics), BatchNorm2d/3d modules
over several steps, odd sizes (N = 1, C = 1, 1x1 and 3x5 images, 5-d), float32/float64 and
bfloat16 with float32 parameters (autocast's mixed batch norm), gradients from a channels-last,
a row-major and an expanded (sum()) upstream gradient; then nn.Graph training and inference
graphs of conv + bn + relu and of a residual block, model and input channels last, whose batch
norms the fuse_conv_bn pass fuses (batch_norm_fused, batch_norm_relu_backward, the eval fold):
graph against eager and against PyTorch, and a bfloat16 amp training graph against eager
autocast. Every test draws a new seed (printed; replay with
BN_CL_TEST_SEED=<n>)."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn as nn
import plugflow.nn.functional as F
from helpers import assert_bf16_batch_norm_close, assert_matches, from_torch, load_from_torch, seeded_rng

TOL = {"float32": (1e-4, 1e-4), "float64": (1e-9, 1e-9)}


@pytest.fixture
def rng():
    return seeded_rng("BN_CL_TEST_SEED")


def close(actual, expected, dtype, what=""):
    rtol, atol = TOL[dtype]
    try:
        assert_matches(actual, expected.detach(), rtol=rtol, atol=atol)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


def fmt(lib, ndim):
    return lib.channels_last if ndim == 4 else lib.channels_last_3d


def same_layout(actual, expected, what=""):
    """actual (plugflow) is laid out as expected (torch): equal strides on every dim of size > 1
    (a size-1 dim's stride says nothing about the layout)."""
    strides = [(a, e) for a, e, s in zip(actual.stride(), expected.stride(), expected.shape) if s > 1]
    assert all(a == e for a, e in strides), f"{what}: strides {actual.stride()}, PyTorch's {expected.stride()}"


def cl_pair(rng, shape, dtype, low=-3.0, high=5.0):
    """The same random values as a plugflow and a torch leaf, channels last."""
    data = rng.uniform(low, high, size=shape).astype(dtype)
    p = pf.from_numpy(data.copy()).contiguous(memory_format=fmt(pf, len(shape)))
    t = torch.from_numpy(data.copy()).contiguous(memory_format=fmt(torch, len(shape)))
    return p.detach().requires_grad_(), t.detach().requires_grad_()


def upstream(rng, shape, dtype, kind):
    """An upstream gradient pair: channels last, row-major, or None (y.sum()'s expanded one)."""
    if kind == "sum":
        return None, None
    data = rng.standard_normal(shape).astype(dtype)
    p, t = pf.from_numpy(data.copy()), torch.from_numpy(data.copy())
    if kind == "channels_last":
        p, t = p.contiguous(memory_format=fmt(pf, len(shape))), t.contiguous(memory_format=fmt(torch, len(shape)))
    return p, t


SHAPES = [(1, 1, 3, 5), (2, 1, 4, 4), (3, 5, 1, 1), (1, 3, 3, 5), (2, 7, 3, 5), (4, 16, 4, 4), (2, 40, 3, 5),
          (1, 70, 2, 3), (2, 3, 2, 3, 4), (1, 19, 1, 2, 3), (2, 33, 2, 2, 2)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("grad", ["channels_last", "contiguous", "sum"])
def test_functional_matches_torch(rng, shape, dtype, training, grad):
    c = shape[1]
    px, tx = cl_pair(rng, shape, dtype)
    params = [rng.uniform(0.5, 1.5, c), rng.standard_normal(c), rng.standard_normal(c), rng.uniform(0.5, 2.0, c)]
    (pw, tw), (pb, tb), (prm, trm), (prv, trv) = [
        (pf.from_numpy(v.astype(dtype)), torch.from_numpy(v.astype(dtype))) for v in params]
    for p in (pw, pb, tw, tb):
        p.requires_grad_()
    py = F.batch_norm(px, prm, prv, pw, pb, training=training, momentum=0.3)
    ty = TF.batch_norm(tx, trm, trv, tw, tb, training=training, momentum=0.3)
    close(py, ty, dtype, "y")
    same_layout(py, ty, "y")
    close(prm, trm, dtype, "running_mean")
    close(prv, trv, dtype, "running_var")
    pg, tg = upstream(rng, shape, dtype, grad)
    if pg is None:
        (py * py).sum().backward()
        (ty * ty).sum().backward()
    else:
        py.backward(pg)
        ty.backward(tg)
    close(px.grad, tx.grad, dtype, "grad_input")
    same_layout(px.grad, tx.grad, "grad_input")
    close(pw.grad, tw.grad, dtype, "grad_weight")
    close(pb.grad, tb.grad, dtype, "grad_bias")


@pytest.mark.parametrize("training", [True, False])
def test_double_backward(rng, training):
    """create_graph: the composed backward's gradients and their gradients, channels last."""
    shape, c = (2, 5, 3, 4), 5
    px, tx = cl_pair(rng, shape, "float64")
    w, b = rng.uniform(0.5, 1.5, c), rng.standard_normal(c)
    rm, rv = rng.standard_normal(c), rng.uniform(0.5, 2.0, c)
    results = []
    for lib, x in ((pf, px), (torch, tx)):
        weight, bias = (lib.from_numpy(v.copy()).requires_grad_() for v in (w, b))
        y = lib.nn.functional.batch_norm(x, lib.from_numpy(rm.copy()), lib.from_numpy(rv.copy()), weight, bias,
                                         training=training)
        gx, = lib.autograd.grad((y ** 3).sum(), x, create_graph=True)
        gw, = lib.autograd.grad((gx ** 2).sum(), weight)
        results.append((gx, gw))
    (pgx, pgw), (tgx, tgw) = results
    close(pgx, tgx, "float64", "grad_input")
    same_layout(pgx, tgx, "grad_input")
    close(pgw, tgw, "float64", "grad of grad_input wrt weight")


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (1, 4, 1, 1), (1, 3, 1, 1, 1)])
def test_single_value_per_channel(rng, shape):
    """Eval normalizes with the running statistics; training refuses (as PyTorch) a batch with one
    value per channel."""
    px, tx = cl_pair(rng, shape, "float64")
    c = shape[1]
    prm, prv = pf.zeros(c, dtype=pf.float64), pf.ones(c, dtype=pf.float64)
    trm, trv = torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)
    close(F.batch_norm(px, prm, prv), TF.batch_norm(tx, trm, trv), "float64", "eval y")
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        F.batch_norm(px, prm, prv, training=True)


def test_channels_last_input_is_not_copied(rng):
    """The kernel reads the channels-last input itself: y is written in its layout, and a
    channels-last input's storage is never duplicated into a row-major one (the in-place relu of
    a view of y reaches y)."""
    px, tx = cl_pair(rng, (2, 6, 3, 5), "float32")
    with pf.no_grad():
        y = F.batch_norm(px, None, None, training=True)
    assert y.is_contiguous(memory_format=pf.channels_last) and not y.is_contiguous()
    ty = TF.batch_norm(tx.detach(), None, None, training=True)
    close(y, ty, "float32", "y")


@pytest.mark.parametrize("ndim", [4, 5])
@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("affine, track", [(True, True), (False, True), (True, False)])
def test_module_steps(rng, ndim, momentum, affine, track):
    """BatchNorm2d/3d over training steps then eval: outputs, gradients, running statistics."""
    shape = (3, 6, 4, 5) if ndim == 4 else (2, 6, 3, 4, 2)
    cls_p, cls_t = (nn.BatchNorm2d, torch.nn.BatchNorm2d) if ndim == 4 else (nn.BatchNorm3d, torch.nn.BatchNorm3d)
    mt = cls_t(6, momentum=momentum, affine=affine, track_running_stats=track).double()
    mp = cls_p(6, momentum=momentum, affine=affine, track_running_stats=track).double()
    if affine:
        with torch.no_grad():
            mt.weight.uniform_(0.5, 1.5)
            mt.bias.normal_()
    load_from_torch(mp, mt)
    for step in range(3):
        px, tx = cl_pair(rng, shape, "float64")
        py, ty = mp(px), mt(tx)
        close(py, ty, "float64", f"y, step {step}")
        same_layout(py, ty, f"y, step {step}")
        pg, tg = upstream(rng, shape, "float64", "channels_last")
        py.backward(pg)
        ty.backward(tg)
        close(px.grad, tx.grad, "float64", f"grad_input, step {step}")
        same_layout(px.grad, tx.grad, f"grad_input, step {step}")
        if affine:
            close(mp.weight.grad, mt.weight.grad, "float64", f"grad_weight, step {step}")
            close(mp.bias.grad, mt.bias.grad, "float64", f"grad_bias, step {step}")
        if track:
            close(mp.running_mean, mt.running_mean, "float64", f"running_mean, step {step}")
            close(mp.running_var, mt.running_var, "float64", f"running_var, step {step}")
    mp.eval()
    mt.eval()
    px, tx = cl_pair(rng, shape, "float64")
    py, ty = mp(px), mt(tx)
    close(py, ty, "float64", "eval y")
    same_layout(py, ty, "eval y")


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 8, 13, 11), (3, 16, 1, 5), (2, 37, 6, 6), (2, 5, 2, 3, 4)])
def test_bfloat16_input_float32_parameters(training, shape):
    """autocast's mixed batch norm on a channels-last bfloat16 activation, against PyTorch's
    float64 batch norm of the same values: bfloat16 results within one rounding, the float32
    ones (parameter gradients, running statistics) within float32 rounding."""
    rng = seeded_rng("BN_CL_TEST_SEED")
    c, mf = shape[1], fmt(torch, len(shape))
    x = torch.from_numpy((rng.standard_normal(shape) * 3 + 1).astype("float32")).bfloat16()
    w, b = (torch.from_numpy(rng.standard_normal(c).astype("float32")) for _ in range(2))
    rm, rv = torch.from_numpy(rng.standard_normal(c).astype("float32")), torch.rand(c) + 0.5
    g = torch.from_numpy(rng.standard_normal(shape).astype("float32")).bfloat16()
    tx, tw, tb = (v.double().requires_grad_() for v in (x, w, b))
    trm, trv = rm.double(), rv.double()
    ey = TF.batch_norm(tx, trm, trv, tw, tb, training=training)
    ey.backward(g.double())
    px = from_torch(x).contiguous(memory_format=fmt(pf, len(shape))).requires_grad_()
    pw, pb = (from_torch(v).requires_grad_() for v in (w, b))
    prm, prv = from_torch(rm), from_torch(rv)
    py = F.batch_norm(px, prm, prv, pw, pb, training=training)
    py.backward(from_torch(g).contiguous(memory_format=fmt(pf, len(shape))))
    assert py.dtype is pf.bfloat16 and px.grad.dtype is pf.bfloat16 and pw.grad.dtype is pf.float32
    reference = x.contiguous(memory_format=mf)
    same_layout(py, reference, "y")
    same_layout(px.grad, reference, "grad_input")
    assert_bf16_batch_norm_close([(py, ey), (px.grad, tx.grad), (pw.grad, tw.grad), (pb.grad, tb.grad),
                                   (prm, trm), (prv, trv)])


# ---- nn.Graph: the fused batch norms on channels-last activations ------------------------------


def build_model(lib, kind):
    """conv + bn + relu (then a head convolution), or ResNet's basic block: conv-bn-relu,
    conv-bn, + identity, relu (in place, as torchvision's)."""
    class ConvBNReLU(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = lib.nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn = lib.nn.BatchNorm2d(8)
            self.relu = lib.nn.ReLU(inplace=True)
            self.head = lib.nn.Conv2d(8, 8, 1)

        def forward(self, x):
            return self.head(self.relu(self.bn(self.conv(x))))

    class BasicBlock(lib.nn.Module):
        def __init__(self, channels=8):
            super().__init__()
            self.conv1 = lib.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn1 = lib.nn.BatchNorm2d(channels)
            self.conv2 = lib.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn2 = lib.nn.BatchNorm2d(channels)
            self.relu = lib.nn.ReLU(inplace=True)

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + x)

    return ConvBNReLU() if kind == "conv_bn_relu" else BasicBlock()


def models(kind, dtype, weights):
    """The plugflow model, its eager twin, and the torch model with the same weights, the
    convolution weights laid out as `weights` says (row-major or channels last: either way a
    channels-last input makes every activation channels last)."""
    mt = build_model(torch, kind).to(getattr(torch, dtype))
    mp = build_model(pf, kind)
    load_from_torch(mp, mt)
    mp = mp.to(getattr(pf, dtype))
    if weights == "channels_last":
        mt, mp = mt.to(memory_format=torch.channels_last), mp.to(memory_format=pf.channels_last)
    return mp, copy.deepcopy(mp), mt


def mse(out, target):
    """Mean squared error as a sum (whose backward expands the gradient: it reaches the network
    in the layout of out - target, channels last)."""
    return ((out - target) ** 2).sum() * (1.0 / out.numel())


class Train(nn.Graph):
    def __init__(self, model, lr):
        super().__init__()
        self.model = model
        self.add_optimizer(pf.optim.SGD(model.parameters(), lr=lr, momentum=0.9))

    def build(self, x, target):
        out = self.model(x)
        loss = mse(out, target)
        loss.backward()
        return loss, out


class Infer(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def graph_ops(graph):
    return graph._last.pass_reports[-1][2].node_ops()


def input_shape(kind):
    return (4, 3, 6, 5) if kind == "conv_bn_relu" else (4, 8, 6, 5)


@pytest.mark.parametrize("kind", ["conv_bn_relu", "basic_block"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_graph_training_fuses_and_matches_eager_and_torch(rng, kind, dtype):
    """Training steps on channels-last inputs (the graph's update takes row-major parameters:
    the weights stay row-major, the activations are channels last all the same)."""
    mp, eager, mt = models(kind, dtype, "contiguous")
    graph = Train(mp, lr=0.05)
    eager_opt = pf.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    torch_opt = torch.optim.SGD(mt.parameters(), lr=0.05, momentum=0.9)
    shape = input_shape(kind)
    for step in range(3):
        px, tx = cl_pair(rng, shape, dtype, -2.0, 2.0)
        # A channels-last target: the loss's gradient then reaches the network channels last.
        target = rng.standard_normal((shape[0], 8, *shape[2:])).astype(dtype)
        pt = pf.from_numpy(target.copy()).contiguous(memory_format=pf.channels_last)
        tt = torch.from_numpy(target.copy()).contiguous(memory_format=torch.channels_last)
        loss, out = graph(px.detach(), pt)
        eager_opt.zero_grad()
        eager_out = eager(px.detach())
        eager_loss = mse(eager_out, pt)
        eager_loss.backward()
        eager_opt.step()
        torch_opt.zero_grad()
        torch_out = mt(tx.detach())
        torch_loss = mse(torch_out, tt)
        torch_loss.backward()
        torch_opt.step()
        same_layout(out, torch_out, f"graph output, step {step}")
        same_layout(eager_out, torch_out, f"eager output, step {step}")
        for what, actual in [("graph", out), ("eager", eager_out)]:
            close(actual, torch_out, dtype, f"{what} output, step {step}")
        for what, actual in [("graph", loss), ("eager", eager_loss)]:
            close(actual, torch_loss, dtype, f"{what} loss, step {step}")
        for (name, p_graph), p_eager, p_torch in zip(mp.named_parameters(), eager.parameters(), mt.parameters()):
            close(p_graph, p_torch, dtype, f"graph {name}, step {step}")
            close(p_eager, p_torch, dtype, f"eager {name}, step {step}")
        for (name, b_graph), b_torch in zip(mp.named_buffers(), mt.buffers()):
            if b_graph.is_floating_point():
                close(b_graph, b_torch, dtype, f"graph {name}, step {step}")
    ops = graph_ops(graph)
    fused = 1 if kind == "conv_bn_relu" else 2
    assert ops.count("batch_norm_fused") == fused and "batch_norm" not in ops, ops
    assert ops.count("batch_norm_relu_backward") == fused and "batch_norm_backward" not in ops, ops
    assert "copy" not in ops, ops  # no layout conversion anywhere


@pytest.mark.parametrize("kind", ["conv_bn_relu", "basic_block"])
@pytest.mark.parametrize("weights", ["contiguous", "channels_last"])
def test_graph_inference_matches_torch(rng, kind, weights):
    """Eval graphs on channels-last inputs: the batch norms fold into row-major convolution
    weights (fold_conv_bn takes row-major weights: channels-last ones run the batch norm)."""
    mp, _, mt = models(kind, "float32", weights)
    with torch.no_grad():  # running statistics and affine parameters away from their 0/1 defaults
        for m in mt.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_()
    load_from_torch(mp, mt)
    mp.eval()
    mt.eval()
    graph = Infer(mp)
    for call in range(2):
        px, tx = cl_pair(rng, input_shape(kind), "float32", -2.0, 2.0)
        out = graph(px.detach())
        with torch.no_grad():
            expected = mt(tx.detach())
        with pf.no_grad():
            eager = mp(px.detach())
        same_layout(out, expected, f"graph output, call {call}")
        close(out, expected, "float32", f"graph output, call {call}")
        close(eager, expected, "float32", f"eager output, call {call}")
    ops = graph_ops(graph)
    folded = (1 if kind == "conv_bn_relu" else 2) if weights == "contiguous" else 0

    batch_norms = 1 if kind == "conv_bn_relu" else 2
    assert ops.count("fold_conv_bn") == folded and ops.count("batch_norm") == batch_norms - folded, ops


class AmpTrain(Train):
    def __init__(self, model, lr):
        super().__init__(model, lr)
        self.config.enable_amp(True, dtype=pf.bfloat16)


def test_bfloat16_amp_graph_training_matches_eager_autocast(rng):
    """A bfloat16 amp training graph of the residual block on channels-last bfloat16 inputs
    (the activations autocast would cast itself come out row-major): the fused bfloat16 batch
    norm kernels (+ relu, + add + relu, and their backward) over rows of channels round as the
    op chains do, so the graph follows eager autocast step for step."""
    mp, eager, _ = models("basic_block", "float32", "contiguous")
    graph = AmpTrain(mp, lr=0.05)
    eager_opt = pf.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    shape = input_shape("basic_block")
    for step in range(3):
        px = cl_pair(rng, shape, "float32", -2.0, 2.0)[0].detach().bfloat16()
        px = px.contiguous(memory_format=pf.channels_last)  # (bfloat16() returns a row-major copy)
        target = pf.from_numpy(rng.standard_normal(shape).astype("float32")).bfloat16()
        target = target.contiguous(memory_format=pf.channels_last)  # bfloat16 as out: no cast in the loss
        assert px.is_contiguous(memory_format=pf.channels_last) and not px.is_contiguous()
        loss, out = graph(px, target)
        eager_opt.zero_grad()
        with pf.autocast("cpu"):
            eager_out = eager(px)
            eager_loss = mse(eager_out, target)
        eager_loss.backward()
        eager_opt.step()
        assert out.is_contiguous(memory_format=pf.channels_last) and not out.is_contiguous()
        np.testing.assert_allclose(loss.float().item(), eager_loss.float().item(), rtol=1e-6, err_msg=f"step {step}")
        for (name, p_graph), p_eager in zip(mp.named_parameters(), eager.parameters()):
            np.testing.assert_allclose(p_graph.detach().numpy(), p_eager.detach().numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name}, step {step}")
    ops = graph_ops(graph)
    assert ops.count("batch_norm_fused") == 2 and ops.count("batch_norm_relu_backward") == 2, ops


@pytest.mark.parametrize("pool, args", [("adaptive_avg_pool2d", (2,)), ("adaptive_avg_pool2d", (1,)),
                                        ("avg_pool2d", (2, 2))])
def test_average_pooling_gradient_keeps_channels_last(rng, pool, args):
    """The gradient reaching a channels-last activation through average pooling is channels
    last, as PyTorch's, so the batch norm backward before it reads it as is. Pooled to 1x1 (a
    ResNet's head) PyTorch's is row-major (it follows the 1x1 output gradient, which is both);
    plugflow's stays channels last there too, which keeps a channels-last network's backward free
    of layout copies."""
    grads = []
    for lib, x in zip((pf, torch), cl_pair(rng, (2, 6, 4, 5), "float64")):
        h = x * 1.0  # an activation (not a leaf, whose .grad takes the leaf's layout anyway)
        h.register_hook(grads.append)
        (getattr(lib.nn.functional, pool)(h, *args) ** 2).sum().backward()
    close(grads[0], grads[1], "float64", "gradient")
    assert grads[0].is_contiguous(memory_format=pf.channels_last) and not grads[0].is_contiguous()
    if args != (1,):
        same_layout(grads[0], grads[1], "gradient")
