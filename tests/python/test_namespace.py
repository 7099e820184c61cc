"""The torch-namespace names of plugflow._namespace_more against PyTorch 1.13: the top-level aliases
of nn.functional with ATen's signatures (values and float64 gradients on random inputs, integer
reductions), the deprecated linear-algebra wrappers (values, warnings, errors), poisson and
binomial (generator replay, moments, errors) and the process-wide settings."""

import warnings

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_matches, seeded_rng


def _compare(fn, *arrays, rtol=1e-10, atol=1e-12):
    """fn(lib, *tensors) on torch and plugflow from the same numpy arrays (floating arrays require
    grad): the same outcome, exception class or value, and the same gradients of the sum."""
    def run(lib):
        tensors = [lib.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
        return tensors, fn(lib, *tensors)

    try:
        inputs_t, out_t = run(torch)
    except Exception as e:  # noqa: BLE001 - the class is compared
        try:
            run(pf)
        except Exception as got:  # noqa: BLE001
            assert type(got).__name__.lstrip("_") == type(e).__name__.lstrip("_"), (got, e)
            return
        pytest.fail(f"plugflow did not raise; PyTorch raised {type(e).__name__}: {e}")
    inputs_p, out_p = run(pf)
    assert_matches(out_p, out_t.detach(), rtol=rtol, atol=atol)
    if out_t.requires_grad:
        weights = np.random.default_rng(0).uniform(0.5, 1.5, tuple(out_t.shape))
        (out_t * torch.tensor(weights)).sum().backward()
        (out_p * pf.tensor(weights)).sum().backward()
        for p, t in zip(inputs_p, inputs_t):
            if t.grad is not None:
                assert_matches(p.grad, t.grad, rtol=rtol, atol=atol)


def test_functional_aliases_match_pytorch():
    rng = seeded_rng()
    x, y, z = (rng.normal(size=(4, 6)) for _ in range(3))
    sign = rng.choice([-1.0, 1.0], size=4)
    probs = rng.uniform(0.05, 0.95, size=(4, 6))
    for reduction in (0, 1, 2, 7):
        _compare(lambda lib, a, t: lib.binary_cross_entropy_with_logits(a, t, None, None, reduction), x, probs)
        _compare(lambda lib, a, t, w: lib.binary_cross_entropy_with_logits(a, t, w[0].detach(), w[1].detach().abs(),
                                                                                reduction),
                 x, probs, y[:2])
        _compare(lambda lib, a, t: lib.kl_div(a, t, reduction, log_target=True), x, y)
        _compare(lambda lib, a, t: lib.kl_div(a, t.abs(), reduction), x, y)
        _compare(lambda lib, a, t: lib.hinge_embedding_loss(a, t, 0.7, reduction), x,
                 rng.choice([-1.0, 1.0], size=(4, 6)))
        _compare(lambda lib, a, b, t: lib.margin_ranking_loss(a[:, 0], b[:, 0], t, 0.2, reduction), x, y, sign)
        _compare(lambda lib, a, b, t: lib.cosine_embedding_loss(a, b, t, 0.1, reduction), x, y, sign)
        _compare(lambda lib, a, t: lib.poisson_nll_loss(a, t.abs(), True, True, 1e-8, reduction), x, y)
        _compare(lambda lib, a, t: lib.poisson_nll_loss(a.abs(), t.abs(), False, False, 1e-8, reduction), x, y)
        _compare(lambda lib, a, p, n: lib.triplet_margin_loss(a, p, n, 1.0, 2.0, 1e-6, True, reduction), x, y, z)
    _compare(lambda lib, a, b: lib.cosine_similarity(a, b, 0), x, y)
    _compare(lambda lib, a, b: lib.pairwise_distance(a, b, 1.5, 1e-6, True), x, y)
    _compare(lambda lib, a: lib.pixel_shuffle(a.reshape(1, 4, 2, 3), 2), x)
    _compare(lambda lib, a: lib.pixel_unshuffle(a.reshape(1, 1, 4, 6), 2), x)
    _compare(lambda lib, a, b, w: lib.bilinear(a[:, :3], b, w.reshape(4, 3, 6)[:2], w[0, :2]), x, y,
             rng.normal(size=(12, 6)))
    _compare(lambda lib, a, w: lib.instance_norm(a.reshape(2, 2, 6), w[0, :2], w[1, :2], None, None, True, 0.1,
                                                 1e-5, False), x, y)
    _compare(lambda lib, a: lib.channel_shuffle(a.detach().reshape(1, 4, 6), 2), x)
    _compare(lambda lib, a: lib.native_channel_shuffle(a.detach().reshape(1, 4, 6), 2), x)
    _compare(lambda lib, a: lib.hardshrink(a, 0.4), x)
    _compare(lambda lib, a: a.hardshrink(0.4), x)
    _compare(lambda lib, a: lib.hardshrink(a.long(), 0.4), x)
    _compare(lambda lib, a, w: lib.prelu(a.reshape(1, 4, 6), w[:, 0]), x, y)
    _compare(lambda lib, a: lib.threshold(a, 0.1, -2.0), x)
    _compare(lambda lib, a: lib.threshold_(a.detach().clone(), 0.1, -2.0), x)
    _compare(lambda lib, a: lib.rrelu(a, 0.1, 0.3), x)  # eval mode: the mean slope
    _compare(lambda lib, a: lib.rrelu_(a.detach().clone(), 0.1, 0.3, False), x)


def test_ctc_loss_alias_matches_pytorch():
    rng = seeded_rng()
    log_probs = rng.normal(size=(6, 2, 5))
    targets = rng.integers(1, 5, size=(2, 3))
    for reduction in (0, 1, 2):
        _compare(lambda lib, lp, t: lib.ctc_loss(lp.log_softmax(2), t, [6, 5], [3, 2], 0, reduction, False),
                 log_probs, targets)
        _compare(lambda lib, lp, t: lib.ctc_loss(lp.log_softmax(2), t, lib.tensor([6, 4]), lib.tensor([3, 1]),
                                                 0, reduction, True), log_probs, targets)


def test_reduction_is_an_integer_as_in_aten():
    x = np.zeros((2, 3))
    _compare(lambda lib, a, t: lib.binary_cross_entropy_with_logits(a, t, None, None, "mean"), x, x)
    _compare(lambda lib, a, t: lib.kl_div(a, t, "sum"), x, x)
    _compare(lambda lib, a, b, t: lib.margin_ranking_loss(a, b, t, 0.0, "none"), x, x, x)
    # instance_norm and poisson_nll_loss take every argument, as ATen's
    _compare(lambda lib, a: lib.instance_norm(a.reshape(1, 2, 3)), x)
    _compare(lambda lib, a, t: lib.poisson_nll_loss(a, t), x, x)


def _warning_messages(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [(w.category, str(w.message).split(" (Triggered internally")[0]) for w in caught]


def test_deprecated_linalg_wrappers_match_pytorch():
    rng = seeded_rng()
    a, b, c = rng.normal(size=(3, 4)), rng.normal(size=(4, 5)), rng.normal(size=(5, 2))
    spd = rng.normal(size=(4, 4))
    spd = spd @ spd.T + 4 * np.eye(4)
    batch = rng.normal(size=(2, 3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _compare(lambda lib, x, y, z: lib.chain_matmul(x, y, z), a, b, c)
        _compare(lambda lib, x: lib.chain_matmul(x), a)
        _compare(lambda lib, x: lib.chain_matmul(x[0]), a)
        _compare(lambda lib: lib.chain_matmul())
        _compare(lambda lib, x, y: lib.chain_matmul(x, y.float()), a, b)
        _compare(lambda lib, x: lib.cholesky(x), spd)
        _compare(lambda lib, x: lib.cholesky(x, True), spd)
        _compare(lambda lib, x: lib.cholesky(x, upper=True), spd)
        _compare(lambda lib, x: lib.cholesky(-x), spd)
    _compare(lambda lib, x: lib.frobenius_norm(x), a)
    _compare(lambda lib, x: lib.frobenius_norm(x, (0,)), a)
    _compare(lambda lib, x: lib.frobenius_norm(x, 1, keepdim=True), a)
    _compare(lambda lib, x: lib.frobenius_norm(x, (0, 2)), batch)
    _compare(lambda lib, x: lib.frobenius_norm(x, (0, 1, 2)), batch)
    _compare(lambda lib, x: lib.frobenius_norm(x.long()), a)
    _compare(lambda lib, x: lib.nuclear_norm(x), a, rtol=1e-9)
    _compare(lambda lib, x: lib.nuclear_norm(x, True), a, rtol=1e-9)
    _compare(lambda lib, x: lib.nuclear_norm(x, (0, 2), True), batch, rtol=1e-9)
    _compare(lambda lib, x: lib.nuclear_norm(x), batch)
    _compare(lambda lib, x: lib.nuclear_norm(x[0]), a)
    _compare(lambda lib, x: lib.matrix_rank(x), a)


def test_deprecation_warnings_are_pytorchs():
    a = np.eye(3)
    for name, call in [("chain_matmul", lambda lib: lib.chain_matmul(lib.tensor(a), lib.tensor(a))),
                       ("cholesky", lambda lib: lib.cholesky(lib.tensor(a))),
                       ("frobenius_norm", lambda lib: lib.frobenius_norm(lib.tensor(a))),
                       ("nuclear_norm", lambda lib: lib.nuclear_norm(lib.tensor(a)))]:
        for lib in (torch, pf):  # warnings given once per process come every time
            lib.set_warn_always(True)
        try:
            assert _warning_messages(lambda: call(pf)) == _warning_messages(lambda: call(torch)), name
        finally:
            for lib in (torch, pf):
                lib.set_warn_always(False)
    assert len(_warning_messages(lambda: pf.cholesky(pf.eye(2)))) == 0  # given once already


def test_poisson_and_binomial():
    rng = seeded_rng()
    seed = int(rng.integers(2**31))
    rates = pf.tensor([0.5, 3.0, 40.0, 0.0]).repeat(5000).reshape(5000, 4)
    draws = pf.poisson(rates, generator=pf.Generator().manual_seed(seed))
    assert draws.dtype == pf.float32 and draws.shape == rates.shape
    assert pf.equal(draws, pf.poisson(rates, generator=pf.Generator().manual_seed(seed)))
    # means within 6 standard errors (sqrt(rate / 5000)) of the rates
    np.testing.assert_allclose(draws.mean(0).numpy(), [0.5, 3.0, 40.0, 0.0], atol=6 * np.sqrt(40 / 5000))
    counts = pf.tensor([[1.0, 20.0, 100.0, 0.0]], dtype=pf.float64).expand(5000, 4)
    probs = pf.tensor([[0.3, 0.9, 0.5, 0.5]], dtype=pf.float64).expand(5000, 4)
    draws = pf.binomial(counts, probs, generator=pf.Generator().manual_seed(seed))
    assert draws.dtype == pf.float64
    assert pf.equal(draws, pf.binomial(counts, probs, generator=pf.Generator().manual_seed(seed)))
    np.testing.assert_allclose(draws.mean(0).numpy(), [0.3, 18.0, 50.0, 0.0], atol=6 * np.sqrt(25 / 5000))
    _compare(lambda lib: lib.poisson(lib.tensor([1, 2])))
    _compare(lambda lib: lib.poisson(lib.tensor([-1.0])))
    _compare(lambda lib: lib.poisson(lib.tensor([[0.0, float("nan")]])))
    _compare(lambda lib: lib.binomial(lib.tensor([1.0]), lib.tensor([0.5], dtype=lib.float64)))
    _compare(lambda lib: lib.binomial(lib.tensor([1, 2]), lib.tensor([1, 0])))
    _compare(lambda lib: lib.binomial(lib.tensor([5.0, 3.0]), lib.tensor([0.0, 1.0])))


def test_matmul_precision_setting():
    assert pf.get_float32_matmul_precision() == torch.get_float32_matmul_precision() == "highest"
    try:
        for value in ("high", "medium", "highest"):
            pf.set_float32_matmul_precision(value)
            assert pf.get_float32_matmul_precision() == value
        pf.set_float32_matmul_precision("medium")
        with pytest.warns(UserWarning, match="foo is not one of 'highest', 'high', or 'medium'"):
            pf.set_float32_matmul_precision("foo")
        assert pf.get_float32_matmul_precision() == "medium"
    finally:
        pf.set_float32_matmul_precision("highest")


def test_interop_threads_and_flags():
    assert pf.get_num_interop_threads() >= 1
    with pytest.raises(RuntimeError, match="positive integer"):
        pf.set_num_interop_threads(0)
    with pytest.raises(RuntimeError, match="positive integer"):
        torch.set_num_interop_threads(0)
    try:
        assert not pf.is_warn_always_enabled()
        pf.set_warn_always(True)
        assert pf.is_warn_always_enabled()
    finally:
        pf.set_warn_always(False)
    for name in ("has_cuda", "has_cudnn", "has_lapack", "has_mkldnn", "has_openmp", "has_mkl", "has_spectral"):
        assert isinstance(getattr(pf, name), bool), name
    assert pf.has_lapack and pf.has_openmp and not pf.has_spectral
    assert pf.has_cuda == (pf.cuda.device_count() > 0)
    assert pf.compiled_with_cxx11_abi() is True


def test_interop_threads_set_once():
    # in a fresh process, as in PyTorch (where a second call aborts the process; plugflow raises)
    import subprocess
    import sys
    code = ("import plugflow as pf\npf.set_num_interop_threads(3)\nassert pf.get_num_interop_threads() == 3\n"
            "try:\n    pf.set_num_interop_threads(2)\nexcept RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "cannot set number of interop threads" in out


@pytest.mark.parametrize("name, args", [("uniform", (-1.0, 2.0)), ("normal", (0.5, 2.0)), ("constant", (0.25,)),
                                        ("eye", ()), ("dirac", ()), ("xavier_uniform", (1.5,)),
                                        ("xavier_normal", ()), ("kaiming_uniform", (0.1,)),
                                        ("kaiming_normal", ()), ("orthogonal", (2.0,)), ("sparse", (0.5,))])
def test_deprecated_init_aliases(name, args):
    shape = (4, 2, 3) if name == "dirac" else (4, 6)
    results = {}
    for lib in (torch, pf):
        tensor = lib.empty(shape, dtype=lib.float64)
        with pytest.warns(UserWarning) as caught:
            assert getattr(lib.nn.init, name)(tensor, *args) is tensor
        results[lib] = [str(w.message) for w in caught], tensor
    assert results[pf][0] == results[torch][0] == [f"nn.init.{name} is now deprecated in favor of nn.init.{name}_."]
    if name in ("constant", "eye", "dirac"):
        assert_matches(results[pf][1], results[torch][1])


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (3, 2, 4), (4, 4)])
def test_orthogonal_init_is_orthogonal(shape):
    seeded_rng(seed_plugflow=True)
    for dtype in (pf.float32, pf.float64):
        w = pf.nn.init.orthogonal_(pf.empty(shape, dtype=dtype), gain=1.5).reshape(shape[0], -1).double()
        gram = w @ w.t() if shape[0] <= w.shape[1] else w.t() @ w
        assert pf.allclose(gram, 2.25 * pf.eye(gram.shape[0], dtype=pf.float64), atol=1e-5)
