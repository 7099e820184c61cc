"""Shape ops against PyTorch: cat/stack/split/chunk/unbind, flip/roll/repeat/tile/
repeat_interleave/movedim/unflatten/meshgrid, tril/triu, sort/argsort/topk/unique, pad and
one_hot. Forward values on random inputs (broadcast-free ops, non-contiguous views, sizes 0
and 1), gradients (and double backward) against torch.autograd, and PyTorch's exceptions."""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import plugflow as pf
from helpers import assert_matches, assert_same_outcome, from_torch, make_pair, random_shape, to_torch

SEEDS = range(6)


# ---- helpers ----------------------------------------------------------------------------------

def leaf_pair(rng, shape, dtype="float64", low=-3, high=3):
    """The same random float data as a plugflow leaf and a torch leaf, both requiring grad."""
    data = rng.uniform(low, high, size=shape).astype(dtype)
    t = torch.from_numpy(data.copy()).requires_grad_()
    p = pf.from_numpy(data.copy()).requires_grad_()
    return p, t


def check_grads(rng, pf_fn, torch_fn, shapes, double=True, dtype="float64"):
    """Values of fn and the gradients of every input (and, with `double`, the gradient of the
    backward itself with respect to the output gradient) match torch."""
    pairs = [leaf_pair(rng, s, dtype) for s in shapes]
    pins, tins = [p for p, _ in pairs], [t for _, t in pairs]
    pout, tout = pf_fn(*pins), torch_fn(*tins)
    assert_matches(pout.detach(), tout.detach())
    g = rng.standard_normal(tuple(tout.shape)).astype(dtype)
    pg = pf.from_numpy(g.copy()).requires_grad_(double)
    tg = torch.from_numpy(g.copy()).requires_grad_(double)
    pgrads = pf.autograd.grad(pout, pins, pg, create_graph=double, allow_unused=True)
    tgrads = torch.autograd.grad(tout, tins, tg, create_graph=double, allow_unused=True)
    for a, b in zip(pgrads, tgrads):
        if b is None:
            assert a is None or float(a.abs().sum()) == 0
            continue
        assert_matches(a.detach(), b.detach())
    if double:
        # d/d(grad_output) of sum(grad_input * w): exercises the backward's own backward.
        ws = [rng.standard_normal(tuple(t.shape)).astype(dtype) for t in tins]
        ps = sum((a * pf.from_numpy(w.copy())).sum() for a, w in zip(pgrads, ws) if a is not None)
        ts = sum((b * torch.from_numpy(w.copy())).sum() for b, w in zip(tgrads, ws) if b is not None)
        if isinstance(ts, torch.Tensor) and ts.requires_grad:
            (pgg,) = pf.autograd.grad(ps, [pg])
            (tgg,) = torch.autograd.grad(ts, [tg])
            assert_matches(pgg, tgg)


def raises_like(pf_call, torch_call, match=None):
    """Both raise the same exception type (and plugflow's message contains `match`)."""
    with pytest.raises(Exception) as texc:
        torch_call()
    with pytest.raises(type(texc.value)) as pexc:
        pf_call()
    if match is not None:
        assert match in str(pexc.value), (str(pexc.value), str(texc.value))
    return pexc.value


def noncontig_pair(rng, shape, dtype):
    """A non-contiguous view (transposed storage) with the given logical shape."""
    if len(shape) < 2:
        a, t = make_pair(rng, tuple(shape) + (2,), dtype)
        return a[..., 0], t[..., 0]
    rev = tuple(reversed(shape))
    a, t = make_pair(rng, rev, dtype)
    perm = tuple(reversed(range(len(shape))))
    return a.permute(perm), t.permute(perm)


# ---- cat / stack -----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_cat_random(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=4, max_size=4) or (3,)
    dim = int(rng.integers(-len(shape), len(shape)))
    pieces_p, pieces_t = [], []
    for i in range(int(rng.integers(1, 4))):
        s = list(shape)
        s[dim] = int(rng.integers(0, 4))
        if i % 2:
            p, t = noncontig_pair(rng, s, "float32")
        else:
            p, t = make_pair(rng, tuple(s), "float32")
        pieces_p.append(p)
        pieces_t.append(t)
    assert_matches(pf.cat(pieces_p, dim), torch.cat(pieces_t, dim))
    assert_matches(pf.cat(tuple(pieces_p), dim=dim), torch.cat(tuple(pieces_t), dim=dim))
    assert_matches(pf.concat(pieces_p, dim), torch.concat(pieces_t, dim))


@pytest.mark.parametrize("a,b", [("int32", "float64"), ("bool", "int8"), ("uint8", "int8"), ("float16", "bfloat16"),
                                 ("int64", "float32"), ("bool", "bool")])
def test_cat_type_promotion(a, b):
    rng = np.random.default_rng(0)
    pa, ta = make_pair(rng, (2, 3), a)
    pb, tb = make_pair(rng, (1, 3), b)
    assert_matches(pf.cat([pa, pb]), torch.cat([ta, tb]))
    assert_matches(pf.stack([pa, pa[:1].expand(2, 3)]), torch.stack([ta, ta[:1].expand(2, 3)]))


def test_cat_legacy_empty_and_edge_sizes():
    a, ta = make_pair(np.random.default_rng(1), (2, 3), "float32")
    e, te = pf.empty(0), torch.empty(0)
    assert_matches(pf.cat([a, e]), torch.cat([ta, te]))
    assert_matches(pf.cat([e, a, e], 1), torch.cat([te, ta, te], 1))
    assert_matches(pf.cat([e.double(), a.int()]), torch.cat([te.double(), ta.int()]))  # dtype still promotes
    assert_matches(pf.cat([e, e], 1), torch.cat([te, te], 1))
    assert_matches(pf.cat([pf.empty(0, 3), a]), torch.cat([torch.empty(0, 3), ta]))
    assert_matches(pf.cat([a]), torch.cat([ta]))


def test_cat_errors():
    a, b = pf.zeros(2, 3), pf.zeros(3, 3)
    ta, tb = torch.zeros(2, 3), torch.zeros(3, 3)
    raises_like(lambda: pf.cat([a, b], 1), lambda: torch.cat([ta, tb], 1),
                "Sizes of tensors must match except in dimension 1. Expected size 2 but got size 3 for tensor "
                "number 1 in the list.")
    raises_like(lambda: pf.cat([a, pf.zeros(2)]), lambda: torch.cat([ta, torch.zeros(2)]),
                "Tensors must have same number of dimensions: got 2 and 1")
    raises_like(lambda: pf.cat([]), lambda: torch.cat([]), "expected a non-empty list of Tensors")
    raises_like(lambda: pf.cat([pf.tensor(1.0)]), lambda: torch.cat([torch.tensor(1.0)]),
                "zero-dimensional tensor (at position 0) cannot be concatenated")
    raises_like(lambda: pf.cat([a], 2), lambda: torch.cat([ta], 2), "Dimension out of range")
    raises_like(lambda: pf.cat(a), lambda: torch.cat(ta))
    raises_like(lambda: pf.cat([a, 3]), lambda: torch.cat([ta, 3]), "expected Tensor as element 1")
    raises_like(lambda: pf.cat([a, a], out=pf.empty(4, 3, dtype=pf.int32)),
                lambda: torch.cat([ta, ta], out=torch.empty(4, 3, dtype=torch.int32)),
                "input types can't be cast to the desired output type Int")


def test_cat_out():
    a, ta = make_pair(np.random.default_rng(2), (2, 3), "float32")
    out = pf.empty(4, 3, dtype=pf.float64)
    r = pf.cat([a, a], out=out)
    assert r is out
    assert_matches(out, torch.cat([ta, ta]).double())
    out2 = pf.empty(0)
    pf.cat([a, a], 1, out=out2)  # resized
    assert_matches(out2, torch.cat([ta, ta], 1))
    out3 = pf.empty(2, 2, 3)
    pf.stack([a, a], out=out3)
    assert_matches(out3, torch.stack([ta, ta]))


@pytest.mark.parametrize("seed", SEEDS)
def test_stack_random(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=3, max_size=4)
    n = int(rng.integers(1, 4))
    dim = int(rng.integers(-len(shape) - 1, len(shape) + 1))
    ps, ts = zip(*[make_pair(rng, shape, "float32") for _ in range(n)])
    assert_matches(pf.stack(list(ps), dim), torch.stack(list(ts), dim))
    assert_matches(pf.stack(ps, dim=dim), torch.stack(ts, dim=dim))


def test_stack_errors():
    raises_like(lambda: pf.stack([pf.zeros(2, 3), pf.zeros(3, 3)]),
                lambda: torch.stack([torch.zeros(2, 3), torch.zeros(3, 3)]),
                "stack expects each tensor to be equal size, but got [2, 3] at entry 0 and [3, 3] at entry 1")
    raises_like(lambda: pf.stack([]), lambda: torch.stack([]), "stack expects a non-empty TensorList")
    raises_like(lambda: pf.stack([pf.zeros(2, 3)], 3), lambda: torch.stack([torch.zeros(2, 3)], 3),
                "Dimension out of range")


@pytest.mark.parametrize("name", ["hstack", "vstack", "dstack", "column_stack", "row_stack"])
def test_hvd_stack(name):
    rng = np.random.default_rng(3)
    for shapes in ([(3,), (3,)], [(), ()], [(2, 3), (2, 3)], [(2, 3, 2), (2, 3, 2)], [(4,), (4,), (4,)]):
        ps, ts = zip(*[make_pair(rng, s, "float32") for s in shapes])
        assert_matches(getattr(pf, name)(list(ps)), getattr(torch, name)(list(ts)))
    raises_like(lambda: getattr(pf, name)([]), lambda: getattr(torch, name)([]), "expects a non-empty TensorList")


def test_atleast():
    for s in [(), (3,), (2, 3), (2, 3, 4)]:
        p, t = make_pair(np.random.default_rng(0), s, "float32")
        for name in ["atleast_1d", "atleast_2d", "atleast_3d"]:
            assert_matches(getattr(pf, name)(p), getattr(torch, name)(t))
        got = pf.atleast_2d(p, p)
        assert isinstance(got, tuple) and len(got) == 2


def test_cat_stack_grads():
    rng = np.random.default_rng(4)
    check_grads(rng, lambda a, b: pf.cat([a, b], 1), lambda a, b: torch.cat([a, b], 1), [(2, 3), (2, 1)])
    check_grads(rng, lambda a, b: pf.cat([a.t(), b], 0), lambda a, b: torch.cat([a.t(), b], 0), [(2, 3), (1, 2)])
    check_grads(rng, lambda a, b: pf.stack([a, b], -1), lambda a, b: torch.stack([a, b], -1), [(2, 3), (2, 3)])
    check_grads(rng, lambda a, b: pf.hstack([a, b]), lambda a, b: torch.hstack([a, b]), [(3,), (2,)])
    # a legacy-empty input and a float32 input promoted to float64
    e = pf.empty(0).requires_grad_()
    te = torch.empty(0).requires_grad_()
    a, ta = leaf_pair(rng, (2, 2))
    f32 = pf.ones(2, 1).requires_grad_()
    tf32 = torch.ones(2, 1).requires_grad_()
    pf.cat([e, a, f32], 1).sum().backward()
    torch.cat([te, ta, tf32], 1).sum().backward()
    assert_matches(e.grad, te.grad)
    assert_matches(a.grad, ta.grad)
    assert_matches(f32.grad, tf32.grad)
    assert pf.cat([a, a]).grad_fn.name() == "CatBackward0"


def test_cat_out_with_grad_raises():
    a = pf.zeros(2, requires_grad=True)
    ta = torch.zeros(2, requires_grad=True)
    raises_like(lambda: pf.cat([a, a], out=pf.empty(4)), lambda: torch.cat([ta, ta], out=torch.empty(4)),
                "don't support automatic differentiation")


# ---- split / chunk / unbind -----------------------------------------------------------------------------

def same_parts(ps, ts):
    assert isinstance(ps, tuple)
    assert len(ps) == len(ts)
    for p, t in zip(ps, ts):
        assert_matches(p, t)


@pytest.mark.parametrize("seed", SEEDS)
def test_split_chunk_unbind(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=3, max_size=6) or (5,)
    p, t = make_pair(rng, shape, "float32")
    dim = int(rng.integers(-len(shape), len(shape)))
    n = shape[dim]
    for size in range(1, n + 2):
        same_parts(p.split(size, dim), t.split(size, dim))
        same_parts(pf.split(p, size, dim=dim), torch.split(t, size, dim=dim))
    sizes = list(rng.multinomial(n, [0.3, 0.3, 0.4]))
    same_parts(pf.split(p, sizes, dim), torch.split(t, sizes, dim))
    same_parts(p.split_with_sizes(sizes, dim), t.split_with_sizes(sizes, dim))
    for chunks in range(1, n + 3):
        same_parts(p.chunk(chunks, dim), t.chunk(chunks, dim))
        same_parts(pf.chunk(p, chunks, dim), torch.chunk(t, chunks, dim))
        same_parts(pf.tensor_split(p, chunks, dim), torch.tensor_split(t, chunks, dim))
    same_parts(p.tensor_split([1, n - 1, n + 3], dim), t.tensor_split([1, n - 1, n + 3], dim))
    # PyTorch's overloads by name (torchvision's MViT calls tensor_split(x, indices=(1,), dim=2)).
    same_parts(pf.tensor_split(p, indices=(1, n - 1), dim=dim), torch.tensor_split(t, indices=(1, n - 1), dim=dim))
    same_parts(p.tensor_split(sections=2, dim=dim), t.tensor_split(sections=2, dim=dim))
    same_parts(p.unbind(dim), t.unbind(dim))
    same_parts(pf.unbind(p, dim), torch.unbind(t, dim))


def test_split_edge_cases_and_errors():
    for kwargs in ({}, {"indices": 2}, {"sections": [1]}):
        for fw in (pf, torch):
            with pytest.raises(TypeError):
                fw.tensor_split(fw.zeros(4), **kwargs)
    raises_like(lambda: pf.zeros(5, 3).split(0), lambda: torch.zeros(5, 3).split(0),
                "split_size can only be 0 if dimension size is 0, but got dimension size of 5")
    same_parts(pf.zeros(0, 3).split(0), torch.zeros(0, 3).split(0))
    same_parts(pf.zeros(0, 3).split(2), torch.zeros(0, 3).split(2))
    same_parts(pf.zeros(0, 3).chunk(3), torch.zeros(0, 3).chunk(3))
    raises_like(lambda: pf.zeros(5).split(-1), lambda: torch.zeros(5).split(-1), "split_size be non-negative")
    raises_like(lambda: pf.zeros(5).split([1, 3]), lambda: torch.zeros(5).split([1, 3]),
                "split_with_sizes expects split_sizes to sum exactly to 5")
    raises_like(lambda: pf.zeros(5).split([6, -1]), lambda: torch.zeros(5).split([6, -1]), "non-negative entries")
    raises_like(lambda: pf.tensor(1.0).split(1), lambda: torch.tensor(1.0).split(1),
                "split expects at least a 1-dimensional tensor")
    raises_like(lambda: pf.zeros(5).chunk(0), lambda: torch.zeros(5).chunk(0),
                "chunk expects `chunks` to be greater than 0, got: 0")
    raises_like(lambda: pf.tensor(1.0).chunk(1), lambda: torch.tensor(1.0).chunk(1), "at least a 1-dimensional")
    raises_like(lambda: pf.tensor(1.0).unbind(), lambda: torch.tensor(1.0).unbind(), "has no dimensions")
    raises_like(lambda: pf.zeros(2).unbind(1), lambda: torch.zeros(2).unbind(1), "Dimension out of range")


def test_split_views_and_grads():
    rng = np.random.default_rng(5)
    p = pf.arange(6.0)
    parts = p.split(2)
    parts[1].fill_(-1)  # views share memory
    assert p.tolist() == [0, 1, -1, -1, 4, 5]
    check_grads(rng, lambda a: pf.cat([x * (i + 1) for i, x in enumerate(a.split(2, 1))], 1),
                lambda a: torch.cat([x * (i + 1) for i, x in enumerate(a.split(2, 1))], 1), [(3, 5)])
    check_grads(rng, lambda a: pf.stack(a.unbind(0), 1), lambda a: torch.stack(a.unbind(0), 1), [(3, 4)])
    check_grads(rng, lambda a: a.chunk(2)[1] * 2, lambda a: a.chunk(2)[1] * 2, [(5, 2)])


# ---- tril / triu ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_tril_triu(seed, dtype):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=2, max_size=3) + (int(rng.integers(0, 5)), int(rng.integers(0, 5)))
    p, t = make_pair(rng, shape, dtype)
    q, tq = noncontig_pair(rng, shape, dtype)
    for k in range(-4, 5):
        assert_matches(p.tril(k), t.tril(k))
        assert_matches(pf.triu(p, k), torch.triu(t, k))
        assert_matches(pf.tril(q, diagonal=k), torch.tril(tq, diagonal=k))
        assert_matches(q.triu(k), tq.triu(k))


def test_tril_triu_inplace_grads_errors():
    rng = np.random.default_rng(6)
    p, t = make_pair(rng, (4, 5), "float32")
    p.tril_(1)
    t.tril_(1)
    assert_matches(p, t)
    p.triu_(-1)
    t.triu_(-1)
    assert_matches(p, t)
    check_grads(rng, lambda a: a.tril(-1), lambda a: a.tril(-1), [(3, 4)])
    check_grads(rng, lambda a: pf.triu(a.transpose(0, 2), 1), lambda a: torch.triu(a.transpose(0, 2), 1), [(2, 3, 4)])
    raises_like(lambda: pf.zeros(3).tril(), lambda: torch.zeros(3).tril(), "Dimension out of range")
    raises_like(lambda: pf.tensor(1.0).triu(), lambda: torch.tensor(1.0).triu(), "Dimension out of range")


# ---- flip / roll -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_flip(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=4, max_size=4)
    p, t = make_pair(rng, shape, "int32")
    q, tq = noncontig_pair(rng, shape, "float64")
    n = len(shape)
    for _ in range(4):
        dims = tuple(int(d) - n for d in rng.permutation(n)[: rng.integers(0, n + 1)]) if n else ()
        assert_matches(p.flip(dims), t.flip(dims))
        assert_matches(pf.flip(q, dims), torch.flip(tq, dims))
        if dims:
            assert_matches(q.flip(*dims), tq.flip(*dims))
    if n >= 2:
        assert_matches(pf.fliplr(p), torch.fliplr(t))
    if n >= 1:
        assert_matches(p.flipud(), t.flipud())


def test_flip_grads_errors():
    rng = np.random.default_rng(7)
    check_grads(rng, lambda a: a.flip(0, 2), lambda a: a.flip(0, 2), [(2, 3, 4)])
    check_grads(rng, lambda a: a.t().flip(1), lambda a: a.t().flip(1), [(3, 4)])
    raises_like(lambda: pf.zeros(2, 3).flip(0, 0), lambda: torch.zeros(2, 3).flip(0, 0),
                "dim 0 appears multiple times in the list of dims")
    raises_like(lambda: pf.zeros(2, 3).flip(2), lambda: torch.zeros(2, 3).flip(2), "Dimension out of range")
    raises_like(lambda: pf.fliplr(pf.zeros(3)), lambda: torch.fliplr(torch.zeros(3)), "Input must be >= 2-d.")
    assert_matches(pf.tensor(2.0).flip(0), torch.tensor(2.0).flip(0))
    a = pf.arange(3)
    b = a.flip(0)
    b[0] = 7  # a copy, not a view
    assert a.tolist() == [0, 1, 2]


@pytest.mark.parametrize("seed", SEEDS)
def test_roll(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=3, max_size=5) or (4,)
    p, t = make_pair(rng, shape, "float32")
    q, tq = noncontig_pair(rng, shape, "int64")
    for _ in range(4):
        shift = int(rng.integers(-12, 12))
        assert_matches(p.roll(shift), t.roll(shift))  # flattened
        k = int(rng.integers(1, len(shape) + 2))
        dims = tuple(int(rng.integers(-len(shape), len(shape))) for _ in range(k))  # repeats allowed
        shifts = tuple(int(rng.integers(-7, 7)) for _ in range(k))
        assert_matches(pf.roll(q, shifts, dims), torch.roll(tq, shifts, dims))
        assert_matches(p.roll(shifts[0], dims[0]), t.roll(shifts[0], dims[0]))


def test_roll_grads_errors_edges():
    rng = np.random.default_rng(8)
    check_grads(rng, lambda a: a.roll((1, -2), (0, 1)), lambda a: a.roll((1, -2), (0, 1)), [(3, 4)])
    check_grads(rng, lambda a: a.roll(5), lambda a: a.roll(5), [(3, 4)])
    raises_like(lambda: pf.zeros(2, 3).roll((1, 2), (0,)), lambda: torch.zeros(2, 3).roll((1, 2), (0,)),
                "shifts and dimensions must align. shifts: 2, dims:1")
    raises_like(lambda: pf.zeros(2, 3).roll((1, 2)), lambda: torch.zeros(2, 3).roll((1, 2)), "must align")
    raises_like(lambda: pf.zeros(2, 3).roll(1, 5), lambda: torch.zeros(2, 3).roll(1, 5), "Dimension out of range")
    raises_like(lambda: pf.tensor(1.0).roll(1, 0), lambda: torch.tensor(1.0).roll(1, 0), "has no dimensions")
    assert_matches(pf.zeros(0, 3).roll(1, 0), torch.zeros(0, 3).roll(1, 0))
    assert_matches(pf.tensor(1.0).roll(1), torch.tensor(1.0).roll(1))


# ---- repeat / tile / repeat_interleave ----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_repeat_tile(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=3, max_size=3)
    p, t = noncontig_pair(rng, shape, "int16") if len(shape) else make_pair(rng, shape, "int16")
    reps = tuple(int(r) for r in rng.integers(0, 4, size=len(shape) + int(rng.integers(0, 2))))
    assert_matches(p.repeat(*reps) if reps else p.repeat(()), t.repeat(*reps) if reps else t.repeat(()))
    assert_matches(p.repeat(reps), t.repeat(reps))
    short = reps[: max(0, len(reps) - 1)]
    assert_matches(pf.tile(p, short), torch.tile(t, short))
    assert_matches(p.tile(*reps) if reps else p.tile(()), t.tile(*reps) if reps else t.tile(()))


def test_repeat_grads_errors():
    rng = np.random.default_rng(9)
    check_grads(rng, lambda a: a.repeat(2, 1, 3), lambda a: a.repeat(2, 1, 3), [(2, 3)])
    check_grads(rng, lambda a: a.tile((2,)), lambda a: a.tile((2,)), [(2, 3)])
    a = pf.ones(2)
    r = a.repeat(1)
    r[0] = 5  # always a copy
    assert a.tolist() == [1, 1]
    raises_like(lambda: pf.zeros(2, 3).repeat(2), lambda: torch.zeros(2, 3).repeat(2),
                "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    raises_like(lambda: pf.zeros(2, 3).repeat(-1, 2), lambda: torch.zeros(2, 3).repeat(-1, 2),
                "Trying to create tensor with negative dimension -2: [-2, 6]")
    raises_like(lambda: pf.zeros(2, 3).repeat(), lambda: torch.zeros(2, 3).repeat())


def test_repeat_interleave():
    rng = np.random.default_rng(10)
    p, t = make_pair(rng, (2, 3), "float32")
    assert_matches(p.repeat_interleave(2), t.repeat_interleave(2))
    assert_matches(pf.repeat_interleave(p, 3, dim=1), torch.repeat_interleave(t, 3, dim=1))
    assert_matches(p.repeat_interleave(0, 0), t.repeat_interleave(0, 0))
    reps = pf.tensor([1, 0, 2])
    treps = torch.tensor([1, 0, 2])
    assert_matches(p.repeat_interleave(reps, dim=1), t.repeat_interleave(treps, dim=1))
    assert_matches(p.repeat_interleave(pf.tensor([2, 1]), dim=0), t.repeat_interleave(torch.tensor([2, 1]), dim=0))
    assert_matches(p.repeat_interleave(pf.tensor(2)), t.repeat_interleave(torch.tensor(2)))
    assert_matches(pf.repeat_interleave(reps), torch.repeat_interleave(treps))
    assert_matches(pf.tensor(5).repeat_interleave(3), torch.tensor(5).repeat_interleave(3))
    check_grads(rng, lambda a: a.repeat_interleave(2, 0), lambda a: a.repeat_interleave(2, 0), [(2, 3)])
    check_grads(rng, lambda a: a.repeat_interleave(pf.tensor([3, 0, 1]), 1),
                lambda a: a.repeat_interleave(torch.tensor([3, 0, 1]), 1), [(2, 3)])
    raises_like(lambda: p.repeat_interleave(pf.tensor([1, 2, 3]), dim=0),
                lambda: t.repeat_interleave(torch.tensor([1, 2, 3]), dim=0),
                "repeats must have the same size as input along dim")
    raises_like(lambda: p.repeat_interleave(-1), lambda: t.repeat_interleave(-1), "repeats can not be negative")


# ---- movedim / unflatten / meshgrid ---------------------------------------------------------------------------------

def test_movedim_unflatten():
    rng = np.random.default_rng(11)
    p, t = make_pair(rng, (2, 3, 4), "float32")
    for src, dst in [(0, 2), (-1, 0), ((0, 1), (2, 0)), ((0, 1, 2), (1, 2, 0)), ((), ())]:
        assert_matches(pf.movedim(p, src, dst), torch.movedim(t, src, dst))
        assert_matches(p.moveaxis(src, dst), t.moveaxis(src, dst))
    raises_like(lambda: pf.movedim(p, (0, 1), (2,)), lambda: torch.movedim(t, (0, 1), (2,)),
                "movedim: Invalid source or destination dims: source ([0, 1] dims) should contain the same number "
                "of dims as destination ([2] dims)")
    raises_like(lambda: pf.movedim(p, (0, 0), (2, 1)), lambda: torch.movedim(t, (0, 0), (2, 1)),
                "movedim: repeated dim in `source` ([0, 0])")
    raises_like(lambda: pf.movedim(p, (0, 1), (2, 2)), lambda: torch.movedim(t, (0, 1), (2, 2)),
                "movedim: repeated dim in `destination` ([2, 2])")
    raises_like(lambda: pf.movedim(p, 3, 0), lambda: torch.movedim(t, 3, 0), "Dimension out of range")
    q, tq = make_pair(rng, (2, 12), "float32")
    for dim, sizes in [(1, (3, 4)), (-1, (-1, 4)), (0, (2, 1)), (1, (12,))]:
        assert_matches(q.unflatten(dim, sizes), tq.unflatten(dim, sizes))
        assert_matches(pf.unflatten(q, dim, sizes), torch.unflatten(tq, dim, sizes))
    raises_like(lambda: q.unflatten(1, (5, 4)), lambda: tq.unflatten(1, (5, 4)),
                "unflatten: Provided sizes [5, 4] don't multiply up to the size of dim 1 (12) in the input tensor")
    raises_like(lambda: q.unflatten(1, ()), lambda: tq.unflatten(1, ()), "unflatten: sizes must be non-empty")
    raises_like(lambda: q.unflatten(2, (3, 4)), lambda: tq.unflatten(2, (3, 4)), "Dimension out of range")
    check_grads(rng, lambda a: pf.movedim(a, 0, -1) * 2, lambda a: torch.movedim(a, 0, -1) * 2, [(2, 3, 4)])
    check_grads(rng, lambda a: a.unflatten(1, (2, 3)).sum(1), lambda a: a.unflatten(1, (2, 3)).sum(1), [(2, 6)])


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
    rng = np.random.default_rng(12)
    for shapes in [[(3,), (2,)], [(3,)], [(2,), (), (4,)], [(0,), (2,)]]:
        ps, ts = zip(*[make_pair(rng, s, "float32") for s in shapes])
        got = pf.meshgrid(*ps, indexing=indexing)
        expected = torch.meshgrid(*ts, indexing=indexing)
        same_parts(got, expected)
        same_parts(pf.meshgrid(list(ps), indexing=indexing), expected)
    check_grads(rng, lambda a, b: pf.stack(pf.meshgrid(a, b, indexing=indexing)) ** 2,
                lambda a, b: torch.stack(torch.meshgrid(a, b, indexing=indexing)) ** 2, [(3,), (2,)])


def test_meshgrid_errors_and_warning():
    x, tx = pf.arange(3), torch.arange(3)
    with pytest.warns(UserWarning, match="indexing argument"):
        same_parts(pf.meshgrid(x, x), torch.meshgrid(tx, tx, indexing="ij"))
    raises_like(lambda: pf.meshgrid(x, x, indexing="foo"), lambda: torch.meshgrid(tx, tx, indexing="foo"),
                'torch.meshgrid: indexing must be one of "xy" or "ij", but received: foo')
    raises_like(lambda: pf.meshgrid(x, x.float(), indexing="ij"),
                lambda: torch.meshgrid(tx, tx.float(), indexing="ij"),
                "meshgrid expects all tensors to have the same dtype")
    raises_like(lambda: pf.meshgrid(x, pf.zeros(2, 2, dtype=pf.int64), indexing="ij"),
                lambda: torch.meshgrid(tx, torch.zeros(2, 2, dtype=torch.int64), indexing="ij"),
                "Expected 0D or 1D tensor in the tensor list")
    raises_like(lambda: pf.meshgrid(indexing="ij"), lambda: torch.meshgrid(indexing="ij"),
                "meshgrid expects a non-empty TensorList")


# ---- sort / argsort / topk --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int64", "int8", "uint8", "bool"])
def test_sort_stable(seed, dtype):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=3, max_size=6)
    p, t = make_pair(rng, shape, dtype, low=-3, high=3)  # many ties
    dim = int(rng.integers(-max(len(shape), 1), max(len(shape), 1)))
    for descending in (False, True):
        got = pf.sort(p, dim=dim, descending=descending, stable=True)
        expected = torch.sort(t, dim=dim, descending=descending, stable=True)
        assert_matches(got.values, expected.values)
        assert_matches(got.indices, expected.indices)
        assert_matches(p.argsort(dim=dim, descending=descending, stable=True), t.argsort(dim=dim, descending=descending, stable=True))
        # Without stability the values and the permutation still agree.
        v, i = p.sort(dim=dim, descending=descending)
        assert_matches(v, expected.values)
        if len(shape):
            assert_matches(v, to_torch(p).gather(dim, to_torch(i)))


@pytest.mark.parametrize("seed", SEEDS)
def test_sort_nan_noncontiguous(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=3, max_size=6) or (5,)
    data = rng.uniform(-2, 2, size=shape)
    data[rng.random(shape) < 0.2] = np.nan
    t = torch.from_numpy(data).transpose(0, -1)
    p = pf.from_numpy(data.copy()).transpose(0, -1)
    for dim in range(-p.dim(), p.dim()):
        for descending in (False, True):
            got = p.sort(dim=dim, descending=descending, stable=True)
            expected = t.sort(dim=dim, descending=descending, stable=True)
            assert_matches(got.values, expected.values)
            assert_matches(got.indices, expected.indices)
    assert_matches(pf.msort(p), torch.msort(t))


def test_sort_edges_and_grads():
    assert_matches(pf.tensor(3.0).sort().values, torch.tensor(3.0).sort().values)
    assert_matches(pf.tensor(3.0).sort(0).indices, torch.tensor(3.0).sort(0).indices)
    assert_matches(pf.zeros(0, 3).sort(0).values, torch.zeros(0, 3).sort(0).values)
    assert_matches(pf.zeros(0, 3).sort(0).indices, torch.zeros(0, 3).sort(0).indices)
    raises_like(lambda: pf.tensor(3.0).sort(1), lambda: torch.tensor(3.0).sort(1), "Dimension out of range")
    r = pf.sort(pf.tensor([3, 1, 2]))
    assert type(r).__name__ == "sort" and r._fields == ("values", "indices")
    assert "plugflow.return_types.sort" in repr(r)
    rng = np.random.default_rng(13)
    check_grads(rng, lambda a: a.sort(1).values, lambda a: a.sort(1).values, [(3, 5)])
    check_grads(rng, lambda a: a.t().sort(0, descending=True)[0] ** 2,
                lambda a: a.t().sort(0, descending=True)[0] ** 2, [(3, 5)])
    check_grads(rng, lambda a: a.sort(0).values * 3, lambda a: a.sort(0).values * 3, [()])
    assert pf.zeros(3, requires_grad=True).sort().values.grad_fn.name() == "SortBackward0"
    assert not pf.zeros(3, requires_grad=True).sort().indices.requires_grad


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int8"])
def test_topk(seed, dtype):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=3, max_size=6) or (4,)
    # distinct values: topk's order among ties is unspecified
    n = int(np.prod(shape))
    data = (rng.permutation(n).reshape(shape) - n // 2).astype(dtype)
    p, t = pf.from_numpy(data.copy()), torch.from_numpy(data.copy())
    dim = int(rng.integers(-len(shape), len(shape)))
    for k in range(0, shape[dim] + 1):
        for largest in (True, False):
            got = p.topk(k, dim, largest)
            expected = t.topk(k, dim, largest)
            assert_matches(got.values, expected.values)
            assert_matches(got.indices, expected.indices)
            got = pf.topk(p.transpose(0, -1), k, dim=-1 - dim if dim >= 0 else -(len(shape) + dim) - 1,
                          largest=largest)
            expected = torch.topk(t.transpose(0, -1), k, dim=-1 - dim if dim >= 0 else -(len(shape) + dim) - 1,
                                  largest=largest)
            assert_matches(got.values, expected.values)


def test_topk_half_matches_float():
    rng = np.random.default_rng(18)
    data = rng.permutation(40).reshape(5, 8).astype("float16")
    got = pf.from_numpy(data.copy()).topk(3, 1)
    expected = torch.from_numpy(data.astype("float32")).topk(3, 1)
    assert_matches(got.values.float(), expected.values)
    assert_matches(got.indices, expected.indices)


def test_topk_nan_edges_errors_grads():
    x = [1.0, float("nan"), 3.0, -1.0]
    for largest in (True, False):
        got, expected = pf.tensor(x).topk(2, largest=largest), torch.tensor(x).topk(2, largest=largest)
        assert_matches(got.values, expected.values)
        assert_matches(got.indices, expected.indices)
    assert_matches(pf.tensor(3.0).topk(1).values, torch.tensor(3.0).topk(1).values)
    assert_matches(pf.tensor(3.0).topk(0).indices, torch.tensor(3.0).topk(0).indices)
    raises_like(lambda: pf.zeros(2, 3).topk(4), lambda: torch.zeros(2, 3).topk(4), "selected index k out of range")
    raises_like(lambda: pf.zeros(2, 3).topk(-1), lambda: torch.zeros(2, 3).topk(-1), "selected index k out of range")
    raises_like(lambda: pf.zeros(2, 3).topk(1, 2), lambda: torch.zeros(2, 3).topk(1, 2), "Dimension out of range")
    raises_like(lambda: pf.tensor([True, False]).topk(1), lambda: torch.tensor([True, False]).topk(1),
                "\"topk_cpu\" not implemented for 'Bool'")
    r = pf.tensor([1.0, 2.0]).topk(1)
    assert "plugflow.return_types.topk" in repr(r)
    rng = np.random.default_rng(14)
    check_grads(rng, lambda a: a.topk(2, 1).values, lambda a: a.topk(2, 1).values, [(3, 5)])
    check_grads(rng, lambda a: a.topk(3, 0, largest=False)[0].exp(), lambda a: a.topk(3, 0, largest=False)[0].exp(),
                [(4, 2)])


# ---- unique --------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", ["int64", "float32", "bool", "int8", "float64"])
def test_unique(seed, dtype):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=3, max_size=5)
    data = np.round(rng.uniform(-2, 3, size=shape)) if dtype != "bool" else rng.random(shape) < 0.5
    t = torch.from_numpy(data.astype(dtype))
    p = from_torch(t)
    for ri in (False, True):
        for rc in (False, True):
            got = pf.unique(p, return_inverse=ri, return_counts=rc)
            expected = torch.unique(t, return_inverse=ri, return_counts=rc)
            if not (ri or rc):
                got, expected = (got,), (expected,)
            same_parts(tuple(got), tuple(expected))
    got = p.unique(sorted=False)  # any order: compare as sets
    assert sorted(got.tolist()) == sorted(torch.unique(t, sorted=False).tolist())
    got = pf.unique_consecutive(p, return_inverse=True, return_counts=True)
    same_parts(got, torch.unique_consecutive(t, return_inverse=True, return_counts=True))
    if len(shape):
        dim = int(rng.integers(-len(shape), len(shape)))
        got = p.unique(dim=dim, return_inverse=True, return_counts=True)
        same_parts(got, torch.unique(t, dim=dim, return_inverse=True, return_counts=True))
        got = p.unique_consecutive(dim=dim, return_inverse=True, return_counts=True)
        same_parts(got, torch.unique_consecutive(t, dim=dim, return_inverse=True, return_counts=True))


def test_unique_edges():
    for shape in [(0,), (2, 0), (0, 3)]:
        same_parts(pf.zeros(shape).unique(return_inverse=True, return_counts=True),
                   torch.zeros(shape).unique(return_inverse=True, return_counts=True))
    same_parts(pf.zeros(0, 3).unique(dim=0, return_inverse=True, return_counts=True),
               torch.zeros(0, 3).unique(dim=0, return_inverse=True, return_counts=True))
    same_parts(pf.zeros(2, 0).unique(dim=1, return_inverse=True, return_counts=True),
               torch.zeros(2, 0).unique(dim=1, return_inverse=True, return_counts=True))
    raises_like(lambda: pf.zeros(2, 0).unique(dim=0), lambda: torch.zeros(2, 0).unique(dim=0),
                "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    raises_like(lambda: pf.zeros(2, 3).unique(dim=2), lambda: torch.zeros(2, 3).unique(dim=2),
                "Dimension out of range")
    same_parts(pf.tensor(5.0).unique(return_inverse=True, return_counts=True),
               torch.tensor(5.0).unique(return_inverse=True, return_counts=True))
    x = pf.tensor([[1, 2], [1, 2]])
    same_parts(x.unique(return_inverse=True), torch.tensor([[1, 2], [1, 2]]).unique(return_inverse=True))


# ---- pad ---------------------------------------------------------------------------------------------------------------

PAD_CASES = [
    ("constant", (2, 3), (1, 2)), ("constant", (2, 3), (1, 2, 0, 1)), ("constant", (2, 3, 4), (-1, 2, 1, -1, 2, 0)),
    ("constant", (2, 3), (-1, -2)), ("constant", (4,), (0, 0)), ("constant", (0, 3), (1, 1, 2, 0)),
    ("reflect", (2, 5), (2, 3)), ("reflect", (1, 2, 5), (4, 1)), ("reflect", (3, 4, 5), (1, 2, 3, 0)),
    ("reflect", (1, 2, 3, 4), (2, 1, 0, 2)), ("reflect", (2, 3, 3, 4), (1, 1, 2, 2, 0, 1)),
    ("reflect", (2, 4, 3, 3, 3), (2, 2, 1, 0, 1, 1)), ("reflect", (2, 5), (-1, 2)), ("reflect", (0, 2, 3), (1, 1)),
    ("replicate", (2, 5), (3, 4)), ("replicate", (1, 2, 3), (2, 0)), ("replicate", (2, 3, 4), (1, 2, 3, 4)),
    ("replicate", (1, 2, 3, 4), (5, 1, 0, 2)), ("replicate", (2, 3, 2, 2, 2), (1, 2, 2, 1, 1, 3)),
    ("replicate", (2, 5), (-2, 1)),
    ("circular", (1, 2, 5), (2, 3)), ("circular", (1, 2, 4, 5), (1, 2, 4, 0)),
    ("circular", (1, 1, 2, 3, 4), (1, 1, 2, 2, 1, 2)), ("circular", (2, 2, 5), (-1, 2)),
]


@pytest.mark.parametrize("mode,shape,pads", PAD_CASES)
def test_pad(mode, shape, pads):
    rng = np.random.default_rng(len(shape) * 7 + len(pads))
    p, t = make_pair(rng, shape, "float64")
    assert_matches(pf._C.pad(p, pads, mode=mode), F.pad(t, pads, mode=mode))
    if len(shape) >= 2:
        q, tq = noncontig_pair(rng, shape, "float32")
        assert_matches(pf._C.pad(q, list(pads), mode), F.pad(tq, list(pads), mode))
    if 0 not in shape:
        check_grads(rng, lambda a: pf._C.pad(a, pads, mode) ** 2, lambda a: F.pad(a, pads, mode=mode) ** 2, [shape])


def test_constant_pad_values_and_dtypes():
    rng = np.random.default_rng(15)
    for dtype in ["int32", "bool", "float16", "uint8"]:
        p, t = make_pair(rng, (2, 3), dtype)
        assert_matches(pf._C.pad(p, (1, 1), value=1), F.pad(t, (1, 1), value=1))
    p, t = make_pair(rng, (2, 3), "int64")
    assert_matches(pf._C.pad(p, (1, 1, 1, 0), value=2.5), F.pad(t, (1, 1, 1, 0), value=2.5))
    p, t = make_pair(rng, (2, 3), "float32")
    assert_matches(pf._C.pad(p, (1, 1), "constant", -1.5), F.pad(t, (1, 1), "constant", -1.5))
    assert_matches(pf.constant_pad_nd(p, (1, 2), 3), torch.constant_pad_nd(t, (1, 2), 3))


def test_pad_errors():
    a, ta = pf.zeros(2, 3), torch.zeros(2, 3)
    raises_like(lambda: pf._C.pad(a, (1, 2, 3)), lambda: F.pad(ta, (1, 2, 3)), "Padding length must be divisible by 2")
    raises_like(lambda: pf._C.pad(a, (1,) * 6), lambda: F.pad(ta, (1,) * 6), "Padding length too large")
    raises_like(lambda: pf._C.pad(a, (-2, -2)), lambda: F.pad(ta, (-2, -2)),
                "start (0) + length (-1) exceeds dimension size (1).")
    raises_like(lambda: pf._C.pad(a, (1, -4)), lambda: F.pad(ta, (1, -4)),
                "start (0) + length (-1) exceeds dimension size (3).")
    raises_like(lambda: pf._C.pad(a, (3, 1), "reflect"), lambda: F.pad(ta, (3, 1), mode="reflect"),
                "Padding size should be less than the corresponding input dimension")
    raises_like(lambda: pf._C.pad(a, (1, 1, 1, 1), "reflect"), lambda: F.pad(ta, (1, 1, 1, 1), mode="reflect"),
                "Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now")
    raises_like(lambda: pf._C.pad(a, (1, 1), "circular"), lambda: F.pad(ta, (1, 1), mode="circular"),
                "Invalid padding size, expected 0 but got 2")
    raises_like(lambda: pf._C.pad(a[None], (4, 1), "circular"), lambda: F.pad(ta[None], (4, 1), mode="circular"),
                "Padding value causes wrapping around more than once.")
    raises_like(lambda: pf._C.pad(a, (1, 1), "foo"), lambda: F.pad(ta, (1, 1), mode="foo"),
                "Unrecognised padding mode foo")
    raises_like(lambda: pf._C.pad(a, (1, 1), "reflect", 2.0), lambda: F.pad(ta, (1, 1), mode="reflect", value=2.0),
                "Padding mode \"reflect\" doesn't take in value argument")
    raises_like(lambda: pf._C.pad(a.int(), (1, 1), "reflect"), lambda: F.pad(ta.int(), (1, 1), mode="reflect"),
                "\"reflection_pad1d\" not implemented for 'Int'")
    raises_like(lambda: pf._C.pad(a.half(), (1, 1), "replicate"), lambda: F.pad(ta.half(), (1, 1), mode="replicate"),
                "\"replication_pad1d_cpu\" not implemented for 'Half'")
    raises_like(lambda: pf._C.pad(pf.zeros(2, 0), (1, 1), "reflect"),
                lambda: F.pad(torch.zeros(2, 0), (1, 1), mode="reflect"), "2D or 3D (batch mode) tensor expected")
    raises_like(lambda: pf._C.pad(pf.zeros(2, 2, 0), (1, 1), "replicate"),
                lambda: F.pad(torch.zeros(2, 2, 0), (1, 1), mode="replicate"), "non-zero dimensions for input")
    raises_like(lambda: pf._C.pad(a, (-2, -2), "replicate"), lambda: F.pad(ta, (-2, -2), mode="replicate"),
                "is too small")
    raises_like(lambda: pf._C.pad(a, (1.5, 1)), lambda: F.pad(ta, (1.5, 1)))


# ---- one_hot -------------------------------------------------------------------------------------------------------------

def test_one_hot():
    rng = np.random.default_rng(16)
    for shape in [(5,), (2, 3), ()]:
        data = rng.integers(0, 4, size=shape)
        p, t = pf.from_numpy(data.copy()), torch.from_numpy(data.copy())
        assert_matches(pf._C.one_hot(p), F.one_hot(t))
        assert_matches(pf._C.one_hot(p, 6), F.one_hot(t, 6))
    assert_matches(pf._C.one_hot(pf.zeros(0, dtype=pf.int64), 3), F.one_hot(torch.zeros(0, dtype=torch.int64), 3))
    raises_like(lambda: pf._C.one_hot(pf.tensor([1, 2]).int()), lambda: F.one_hot(torch.tensor([1, 2]).int()),
                "one_hot is only applicable to index tensor.")
    raises_like(lambda: pf._C.one_hot(pf.tensor([-1, 2])), lambda: F.one_hot(torch.tensor([-1, 2])),
                "Class values must be non-negative.")
    raises_like(lambda: pf._C.one_hot(pf.tensor([1, 2]), 2), lambda: F.one_hot(torch.tensor([1, 2]), 2),
                "Class values must be smaller than num_classes.")
    raises_like(lambda: pf._C.one_hot(pf.zeros(0, dtype=pf.int64)), lambda: F.one_hot(torch.zeros(0, dtype=torch.int64)),
                "Can not infer total number of classes from empty tensor.")


# ---- larger inputs: the multi-threaded paths -------------------------------------------------------------------------

def test_large_inputs_use_threads_correctly():
    rng = np.random.default_rng(17)
    p, t = make_pair(rng, (300, 257), "float32")
    assert_matches(p.sort(0).values, t.sort(0).values)
    assert_matches(p.sort(dim=1, stable=True).indices, t.sort(dim=1, stable=True).indices)
    assert_matches(p.topk(5, 0).values, t.topk(5, 0).values)
    assert_matches(p.flip(0, 1), t.flip(0, 1))
    assert_matches(p.tril(3), t.tril(3))
    assert_matches(pf._C.pad(p[None], (3, 3), "reflect"), F.pad(t[None], (3, 3), mode="reflect"))
    q, tq = p.t().contiguous().t(), t.t().contiguous().t()  # column-major
    assert_matches(pf.cat([p, q, p], 1), torch.cat([t, tq, t], 1))
    assert_matches(pf.cat([q, p], 0), torch.cat([tq, t], 0))


def test_nn_functional_exports():
    import plugflow.nn.functional as PF
    p, t = make_pair(np.random.default_rng(19), (1, 2, 4), "float32")
    assert_matches(PF.pad(p, (1, 2), mode="reflect"), F.pad(t, (1, 2), mode="reflect"))
    assert_matches(PF.pad(p, (1, 1), value=3.0), F.pad(t, (1, 1), value=3.0))
    assert_matches(PF.one_hot(pf.tensor([0, 2]), 4), F.one_hot(torch.tensor([0, 2]), 4))


# Found by the fuzzer: with some padding to add, every padded dim must come out non-empty (a
# crop-only pad may empty it); repeat_interleave along a dim of a 0-d tensor is an IndexError.
@pytest.mark.parametrize("code", [
    "F.pad(lib.zeros(0, 4, 6), (0, 3, 2, 3, 0, 0))",
    "F.pad(lib.zeros(2, 1, 1), (-1, 1, 0, -1, 0, -1))",
    "F.pad(lib.zeros(5, 1, 4), (2, 2, 0, -1, 2, -1))",
    "F.pad(lib.zeros(3, 5, 5, 0), (0, 0, 0, 3, 2, 1))",
    "F.pad(lib.zeros(2, 3), (-1, -2))",
    "F.pad(lib.zeros(2, 3), (-3, 0))",
    "lib.repeat_interleave(lib.tensor(3), 2, dim=0)",
    "lib.repeat_interleave(lib.tensor(3.0), lib.tensor([2]), 0)",
    "lib.repeat_interleave(lib.tensor(3), 2)",
    "F.pad(lib.zeros(6, dtype=lib.int64), (-1, -1), value=float('nan'))",  # a crop stores no value
    "F.pad(lib.zeros(6, dtype=lib.int64), (-1, 1), value=float('nan'))",
])
def test_pad_and_repeat_edge_cases_match_torch(code):
    assert_same_outcome(lambda lib: eval(code, {"lib": lib, "F": lib.nn.functional}))  # noqa: S307


@pytest.mark.parametrize("size, stride, offset, numel", [((2, 3), (1, 0), 0, 3), ((4,), (0,), 0, 3),
                                                        ((3, 3), (1, 1), 1, 6), ((2, 2), (2, 1), 0, 4)])
@pytest.mark.parametrize("base_kind", ["plain", "expanded"])
def test_as_strided_gradient_over_shared_elements_matches_torch(size, stride, offset, numel, base_kind):
    # Found by the fuzzer: view elements sharing a storage location add their gradients there
    # (it raised), and base elements sharing one split it, as PyTorch's as_strided_backward.
    grads = []
    for lib in (torch, pf):
        b = lib.arange(float(numel)).requires_grad_()
        base = b if base_kind == "plain" else b[:1].expand(numel)
        v = base.as_strided(size, stride, offset)
        (v * (lib.arange(float(v.numel())).view(size) + 1)).sum().backward()
        grads.append(b.grad)
    assert_matches(grads[1], grads[0])



@pytest.mark.parametrize("code", ["lib.tensor(3).size(0)", "lib.tensor(3).stride(-1)", "lib.unique(lib.tensor(3), dim=0)",
                                  "lib.unique_consecutive(lib.tensor(3.), dim=-1)", "lib.roll(lib.tensor(3.), 1, 0)",
                                  "lib.unbind(lib.tensor(3.), 0)", "lib.tensor(3).size(-1)",
                                  "lib.tensor(1.).unflatten(0, (1,))", "lib.mode(lib.tensor(True), 64)"])
def test_dims_of_a_0d_tensor_are_index_errors(code):
    # Found by the fuzzer: PyTorch's wrap_scalar=false ops refuse any dim of a 0-d tensor.
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307


def test_view_as_another_dtype_matches_torch():
    """view(dtype): the same bytes read as another dtype (PyTorch's rules for a different element
    size: a dense last dim, exactly divisible sizes, strides and offset), sharing memory, never
    requiring grad."""
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 8)).astype("float32")
    cases = [lambda t: t, lambda t: t[1:], lambda t: t[:, 2:6], lambda t: t[:, ::2], lambda t: t.t(), lambda t: t[0, 1:],
             lambda t: t[0, 0], lambda t: t[:, :3], lambda t: t.reshape(-1)[1:5]]
    for make in cases:
        for name in ("float32", "int32", "float64", "int64", "float16", "bfloat16", "int16", "uint8", "int8"):
            outcomes = []
            for lib in (torch, pf):
                t = make(lib.from_numpy(x.copy()))
                try:
                    v = t.view(getattr(lib, name))
                    outcomes.append((tuple(v.shape), v.stride(), v.float().tolist() if name != "float32" else v.tolist(),
                                     v.requires_grad))
                except RuntimeError as e:
                    outcomes.append(str(e))
            assert outcomes[0] == outcomes[1] or (
                # (NaN bit patterns: compare as strings)
                str(outcomes[0]) == str(outcomes[1])), (name, outcomes)
    a = pf.tensor([1.0, -2.0], requires_grad=True)
    v = a.view(pf.int32)
    assert not v.requires_grad and a.view(dtype=pf.float32).requires_grad is False
    b = pf.tensor([1.0, -2.0])
    b.view(pf.int32)[0] = 0  # writes through to b
    assert b.tolist() == [0.0, -2.0]
    with pytest.raises(TypeError, match="unexpected keyword"):
        b.view(2, sizes=1)
