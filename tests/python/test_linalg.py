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


# ---------------------------------------------------------------- LAPACK solvers and decompositions

def conditioned(rng, shape, symmetric=False, dtype="float64"):
    """Random (*, m, n) matrices U diag(s) V^T with random orthogonal U, V and well separated
    singular values s in [1, 3] (symmetric: U diag(±s) U^T, eigenvalues well apart as well), as
    a plugflow and a torch tensor."""
    *batch, m, n = shape
    k = min(m, n)
    count = int(np.prod(batch, dtype=np.int64))
    out = np.empty((count, m, n))
    for i in range(count):
        u = np.linalg.qr(rng.standard_normal((m, m)))[0]
        v = u if symmetric else np.linalg.qr(rng.standard_normal((n, n)))[0]
        s = np.linspace(3, 1, k) + rng.uniform(0, 0.5 / max(k, 1), k)
        if symmetric:
            s = s * rng.choice([-1, 1], k)
        out[i] = (u[:, :k] * s) @ v[:, :k].T
    t = torch.from_numpy(out.reshape(shape)).to(getattr(torch, dtype))
    return from_torch(t), t


def positive_definite(rng, shape, dtype="float64"):
    a, t = conditioned(rng, shape, symmetric=True, dtype=dtype)
    return from_torch(t @ t.mT), t @ t.mT


def gradients(fn, x, t, *pairs):
    """d sum(fn(x, ...)) / dx for plugflow and torch (fn takes the library first; pairs are further
    (plugflow, torch) arguments)."""
    x = x.detach().requires_grad_(True)
    t = t.detach().requires_grad_(True)
    fn(pf, x, *[p[0] for p in pairs]).sum().backward()
    fn(torch, t, *[p[1] for p in pairs]).sum().backward()
    return x.grad, t.grad


def tolerance(dtype):
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == "float32" else {"rtol": 1e-9, "atol": 1e-9}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_inv_solve_values(rng, dtype):
    a, ta = conditioned(rng, (2, 3, 4, 4), dtype=dtype)
    tol = tolerance(dtype)
    assert_matches(pf.linalg.inv(a), torch.linalg.inv(ta), **tol)
    assert_matches(pf.inverse(a[:, 1]), torch.inverse(ta[:, 1]), **tol)
    assert_matches(a.inverse(), ta.inverse(), **tol)
    assert_matches(pf.linalg.inv(a.transpose(-2, -1)), torch.linalg.inv(ta.mT), **tol)  # non-contiguous
    b, tb = pair(rng, (3, 4, 2), dtype)
    assert_matches(pf.linalg.solve(a, b), torch.linalg.solve(ta, tb), **tol)  # batch broadcast
    v, tv = pair(rng, (2, 3, 4), dtype)
    assert_matches(pf.linalg.solve(a, v), torch.linalg.solve(ta, tv), **tol)  # a batch of vectors
    assert_matches(pf.linalg.solve(a[0, 0], v[0, 0]), torch.linalg.solve(ta[0, 0], tv[0, 0]), **tol)
    c, tc = pair(rng, (5, 4), dtype)
    assert_matches(pf.linalg.solve(a, c, left=False), torch.linalg.solve(ta, tc, left=False), **tol)
    inverse, info = pf.linalg.inv_ex(a)
    assert_matches(inverse, torch.linalg.inv_ex(ta).inverse, **tol)
    assert_matches(info, torch.linalg.inv_ex(ta).info)
    result, info = pf.linalg.solve_ex(a, b)
    assert_matches(result, torch.linalg.solve_ex(ta, tb).result, **tol)
    assert_matches(info, torch.linalg.solve_ex(ta, tb).info)


def test_inv_solve_gradients(rng):
    a, ta = conditioned(rng, (2, 3, 3))
    assert_matches(*gradients(lambda L, x: L.linalg.inv(x) * x[..., :1, :], a, ta))
    assert_matches(*gradients(lambda L, x: L.linalg.matrix_power(x, -2), a, ta))
    b, tb = pair(rng, (2, 3, 2))
    assert_matches(*gradients(lambda L, x, y: L.linalg.solve(x, y) * y, a, ta, (b, tb)))
    assert_matches(*gradients(lambda L, y, x: L.linalg.solve(x, y) * y, b, tb, (a, ta)))  # the right-hand side's
    assert_matches(*gradients(lambda L, x: L.linalg.solve(x, x[..., 0]), a, ta))


def same_outcome(fn):
    """assert_same_outcome, where torch's LinAlgError (its class is named _LinAlgError) must be
    plugflow's, with the same message."""
    try:
        fn(torch)
    except torch.linalg.LinAlgError as e:
        with pytest.raises(pf.linalg.LinAlgError) as got:
            fn(pf)
        assert str(got.value) == str(e)
        return
    except Exception:  # noqa: BLE001 - compared by assert_same_outcome
        pass
    assert_same_outcome(fn)


def test_singular_and_bad_input_errors():
    singular = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]]
    for fn in (lambda L: L.linalg.inv(L.tensor(singular)),
               lambda L: L.linalg.inv(L.stack([L.eye(3), L.tensor(singular)])),
               lambda L: L.linalg.inv(L.ones(3, 4)),
               lambda L: L.linalg.inv(L.ones(3)),
               lambda L: L.linalg.inv(L.ones(3, 3, dtype=L.int64)),
               lambda L: L.linalg.inv(L.ones(3, 3, dtype=L.float16)),
               lambda L: L.linalg.solve(L.tensor(singular), L.ones(3)),
               lambda L: L.linalg.solve(L.eye(3), L.ones(4)),
               lambda L: L.linalg.solve(L.eye(3), L.ones(2, 4, 1)),
               lambda L: L.linalg.solve(L.eye(3), L.ones(3, dtype=L.float64)),
               lambda L: L.linalg.cholesky(-L.eye(3)),
               lambda L: L.linalg.cholesky(L.stack([L.eye(3), L.tensor(singular)])),
               lambda L: L.linalg.cholesky(L.ones(3, 4)),
               lambda L: L.linalg.det(L.ones(3, 4)),
               lambda L: L.linalg.det(L.ones(3, 3, dtype=L.int64)),
               lambda L: L.linalg.slogdet(L.tensor(singular)),
               lambda L: L.linalg.det(L.tensor(singular)),
               lambda L: L.logdet(-L.eye(3, dtype=L.float64)),
               lambda L: L.linalg.qr(L.ones(3, 3), mode="x"),
               lambda L: L.linalg.qr(L.ones(3)),
               lambda L: L.linalg.svd(L.ones(3)),
               lambda L: L.linalg.eigh(L.ones(3, 4)),
               lambda L: L.linalg.eigh(L.eye(3), UPLO="X"),
               lambda L: L.linalg.inv_ex(L.stack([L.eye(3), L.tensor(singular)])).info,
               lambda L: L.linalg.cholesky_ex(L.stack([L.eye(3), -L.eye(3)])).info,
               lambda L: L.linalg.matrix_rank(L.ones(3))):
        same_outcome(fn)
    with pytest.raises(pf.linalg.LinAlgError, match=r"\(Batch element 1\): The diagonal element 2 is zero"):
        pf.linalg.inv(pf.stack([pf.eye(3), pf.tensor(singular)]))
    with pytest.raises(pf.linalg.LinAlgError, match="leading minor of order 1 is not positive-definite"):
        pf.linalg.cholesky(-pf.eye(3))
    assert issubclass(pf.linalg.LinAlgError, RuntimeError)


@pytest.mark.parametrize("fn", [
    lambda L, x: L.linalg.inv(x), lambda L, x: L.linalg.inv_ex(x).info, lambda L, x: L.linalg.det(x),
    lambda L, x: L.linalg.slogdet(x), lambda L, x: L.linalg.cholesky(x), lambda L, x: L.linalg.eigvalsh(x),
    lambda L, x: L.linalg.solve(x, x[..., 0]), lambda L, x: L.linalg.svdvals(x), lambda L, x: L.linalg.qr(x).R,
    lambda L, x: L.linalg.svd(x).U, lambda L, x: L.linalg.svd(x, full_matrices=False).Vh,
    lambda L, x: L.linalg.qr(x, "complete").Q, lambda L, x: L.linalg.matrix_rank(x)])
@pytest.mark.parametrize("shape", [(0, 3, 3), (2, 0, 0), (0, 0)])
def test_empty(fn, shape):
    assert_same_outcome(lambda L: fn(L, L.ones(shape)))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(rng, upper):
    a, ta = positive_definite(rng, (3, 4, 4))
    assert_matches(pf.linalg.cholesky(a, upper=upper), torch.linalg.cholesky(ta, upper=upper))
    L, info = pf.linalg.cholesky_ex(a[:, ::2, ::2], upper=upper)  # non-contiguous
    assert_matches(L, torch.linalg.cholesky(ta[:, ::2, ::2], upper=upper))
    assert_matches(info, torch.linalg.cholesky_ex(ta, upper=upper).info)
    w = rng.standard_normal((4, 4))
    assert_matches(*gradients(lambda L, x: L.linalg.cholesky(x, upper=upper) * L.from_numpy(w), a, ta))
    b, tb = pair(rng, (3, 4, 2))
    factor, tfactor = pf.linalg.cholesky(a, upper=upper), torch.linalg.cholesky(ta, upper=upper)
    assert_matches(pf.cholesky_solve(b, factor, upper), torch.cholesky_solve(tb, tfactor, upper))
    assert_matches(pf.cholesky_inverse(factor[0], upper), torch.cholesky_inverse(tfactor[0], upper))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_det_slogdet_logdet(rng, dtype):
    a, ta = conditioned(rng, (2, 3, 4, 4), dtype=dtype)
    tol = tolerance(dtype)
    assert_matches(pf.linalg.det(a), torch.linalg.det(ta), **tol)
    assert_matches(a.det(), ta.det(), **tol)
    sign, logabsdet = pf.linalg.slogdet(a)
    assert_matches(sign, torch.linalg.slogdet(ta).sign)
    assert_matches(logabsdet, torch.linalg.slogdet(ta).logabsdet, **tol)
    assert_matches(pf.slogdet(a)[1], torch.slogdet(ta)[1], **tol)
    assert_matches(pf.logdet(a), torch.logdet(ta), **tol)  # NaN where det < 0
    if dtype == "float64":
        assert_matches(*gradients(lambda L, x: L.linalg.det(x), a, ta))
        assert_matches(*gradients(lambda L, x: L.linalg.slogdet(x).logabsdet, a, ta))
        p, tp = positive_definite(rng, (2, 3, 3))
        assert_matches(*gradients(lambda L, x: L.logdet(x), p, tp))


def check_orthonormal_columns(q, tol):
    k = q.shape[-1]
    assert_matches(q.transpose(-2, -1) @ q, torch.eye(k, dtype=torch.float64 if q.dtype is pf.float64
                                                       else torch.float32).expand(*q.shape[:-2], k, k), **tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(2, 5, 3), (2, 3, 5), (4, 4)])
def test_qr(rng, dtype, shape):
    a, ta = pair(rng, shape, dtype)
    tol = tolerance(dtype)
    for mode in ("reduced", "complete"):
        q, r = pf.linalg.qr(a, mode)
        tq, tr = torch.linalg.qr(ta, mode)
        assert tuple(q.shape) == tuple(tq.shape) and tuple(r.shape) == tuple(tr.shape)
        assert_matches(q @ r, ta, **tol)  # the reconstruction, then the invariants of the factors
        check_orthonormal_columns(q, tol)
        assert_matches(r, torch.triu(to_torch(r)))
        assert_matches(r.abs(), tr.abs(), **tol)
    q, r = pf.linalg.qr(a.transpose(-2, -1), "r")  # non-contiguous
    assert tuple(q.shape) == (0,)
    assert_matches(r.abs(), torch.linalg.qr(ta.mT, "r").R.abs(), **tol)


@pytest.mark.parametrize("shape", [(2, 5, 3), (2, 3, 5), (4, 4)])
def test_qr_gradients(rng, shape):
    a, ta = conditioned(rng, shape)
    m, n = shape[-2:]
    wq, wr = rng.standard_normal((m, min(m, n))), rng.standard_normal((min(m, n), n))

    def loss(L, x):  # invariant under the factors' sign freedom (Q's columns with R's rows)
        q, r = L.linalg.qr(x)
        return (q * q * L.from_numpy(wq)).sum() + (r * r * L.from_numpy(wr)).sum() + (q @ r).sum()
    assert_matches(*gradients(loss, a, ta))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(2, 5, 3), (2, 3, 5), (4, 4)])
def test_svd(rng, dtype, shape):
    a, ta = conditioned(rng, shape, dtype=dtype)
    tol = tolerance(dtype)
    for full in (False, True):
        u, s, vh = pf.linalg.svd(a, full_matrices=full)
        tu, ts, tvh = torch.linalg.svd(ta, full_matrices=full)
        assert [tuple(x.shape) for x in (u, s, vh)] == [tuple(x.shape) for x in (tu, ts, tvh)]
        assert_matches(s, ts, **tol)
        k = s.shape[-1]
        assert_matches((u[..., :k] * s.unsqueeze(-2)) @ vh[..., :k, :], ta, **tol)
        check_orthonormal_columns(u, tol)
        check_orthonormal_columns(vh.transpose(-2, -1), tol)
    assert_matches(pf.linalg.svdvals(a.transpose(-2, -1)), torch.linalg.svdvals(ta.mT), **tol)
    for ord in ("nuc", 2, -2):
        assert_matches(pf.linalg.matrix_norm(a, ord), torch.linalg.matrix_norm(ta, ord), **tol)
    assert_matches(pf.linalg.norm(a[0], 2), torch.linalg.norm(ta[0], 2), **tol)
    assert_matches(pf.linalg.pinv(a), torch.linalg.pinv(ta), **tol)
    assert_matches(pf.linalg.matrix_rank(a), torch.linalg.matrix_rank(ta))


@pytest.mark.parametrize("shape", [(2, 5, 3), (2, 3, 5), (4, 4)])
def test_svd_gradients(rng, shape):
    a, ta = conditioned(rng, shape)
    m, n = shape[-2:]
    k = min(m, n)
    wu, ws, wv = rng.standard_normal((m, k)), rng.standard_normal(k), rng.standard_normal((k, n))

    def loss(L, x):  # invariant under the sign freedom of U's columns with Vh's rows
        u, s, vh = L.linalg.svd(x, full_matrices=False)
        return (u * u * L.from_numpy(wu)).sum() + (s * L.from_numpy(ws)).sum() + (vh * vh * L.from_numpy(wv)).sum()
    assert_matches(*gradients(loss, a, ta))
    assert_matches(*gradients(lambda L, x: L.linalg.svdvals(x), a, ta))
    assert_matches(*gradients(lambda L, x: L.linalg.pinv(x), a, ta))
    assert_matches(*gradients(lambda L, x: L.linalg.matrix_norm(x, "nuc"), a, ta))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(rng, dtype, uplo):
    a, ta = conditioned(rng, (3, 5, 5), symmetric=True, dtype=dtype)
    tol = tolerance(dtype)
    noise = pf.from_numpy(rng.standard_normal((5, 5))).to(a.dtype)
    # only the UPLO triangle is read: garbage in the other one changes nothing
    skewed = a + (noise.triu(1) if uplo == "L" else noise.tril(-1))
    values, vectors = pf.linalg.eigh(skewed, UPLO=uplo)
    assert_matches(values, torch.linalg.eigvalsh(ta), **tol)
    assert_matches((vectors * values.unsqueeze(-2)) @ vectors.transpose(-2, -1), ta, **tol)
    check_orthonormal_columns(vectors, tol)
    assert_matches(pf.linalg.eigvalsh(a.transpose(-2, -1), UPLO=uplo), torch.linalg.eigvalsh(ta.mT, UPLO=uplo), **tol)
    assert_matches(pf.linalg.pinv(a, hermitian=True), torch.linalg.pinv(ta, hermitian=True), **tol)
    assert_matches(pf.linalg.matrix_rank(a, hermitian=True), torch.linalg.matrix_rank(ta, hermitian=True))


def test_eigh_gradients(rng):
    a, ta = conditioned(rng, (2, 4, 4), symmetric=True)
    wv, wl = rng.standard_normal((4, 4)), rng.standard_normal(4)

    def loss(L, x):  # invariant under the eigenvectors' signs
        values, vectors = L.linalg.eigh(x)
        return (vectors * vectors * L.from_numpy(wv)).sum() + (values * L.from_numpy(wl)).sum()
    assert_matches(*gradients(loss, a, ta))
    assert_matches(*gradients(lambda L, x: L.linalg.eigvalsh(x), a, ta))


def test_rank_deficient(rng):
    a, ta = pair(rng, (3, 5, 2))
    low, tlow = from_torch(ta @ ta.mT), ta @ ta.mT  # rank 2 of 5
    assert_matches(pf.linalg.matrix_rank(low), torch.linalg.matrix_rank(tlow))
    assert_matches(pf.linalg.matrix_rank(low, atol=1.0, rtol=0.5), torch.linalg.matrix_rank(tlow, atol=1.0, rtol=0.5))
    assert_matches(pf.linalg.pinv(low), torch.linalg.pinv(tlow), rtol=1e-7, atol=1e-7)
    assert_matches(pf.linalg.slogdet(pf.zeros(2, 3, 3)).logabsdet, torch.linalg.slogdet(torch.zeros(2, 3, 3)).logabsdet)


def test_out_and_overloads(rng):
    a, ta = conditioned(rng, (2, 4, 3))
    out = (pf.empty(0, dtype=pf.float64), pf.empty(0, dtype=pf.float64))
    q, r = pf.linalg.qr(a, out=out)
    assert q is out[0] and r is out[1]
    assert_matches(q @ r, ta)
    square, tsquare = conditioned(rng, (3, 3))
    result = pf.empty(0, dtype=pf.float64)
    assert pf.linalg.inv(square, out=result) is result
    assert_matches(result, torch.linalg.inv(tsquare))
    assert_same_outcome(lambda L: L.linalg.inv(L.eye(3), out=L.empty(0, dtype=L.float64)))
    assert_matches(pf.linalg.pinv(a, 0.4), torch.linalg.pinv(ta, 0.4))
    assert_matches(pf.pinverse(a), torch.pinverse(ta))
    for ord in ("nuc", 2, -2):
        assert_matches(pf.linalg.matrix_norm(a, ord, dim=(0, 2), keepdim=True),
                       torch.linalg.matrix_norm(ta, ord, dim=(0, 2), keepdim=True))
        assert_matches(pf.linalg.matrix_norm(a, ord, dim=(2, 1)), torch.linalg.matrix_norm(ta, ord, dim=(2, 1)))


# ---------------------------------------------------------------- triangular solves

def triangular_operand(rng, shape, dtype="float64"):
    """Random (*, n, n) matrices whose triangles are both well conditioned (diagonal ±[1, 2],
    off-diagonal entries small): the solvers read one of them, the test checks the other is ignored."""
    n = shape[-1]
    data = rng.uniform(-1, 1, size=shape) / max(n, 1) ** 0.5
    diagonal = rng.uniform(1, 2, size=shape[:-1]) * rng.choice([-1, 1], size=shape[:-1])
    data[..., np.arange(n), np.arange(n)] = diagonal
    t = torch.from_numpy(data).to(getattr(torch, dtype))
    return from_torch(t), t


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("unitriangular", [False, True])
def test_solve_triangular(rng, dtype, upper, left, unitriangular):
    a, ta = triangular_operand(rng, (2, 1, 5, 5), dtype)
    b, tb = pair(rng, (3, 5, 4) if left else (3, 4, 5), dtype)  # batch dims broadcast
    kwargs = {"upper": upper, "left": left, "unitriangular": unitriangular}
    tol = tolerance(dtype)
    assert_matches(pf.linalg.solve_triangular(a, b, **kwargs), torch.linalg.solve_triangular(ta, tb, **kwargs), **tol)
    # non-contiguous operands
    assert_matches(pf.linalg.solve_triangular(a.transpose(-2, -1), b[..., ::2] if left else b[..., ::2, :], **kwargs),
                   torch.linalg.solve_triangular(ta.mT, tb[..., ::2] if left else tb[..., ::2, :], **kwargs), **tol)
    solution, coefficient = pf.triangular_solve(b if left else b.transpose(-2, -1), a, upper, not left, unitriangular)
    expected = torch.triangular_solve(tb if left else tb.mT, ta, upper, not left, unitriangular)
    assert_matches(solution, expected.solution, **tol)
    assert_matches(coefficient, expected.cloned_coefficient)


def test_solve_triangular_large(rng):
    a, ta = triangular_operand(rng, (300, 300))
    b, tb = pair(rng, (300, 20))
    assert_matches(pf.linalg.solve_triangular(a, b, upper=True), torch.linalg.solve_triangular(ta, tb, upper=True),
                   rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("upper,left,unitriangular", [(False, True, False), (True, False, False), (True, True, True),
                                                      (False, False, True)])
def test_solve_triangular_gradients(rng, upper, left, unitriangular):
    a, ta = triangular_operand(rng, (2, 3, 3))
    b, tb = pair(rng, (2, 3, 2) if left else (2, 2, 3))
    kwargs = {"upper": upper, "left": left, "unitriangular": unitriangular}
    fn = lambda L, x, y: L.linalg.solve_triangular(x, y, **kwargs) * y  # noqa: E731
    assert_matches(*gradients(fn, a, ta, (b, tb)))
    assert_matches(*gradients(lambda L, y, x: L.linalg.solve_triangular(x, y, **kwargs) * y, b, tb, (a, ta)))
    c, tc = pair(rng, (3, 2))  # triangular_solve's transpose in place of left
    assert_matches(*gradients(lambda L, x, y: L.triangular_solve(y, x, upper, not left, unitriangular)[0] * y +
                              L.triangular_solve(y, x, upper)[1].sum(), a, ta, (c, tc)))


def test_solve_triangular_errors_and_empty():
    for fn in (lambda L: L.linalg.solve_triangular(L.ones(3, 3), L.ones(4, 2), upper=True),
               lambda L: L.linalg.solve_triangular(L.ones(3, 3), L.ones(2, 4), upper=True, left=False),
               lambda L: L.linalg.solve_triangular(L.ones(3, 4), L.ones(3, 2), upper=True),
               lambda L: L.linalg.solve_triangular(L.ones(3), L.ones(3, 2), upper=True),
               lambda L: L.linalg.solve_triangular(L.eye(3), L.ones(3), upper=True),
               lambda L: L.linalg.solve_triangular(L.eye(3, dtype=L.int64), L.ones(3, 2, dtype=L.int64), upper=True),
               lambda L: L.linalg.solve_triangular(L.eye(3, dtype=L.float16), L.ones(3, 2, dtype=L.float16),
                                                   upper=True),
               lambda L: L.linalg.solve_triangular(L.eye(3, dtype=L.float64), L.ones(3, 2), upper=True),  # promotes
               lambda L: L.linalg.solve_triangular(L.zeros(3, 3), L.ones(3, 2), upper=True),  # inf / NaN, no error
               lambda L: L.linalg.solve_triangular(L.ones(2, 3, 3), L.ones(3, 3, 2), upper=False),
               lambda L: L.linalg.solve_triangular(L.ones(0, 3, 3), L.ones(3, 2), upper=True),
               lambda L: L.linalg.solve_triangular(L.ones(0, 0), L.ones(0, 2), upper=True),
               lambda L: L.linalg.solve_triangular(L.ones(3, 3), L.ones(3, 0), upper=True),
               lambda L: L.triangular_solve(L.ones(3), L.eye(3)),
               lambda L: L.triangular_solve(L.ones(3, 2), L.ones(3)),
               lambda L: L.triangular_solve(L.ones(4, 2), L.eye(3)),
               lambda L: L.triangular_solve(L.ones(3, 2), L.ones(3, 4)),
               lambda L: L.triangular_solve(L.ones(3, 2), L.eye(3, dtype=L.float64)),
               lambda L: L.triangular_solve(L.ones(2, 3, 2), L.eye(3))):
        assert_same_outcome(fn)


# ---------------------------------------------------------------- composites: matrix_exp, cond, tensorinv, tensorsolve

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("scale", [0.01, 1, 6, 40])
def test_matrix_exp(rng, dtype, scale):
    # 1-norms from far below the Padé approximant's bound to several squarings above it
    a, ta = pair(rng, (3, 5, 5), dtype)
    a, ta = a * (scale / 5), ta * (scale / 5)
    expected = torch.linalg.matrix_exp(ta)
    bound = expected.abs().amax().item()
    rtol = 2e-5 if dtype == "float32" else 1e-12
    assert_matches(pf.linalg.matrix_exp(a), expected, rtol=rtol * 10, atol=rtol * bound)
    assert_matches(pf.matrix_exp(a.transpose(-2, -1)), torch.matrix_exp(ta.mT), rtol=rtol * 10, atol=rtol * bound)
    assert_matches(a[0].matrix_exp(), ta[0].matrix_exp(), rtol=rtol * 10, atol=rtol * bound)


def test_matrix_exp_gradients_and_errors(rng):
    for scale in (0.1, 2, 20):
        a, ta = pair(rng, (2, 4, 4))
        a, ta = a * (scale / 4), ta * (scale / 4)
        grad, expected = gradients(lambda L, x: L.linalg.matrix_exp(x) * x, a, ta)
        assert_matches(grad, expected, rtol=1e-8, atol=1e-10 * expected.abs().amax().item())
    for fn in (lambda L: L.linalg.matrix_exp(L.ones(3)),
               lambda L: L.linalg.matrix_exp(L.ones(3, 4)),
               lambda L: L.linalg.matrix_exp(L.ones(3, 3, dtype=L.int64)),
               lambda L: L.linalg.matrix_exp(L.ones(3, 3, dtype=L.float16)),
               lambda L: L.linalg.matrix_exp(L.ones(0, 0)),
               lambda L: L.linalg.matrix_exp(L.ones(0, 3, 3)),
               lambda L: L.linalg.matrix_exp(L.zeros(2, 3, 3))):
        assert_same_outcome(fn)


@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", INF, -INF, 1, -1])
def test_cond(rng, p):
    a, ta = pair(rng, (2, 4, 4))
    assert_matches(pf.linalg.cond(a, p), torch.linalg.cond(ta, p), rtol=1e-9, atol=1e-9)
    assert_matches(pf.linalg.cond(a.transpose(-2, -1), p), torch.linalg.cond(ta.mT, p), rtol=1e-9, atol=1e-9)
    if p in (None, 2, -2):  # (torch's other norms fill inv's output in place and cannot differentiate it)
        assert_matches(*gradients(lambda L, x: L.linalg.cond(x, p), a, ta), rtol=1e-7, atol=1e-9)
    for fn in (lambda L: L.linalg.cond(L.ones(3, 4, dtype=L.float64), p),  # only the 2-norms take any shape
               lambda L: L.linalg.cond(L.zeros(3, 3, dtype=L.float64), p),  # singular: inf (NaN for the 2-norms)
               lambda L: L.linalg.cond(L.ones(0, 0), p),
               lambda L: L.linalg.cond(L.ones(2, 0, 0), p),
               lambda L: L.linalg.cond(L.ones(3), p)):
        assert_same_outcome(fn)


def test_cond_bad_order():
    assert_same_outcome(lambda L: L.linalg.cond(L.eye(3), 3))
    assert_same_outcome(lambda L: L.linalg.cond(L.eye(3), "abc"))


def test_tensorinv_tensorsolve(rng):
    a, ta = conditioned(rng, (24, 24))
    a4, ta4 = a.reshape(4, 6, 8, 3), ta.reshape(4, 6, 8, 3)
    assert_matches(pf.linalg.tensorinv(a4), torch.linalg.tensorinv(ta4), rtol=1e-9, atol=1e-9)
    assert_matches(pf.linalg.tensorinv(a.reshape(24, 2, 3, 4), ind=1), torch.linalg.tensorinv(ta.reshape(24, 2, 3, 4),
                                                                                               ind=1), rtol=1e-9,
                   atol=1e-9)
    b, tb = pair(rng, (4, 6))
    assert_matches(pf.linalg.tensorsolve(a4, b), torch.linalg.tensorsolve(ta4, tb), rtol=1e-9, atol=1e-9)
    moved, tmoved = a4.permute(2, 0, 1, 3), ta4.permute(2, 0, 1, 3)
    assert_matches(pf.linalg.tensorsolve(moved, b, dims=(0,)), torch.linalg.tensorsolve(tmoved, tb, dims=(0,)),
                   rtol=1e-9, atol=1e-9)
    assert_matches(*gradients(lambda L, x, y: L.linalg.tensorsolve(x, y) * x[0, 0], a4, ta4, (b, tb)), rtol=1e-8,
                   atol=1e-9)
    assert_matches(*gradients(lambda L, x: L.linalg.tensorinv(x), a4, ta4), rtol=1e-8, atol=1e-9)
    for fn in (lambda L: L.linalg.tensorinv(L.ones(4, 6, 8, 3), ind=0),
               lambda L: L.linalg.tensorinv(L.ones(4, 6, 8, 2)),
               lambda L: L.linalg.tensorinv(L.zeros(2, 2, 2, 2)),
               lambda L: L.linalg.tensorsolve(L.ones(2, 3, 6), L.ones(2, 4)),
               lambda L: L.linalg.tensorsolve(L.ones(6, 4), L.ones(6)),
               lambda L: L.linalg.tensorsolve(L.zeros(2, 3, 6), L.ones(2, 3))):
        same_outcome(fn)


# ---------------------------------------------------------------- deprecated torch.svd, torch.qr, torch.symeig

@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 4)])
def test_legacy_svd_qr_symeig(rng, shape):
    a, ta = conditioned(rng, shape)
    for some in (True, False):
        U, S, V = pf.svd(a, some=some)
        tU, tS, tV = torch.svd(ta, some=some)
        assert_matches(S, tS, rtol=1e-9, atol=1e-9)
        k = S.shape[-1]
        assert_matches((U[..., :k] * S.unsqueeze(-2)) @ V[..., :k].transpose(-2, -1), ta, rtol=1e-9, atol=1e-9)
        assert tuple(V.shape) == tuple(tV.shape) and tuple(U.shape) == tuple(tU.shape)
        assert_same_outcome(lambda L: L.svd(L.ones(shape), some=some, compute_uv=False))
        Q, R = pf.qr(a, some=some)
        tQ, tR = torch.qr(ta, some=some)
        assert tuple(Q.shape) == tuple(tQ.shape) and tuple(R.shape) == tuple(tR.shape)
        assert_matches(Q @ R, ta, rtol=1e-9, atol=1e-9)
        assert_matches(R.abs(), tR.abs(), rtol=1e-9, atol=1e-9)
    assert_matches(*gradients(lambda L, x: L.svd(x)[1], a, ta), rtol=1e-9, atol=1e-9)
    assert_matches(*gradients(lambda L, x: L.svd(x, compute_uv=False)[1], a, ta), rtol=1e-9, atol=1e-9)
    s, ts = conditioned(rng, shape[:-1] + (shape[-2],), symmetric=True)
    for upper in (True, False):
        assert_matches(pf.symeig(s, upper=upper).eigenvalues, torch.symeig(ts, upper=upper).eigenvalues,
                       rtol=1e-9, atol=1e-9)
        values, vectors = pf.symeig(s, eigenvectors=True, upper=upper)
        assert_matches((vectors * values.unsqueeze(-2)) @ vectors.transpose(-2, -1), ts, rtol=1e-9, atol=1e-9)
    assert_matches(pf.symeig(s).eigenvectors, torch.symeig(ts).eigenvectors)
    assert_matches(*gradients(lambda L, x: L.symeig(x, True)[0], s, ts), rtol=1e-9, atol=1e-9)
    x = s.detach().requires_grad_(True)
    with pytest.raises(RuntimeError, match="symeig.*not differentiable"):
        pf.symeig(x)[0].sum().backward()
    for fn in (lambda L: L.svd(L.ones(3)), lambda L: L.qr(L.ones(3)), lambda L: L.symeig(L.ones(3, 4)),
               lambda L: L.svd(L.ones(0, 3, 2)), lambda L: L.qr(L.ones(0, 3, 2), some=False)):
        assert_same_outcome(fn)


@pytest.mark.parametrize("shape,k", [((5, 3), 3), ((2, 6, 4), 2), ((4, 4), 4), ((3, 1), 1)])
def test_householder_product(rng, shape, k):
    a, ta = pair(rng, shape)
    tau, ttau = pair(rng, shape[:-2] + (k,))
    tau, ttau = tau.abs(), ttau.abs()
    assert_matches(pf.linalg.householder_product(a, tau), torch.linalg.householder_product(ta, ttau),
                   rtol=1e-9, atol=1e-9)
    assert_matches(pf.orgqr(a.transpose(-2, -1).transpose(-2, -1), tau), torch.orgqr(ta, ttau), rtol=1e-9, atol=1e-9)
    assert_matches(*gradients(lambda L, x, t: L.linalg.householder_product(x, t), a, ta, (tau, ttau)),
                   rtol=1e-9, atol=1e-9)
    assert_matches(*gradients(lambda L, t, x: L.linalg.householder_product(x, t), tau, ttau, (a, ta)),
                   rtol=1e-9, atol=1e-9)
    # geqrf's reflectors give linalg.qr's Q
    f, tf = pair(rng, shape, "float32")
    assert_matches(pf.linalg.householder_product(*[from_torch(x) for x in torch.geqrf(tf)]),
                   torch.linalg.qr(tf).Q, rtol=1e-4, atol=1e-4)


def test_householder_product_errors():
    for fn in (lambda L: L.linalg.householder_product(L.ones(3), L.ones(1)),
               lambda L: L.linalg.householder_product(L.ones(3, 4), L.ones(2)),
               lambda L: L.linalg.householder_product(L.ones(4, 3), L.ones(4)),
               lambda L: L.linalg.householder_product(L.ones(2, 4, 3), L.ones(2)),
               lambda L: L.linalg.householder_product(L.ones(2, 4, 3), L.ones(3, 2)),
               lambda L: L.linalg.householder_product(L.ones(4, 3), L.ones(2, dtype=L.float64)),
               lambda L: L.linalg.householder_product(L.ones(4, 3, dtype=L.int32), L.ones(2, dtype=L.int32)),
               lambda L: L.linalg.householder_product(L.ones(4, 3), L.ones(0)),
               lambda L: L.linalg.householder_product(L.ones(0, 4, 3), L.ones(0, 2)),
               lambda L: L.linalg.householder_product(L.ones(4, 0), L.ones(0))):
        assert_same_outcome(fn)
