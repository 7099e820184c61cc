"""torch.nn's less common losses, layers and lazy modules against PyTorch 1.13: values, shapes,
dtypes, float64 gradients, every reduction, module and functional forms, and the exception
types of bad input, on fresh random inputs each run."""

import copy
import math
import warnings

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_matches, assert_same_outcome, dtype_name, from_torch, seeded_rng

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
        if t.grad is None or t.grad.numel() == 0:  # (an input only compared, as a target; an empty one)
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


# ---- layers -----------------------------------------------------------------------------------------

def test_local_response_norms():
    rng = seeded_rng()
    size = int(rng.integers(1, 6))
    alpha, beta, k = float(rng.uniform(1e-4, 1)), float(rng.uniform(0.5, 1)), float(rng.uniform(0.5, 2))
    for shape in [(2, 5, 4), (2, 5, 3, 4), (1, 3, 2, 3, 2)]:
        x = uniform(rng, shape)
        compare(rng, lambda lib, a: lib.nn.functional.local_response_norm(a, size, alpha, beta, k), x)
        compare(rng, lambda lib, a: lib.nn.LocalResponseNorm(size, alpha, beta, k)(a), x)
    same_error(lambda lib: lib.nn.functional.local_response_norm(lib.randn(2, 3), 2))
    for size in range(2, 8):  # (size 1 makes PyTorch's backward fail)
        compare(rng, lambda lib, a: lib.nn.CrossMapLRN2d(size, alpha, beta, k)(a), uniform(rng, (2, 5, 3, 2)))
    same_error(lambda lib: lib.nn.CrossMapLRN2d(3)(lib.randn(2, 3, 4)))


def test_lp_pool():
    rng = seeded_rng()
    norm = float(rng.choice([1.0, 2.0, 3.0]))
    kernel, stride, ceil = int(rng.integers(1, 4)), [None, 1, 2][int(rng.integers(0, 3))], bool(rng.random() < .5)
    x1, x2 = uniform(rng, (2, 3, 7), 0.1, 2), uniform(rng, (2, 3, 7, 6), 0.1, 2)
    compare(rng, lambda lib, a: lib.nn.functional.lp_pool1d(a, norm, kernel, stride, ceil), x1)
    compare(rng, lambda lib, a: lib.nn.LPPool1d(norm, kernel, stride, ceil)(a), x1[0])
    compare(rng, lambda lib, a: lib.nn.functional.lp_pool2d(a, norm, (kernel, 2), stride, ceil), x2)
    compare(rng, lambda lib, a: lib.nn.LPPool2d(norm, kernel, stride, ceil)(a), x2[0])
    same_error(lambda lib: lib.nn.functional.lp_pool2d(lib.randn(1, 2, 5, 5), 0, 2))


def test_channel_shuffle_and_3d_pads():
    rng = seeded_rng()
    groups, per = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    x = uniform(rng, (2, groups * per, 3, 2))
    # (PyTorch 1.13 has no derivative for channel_shuffle; plugflow's is the reshapes')
    compare(rng, lambda lib, a: lib.nn.functional.channel_shuffle(a, groups), x, grad=False)
    compare(rng, lambda lib, a: lib.nn.functional.native_channel_shuffle(a, groups), x, grad=False)
    compare(rng, lambda lib, a: lib.nn.ChannelShuffle(groups)(a), x[..., 0], grad=False)
    assert_same_outcome(lambda lib: lib.nn.ChannelShuffle(2)(lib.arange(24).reshape(2, 4, 3)))
    for bad in [lambda lib: lib.nn.functional.channel_shuffle(lib.randn(2, 4), 2),
                lambda lib: lib.nn.functional.channel_shuffle(lib.randn(2, 4, 3), 3),
                lambda lib: lib.nn.functional.channel_shuffle(lib.randn(2, 4, 3), 0)]:
        same_error(bad)
    pads = tuple(int(v) for v in rng.integers(0, 3, size=6))
    x = uniform(rng, (2, 2, 3, 4, 3))
    compare(rng, lambda lib, a: lib.nn.ConstantPad3d(pads, 1.5)(a), x)
    compare(rng, lambda lib, a: lib.nn.ConstantPad3d(1, -2.0)(a), x[0])
    compare(rng, lambda lib, a: lib.nn.ReflectionPad3d(pads)(a), x)
    compare(rng, lambda lib, a: lib.nn.ReplicationPad3d(pads)(a), x)
    compare(rng, lambda lib, a: lib.nn.ReplicationPad3d(2)(a), x[0])
    same_error(lambda lib: lib.nn.ReflectionPad3d(3)(lib.randn(1, 1, 3, 3, 3)))


def test_instance_norm_3d():
    rng = seeded_rng()
    affine, track = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
    x = uniform(rng, (2, 3, 3, 4, 2))

    def run(lib, a):
        m = lib.nn.InstanceNorm3d(3, affine=affine, track_running_stats=track).double()
        out = m(a)
        return (out,) + ((m.running_mean, m.running_var) if track else ())

    compare(rng, run, x)
    compare(rng, run, x[0])
    same_error(lambda lib: lib.nn.InstanceNorm3d(3)(lib.randn(2, 3, 4)))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    rng = seeded_rng()
    rows, dim = int(rng.integers(2, 8)), int(rng.integers(1, 5))
    weight = uniform(rng, (rows, dim))
    length = int(rng.integers(0, 12))
    indices = rng.integers(0, rows, size=length)
    cuts = np.sort(rng.integers(0, length + 1, size=int(rng.integers(1, 5))))
    cuts[0] = 0
    padding_idx = [None, int(rng.integers(-rows, rows))][int(rng.integers(0, 2))]
    include_last = bool(rng.random() < 0.5)
    psw = uniform(rng, (length,)) if mode == "sum" else None
    offsets = np.append(cuts, length) if include_last else cuts

    def bag(lib, w, idx, off, *sample_weights):
        return lib.nn.functional.embedding_bag(idx, w, off, mode=mode, padding_idx=padding_idx,
                                               include_last_offset=include_last,
                                               per_sample_weights=sample_weights[0] if sample_weights else None)

    compare(rng, bag, weight, indices, offsets)
    if mode != "max":
        # (PyTorch 1.13's CPU embedding_bag divides some rows' gradients by another index's count:
        # the reference is its F.embedding's scaling, each row's gradient over its frequency)
        def scaled(lib, w, idx, off):
            if lib is pf:
                return pf.nn.functional.embedding_bag(idx, w, off, mode=mode, scale_grad_by_freq=True,
                                                      padding_idx=padding_idx, include_last_offset=include_last)
            rows = torch.nn.functional.embedding(idx, w, scale_grad_by_freq=True)
            keep = [padding_idx is None or int(i) != padding_idx % w.shape[0] for i in idx]
            bags = []
            for a, b in zip(cuts.tolist(), cuts[1:].tolist() + [length]):
                kept = [rows[j] for j in range(a, b) if keep[j]]
                total = torch.stack(kept).sum(0) if kept else rows.new_zeros(w.shape[1]) + 0 * w.sum()
                bags.append(total / max(len(kept), 1) if mode == "mean" else total)
            return torch.stack(bags)

        compare(rng, scaled, weight, indices, offsets)
    if psw is not None:
        compare(rng, bag, weight, indices, offsets, psw)
    # 2-d input: one bag per row; the module form
    idx2 = rng.integers(0, rows, size=(int(rng.integers(1, 4)), int(rng.integers(1, 4))))
    compare(rng, lambda lib, w, idx: lib.nn.EmbeddingBag.from_pretrained(w, freeze=False, mode=mode)(idx),
            weight, idx2)
    compare(rng, lambda lib, w, idx: lib.nn.functional.embedding_bag(idx.int(), w, mode=mode), weight, idx2)


def test_embedding_bag_errors_and_module():
    F = lambda lib: lib.nn.functional  # noqa: E731
    w = lambda lib: lib.randn(5, 3)  # noqa: E731
    idx = lambda lib: lib.tensor([1, 2, 3])  # noqa: E731
    same_error(lambda lib: F(lib).embedding_bag(idx(lib), w(lib), lib.tensor([1, 2])))
    same_error(lambda lib: F(lib).embedding_bag(idx(lib), w(lib), lib.tensor([0, 5]), mode="sum"))
    same_error(lambda lib: F(lib).embedding_bag(lib.tensor([1., 2, 3]), w(lib), lib.tensor([0, 2])))
    same_error(lambda lib: F(lib).embedding_bag(idx(lib), w(lib).long(), lib.tensor([0, 1])))
    same_error(lambda lib: F(lib).embedding_bag(idx(lib), w(lib), lib.tensor([0, 1]), padding_idx=7))
    same_error(lambda lib: F(lib).embedding_bag(idx(lib), w(lib), lib.tensor([0, 1]), mode="avg"))
    same_error(lambda lib: F(lib).embedding_bag(idx(lib), w(lib), None))
    same_error(lambda lib: F(lib).embedding_bag(idx(lib).view(1, 3), w(lib), lib.tensor([0])))
    same_error(lambda lib: F(lib).embedding_bag(idx(lib), w(lib), lib.tensor([0, 1]), mode="max",
                                                scale_grad_by_freq=True))
    same_error(lambda lib: F(lib).embedding_bag(idx(lib), w(lib), lib.tensor([0, 1]), mode="mean",
                                                per_sample_weights=lib.ones(3)))
    same_error(lambda lib: F(lib).embedding_bag(idx(lib), w(lib), lib.tensor([0, 1]), mode="sum",
                                                per_sample_weights=lib.ones(2)))
    same_error(lambda lib: F(lib).embedding_bag(idx(lib), w(lib), lib.tensor([0, 1]), mode="sum",
                                                per_sample_weights=lib.ones(3).double()))
    # (PyTorch fails these in a C++ enforce; plugflow raises IndexError as Embedding does)
    with pytest.raises(IndexError):
        F(pf).embedding_bag(pf.tensor([1, 2, 7]), w(pf), pf.tensor([0, 2]))
    with pytest.raises(RuntimeError, match="non-decreasing"):
        F(pf).embedding_bag(idx(pf), w(pf), pf.tensor([0, 2, 1]))
    m = pf.nn.EmbeddingBag(10, 3, mode="sum", padding_idx=-1)
    assert m.padding_idx == 9 and not m.weight[9].any() and tuple(m.weight.shape) == (10, 3)
    assert repr(m) == repr(torch.nn.EmbeddingBag(10, 3, mode="sum", padding_idx=-1))


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_max_unpool(spatial):
    rng = seeded_rng()
    kernel = int(rng.integers(1, 4))
    sizes = tuple(int(rng.integers(kernel, kernel * 3 + 1)) for _ in range(spatial))
    x = uniform(rng, (2, 3) + sizes)
    pool = f"max_pool{spatial}d"
    unpool = f"max_unpool{spatial}d"

    def run(lib, a):
        out, idx = getattr(lib.nn.functional, pool)(a, kernel, return_indices=True)
        return getattr(lib.nn.functional, unpool)(out, idx, kernel, output_size=a.shape)

    compare(rng, run, x)
    module = getattr(torch.nn, f"MaxUnpool{spatial}d")

    def run_module(lib, a):
        out, idx = getattr(lib.nn, f"MaxPool{spatial}d")(kernel, return_indices=True)(a)
        return getattr(lib.nn, module.__name__)(kernel)(out, idx, a.shape[1:])

    compare(rng, run_module, x[0])
    for bad in [lambda lib: getattr(lib.nn.functional, unpool)(lib.randn((1, 1) + (2,) * spatial),
                                                              lib.zeros((1, 1) + (2,) * spatial, dtype=lib.long),
                                                              2, output_size=(9,) * spatial),
                lambda lib: getattr(lib.nn.functional, unpool)(lib.randn((1, 1) + (2,) * spatial),
                                                              lib.full((1, 1) + (2,) * spatial, 99), 2),
                lambda lib: getattr(lib.nn.functional, unpool)(lib.randn((1, 1) + (2,) * spatial),
                                                              lib.zeros((1, 1) + (3,) * spatial, dtype=lib.long),
                                                              2)]:
        same_error(bad)


@pytest.mark.parametrize("spatial", [2, 3])
def test_fractional_max_pool(spatial):
    rng = seeded_rng(seed_plugflow=True)
    kernel = tuple(int(rng.integers(1, 4)) for _ in range(spatial))
    strict = spatial == 3  # (PyTorch's 3-d pooling asks for output + kernel - 1 < input, not <=)
    sizes = tuple(k + strict + int(rng.integers(0, 6)) for k in kernel)
    out_size = tuple(int(rng.integers(1, s - k + 2 - strict)) for s, k in zip(sizes, kernel))
    x = uniform(rng, (2, 3) + sizes)
    samples = rng.random((2, 3, spatial))
    name = f"fractional_max_pool{spatial}d"
    # with given samples the windows are PyTorch's, so values, indices and gradients match
    compare(rng, lambda lib, a, u: getattr(lib.nn.functional, name)(a, kernel, out_size, return_indices=True,
                                                                   _random_samples=u.detach()), x, samples)
    compare(rng, lambda lib, a, u: getattr(lib.nn.functional, name)(a, kernel, out_size, _random_samples=u.detach()),
            x[0], samples[:1])
    compare(rng, lambda lib, a, u: getattr(lib.nn.functional, name)(a, kernel, out_size, return_indices=True,
                                                                   _random_samples=u), x.astype(np.float32),
            samples.astype(np.float32), grad=False)
    # with plugflow's own samples: the output is the maximum over a window at each index, and the
    # windows cover the input's ends
    xp = pf.from_numpy(x)
    fitting = tuple(max(1, min(k, s - int(s * 0.5) + 1 - strict)) for k, s in zip(kernel, sizes))
    module = getattr(pf.nn, f"FractionalMaxPool{spatial}d")(fitting, output_ratio=0.5, return_indices=True)
    out, idx = module(xp)
    assert tuple(out.shape) == (2, 3) + tuple(int(s * 0.5) for s in sizes)
    assert pf.equal(out, xp.reshape(2, 3, -1).gather(2, idx.reshape(2, 3, -1)).reshape(out.shape))
    out, idx = getattr(pf.nn.functional, name)(xp, kernel, out_size, return_indices=True)
    assert tuple(out.shape) == (2, 3) + out_size
    flat = idx.reshape(2, 3, -1)
    assert pf.equal(out.reshape(2, 3, -1), xp.reshape(2, 3, -1).gather(2, flat))
    coords = np.unravel_index(flat.numpy(), sizes)
    for d in range(spatial):  # the last window ends at the input's end: its maximum lies in it
        last = np.take(coords[d].reshape((2, 3) + out_size), -1, axis=2 + d)
        assert (last >= sizes[d] - kernel[d]).all()
    draws = [getattr(pf.nn.functional, name)(xp, kernel, out_size) for _ in range(2)]
    assert all(tuple(d.shape) == (2, 3) + out_size for d in draws)
    same_error(lambda lib: getattr(lib.nn, f"FractionalMaxPool{spatial}d")(2))
    same_error(lambda lib: getattr(lib.nn, f"FractionalMaxPool{spatial}d")(2, output_size=2, output_ratio=0.5))
    same_error(lambda lib: getattr(lib.nn, f"FractionalMaxPool{spatial}d")(2, output_ratio=1.5))
    same_error(lambda lib: getattr(lib.nn.functional, name)(lib.randn((1, 1) + (4,) * spatial), 3,
                                                            output_size=3))
    with pytest.raises(RuntimeError, match="kernel_size"):  # (PyTorch returns -inf)
        getattr(pf.nn.functional, name)(pf.randn((1, 1) + (4,) * spatial), 0, output_size=2)
    same_error(lambda lib: getattr(lib.nn.functional, name)(lib.randn((1, 1, 0) + (4,) * (spatial - 1)), 1,
                                                            output_size=1))
    assert_same_outcome(lambda lib: getattr(lib.nn.functional, name)(lib.randn((1, 1, 1) + (4,) * (spatial - 1)), 1,
                                                                     output_ratio=0.5))


def test_adaptive_log_softmax():
    rng = seeded_rng()
    in_features, n_classes = int(rng.integers(4, 10)), int(rng.integers(4, 12))
    cutoffs = sorted(rng.choice(np.arange(1, n_classes), size=int(rng.integers(1, min(3, n_classes - 1) + 1)),
                                replace=False).tolist())
    head_bias = bool(rng.random() < 0.5)
    m_t = torch.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=2.0,
                                              head_bias=head_bias).double()
    m_p = pf.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=2.0,
                                           head_bias=head_bias).double()
    m_p.load_state_dict({k: from_torch(v) for k, v in m_t.state_dict().items()})
    x = uniform(rng, (int(rng.integers(1, 8)), in_features))
    target = rng.integers(0, n_classes, size=x.shape[0])
    modules = {torch: m_t, pf: m_p}
    compare(rng, lambda lib, a, t: tuple(modules[lib](a, t)), x, target)
    compare(rng, lambda lib, a, t: tuple(modules[lib](a, t))[::-1], x, target)  # the loss's gradients
    for p_param, t_param in zip(m_p.parameters(), m_t.parameters()):
        if t_param.grad is None:  # a cluster no target falls in
            assert p_param.grad is None or not p_param.grad.any()
        else:
            assert_matches(p_param.grad, t_param.grad)
    compare(rng, lambda lib, a, t: tuple(modules[lib](a, t)), x[0], target[0, ...])
    compare(rng, lambda lib, a: modules[lib].log_prob(a), x)
    compare(rng, lambda lib, a: modules[lib].predict(a), x, grad=False)
    same_error(lambda lib: modules[lib](lib.zeros(2, in_features).double(), lib.tensor([0, n_classes])))
    same_error(lambda lib: modules[lib](lib.zeros(2, in_features).double(), lib.tensor([0])))
    same_error(lambda lib: lib.nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 3]))
    same_error(lambda lib: lib.nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 10]))


def test_gumbel_softmax_statistics():
    rng = seeded_rng(seed_plugflow=True)
    logits = pf.from_numpy(rng.normal(size=(4,))).requires_grad_()
    tau = float(rng.uniform(0.5, 2))
    soft = pf.nn.functional.gumbel_softmax(logits.expand(20000, 4), tau=tau)
    assert tuple(soft.shape) == (20000, 4) and soft.dtype == pf.float64
    assert np.allclose(soft.sum(-1).detach().numpy(), 1)
    hard = pf.nn.functional.gumbel_softmax(logits.expand(20000, 4), tau=tau, hard=True)
    assert set(np.unique(hard.detach().numpy())) <= {0.0, 1.0} and (hard.sum(-1) == 1).all()
    # the hard sample's argmax is a draw from softmax(logits) (Gumbel-max), whatever tau
    freq = hard.detach().numpy().mean(0)
    probs = torch.from_numpy(logits.detach().numpy()).softmax(0).numpy()
    assert np.abs(freq - probs).max() < 5 * np.sqrt(0.25 / 20000) + 1e-3, (freq, probs)
    # straight-through: the hard sample's gradient is the soft one's
    hard.sum().backward()
    assert np.allclose(logits.grad.numpy(), 0, atol=1e-9)
    with pytest.warns(UserWarning, match="eps"):
        pf.nn.functional.gumbel_softmax(logits, eps=1e-3)


def test_pdist():
    rng = seeded_rng()
    x = uniform(rng, (int(rng.integers(2, 7)), int(rng.integers(1, 5))))
    for p in [0.5, 1.0, 2.0, 3.0, float("inf")]:
        compare(rng, lambda lib, a: lib.nn.functional.pdist(a, p), x)
        compare(rng, lambda lib, a: lib.pdist(a, p), x)
    compare(rng, lambda lib, a: lib.pdist(a, 0), x, grad=False)
    compare(rng, lambda lib, a: lib.pdist(a), x[:1])
    for bad in [lambda lib: lib.pdist(lib.randn(3)), lambda lib: lib.pdist(lib.randn(3, 2), p=-1),
                lambda lib: lib.pdist(lib.ones(3, 2, dtype=lib.long)),
                lambda lib: lib.pdist(lib.randn(3, 2), math.nan)]:
        same_error(bad)


# ---- lazy modules -------------------------------------------------------------------------------------

LAZY_CASES = [  # (constructor, its arguments, the input shape)
    ("LazyLinear", (5,), (3, 7)),
    ("LazyLinear", (4, False), (2, 3, 6)),
    ("LazyConv1d", (4, 3), (2, 3, 8)),
    ("LazyConv2d", (6, 3, 2, 1, 1, 2), (2, 4, 7, 6)),
    ("LazyConv3d", (2, 2), (3, 4, 4, 3)),
    ("LazyConvTranspose1d", (4, 3, 2), (2, 3, 5)),
    ("LazyConvTranspose2d", (4, 3), (2, 2, 4, 5)),
    ("LazyConvTranspose3d", (2, 2, 1, 0, 0, 1, False), (1, 3, 3, 3, 2)),
    ("LazyBatchNorm1d", (), (4, 3)),
    ("LazyBatchNorm2d", (1e-3, 0.3), (3, 4, 2, 3)),
    ("LazyBatchNorm3d", (), (2, 3, 2, 2, 3)),
    ("LazyInstanceNorm1d", (), (2, 3, 5)),
    ("LazyInstanceNorm2d", (1e-5, 0.1, False, False), (2, 3, 4, 5)),
    ("LazyInstanceNorm3d", (), (2, 3, 2, 3, 2)),
]


@pytest.mark.filterwarnings("ignore:Lazy modules")
@pytest.mark.parametrize("name, args, shape", LAZY_CASES, ids=[c[0] + str(i) for i, c in enumerate(LAZY_CASES)])
def test_lazy_modules(name, args, shape):
    rng = seeded_rng(seed_plugflow=True)
    m_t, m_p = getattr(torch.nn, name)(*args).double(), getattr(pf.nn, name)(*args).double()
    assert m_p.has_uninitialized_params() == m_t.has_uninitialized_params() and repr(m_p) == repr(m_t)
    assert all(isinstance(p, pf.nn.parameter.UninitializedParameter) for p in m_p.parameters())
    x = uniform(rng, shape)
    # the dry run materializes the parameters: same shapes, dtype, class and repr
    m_t(torch.from_numpy(x))
    m_p(pf.from_numpy(x))
    assert type(m_p).__name__ == type(m_t).__name__ and repr(m_p) == repr(m_t)
    assert not hasattr(m_p, "_initialize_hook") and not hasattr(m_p, "has_uninitialized_params")
    state_t = m_t.state_dict()
    state_p = m_p.state_dict()
    assert list(state_p) == list(state_t)
    for key, value in state_t.items():
        assert type(state_p[key]) is pf.Tensor
        assert tuple(state_p[key].shape) == tuple(value.shape) and dtype_name(state_p[key].dtype) == \
            dtype_name(value.dtype), key
    assert all(type(p) is pf.nn.Parameter for p in m_p.parameters())
    # then it is the ordinary module: with torch's values it computes torch's outputs and gradients
    m_p.load_state_dict({k: from_torch(v) for k, v in state_t.items()})
    modules = {torch: m_t, pf: m_p}
    compare(rng, lambda lib, a: modules[lib](a), x)
    for (name_p, p), (name_t, t) in zip(m_p.named_parameters(), m_t.named_parameters()):
        assert name_p == name_t
        assert_matches(p.grad, t.grad)
    # an optimizer made after the dry run steps the materialized parameters
    if not list(m_t.parameters()):
        return
    opt_t, opt_p = torch.optim.SGD(m_t.parameters(), lr=0.1), pf.optim.SGD(m_p.parameters(), lr=0.1)
    opt_t.step()
    opt_p.step()
    for p, t in zip(m_p.parameters(), m_t.parameters()):
        assert_matches(p.detach(), t.detach())


@pytest.mark.filterwarnings("ignore:Lazy modules")
def test_lazy_load_state_dict_and_errors():
    rng = seeded_rng()
    m_t = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                              torch.nn.Linear(16, 5)).double()
    m_p = pf.nn.Sequential(pf.nn.LazyConv2d(4, 3), pf.nn.LazyBatchNorm2d(), pf.nn.Flatten(), pf.nn.LazyLinear(5))
    m_p.double()
    # loading initialized values materializes the lazy entries (the module stays lazy until its first forward)
    m_p.load_state_dict({k: from_torch(v) for k, v in m_t.state_dict().items()})
    assert not m_p[0].has_uninitialized_params() and type(m_p[1].running_mean) is pf.Tensor
    compare(rng, lambda lib, a: {torch: m_t, pf: m_p}[lib](a), uniform(rng, (2, 3, 4, 4)))
    assert type(m_p[3]) is pf.nn.Linear
    # an uninitialized module's state dict holds its uninitialized entries
    lazy = pf.nn.LazyLinear(3)
    state = lazy.state_dict()
    assert all(pf.nn.parameter.is_lazy(v) for v in state.values())
    assert repr(state["weight"]) == "<UninitializedParameter>"
    # a copy initializes on its own first forward, leaving the original lazy
    original = pf.nn.Sequential(pf.nn.LazyLinear(3), pf.nn.LazyBatchNorm1d())
    copied = copy.deepcopy(original)
    copied(pf.randn(4, 5))
    assert type(copied[0]) is pf.nn.Linear and pf.nn.parameter.is_lazy(original[0].weight)
    original(pf.randn(4, 7))
    assert (original[0].in_features, copied[0].in_features) == (7, 5)
    same_error(lambda lib: lib.nn.LazyConv2d(4, 3, groups=2)(lib.randn(1, 3, 5, 5)))
    same_error(lambda lib: lib.nn.LazyConv2d(4, 3)(lib.randn(3, 5)))
    with pytest.warns(UserWarning, match="Lazy modules"):
        pf.nn.LazyBatchNorm1d()
    param = pf.nn.UninitializedParameter(dtype=pf.float64)
    assert isinstance(param, pf.nn.Parameter) and param.requires_grad
    param.materialize((2, 3))
    assert type(param) is pf.nn.Parameter and tuple(param.shape) == (2, 3) and param.dtype == pf.float64
    buffer = pf.nn.UninitializedBuffer()
    assert not buffer.requires_grad and repr(buffer) == "<UninitializedBuffer>"
    with pytest.raises(RuntimeError):
        buffer.share_memory_()


def test_float32_results_keep_their_dtype():
    """The float32 forms give float32 results with PyTorch's values (float32 rounding)."""
    rng = seeded_rng()
    n, c = int(rng.integers(1, 6)), int(rng.integers(2, 6))
    x, y = uniform(rng, (n, c)).astype(np.float32), uniform(rng, (n, c)).astype(np.float32)
    s, labels = signs(rng, (n,)).astype(np.float32), rng.integers(0, c, size=(n,))
    F = lambda lib: lib.nn.functional  # noqa: E731
    cases = [
        (lambda lib, a, b, t: F(lib).margin_ranking_loss(a[:, 0], b[:, 0], t), (x, y, s)),
        (lambda lib, a, t: F(lib).hinge_embedding_loss(a[:, 0], t), (x, s)),
        (lambda lib, a, b, t: F(lib).cosine_embedding_loss(a, b, t), (x, y, s)),
        (lambda lib, a, t: F(lib).soft_margin_loss(a[:, 0], t), (x, s)),
        (lambda lib, a, b: F(lib).multilabel_soft_margin_loss(a, (b > 0).float()), (x, y)),
        (lambda lib, a, t: F(lib).multi_margin_loss(a, t, p=2), (x, labels)),
        (lambda lib, a, b: F(lib).triplet_margin_loss(a, b, b.flip(0), swap=True), (x, y)),
        (lambda lib, a, b: F(lib).poisson_nll_loss(a, b.abs(), full=True), (x, y)),
        (lambda lib, a, b: F(lib).gaussian_nll_loss(a, b, b.abs() + 0.1, full=True), (x, y)),
        (lambda lib, a: F(lib).local_response_norm(a.unsqueeze(0), 3), (x,)),
        (lambda lib, a: F(lib).pdist(a, 1.5), (x,)),
    ]
    for fn, arrays in cases:
        compare(rng, fn, *arrays, rtol=1e-5, atol=1e-5, grad=False)


@pytest.mark.filterwarnings("ignore:size_average and reduce")
@pytest.mark.parametrize("size_average, reduce", [(False, None), (None, False), (True, True)])
def test_legacy_reduction_arguments(size_average, reduce):
    rng = seeded_rng()
    x, y, s = uniform(rng, (4, 3)), uniform(rng, (4, 3)), signs(rng, (4,))
    legacy = {"size_average": size_average, "reduce": reduce}
    compare(rng, lambda lib, a, b, t: lib.nn.MarginRankingLoss(0.5, **legacy)(a[:, 0], b[:, 0], t), x, y, s)
    compare(rng, lambda lib, a, t: lib.nn.MultiMarginLoss(**legacy)(a, t), x, rng.integers(0, 3, size=(4,)))
    compare(rng, lambda lib, a, b: lib.nn.TripletMarginLoss(**legacy)(a, b, b.flip(0)), x, y)
    compare(rng, lambda lib, a, b: lib.nn.functional.poisson_nll_loss(a, b.abs(), **legacy), x, y)
    compare(rng, lambda lib, a, b: lib.nn.functional.multilabel_soft_margin_loss(a, (b > 0).double(), **legacy), x, y)
