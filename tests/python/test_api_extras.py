"""The composite functions (plugflow._composite), plugflow.backends' flags and the padding,
distance, pixel-shuffle and instance-norm modules against PyTorch 1.13: values, gradients
and the exception types raised on bad input."""

import math

import numpy as np
import pytest
import torch

import plugflow as pf
from plugflow import _C


def pair(rng, shape, dtype="float64", grad=False, low=-2.0, high=2.0):
    a = rng.uniform(low, high, size=shape).astype(dtype)
    p = pf.tensor(a)
    t = torch.tensor(a)
    if grad:
        p.requires_grad_(True)
        t.requires_grad_(True)
    return p, t


def close(p, t, tol=1e-6):
    if isinstance(t, (bool, int, float)):
        assert p == t
        return
    assert tuple(p.shape) == tuple(t.shape), (p.shape, t.shape)
    assert repr(p.dtype).rpartition(".")[2] == repr(t.dtype).rpartition(".")[2]
    np.testing.assert_allclose(p.detach().numpy().astype(np.float64), t.detach().numpy().astype(np.float64),
                               rtol=tol, atol=tol)


def check_grad(pin, tin, pout, tout, tol=1e-6):
    close(pout, tout, tol)
    rng = np.random.default_rng(0)
    g = rng.standard_normal(tuple(tout.shape))
    (pout * pf.tensor(g)).sum().backward()
    (tout * torch.tensor(g)).sum().backward()
    for p, t in zip(pin, tin):
        close(p.grad, t.grad, tol)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ---- comparisons --------------------------------------------------------------------------------

def test_isclose_allclose_equal(rng):
    a = rng.standard_normal((3, 4))
    b = a + rng.choice([0.0, 1e-9, 1e-3], size=a.shape)
    a[0, 0] = b[0, 0] = np.nan
    a[1, 1] = b[1, 1] = np.inf
    a[2, 2], b[2, 2] = np.inf, -np.inf
    for kw in ({}, {"equal_nan": True}, {"rtol": 1e-2, "atol": 0.0}, {"atol": 1e-2}):
        close(pf.isclose(pf.tensor(a), pf.tensor(b), **kw), torch.isclose(torch.tensor(a), torch.tensor(b), **kw))
        assert pf.allclose(pf.tensor(a), pf.tensor(b), **kw) == torch.allclose(torch.tensor(a), torch.tensor(b), **kw)
    x = rng.standard_normal(5).astype("float32")
    assert pf.tensor(x).allclose(pf.tensor(x + 1e-9)) is True
    close(pf.tensor(x).isclose(pf.tensor(x)), torch.tensor(x).isclose(torch.tensor(x)))
    i = np.array([1, 2, 3])
    close(pf.isclose(pf.tensor(i), pf.tensor(i + 1), atol=1), torch.isclose(torch.tensor(i), torch.tensor(i + 1), atol=1))
    # bools compare as numbers too: True is within atol=1 of False (found by the fuzzer)
    u, v = rng.integers(0, 2, 8).astype(bool), rng.integers(0, 2, 8).astype(bool)
    for kw in ({}, {"atol": 1.0}, {"atol": 0.5, "rtol": 0.5}, {"rtol": 1.0}):
        close(pf.isclose(pf.tensor(u), pf.tensor(v), **kw), torch.isclose(torch.tensor(u), torch.tensor(v), **kw))
    assert pf.equal(pf.tensor(x), pf.tensor(x)) is True
    assert pf.tensor(x).equal(pf.tensor(x[::-1].copy())) == torch.equal(torch.tensor(x), torch.tensor(x[::-1].copy()))
    assert pf.equal(pf.ones(2), pf.ones(3)) is False
    with pytest.raises(RuntimeError):
        torch.isclose(torch.ones(2), torch.ones(2, dtype=torch.float64))
    with pytest.raises(RuntimeError):
        pf.isclose(pf.ones(2), pf.ones(2, dtype=pf.float64))
    with pytest.raises(RuntimeError):
        pf.allclose(pf.ones(2), pf.ones(3))
    with pytest.raises(TypeError):
        pf.allclose([1.0], pf.ones(1))


# ---- creation and shapes ------------------------------------------------------------------------

def test_eye():
    for args in ((3,), (2, 4), (4, 2), (0,), (1, 0)):
        close(pf.eye(*args), torch.eye(*args))
    close(pf.eye(3, dtype=pf.int64), torch.eye(3, dtype=torch.int64))
    close(pf.eye(2, 3, dtype=pf.bool), torch.eye(2, 3, dtype=torch.bool))
    assert pf.eye(2, requires_grad=True).requires_grad
    with pytest.raises(RuntimeError):
        torch.eye(-1)
    with pytest.raises(RuntimeError):
        pf.eye(-1)
    for m in (torch, pf):
        with pytest.raises(TypeError):
            m.eye(2.5)


@pytest.mark.parametrize("k", [-2, -1, 0, 1, 3])
def test_diag(rng, k):
    p, t = pair(rng, (4,), grad=True)
    check_grad([p], [t], pf.diag(p, k), torch.diag(t, k))
    p, t = pair(rng, (3, 5), grad=True)
    check_grad([p], [t], p.diag(k), t.diag(k))
    p, t = pair(rng, (5, 3), grad=True)
    check_grad([p], [t], pf.diag(p, k), torch.diag(t, k))
    close(pf.diag(pf.tensor([1, 2, 3]), k), torch.diag(torch.tensor([1, 2, 3]), k))
    close(pf.diag(pf.ones(2, 2), 2), torch.diag(torch.ones(2, 2), 2))


def test_diag_errors():
    with pytest.raises(RuntimeError):
        torch.diag(torch.ones(2, 2, 2))
    with pytest.raises(RuntimeError):
        pf.diag(pf.ones(2, 2, 2))


def test_broadcast(rng):
    p, t = pair(rng, (3, 1), grad=True)
    check_grad([p], [t], pf.broadcast_to(p, (2, 3, 4)), torch.broadcast_to(t, (2, 3, 4)))
    p, t = pair(rng, (3,), grad=True)
    check_grad([p], [t], p.broadcast_to((2, 3)), t.broadcast_to((2, 3)))
    a, ta = pair(rng, (2, 1, 4), grad=True)
    b, tb = pair(rng, (3, 1), grad=True)
    pa, pb = pf.broadcast_tensors(a, b)
    qa, qb = torch.broadcast_tensors(ta, tb)
    close(pa, qa)
    close(pb, qb)
    check_grad([a, b], [ta, tb], pa * 2 + pb, qa * 2 + qb)
    assert tuple(pf.broadcast_shapes((2, 1), (3,))) == tuple(torch.broadcast_shapes((2, 1), (3,)))
    for fn, mod in ((lambda m: m.broadcast_tensors(m.ones(2), m.ones(3)), None),
                    (lambda m: m.broadcast_to(m.ones(2), (3,)), None)):
        with pytest.raises(RuntimeError):
            fn(torch)
        with pytest.raises(RuntimeError):
            fn(pf)


def test_take_along_dim(rng):
    p, t = pair(rng, (3, 4, 5), grad=True)
    idx = rng.integers(0, 4, size=(3, 6, 1))
    check_grad([p], [t], pf.take_along_dim(p, pf.tensor(idx), 1), torch.take_along_dim(t, torch.tensor(idx), 1))
    p, t = pair(rng, (3, 4), grad=True)
    idx = np.argsort(rng.standard_normal((3, 4)), axis=-1)
    check_grad([p], [t], p.take_along_dim(pf.tensor(idx), -1), t.take_along_dim(torch.tensor(idx), -1))
    idx = rng.integers(0, 12, size=(5,))
    close(pf.take_along_dim(pf.tensor(p.detach().numpy()), pf.tensor(idx)),
          torch.take_along_dim(t.detach(), torch.tensor(idx)))
    for bad in (lambda m: m.take_along_dim(m.ones(2, 2), m.zeros(2, 2, dtype=m.int32), 0),
                lambda m: m.take_along_dim(m.ones(2, 2), m.zeros(2, dtype=m.int64), 0)):
        with pytest.raises(RuntimeError):
            bad(torch)
        with pytest.raises(RuntimeError):
            bad(pf)


def test_count_nonzero(rng):
    a = rng.integers(-1, 2, size=(3, 4, 2)).astype("float32")
    for dim in (None, 0, -1, (0, 2)):
        kw = {} if dim is None else {"dim": dim}
        close(pf.count_nonzero(pf.tensor(a), **kw), torch.count_nonzero(torch.tensor(a), **kw))
    close(pf.tensor(a > 0).count_nonzero(1), torch.tensor(a > 0).count_nonzero(1))
    with pytest.raises(RuntimeError):
        torch.count_nonzero(torch.ones(2, 2), (0, 0))
    with pytest.raises(RuntimeError):
        pf.count_nonzero(pf.ones(2, 2), (0, 0))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_nan_to_num(rng, dtype):
    a = rng.standard_normal(8).astype(dtype)
    a[1], a[3], a[5] = np.nan, np.inf, -np.inf
    for kw in ({}, {"nan": 1.5}, {"posinf": 7.0, "neginf": -3.0}):
        close(pf.nan_to_num(pf.tensor(a), **kw), torch.nan_to_num(torch.tensor(a), **kw))
    p, t = pf.tensor(a.astype("float64")), torch.tensor(a.astype("float64"))
    p.requires_grad_(True)
    t.requires_grad_(True)
    check_grad([p], [t], p.nan_to_num(2.0), t.nan_to_num(2.0))
    close(pf.nan_to_num(pf.tensor([1, 2])), torch.nan_to_num(torch.tensor([1, 2])))


def test_finfo_iinfo():
    for pd, td in ((pf.float16, torch.float16), (pf.bfloat16, torch.bfloat16), (pf.float32, torch.float32),
                   (pf.float64, torch.float64)):
        a, b = pf.finfo(pd), torch.finfo(td)
        for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
            assert getattr(a, attr) == getattr(b, attr), (pd, attr)
    assert pf.finfo().dtype == torch.finfo().dtype
    for pd, td in ((pf.uint8, torch.uint8), (pf.int8, torch.int8), (pf.int16, torch.int16),
                   (pf.int32, torch.int32), (pf.int64, torch.int64)):
        a, b = pf.iinfo(pd), torch.iinfo(td)
        assert (a.bits, a.max, a.min, a.dtype) == (b.bits, b.max, b.min, b.dtype)
    for m in (torch, pf):
        with pytest.raises(TypeError):
            m.finfo(m.int32)
        with pytest.raises(TypeError):
            m.iinfo(m.float32)


# ---- random -------------------------------------------------------------------------------------

def test_bernoulli():
    probs = pf.full((4000,), 0.3)
    s = pf.bernoulli(probs)
    assert s.dtype == pf.float32 and set(np.unique(s.numpy())) <= {0.0, 1.0}
    assert abs(s.mean().item() - 0.3) < 0.05
    g1, g2 = pf.Generator(), pf.Generator()
    g1.manual_seed(7)
    g2.manual_seed(7)
    assert pf.equal(pf.bernoulli(probs, generator=g1), probs.bernoulli(generator=g2))
    assert pf.bernoulli(pf.zeros(5, dtype=pf.float64)).sum().item() == 0
    assert pf.bernoulli(pf.zeros(50), 1.0).sum().item() == 50
    for m in (torch, pf):
        with pytest.raises(RuntimeError):
            m.bernoulli(m.full((3,), 1.5))


def test_normal():
    mean = pf.zeros(4000, dtype=pf.float64, requires_grad=True)
    std = pf.full((4000,), 2.0, dtype=pf.float64, requires_grad=True)
    s = pf.normal(mean, std)
    assert s.dtype == pf.float64 and abs(s.mean().item()) < 0.2 and abs(s.std().item() - 2.0) < 0.2
    s.sum().backward()
    close(mean.grad, torch.ones(4000, dtype=torch.float64))
    np.testing.assert_allclose(std.grad.numpy(), (s.detach() / 2.0).numpy(), rtol=1e-12)
    assert tuple(pf.normal(pf.zeros(3, 1), 1.0).shape) == (3, 1)
    assert tuple(pf.normal(0.0, pf.ones(2, 2)).shape) == (2, 2)
    assert tuple(pf.normal(pf.zeros(3, 1), pf.ones(1, 2)).shape) == tuple(torch.normal(torch.zeros(3, 1), torch.ones(1, 2)).shape)
    x = pf.normal(1.0, 0.5, (3, 2))
    assert tuple(x.shape) == (3, 2) and x.dtype == pf.float32
    g1, g2 = pf.Generator(), pf.Generator()
    g1.manual_seed(3)
    g2.manual_seed(3)
    assert pf.equal(pf.normal(0.0, 1.0, (5,), generator=g1), pf.normal(0.0, 1.0, (5,), generator=g2))
    for m in (torch, pf):
        with pytest.raises(RuntimeError):
            m.normal(m.zeros(3), -1.0)
        with pytest.raises(RuntimeError):
            m.normal(0.0, -1.0, (2,))


# ---- backends -----------------------------------------------------------------------------------

def test_backends_flags():
    b = pf.backends
    assert b.cudnn.enabled is True and b.cudnn.benchmark is False and b.cudnn.deterministic is False
    assert isinstance(b.cudnn.allow_tf32, bool) and isinstance(b.cudnn.is_available(), bool)
    b.cudnn.benchmark = True
    b.cudnn.deterministic = True
    assert b.cudnn.benchmark and b.cudnn.deterministic
    b.cudnn.benchmark = False
    b.cudnn.deterministic = False
    assert b.mkldnn.enabled is True and b.mkldnn.is_available() in (True, False)
    old = b.cuda.matmul.allow_tf32
    b.cuda.matmul.allow_tf32 = True
    assert b.cuda.matmul.allow_tf32 is True
    b.cuda.matmul.allow_tf32 = old
    import plugflow.backends.cudnn as cudnn
    assert cudnn is b.cudnn


def test_cudnn_flags_reach_the_runtime():
    """allow_tf32 and workspace_limit_mb are the runtime's convolution settings (what the CUDA
    plugin reads per call), not just module attributes."""
    cudnn = pf.backends.cudnn
    assert cudnn.allow_tf32 is True and cudnn.workspace_limit_mb == 4096  # the defaults
    try:
        cudnn.allow_tf32 = False
        cudnn.workspace_limit_mb = 256
        assert _C.conv_settings() == {"allow_tf32": False, "workspace_limit_bytes": 256 << 20}
        assert cudnn.allow_tf32 is False and cudnn.workspace_limit_mb == 256
        for bad in (-1, 1.5, "64", True):
            with pytest.raises(ValueError):
                cudnn.workspace_limit_mb = bad
        assert cudnn.workspace_limit_mb == 256
    finally:
        cudnn.allow_tf32 = True
        cudnn.workspace_limit_mb = 4096


# ---- nn modules ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name,args,shape", [
    ("ZeroPad2d", (1,), (2, 3, 4, 5)), ("ZeroPad2d", ((1, 0, 2, 1),), (1, 3, 4)),
    ("ConstantPad1d", (2, 3.5), (2, 3, 4)), ("ConstantPad2d", ((1, 2, 0, 1), -1.0), (2, 3, 4, 5)),
    ("ReflectionPad1d", (2,), (2, 3, 5)), ("ReflectionPad2d", ((1, 2, 2, 1),), (2, 3, 4, 5)),
    ("ReplicationPad1d", ((3, 1),), (2, 3, 4)), ("ReplicationPad2d", (2,), (1, 2, 4, 5)),
])
def test_padding_modules(rng, name, args, shape):
    p, t = pair(rng, shape, grad=True)
    pm, tm = getattr(pf.nn, name)(*args), getattr(torch.nn, name)(*args)
    check_grad([p], [t], pm(p), tm(t))
    assert pm.padding == tm.padding


def test_padding_errors():
    for m in (torch, pf):
        with pytest.raises(RuntimeError):
            m.nn.ReflectionPad1d(5)(m.ones(1, 2, 3))


@pytest.mark.parametrize("shapes,dim", [(((4, 5), (4, 5)), 1), (((2, 3, 4), (1, 3, 4)), -1), (((3, 6), (6,)), 0)])
def test_cosine_similarity(rng, shapes, dim):
    a, ta = pair(rng, shapes[0], grad=True)
    b, tb = pair(rng, shapes[1], grad=True)
    if len(shapes[1]) == 1 and dim == 0:
        dim = -1
    check_grad([a, b], [ta, tb], pf.nn.CosineSimilarity(dim)(a, b), torch.nn.CosineSimilarity(dim)(ta, tb))
    z = pf.zeros(2, 3)
    close(pf.nn.functional.cosine_similarity(z, z), torch.nn.functional.cosine_similarity(torch.zeros(2, 3),
                                                                                         torch.zeros(2, 3)))


@pytest.mark.parametrize("p,keepdim", [(2.0, False), (1.0, True), (3.0, False), (math.inf, False)])
def test_pairwise_distance(rng, p, keepdim):
    a, ta = pair(rng, (4, 5), grad=True)
    b, tb = pair(rng, (4, 5), grad=True)
    check_grad([a, b], [ta, tb], pf.nn.PairwiseDistance(p, keepdim=keepdim)(a, b),
               torch.nn.PairwiseDistance(p, keepdim=keepdim)(ta, tb))
    a, ta = pair(rng, (5,), grad=True)
    close(pf.nn.functional.pairwise_distance(a, b), torch.nn.functional.pairwise_distance(ta, tb))


@pytest.mark.parametrize("shape,r", [((2, 8, 3, 4), 2), ((9, 2, 2), 3), ((2, 1, 4, 2, 3), 2)])
def test_pixel_shuffle(rng, shape, r):
    if shape[-3] % (r * r):
        shape = shape[:-3] + (shape[-3] * r * r,) + shape[-2:]
    p, t = pair(rng, shape, grad=True)
    check_grad([p], [t], pf.nn.PixelShuffle(r)(p), torch.nn.PixelShuffle(r)(t))
    shape2 = shape[:-2] + (shape[-2] * r, shape[-1] * r)
    p, t = pair(rng, shape2, grad=True)
    check_grad([p], [t], pf.nn.PixelUnshuffle(r)(p), torch.nn.PixelUnshuffle(r)(t))
    x = rng.standard_normal(shape)
    close(pf.nn.functional.pixel_unshuffle(pf.nn.functional.pixel_shuffle(pf.tensor(x), r), r), torch.tensor(x))


def test_pixel_shuffle_errors():
    for m in (torch, pf):
        with pytest.raises(RuntimeError):
            m.nn.functional.pixel_shuffle(m.ones(1, 3, 2, 2), 2)
        with pytest.raises(RuntimeError):
            m.nn.functional.pixel_unshuffle(m.ones(1, 1, 3, 2), 2)
        with pytest.raises(RuntimeError):
            m.nn.functional.pixel_shuffle(m.ones(4, 2), 2)


@pytest.mark.parametrize("cls,shape", [("InstanceNorm1d", (3, 4, 7)), ("InstanceNorm2d", (2, 3, 4, 5)),
                                       ("InstanceNorm1d", (4, 6)), ("InstanceNorm2d", (3, 4, 5))])
@pytest.mark.parametrize("affine,track", [(False, False), (True, False), (True, True)])
def test_instance_norm(rng, cls, shape, affine, track):
    c = shape[-2] if len(shape) in (2, 3) and cls == "InstanceNorm1d" else shape[-3]
    if cls == "InstanceNorm1d":
        c = shape[-2]
    pm = getattr(pf.nn, cls)(c, affine=affine, track_running_stats=track).double()
    tm = getattr(torch.nn, cls)(c, affine=affine, track_running_stats=track).double()
    if affine:
        w, b = rng.standard_normal(c), rng.standard_normal(c)
        with torch.no_grad():
            tm.weight.copy_(torch.tensor(w))
            tm.bias.copy_(torch.tensor(b))
        with pf.no_grad():
            pm.weight.copy_(pf.tensor(w))
            pm.bias.copy_(pf.tensor(b))
    assert sorted(dict(pm.named_buffers())) == sorted(dict(tm.named_buffers()))
    p, t = pair(rng, shape, grad=True)
    check_grad([p], [t], pm(p), tm(t))
    if affine:
        close(pm.weight.grad, tm.weight.grad)
        close(pm.bias.grad, tm.bias.grad)
    if track:
        close(pm.running_mean, tm.running_mean)
        close(pm.running_var, tm.running_var)
        pm.eval()
        tm.eval()
        close(pm(p), tm(t))


def test_instance_norm_errors():
    for m in (torch, pf):
        with pytest.raises(ValueError):
            m.nn.InstanceNorm2d(3)(m.ones(2, 3))
        with pytest.raises(RuntimeError):
            m.nn.InstanceNorm1d(3, affine=True)(m.ones(2, 4, 5))
