"""The oneDNN convolution kernels of the CPU plugin and their algorithm search.

float32 conv2d / conv2d_grad_input / conv2d_grad_weight run on oneDNN (Priority::Optimized);
float64 stays on the im2col kernels. Both strategies of optimizations.conv_algo_search must give
PyTorch's numbers and the im2col path's (float64) numbers, forward and both gradients, on odd
shapes, groups, dilation, stride, padding and non-contiguous operands; reordered weights must
follow in-place weight updates; the `exhaustive` choices persist in the algo_cache file (run 1
searches and writes it, run 2 reads it and does not time), and a corrupt file is a warning.

The `exhaustive` strategy runs in subprocesses with their own config file. Every test draws a
new seed (printed, so a failure can be replayed with SEED=<n>)."""

import json
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
from helpers import from_torch, to_torch

CONV_OPS = {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"}


@pytest.fixture
def rng():
    seed = int(os.environ.get("SEED", np.random.SeedSequence().entropy % 2**32))
    print(f"SEED={seed}")
    return np.random.default_rng(seed)


# The problem generator and the comparison run both here and in the subprocesses (as source).
SHARED = textwrap.dedent('''
    import numpy as np
    import torch
    import torch.nn.functional as TF
    import plugflow as pf
    import plugflow.nn.functional as F

    def random_problem(rng, winograd_friendly=False):
        """A random conv2d problem: odd sizes, groups, stride, padding, dilation, bias, layouts."""
        if winograd_friendly:  # 3x3, stride 1, no dilation: where oneDNN has a winograd kernel
            return dict(n=int(rng.integers(1, 4)), cin=int(rng.integers(3, 20)), cout=int(rng.integers(3, 20)),
                        k=(3, 3), hw=tuple(int(v) for v in rng.integers(5, 18, size=2)),
                        kwargs=dict(stride=1, padding=1, dilation=1, groups=1), bias=True, layout="contiguous")
        while True:
            groups = int(rng.integers(1, 4))
            cin, cout = groups * int(rng.integers(1, 5)), groups * int(rng.integers(1, 5))
            k = tuple(int(v) for v in rng.integers(1, 6, size=2))
            stride = tuple(int(v) for v in rng.integers(1, 4, size=2))
            padding = tuple(int(v) for v in rng.integers(0, 3, size=2))
            dilation = tuple(int(v) for v in rng.integers(1, 3, size=2))
            hw = tuple(int(v) for v in rng.integers(1, 14, size=2))
            if all(hw[i] + 2 * padding[i] >= dilation[i] * (k[i] - 1) + 1 for i in range(2)):
                return dict(n=int(rng.integers(1, 4)), cin=cin, cout=cout, k=k, hw=hw,
                            kwargs=dict(stride=stride, padding=padding, dilation=dilation, groups=groups),
                            bias=bool(rng.integers(0, 2)),
                            layout=["contiguous", "channels_last", "strided"][int(rng.integers(0, 3))])

    def laid_out(data, layout, lib):
        """data (numpy) as a lib tensor in a layout: contiguous, channels-last or every other column."""
        if layout == "channels_last":
            mem = np.ascontiguousarray(np.moveaxis(data, 1, -1))
            return lib.from_numpy(mem.copy()).movedim(-1, 1)
        if layout == "strided":
            big = np.zeros(data.shape[:-1] + (2 * data.shape[-1],), dtype=data.dtype)
            big[..., ::2] = data
            return lib.from_numpy(big)[..., ::2]
        return lib.from_numpy(data.copy())

    def run_problem(rng, p, dtype):
        """conv2d forward and the three gradients in plugflow (dtype) and in torch (float64), as
        float64 numpy arrays: (plugflow results, torch results)."""
        x = rng.uniform(-1, 1, size=(p["n"], p["cin"]) + p["hw"])
        w = rng.uniform(-1, 1, size=(p["cout"], p["cin"] // p["kwargs"]["groups"]) + p["k"])
        b = rng.uniform(-1, 1, size=(p["cout"],)) if p["bias"] else None
        results = []
        for lib, fn in ((pf, F.conv2d), (torch, TF.conv2d)):
            dt = getattr(lib, dtype) if lib is pf else torch.float64
            xs = laid_out(x, p["layout"], lib).to(dt).requires_grad_()
            ws = laid_out(w, "strided" if p["layout"] == "strided" else "contiguous", lib).to(dt).requires_grad_()
            bs = lib.from_numpy(b.copy()).to(dt).requires_grad_() if b is not None else None
            out = fn(xs, ws, bs, **p["kwargs"])
            # A non-contiguous upstream gradient: every other element of a wider tensor.
            g = np.random.default_rng(0).uniform(-1, 1, size=tuple(out.shape))
            big = np.zeros(g.shape[:-1] + (2 * g.shape[-1],))
            big[..., ::2] = g
            out.backward(lib.from_numpy(big).to(dt)[..., ::2])
            grads = [out, xs.grad, ws.grad] + ([bs.grad] if bs is not None else [])
            results.append([t.detach().double().numpy() for t in grads])
        return results

    def assert_close(actual, expected, rtol):
        """Each array within rtol of the largest magnitude of its expected array."""
        for a, e in zip(actual, expected):
            assert a.shape == e.shape, (a.shape, e.shape)
            scale = max(1.0, float(np.abs(e).max()) if e.size else 1.0)
            err = float(np.abs(a - e).max()) if e.size else 0.0
            assert err <= rtol * scale, f"max error {err} > {rtol} * {scale}"
''')
exec(SHARED)  # noqa: S102 - the same helpers as the subprocesses run

# float32 accumulation over at most a few hundred products (winograd transforms add a little).
F32_RTOL = 2e-5 * 50


def choices_for(ops=CONV_OPS):
    return [c for c in _C.algo_choices() if c["op"] in ops and c["provider"] == "cpu"]


# ---- in this process: the configured strategy (heuristic by default) -----------------------------

def test_float32_runs_on_onednn():
    assert _C.chosen_provider("conv2d", "cpu", pf.float32) == "cpu"
    kinds = {(k.op, repr(k.dtype).split(".")[-1], k.priority) for k in _C.registered_kernels()
             if k.op in CONV_OPS and k.provider == "cpu"}
    for op in CONV_OPS:
        assert (op, "float32", "optimized") in kinds  # oneDNN
        assert (op, "float64", "default") in kinds  # im2col
    x = pf.randn(2, 3, 9, 7, requires_grad=True)
    w = pf.randn(5, 3, 3, 3, requires_grad=True)
    out = F.conv2d(x, w, padding=1)
    out.backward(pf.randn(*out.shape))
    strategy = _C.current_config()["optimizations"]["conv_algo_search"]
    key = "in=2x3x9x7 out=2x5x9x7 k=3x3 s=1x1 p=1x1 d=1x1 g=1"
    found = {c["op"]: c for c in choices_for() if key in c["key"]}
    assert set(found) == CONV_OPS, _C.algo_choices()
    for c in found.values():
        assert c["source"] in (("heuristic",) if strategy == "heuristic" else ("search", "cache"))
        assert c["implementation"]


# (batch, channels, size) -> the heuristic's float32 algorithm for a 3x3, stride-1 convolution:
# Winograd from 48 output tiles of 4x4 in the batch with 32+ channels each side, else direct
# (plugins/cpu/src/onednn/conv.cpp, heuristic_algorithm). Where oneDNN has no Winograd kernel
# (no AVX-512) the rule's choice is unimplemented and the heuristic falls back to oneDNN's auto.
HEURISTIC_CASES = [((16, 64, 32), "winograd"), ((16, 512, 4), "direct"), ((1, 512, 7), "direct"),
                   ((1, 64, 56), "winograd"), ((3, 16, 40), "direct"), ((2, 32, 16), "direct"), ((2, 32, 20), "winograd")]


@pytest.mark.skipif(_C.current_config()["optimizations"]["conv_algo_search"] != "heuristic",
                    reason="the configured strategy is not the heuristic")
@pytest.mark.parametrize("shape, expected", HEURISTIC_CASES)
def test_heuristic_winograd_rule(shape, expected):
    n, c, size = shape
    x = pf.randn(n, c, size, size, requires_grad=True)
    w = pf.randn(c, c, 3, 3, requires_grad=True)
    out = F.conv2d(x, w, padding=1)
    out.backward(pf.ones(*out.shape))
    key = f"f32 in={n}x{c}x{size}x{size} out={n}x{c}x{size}x{size} k=3x3 s=1x1 p=1x1 d=1x1 g=1 st="
    found = {c_["op"]: c_ for c_ in choices_for() if c_["key"].startswith(key)}
    assert set(found) == CONV_OPS, _C.algo_choices()
    winograd_here = any(c_["algorithm"] == "winograd" for c_ in choices_for())
    for choice in found.values():
        assert choice["source"] == "heuristic"
        if expected == "winograd" and not winograd_here:
            assert choice["algorithm"] == "auto"
        else:
            assert choice["algorithm"] == expected, choice
            assert ("wino" in choice["implementation"]) == (expected == "winograd"), choice


@pytest.mark.parametrize("case", range(10))
def test_matches_torch(rng, case):
    p = random_problem(rng, winograd_friendly=case == 0)
    pf32, torch64 = run_problem(rng, p, "float32")
    assert_close(pf32, torch64, F32_RTOL)


@pytest.mark.parametrize("case", range(6))
def test_float32_agrees_with_float64_im2col(rng, case):
    p = random_problem(rng)
    seed = int(rng.integers(2**32))
    pf32, _ = run_problem(np.random.default_rng(seed), p, "float32")
    pf64, torch64 = run_problem(np.random.default_rng(seed), p, "float64")
    assert_close(pf64, torch64, 1e-10)
    assert_close(pf32, pf64, F32_RTOL)


def test_conv_transpose_output_padding(rng):
    """conv_transpose2d is conv2d_grad_input with a taller image; output_padding up to
    max(stride, dilation) - 1 needs a negative right padding that oneDNN may not express
    (then im2col runs): both must give PyTorch's numbers."""
    for stride, dilation, output_padding in [(2, 1, 1), (3, 1, 2), (1, 3, 2), (2, 3, 2)]:
        x = rng.uniform(-1, 1, size=(2, 4, 5, 6)).astype("float32")
        w = rng.uniform(-1, 1, size=(4, 3, 3, 2)).astype("float32")
        xp, wp = pf.from_numpy(x).requires_grad_(), pf.from_numpy(w).requires_grad_()
        xt, wt = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
        kw = dict(stride=stride, padding=1, output_padding=output_padding, dilation=dilation)
        out_p, out_t = F.conv_transpose2d(xp, wp, **kw), TF.conv_transpose2d(xt, wt, **kw)
        g = rng.uniform(-1, 1, size=tuple(out_t.shape)).astype("float32")
        out_p.backward(pf.from_numpy(g))
        out_t.backward(torch.from_numpy(g))
        assert_close([to_torch(t).double().numpy() for t in (out_p, xp.grad, wp.grad)],
                     [t.detach().double().numpy() for t in (out_t, xt.grad, wt.grad)], F32_RTOL)


def test_expanded_operands(rng):
    """Stride-0 (expanded) operands, which oneDNN cannot describe, are copied dense: an expanded
    image and sum()'s expanded upstream gradient."""
    x = rng.uniform(-1, 1, size=(1, 3, 1, 6)).astype("float32")
    w = rng.uniform(-1, 1, size=(2, 3, 2, 2)).astype("float32")
    xp = pf.from_numpy(x).expand(2, 3, 5, 6).requires_grad_()
    wp = pf.from_numpy(w).requires_grad_()
    xt = torch.from_numpy(x).expand(2, 3, 5, 6).requires_grad_()
    wt = torch.from_numpy(w).requires_grad_()
    out_p, out_t = F.conv2d(xp, wp), TF.conv2d(xt, wt)
    out_p.sum().backward()
    out_t.sum().backward()
    assert_close([to_torch(t).numpy() for t in (out_p, xp.grad, wp.grad)],
                 [t.detach().numpy() for t in (out_t, xt.grad, wt.grad)], F32_RTOL)
    copied = {c["op"] for c in choices_for() if "in=2x3x5x6 out=2x2x4x5 k=2x2" in c["key"] and "copy:" in c["key"]}
    assert copied == CONV_OPS, _C.algo_choices()


def test_weight_update_invalidates_reordered_weights(rng):
    """A weight version used a second time keeps its reordered form (a version used once is
    reordered per call): in-place updates (optimizer steps, in-place ops on a view) must be seen
    by the next call, whether the old version was kept or not."""
    x = torch.from_numpy(rng.uniform(-1, 1, size=(3, 16, 11, 9)).astype("float32"))
    w = torch.from_numpy(rng.uniform(-1, 1, size=(32, 16, 3, 3)).astype("float32"))
    xp, wp = from_torch(x), from_torch(w)
    conv = lambda lib_x, lib_w, fn: fn(lib_x, lib_w, padding=1)  # noqa: E731
    assert_close([to_torch(conv(xp, wp, F.conv2d)).numpy()], [conv(x, w, TF.conv2d).numpy()], F32_RTOL)
    for step, calls in enumerate((1, 2, 3, 1, 3)):  # once: a temporary; twice: kept; 3 times: reused
        delta = rng.uniform(-1, 1, size=tuple(w.shape)).astype("float32")
        wp.add_(pf.from_numpy(delta))
        w.add_(torch.from_numpy(delta))
        wp[step].mul_(-2.0)  # through a view of the same storage
        w[step].mul_(-2.0)
        for _ in range(calls):
            assert_close([to_torch(conv(xp, wp, F.conv2d)).numpy()], [conv(x, w, TF.conv2d).numpy()], F32_RTOL)
    # An SGD step on a module's weight.
    net_p, net_t = pf.nn.Conv2d(16, 8, 3, padding=1), torch.nn.Conv2d(16, 8, 3, padding=1)
    with torch.no_grad():
        net_t.weight.copy_(to_torch(net_p.weight))
        net_t.bias.copy_(to_torch(net_p.bias))
    opt_p = pf.optim.SGD(net_p.parameters(), lr=0.5)
    opt_t = torch.optim.SGD(net_t.parameters(), lr=0.5)
    for _ in range(3):
        for net, opt, inp in ((net_p, opt_p, xp), (net_t, opt_t, x)):
            opt.zero_grad()
            net(inp).square().sum().backward()
            opt.step()
        assert_close([to_torch(net_p(xp).detach()).numpy()], [net_t(x).detach().numpy()], 1e-3)


def test_thread_count_changes(rng):
    """Primitives are built per thread count; results do not depend on it."""
    x = rng.uniform(-1, 1, size=(4, 8, 13, 10)).astype("float32")
    w = rng.uniform(-1, 1, size=(6, 8, 3, 3)).astype("float32")
    expected = TF.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2).numpy()
    before = pf.get_num_threads()
    try:
        for n in (1, 2, 3):
            pf.set_num_threads(n)
            out = F.conv2d(pf.from_numpy(x), pf.from_numpy(w), stride=2)
            assert_close([to_torch(out).numpy()], [expected], F32_RTOL)
    finally:
        pf.set_num_threads(before)


def test_bad_input_errors():
    x = pf.randn(1, 3, 5, 5)
    with pytest.raises(RuntimeError):
        TF.conv2d(torch.randn(1, 3, 5, 5), torch.randn(2, 3, 3, 3, dtype=torch.float64))
    with pytest.raises((RuntimeError, ValueError)):
        F.conv2d(x, pf.randn(2, 3, 3, 3, dtype=pf.float64))
    with pytest.raises(RuntimeError, match="channels"):
        F.conv2d(x, pf.randn(2, 4, 3, 3))


# ---- subprocesses with the exhaustive strategy and a cache file ------------------------------------

WORKER = SHARED + textwrap.dedent('''
    import json, sys
    from plugflow import _C
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    rng = np.random.default_rng(seed)
    problems = [random_problem(rng, winograd_friendly=i < 2) for i in range(count)]
    for p in problems:
        pf32, torch64 = run_problem(rng, p, "float32")
        assert_close(pf32, torch64, %r)
    print(json.dumps([c for c in _C.algo_choices() if c["provider"] == "cpu"]))
''' % F32_RTOL)


def run_worker(tmp_path, seed, cache, count=4):
    cfg = tmp_path / "exhaustive.yaml"
    cfg.write_text(textwrap.dedent(f"""\
        plugins: [cpu]
        kernels: {{prefer: [cpu]}}
        threads: 2
        optimizations:
          conv_algo_search: exhaustive
          algo_cache: {cache}
        """))
    env = dict(os.environ, PLUGFLOW_CONFIG=str(cfg))
    proc = subprocess.run([sys.executable, "-c", WORKER, str(seed), str(count)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_exhaustive_search_and_cache_round_trip(rng, tmp_path):
    seed = int(rng.integers(2**32))
    cache = tmp_path / "sub" / "algos.yaml"  # its directory does not exist yet
    first, err = run_worker(tmp_path, seed, cache)
    assert "warning" not in err
    assert first and {c["source"] for c in first} == {"search"}
    assert {c["algorithm"] for c in first} <= {"direct", "winograd"}
    assert cache.exists() and not list(cache.parent.glob("*.tmp*"))
    text = cache.read_text()
    for c in first:
        assert f"{c['op']} {c['key']}" in text
    second, err = run_worker(tmp_path, seed, cache)
    assert "warning" not in err
    assert {c["source"] for c in second} == {"cache"}  # read, not timed
    assert {(c["op"], c["key"], c["algorithm"]) for c in second} == {(c["op"], c["key"], c["algorithm"]) for c in first}
    assert cache.read_text() == text  # nothing new to write


def test_cache_file_keeps_other_sections(rng, tmp_path):
    cache = tmp_path / "algos.yaml"
    cache.write_text("cuda cudnn 8.9:\n  'conv2d f16 some key': '1'\n")
    choices, _ = run_worker(tmp_path, int(rng.integers(2**32)), cache, count=1)
    text = cache.read_text()
    assert "cuda cudnn 8.9" in text and "some key" in text
    assert all(f"{c['op']} {c['key']}" in text for c in choices)


@pytest.mark.parametrize("content", ["{{{ not: yaml: [", "- a list\n- not a map\n", "cpu: 3\n", "\x00\xff binary"])
def test_corrupt_cache_file_warns_and_works(rng, tmp_path, content):
    cache = tmp_path / "algos.yaml"
    cache.write_text(content)
    seed = int(rng.integers(2**32))
    choices, err = run_worker(tmp_path, seed, cache, count=2)
    assert "warning" in err and "algorithm cache" in err and str(cache) in err
    assert {c["source"] for c in choices} == {"search"}
    # The file was replaced by a valid one that the next run reads (the same problems: from it).
    again, err = run_worker(tmp_path, seed, cache, count=2)
    assert "warning" not in err
    assert {c["source"] for c in again} == {"cache"}


def test_info_algos_lists_choices(tmp_path):
    x = pf.randn(1, 2, 6, 6)
    F.conv2d(x, pf.randn(3, 2, 3, 3))
    from io import StringIO
    from plugflow import info
    out = StringIO()
    info.report(out, algos=True)
    text = out.getvalue()
    assert "algorithm choices" in text
    assert "cpu conv2d f32 in=1x2x6x6 out=1x3x4x4 k=3x3" in text
    proc = subprocess.run([sys.executable, "-m", "plugflow.info", "--algos"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "algorithm choices (0;" in proc.stdout
