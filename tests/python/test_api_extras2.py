"""Order statistics, searching, counting, geometry and sampling composites (plugflow._composite)
against PyTorch 1.13: values, float64 gradients, multinomial statistics and exception types."""

import numpy as np
import pytest
import torch

import plugflow as pf

from helpers import assert_matches, assert_same_outcome
from test_api_extras import check_grad, close, pair


@pytest.fixture
def rng():
    return np.random.default_rng(4321)


def both(fn_name, *args, **kw):
    return getattr(pf, fn_name)(*args[0::2], **kw), getattr(torch, fn_name)(*args[1::2], **kw)


def raises_same(pfn, tfn):
    with pytest.raises(Exception) as te:
        tfn()
    with pytest.raises(type(te.value)):
        pfn()


def test_median_nanmedian_kthvalue(rng):
    p, t = pair(rng, (4, 7), grad=True)
    close(pf.median(p), torch.median(t))
    for dim, keep in ((0, False), (1, True), (-1, False)):
        pv, tv = pf.median(p, dim, keep), torch.median(t, dim, keep)
        close(pv.values, tv.values)
        close(pv.indices, tv.indices)
        assert type(pv).__name__ == "median"
        pk, tk = p.kthvalue(3, dim, keep), t.kthvalue(3, dim, keep)
        close(pk.values, tk.values)
        close(pk.indices, tk.indices)
    check_grad([p], [t], p.median(1).values, t.median(1).values)
    p2, t2 = pair(rng, (4, 7), grad=True)
    check_grad([p2], [t2], pf.kthvalue(p2, 3, 0).values, torch.kthvalue(t2, 3, 0).values)
    p3, t3 = pair(rng, (3, 5), grad=True)
    check_grad([p3], [t3], p3.median(), t3.median())
    a = rng.standard_normal((3, 6))
    a[0, 2] = a[0, 4] = a[1, 1] = np.nan
    a[2, :] = np.nan
    for fn in ("median", "nanmedian"):
        pv, tv = getattr(pf, fn)(pf.tensor(a), 1), getattr(torch, fn)(torch.tensor(a), 1)
        close(pv.values, tv.values)
        close(pv.indices[:2], tv.indices[:2])
        close(getattr(pf, fn)(pf.tensor(a[:2])), getattr(torch, fn)(torch.tensor(a[:2])))
    raises_same(lambda: pf.kthvalue(pf.ones(3), 4), lambda: torch.kthvalue(torch.ones(3), 4))
    raises_same(lambda: pf.median(pf.ones(2, 0), 1), lambda: torch.median(torch.ones(2, 0), 1))
    raises_same(lambda: pf.median(pf.ones(2), 3), lambda: torch.median(torch.ones(2), 3))


def test_mode_aminmax(rng):
    a = rng.integers(0, 4, size=(5, 9)).astype("float32")
    for dim in (0, 1):
        pm, tm = pf.mode(pf.tensor(a), dim), torch.mode(torch.tensor(a), dim)
        close(pm.values, tm.values)
        close(pm.indices, tm.indices)
    p, t = pair(rng, (3, 4), "float32")
    for kw in ({}, {"dim": 1}, {"dim": 0, "keepdim": True}):
        pa, ta = pf.aminmax(p, **kw), torch.aminmax(t, **kw)
        close(pa.min, ta.min)
        close(pa.max, ta.max)
    raises_same(lambda: pf.aminmax(pf.ones(0)), lambda: torch.aminmax(torch.ones(0)))


@pytest.mark.parametrize("interp", ["linear", "lower", "higher", "nearest", "midpoint"])
def test_quantile(rng, interp):
    p, t = pair(rng, (4, 6), grad=True)
    qs = rng.uniform(0, 1, 3)
    for q in (0.3, 1.0, pf.tensor(qs)):
        tq = torch.tensor(q.numpy()) if isinstance(q, pf.Tensor) else q
        close(pf.quantile(p, q, interpolation=interp), torch.quantile(t, tq, interpolation=interp))
        for dim, keep in ((0, False), (1, True), (None, True)):
            close(p.quantile(q, dim, keep, interpolation=interp), t.quantile(tq, dim, keep, interpolation=interp))
    check_grad([p], [t], pf.quantile(p, pf.tensor(qs), 1, interpolation=interp),
               torch.quantile(t, torch.tensor(qs), 1, interpolation=interp))
    a = rng.standard_normal((3, 5))
    a[0, 1] = np.nan
    a[2, :] = np.nan
    for fn in ("quantile", "nanquantile"):
        close(getattr(pf, fn)(pf.tensor(a), 0.4, 1, interpolation=interp),
              getattr(torch, fn)(torch.tensor(a), 0.4, 1, interpolation=interp))


def test_quantile_errors():
    for args in ((pf.tensor([1, 2]), 0.5), (pf.tensor([1., 2]), 1.5), (pf.tensor([1., 2]), pf.tensor([0.5], dtype=pf.float64)),
                 (pf.tensor([1., 2]), pf.ones(1, 1) * 0.5)):
        targs = (torch.tensor(args[0].numpy()), args[1] if isinstance(args[1], float) else torch.tensor(args[1].numpy()))
        raises_same(lambda: pf.quantile(*args), lambda: torch.quantile(*targs))
    raises_same(lambda: pf.quantile(pf.ones(2), 0.5, interpolation="foo"),
                lambda: torch.quantile(torch.ones(2), 0.5, interpolation="foo"))
    # an empty input is refused, whatever the dim (found by the fuzzer)
    for fn in ("quantile", "nanquantile"):
        for shape, dim in (((0,), None), ((0,), -1), ((0, 3), 1), ((2, 0), 0)):
            raises_same(lambda: getattr(pf, fn)(pf.zeros(shape), 0.7, dim), lambda: getattr(torch, fn)(torch.zeros(shape), 0.7, dim))


def test_bincount_searchsorted_bucketize_histc(rng):
    a = rng.integers(0, 6, 20)
    w = rng.standard_normal(20)
    close(pf.bincount(pf.tensor(a)), torch.bincount(torch.tensor(a)))
    close(pf.tensor(a).bincount(minlength=10), torch.tensor(a).bincount(minlength=10))
    close(pf.bincount(pf.tensor(a), pf.tensor(w)), torch.bincount(torch.tensor(a), torch.tensor(w)))
    close(pf.bincount(pf.tensor(a), pf.tensor(w.astype("float32"))),
          torch.bincount(torch.tensor(a), torch.tensor(w.astype("float32"))))
    close(pf.bincount(pf.tensor([], dtype=pf.int64)), torch.bincount(torch.tensor([], dtype=torch.int64)))
    raises_same(lambda: pf.bincount(pf.tensor([1, -2])), lambda: torch.bincount(torch.tensor([1, -2])))
    raises_same(lambda: pf.bincount(pf.tensor([1., 2])), lambda: torch.bincount(torch.tensor([1., 2])))
    raises_same(lambda: pf.bincount(pf.tensor([1]), minlength=-1), lambda: torch.bincount(torch.tensor([1]), minlength=-1))

    seq = np.sort(rng.integers(0, 10, 8)).astype("float64")
    vals = rng.integers(-1, 11, (3, 4)).astype("float64")
    for kw in ({}, {"right": True}, {"side": "right"}, {"out_int32": True}):
        close(pf.searchsorted(pf.tensor(seq), pf.tensor(vals), **kw), torch.searchsorted(torch.tensor(seq), torch.tensor(vals), **kw))
        close(pf.bucketize(pf.tensor(vals), pf.tensor(seq), **{k: v for k, v in kw.items() if k != "side"}),
              torch.bucketize(torch.tensor(vals), torch.tensor(seq), **{k: v for k, v in kw.items() if k != "side"}))
    seq2 = np.sort(rng.standard_normal((3, 5)), axis=1)
    v2 = rng.standard_normal((3, 4))
    close(pf.searchsorted(pf.tensor(seq2), pf.tensor(v2)), torch.searchsorted(torch.tensor(seq2), torch.tensor(v2)))
    close(pf.searchsorted(pf.tensor(seq), 4.0), torch.searchsorted(torch.tensor(seq), 4.0))
    raises_same(lambda: pf.searchsorted(pf.tensor(seq), pf.tensor(vals), side="left", right=True),
                lambda: torch.searchsorted(torch.tensor(seq), torch.tensor(vals), side="left", right=True))
    raises_same(lambda: pf.searchsorted(pf.tensor(seq2), pf.tensor(vals[:2])),
                lambda: torch.searchsorted(torch.tensor(seq2), torch.tensor(vals[:2])))
    raises_same(lambda: pf.bucketize(pf.tensor(vals), pf.tensor(seq2)), lambda: torch.bucketize(torch.tensor(vals), torch.tensor(seq2)))

    h = rng.standard_normal(50).astype("float32")
    for kw in ({}, {"bins": 7}, {"bins": 5, "min": -1, "max": 1}):
        close(pf.histc(pf.tensor(h), **kw), torch.histc(torch.tensor(h), **kw))
    close(pf.tensor(h).histc(4), torch.tensor(h).histc(4))
    raises_same(lambda: pf.histc(pf.tensor([1, 2])), lambda: torch.histc(torch.tensor([1, 2])))
    # float16 / bfloat16 counts past 2048 / 256 are exact counts rounded once, as PyTorch's
    # float64 ones (accumulated in float16, 2048 + 1 stayed 2048; found by the fuzzer)
    big = rng.uniform(-3, 3, 5000)
    for dtype in ("float16", "bfloat16"):
        values = torch.tensor(big).to(getattr(torch, dtype))
        expected = torch.histc(values.double(), 3, -3, 3).to(values.dtype)
        counts = pf.histc(pf.tensor(big).to(getattr(pf, dtype)), 3, -3, 3)
        assert counts.dtype == getattr(pf, dtype)
        close(counts.double(), expected.double())
    raises_same(lambda: pf.histc(pf.tensor([1.]), bins=0), lambda: torch.histc(torch.tensor([1.]), bins=0))
    raises_same(lambda: pf.histc(pf.tensor([1.]), min=3, max=1), lambda: torch.histc(torch.tensor([1.]), min=3, max=1))


def test_diff(rng):
    p, t = pair(rng, (4, 6), grad=True)
    pp, tp = pair(rng, (4, 2), grad=True)
    for kw in ({}, {"n": 2}, {"dim": 0}, {"n": 3, "dim": 1}):
        close(pf.diff(p, **kw), torch.diff(t, **kw))
    check_grad([p, pp], [t, tp], p.diff(2, 1, prepend=pp, append=pp), t.diff(2, 1, prepend=tp, append=tp))
    b = rng.integers(0, 2, 7).astype(bool)
    close(pf.diff(pf.tensor(b)), torch.diff(torch.tensor(b)))
    raises_same(lambda: pf.diff(pf.tensor(1.)), lambda: torch.diff(torch.tensor(1.)))
    close(pf.diff(pf.ones(3), n=-1), torch.diff(torch.ones(3), n=-1))
    # prepend / append are checked even when n = 0 ignores them (found by the fuzzer)
    for kw in ({"n": 0, "dim": 0, "prepend": pf.zeros(4, 2)}, {"n": 0, "dim": 1, "append": pf.zeros(4)},
               {"n": 0, "dim": 1, "prepend": pf.zeros(3, 6, dtype=pf.int8)}, {"n": 1, "dim": 1, "prepend": pf.zeros(3, 2)}):
        tkw = {k: torch.from_numpy(v.numpy()) if isinstance(v, pf.Tensor) else v for k, v in kw.items()}
        with pytest.raises(RuntimeError, match="diff expects") as expected:
            torch.diff(t.detach(), **tkw)
        with pytest.raises(RuntimeError) as got:
            pf.diff(p.detach(), **kw)
        assert str(got.value) == str(expected.value)
    close(pf.diff(p, n=0, dim=1, prepend=pp), torch.diff(t, n=0, dim=1, prepend=tp))
    close(pf.diff(p, n=0, dim=64), torch.diff(t, n=0, dim=64))  # (nothing to check the dim against)


@pytest.mark.parametrize("p_norm", [2.0, 1.0, 0.0, 3.0, float("inf")])
def test_cdist(rng, p_norm):
    a, ta = pair(rng, (2, 5, 3), grad=True)
    b, tb = pair(rng, (2, 4, 3), grad=True)
    check_grad([a, b], [ta, tb], pf.cdist(a, b, p_norm), torch.cdist(ta, tb, p_norm))
    a2, ta2 = pair(rng, (30, 3))
    b2, tb2 = pair(rng, (27, 3))
    close(pf.cdist(a2, b2, p_norm), torch.cdist(ta2, tb2, p_norm), 1e-5)
    close(pf.cdist(a2.float(), b2.float(), p_norm), torch.cdist(ta2.float(), tb2.float(), p_norm), 1e-4)


def test_cdist_errors():
    raises_same(lambda: pf.cdist(pf.ones(2, 3), pf.ones(2, 4)), lambda: torch.cdist(torch.ones(2, 3), torch.ones(2, 4)))
    raises_same(lambda: pf.cdist(pf.ones(2, 3), pf.ones(2, 3), -1), lambda: torch.cdist(torch.ones(2, 3), torch.ones(2, 3), -1))
    raises_same(lambda: pf.cdist(pf.ones(3), pf.ones(3)), lambda: torch.cdist(torch.ones(3), torch.ones(3)))
    raises_same(lambda: pf.cdist(pf.ones(2, 3, dtype=pf.int64), pf.ones(2, 3, dtype=pf.int64)),
                lambda: torch.cdist(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long)))


def test_cross_diagonal_trace_rot90(rng):
    a, ta = pair(rng, (4, 3), grad=True)
    b, tb = pair(rng, (4, 3), grad=True)
    check_grad([a, b], [ta, tb], pf.cross(a, b, dim=1), torch.cross(ta, tb, dim=1))
    c, tc = pair(rng, (3, 5))
    d, td = pair(rng, (3, 5))
    close(c.cross(d), tc.cross(td))
    raises_same(lambda: pf.cross(pf.ones(2, 2), pf.ones(2, 2)), lambda: torch.cross(torch.ones(2, 2), torch.ones(2, 2)))
    raises_same(lambda: pf.cross(pf.ones(3, 4), pf.ones(3, 4), dim=1), lambda: torch.cross(torch.ones(3, 4), torch.ones(3, 4), dim=1))

    x, tx = pair(rng, (3, 4, 5), grad=True)
    for off, d1, d2 in ((0, 0, 1), (1, 1, 2), (-2, 2, 0), (2, -1, -3), (9, 0, 1)):
        close(pf.diagonal(x, off, d1, d2), torch.diagonal(tx, off, d1, d2))
    check_grad([x], [tx], x.diagonal(1, 2, 0), tx.diagonal(1, 2, 0))
    raises_same(lambda: pf.diagonal(pf.ones(3, 4), 0, 1, 1), lambda: torch.diagonal(torch.ones(3, 4), 0, 1, 1))
    raises_same(lambda: pf.diagonal(pf.ones(3, 4), 0, 0, 2), lambda: torch.diagonal(torch.ones(3, 4), 0, 0, 2))

    v, tv = pair(rng, (2, 4), grad=True)
    for off, d1, d2 in ((0, -2, -1), (1, 0, 2), (-1, 2, 1)):
        close(pf.diag_embed(v, off, d1, d2), torch.diag_embed(tv, off, d1, d2))
    check_grad([v], [tv], v.diag_embed(1), tv.diag_embed(1))

    m, tm = pair(rng, (4, 6), grad=True)
    check_grad([m], [tm], pf.trace(m), torch.trace(tm))
    close(pf.trace(pf.ones(3, 3, dtype=pf.int32)), torch.trace(torch.ones(3, 3, dtype=torch.int32)))
    raises_same(lambda: pf.trace(pf.ones(3)), lambda: torch.trace(torch.ones(3)))

    for r, c_, off in ((3, 3, 0), (4, 6, 1), (5, 3, -2), (0, 3, 0)):
        close(pf.tril_indices(r, c_, off), torch.tril_indices(r, c_, off))
        close(pf.triu_indices(r, c_, off), torch.triu_indices(r, c_, off))
    raises_same(lambda: pf.tril_indices(-1, 3), lambda: torch.tril_indices(-1, 3))
    raises_same(lambda: pf.tril_indices(3, 3, dtype=pf.float32), lambda: torch.tril_indices(3, 3, dtype=torch.float32))

    r, tr = pair(rng, (2, 3, 4), grad=True)
    for k, dims in ((1, [0, 1]), (2, [1, 2]), (3, [2, 0]), (-1, [0, 2]), (4, [0, 1])):
        close(pf.rot90(r, k, dims), torch.rot90(tr, k, dims))
    check_grad([r], [tr], r.rot90(1, [1, 2]), tr.rot90(1, [1, 2]))
    raises_same(lambda: pf.rot90(pf.ones(3)), lambda: torch.rot90(torch.ones(3)))
    raises_same(lambda: pf.rot90(pf.ones(3, 3), 1, [0, 0]), lambda: torch.rot90(torch.ones(3, 3), 1, [0, 0]))
    raises_same(lambda: pf.rot90(pf.ones(3, 3), 1, [0]), lambda: torch.rot90(torch.ones(3, 3), 1, [0]))


def test_multinomial_statistics():
    w = np.array([1.0, 0.0, 3.0, 6.0])
    gen = pf.Generator().manual_seed(0) if hasattr(pf, "Generator") else None
    s = pf.multinomial(pf.tensor(w), 20000, True, generator=gen)
    assert s.dtype == pf.int64 and tuple(s.shape) == (20000,)
    freq = np.bincount(s.numpy(), minlength=4) / 20000
    np.testing.assert_allclose(freq, w / w.sum(), atol=0.015)
    rows = pf.tensor(np.stack([w, w[::-1]]))
    s2 = rows.multinomial(5000, replacement=True)
    assert tuple(s2.shape) == (2, 5000)
    np.testing.assert_allclose(np.bincount(s2[1].numpy(), minlength=4) / 5000, w[::-1] / w.sum(), atol=0.03)
    # without replacement: distinct indices, first draw distributed like the weights
    s3 = pf.multinomial(pf.tensor(np.tile(w, (4000, 1))), 3)
    arr = s3.numpy()
    assert all(len(set(r)) == 3 for r in arr[:200])
    np.testing.assert_allclose(np.bincount(arr[:, 0], minlength=4) / 4000, w / w.sum(), atol=0.03)
    assert sorted(pf.multinomial(pf.tensor([1.0, 0.0]), 2).tolist()) == [0, 1]


def test_multinomial_errors():
    cases = [((pf.tensor([1, 2]), 1), (torch.tensor([1, 2]), 1)),
             ((pf.tensor([1., -2]), 1), (torch.tensor([1., -2]), 1)),
             ((pf.tensor([0., 0]), 1), (torch.tensor([0., 0]), 1)),
             ((pf.tensor([1., 2]), 3), (torch.tensor([1., 2]), 3)),
             ((pf.tensor([1., 2]), 0), (torch.tensor([1., 2]), 0)),
             ((pf.ones(1, 1, 2), 1), (torch.ones(1, 1, 2), 1))]
    for pa, ta in cases:
        raises_same(lambda: pf.multinomial(*pa), lambda: torch.multinomial(*ta))


def test_heaviside_logaddexp(rng):
    a = rng.integers(-2, 3, (3, 4)).astype("float32")
    v = rng.standard_normal(4).astype("float32")
    close(pf.heaviside(pf.tensor(a), pf.tensor(v)), torch.heaviside(torch.tensor(a), torch.tensor(v)))
    close(pf.tensor(a).heaviside(pf.tensor(v)), torch.tensor(a).heaviside(torch.tensor(v)))
    close(pf.heaviside(pf.tensor([1, 0, -1]), pf.tensor([5])), torch.heaviside(torch.tensor([1, 0, -1]), torch.tensor([5])))
    raises_same(lambda: pf.heaviside(pf.ones(1), pf.ones(1, dtype=pf.float64)),
                lambda: torch.heaviside(torch.ones(1), torch.ones(1, dtype=torch.float64)))
    p, t = pair(rng, (3, 4), grad=True, low=-50, high=50)
    q, tq = pair(rng, (4,), grad=True, low=-50, high=50)
    check_grad([p, q], [t, tq], pf.logaddexp(p, q), torch.logaddexp(t, tq))
    inf = float("inf")
    x = [inf, -inf, -inf, 1.0, inf]
    y = [inf, -inf, 2.0, -inf, -inf]
    close(pf.logaddexp(pf.tensor(x), pf.tensor(y)), torch.logaddexp(torch.tensor(x), torch.tensor(y)))
    raises_same(lambda: pf.logaddexp(pf.tensor([1]), pf.tensor([1])), lambda: torch.logaddexp(torch.tensor([1]), torch.tensor([1])))


def test_dtype_names_in_messages():
    for pfn, tfn in ((lambda: pf.isclose(pf.ones(2), pf.ones(2, dtype=pf.float64)),
                      lambda: torch.isclose(torch.ones(2), torch.ones(2, dtype=torch.float64))),
                     (lambda: pf.normal(pf.ones(2, dtype=pf.int64), 1.0),
                      lambda: torch.normal(torch.ones(2, dtype=torch.long), 1.0))):
        with pytest.raises(RuntimeError) as te:
            tfn()
        with pytest.raises(RuntimeError) as pe:
            pfn()
        assert str(pe.value) == str(te.value)
    with pytest.raises(RuntimeError, match="'Long'"):
        pf.bernoulli(pf.ones(2, dtype=pf.int64))


def test_out_arguments_are_written_or_refused():
    a = np.random.randn(4, 5).astype(np.float32)
    x = pf.from_numpy(a.copy())
    out = pf.empty(4)
    assert pf.logaddexp(x[:, 0], x[:, 1], out=out) is out
    np.testing.assert_allclose(out.numpy(), torch.logaddexp(torch.from_numpy(a[:, 0]), torch.from_numpy(a[:, 1])).numpy(),
                               rtol=1e-6, atol=1e-6)  # results near 0: a rounding of the inputs' magnitude
    values, indices = pf.empty(4), pf.empty(4, dtype=pf.int64)
    pf.median(x, 1, out=(values, indices))
    expected = torch.median(torch.from_numpy(a), 1)
    np.testing.assert_array_equal(values.numpy(), expected.values.numpy())
    np.testing.assert_array_equal(indices.numpy(), expected.indices.numpy())
    with pytest.raises(TypeError):
        pf.median(x, 1, out=values)


TUPLE_OUT_CALLS = [
    ("max", (1,), {}), ("max", (), {"dim": 0, "keepdim": True}), ("min", (-1, True), {}), ("sort", (1, True), {}),
    ("sort", (), {"dim": 0, "stable": True}), ("topk", (2,), {"dim": 0, "largest": False}), ("kthvalue", (2, 1), {}),
    ("mode", (0,), {}), ("median", (1,), {}), ("nanmedian", (0, True), {}), ("aminmax", (), {"dim": 1}),
]


@pytest.mark.parametrize("fn,args,kwargs", TUPLE_OUT_CALLS)
def test_tuple_out_matches_torch(fn, args, kwargs):
    """out=(values, indices): written, resized from empty (or with PyTorch's warning from another
    shape), the named tuple of the out tensors returned; wrong dtypes, lengths and types refused."""
    a = np.random.randn(4, 5).astype(np.float32)
    second = "float32" if fn == "aminmax" else "int64"

    def call(lib, shapes=((0,), (0,)), dtypes=("float32", second), n=2, source=a):
        outs = [lib.empty(*s, dtype=getattr(lib, d)) for s, d in zip(shapes, dtypes)][:n]
        if n > len(outs):
            outs.append(lib.empty(0))
        r = getattr(lib, fn)(lib.from_numpy(source.copy()), *args, out=tuple(outs), **kwargs)
        assert r[0] is outs[0] and r[1] is outs[1]
        assert type(r).__name__ in (fn, fn + "_out")
        return tuple(outs)

    assert_same_outcome(call)
    with pytest.warns(UserWarning, match="resized"):
        pf_out = call(pf, shapes=((3,), (7, 2)))
    with pytest.warns(UserWarning, match="resized"):
        torch_out = call(torch, shapes=((3,), (7, 2)))
    for p_, t_ in zip(pf_out, torch_out):
        assert_matches(p_, t_)
    assert_same_outcome(lambda lib: call(lib, dtypes=("float64", second)))
    assert_same_outcome(lambda lib: call(lib, dtypes=("float32", "int32")))
    assert_same_outcome(lambda lib: call(lib, n=3))
    grad_input = lambda lib: getattr(lib, fn)(lib.ones(3, 3, requires_grad=True), *args[:1] or (0,),  # noqa: E731
                                              out=(lib.empty(0), lib.empty(0, dtype=getattr(lib, second))))
    if fn not in ("topk", "kthvalue"):
        assert_same_outcome(grad_input)


def test_max_min_out_forms_match_torch():
    a, b = np.random.randn(3, 4).astype(np.float32), np.random.randn(3, 4).astype(np.float32)
    for fn in ("max", "min"):
        def elementwise(lib):
            out = lib.empty(0)
            r = getattr(lib, fn)(lib.from_numpy(a), lib.from_numpy(b), out=out)
            assert r is out
            return out
        assert_same_outcome(elementwise)
        assert_same_outcome(lambda lib: getattr(lib, fn)(lib.from_numpy(a), out=lib.empty(0)))
        assert_same_outcome(lambda lib: getattr(lib, fn)(lib.from_numpy(a), 1, out=lib.empty(0)))
        assert_same_outcome(lambda lib: getattr(lib, fn)(lib.from_numpy(a), 1))


def test_resize_matches_torch():
    def resized(lib, *sizes, template=None):
        t = lib.arange(6.0).reshape(2, 3).clone()
        r = t.resize_as_(lib.zeros(*template)) if template else t.resize_(*sizes)
        assert r is t
        return t.shape, t.stride(), t.flatten()[:4].tolist()
    for sizes in ((6,), ((3, 2),), (2, 2), (1, 6), (0,)):
        assert resized(pf, *sizes) == resized(torch, *sizes)
    assert resized(pf, template=(3, 1))[:2] == resized(torch, template=(3, 1))[:2]
    assert resized(pf, 4, 5)[:2] == resized(torch, 4, 5)[:2]  # grows into fresh memory
    assert_same_outcome(lambda lib: lib.zeros(3, requires_grad=True).resize_(2))
    with pytest.raises(RuntimeError):
        pf.zeros(2).resize_(-1)


def test_searchsorted_matches_torch_on_random_ties_nans_and_batches():
    rng = np.random.default_rng()
    for _ in range(100):
        nd = int(rng.integers(1, 3))
        n, m = int(rng.integers(0, 8)), int(rng.integers(0, 6))
        lead = tuple(int(x) for x in rng.integers(1, 4, size=nd - 1))
        b = np.sort(rng.integers(-3, 4, size=lead + (n,)).astype(np.float32), -1)  # many ties
        v = rng.integers(-4, 5, size=lead + (m,) if nd > 1 else (m,)).astype(np.float32)
        if v.size and rng.random() < 0.3:
            v.flat[0] = np.nan
        for right in (False, True):
            got = pf.searchsorted(pf.from_numpy(b), pf.from_numpy(v), right=right)
            want = torch.searchsorted(torch.from_numpy(b), torch.from_numpy(v), right=right)
            assert tuple(got.shape) == tuple(want.shape)
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    # Large inputs stay O((n + m) log(n + m)) in time and memory.
    b = np.sort(rng.standard_normal(100_000)).astype(np.float32)
    v = rng.standard_normal((200, 500)).astype(np.float32)
    np.testing.assert_array_equal(pf.searchsorted(pf.from_numpy(b), pf.from_numpy(v)).numpy(),
                                  torch.searchsorted(torch.from_numpy(b), torch.from_numpy(v)).numpy())


def test_diff_of_order_zero_and_bincount_of_nothing_match_torch():
    # Found by the fuzzer: n=0 ignores prepend/append; an empty bincount is int64 even with weights.
    for lib in (torch, pf):
        r = lib.diff(lib.ones(2, 3, dtype=lib.int8), n=0, prepend=lib.ones(2, 2, dtype=lib.float16))
        assert r.dtype == lib.int8 and tuple(r.shape) == (2, 3)
        r = lib.bincount(lib.zeros(0, dtype=lib.int64), weights=lib.zeros(0), minlength=3)
        assert r.dtype == lib.int64 and r.tolist() == [0, 0, 0]



# Found by the fuzzer: mode of an all-NaN row; nan_to_num_ leaves integer tensors unwritten (an
# expanded one included); index_fill takes a 0-d tensor value of another dtype as its item;
# cdist needs one dtype; logaddexp promotes an integer operand; heaviside_ exists.
@pytest.mark.parametrize("code", [
    "lib.mode(lib.tensor([float('nan')] * 3))",
    "lib.mode(lib.tensor([[float('nan'), float('nan')], [1., 2.]]), 1)",
    "lib.zeros(1, dtype=lib.int8).expand(3).nan_to_num_()",
    "lib.zeros(3, dtype=lib.int8).index_fill(0, lib.tensor([1]), lib.tensor(2.5))",
    "lib.zeros(3, dtype=lib.int8).index_fill_(0, lib.tensor([1]), lib.tensor(300.))",
    "lib.zeros(3, dtype=lib.float16).index_fill(0, lib.tensor([1]), lib.tensor(True))",
    "lib.cdist(lib.zeros(2, 3), lib.zeros(2, 3, dtype=lib.float64))",
    "lib.logaddexp(lib.tensor([1, 2], dtype=lib.int8), lib.tensor([1., 0.5]))",
    "lib.logaddexp(lib.tensor([1]), lib.tensor([1]))",
    "lib.tensor([-1., 0., 2.]).heaviside_(lib.tensor([5.]))",
    "lib.tensor([-1., 0., 2.]).heaviside_(lib.tensor([5.], dtype=lib.float64))",
    "lib.tensor([float('nan'), float('inf')], dtype=lib.bfloat16).nan_to_num(nan=3.4e38, posinf=1e5)",
    "lib.tensor([float('nan'), -float('inf')], dtype=lib.float16).nan_to_num_(nan=65520., neginf=-1e40)",
])
def test_composite_edge_cases_match_torch(code):
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307


@pytest.mark.parametrize("code", [
    "lib.cdist(lib.tensor([[0., float('nan')], [1., 2.]]), lib.tensor([[0., 1.]]), p=0)",
    "lib.cdist(lib.tensor([[0., float('inf')], [1., 2.]]), lib.tensor([[0., 1.]]), p=0)",
    "lib.nn.functional.hardshrink(lib.tensor([1, 2, 3]))",
    "lib.nn.functional.softshrink(lib.tensor([1, 2, 3]), 1.5)",
    "lib.nn.functional.hardshrink(lib.tensor([-1.0, 0.25, 3.0]))",
])
def test_cdist_p0_nan_and_shrink_dtypes_match_torch(code):
    # Found by the fuzzer: cdist p=0 counted a NaN difference as 1 (PyTorch: NaN);
    # hard/softshrink of integers computed (wrapping abs) where PyTorch has no kernel.
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307


def test_diagonal_is_a_view_as_in_torch():
    # Found by the fuzzer: diagonal was a copy (writes through it were lost, an empty one had
    # no gradient, a huge stride-0 input ran out of memory); it is now a strided view.
    for lib in (torch, pf):
        x = lib.arange(24.).view(2, 3, 4)
        x.diagonal(1, 0, 2).zero_()
        x.diagonal(-1, 2, 1).fill_(-1.0)
        if lib is torch:
            expected = x
    assert_matches(x, expected)
    huge = pf.ones(1).expand(2, 2**20, 2**40)
    assert huge.diagonal(-3, 1, 0).shape == (2**40, 2) == torch.ones(1).expand(2, 2**20, 2**40).diagonal(-3, 1, 0).shape
    leaf = pf.ones(3, 7, 1, 2, 2, requires_grad=True)
    empty = leaf.diagonal(offset=3, dim1=2, dim2=4)
    assert empty.shape == (3, 7, 2, 0) and empty.requires_grad


@pytest.mark.parametrize("code", ["lib.histc(lib.tensor([0.8984375, 1.203125, 4.5], dtype=lib.bfloat16), 10, 0, 3)",
                                  "lib.histc(lib.tensor([0.3, 0.6, 0.9, 2.7, 3.0]), 10, 0, 3)",
                                  "lib.bucketize(lib.tensor(9223372036854775806), lib.tensor([0], dtype=lib.int32))",
                                  "lib.searchsorted(lib.tensor([0, 5], dtype=lib.int8), lib.tensor([300, -1]))",
                                  "lib.bucketize(lib.tensor([2.5]), lib.tensor([1, 2, 3]))"])
def test_histc_bins_and_search_dtypes_match_torch(code):
    # Found by the fuzzer: histc's bin was computed in the input's dtype (bfloat16 rounds
    # 0.898 * 10 to 9); searchsorted converts to PyTorch's result_type (a 0-d input takes the
    # boundaries' dtype and wraps).
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307
