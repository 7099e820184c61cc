"""Eager mixed precision against PyTorch 1.13: the autocast API and state, the CPU op lists (each
op's output dtype and values under torch.autocast("cpu", torch.bfloat16)), nesting and
enabled=False regions, the weight-cast cache, gradients through the casts, custom_fwd/bwd,
ResNet- and BERT-style models, and GradScaler with its kernels."""

import os

import numpy as np
import pytest
import torch

import plugflow as pf
import plugflow.nn as nn
import plugflow.nn.functional as F

from helpers import from_torch, to_torch

BF16_TOL = dict(rtol=2e-2, atol=2e-2)
# Fresh random inputs every run: a failure names the seed, and PF_AMP_SEED=<seed> replays it.
AMP_SEED = int(os.environ.get("PF_AMP_SEED", np.random.SeedSequence().entropy % 2**32))


def rng(stream):
    """The run's generator for one input stream (torch and plugflow draw the same values)."""
    return np.random.default_rng([AMP_SEED, stream])


def close(a, b, rtol, atol):
    """plugflow tensor a against torch tensor b: same dtype name, shape and values."""
    seed = f"PF_AMP_SEED={AMP_SEED}"
    assert repr(a.dtype).split(".")[-1] == repr(b.dtype).split(".")[-1], (a.dtype, b.dtype, seed)
    assert tuple(a.shape) == tuple(b.shape), seed
    torch.testing.assert_close(to_torch(a).double(), b.detach().double(), rtol=rtol, atol=atol,
                               msg=lambda m: f"{m}\n{seed}")


# ---- state and API ---------------------------------------------------------------------------------

def test_defaults_match_torch():
    assert pf.get_autocast_cpu_dtype() is pf.bfloat16 and torch.get_autocast_cpu_dtype() is torch.bfloat16
    assert pf.get_autocast_gpu_dtype() is pf.float16 and torch.get_autocast_gpu_dtype() is torch.float16
    assert pf.is_autocast_cpu_enabled() is False and pf.is_autocast_enabled() is False
    assert pf.is_autocast_cache_enabled() is True
    assert pf.cpu.amp.autocast().fast_dtype is pf.bfloat16
    assert pf.cuda.amp.autocast.__init__.__defaults__[1] is pf.float16


def test_region_sets_and_restores_state():
    with pf.autocast("cpu"):
        assert pf.is_autocast_cpu_enabled()
        assert not pf.is_autocast_enabled()
        with pf.autocast("cpu", enabled=False):
            assert not pf.is_autocast_cpu_enabled()
            assert (pf.ones(2, 2) @ pf.ones(2, 2)).dtype is pf.float32
        assert pf.is_autocast_cpu_enabled()
        assert (pf.ones(2, 2) @ pf.ones(2, 2)).dtype is pf.bfloat16
        with pf.autocast("cpu", cache_enabled=False):
            assert not pf.is_autocast_cache_enabled()
        assert pf.is_autocast_cache_enabled()
    assert not pf.is_autocast_cpu_enabled()
    assert (pf.ones(2, 2) @ pf.ones(2, 2)).dtype is pf.float32


def test_region_restores_state_on_error():
    with pytest.raises(ValueError):
        with pf.autocast("cpu"):
            raise ValueError("boom")
    assert not pf.is_autocast_cpu_enabled()
    assert pf.autocast_increment_nesting() == 1 and pf.autocast_decrement_nesting() == 0


def test_decorator():
    @pf.autocast("cpu")
    def f(x):
        assert pf.is_autocast_cpu_enabled()
        return x @ x

    assert f(pf.ones(3, 3)).dtype is pf.bfloat16
    assert not pf.is_autocast_cpu_enabled()

    @pf.cpu.amp.autocast()
    def g(x):
        return F.linear(x, x)

    assert g(pf.ones(3, 3)).dtype is pf.bfloat16


def test_bad_arguments_like_torch():
    with pytest.raises(RuntimeError, match="must be 'cuda' or 'cpu'"):
        pf.autocast("xla")
    with pytest.raises(RuntimeError, match="must be 'cuda' or 'cpu'"):
        torch.autocast("xla")
    for fw in (pf, torch):  # float16 on the CPU: a warning, then the dtype setter refuses it
        with pytest.warns(UserWarning, match="CPU Autocast only supports dtype of torch.bfloat16"):
            region = fw.autocast("cpu", dtype=fw.float16)
        assert region._enabled is False
        with pytest.raises(RuntimeError, match="AutocastCPU only support Bfloat16"):
            with region:
                pass
        assert not fw.is_autocast_cpu_enabled()
    with pytest.raises(RuntimeError, match="AutocastCPU only support Bfloat16"):
        pf.set_autocast_cpu_dtype(pf.float32)


@pytest.mark.skipif(pf.cuda.is_available(), reason="checks the behaviour without a CUDA device")
def test_cuda_region_without_cuda_disables_itself():
    for fw in (pf, torch):
        with pytest.warns(UserWarning, match="CUDA is not available. Disabling"):
            region = fw.autocast("cuda")
        with region:
            assert not fw.is_autocast_enabled()
            assert (fw.ones(2, 2) @ fw.ones(2, 2)).dtype is fw.float32


def test_state_is_per_thread():
    import threading
    seen = []
    with pf.autocast("cpu"):
        t = threading.Thread(target=lambda: seen.append((pf.is_autocast_cpu_enabled(),
                                                          (pf.ones(2, 2) @ pf.ones(2, 2)).dtype)))
        t.start()
        t.join()
    assert seen == [(False, pf.float32)]


# ---- the CPU op lists ---------------------------------------------------------------------------------

def _x(fw, *shape, seed=0):
    t = torch.from_numpy(rng(seed).standard_normal(shape).astype("float32"))
    return t if fw is torch else from_torch(t)


def _fns(fw):
    nnf = fw.nn.functional
    target = (fw.arange(4) % 3)
    return {
        # lower precision
        "conv2d": lambda d: nnf.conv2d(_x(fw, 2, 3, 8, 8).to(d), _x(fw, 4, 3, 3, 3, seed=1).to(d), _x(fw, 4).to(d),
                                       padding=1),
        "conv1d": lambda d: nnf.conv1d(_x(fw, 2, 3, 8).to(d), _x(fw, 4, 3, 3, seed=1).to(d)),
        "mm": lambda d: fw.mm(_x(fw, 4, 5).to(d), _x(fw, 5, 3, seed=1).to(d)),
        "bmm": lambda d: fw.bmm(_x(fw, 2, 4, 5).to(d), _x(fw, 2, 5, 3, seed=1).to(d)),
        "matmul": lambda d: fw.matmul(_x(fw, 2, 4, 5).to(d), _x(fw, 5, 3, seed=1).to(d)),
        "tensor_matmul": lambda d: _x(fw, 4, 5).to(d) @ _x(fw, 5, 3, seed=1).to(d),
        "addmm": lambda d: fw.addmm(_x(fw, 4, 3, seed=2).to(d), _x(fw, 4, 5).to(d), _x(fw, 5, 3, seed=1).to(d)),
        "baddbmm": lambda d: fw.baddbmm(_x(fw, 2, 4, 3, seed=2).to(d), _x(fw, 2, 4, 5).to(d),
                                        _x(fw, 2, 5, 3, seed=1).to(d)),
        "addbmm": lambda d: fw.addbmm(_x(fw, 4, 3, seed=2).to(d), _x(fw, 2, 4, 5).to(d), _x(fw, 2, 5, 3, seed=1).to(d)),
        "linear": lambda d: nnf.linear(_x(fw, 4, 5).to(d), _x(fw, 3, 5, seed=1).to(d), _x(fw, 3, seed=2).to(d)),
        "linear_3d": lambda d: nnf.linear(_x(fw, 2, 4, 5).to(d), _x(fw, 3, 5, seed=1).to(d), _x(fw, 3).to(d)),
        "einsum": lambda d: fw.einsum("ij,jk->ik", _x(fw, 4, 5).to(d), _x(fw, 5, 3, seed=1).to(d)),
        "tensordot": lambda d: fw.tensordot(_x(fw, 4, 5).to(d), _x(fw, 5, 3, seed=1).to(d), 1),
        # float32
        "conv_transpose2d": lambda d: nnf.conv_transpose2d(_x(fw, 2, 3, 5, 5).to(d), _x(fw, 3, 4, 3, 3, seed=1).to(d)),
        "conv_transpose1d": lambda d: nnf.conv_transpose1d(_x(fw, 2, 3, 5).to(d), _x(fw, 3, 4, 3, seed=1).to(d)),
        "prod": lambda d: (_x(fw, 6) * 0.5 + 1).to(d).prod(),
        "cdist": lambda d: fw.cdist(_x(fw, 4, 3).to(d), _x(fw, 5, 3, seed=1).to(d)),
        "trace": lambda d: fw.trace(_x(fw, 4, 4).to(d)),
        "reflect_pad": lambda d: nnf.pad(_x(fw, 1, 2, 4, 4).to(d), (1, 1, 1, 1), mode="reflect"),
        "replicate_pad": lambda d: nnf.pad(_x(fw, 1, 2, 4, 4).to(d), (1, 1, 1, 1), mode="replicate"),
        "cross_entropy": lambda d: nnf.cross_entropy(_x(fw, 4, 3).to(d), target),
        "nll_loss": lambda d: nnf.nll_loss(nnf.log_softmax(_x(fw, 4, 3), 1).to(d), target),
        "mse_loss": lambda d: nnf.mse_loss(_x(fw, 4, 3).to(d), _x(fw, 4, 3, seed=1).to(d)),
        "l1_loss": lambda d: nnf.l1_loss(_x(fw, 4, 3).to(d), _x(fw, 4, 3, seed=1).to(d)),
        "smooth_l1_loss": lambda d: nnf.smooth_l1_loss(_x(fw, 4, 3).to(d), _x(fw, 4, 3, seed=1).to(d)),
        "huber_loss": lambda d: nnf.huber_loss(_x(fw, 4, 3).to(d), _x(fw, 4, 3, seed=1).to(d)),
        "bce": lambda d: nnf.binary_cross_entropy(_x(fw, 4).sigmoid().to(d), _x(fw, 4, seed=1).sigmoid().to(d)),
        "bce_with_logits": lambda d: nnf.binary_cross_entropy_with_logits(_x(fw, 4).to(d),
                                                                          _x(fw, 4, seed=1).sigmoid().to(d)),
        "kl_div": lambda d: nnf.kl_div(nnf.log_softmax(_x(fw, 4, 3), 1).to(d), nnf.softmax(_x(fw, 4, 3, seed=1), 1).to(d),
                                       reduction="batchmean"),
        # no policy: the input's type
        "relu": lambda d: nnf.relu(_x(fw, 4, 5).to(d)),
        "gelu": lambda d: nnf.gelu(_x(fw, 4, 5).to(d)),
        "softmax": lambda d: nnf.softmax(_x(fw, 4, 5).to(d), -1),
        "log_softmax": lambda d: nnf.log_softmax(_x(fw, 4, 5).to(d), -1),
        "layer_norm": lambda d: nnf.layer_norm(_x(fw, 4, 5).to(d), (5,)),
        "batch_norm": lambda d: nnf.batch_norm(_x(fw, 2, 3, 4, 4).to(d), fw.zeros(3), fw.ones(3), _x(fw, 3),
                                               _x(fw, 3, seed=1), True),
        "group_norm": lambda d: nnf.group_norm(_x(fw, 2, 4, 3).to(d), 2),
        "max_pool2d": lambda d: nnf.max_pool2d(_x(fw, 1, 2, 6, 6).to(d), 2),
        "avg_pool2d": lambda d: nnf.avg_pool2d(_x(fw, 1, 2, 6, 6).to(d), 2),
        "adaptive_avg_pool2d": lambda d: nnf.adaptive_avg_pool2d(_x(fw, 1, 2, 6, 6).to(d), 1),
        "interpolate": lambda d: nnf.interpolate(_x(fw, 1, 2, 3, 3).to(d), scale_factor=2, mode="bilinear"),
        "sum": lambda d: _x(fw, 4, 5).to(d).sum(1),
        "mean": lambda d: _x(fw, 4, 5).to(d).mean(),
        "cumsum": lambda d: _x(fw, 4, 5).to(d).cumsum(1),
        "exp": lambda d: _x(fw, 4, 5).to(d).exp(),
        "pow": lambda d: _x(fw, 4, 5).to(d).pow(2),
        "dot": lambda d: fw.dot(_x(fw, 5).to(d), _x(fw, 5, seed=1).to(d)),
        "mv": lambda d: fw.mv(_x(fw, 4, 5).to(d), _x(fw, 5, seed=1).to(d)),
        "outer": lambda d: fw.outer(_x(fw, 4).to(d), _x(fw, 5, seed=1).to(d)),
        "embedding": lambda d: nnf.embedding(fw.tensor([1, 0, 2]), _x(fw, 3, 4).to(d)),
        "norm": lambda d: _x(fw, 4, 5).to(d).norm(),
        "logsumexp": lambda d: _x(fw, 4, 5).to(d).logsumexp(1),
        "bilinear": lambda d: nnf.bilinear(_x(fw, 2, 3).to(d), _x(fw, 2, 4, seed=1).to(d),
                                           _x(fw, 5, 3, 4, seed=2).to(d)),
        "cosine_similarity": lambda d: nnf.cosine_similarity(_x(fw, 4, 5).to(d), _x(fw, 4, 5, seed=1).to(d)),
        "prelu": lambda d: nnf.prelu(_x(fw, 4, 5).to(d), fw.full((1,), 0.25).to(d)),
    }


OP_NAMES = list(_fns(torch))


@pytest.mark.parametrize("name", OP_NAMES)
@pytest.mark.parametrize("src", ["float32", "bfloat16"])
def test_cpu_op_lists_match_torch(name, src):
    """Under CPU autocast each op returns torch's dtype with torch's values (bf16 tolerance): a
    float32 input shows the lower-precision list, a bfloat16 one the float32 list."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = _fns(torch)[name](getattr(torch, src))
    with pf.autocast("cpu", dtype=pf.bfloat16):
        actual = _fns(pf)[name](getattr(pf, src))
    # bf16 products summed in another order differ by a few bf16 ulps of the largest output, not
    # of each element (an output near zero from cancellation shows it as a large relative error).
    scale = max(1.0, float(expected.detach().double().abs().max())) if expected.numel() else 1.0
    close(actual, expected, BF16_TOL["rtol"], BF16_TOL["atol"] * scale)


@pytest.mark.parametrize("name", ["cat", "stack"])
def test_promote_ops_take_the_widest_type(name):
    a32, b16 = _x(torch, 2, 3), _x(torch, 2, 3, seed=1).bfloat16()
    with torch.autocast("cpu"):
        expected = getattr(torch, name)([b16, a32])
        expected_low = getattr(torch, name)([b16, b16])
    with pf.autocast("cpu"):
        actual = getattr(pf, name)([from_torch(b16), from_torch(a32)])
        actual_low = getattr(pf, name)([from_torch(b16), from_torch(b16)])
    close(actual, expected, 0, 0)
    close(actual_low, expected_low, 0, 0)


def test_float64_and_integers_are_never_cast():
    with pf.autocast("cpu"):
        assert (pf.ones(2, 2, dtype=pf.float64) @ pf.ones(2, 2, dtype=pf.float64)).dtype is pf.float64
        assert (pf.ones(2, 2, dtype=pf.int64) @ pf.ones(2, 2, dtype=pf.int64)).dtype is pf.int64
        assert F.mse_loss(pf.ones(3, dtype=pf.float64), pf.zeros(3, dtype=pf.float64)).dtype is pf.float64


def test_out_and_inplace_variants_are_not_autocast():
    a, b, c = _x(torch, 3, 4), _x(torch, 4, 2, seed=1), _x(torch, 3, 2, seed=2)
    with torch.autocast("cpu"):
        expected_out = torch.mm(a, b, out=torch.empty(3, 2))
        expected_inplace = c.clone().addmm_(a, b)
    with pf.autocast("cpu"):
        out = pf.empty(3, 2)
        pf.mm(from_torch(a), from_torch(b), out=out)
        inplace = from_torch(c).addmm_(from_torch(a), from_torch(b))
    close(out, expected_out, 1e-5, 1e-5)
    close(inplace, expected_inplace, 1e-5, 1e-5)


def test_rnn_modules_follow_torch():
    """The recurrent layers autocast their products inside, as PyTorch's: LSTM and GRU mix them
    into float32 states (a float32 result), RNN's tanh of a bfloat16 sum stays bfloat16."""
    for name in ("LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"):
        tm = getattr(torch.nn, name)(4, 3)
        pm = getattr(nn, name)(4, 3)
        pm.load_state_dict({k: from_torch(v) for k, v in tm.state_dict().items()})
        x = _x(torch, 2, 4) if name.endswith("Cell") else _x(torch, 5, 2, 4)
        with torch.autocast("cpu"):
            expected = tm(x)
        with pf.autocast("cpu"):
            actual = pm(from_torch(x))
        expected = expected[0] if isinstance(expected, tuple) else expected
        actual = actual[0] if isinstance(actual, tuple) else actual
        close(actual, expected, **BF16_TOL)


def test_binary_cross_entropy_is_not_banned_on_cpu():
    with pf.autocast("cpu"):
        assert F.binary_cross_entropy(pf.full((3,), 0.5), pf.ones(3)).dtype is pf.float32


# ---- autograd through the casts and the weight cache ----------------------------------------------------

def test_gradients_reach_float32_parameters():
    tl = torch.nn.Linear(5, 3)
    pl = nn.Linear(5, 3)
    pl.load_state_dict({k: from_torch(v) for k, v in tl.state_dict().items()})
    x = _x(torch, 4, 5)
    with torch.autocast("cpu"):
        ty = tl(x)
    with pf.autocast("cpu"):
        py = pl(from_torch(x))
    assert py.dtype is pf.bfloat16
    ty.float().pow(2).sum().backward()
    py.float().pow(2).sum().backward()
    for name in ("weight", "bias"):
        g = getattr(pl, name).grad
        assert g.dtype is pf.float32
        close(g, getattr(tl, name).grad, **BF16_TOL)


def test_backward_runs_in_forward_types():
    """conv_transpose2d runs in float32 under CPU autocast; its backward (made of conv2d, a
    lower-precision op) must stay float32 even when backward() is called inside the region."""
    tx = _x(torch, 2, 3, 5, 5).requires_grad_()
    tw = _x(torch, 3, 4, 3, 3, seed=1).requires_grad_()
    px, pw = from_torch(tx.detach()).requires_grad_(), from_torch(tw.detach()).requires_grad_()
    with torch.autocast("cpu"):
        torch.nn.functional.conv_transpose2d(tx, tw).sum().backward()
    with pf.autocast("cpu"):
        F.conv_transpose2d(px, pw).sum().backward()
    close(px.grad, tx.grad, 1e-5, 1e-5)
    close(pw.grad, tw.grad, 1e-5, 1e-4)


@pytest.mark.parametrize("cache_enabled", [True, False])
def test_weight_cast_cache(cache_enabled):
    """A parameter is cast once per region with the cache on: a change to its values inside the
    region is not seen by later ops (PyTorch's behaviour), and is seen with cache_enabled=False."""
    results = {}
    for fw, lin in (("torch", torch.nn.Linear(4, 4)), ("pf", nn.Linear(4, 4))):
        mod = torch if fw == "torch" else pf
        x = mod.ones(2, 4)
        with mod.no_grad():
            lin.weight.fill_(0.5)
            lin.bias.fill_(0.25)
        with mod.autocast("cpu", cache_enabled=cache_enabled):
            y1 = lin(x)
            with mod.no_grad():
                lin.weight.mul_(2)
            y2 = lin(x)
        results[fw] = (y1.float().sum().item(), y2.float().sum().item())
    assert results["pf"] == results["torch"]
    assert (results["pf"][0] == results["pf"][1]) == cache_enabled


def test_cache_is_cleared_when_the_outermost_region_exits():
    lin = nn.Linear(4, 4)
    with pf.no_grad():
        lin.weight.fill_(0.5)
    x = pf.ones(1, 4)
    with pf.autocast("cpu"):
        y1 = lin(x)
    with pf.no_grad():
        lin.weight.fill_(1.0)
    with pf.autocast("cpu"):
        y2 = lin(x)
    assert y2.float().sum().item() != y1.float().sum().item()


def test_custom_fwd_bwd():
    seen = {}

    class Scale(pf.autograd.Function):
        @staticmethod
        @pf.amp.custom_fwd(device_type="cpu", cast_inputs=pf.float32)
        def forward(ctx, x, w):
            seen["fwd"] = (x.dtype, w.dtype, pf.is_autocast_cpu_enabled())
            ctx.save_for_backward(w)
            return x @ w

        @staticmethod
        @pf.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            (w,) = ctx.saved_tensors
            seen["bwd"] = pf.is_autocast_cpu_enabled()
            return g @ w.t(), None

    x = pf.ones(2, 3, dtype=pf.bfloat16, requires_grad=True)
    with pf.autocast("cpu"):
        y = Scale.apply(x, pf.ones(3, 3))
    assert y.dtype is pf.float32 and seen["fwd"] == (pf.float32, pf.float32, False)
    y.sum().backward()
    assert seen["bwd"] is False and x.grad.dtype is pf.bfloat16

    class Plain(pf.autograd.Function):
        @staticmethod
        @pf.amp.custom_fwd(device_type="cpu")
        def forward(ctx, x):
            return x @ x

        @staticmethod
        @pf.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            seen["plain_bwd"] = pf.is_autocast_cpu_enabled()
            return g

    with pf.autocast("cpu"):
        z = Plain.apply(pf.ones(2, 2, requires_grad=True))
    assert z.dtype is pf.bfloat16
    z.float().sum().backward()
    assert seen["plain_bwd"] is True


# ---- models against torch.autocast ----------------------------------------------------------------------

def _copy_to_pf(tmodel, pmodel):
    pmodel.load_state_dict({k: from_torch(v) for k, v in tmodel.state_dict().items()})


def _resnet_block(fw):
    nn_ = fw.nn

    class Block(nn_.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn_.Sequential(nn_.Conv2d(3, 16, 3, 2, 1, bias=False), nn_.BatchNorm2d(16), nn_.ReLU(),
                                       nn_.MaxPool2d(3, 2, 1))
            self.conv1 = nn_.Conv2d(16, 16, 3, 1, 1, bias=False)
            self.bn1 = nn_.BatchNorm2d(16)
            self.conv2 = nn_.Conv2d(16, 16, 3, 1, 1, bias=False)
            self.bn2 = nn_.BatchNorm2d(16)
            self.head = nn_.Linear(16, 10)

        def forward(self, x):
            x = self.stem(x)
            y = fw.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            y = fw.relu(y + x)
            return self.head(fw.flatten(fw.nn.functional.adaptive_avg_pool2d(y, 1), 1))
    return Block()


def _bert(fw):
    nn_ = fw.nn

    class Bert(nn_.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn_.Embedding(50, 32)
            self.pos = nn_.Embedding(16, 32)
            layer = nn_.TransformerEncoderLayer(32, 2, 64, dropout=0.0, activation="gelu", batch_first=True)
            self.encoder = nn_.TransformerEncoder(layer, 2)
            self.norm = nn_.LayerNorm(32)
            self.head = nn_.Linear(32, 50)

        def forward(self, ids):
            h = self.tok(ids) + self.pos(fw.arange(ids.shape[1]))
            return self.head(self.norm(self.encoder(h)))
    return Bert()


@pytest.mark.parametrize("model", ["resnet", "bert"])
def test_models_match_torch_autocast(model):
    torch.manual_seed(AMP_SEED)
    tm = _resnet_block(torch) if model == "resnet" else _bert(torch)
    pm = _resnet_block(pf) if model == "resnet" else _bert(pf)
    _copy_to_pf(tm, pm)
    if model == "resnet":
        tx = _x(torch, 4, 3, 32, 32)
        target = torch.tensor([1, 2, 3, 4])
    else:
        tx = torch.from_numpy(rng(3).integers(0, 50, (2, 16)))
        target = torch.from_numpy(rng(4).integers(0, 50, (2 * 16,)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tout = tm(tx)
        tloss = torch.nn.functional.cross_entropy(tout.reshape(-1, tout.shape[-1]), target)
    with pf.autocast("cpu", dtype=pf.bfloat16):
        pout = pm(from_torch(tx))
        ploss = F.cross_entropy(pout.reshape(-1, pout.shape[-1]), from_torch(target))
    close(pout, tout, rtol=5e-2, atol=5e-2)
    close(ploss, tloss, rtol=2e-2, atol=2e-2)
    tloss.backward()
    ploss.backward()
    tparams = dict(tm.named_parameters())
    for name, p in pm.named_parameters():
        assert p.grad.dtype is pf.float32, name
        g, tg = to_torch(p.grad).double(), tparams[name].grad.double()
        # bf16 products: compare gradients by direction and size, per parameter.
        cos = torch.nn.functional.cosine_similarity(g.flatten(), tg.flatten(), dim=0)
        assert cos > 0.99, (name, cos)
        assert abs(g.norm() / tg.norm() - 1) < 0.05, name


# ---- GradScaler -------------------------------------------------------------------------------------------

def test_amp_kernels():
    g1 = pf.tensor([1.0, 2.0, 4.0])
    g2 = pf.tensor([[8.0, -2.0]], dtype=pf.bfloat16)
    found = pf.zeros(1)
    pf._amp_foreach_non_finite_check_and_unscale_([g1, g2], found, pf.full((1,), 0.5))
    assert g1.tolist() == [0.5, 1.0, 2.0] and g2.float().tolist() == [[4.0, -1.0]] and found.item() == 0
    g3 = pf.tensor([1.0, float("inf"), float("nan")])
    pf._amp_foreach_non_finite_check_and_unscale_([g3], found, pf.full((1,), 0.5))
    assert found.item() == 1.0 and g3[0].item() == 0.5

    scale, tracker = pf.full((1,), 4.0), pf.zeros(1, dtype=pf.int32)
    pf._amp_update_scale_(scale, tracker, pf.zeros(1), 2.0, 0.5, 2)
    assert (scale.item(), tracker.item()) == (4.0, 1)
    pf._amp_update_scale_(scale, tracker, pf.zeros(1), 2.0, 0.5, 2)
    assert (scale.item(), tracker.item()) == (8.0, 0)
    pf._amp_update_scale_(scale, tracker, pf.ones(1), 2.0, 0.5, 2)
    assert (scale.item(), tracker.item()) == (4.0, 0)
    big = pf.full((1,), 3e38)
    pf._amp_update_scale_(big, pf.ones(1, dtype=pf.int32), pf.zeros(1), 2.0, 0.5, 2)
    assert big.item() == pytest.approx(3e38)  # never grows to inf
    with pytest.raises(RuntimeError, match="growth_tracker must be a single-element int tensor"):
        pf._amp_update_scale_(scale, pf.zeros(1), pf.zeros(1), 2.0, 0.5, 2)
    with pytest.raises(RuntimeError, match="found_inf must be a one-element tensor"):
        pf._amp_foreach_non_finite_check_and_unscale_([g1], pf.zeros(2), pf.ones(1))


def test_cuda_grad_scaler_without_cuda_disables_itself():
    if pf.cuda.is_available():
        pytest.skip("checks the behaviour without a CUDA device")
    for fw in (pf, torch):
        with pytest.warns(UserWarning, match="CUDA is not available.  Disabling"):
            scaler = fw.cuda.amp.GradScaler()
        assert not scaler.is_enabled()
        loss = fw.ones(())
        assert scaler.scale(loss) is loss
        assert scaler.get_scale() == 1.0 and scaler.state_dict() == {}


def _reference_scaler_run(steps, init_scale, growth_interval, grads_per_step):
    """GradScaler's update rule, in plain Python: (scale, tracker, skipped) after each step."""
    scale, tracker, history = init_scale, 0, []
    for grads in grads_per_step[:steps]:
        bad = any(not np.isfinite(g * scale) for g in grads)
        if bad:
            scale, tracker = scale * 0.5, 0
        else:
            tracker += 1
            if tracker == growth_interval:
                scale, tracker = scale * 2.0, 0
        history.append((scale, tracker, bad))
    return history


def test_grad_scaler_on_cpu_matches_the_update_rule():
    model = nn.Linear(3, 1, bias=False)
    with pf.no_grad():
        model.weight.fill_(1.0)
    opt = pf.optim.SGD(model.parameters(), lr=0.1)
    scaler = pf.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
    # The loss is w . x; x = inf on step 3 makes every gradient inf.
    xs = [[1.0, 2.0, 3.0], [1.0, 1.0, 1.0], [float("inf"), 1.0, 1.0], [0.5, 0.5, 0.5], [1.0, 0.0, 1.0]]
    expected = _reference_scaler_run(len(xs), 2.0 ** 10, 2, xs)
    weight = np.ones(3)
    for x, (scale_after, tracker_after, skipped) in zip(xs, expected):
        opt.zero_grad()
        loss = (model(pf.tensor([x])) ** 1).sum()
        scaler.scale(loss).backward()
        ret = scaler.step(opt)
        scaler.update()
        if not skipped:
            weight = weight - 0.1 * np.array(x)
        assert (ret is None) and scaler.get_scale() == scale_after
        assert scaler._get_growth_tracker() == tracker_after
        np.testing.assert_allclose(model.weight.detach().numpy()[0], weight, rtol=1e-6)
    state = scaler.state_dict()
    assert state == {"scale": expected[-1][0], "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2,
                     "_growth_tracker": expected[-1][1]}
    fresh = pf.amp.GradScaler("cpu")
    fresh.load_state_dict(state)
    assert fresh.get_scale() == expected[-1][0] and fresh._get_growth_tracker() == expected[-1][1]


def test_grad_scaler_unscale_then_clip():
    model = nn.Linear(2, 1, bias=False)
    with pf.no_grad():
        model.weight.fill_(1.0)
    opt = pf.optim.SGD(model.parameters(), lr=1.0)
    scaler = pf.amp.GradScaler("cpu", init_scale=256.0)
    scaler.scale(model(pf.tensor([[3.0, 4.0]])).sum()).backward()
    scaler.unscale_(opt)
    assert model.weight.grad.tolist() == [[3.0, 4.0]]
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)
    pf.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    scaler.update()
    np.testing.assert_allclose(model.weight.detach().numpy(), [[1 - 0.6, 1 - 0.8]], rtol=1e-5)


def test_grad_scaler_refuses_fp16_gradients_and_closures():
    model = nn.Linear(2, 1).to(pf.float16)
    opt = pf.optim.SGD(model.parameters(), lr=1.0)
    scaler = pf.amp.GradScaler("cpu")
    scaler.scale(model(pf.ones(1, 2, dtype=pf.float16)).float().sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
        scaler.step(opt, closure=lambda: None)


def test_grad_scaler_pickles_between_iterations():
    import pickle
    scaler = pf.amp.GradScaler("cpu", init_scale=64.0)
    scaler.scale(pf.ones(()))
    clone = pickle.loads(pickle.dumps(scaler))
    assert clone.get_scale() == 64.0 and clone._scale is None
