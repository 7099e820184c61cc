"""torch.linalg against PyTorch 1.13 on fresh random inputs: the norms and products composed in
Python (plugflow/linalg.py) and the LAPACK-backed solvers and decompositions (CPU kernels), their
values (decompositions up to their sign freedom: reconstructions and invariants), float64
gradients, batched, non-contiguous and empty inputs, and the errors of bad input."""

import math

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_matches, assert_same_outcome, from_torch, seeded_rng, to_torch


@pytest.fixture
def rng():
    return seeded_rng()


def pair(rng, shape, dtype="float64"):
    t = torch.from_numpy(rng.uniform(-2, 2, size=shape)).to(getattr(torch, dtype))
    return from_torch(t), t


INF = math.inf


# ---------------------------------------------------------------- norms

@pytest.mark.parametrize("ord", [2, 1, 0, 3, 0.5, -1, INF, -INF])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (None, True), (1, False), ((0, 2), True), (-1, True)])
def test_vector_norm(rng, ord, dim, keepdim):
    x, t = pair(rng, (3, 4, 5))
    assert_matches(pf.linalg.vector_norm(x, ord, dim, keepdim), torch.linalg.vector_norm(t, ord, dim, keepdim))


def test_vector_norm_dtype_scalar_and_errors(rng):
    x, t = pair(rng, (3, 4), "float32")
    assert_matches(pf.linalg.vector_norm(x, dtype=pf.float64), torch.linalg.vector_norm(t, dtype=torch.float64))
    assert_matches(pf.linalg.vector_norm(x[:, ::2], 3), torch.linalg.vector_norm(t[:, ::2], 3))
    for ord in (2, 0, INF):
        assert_matches(pf.linalg.vector_norm(pf.tensor(-1.5), ord), torch.linalg.vector_norm(torch.tensor(-1.5), ord))
    for fn in (lambda L: L.linalg.vector_norm(L.ones(3, dtype=L.int64)),
               lambda L: L.linalg.vector_norm(L.ones(3), dtype=L.int64),
               lambda L: L.linalg.vector_norm(L.ones(3, dtype=L.float64), dtype=L.float32),
               lambda L: L.linalg.vector_norm(L.ones(0), INF),
               lambda L: L.linalg.vector_norm(L.ones(0), -1),
               lambda L: L.linalg.vector_norm(L.ones(0, 3), INF, dim=1),
               lambda L: L.linalg.vector_norm(L.ones(0, 3), 2),
               lambda L: L.linalg.vector_norm(L.ones(2, 3), 2, dim=(0, 0)),
               lambda L: L.linalg.vector_norm(L.ones(2, 3), 2, dim=2)):
        assert_same_outcome(fn)
    with pytest.raises(TypeError):
        pf.linalg.vector_norm(x, "fro")


def test_vector_norm_grad(rng):
    for ord in (2, 1, 3, INF):
        x, t = pair(rng, (3, 4))
        x.requires_grad_(True)
        t.requires_grad_(True)
        pf.linalg.vector_norm(x, ord, 1).sum().backward()
        torch.linalg.vector_norm(t, ord, 1).sum().backward()
        assert_matches(x.grad, t.grad)


@pytest.mark.parametrize("ord", ["fro", 1, -1, INF, -INF])
@pytest.mark.parametrize("dim,keepdim", [((-2, -1), False), ((-1, -2), True), ((0, 2), False), ((2, 0), True)])
def test_matrix_norm(rng, ord, dim, keepdim):
    x, t = pair(rng, (3, 4, 5))
    assert_matches(pf.linalg.matrix_norm(x, ord, dim, keepdim), torch.linalg.matrix_norm(t, ord, dim, keepdim))


def test_matrix_norm_errors():
    for fn in (lambda L: L.linalg.matrix_norm(L.ones(3)),
               lambda L: L.linalg.matrix_norm(L.ones(3, 3), 3),
               lambda L: L.linalg.matrix_norm(L.ones(3, 3), "abc"),
               lambda L: L.linalg.matrix_norm(L.ones(3, 3), dim=(0, 0)),
               lambda L: L.linalg.matrix_norm(L.ones(3, 3), dim=(0,)),
               lambda L: L.linalg.matrix_norm(L.ones(3, 3, dtype=L.int64)),
               lambda L: L.linalg.matrix_norm(L.ones(3, 3), dtype=L.float64)):
        assert_same_outcome(fn)


@pytest.mark.parametrize("shape,ord,dim", [((5,), None, None), ((3, 4), None, None), ((2, 3, 4), None, None),
                                           ((5,), 3, None), ((3, 4), "fro", None), ((3, 4), 1, None),
                                           ((3, 4), INF, None), ((2, 3, 4), 1, (0, 2)), ((2, 3, 4), 0, 1),
                                           ((2, 3, 4), None, (1, 2)), ((2, 3, 4), "fro", (0, 1))])
def test_norm(rng, shape, ord, dim):
    x, t = pair(rng, shape)
    assert_matches(pf.linalg.norm(x, ord, dim), torch.linalg.norm(t, ord, dim))
    assert_matches(pf.linalg.norm(x, ord, dim, True), torch.linalg.norm(t, ord, dim, True))


def test_norm_errors():
    for fn in (lambda L: L.linalg.norm(L.ones(2, 2, 2), 2),
               lambda L: L.linalg.norm(L.ones(3, 4), "fro", dim=1),
               lambda L: L.linalg.norm(L.ones(3), "fro"),
               lambda L: L.linalg.norm(L.ones(2, 2, 2), "fro"),
               lambda L: L.linalg.norm(L.ones(3, 4), dim=(0, 1, 1)),
               lambda L: L.linalg.norm(L.ones(3, dtype=L.int64))):
        assert_same_outcome(fn)


# ---------------------------------------------------------------- products and views

def test_products_and_views(rng):
    a, ta = pair(rng, (2, 3, 4))
    b, tb = pair(rng, (4, 5))
    assert_matches(pf.linalg.matmul(a, b), torch.linalg.matmul(ta, tb))
    assert_matches(pf.linalg.diagonal(a), torch.linalg.diagonal(ta))
    assert_matches(pf.linalg.diagonal(a, offset=1, dim1=0, dim2=2), torch.linalg.diagonal(ta, offset=1, dim1=0, dim2=2))
    u, tu = pair(rng, (1, 4, 3))
    v, tv = pair(rng, (2, 4, 3))
    assert_matches(pf.linalg.cross(u, v), torch.linalg.cross(tu, tv))
    assert_matches(pf.linalg.cross(v, v.flip(0), dim=2), torch.linalg.cross(tv, tv.flip(0), dim=2))
    assert_matches(pf.linalg.vecdot(u, v), torch.linalg.vecdot(tu, tv))
    assert_matches(pf.linalg.vecdot(u, v, dim=-2), torch.linalg.vecdot(tu, tv, dim=-2))
    assert_same_outcome(lambda L: L.linalg.vecdot(L.ones(3), L.ones(3, dtype=L.float64)))
    assert_same_outcome(lambda L: L.linalg.cross(L.ones(3), L.ones(2, 3)))
    assert_same_outcome(lambda L: L.linalg.cross(L.ones(2, 4), L.ones(2, 4)))


@pytest.mark.parametrize("shapes", [[(3,), (3, 4), (4,)], [(2, 3), (3, 4)], [(5, 2), (2, 6), (6, 3)],
                                    [(2, 6), (6, 5), (5, 3)], [(3,), (3, 2), (2, 4), (4, 2)], [(3,), (3,)]])
def test_multi_dot(rng, shapes):
    pairs = [pair(rng, s) for s in shapes]
    xs = [p[0].requires_grad_(True) for p in pairs]
    ts = [p[1].requires_grad_(True) for p in pairs]
    r, e = pf.linalg.multi_dot(xs), torch.linalg.multi_dot(ts)
    assert_matches(r, e.detach())
    r.sum().backward()
    e.sum().backward()
    for x, t in zip(xs, ts):
        assert_matches(x.grad, t.grad)


def test_multi_dot_errors():
    for fn in (lambda L: L.linalg.multi_dot([L.ones(3, 4)]),
               lambda L: L.linalg.multi_dot([L.ones(3, 4), L.ones(3, 4)]),
               lambda L: L.linalg.multi_dot([L.ones(2, 2, 2), L.ones(2, 2)]),
               lambda L: L.linalg.multi_dot([L.ones(2, 2), L.ones(2, 2, 2)]),
               lambda L: L.linalg.multi_dot([L.ones(4, 3), L.ones(3, 4, dtype=L.float64)]),
               lambda L: L.linalg.multi_dot([L.ones(3, 4), L.ones(4), L.ones(4, 3)])):
        assert_same_outcome(fn)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 6, 7])
def test_matrix_power(rng, n):
    a, t = pair(rng, (2, 3, 3))
    a = a / 2
    t = t / 2
    assert_matches(pf.linalg.matrix_power(a, n), torch.linalg.matrix_power(t, n))
    if n:
        a.requires_grad_(True)
        t.requires_grad_(True)
        pf.linalg.matrix_power(a, n).sum().backward()
        torch.linalg.matrix_power(t, n).sum().backward()
        assert_matches(a.grad, t.grad)


def test_matrix_power_errors():
    for fn in (lambda L: L.linalg.matrix_power(L.ones(3, 4), 2),
               lambda L: L.linalg.matrix_power(L.ones(3), 2)):
        assert_same_outcome(fn)
