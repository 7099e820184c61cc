"""The oneDNN pooling kernels of the CPU plugin (plugins/cpu/src/onednn/pool.cpp).

float32 max_pool2d / avg_pool2d / avg_pool2d_backward run on oneDNN's jit kernels
(Priority::Optimized); float64, inputs under 4096 elements, oneDNN's non-jit cases (1-3
channels, dilated max pooling) and NaN inputs to max pooling run the native kernels. Every path must give PyTorch's numbers:
values, max pooling's indices (ties: the first maximum) and gradients, on random geometries
(kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor_override), odd sizes
and non-contiguous inputs. Whether oneDNN ran is read from ONEDNN_VERBOSE in a subprocess.

Every test draws a new seed (printed, so a failure can be replayed with SEED=<n>)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn.functional as F
from plugflow import _C
from helpers import backward_both, from_torch, seeded_rng, tensor_pair, to_torch, window_always_valid

POOL_OPS = {"max_pool2d", "avg_pool2d", "avg_pool2d_backward"}
LAYOUTS = ["contiguous", "transposed", "channels_last", "strided"]
MIN_ONEDNN = 4096  # input elements below which the native kernel runs (pool.cpp)


@pytest.fixture
def rng():
    return seeded_rng("SEED")


def random_geometry(rng, kind):
    """A random pooling call PyTorch accepts: (input shape, kwargs)."""
    while True:
        k = [int(v) for v in rng.integers(1, 6, size=2)]
        s = [int(v) for v in rng.integers(1, 4, size=2)]
        p = [int(rng.integers(0, k[i] // 2 + 1)) for i in range(2)]
        kw = dict(kernel_size=tuple(k), stride=tuple(s), padding=tuple(p), ceil_mode=bool(rng.integers(2)))
        if kind == "max":
            # dilated max pooling has only oneDNN's reference code (native): a quarter of the cases
            kw["dilation"] = tuple(int(v) for v in rng.integers(1, 3, size=2)) if rng.random() < 0.25 else (1, 1)
        else:
            kw["count_include_pad"] = bool(rng.integers(2))
            kw["divisor_override"] = [None, int(rng.integers(1, 10))][int(rng.integers(2))]
        n, h, w = int(rng.integers(1, 5)), int(rng.integers(1, 16)), int(rng.integers(1, 16))
        # mostly 4+ channels and enough elements for oneDNN's jit kernels, sometimes 1-3 channels
        # (its slower plain code: native)
        if rng.random() < 0.2:
            c = int(rng.integers(1, 4))
        else:
            c = max(int(rng.integers(4, 21)), -(-MIN_ONEDNN // (n * h * w)))
        shape = (n, c, h, w)
        try:
            fn = TF.max_pool2d if kind == "max" else TF.avg_pool2d
            out = fn(torch.zeros(shape), **kw)
        except RuntimeError:
            continue
        d = kw.get("dilation", (1, 1))
        if all(window_always_valid(shape[2 + i], out.shape[2 + i], k[i], s[i], p[i], d[i]) for i in range(2)):
            return shape, kw


def random_values(rng, shape, dtype):
    """Uniform values, or small integers (many ties) half the time."""
    if rng.random() < 0.5:
        return rng.integers(-3, 4, size=shape).astype(dtype)
    return rng.uniform(-2, 2, size=shape).astype(dtype)


def assert_close(actual, expected, dtype):
    tol = 1e-5 if dtype == "float32" else 1e-10
    torch.testing.assert_close(to_torch(actual).double(), expected.detach().double(), rtol=tol, atol=tol,
                               equal_nan=True)


def check_max_pool(rng, x, kw, dtype, layout="contiguous"):
    """values and indices equal PyTorch's exactly; the input gradient (through the indices) too."""
    xp, xt = tensor_pair(x, layout, grad=True)
    vp, ip = F.max_pool2d(xp, return_indices=True, **kw)
    vt, it = TF.max_pool2d(xt, return_indices=True, **kw)
    torch.testing.assert_close(to_torch(vp), vt.detach(), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(to_torch(ip), it), (kw, to_torch(ip), it)
    backward_both(rng, vp, vt)
    assert_close(xp.grad, xt.grad, dtype)


def check_avg_pool(rng, x, kw, dtype, layout="contiguous", expanded_grad=False):
    """forward and input gradient against PyTorch; expanded_grad backpropagates from sum(), whose
    gradient reaching avg_pool2d_backward is a stride-0 tensor."""
    xp, xt = tensor_pair(x, layout, grad=True)
    yp, yt = F.avg_pool2d(xp, **kw), TF.avg_pool2d(xt, **kw)
    assert_close(yp, yt, dtype)
    if expanded_grad:
        yp.sum().backward()
        yt.sum().backward()
    else:
        backward_both(rng, yp, yt)
    assert_close(xp.grad, xt.grad, dtype)


def test_float32_kernels_are_onednn():
    kinds = {(k.op, repr(k.dtype).split(".")[-1], k.priority) for k in _C.registered_kernels()
             if k.op in POOL_OPS and k.provider == "cpu"}
    for op in POOL_OPS:
        assert (op, "float32", "optimized") in kinds  # oneDNN
        assert (op, "float64", "default") in kinds  # native


@pytest.mark.parametrize("dtype,case", [("float32", i) for i in range(24)] + [("float64", i) for i in range(4)])
def test_max_pool_matches_torch(rng, dtype, case):
    shape, kw = random_geometry(rng, "max")
    check_max_pool(rng, random_values(rng, shape, dtype), kw, dtype, LAYOUTS[case % len(LAYOUTS)])


@pytest.mark.parametrize("dtype,case", [("float32", i) for i in range(24)] + [("float64", i) for i in range(4)])
def test_avg_pool_matches_torch(rng, dtype, case):
    shape, kw = random_geometry(rng, "avg")
    check_avg_pool(rng, random_values(rng, shape, dtype), kw, dtype, LAYOUTS[case % len(LAYOUTS)],
                   expanded_grad=case % 3 == 2)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("divisor_override", [None, 1, 7])
def test_avg_pool_ceil_mode_edge(rng, count_include_pad, divisor_override):
    """ceil_mode windows reaching past the padding: PyTorch's count_include_pad divisor clips
    them at the padding (oneDNN's would not), and a divisor_override replaces every divisor."""
    for hw, k, s, p in [((7, 9), 3, 2, 1), ((6, 6), 2, 2, 0), ((10, 7), (4, 3), (3, 2), (2, 1)), ((5, 5), 5, 3, 2)]:
        x = rng.uniform(-2, 2, size=(4, 49) + hw).astype("float32")
        kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=True, count_include_pad=count_include_pad,
                  divisor_override=divisor_override)
        check_avg_pool(rng, x, kw, "float32")


def test_network_shapes_and_large_windows(rng):
    """The shapes these kernels are for (odd batch sizes and planes included), and a max pooling
    window of 256+ elements, whose workspace positions oneDNN stores as s32 instead of u8."""
    check_max_pool(rng, rng.uniform(-2, 2, size=(3, 64, 37, 37)).astype("float32"),
                   dict(kernel_size=3, stride=2, padding=1), "float32")
    check_max_pool(rng, rng.uniform(-2, 2, size=(2, 32, 35, 35)).astype("float32"),
                   dict(kernel_size=3, stride=2, ceil_mode=True), "float32", "channels_last")
    check_avg_pool(rng, rng.uniform(-2, 2, size=(2, 48, 17, 17)).astype("float32"),
                   dict(kernel_size=3, stride=1, padding=1, count_include_pad=False), "float32")
    check_avg_pool(rng, rng.uniform(-2, 2, size=(3, 40, 7, 7)).astype("float32"), dict(kernel_size=7), "float32")
    check_max_pool(rng, rng.integers(-5, 5, size=(2, 16, 20, 40)).astype("float32"),
                   dict(kernel_size=(16, 17), stride=(1, 2)), "float32")


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_max_pool_nan(rng, layout):
    """PyTorch returns a window's NaN (the last one) and its index; oneDNN would skip it, so such
    inputs run natively. Average pooling propagates NaN on oneDNN as it is."""
    for _ in range(4):
        shape, kw = random_geometry(rng, "max")
        x = rng.uniform(-2, 2, size=shape).astype("float32")
        x[rng.random(x.shape) < 0.1] = np.nan
        check_max_pool(rng, x, kw, "float32", layout)
        shape, kw = random_geometry(rng, "avg")
        x = rng.uniform(-2, 2, size=shape).astype("float32")
        x[rng.random(x.shape) < 0.1] = np.nan
        check_avg_pool(rng, x, kw, "float32", layout)


def test_max_pool_infinities(rng):
    """Windows of only -inf give -inf and the first element's index (oneDNN's max starts from
    -FLT_MAX: those calls rerun natively); -FLT_MAX and +inf are ordinary values."""
    lowest = np.finfo(np.float32).min
    for fill in (-np.inf, lowest):
        x = rng.uniform(-2, 2, size=(2, 24, 9, 11)).astype("float32")
        x[:, :, :5, :6] = fill
        x[0, 3, 7, 7] = np.inf
        x[1, 5, 2, 2] = -np.inf
        x[1, 6, 0, 0] = lowest
        for kw in [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, ceil_mode=True)]:
            check_max_pool(rng, x, kw, "float32")


def test_thread_counts_agree(rng):
    """Primitives are cached per thread count; one and two threads give the same numbers."""
    x = pf.from_numpy(rng.uniform(-2, 2, size=(4, 24, 21, 19)).astype("float32"))
    threads = pf.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            pf.set_num_threads(n)
            v, i = F.max_pool2d(x, 3, 2, 1, return_indices=True)
            a = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True)
            results.append([t.numpy() for t in (v, i, a)])
    finally:
        pf.set_num_threads(threads)
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)


def test_bad_input_raises_like_torch():
    x = pf.zeros(1, 8, 5, 5)
    xt = torch.zeros(1, 8, 5, 5)
    for fn, tfn, kw in [(F.max_pool2d, TF.max_pool2d, dict(kernel_size=2, padding=2)),
                        (F.avg_pool2d, TF.avg_pool2d, dict(kernel_size=3, padding=2)),
                        (F.max_pool2d, TF.max_pool2d, dict(kernel_size=7)),
                        (F.avg_pool2d, TF.avg_pool2d, dict(kernel_size=6)),
                        (F.avg_pool2d, TF.avg_pool2d, dict(kernel_size=2, divisor_override=0))]:
        with pytest.raises(RuntimeError) as expected:
            tfn(xt, **kw)
        with pytest.raises(RuntimeError) as got:
            fn(x, **kw)
        first = str(expected.value).split(",")[0].split(":")[0]
        assert first.lower() in str(got.value).lower(), (str(got.value), str(expected.value))


# Runs in a subprocess with ONEDNN_VERBOSE=1: each case prints a marker, then oneDNN prints one
# line per primitive it executes.
VERBOSE_SCRIPT = textwrap.dedent('''
    import numpy as np
    import plugflow as pf
    import plugflow.nn.functional as F

    rng = np.random.default_rng(0)
    def x(shape, dtype="float32", nan=False):
        a = rng.uniform(-1, 1, size=shape).astype(dtype)
        if nan:
            a[0, 0, 0, 0] = np.nan
        return pf.from_numpy(a).requires_grad_()

    def case(name, fn):
        print("CASE", name, flush=True)
        fn()
        print("", flush=True)

    case("max_f32", lambda: F.max_pool2d(x((2, 16, 12, 12)), 3, 2, 1))
    case("max_f32_strided", lambda: F.max_pool2d(x((2, 16, 20, 16)).transpose(2, 3)[:, :, ::2], 2))
    case("avg_f32", lambda: F.avg_pool2d(x((2, 16, 12, 12)), 3, 2, 1, ceil_mode=True).sum().backward())
    case("avg_f32_divisor", lambda: F.avg_pool2d(x((2, 16, 12, 12)), 2, divisor_override=3).sum().backward())
    case("max_f64", lambda: F.max_pool2d(x((2, 16, 12, 12), "float64"), 3, 2, 1))
    case("avg_f64", lambda: F.avg_pool2d(x((2, 16, 12, 12), "float64"), 3, 2, 1).sum().backward())
    case("max_nan", lambda: F.max_pool2d(x((2, 16, 12, 12), nan=True), 3, 2, 1))
    case("max_dilated", lambda: F.max_pool2d(x((2, 16, 12, 12)), 3, 1, 1, dilation=2))
    case("max_one_channel", lambda: F.max_pool2d(x((8, 1, 32, 32)), 2))
    case("max_small", lambda: F.max_pool2d(x((1, 16, 15, 15)), 2))
    case("avg_small", lambda: F.avg_pool2d(x((1, 16, 15, 15)), 2).sum().backward())
''')


def test_onednn_runs_where_it_should():
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    out = subprocess.run([sys.executable, "-c", VERBOSE_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    runs = {}
    for block in out.stdout.split("CASE ")[1:]:
        name, _, rest = block.partition("\n")
        runs[name] = [line.split(",")[3:6] for line in rest.splitlines()
                      if line.startswith("onednn_verbose,exec,cpu,pooling")]
    assert set(runs) == {"max_f32", "max_f32_strided", "avg_f32", "avg_f32_divisor", "max_f64", "avg_f64",
                         "max_nan", "max_dilated", "max_one_channel", "max_small", "avg_small"}, out.stdout[-2000:]
    for name in ("max_f32", "max_f32_strided"):
        assert [r[2] for r in runs[name]] == ["forward_training"], runs[name]
    for name in ("avg_f32", "avg_f32_divisor"):
        assert [r[2] for r in runs[name]] == ["forward_training", "backward_data"], runs[name]
    assert all(r[1].startswith("jit") for name in ("max_f32", "avg_f32") for r in runs[name])
    for name in ("max_f64", "avg_f64", "max_nan", "max_dilated", "max_one_channel", "max_small", "avg_small"):
        assert runs[name] == [], (name, runs[name])
