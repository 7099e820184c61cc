"""nn.Graph's fusion passes: each pass's guards (fused when it must, the graph untouched when it
must not, asserted on the compiled IR) and its numbers (the pass on and off give the same
results: float64 within 1e-10, float32 within float tolerance, for inference and for training
over several steps), then whole models with every pass on and with each pass off alone."""

import copy
import re

import numpy as np
import pytest

import plugflow as pf
import plugflow.nn as nn
import plugflow.nn.functional as F

from helpers import seeded_rng

PASSES = ("fuse_pad_conv", "fuse_conv_bn", "fuse_bias_act", "fuse_add_to_output", "fuse_model_update",
          "blocked_layout")
ALLOW = {"fuse_pad_conv": "allow_fuse_pad_conv", "fuse_conv_bn": "allow_fuse_conv_bn",
         "fuse_bias_act": "allow_fuse_bias_act", "fuse_add_to_output": "allow_fuse_add_to_output",
         "fuse_model_update": "allow_fuse_model_update_ops", "blocked_layout": "allow_blocked_layout"}
TOL = {pf.float64: dict(rtol=1e-10, atol=1e-12), pf.float32: dict(rtol=2e-5, atol=2e-5)}


class Infer(nn.Graph):
    def __init__(self, model, passes):
        super().__init__()
        self.model = model
        configure(self, passes)

    def build(self, *xs):
        return self.model(*xs)


class Train(nn.Graph):
    def __init__(self, model, opt, passes, loss_fn=None):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn or (lambda out, y: F.cross_entropy(out, y))
        self.add_optimizer(opt)
        configure(self, passes)

    def build(self, x, y):
        out = self.model(x)
        loss = self.loss_fn(out, y)
        loss.backward()
        return loss, out


def configure(graph, passes):
    for name in PASSES:
        getattr(graph.config, ALLOW[name])(name in passes)


def ops(graph):
    """The op of every node of the last compiled graph, after all passes."""
    return graph._last.pass_reports[-1][2].node_ops()


def report(graph, name):
    return "\n".join(r for n, r, _ in graph._last.pass_reports if n == name)


def assert_close(a, b, dtype, what=""):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **TOL[dtype], err_msg=what)


def check_inference(model, inputs, passes, dtype, calls=2):
    """The graph with `passes` on and the graph with them off give the same results."""
    model = model.to(dtype).eval()
    on, off = Infer(model, passes), Infer(model, ())
    for _ in range(calls):
        xs = [x.to(dtype) if x.is_floating_point() else x for x in inputs()]
        assert_close(on(*xs), off(*xs), dtype)
    return on, off


def check_training(model, make_opt, batches, passes, dtype, steps=3, loss_fn=None):
    """Training with `passes` on and off follows the same trajectory: losses, outputs,
    parameters and buffers after every step."""
    model = model.to(dtype)
    twin = copy.deepcopy(model)
    on = Train(model, make_opt(model.parameters()), passes, loss_fn)
    off = Train(twin, make_opt(twin.parameters()), (), loss_fn)
    for step in range(steps):
        x, y = batches()
        x = x.to(dtype)
        (loss_on, out_on), (loss_off, out_off) = on(x, y), off(x, y)
        assert_close(loss_on, loss_off, dtype, f"loss, step {step}")
        assert_close(out_on, out_off, dtype, f"output, step {step}")
        for (name, p_on), p_off in zip(model.named_parameters(), twin.parameters()):
            assert_close(p_on, p_off, dtype, f"{name}, step {step}")
        for (name, b_on), b_off in zip(model.named_buffers(), twin.buffers()):
            if b_on.is_floating_point():
                assert_close(b_on, b_off, dtype, f"{name}, step {step}")
    return on, off


def image_batches(rng, shape, classes):
    def make():
        return pf.from_numpy(rng.standard_normal(shape)), pf.from_numpy(rng.integers(0, classes, shape[0]))
    return make


# ---- fuse_pad_conv ------------------------------------------------------------------------------


class PadConv(nn.Module):
    """conv -> relu -> F.pad -> conv (-> pooled logits)."""

    def __init__(self, pad=(1, 1, 1, 1), mode="constant", value=0.0, kernel=3, padding=0, stride=1, groups=1,
                 extra=None):
        super().__init__()
        self.pad, self.mode, self.value, self.extra = pad, mode, value, extra
        self.c0 = nn.Conv2d(3, 4, 1)
        channels = 4 + (sum(pad[4:6]) if len(pad) > 4 else 0)  # a channel pad widens the conv's input
        self.c1 = nn.Conv2d(channels, 4, kernel, stride=stride, padding=padding, groups=groups)

    def forward(self, x):
        h = F.relu(self.c0(x))
        p = F.pad(h, self.pad, mode=self.mode, value=self.value) if self.mode == "constant" else \
            F.pad(h, self.pad, mode=self.mode)
        y = self.c1(p)
        if self.extra == "avg_pool":
            y = y + F.avg_pool2d(p, 3, 1, 1, count_include_pad=True)[:, :, 1:-1, 1:-1]
        elif self.extra == "second_conv":
            y = y + self.c1(p)
        return y.mean((2, 3))


@pytest.mark.parametrize("kwargs", [dict(), dict(padding=1), dict(pad=(2, 2, 1, 1), stride=2), dict(groups=2),
                                    dict(pad=(1, 1, 1, 1), kernel=1), dict(extra="second_conv")])
@pytest.mark.parametrize("dtype", [pf.float64, pf.float32])
def test_pad_conv_fused_same_numbers(kwargs, dtype):
    rng = seeded_rng(seed_plugflow=True)
    model = PadConv(**kwargs)
    batches = image_batches(rng, (2, 3, 6, 7), 4)
    on, off = check_inference(model, lambda: [batches()[0]], {"fuse_pad_conv"}, dtype)
    assert "fill" in ops(off) and "fill" not in ops(on) and "folded into" in report(on, "fuse_pad_conv")
    on, off = check_training(model, lambda ps: pf.optim.SGD(ps, lr=0.1, momentum=0.9), batches, {"fuse_pad_conv"},
                             dtype)
    # The pad's fill and copy are gone, and so is its backward crop (with two convolutions reading the
    # pad, the crop follows the sum of their input gradients and stays).
    assert ops(on).count("fill") == ops(off).count("fill") - 1
    crop_folded = "extra" not in kwargs
    assert ("crop" in report(on, "fuse_pad_conv")) == crop_folded
    assert ops(on).count("copy") == ops(off).count("copy") - 1 - crop_folded


@pytest.mark.parametrize("kwargs", [dict(mode="reflect"), dict(mode="replicate"), dict(mode="circular"),
                                    dict(value=1.0), dict(pad=(1, 2, 1, 1)), dict(pad=(1, 1, 0, 1)),
                                    dict(pad=(-1, -1, 0, 0)), dict(pad=(1, 1, 1, 1, 1, 1)),
                                    dict(extra="avg_pool")])
def test_pad_conv_guards(kwargs):
    rng = seeded_rng(seed_plugflow=True)
    model = PadConv(**kwargs)
    batches = image_batches(rng, (2, 3, 6, 7), 4)
    on, off = check_inference(model, lambda: [batches()[0]], {"fuse_pad_conv"}, pf.float64)
    assert report(on, "fuse_pad_conv") == "" and ops(on) == ops(off)
    on, off = check_training(model, lambda ps: pf.optim.SGD(ps, lr=0.1), batches, {"fuse_pad_conv"}, pf.float64,
                             steps=2)
    assert report(on, "fuse_pad_conv") == "" and ops(on) == ops(off)


def test_pad_conv_source_overwritten_before_the_conv_is_not_fused():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            h = x * 1.0
            p = F.pad(h, (1, 1, 1, 1))
            h.mul_(2.0)  # the pad copied h before this: the conv must not read h
            return self.c(p) + h.mean()
    rng = seeded_rng()
    on, off = check_inference(M(), lambda: [pf.from_numpy(rng.standard_normal((2, 3, 5, 5)))], {"fuse_pad_conv"},
                              pf.float64)
    assert report(on, "fuse_pad_conv") == "" and ops(on) == ops(off)


# ---- fuse_conv_bn ------------------------------------------------------------------------------


class ConvBN(nn.Module):
    """conv -> batch norm (-> relu), pooled to logits; `extra` breaks one guard."""

    def __init__(self, bias=False, affine=True, groups=1, extra=None):
        super().__init__()
        self.extra = extra
        self.conv = nn.Conv2d(4, 6, 3, padding=1, bias=bias, groups=groups)
        self.bn = nn.BatchNorm2d(6, affine=affine)

    def forward(self, x):
        y = self.conv(x)
        z = F.relu(self.bn(y))
        if self.extra == "conv_output_reused":
            z = z + y
        return z.mean((2, 3))


def perturb_bn_statistics(model, rng):
    """Running statistics and affine parameters away from their initial 0/1 (else folding them
    in is an identity a wrong fold could pass)."""
    with pf.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(pf.from_numpy(rng.standard_normal(m.num_features)))
                m.running_var.copy_(pf.from_numpy(rng.uniform(0.5, 2.0, m.num_features)))
                if m.affine:
                    m.weight.copy_(pf.from_numpy(rng.uniform(0.5, 1.5, m.num_features)))
                    m.bias.copy_(pf.from_numpy(rng.standard_normal(m.num_features)))


@pytest.mark.parametrize("kwargs", [dict(), dict(bias=True), dict(affine=False), dict(groups=2, bias=True)])
@pytest.mark.parametrize("dtype", [pf.float64, pf.float32])
def test_conv_bn_folded_for_inference_follows_eager_training(kwargs, dtype):
    rng = seeded_rng(seed_plugflow=True)
    model = ConvBN(**kwargs).to(dtype)
    perturb_bn_statistics(model, rng)
    batches = image_batches(rng, (2, 4, 5, 6), 6)
    on, off = check_inference(model, lambda: [batches()[0]], {"fuse_conv_bn"}, dtype)
    assert "fold_conv_bn" in ops(on) and "batch_norm" not in ops(on) and "batch_norm" in ops(off)
    assert "folded into" in report(on, "fuse_conv_bn")
    # Eager training changes the weights and the running statistics; the graph refolds them.
    opt = pf.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        model.train()
        x, y = batches()
        opt.zero_grad()
        F.cross_entropy(model(x.to(dtype)), y).backward()
        opt.step()
        model.eval()
        x = batches()[0].to(dtype)
        with pf.no_grad():
            expected = model(x)
        assert_close(on(x), expected, dtype)
        assert_close(off(x), expected, dtype)


@pytest.mark.parametrize("case", ["batch_norm_training", "conv_output_reused", "conv_output_is_an_output"])
def test_conv_bn_fold_guards(case):
    rng = seeded_rng(seed_plugflow=True)
    model = ConvBN(extra=case).double()
    perturb_bn_statistics(model, rng)
    x = pf.from_numpy(rng.standard_normal((2, 4, 5, 6)))

    class Both(nn.Graph):
        def __init__(self, passes):
            super().__init__()
            self.model = model
            configure(self, passes)

        def build(self, x):
            y = self.model.conv(x)
            return self.model.bn(y), y

    if case == "conv_output_is_an_output":
        model.eval()
        on, off = Both({"fuse_conv_bn"}), Both(())
        for a, b in zip(on(x), off(x)):
            assert_close(a, b, pf.float64)
    else:
        model.train(case == "batch_norm_training")  # an inference graph of a training-mode BN: batch statistics
        on, off = Infer(model, {"fuse_conv_bn"}), Infer(model, ())
        assert_close(on(x), off(x), pf.float64)
    assert "fold_conv_bn" not in ops(on) and "folded into" not in report(on, "fuse_conv_bn")


class BasicBlock(nn.Module):
    """ResNet's basic block: conv-bn-relu, conv-bn, + identity, relu (torchvision's, in place)."""

    def __init__(self, channels=4, inplace=True, tail="relu"):
        super().__init__()
        self.tail = tail
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=inplace)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + x
        return (self.relu(out) if self.tail == "relu" else pf.tanh(out)).mean((2, 3))


@pytest.mark.parametrize("inplace", [True, False])
@pytest.mark.parametrize("dtype", [pf.float64, pf.float32])
def test_bn_relu_fused_for_training(inplace, dtype):
    rng = seeded_rng(seed_plugflow=True)
    model = BasicBlock(inplace=inplace)
    batches = image_batches(rng, (3, 4, 5, 5), 4)
    on, off = check_training(model, lambda ps: pf.optim.SGD(ps, lr=0.1, momentum=0.9), batches, {"fuse_conv_bn"},
                             dtype)
    assert ops(on).count("batch_norm_fused") == 2 and "batch_norm" not in ops(on)
    assert ops(on).count("batch_norm_relu_backward") == 2 and ops(on).count("batch_norm_backward") == 0
    assert "batch norm + add + relu fused, and its backward" in report(on, "fuse_conv_bn")
    assert ops(on).count("relu_backward") == ops(off).count("relu_backward") - 2


def test_bn_relu_training_guards():
    """A batch norm followed by tanh, or whose output something else reads, stays as it is."""
    rng = seeded_rng(seed_plugflow=True)
    batches = image_batches(rng, (3, 4, 5, 5), 4)

    class Reused(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.bn(self.conv(x))
            return (F.relu(y) + y).mean((2, 3))

    for model in (BasicBlock(tail="tanh"), Reused()):
        on, off = check_training(model, lambda ps: pf.optim.SGD(ps, lr=0.1), batches, {"fuse_conv_bn"}, pf.float64,
                                 steps=2)
        fused = ops(on).count("batch_norm_fused")
        assert fused == (1 if isinstance(model, BasicBlock) else 0)
        assert ops(on).count("batch_norm") == ops(off).count("batch_norm") - fused


# ---- fuse_bias_act --------------------------------------------------------------------------------


ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
               "none": lambda x: x}


class LinearAct(nn.Module):
    """Linear + activation twice (2-D, or 3-D inputs through matmul), pooled to logits."""

    def __init__(self, act, reuse=False):
        super().__init__()
        self.act, self.reuse = ACTIVATIONS[act], reuse
        self.l1, self.l2 = nn.Linear(6, 8), nn.Linear(8, 4)

    def forward(self, x):
        h = self.l1(x)
        a = self.act(h)
        if self.reuse:  # the value before the activation is read again
            a = a + h
        out = self.l2(a)
        return out.mean(1) if out.dim() == 3 else out


def token_batches(rng, shape):
    return lambda: (pf.from_numpy(rng.standard_normal(shape)), pf.from_numpy(rng.integers(0, 4, shape[0])))


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh", "silu", "none"])
@pytest.mark.parametrize("dtype", [pf.float64, pf.float32])
@pytest.mark.parametrize("dims", [2, 3])
def test_bias_act_fused_into_linear(act, dtype, dims):
    rng = seeded_rng(seed_plugflow=True)
    batches = token_batches(rng, (5, 6) if dims == 2 else (3, 5, 6))
    on, off = check_inference(LinearAct(act), lambda: [batches()[0]], {"fuse_bias_act"}, dtype)
    assert ops(on).count("mm_fused") == 2 and "mm" not in ops(on)
    assert (act == "none" or act.split("_")[0] not in ops(on)) and act.split("_")[0] in ops(off) + ["none"]
    on, off = check_training(LinearAct(act), lambda ps: pf.optim.SGD(ps, lr=0.1, momentum=0.9), batches,
                             {"fuse_bias_act"}, dtype)
    assert ops(on).count("mm_fused") == 2
    assert act == "none" or act.split("_")[0] not in ops(on)
    # relu's backward reads its output; gelu's and silu's read the input, which mm_fused then keeps.
    keeps = act in ("gelu", "gelu_tanh", "silu")
    assert ("keeping the pre-activation" in report(on, "fuse_bias_act")) == keeps


def test_bias_act_linear_value_before_activation_read_again_is_kept():
    rng = seeded_rng(seed_plugflow=True)
    batches = token_batches(rng, (5, 6))
    on, off = check_inference(LinearAct("relu", reuse=True), lambda: [batches()[0]], {"fuse_bias_act"}, pf.float64)
    assert "bias + relu fused into mm (model.l1) (keeping the pre-activation)" in report(on, "fuse_bias_act")
    check_training(LinearAct("relu", reuse=True), lambda ps: pf.optim.SGD(ps, lr=0.1), batches, {"fuse_bias_act"},
                   pf.float64, steps=2)


def test_bias_act_guard_product_scaled_before_the_bias():
    """addmm with alpha 2 scales the product before adding the bias: left alone."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(pf.randn(6, 4)), nn.Parameter(pf.randn(4))

        def forward(self, x):
            return F.relu(pf.addmm(self.b, x, self.w, alpha=2.0))
    rng = seeded_rng(seed_plugflow=True)
    on, off = check_inference(Scaled(), lambda: [token_batches(rng, (5, 6))()[0]], {"fuse_bias_act"}, pf.float64)
    assert report(on, "fuse_bias_act") == "" and ops(on) == ops(off)


class ConvAct(nn.Module):
    def __init__(self, act, groups=1, bias=True, reuse=False):
        super().__init__()
        self.act, self.reuse = ACTIVATIONS[act], reuse
        self.conv = nn.Conv2d(4, 4, 3, padding=1, groups=groups, bias=bias)

    def forward(self, x):
        y = self.conv(x)
        z = self.act(y)
        if self.reuse:
            z = z * y
        return z.mean((2, 3))


@pytest.mark.parametrize("kwargs", [dict(act="relu"), dict(act="silu", groups=4), dict(act="gelu", bias=False)])
@pytest.mark.parametrize("dtype", [pf.float64, pf.float32])
def test_bias_act_fused_into_conv(kwargs, dtype):
    rng = seeded_rng(seed_plugflow=True)
    batches = image_batches(rng, (2, 4, 5, 6), 4)
    on, off = check_inference(ConvAct(**kwargs), lambda: [batches()[0]], {"fuse_bias_act"}, dtype)
    assert ops(on).count("conv2d_fused") == 1 and "conv2d" not in ops(on)
    on, off = check_training(ConvAct(**kwargs), lambda ps: pf.optim.SGD(ps, lr=0.1), batches, {"fuse_bias_act"},
                             dtype)
    # In training only relu joins a convolution (gelu's and silu's backward read the input).
    assert ops(on).count("conv2d_fused") == (kwargs["act"] == "relu")


def test_bias_act_conv_guard_value_before_activation_read_again():
    rng = seeded_rng(seed_plugflow=True)
    batches = image_batches(rng, (2, 4, 5, 6), 4)
    on, off = check_inference(ConvAct("relu", reuse=True), lambda: [batches()[0]], {"fuse_bias_act"}, pf.float64)
    assert report(on, "fuse_bias_act") == "" and ops(on) == ops(off)


# ---- fuse_add_to_output ----------------------------------------------------------------------------


class Residual(nn.Module):
    """y = act(layer(x) + z) with z the block's input (or a guard-breaking variant)."""

    def __init__(self, kind="conv", groups=1, act="relu", variant=None):
        super().__init__()
        self.kind, self.act, self.variant = kind, ACTIVATIONS[act], variant
        self.layer = nn.Conv2d(4, 4, 3, padding=1, groups=groups) if kind == "conv" else nn.Linear(4, 4, bias=False)
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        if self.kind == "linear":
            x = x.mean((2, 3))
        h = x * 1.5
        z = x + 1.0
        y = self.layer(h)
        if self.variant == "operand_overwritten":
            h.mul_(2.0)  # the layer read h before: the fused op would read the new values
            z = z + h
        if self.variant == "alpha":
            s = pf.add(y, z, alpha=2.0)
        elif self.variant == "broadcast":
            s = y + z[:1]
        elif self.variant == "addend_in_place":
            z += y  # the sum over the addend, which is read again below
            s = z
        else:
            s = z + y
        s = self.act(s)
        out = self.head(s.mean((2, 3)) if s.dim() == 4 else s)
        return out + z.mean() if self.variant == "addend_in_place" else out


@pytest.mark.parametrize("kwargs", [dict(), dict(groups=2), dict(groups=4, act="none"), dict(kind="linear"),
                                    dict(kind="linear", act="gelu")])
@pytest.mark.parametrize("dtype", [pf.float64, pf.float32])
def test_add_fused_into_output(kwargs, dtype):
    rng = seeded_rng(seed_plugflow=True)
    batches = image_batches(rng, (2, 4, 5, 6), 4)
    fused_op = "conv2d_fused" if kwargs.get("kind", "conv") == "conv" else "mm_fused"
    on, off = check_inference(Residual(**kwargs), lambda: [batches()[0]], {"fuse_add_to_output"}, dtype)
    assert ops(on).count(fused_op) == 1 and ops(on).count("add") == ops(off).count("add") - 1
    assert "residual add" in report(on, "fuse_add_to_output")
    on, off = check_training(Residual(**kwargs), lambda ps: pf.optim.SGD(ps, lr=0.1, momentum=0.9), batches,
                             {"fuse_add_to_output"}, dtype)
    assert ops(on).count(fused_op) == 1


@pytest.mark.parametrize("variant", ["operand_overwritten", "alpha", "broadcast"])
def test_add_to_output_guards(variant):
    rng = seeded_rng(seed_plugflow=True)
    batches = image_batches(rng, (2, 4, 5, 6), 4)
    on, off = check_inference(Residual(variant=variant), lambda: [batches()[0]], {"fuse_add_to_output"}, pf.float64)
    assert report(on, "fuse_add_to_output") == "" and ops(on) == ops(off)


def test_add_to_output_addend_read_later():
    """The addend is read again after the add (an in-place add into it): the fused op leaves it as
    the add did."""
    rng = seeded_rng(seed_plugflow=True)
    batches = image_batches(rng, (2, 4, 5, 6), 4)
    on, off = check_inference(Residual(variant="addend_in_place"), lambda: [batches()[0]], {"fuse_add_to_output"},
                              pf.float64)
    assert "conv2d_fused" in ops(on)
    check_training(Residual(variant="addend_in_place"), lambda ps: pf.optim.SGD(ps, lr=0.1), batches,
                   {"fuse_add_to_output"}, pf.float64, steps=2)


# ---- all passes ---------------------------------------------------------------------------------------


class Net(nn.Module):
    """What every pass looks for: a zero pad before a conv, conv-bn-relu, a residual block, Linear + GELU."""

    def __init__(self):
        super().__init__()
        # 16 channels: blocked_layout's float32 activations (a multiple of 16).
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.block = BasicBlock(16)
        self.conv = nn.Conv2d(16, 16, 3, groups=2)
        self.fc1, self.fc2 = nn.Linear(16, 8), nn.Linear(8, 5)

    def forward(self, x):
        h = self.stem(F.pad(x, (1, 1, 1, 1)))
        h = F.relu(self.conv(F.pad(h, (1, 1, 1, 1))) + h)
        h = self.block.relu(self.block.bn1(self.block.conv1(h)))
        h = self.block.bn2(self.block.conv2(h)) + h
        return self.fc2(F.gelu(self.fc1(F.relu(h).mean((2, 3)))))


@pytest.mark.parametrize("passes", [(name,) for name in PASSES] + [PASSES])
@pytest.mark.parametrize("dtype", [pf.float64, pf.float32])
def test_each_pass_alone_and_all_match_eager(passes, dtype):
    rng = seeded_rng(seed_plugflow=True)
    model = Net()
    perturb_bn_statistics(model, rng)
    batches = image_batches(rng, (2, 3, 6, 6), 5)
    make_opt = lambda ps: pf.optim.SGD(ps, lr=0.05, momentum=0.9)
    on, _ = check_training(model, make_opt, batches, set(passes), dtype, steps=3)
    model.eval()
    on, _ = check_inference(model, lambda: [batches()[0]], set(passes), dtype)
    x = batches()[0].to(dtype)
    with pf.no_grad():
        assert_close(on(x), model(x), dtype)
    # Eager training of the same model, then the graph again.
    model.train()
    twin = copy.deepcopy(model)
    eager_opt, twin_opt = make_opt(model.parameters()), make_opt(twin.parameters())
    graph = Train(twin, twin_opt, set(passes))
    for _ in range(2):
        x, y = batches()
        eager_opt.zero_grad()
        loss = F.cross_entropy(model(x.to(dtype)), y)
        loss.backward()
        eager_opt.step()
        assert_close(graph(x.to(dtype), y)[0], loss, dtype)
        for (name, a), b in zip(model.named_parameters(), twin.parameters()):
            assert_close(b, a, dtype, name)


# ---- blocked_layout ---------------------------------------------------------------------------


class BlockedNet(nn.Module):
    """A small ResNet: strided stem, a basic block, a projection block (1x1 stride-2 shortcut),
    then a head that pools (`pool`) or flattens the feature map (`flatten`: a view of a
    convolution's output read by a Linear); `features` also returns the last feature map."""

    def __init__(self, width=16, head="pool", hw=(9, 7), features=False):
        super().__init__()
        self.head, self.features = head, features
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(inplace=True))
        self.block = BasicBlock(width)
        self.down = nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(2 * width), nn.ReLU(inplace=True),
                                  nn.Conv2d(2 * width, 2 * width, 3, padding=1, bias=False), nn.BatchNorm2d(2 * width))
        self.shortcut = nn.Sequential(nn.Conv2d(width, 2 * width, 1, stride=2, bias=False), nn.BatchNorm2d(2 * width))
        h, w = (hw[0] + 1) // 2, (hw[1] + 1) // 2
        h, w = (h + 1) // 2, (w + 1) // 2
        self.fc = nn.Linear(2 * width * (h * w if head == "flatten" else 1), 5)

    def forward(self, x):
        h = self.stem(x)
        b = self.block
        h = b.relu(b.bn2(b.conv2(b.relu(b.bn1(b.conv1(h))))) + h)
        h = F.relu(self.down(h) + self.shortcut(h))
        out = self.fc(h.flatten(1) if self.head == "flatten" else h.mean((2, 3)))
        return (out, h) if self.features else out


def blocked_report(graph):
    return report(graph, "blocked_layout")


@pytest.mark.parametrize("head", ["pool", "flatten"])
@pytest.mark.parametrize("fusions", [False, True])
def test_blocked_layout_training_same_numbers(head, fusions):
    """Channel-blocked activations give the row-major graph's losses, outputs, parameters and
    running statistics step after step (float32; odd image sizes, a strided stem, a projection
    shortcut), with the fusion passes off and on."""
    rng = seeded_rng(seed_plugflow=True)
    model = BlockedNet(head=head)
    perturb_bn_statistics(model, rng)
    batches = image_batches(rng, (3, 3, 9, 7), 5)
    passes = {"blocked_layout"} | ({"fuse_conv_bn", "fuse_add_to_output", "fuse_bias_act"} if fusions else set())
    on, off = check_training(model, lambda ps: pf.optim.SGD(ps, lr=0.05, momentum=0.9), batches, passes, pf.float32,
                             steps=3)
    text = blocked_report(on)
    assert "kept channel-blocked (nChw16c)" in text, text
    # Every conversion is a copy node; the flattened feature map is read through a view (a Linear
    # reads a row-major copy) and its gradient written by the view's backward (converted back).
    conversions = int(re.search(r"(\d+) conversions for other ops", text).group(1))
    assert ops(on).count("copy") == ops(off).count("copy") + conversions
    assert conversions >= (2 if head == "flatten" else 0)
    assert blocked_report(off) == ""


def test_blocked_layout_inference_and_eager_agree():
    """An inference graph (batch norms folded into the convolutions) with blocked activations,
    and eager training of the same model afterwards, agree with the row-major results."""
    rng = seeded_rng(seed_plugflow=True)
    model = BlockedNet()
    perturb_bn_statistics(model, rng)
    model.eval()
    on, _ = check_inference(model, lambda: [pf.from_numpy(rng.standard_normal((2, 3, 9, 7)))],
                            {"blocked_layout", "fuse_conv_bn"}, pf.float32)
    assert "kept channel-blocked" in blocked_report(on)
    x = pf.from_numpy(rng.standard_normal((2, 3, 9, 7))).float()
    with pf.no_grad():
        assert_close(on(x), model(x), pf.float32)


@pytest.mark.parametrize("case", ["width12", "float64", "channels_last", "off"])
def test_blocked_layout_guards(case):
    """No channel-blocked buffer where the layout cannot hold the value (channels not a multiple
    of 16, float64, channels-last activations) or the pass is off; results as row-major."""
    rng = seeded_rng(seed_plugflow=True)
    model = BlockedNet(width=12 if case == "width12" else 16)  # 12 and 24 channels
    dtype = pf.float64 if case == "float64" else pf.float32
    batches = image_batches(rng, (2, 3, 9, 7), 5)
    passes = set() if case == "off" else {"blocked_layout"}
    model = model.to(dtype)
    twin = copy.deepcopy(model)
    on = Train(model, pf.optim.SGD(model.parameters(), lr=0.05), passes)
    off = Train(twin, pf.optim.SGD(twin.parameters(), lr=0.05), ())
    if case == "channels_last":
        on.config.set_memory_format(pf.channels_last)
        off.config.set_memory_format(pf.channels_last)
    for _ in range(2):
        x, y = batches()
        assert_close(on(x.to(dtype), y)[0], off(x.to(dtype), y)[0], dtype)
    assert blocked_report(on) == ""
    assert all("blocked_inputs" not in line and "blocked_outputs" not in line
               for line in on._last.pass_reports[-1][2].text().splitlines())


def test_blocked_layout_graph_outputs_stay_row_major():
    """A feature map the graph returns is row-major for the caller (only the graph's own
    temporaries are blocked), equal to the eager model's."""
    rng = seeded_rng(seed_plugflow=True)
    model = BlockedNet(features=True)
    twin = copy.deepcopy(model)

    class Features(nn.Graph):
        def __init__(self, passes):
            super().__init__()
            self.model = twin
            configure(self, passes)

        def build(self, x):
            return self.model(x)

    graph = Features({"blocked_layout", "fuse_conv_bn"})
    x = pf.from_numpy(rng.standard_normal((2, 3, 9, 7))).float()
    logits, feats = graph(x)
    ref_logits, ref_feats = model(x)
    assert "kept channel-blocked" in blocked_report(graph)
    assert feats.is_contiguous()
    assert_close(feats, ref_feats, pf.float32)
    assert_close(logits, ref_logits, pf.float32)


class RandomConvNet(nn.Module):
    """A random CNN for blocked_layout: convolutions of random widths (multiples of 16 or not),
    kernels, strides and groups, batch norms, ReLUs, residual adds where shapes allow, pooling,
    and a pooled or flattened head."""

    def __init__(self, rng, hw):
        super().__init__()
        self.layers = nn.ModuleList()
        self.kinds = []
        c, h, w = 3, hw[0], hw[1]
        for _ in range(int(rng.integers(3, 7))):
            kind = rng.choice(["conv", "conv", "conv_bn_relu", "residual", "pool"])
            if kind == "pool" and min(h, w) >= 4:
                self.layers.append(nn.MaxPool2d(2) if rng.random() < 0.5 else nn.AvgPool2d(2))
                h, w = h // 2, w // 2
            elif kind == "residual" and c % 16 == 0:
                self.layers.append(BasicBlock(c, inplace=bool(rng.random() < 0.5)))
                self.kinds.append("residual")
                continue
            else:
                out = int(rng.choice([16, 32, 24, 48]))
                k = int(rng.choice([1, 3]))
                stride = int(rng.choice([1, 2])) if min(h, w) >= 4 else 1
                groups = 2 if c % 2 == 0 and out % 2 == 0 and rng.random() < 0.2 else 1
                conv = nn.Conv2d(c, out, k, stride=stride, padding=k // 2, groups=groups, bias=bool(rng.random() < 0.5))
                layer = nn.Sequential(conv, nn.BatchNorm2d(out), nn.ReLU()) if kind == "conv_bn_relu" else conv
                self.layers.append(layer)
                c, h, w = out, (h - 1) // stride + 1, (w - 1) // stride + 1
            self.kinds.append("plain")
        self.flatten = bool(rng.random() < 0.5)
        self.fc = nn.Linear(c * h * w if self.flatten else c, 4)

    def forward(self, x):
        for kind, layer in zip(self.kinds, self.layers):
            if kind == "residual":  # BasicBlock pools its output: use its layers
                out = layer.relu(layer.bn1(layer.conv1(x)))
                x = layer.relu(layer.bn2(layer.conv2(out)) + x)
            else:
                x = layer(x)
        return self.fc(x.flatten(1) if self.flatten else x.mean((2, 3)))


@pytest.mark.parametrize("seed", range(8))
def test_blocked_layout_random_networks(seed):
    """Random CNNs train to the same numbers with blocked_layout on (with every other pass) and
    with every pass off."""
    rng = np.random.default_rng(1000 + seed)
    pf.manual_seed(seed)
    hw = (int(rng.integers(5, 13)), int(rng.integers(5, 13)))
    model = RandomConvNet(rng, hw)
    batches = image_batches(rng, (int(rng.integers(1, 4)), 3, *hw), 4)
    check_training(model, lambda ps: pf.optim.SGD(ps, lr=0.02, momentum=0.9), batches, set(PASSES), pf.float32,
                   steps=2)


# ---- fuse_model_update ------------------------------------------------------------------------


UPDATE_OPTIMIZERS = {
    "sgd": lambda ps: pf.optim.SGD(ps, lr=0.05),
    "sgd_momentum": lambda ps: pf.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3),
    "sgd_nesterov_maximize": lambda ps: pf.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, maximize=True),
    "adam": lambda ps: pf.optim.Adam(ps, lr=1e-2, weight_decay=1e-3),
    "adamw_amsgrad": lambda ps: pf.optim.AdamW(ps, lr=1e-2, amsgrad=True, weight_decay=0.1),
}


def small_mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def mlp_batches(rng, n=8):
    return lambda: (pf.from_numpy(rng.standard_normal((n, 6))), pf.from_numpy(rng.integers(0, 3, n)))


def adam_two_groups(model):
    ps = list(model.parameters())
    return pf.optim.Adam([{"params": ps[:2], "lr": 1e-3}, {"params": ps[2:]}], lr=1e-2)


@pytest.mark.parametrize("opt_name", list(UPDATE_OPTIMIZERS) + ["two_groups"])
@pytest.mark.parametrize("dtype", [pf.float64, pf.float32])
def test_model_update_fused_is_bit_identical(opt_name, dtype):
    rng = seeded_rng(seed_plugflow=True)
    model = small_mlp().to(dtype)
    twin = copy.deepcopy(model)
    make = (lambda m: adam_two_groups(m)) if opt_name == "two_groups" else \
        (lambda m: UPDATE_OPTIMIZERS[opt_name](m.parameters()))
    opt_on, opt_off = make(model), make(twin)
    sched_on = pf.optim.lr_scheduler.StepLR(opt_on, 1, gamma=0.5)
    sched_off = pf.optim.lr_scheduler.StepLR(opt_off, 1, gamma=0.5)
    on, off = Train(model, opt_on, {"fuse_model_update"}), Train(twin, opt_off, ())
    batches = mlp_batches(rng)
    for step in range(4):
        x, y = batches()
        on(x.to(dtype), y)
        off(x.to(dtype), y)
        sched_on.step()
        sched_off.step()
        for (name, a), b in zip(model.named_parameters(), twin.parameters()):
            assert np.array_equal(a.detach().numpy(), b.detach().numpy()), f"{name} differs at step {step}"
    check_update_runs(on, opt_on)


def check_update_runs(graph, opt):
    """Every parameter is updated once: by a fused node tagged with its parameters, or alone;
    something was fused."""
    tags = [t for t in graph._last.pass_reports[-1][2].node_tags() if t and not t.endswith(".step")]
    covered = sorted(t.split(".params=")[0] + f".param{i}" for t in tags if ".params=" in t
                     for i in t.split("=")[1].split(","))
    alone = sorted(t for t in tags if ".params=" not in t)
    everything = sorted(f"opt0.group{g}.param{i}" for g, group in enumerate(opt.param_groups)
                        for i in range(len(group["params"])))
    assert covered and sorted(covered + alone) == everything, tags
    single = "sgd_step_" if isinstance(opt, pf.optim.SGD) else "adam_step_"
    assert ops(graph).count(single) == len(alone)
    assert ops(graph).count("multi_" + single) == sum(".params=" in t for t in tags)


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adam"])
def test_model_update_per_parameter_state_after_partial_eager_steps(opt_name):
    """Eager steps that update only some parameters leave Adam step counts (and SGD momentum
    buffers) that differ per parameter; the fused update keeps each parameter's own."""
    rng = seeded_rng(seed_plugflow=True)
    model = small_mlp().double()
    twin = copy.deepcopy(model)
    opt_on, opt_off = UPDATE_OPTIMIZERS[opt_name](model.parameters()), UPDATE_OPTIMIZERS[opt_name](twin.parameters())
    batches = mlp_batches(rng)
    eager_batches = [batches() for _ in range(2)]
    for m, opt in ((model, opt_on), (twin, opt_off)):
        for p in m[4].parameters():
            p.requires_grad_(False)  # the last layer sits out the eager steps
        for x, y in eager_batches:
            opt.zero_grad()
            F.cross_entropy(m(x.double()), y).backward()
            opt.step()
        for p in m[4].parameters():
            p.requires_grad_(True)
    on, off = Train(model, opt_on, {"fuse_model_update"}), Train(twin, opt_off, ())
    for step in range(3):
        x, y = batches()
        on(x.double(), y)
        off(x.double(), y)
        for (name, a), b in zip(model.named_parameters(), twin.parameters()):
            assert np.array_equal(a.detach().numpy(), b.detach().numpy()), f"{name} differs at step {step}"
    if opt_name == "adam":
        steps = [opt_on.state[p]["step"].item() for p in model.parameters()]
        assert steps == [5.0] * 4 + [3.0] * 2
    assert "updates fused into" in report(on, "fuse_model_update")


def test_model_update_guard_mixed_dtypes_in_a_group():
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(6, 3), nn.Linear(6, 3).double()

        def forward(self, x):
            return self.a(x) + self.b(x.double()).float()
    rng = seeded_rng(seed_plugflow=True)
    model = Mixed()
    g = Train(model, pf.optim.SGD(model.parameters(), lr=0.1), {"fuse_model_update"})
    x, y = mlp_batches(rng)()
    g(x.float(), y)
    assert "not fused (parameters of several dtypes or devices)" in report(g, "fuse_model_update")
    assert ops(g).count("sgd_step_") == 4 and "multi_sgd_step_" not in ops(g)


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adam"])
def test_model_update_keeps_the_scheduled_peak_memory(opt_name):
    """Merged updates do not keep gradients alive past the graph's peak of live temporaries:
    the plan's peak is the one of the unfused, scheduled updates, and some updates merge."""
    rng = seeded_rng(seed_plugflow=True)
    model = Net()
    twin = copy.deepcopy(model)
    on = Train(model, UPDATE_OPTIMIZERS[opt_name](model.parameters()), {"fuse_model_update"})
    off = Train(twin, UPDATE_OPTIMIZERS[opt_name](twin.parameters()), ())
    x, y = image_batches(rng, (4, 3, 8, 8), 5)()
    on(x.float(), y)
    off(x.float(), y)
    assert on._last.plan.peak_live_bytes <= off._last.plan.peak_live_bytes
    check_update_runs(on, on._optimizers[0][0])
