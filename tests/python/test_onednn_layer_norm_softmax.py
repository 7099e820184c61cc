"""The CPU plugin's oneDNN layer_norm and softmax kernels (float32,
plugins/cpu/src/onednn/layer_norm.cpp and softmax.cpp) and its own log_softmax against PyTorch:
values and gradients on fresh random inputs with odd sizes, the shapes and layouts oneDNN takes
(contiguous float32, layer_norm from 2^17 elements and 128 per row, softmax over the innermost
dim from 2048 elements) and those that fall back to the plugin's own kernels (smaller ones,
non-innermost softmax dims, float64, layer_norm rows too far from 0 for oneDNN's float mean),
which kernel runs (oneDNN's verbose log), the special values of softmax (-inf, whole -inf lines,
+inf, NaN, large values), and log_softmax's worst-element relative error against float64 (oneDNN's
log_softmax lost up to 1e-5 there, so log_softmax stays native).

Every test draws a fresh seed (printed, so a failure can be replayed with ONEDNN_LN_SM_SEED=...)."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn.functional as F
from plugflow import _C
from helpers import assert_matches, backward_both, from_torch, random_pair, seeded_rng, tensor_pair

OPS = ["layer_norm", "softmax"]  # layer_norm_backward and log_softmax stay native (slower / less accurate)
LAYOUTS = ["contiguous", "transposed", "strided"]
# float32 against float64 PyTorch: sums over up to a few thousand float32 terms.
TOL = {"float32": (1e-4, 1e-4), "float64": (1e-9, 1e-9)}


@pytest.fixture
def rng():
    return seeded_rng("ONEDNN_LN_SM_SEED")


def close(actual, expected, dtype, rtol=None, atol=None):
    """actual (plugflow, `dtype`) against expected (torch, computed in float64)."""
    r, a = TOL[dtype]
    assert_matches(actual, expected.detach().to(getattr(torch, dtype)), rtol=rtol or r, atol=atol or a)


def pair64(p, t):
    """The torch side of a pair as a float64 leaf that requires grad (the reference)."""
    return t.detach().double().requires_grad_()


def test_registered_over_the_native_kernels():
    kinds = {(k.op, repr(k.dtype).split(".")[-1], k.priority) for k in _C.registered_kernels()
             if k.op in OPS and k.provider == "cpu"}
    for op in OPS:
        assert (op, "float32", "optimized") in kinds  # oneDNN
        assert (op, "float64", "default") in kinds  # the plugin's own
        assert _C.chosen_provider(op, "cpu", pf.float32) == "cpu"
    assert ("log_softmax", "float32", "default") in {
        (k.op, repr(k.dtype).split(".")[-1], k.priority) for k in _C.registered_kernels() if k.provider == "cpu"}


# ---- layer_norm -----------------------------------------------------------------------------------------

def layer_norm_case(rng, dtype, layout, shape, k, has_w, has_b, eps=1e-5, low=-2.0, high=2.0):
    normalized = shape[len(shape) - k:]
    xp, xt = random_pair(rng, shape, dtype, layout, grad=True, low=low, high=high)
    wp, wt = random_pair(rng, normalized, dtype, grad=True) if has_w else (None, None)
    bp, bt = random_pair(rng, normalized, dtype, grad=True) if has_b else (None, None)
    refs = [pair64(p, t) if p is not None else None for p, t in ((xp, xt), (wp, wt), (bp, bt))]
    yp = F.layer_norm(xp, normalized, wp, bp, eps)
    yt = TF.layer_norm(refs[0], normalized, refs[1], refs[2], eps)
    close(yp, yt, dtype)
    backward_both(rng, yp, yt)
    for p, t in zip((xp, wp, bp), refs):
        if p is not None:
            close(p.grad, t.grad, dtype)


def oneDNN_sized_shape(rng, k):
    """A shape normalized over its last k dims (odd sizes, 128+ per row) with 2^17+ elements."""
    while True:
        normalized = tuple(int(s) for s in rng.integers(3, 14, size=k - 1)) + (int(rng.integers(3, 400)),)
        if int(np.prod(normalized)) >= 128:
            break
    rows = -(-(2 ** 17) // int(np.prod(normalized))) + int(rng.integers(0, 50))
    lead = (rows,) if rng.integers(0, 2) else (int(rng.integers(2, 5)), -(-rows // 2))
    return lead + normalized


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_layer_norm(rng, dtype, layout, k, affine):
    shape = oneDNN_sized_shape(rng, k)
    eps = float(10 ** rng.uniform(-6, -2))
    layer_norm_case(rng, dtype, layout, shape, k, affine in ("both", "weight"), affine in ("both", "bias"), eps)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("affine", ["both", "none"])
def test_layer_norm_small(rng, k, affine):
    """Shapes the native kernel keeps (fewer elements or shorter rows than oneDNN pays off for)."""
    shape = tuple(int(s) for s in rng.integers(1, 9, size=int(rng.integers(0, 3)))) + tuple(
        int(s) for s in rng.integers(1, 14, size=k))
    layer_norm_case(rng, "float32", "contiguous", shape, k, affine == "both", affine == "both")


@pytest.mark.parametrize("shape", [(1024, 128), (64, 256), (151, 1031), (8192, 64), (3, 1), (2, 171, 768)])
def test_layer_norm_bert_and_odd_rows(rng, shape):
    layer_norm_case(rng, "float32", "contiguous", shape, 1, True, True)
    layer_norm_case(rng, "float32", "transposed", shape, 1, False, False)


def test_layer_norm_module_and_threads(rng):
    """nn.LayerNorm with elementwise_affine on and off, at one and two threads (the primitives
    are cached per thread count)."""
    x = rng.normal(size=(6, 9, 33)).astype("float32")
    threads = pf.get_num_threads()
    try:
        for n in (1, 2):
            pf.set_num_threads(n)
            for affine in (True, False):
                mp, mt = pf.nn.LayerNorm(33, elementwise_affine=affine), torch.nn.LayerNorm(33, elementwise_affine=affine)
                if affine:
                    w = rng.normal(size=33).astype("float32")
                    mp.weight.data = pf.from_numpy(w.copy())
                    mt.weight.data = torch.from_numpy(w.copy())
                xp, xt = pf.from_numpy(x.copy()).requires_grad_(), torch.from_numpy(x.copy()).requires_grad_()
                yp, yt = mp(xp), mt(xt)
                close(yp, yt, "float32")
                backward_both(rng, yp, yt)
                close(xp.grad, xt.grad, "float32")
                if affine:
                    close(mp.weight.grad, mt.weight.grad, "float32", atol=1e-3)
                    close(mp.bias.grad, mt.bias.grad, "float32", atol=1e-3)
    finally:
        pf.set_num_threads(threads)


def test_layer_norm_large_offset_and_large_values(rng):
    """Rows far from zero against their spread take the native kernel (which keeps the mean's
    rounding remainder) and stay accurate; large but well-conditioned values take oneDNN."""
    for offset, spread in ((1000.0, 0.01), (0.0, 1e15), (3e4, 1e3)):
        data = (offset + rng.normal(0, spread, size=(1024, 129))).astype("float32")
        exact = TF.layer_norm(torch.from_numpy(data).double(), (129,))
        close(F.layer_norm(pf.from_numpy(data), (129,)), exact, "float32")


def test_layer_norm_edges_and_errors(rng):
    # Constant rows: variance 0, output 0 (+ bias). Zeros take oneDNN, ones (far from 0 against
    # a spread of sqrt(eps)) the native kernel.
    for fill in (pf.zeros, pf.ones):
        for shape in ((3, 8), (1024, 128)):
            xp = fill(*shape, requires_grad=True)
            xt = torch.from_numpy(xp.detach().numpy().astype("float64")).requires_grad_()
            bp, bt = random_pair(rng, shape[1:], "float32", grad=True)
            yp, yt = F.layer_norm(xp, shape[1:], None, bp), TF.layer_norm(xt, shape[1:], None, pair64(bp, bt))
            close(yp, yt, "float32")
            backward_both(rng, yp, yt)
            close(xp.grad, xt.grad, "float32")
    assert tuple(F.layer_norm(pf.ones(0, 4), (4,)).shape) == (0, 4)
    with pytest.raises(RuntimeError, match="Given normalized_shape=\\[5\\], expected input with shape \\[\\*, 5\\]"):
        F.layer_norm(pf.ones(3, 4), (5,))
    with pytest.raises(RuntimeError, match="Expected weight to be of same shape as normalized_shape"):
        F.layer_norm(pf.ones(3, 4), (4,), pf.ones(3))


# ---- softmax / log_softmax ---------------------------------------------------------------------------------

def softmax_case(rng, op, dtype, layout, shape, dim, low=-10.0, high=10.0, data=None):
    if data is None:
        p, t = random_pair(rng, shape, dtype, layout, grad=True, low=low, high=high)
    else:
        p, t = tensor_pair(data.astype(dtype), layout, grad=True)
    ref = pair64(p, t)
    yp, yt = getattr(F, op)(p, dim), getattr(TF, op)(ref, dim)
    close(yp, yt, dtype)
    assert yp.grad_fn.name() == ("SoftmaxBackward0" if op == "softmax" else "LogSoftmaxBackward0")
    if data is None:
        backward_both(rng, yp, yt)
        close(p.grad, ref.grad, dtype)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_softmax_every_dim(rng, op, dtype, layout, ndim):
    # Up to a few thousand elements: both sides of oneDNN's 2048.
    shape = tuple(int(s) for s in rng.integers(1, {1: 1100, 2: 60, 3: 16, 4: 9}[ndim], size=ndim))
    for dim in range(-ndim, ndim):
        softmax_case(rng, op, dtype, layout, shape, dim)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape, dim", [((8, 2, 128, 128), -1), ((64, 10), 1), ((1024, 1000), -1),
                                        ((16, 10, 32), 1), ((3, 1031), 1), ((5, 7, 1), 1), ((4, 17), 0)])
def test_softmax_realistic_shapes(rng, op, shape, dim):
    softmax_case(rng, op, "float32", "contiguous", shape, dim)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("n", [3, 37, 129, 1000])
def test_softmax_special_values(rng, op, n):
    """-inf entries, whole -inf lines (NaN, as PyTorch), a +inf or a NaN anywhere in a line (all
    NaN), large values: at every position, including oneDNN's vector tails."""
    inf, nan = math.inf, math.nan
    rows = []
    for pos in sorted({0, n // 2, n - 1}):
        for special in (-inf, inf, nan, 1e30, -1e30, 88.0, 3e38):
            row = rng.uniform(-5, 5, size=n)
            row[pos] = special
            rows.append(row)
        row = np.full(n, -inf)
        row[pos] = 1.0  # one finite entry: 1 (softmax) / 0 (log_softmax) there
        rows.append(row)
    rows += [np.full(n, -inf), np.full(n, 1e30), np.full(n, -3e38), np.full(n, inf)]
    data = np.array(rows)
    for dtype in ("float32", "float64"):
        softmax_case(rng, op, dtype, "contiguous", data.shape, 1, data=data)  # oneDNN (float32)
        softmax_case(rng, op, dtype, "contiguous", data.T.shape, 0, data=np.ascontiguousarray(data.T))  # native


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_sizes_threads_and_errors(rng, op):
    for shape, dim in [((0,), 0), ((0, 3), 1), ((3, 0), 1), ((1,), 0), ((4, 1), 1)]:
        close(getattr(F, op)(pf.ones(*shape), dim), getattr(TF, op)(torch.ones(*shape, dtype=torch.float64), dim),
              "float32")
    x = pf.tensor(3.0, requires_grad=True)
    close(getattr(F, op)(x, 0), getattr(TF, op)(torch.tensor(3.0, dtype=torch.float64), 0), "float32")
    threads = pf.get_num_threads()
    try:
        for n in (1, 2):
            pf.set_num_threads(n)
            softmax_case(rng, op, "float32", "contiguous", (48, 200), -1)
    finally:
        pf.set_num_threads(threads)
    close(getattr(F, op)(from_torch(torch.ones(2, 3)), 1, dtype=pf.float64),
          getattr(TF, op)(torch.ones(2, 3), 1, dtype=torch.float64), "float64")
    with pytest.raises(IndexError, match="Dimension out of range"):
        getattr(F, op)(pf.ones(2, 3), 2)
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        getattr(F, op)(pf.tensor([1, 2]), 0)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("classes", [100, 317, 1000])
@pytest.mark.parametrize("layout", ["contiguous", "padded rows", "lines across"])
def test_worst_element_relative_error(rng, op, classes, layout):
    """Every element of float32 log_softmax over 100-1000 classes of N(0, 1) logits within
    2.5e-7 relative of the float64 result (PyTorch: 1e-7 to 3e-7), softmax within 1e-6 (PyTorch:
    4e-7 to 2e-6; exp(x - max) inherits the rounding of x - max). oneDNN's log_softmax was 1e-6
    to 1e-5 off (its log of the sum), hence the native kernel. The bounds hold for the kernel of
    each layout: contiguous lines (oneDNN for softmax), padded rows (strided rows, native), lines
    across (over dim 0 of a row-major matrix: the tile kernel)."""
    rows = 256
    logits = rng.normal(size=(rows, classes)).astype(np.float32)
    exact = getattr(TF, op)(torch.from_numpy(logits).double(), 1).numpy()
    if layout == "contiguous":
        got = getattr(F, op)(pf.from_numpy(logits), 1)
    elif layout == "padded rows":
        padded = np.zeros((rows, classes + 5), np.float32)
        padded[:, :classes] = logits
        got = getattr(F, op)(pf.from_numpy(padded)[:, :classes], 1)
    else:
        got = getattr(F, op)(pf.from_numpy(np.ascontiguousarray(logits.T)), 0).t()
    worst = np.max(np.abs(got.numpy().astype(np.float64) - exact) / np.abs(exact))
    assert worst <= (2.5e-7 if op == "log_softmax" else 1e-6), worst


# ---- which kernel runs --------------------------------------------------------------------------------

WHICH = """
import sys
import plugflow as pf
import plugflow.nn.functional as F
cases = {
    "ln oneDNN": lambda: F.layer_norm(pf.randn(1024, 128), (128,), pf.ones(128), pf.zeros(128)),
    "ln oneDNN 3-d": lambda: F.layer_norm(pf.randn(4, 171, 3, 65), (3, 65)),
    "ln native small": lambda: F.layer_norm(pf.randn(64, 256), (256,)),
    "ln native short rows": lambda: F.layer_norm(pf.randn(8192, 64), (64,)),
    "ln native float64": lambda: F.layer_norm(pf.randn(1024, 128).double(), (128,)),
    "ln backward native": lambda: F.layer_norm(pf.randn(1024, 128, requires_grad=True), (128,)).sum().backward(),
    "softmax oneDNN": lambda: F.softmax(pf.randn(64, 100), -1),
    "softmax oneDNN 4-d": lambda: F.softmax(pf.randn(2, 3, 11, 37), 3),
    "softmax oneDNN trailing 1": lambda: F.softmax(pf.randn(160, 13, 1), 1),
    "softmax native small": lambda: F.softmax(pf.randn(64, 10), 1),
    "log_softmax native": lambda: F.log_softmax(pf.randn(256, 1000), 1),
    "softmax native dim 1": lambda: F.softmax(pf.randn(16, 10, 32), 1),
    "softmax native transposed": lambda: F.softmax(pf.randn(100, 64).t(), 1),
    "softmax native float64": lambda: F.softmax(pf.randn(64, 10).double(), 1),
}
for name, f in cases.items():
    print("case", name, flush=True)
    f()
    sys.stdout.flush()
"""


def test_which_kernel_runs():
    """oneDNN's verbose log names each primitive it runs: the rules above, call by call."""
    env = dict(os.environ, DNNL_VERBOSE="1")
    out = subprocess.run([sys.executable, "-c", WHICH], env=env, capture_output=True, text=True, check=True).stdout
    runs, name = {}, None
    for line in out.splitlines():
        if line.startswith("case "):
            name = line[5:]
            runs[name] = []
        elif line.startswith("onednn_verbose,exec,cpu,") and name is not None:
            runs[name].append(line.split(",")[3])
    assert set(runs) == {line[5:] for line in out.splitlines() if line.startswith("case ")}
    for name, prims in runs.items():
        if "oneDNN" in name:
            want = "layer_normalization" if name.startswith("ln") else "softmax_v2"
            assert prims == [want], (name, prims)
        elif name == "ln backward native":
            assert prims == ["layer_normalization"], (name, prims)  # the forward only
        else:
            assert prims == [], (name, prims)
