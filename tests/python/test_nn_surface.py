"""torch.nn's less common losses, layers and lazy modules against PyTorch 1.13: values, shapes,
dtypes, float64 gradients, every reduction, module and functional forms, and the exception
types of bad input, on fresh random inputs each run."""

import warnings

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_matches, assert_same_outcome, from_torch, seeded_rng

REDUCTIONS = ["none", "mean", "sum"]


def _pair(array, grad):
    """numpy array -> (plugflow, torch) tensors with the same values; floats require grad when asked."""
    t = torch.from_numpy(np.array(array, copy=True))
    p = from_torch(t)
    if grad and t.is_floating_point():
        t.requires_grad_()
        p.requires_grad_()
    return p, t


def compare(rng, fn, *arrays, rtol=None, atol=None, grad=True):
    """fn(lib, *tensors) under plugflow and torch: the same outputs, then (float64 inputs, grad)
    the same gradients of every floating input for one random upstream gradient."""
    pairs = [_pair(a, grad) if isinstance(a, np.ndarray) else (a, a) for a in arrays]
    out_t = fn(torch, *[t for _, t in pairs])
    out_p = fn(pf, *[p for p, _ in pairs])
    outs_t = out_t if isinstance(out_t, tuple) else (out_t,)
    outs_p = out_p if isinstance(out_p, tuple) else (out_p,)
    for a, e in zip(outs_p, outs_t):
        assert_matches(a, e.detach(), rtol, atol)
    if not grad or not outs_t[0].requires_grad:
        return
    upstream = torch.from_numpy(rng.uniform(-1, 1, size=tuple(outs_t[0].shape))).to(outs_t[0].dtype)
    outs_t[0].backward(upstream)
    outs_p[0].backward(from_torch(upstream))
    for p, t in pairs:
        if not (isinstance(t, torch.Tensor) and t.requires_grad):
            continue
        if t.grad is None:  # (an input only compared, as a target: no gradient, or zeros)
            assert p.grad is None or not p.grad.any()
        else:
            assert p.grad is not None
            assert_matches(p.grad, t.grad, rtol, atol)


def same_error(fn):
    """fn(lib) raises under torch, and the same exception type under plugflow."""
    with pytest.raises(Exception) as expected:
        fn(torch)
    with pytest.raises(type(expected.value)):
        fn(pf)


def uniform(rng, shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, size=shape)


def signs(rng, shape):
    return rng.choice([-1.0, 1.0], size=shape)


# ---- losses -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_margin_ranking_hinge_soft_margin(reduction):
    rng = seeded_rng()
    n = int(rng.integers(1, 9))
    margin = float(rng.uniform(-0.5, 1.5))
    x1, x2, y = uniform(rng, (n,)), uniform(rng, (n,)), signs(rng, (n,))
    compare(rng, lambda lib, a, b, t: lib.nn.functional.margin_ranking_loss(a, b, t, margin, reduction=reduction),
            x1, x2, y)
    compare(rng, lambda lib, a, b, t: lib.nn.MarginRankingLoss(margin, reduction=reduction)(a, b, t), x1, x2, y)
    shape = (n, int(rng.integers(1, 5)))
    x, y = uniform(rng, shape), signs(rng, shape)
    compare(rng, lambda lib, a, t: lib.nn.functional.hinge_embedding_loss(a, t, margin, reduction=reduction), x, y)
    compare(rng, lambda lib, a, t: lib.nn.HingeEmbeddingLoss(margin, reduction=reduction)(a, t), x, y)
    compare(rng, lambda lib, a, t: lib.nn.functional.soft_margin_loss(a, t.detach(), reduction=reduction), x, y)
    compare(rng, lambda lib, a, t: lib.nn.SoftMarginLoss(reduction=reduction)(a, t.detach()), x, y)
    # targets broadcast to the input; a long target works
    compare(rng, lambda lib, a, t: lib.nn.functional.soft_margin_loss(a, t.detach(), reduction=reduction), x, y[0])
    compare(rng, lambda lib, a, t: lib.nn.functional.hinge_embedding_loss(a, t.long(), reduction=reduction), x, y)


def test_margin_ranking_hinge_soft_margin_errors():
    same_error(lambda lib: lib.nn.functional.margin_ranking_loss(lib.randn(3), lib.randn(3, 1), lib.ones(3)))
    same_error(lambda lib: lib.nn.functional.soft_margin_loss(lib.randn(3), lib.ones(2, 3)))
    same_error(lambda lib: lib.nn.functional.hinge_embedding_loss(lib.ones(3, dtype=lib.long),
                                                                   lib.ones(3, dtype=lib.long)))
    same_error(lambda lib: lib.nn.functional.soft_margin_loss(lib.randn(3), lib.ones(3, requires_grad=True)))
    long_input = lambda lib: lib.tensor([-1, 0, 1, 2])  # noqa: E731
    assert_same_outcome(lambda lib: lib.nn.functional.hinge_embedding_loss(
        long_input(lib), lib.tensor([1, -1, 0, 5]), margin=2.7, reduction="none"))
    same_error(lambda lib: lib.nn.functional.soft_margin_loss(lib.randn(3), lib.ones(3), reduction="avg"))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cosine_embedding_loss(reduction):
    rng = seeded_rng()
    n, d = int(rng.integers(1, 7)), int(rng.integers(1, 6))
    margin = float(rng.uniform(-0.5, 0.5))
    x1, x2, y = uniform(rng, (n, d)), uniform(rng, (n, d)), signs(rng, (n,))
    compare(rng, lambda lib, a, b, t: lib.nn.functional.cosine_embedding_loss(a, b, t, margin, reduction=reduction),
            x1, x2, y)
    compare(rng, lambda lib, a, b, t: lib.nn.CosineEmbeddingLoss(margin, reduction=reduction)(a, b, t.long()),
            x1, x2, y)
    compare(rng, lambda lib, a, b, t: lib.nn.functional.cosine_embedding_loss(a, b, t, reduction=reduction),
            x1[0], x2[0], y[0, ...])
    same_error(lambda lib: lib.nn.functional.cosine_embedding_loss(lib.randn(3, 2), lib.randn(3, 2), lib.ones(3, 1)))
    same_error(lambda lib: lib.nn.functional.cosine_embedding_loss(lib.randn(3), lib.randn(3), lib.ones(3)))
    same_error(lambda lib: lib.nn.functional.cosine_embedding_loss(lib.randn(3, 2), lib.randn(3, 2), lib.ones(())))
    same_error(lambda lib: lib.nn.functional.cosine_embedding_loss(lib.randn(3, 2), lib.randn(4, 2), lib.ones(3)))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_soft_margin_loss(reduction):
    rng = seeded_rng()
    n, c = int(rng.integers(1, 7)), int(rng.integers(1, 6))
    x, y, w = uniform(rng, (n, c)), (rng.random((n, c)) < 0.5).astype(np.float64), uniform(rng, (c,), 0.1, 2)
    compare(rng, lambda lib, a, t: lib.nn.functional.multilabel_soft_margin_loss(a, t, reduction=reduction), x, y)
    compare(rng, lambda lib, a, t, wt: lib.nn.MultiLabelSoftMarginLoss(wt, reduction=reduction)(a, t), x, y, w)
    compare(rng, lambda lib, a, t: lib.nn.functional.multilabel_soft_margin_loss(a, t, reduction=reduction),
            x[0], y[0])
    same_error(lambda lib: lib.nn.functional.multilabel_soft_margin_loss(lib.randn(2, 3), lib.ones(2, 3),
                                                                          reduction="avg"))


def _multilabel_targets(rng, n, c):
    """Rows of class indices, each ended by -1 (then junk) or full, duplicates allowed."""
    target = rng.integers(-1, c, size=(n, c))
    for row in target:
        k = int(rng.integers(0, c + 1))
        row[:k] = rng.integers(0, c, size=k)
        if k < c:
            row[k] = -1
    return target


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_margin_loss(reduction):
    rng = seeded_rng()
    n, c = int(rng.integers(1, 6)), int(rng.integers(1, 7))
    x, y = uniform(rng, (n, c)), _multilabel_targets(rng, n, c)
    compare(rng, lambda lib, a, t: lib.nn.functional.multilabel_margin_loss(a, t, reduction=reduction), x, y)
    compare(rng, lambda lib, a, t: lib.nn.MultiLabelMarginLoss(reduction=reduction)(a, t), x, y)
    compare(rng, lambda lib, a, t: lib.nn.functional.multilabel_margin_loss(a, t, reduction=reduction), x[0], y[0])
    x32 = x.astype(np.float32)
    compare(rng, lambda lib, a, t: lib.nn.functional.multilabel_margin_loss(a, t, reduction=reduction), x32, y,
            grad=False)


def test_multilabel_margin_loss_errors():
    F = lambda lib: lib.nn.functional  # noqa: E731
    same_error(lambda lib: F(lib).multilabel_margin_loss(lib.randn(4), lib.tensor([5, 0, -1, 1])))
    same_error(lambda lib: F(lib).multilabel_margin_loss(lib.randn(4), lib.tensor([-2, 0, -1, 1])))
    same_error(lambda lib: F(lib).multilabel_margin_loss(lib.randn(4), lib.tensor([2, 0, -1, 1]).int()))
    same_error(lambda lib: F(lib).multilabel_margin_loss(lib.randn(2, 4), lib.tensor([2, 0, -1, 1])))
    same_error(lambda lib: F(lib).multilabel_margin_loss(lib.tensor([2, 0, -1, 1]), lib.tensor([2, 0, -1, 1])))
    same_error(lambda lib: F(lib).multilabel_margin_loss(lib.randn(2, 0), lib.zeros(2, 0, dtype=lib.long)))
    same_error(lambda lib: F(lib).multilabel_margin_loss(lib.randn(2, 3, 1), lib.zeros(2, 3, 1, dtype=lib.long)))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss(reduction, p):
    rng = seeded_rng()
    n, c = int(rng.integers(1, 7)), int(rng.integers(1, 6))
    margin = float(rng.uniform(0, 2))
    x, y, w = uniform(rng, (n, c)), rng.integers(0, c, size=(n,)), uniform(rng, (c,), 0.1, 2)
    compare(rng, lambda lib, a, t: lib.nn.functional.multi_margin_loss(a, t, p, margin, reduction=reduction), x, y)
    compare(rng, lambda lib, a, t, wt: lib.nn.MultiMarginLoss(p, margin, wt.detach(), reduction=reduction)(a, t),
            x, y, w)
    compare(rng, lambda lib, a, t: lib.nn.functional.multi_margin_loss(a, t, p, reduction=reduction), x[0], y[0, ...])
    compare(rng, lambda lib, a, t: lib.nn.functional.multi_margin_loss(a, t, p, reduction=reduction), x[0], y[:1])


def test_multi_margin_loss_errors():
    F = lambda lib: lib.nn.functional  # noqa: E731
    x = lambda lib: lib.randn(2, 3)  # noqa: E731
    same_error(lambda lib: F(lib).multi_margin_loss(x(lib), lib.tensor([3, 0])))
    same_error(lambda lib: F(lib).multi_margin_loss(x(lib), lib.tensor([-1, 0])))
    same_error(lambda lib: F(lib).multi_margin_loss(x(lib), lib.tensor([1, 0]).int()))
    same_error(lambda lib: F(lib).multi_margin_loss(x(lib), lib.tensor([1, 0, 1])))
    same_error(lambda lib: F(lib).multi_margin_loss(x(lib), lib.tensor([1, 0]), p=3))
    same_error(lambda lib: F(lib).multi_margin_loss(x(lib), lib.tensor([1, 0]), weight=lib.ones(3, 1)))
    same_error(lambda lib: F(lib).multi_margin_loss(x(lib), lib.tensor([1, 0]), weight=lib.ones(3).double()))
    same_error(lambda lib: F(lib).multi_margin_loss(lib.randn(2, 0), lib.tensor([0, 0])))
    same_error(lambda lib: F(lib).multi_margin_loss(lib.randn(2, 3, 1), lib.tensor([0, 0])))
    same_error(lambda lib: lib.nn.MultiMarginLoss(p=3))
    same_error(lambda lib: lib.nn.MultiMarginLoss(weight=lib.ones(2, 2)))
    # (an empty batch: PyTorch's sum is uninitialized memory)
    assert F(pf).multi_margin_loss(pf.zeros(0, 3), pf.zeros(0, dtype=pf.long), reduction="sum").item() == 0


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_triplet_margin_losses(reduction):
    rng = seeded_rng()
    n, d = int(rng.integers(1, 7)), int(rng.integers(1, 6))
    a, p, ng = uniform(rng, (n, d)), uniform(rng, (n, d)), uniform(rng, (n, d))
    margin, norm, swap = float(rng.uniform(0.1, 2)), float(rng.choice([1.0, 2.0, 3.0])), bool(rng.random() < 0.5)
    compare(rng, lambda lib, *t: lib.nn.functional.triplet_margin_loss(*t, margin=margin, p=norm, swap=swap,
                                                                       reduction=reduction), a, p, ng)
    compare(rng, lambda lib, *t: lib.nn.TripletMarginLoss(margin, norm, swap=swap, reduction=reduction)(*t),
            a, p, ng)
    compare(rng, lambda lib, *t: lib.nn.functional.triplet_margin_loss(*t, reduction=reduction), a[0], p[0], ng[0])
    compare(rng, lambda lib, *t: lib.nn.TripletMarginWithDistanceLoss(swap=swap, margin=margin,
                                                                      reduction=reduction)(*t), a, p, ng)
    cosine = lambda lib: (lambda u, v: 1 - lib.nn.functional.cosine_similarity(u, v))  # noqa: E731
    compare(rng, lambda lib, *t: lib.nn.functional.triplet_margin_with_distance_loss(
        *t, distance_function=cosine(lib), swap=swap, reduction=reduction), a, p, ng)
    same_error(lambda lib: lib.nn.functional.triplet_margin_loss(lib.randn(3, 2), lib.randn(3, 2), lib.randn(2)))
    same_error(lambda lib: lib.nn.functional.triplet_margin_with_distance_loss(
        lib.randn(3, 2), lib.randn(3, 2), lib.randn(3, 2), reduction="avg"))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_poisson_gaussian_nll(reduction):
    rng = seeded_rng()
    shape = (int(rng.integers(1, 6)), int(rng.integers(1, 5)))
    counts = rng.poisson(2.0, size=shape).astype(np.float64)
    log_rate, rate = uniform(rng, shape), uniform(rng, shape, 0.1, 4)
    full = bool(rng.random() < 0.5)
    compare(rng, lambda lib, x, t: lib.nn.functional.poisson_nll_loss(x, t, full=full, reduction=reduction),
            log_rate, counts)
    compare(rng, lambda lib, x, t: lib.nn.PoissonNLLLoss(False, full, reduction=reduction)(x, t), rate, counts)
    mean, target, var = uniform(rng, shape), uniform(rng, shape), uniform(rng, shape, 0, 2)
    var[0, 0] = 1e-9  # below eps: clamped, its gradient kept
    compare(rng, lambda lib, *t: lib.nn.functional.gaussian_nll_loss(*t, full=full, reduction=reduction),
            mean, target, var)
    compare(rng, lambda lib, *t: lib.nn.GaussianNLLLoss(full=full, reduction=reduction)(*t), mean, target, var[:, 0])
    compare(rng, lambda lib, *t: lib.nn.GaussianNLLLoss(reduction=reduction)(*t), mean, target, var[:, :1])
    compare(rng, lambda lib, *t: lib.nn.GaussianNLLLoss(reduction=reduction)(*t), mean, target[0], var)


def test_likelihood_loss_errors():
    F = lambda lib: lib.nn.functional  # noqa: E731
    same_error(lambda lib: F(lib).poisson_nll_loss(lib.randn(3), lib.ones(3), reduction="avg"))
    same_error(lambda lib: F(lib).gaussian_nll_loss(lib.randn(3, 2), lib.randn(3, 2), lib.ones(3, 3)))
    same_error(lambda lib: F(lib).gaussian_nll_loss(lib.randn(3, 2), lib.randn(3, 2), -lib.ones(3, 2)))
    same_error(lambda lib: F(lib).gaussian_nll_loss(lib.randn(3, 2), lib.randn(3, 2), lib.ones(3, 2), reduction="x"))


def test_nll_loss_2d_alias():
    rng = seeded_rng()
    x, y = uniform(rng, (2, 3, 4, 5)), rng.integers(0, 3, size=(2, 4, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compare(rng, lambda lib, a, t: lib.nn.NLLLoss2d()(a, t), x, y)
    with pytest.warns(UserWarning, match="NLLLoss2d has been deprecated"):
        pf.nn.NLLLoss2d()


def _ctc_case(rng, batch, classes, blank, concatenated):
    """Random CTC inputs PyTorch gives a loss for: non-empty inputs (its value for an empty one
    varies), targets without the blank and with alignments (a target longer than its input's
    alignments gives inf, whose gradient is NaN)."""
    max_time = int(rng.integers(1, 12))
    input_lengths = rng.integers(1, max_time + 1, size=batch)
    input_lengths[0] = max_time
    target_lengths = np.array([int(rng.integers(0, (n + 1) // 2 + 1)) for n in input_lengths])
    max_target = int(target_lengths.max()) if batch else 0
    targets = rng.integers(0, classes - 1, size=(batch, max_target + int(rng.integers(0, 3))))
    targets[targets >= blank] += 1
    if rng.random() < 0.5:  # repeated labels need a blank between them
        targets[:, 1::2] = targets[:, ::2][:, :targets[:, 1::2].shape[1]]
    if concatenated:
        targets = np.concatenate([row[:n] for row, n in zip(targets, target_lengths)]) if batch else targets[0]
    logits = rng.normal(size=(max_time, batch, classes)) * 2
    return logits, targets, input_lengths, target_lengths


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("concatenated", [False, True])
def test_ctc_loss(reduction, concatenated):
    rng = seeded_rng()
    batch, classes = int(rng.integers(1, 5)), int(rng.integers(2, 6))
    blank = int(rng.integers(0, classes))
    logits, targets, input_lengths, target_lengths = _ctc_case(rng, batch, classes, blank, concatenated)
    zero_infinity = bool(rng.random() < 0.5)

    def loss(lib, x, t):
        log_probs = x.log_softmax(2)
        return lib.nn.functional.ctc_loss(log_probs, t, lib.tensor(input_lengths), lib.tensor(target_lengths),
                                          blank, reduction, zero_infinity)

    # through log_softmax (how CTC is used) and on the log-probabilities directly
    compare(rng, loss, logits, targets)
    log_probs = torch.from_numpy(logits).log_softmax(2).numpy()
    compare(rng, lambda lib, x, t: lib.nn.CTCLoss(blank, reduction, zero_infinity)(
        x, t, tuple(input_lengths.tolist()), list(target_lengths.tolist())), log_probs, targets)
    compare(rng, lambda lib, x, t: lib.nn.CTCLoss(blank, reduction, zero_infinity)(
        x.float(), t.int(), lib.tensor(input_lengths), lib.tensor(target_lengths)), log_probs, targets,
        rtol=1e-4, atol=1e-4, grad=False)


def test_ctc_loss_unbatched_and_errors():
    rng = seeded_rng()
    max_time = int(rng.integers(1, 12))
    logits, targets = rng.normal(size=(max_time, 4)), rng.integers(1, 4, size=int(rng.integers(0, max_time // 2 + 1)))
    compare(rng, lambda lib, x, t: lib.nn.functional.ctc_loss(x.log_softmax(1), t, (max_time,), (len(targets),),
                                                              reduction="none"), logits, targets)
    F = lambda lib: lib.nn.functional  # noqa: E731
    lp = lambda lib: lib.randn(5, 2, 4).log_softmax(2)  # noqa: E731
    tg = lambda lib: lib.tensor([[1, 2], [3, 1]])  # noqa: E731
    same_error(lambda lib: F(lib).ctc_loss(lp(lib), tg(lib), [5, 5], [2, 2], blank=4))
    same_error(lambda lib: F(lib).ctc_loss(lp(lib), tg(lib), [5], [2, 2]))
    same_error(lambda lib: F(lib).ctc_loss(lp(lib), tg(lib), [5, 5], [2, 2, 1]))
    same_error(lambda lib: F(lib).ctc_loss(lp(lib), tg(lib), [6, 5], [2, 2]))
    same_error(lambda lib: F(lib).ctc_loss(lp(lib), tg(lib), [5, 5], [3, 2]))
    same_error(lambda lib: F(lib).ctc_loss(lp(lib), lib.tensor([1, 2, 3]), [5, 5], [2, 2]))
    same_error(lambda lib: F(lib).ctc_loss(lp(lib), tg(lib), lib.tensor([5., 5.]), lib.tensor([2, 2])))
    same_error(lambda lib: F(lib).ctc_loss(lp(lib), tg(lib), [5, 5], [2, 2], reduction="avg"))
    # (PyTorch returns a number for these, not a loss: plugflow refuses them)
    with pytest.raises(RuntimeError, match="blank"):
        F(pf).ctc_loss(lp(pf), tg(pf), [5, 5], [2, 2], blank=1)
    with pytest.raises(RuntimeError, match="target values"):
        F(pf).ctc_loss(lp(pf), tg(pf) + 1, [5, 5], [2, 2])
    with pytest.raises(RuntimeError, match="non-negative"):
        F(pf).ctc_loss(lp(pf), tg(pf), [5, -1], [2, 2])
