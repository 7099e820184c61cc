"""nn losses against PyTorch 1.13, as functions (nn.functional) and modules (nn.*Loss):
cross_entropy (class indices and probabilities, weight, ignore_index, label_smoothing),
nll_loss, mse/l1/smooth_l1/huber, binary_cross_entropy (weight), binary_cross_entropy_with_logits
(weight, pos_weight) and kl_div (log_target, batchmean). Values and gradients on fresh random
inputs (the seed is printed on failure) with odd sizes, empty batches, non-contiguous layouts,
and PyTorch's exceptions and messages for bad shapes, targets and options."""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import plugflow as pf
import plugflow.nn as pnn
import plugflow.nn.functional as PF
from helpers import assert_matches, from_torch, seeded_rng, tensor_pair

REDUCTIONS = ["none", "mean", "sum"]


@pytest.fixture
def rng():
    return seeded_rng()


def close(actual, expected, rtol=1e-9, atol=1e-9):
    assert_matches(actual, expected.detach(), rtol=rtol, atol=atol)


def check_grads(rng, out_p, out_t, inputs):
    """Backpropagates one random upstream gradient through both results and compares the
    gradients of the (plugflow, torch) input pairs."""
    g = torch.from_numpy(rng.uniform(0.5, 1.5, size=tuple(out_t.shape))).to(out_t.dtype)
    out_t.backward(g)
    out_p.backward(from_torch(g))
    for p, t in inputs:
        assert p.grad is not None, "plugflow produced no gradient"
        close(p.grad, t.grad)


def same_error(call):
    """call(lib, F) raises the same exception type with the same message for torch and plugflow
    ('torch.Size' reads 'plugflow.Size')."""
    with pytest.raises(Exception) as expected:
        call(torch, TF)
    with pytest.raises(Exception) as actual:
        call(pf, PF)
    assert type(actual.value).__name__ == type(expected.value).__name__, (actual.value, expected.value)
    assert str(actual.value) == str(expected.value).replace("torch.", "plugflow."), (actual.value, expected.value)


def class_targets(rng, shape, n_classes, ignore_index=None):
    target = rng.integers(0, max(n_classes, 1), size=shape)
    if ignore_index is not None and target.size:
        target.flat[rng.integers(0, target.size, size=max(1, target.size // 3))] = ignore_index
    return target.astype(np.int64)


# (input shape, target shape): 1-d (no batch), 2-d, 3-d and 4-d ("K-dimensional") inputs.
CLASS_SHAPES = [((5,), ()), ((4, 3), (4,)), ((3, 4, 5), (3, 5)), ((2, 3, 2, 3), (2, 2, 3)), ((1, 1), (1,))]


# ---- cross_entropy / nll_loss ---------------------------------------------------------------------

@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("label_smoothing", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_class_indices(rng, reduction, label_smoothing, weighted):
    for (in_shape, t_shape) in CLASS_SHAPES:
        for ignore in (None, 1):
            n_classes = in_shape[0] if len(in_shape) == 1 else in_shape[1]
            layout = "transposed" if len(in_shape) >= 2 and rng.random() < 0.5 else "contiguous"
            x_p, x_t = tensor_pair(rng.normal(0, 2, size=in_shape), layout, grad=True)
            target = class_targets(rng, t_shape, n_classes, ignore)
            w_p, w_t = tensor_pair(rng.uniform(0.2, 2.0, size=n_classes)) if weighted else (None, None)
            kwargs = dict(reduction=reduction, label_smoothing=label_smoothing)
            if ignore is not None:
                kwargs["ignore_index"] = ignore
            out_t = TF.cross_entropy(x_t, torch.from_numpy(target), weight=w_t, **kwargs)
            out_p = PF.cross_entropy(x_p, pf.from_numpy(target), weight=w_p, **kwargs)
            close(out_p, out_t)
            if not torch.isnan(out_t).any():
                check_grads(rng, out_p, out_t, [(x_p, x_t)])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_class_probabilities(rng, reduction, label_smoothing, weighted):
    for shape in [(5,), (4, 3), (3, 4, 5), (2, 1)]:
        n_classes = shape[0] if len(shape) == 1 else shape[1]
        x_p, x_t = tensor_pair(rng.normal(0, 2, size=shape), grad=True)
        class_dim = 0 if len(shape) == 1 else 1
        probs = rng.uniform(0, 1, size=shape)
        probs /= probs.sum(axis=class_dim, keepdims=True)
        t_p, t_t = tensor_pair(probs, "transposed" if len(shape) > 1 else "contiguous", grad=True)
        w_p, w_t = tensor_pair(rng.uniform(0.2, 2.0, size=n_classes)) if weighted else (None, None)
        out_t = TF.cross_entropy(x_t, t_t, weight=w_t, reduction=reduction, label_smoothing=label_smoothing)
        out_p = PF.cross_entropy(x_p, t_p, weight=w_p, reduction=reduction, label_smoothing=label_smoothing)
        close(out_p, out_t)
        check_grads(rng, out_p, out_t, [(x_p, x_t), (t_p, t_t)])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(rng, reduction, weighted):
    for (in_shape, t_shape) in CLASS_SHAPES:
        n_classes = in_shape[0] if len(in_shape) == 1 else in_shape[1]
        x_p, x_t = tensor_pair(rng.normal(-2, 1, size=in_shape), grad=True)
        target = class_targets(rng, t_shape, n_classes, -100)
        w_p, w_t = tensor_pair(rng.uniform(0.2, 2.0, size=n_classes)) if weighted else (None, None)
        out_t = TF.nll_loss(x_t, torch.from_numpy(target), weight=w_t, reduction=reduction)
        out_p = PF.nll_loss(x_p, pf.from_numpy(target), weight=w_p, reduction=reduction)
        close(out_p, out_t)
        if not torch.isnan(out_t).any():
            check_grads(rng, out_p, out_t, [(x_p, x_t)])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_class_losses_degenerate_batches(rng, reduction):
    """An empty batch and a batch whose targets are all ignored: 'mean' is 0/0 = nan, as PyTorch."""
    cases = [(np.zeros((0, 4)), np.zeros((0,), np.int64)), (rng.normal(size=(3, 4)), np.full((3,), -100))]
    for x, target in cases:
        for loss in ("cross_entropy", "nll_loss"):
            for ls in ((0.0, 0.1) if loss == "cross_entropy" else (None,)):
                kwargs = {"reduction": reduction} if ls is None else {"reduction": reduction, "label_smoothing": ls}
                x_p, x_t = tensor_pair(x, grad=True)
                out_t = getattr(TF, loss)(x_t, torch.from_numpy(target), **kwargs)
                out_p = getattr(PF, loss)(x_p, pf.from_numpy(target), **kwargs)
                close(out_p, out_t)


def test_cross_entropy_float32(rng):
    x_p, x_t = tensor_pair(rng.normal(0, 3, size=(7, 11)).astype(np.float32), grad=True)
    target = class_targets(rng, (7,), 11)
    out_t = TF.cross_entropy(x_t, torch.from_numpy(target), label_smoothing=0.1)
    out_p = PF.cross_entropy(x_p, pf.from_numpy(target), label_smoothing=0.1)
    assert_matches(out_p, out_t.detach(), rtol=1e-5, atol=1e-6)
    out_t.backward()
    out_p.backward()
    assert_matches(x_p.grad, x_t.grad, rtol=1e-5, atol=1e-6)


CLASS_ERRORS = {
    "target out of bounds": lambda lib, F: F.nll_loss(lib.zeros(3, 5), lib.tensor([1, 2, 7])),
    "negative target": lambda lib, F: F.nll_loss(lib.zeros(3, 5), lib.tensor([1, -2, 0])),
    "cross_entropy target out of bounds": lambda lib, F: F.cross_entropy(lib.zeros(2, 3, 4),
                                                                         lib.tensor([[0, 1, 2, 3], [0, 0, 0, 0]])),
    "float target": lambda lib, F: F.nll_loss(lib.zeros(3, 5), lib.tensor([1.0, 2.0, 0.0])),
    "int32 target": lambda lib, F: F.nll_loss(lib.zeros(3, 5), lib.tensor([1, 2, 0], dtype=lib.int32)),
    "batch mismatch": lambda lib, F: F.nll_loss(lib.zeros(3, 5), lib.tensor([1, 2])),
    "0-d target for batched input": lambda lib, F: F.nll_loss(lib.zeros(3, 5), lib.tensor(1)),
    "0-d input": lambda lib, F: F.nll_loss(lib.tensor(1.0), lib.tensor(0)),
    "1-d input, 1-d target": lambda lib, F: F.nll_loss(lib.zeros(5), lib.tensor([2])),
    "multi-target": lambda lib, F: F.cross_entropy(lib.zeros(3, 5), lib.zeros(3, 4, dtype=lib.int64)),
    "spatial target shape": lambda lib, F: F.nll_loss(lib.zeros(2, 3, 4), lib.zeros(2, 5, dtype=lib.int64)),
    "weight size": lambda lib, F: F.nll_loss(lib.zeros(3, 5), lib.tensor([1, 2, 0]), weight=lib.ones(4)),
    "weight 2-d": lambda lib, F: F.cross_entropy(lib.zeros(3, 5), lib.tensor([1, 2, 0]), weight=lib.ones(5, 1)),
    "weight dtype": lambda lib, F: F.nll_loss(lib.zeros(3, 5, dtype=lib.float64), lib.tensor([1, 2, 0]),
                                              weight=lib.ones(5)),
    "probabilities weight size": lambda lib, F: F.cross_entropy(lib.zeros(3, 5), lib.zeros(3, 5), weight=lib.ones(4)),
    "integer probabilities": lambda lib, F: F.cross_entropy(lib.zeros(3, 5), lib.zeros(3, 5, dtype=lib.int64)),
    "ignore_index with probabilities": lambda lib, F: F.cross_entropy(lib.zeros(3, 5), lib.zeros(3, 5),
                                                                      ignore_index=1),
    "label_smoothing > 1": lambda lib, F: F.cross_entropy(lib.zeros(3, 5), lib.tensor([1, 2, 0]),
                                                          label_smoothing=1.5),
    "bad reduction": lambda lib, F: F.nll_loss(lib.zeros(3, 5), lib.tensor([1, 2, 0]), reduction="batchmean"),
    "integer input": lambda lib, F: F.cross_entropy(lib.zeros(3, 5, dtype=lib.int64), lib.tensor([1, 2, 0])),
}


@pytest.mark.parametrize("case", sorted(CLASS_ERRORS))
def test_class_loss_errors(case):
    same_error(CLASS_ERRORS[case])


def test_ignored_target_may_be_out_of_range(rng):
    x = rng.normal(size=(3, 5))
    out_t = TF.nll_loss(torch.from_numpy(x), torch.tensor([1, 7, 0]), ignore_index=7)
    out_p = PF.nll_loss(pf.from_numpy(x), pf.tensor([1, 7, 0]), ignore_index=7)
    close(out_p, out_t)


# ---- regression losses ----------------------------------------------------------------------------

REGRESSION = {
    "mse_loss": {},
    "l1_loss": {},
    "smooth_l1_loss": {"beta": 1.0},
    "smooth_l1_loss_beta_half": {"beta": 0.5},
    "smooth_l1_loss_beta_zero": {"beta": 0.0},
    "huber_loss": {"delta": 1.0},
    "huber_loss_delta_2": {"delta": 2.0},
}


def _regression_fn(case):
    return case.split("_beta")[0].split("_delta")[0]


@pytest.mark.parametrize("case", sorted(REGRESSION))
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_regression_losses(rng, case, reduction):
    fn, kwargs = _regression_fn(case), REGRESSION[case]
    for shape in [(), (1,), (4, 5), (2, 3, 7), (0, 3)]:
        layout = "transposed" if len(shape) >= 2 and rng.random() < 0.5 else "contiguous"
        x = rng.normal(0, 2, size=shape)
        offsets = [-3.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 2.5]  # on the thresholds exactly
        y = x + rng.choice(offsets, size=shape)
        x_p, x_t = tensor_pair(x, layout, grad=True)
        y_p, y_t = tensor_pair(y, grad=True)
        out_t = getattr(TF, fn)(x_t, y_t, reduction=reduction, **kwargs)
        out_p = getattr(PF, fn)(x_p, y_p, reduction=reduction, **kwargs)
        close(out_p, out_t)
        if out_t.numel() and not torch.isnan(out_t).any():
            check_grads(rng, out_p, out_t, [(x_p, x_t), (y_p, y_t)])


@pytest.mark.parametrize("case", sorted(REGRESSION))
def test_regression_losses_at_nan_and_infinity(rng, case):
    # Each branch's gradient stays its own: an infinite difference takes the linear slope (not
    # 0 * inf = NaN from the quadratic branch), NaN gives NaN, d = 0 with beta = 0 gives -1
    # (found by the fuzzer).
    fn, kwargs = _regression_fn(case), REGRESSION[case]
    special = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e38, -1e38, 0.5, -2.0]
    x = np.array(special + list(rng.normal(0, 2, size=7)))
    y = np.array(list(rng.choice([0.0, 1.0, -math.inf], size=len(special))) + list(rng.normal(size=7)))
    x_p, x_t = tensor_pair(x, grad=True)
    y_p, y_t = tensor_pair(y, grad=True)
    out_t = getattr(TF, fn)(x_t, y_t, reduction="none", **kwargs)
    out_p = getattr(PF, fn)(x_p, y_p, reduction="none", **kwargs)
    close(out_p, out_t)
    upstream = rng.normal(size=x.shape)
    out_t.backward(torch.from_numpy(upstream))
    out_p.backward(pf.from_numpy(upstream))
    close(x_p.grad, x_t.grad)
    close(y_p.grad, y_t.grad)


@pytest.mark.parametrize("pos_weight", [False, True])
def test_bce_with_logits_gradient_at_infinities(rng, pos_weight):
    # PyTorch's gradient is (pos_weight t + 1 - t) sigmoid(x) - pos_weight t even where the loss
    # is NaN (x = -inf): finite, not exp(inf - inf) = NaN (found by the fuzzer).
    x = np.array([-math.inf, math.inf, math.nan, -3.4e38, 3.4e38, 0.0, -50.0, 50.0, -math.inf, -math.inf] +
                 list(rng.normal(0, 3, 8)))
    y = rng.uniform(0, 1, x.size)
    y[8:10] = [2.0, -0.5]  # (targets outside [0, 1]: the loss at -inf is still NaN)
    x_p, x_t = tensor_pair(x, grad=True)
    y_p, y_t = tensor_pair(y, grad=True)
    kw_p, kw_t = {}, {}
    if pos_weight:
        w = rng.uniform(1, 2, x.size)  # (below 1, plugflow's target gradient at x = -inf is inf - inf)
        kw_p, kw_t = {"pos_weight": pf.from_numpy(w)}, {"pos_weight": torch.from_numpy(w)}
    out_t = TF.binary_cross_entropy_with_logits(x_t, y_t, reduction="none", **kw_t)
    out_p = PF.binary_cross_entropy_with_logits(x_p, y_p, reduction="none", **kw_p)
    close(out_p, out_t)
    upstream = rng.normal(size=x.shape)
    out_t.backward(torch.from_numpy(upstream))
    out_p.backward(pf.from_numpy(upstream))
    close(x_p.grad, x_t.grad)
    close(y_p.grad, y_t.grad)


@pytest.mark.parametrize("fn", ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"])
def test_regression_broadcast_warns(rng, fn):
    x_p, x_t = tensor_pair(rng.normal(size=(3, 1)), grad=True)
    y_p, y_t = tensor_pair(rng.normal(size=(3, 4)))
    with pytest.warns(UserWarning, match="different to the input size"):
        out_p = getattr(PF, fn)(x_p, y_p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out_t = getattr(TF, fn)(x_t, y_t)
    close(out_p, out_t)
    check_grads(rng, out_p, out_t, [(x_p, x_t)])


def test_regression_mixed_dtypes(rng):
    x, y = rng.normal(size=5), rng.normal(size=5)
    out_t = TF.mse_loss(torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y))
    out_p = PF.mse_loss(pf.from_numpy(x.astype(np.float32)), pf.from_numpy(y))
    assert_matches(out_p, out_t, rtol=1e-6, atol=1e-6)


REGRESSION_ERRORS = {
    "shapes do not broadcast": lambda lib, F: F.mse_loss(lib.zeros(3, 2), lib.zeros(3, 4)),
    "integer mse": lambda lib, F: F.mse_loss(lib.zeros(3, dtype=lib.int64), lib.zeros(3, dtype=lib.int64)),
    "negative beta": lambda lib, F: F.smooth_l1_loss(lib.zeros(3), lib.zeros(3), beta=-1.0),
    "zero delta": lambda lib, F: F.huber_loss(lib.zeros(3), lib.zeros(3), delta=0.0),
    "bad reduction": lambda lib, F: F.l1_loss(lib.zeros(3), lib.zeros(3), reduction="avg"),
}


@pytest.mark.parametrize("case", sorted(REGRESSION_ERRORS))
def test_regression_errors(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same_error(REGRESSION_ERRORS[case])


# ---- binary cross entropy -------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weight", ["none", "full", "broadcast"])
def test_binary_cross_entropy(rng, reduction, weight):
    for shape in [(), (1,), (4, 5), (2, 3, 3), (0,)]:
        x_p, x_t = tensor_pair(rng.uniform(0.02, 0.98, size=shape), grad=True)
        t_p, t_t = tensor_pair(rng.uniform(0, 1, size=shape), grad=True)
        w_shape = {"none": None, "full": shape, "broadcast": shape[-1:]}[weight]
        w_p, w_t = tensor_pair(rng.uniform(0.1, 2, size=w_shape)) if w_shape is not None else (None, None)
        out_t = TF.binary_cross_entropy(x_t, t_t, weight=w_t, reduction=reduction)
        out_p = PF.binary_cross_entropy(x_p, t_p, weight=w_p, reduction=reduction)
        close(out_p, out_t)
        if out_t.numel() and not torch.isnan(out_t).any():
            check_grads(rng, out_p, out_t, [(x_p, x_t), (t_p, t_t)])


def test_binary_cross_entropy_at_zero_and_one(rng):
    """log(0) is clamped to -100 as in PyTorch (the values; PyTorch's gradient formula there
    divides by max(x(1-x), 1e-12), which no composition reproduces)."""
    x = np.array([0.0, 1.0, 0.0, 1.0, 0.5])
    t = np.array([0.0, 1.0, 1.0, 0.0, 0.3])
    out_t = TF.binary_cross_entropy(torch.from_numpy(x), torch.from_numpy(t), reduction="none")
    out_p = PF.binary_cross_entropy(pf.from_numpy(x), pf.from_numpy(t), reduction="none")
    close(out_p, out_t)
    x_p = pf.from_numpy(x).requires_grad_()
    PF.binary_cross_entropy(x_p, pf.from_numpy(t)).backward()
    assert bool(x_p.grad.isfinite().all())


BCE_ERRORS = {
    "input above 1": lambda lib, F: F.binary_cross_entropy(lib.tensor([1.5]), lib.tensor([1.0])),
    "negative input": lambda lib, F: F.binary_cross_entropy(lib.tensor([-0.1]), lib.tensor([1.0])),
    "nan input": lambda lib, F: F.binary_cross_entropy(lib.tensor([float("nan")]), lib.tensor([1.0])),
    "size mismatch": lambda lib, F: F.binary_cross_entropy(lib.full((3,), 0.5), lib.full((3, 1), 0.5)),
    "dtype mismatch": lambda lib, F: F.binary_cross_entropy(lib.full((3,), 0.5), lib.full((3,), 0.5,
                                                                                           dtype=lib.float64)),
    "integer target": lambda lib, F: F.binary_cross_entropy(lib.full((3,), 0.5), lib.ones(3, dtype=lib.int64)),
    "logits size mismatch": lambda lib, F: F.binary_cross_entropy_with_logits(lib.zeros(3), lib.zeros(3, 1)),
    "logits integer target": lambda lib, F: F.binary_cross_entropy_with_logits(lib.zeros(3),
                                                                               lib.ones(3, dtype=lib.int64)),
    "pos_weight shape": lambda lib, F: F.binary_cross_entropy_with_logits(lib.zeros(3, 4), lib.zeros(3, 4),
                                                                          pos_weight=lib.ones(3)),
}


@pytest.mark.parametrize("case", sorted(BCE_ERRORS))
def test_binary_cross_entropy_errors(case):
    call = BCE_ERRORS[case]
    if case == "pos_weight shape":  # the broadcasting message is the core's own, the type PyTorch's
        with pytest.raises(RuntimeError):
            call(pf, PF)
        return
    same_error(call)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pos_weighted", [False, True])
def test_binary_cross_entropy_with_logits(rng, reduction, weighted, pos_weighted):
    for shape in [(), (1,), (4, 5), (2, 3, 3), (0, 2)]:
        x = rng.normal(0, 3, size=shape)
        if x.size:
            x.flat[0] = 60.0 if rng.random() < 0.5 else -60.0  # far in the tails: must stay finite
        x_p, x_t = tensor_pair(x, "transposed" if len(shape) >= 2 else "contiguous", grad=True)
        t_p, t_t = tensor_pair(rng.uniform(0, 1, size=shape), grad=True)
        w_p, w_t = tensor_pair(rng.uniform(0.1, 2, size=shape)) if weighted else (None, None)
        # PyTorch has no gradient for pos_weight (plugflow has one; not compared).
        pw_p, pw_t = tensor_pair(rng.uniform(0.1, 3, size=shape[-1:])) if pos_weighted else (None, None)
        out_t = TF.binary_cross_entropy_with_logits(x_t, t_t, weight=w_t, reduction=reduction, pos_weight=pw_t)
        out_p = PF.binary_cross_entropy_with_logits(x_p, t_p, weight=w_p, reduction=reduction, pos_weight=pw_p)
        close(out_p, out_t)
        if out_t.numel() and not torch.isnan(out_t).any():
            check_grads(rng, out_p, out_t, [(x_p, x_t), (t_p, t_t)])


# ---- kl_div ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "sum", "mean", "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(rng, reduction, log_target):
    for shape in [(), (1,), (4, 5), (3, 2, 4), (0, 3)]:
        x_p, x_t = tensor_pair(np.log(rng.uniform(0.05, 1, size=shape)), grad=True)
        target = rng.uniform(0.05, 1, size=shape)
        target = np.log(target) if log_target else target
        t_p, t_t = tensor_pair(target, "transposed" if len(shape) >= 2 else "contiguous", grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out_t = TF.kl_div(x_t, t_t, reduction=reduction, log_target=log_target)
            out_p = PF.kl_div(x_p, t_p, reduction=reduction, log_target=log_target)
        close(out_p, out_t)
        if out_t.numel() and not torch.isnan(out_t).any():
            check_grads(rng, out_p, out_t, [(x_p, x_t), (t_p, t_t)])


def test_kl_div_zero_and_negative_targets(rng):
    """target 0 contributes 0 (xlogy), a negative target gives nan, as in PyTorch."""
    x_p, x_t = tensor_pair(rng.normal(size=4), grad=True)
    target = np.array([0.0, 0.3, -0.2, 0.0])
    out_t = TF.kl_div(x_t, torch.from_numpy(target), reduction="none")
    out_p = PF.kl_div(x_p, pf.from_numpy(target), reduction="none")
    close(out_p, out_t)
    out_t.sum().backward()
    out_p.sum().backward()
    close(x_p.grad, x_t.grad)


def test_kl_div_mean_warns():
    with pytest.warns(UserWarning, match="batchmean"):
        PF.kl_div(pf.zeros(2, 3), pf.full((2, 3), 0.5))
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        PF.kl_div(pf.zeros(2, 3), pf.full((2, 3), 0.5), reduction="avg")


# ---- legacy arguments and loss modules ------------------------------------------------------------

@pytest.mark.parametrize("size_average,reduce", [(None, False), (False, None), (True, True), (False, True)])
def test_legacy_size_average_reduce(rng, size_average, reduce):
    x, y = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        out_p = PF.mse_loss(pf.from_numpy(x), pf.from_numpy(y), size_average=size_average, reduce=reduce)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out_t = TF.mse_loss(torch.from_numpy(x), torch.from_numpy(y), size_average=size_average, reduce=reduce)
        module_t = torch.nn.L1Loss(size_average=size_average, reduce=reduce)
        module_p = pnn.L1Loss(size_average=size_average, reduce=reduce)
    close(out_p, out_t)
    assert module_p.reduction == module_t.reduction


def _loss_modules(lib, rng_state):
    """The same loss modules (with the same weight buffers) built with torch.nn or plugflow.nn."""
    nn = lib.nn
    w5 = lib.from_numpy(rng_state["w5"].copy())
    pos = lib.from_numpy(rng_state["pos"].copy())
    return {
        "CrossEntropyLoss": nn.CrossEntropyLoss(weight=w5, ignore_index=2, label_smoothing=0.1),
        "NLLLoss": nn.NLLLoss(weight=w5, reduction="sum"),
        "MSELoss": nn.MSELoss(reduction="none"),
        "L1Loss": nn.L1Loss(),
        "SmoothL1Loss": nn.SmoothL1Loss(beta=0.5),
        "HuberLoss": nn.HuberLoss(delta=0.7),
        "BCELoss": nn.BCELoss(weight=w5),
        "BCEWithLogitsLoss": nn.BCEWithLogitsLoss(pos_weight=pos),
        "KLDivLoss": nn.KLDivLoss(reduction="batchmean", log_target=True),
    }


def test_loss_modules(rng):
    state = {"w5": rng.uniform(0.5, 2, size=5), "pos": rng.uniform(0.5, 2, size=5)}
    modules_t, modules_p = _loss_modules(torch, state), _loss_modules(pf, state)
    logits = rng.normal(size=(4, 5))
    classes = class_targets(rng, (4,), 5)
    probs = rng.uniform(0.05, 0.95, size=(4, 5))
    inputs = {
        "CrossEntropyLoss": (logits, classes), "NLLLoss": (logits, classes), "MSELoss": (logits, probs),
        "L1Loss": (logits, probs), "SmoothL1Loss": (logits, probs), "HuberLoss": (logits, probs),
        "BCELoss": (probs, rng.uniform(0, 1, size=(4, 5))), "BCEWithLogitsLoss": (logits, probs),
        "KLDivLoss": (np.log(probs), np.log(rng.uniform(0.05, 1, size=(4, 5)))),
    }
    for name, (x, y) in inputs.items():
        m_t, m_p = modules_t[name], modules_p[name]
        assert repr(m_p) == repr(m_t)
        assert list(m_p.state_dict()) == list(m_t.state_dict())
        x_p, x_t = tensor_pair(x, grad=True)
        out_t = m_t(x_t, torch.from_numpy(y))
        out_p = m_p(x_p, pf.from_numpy(y))
        close(out_p, out_t)
        check_grads(rng, out_p, out_t, [(x_p, x_t)])


def test_loss_module_weight_follows_to():
    loss = pnn.CrossEntropyLoss(weight=pf.ones(3))
    loss.double()
    assert loss.weight.dtype is pf.float64
    assert loss.reduction == "mean" and loss.ignore_index == -100 and loss.label_smoothing == 0.0


@pytest.mark.parametrize("pos_weight", [None, [2.0, 0.5, 1.0, 3.0]])
def test_bce_with_logits_of_infinite_logits_matches_torch(pos_weight):
    # Found by the fuzzer: PyTorch's arrangement m + log(exp(-m) + exp(-x - m)) gives NaN for
    # x = -inf where softplus(-x) gave inf.
    x = [-math.inf, math.inf, -1000.0, 3.0]
    t = [0.3, 1.0, 2.5, 0.0]
    for reduction in ("none", "sum"):
        out = []
        for lib in (torch, pf):
            xl = lib.tensor(x, dtype=lib.float64, requires_grad=True)
            kw = {} if pos_weight is None else {"pos_weight": lib.tensor(pos_weight, dtype=lib.float64)}
            loss = lib.nn.functional.binary_cross_entropy_with_logits(xl, lib.tensor(t, dtype=lib.float64),
                                                                       reduction=reduction, **kw)
            out.append(loss)
        assert_matches(out[1].detach(), out[0].detach())
