"""The indexing family against PyTorch: advanced indexing (t[idx], t[idx] = v, index_put_),
gather, scatter, scatter_add, index_select, index_add, take, masked_fill, masked_select, where
and nonzero. Forward and gradients on fresh random data (broadcast indices, non-contiguous
operands, sizes 0 and 1, duplicates that accumulate), double backward through the backward
formulas, in-place semantics under autograd, out=, and bad input raising PyTorch's exception
with PyTorch's message."""

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_matches, assert_same_outcome, make_pair, random_data

SEEDS = range(30)


# ---- helpers -------------------------------------------------------------------------------------

def both(rng, shape, dtype="float64", layout="contiguous", low=-5, high=5):
    """The same random values as a plugflow and a torch tensor; layout "strided" or "transposed"
    gives the same non-contiguous view in both."""
    if layout == "contiguous" or len(shape) == 0:
        return make_pair(rng, shape, dtype, low, high)
    if layout == "transposed":
        rev = tuple(reversed(shape))
        a, t = make_pair(rng, rev, dtype, low, high)
        perm = tuple(reversed(range(len(shape))))
        return a.permute(perm), t.permute(perm)
    big = tuple(shape[:-1]) + (2 * shape[-1],)
    a, t = make_pair(rng, big, dtype, low, high)
    return a[..., ::2], t[..., ::2]


def ints(arr):
    """An int64 index as a plugflow and a torch tensor."""
    arr = np.array(arr, dtype=np.int64)
    return pf.from_numpy(arr.copy()), torch.from_numpy(arr.copy())


def bools(arr):
    arr = np.array(arr, dtype=bool)
    return pf.from_numpy(arr.copy()), torch.from_numpy(arr.copy())


def lib_index(lib, item):
    """One index item for `lib`: numpy arrays become that library's tensors."""
    if isinstance(item, np.ndarray):
        return lib.from_numpy(item.copy())
    return item


def for_lib(lib, index):
    if isinstance(index, tuple):
        return tuple(lib_index(lib, i) for i in index)
    return lib_index(lib, index)


def assert_same_error(fn, exact=True, match=None):
    """fn(lib) raises the same exception type for plugflow and torch, with torch's message."""
    with pytest.raises(Exception) as te:
        fn(torch)
    with pytest.raises(Exception) as pe:
        fn(pf)
    assert type(pe.value).__name__ == type(te.value).__name__, (pe.value, te.value)
    tmsg = str(te.value).splitlines()[0] if str(te.value) else ""
    pmsg = str(pe.value).splitlines()[0] if str(pe.value) else ""
    if match is not None:
        assert match in pmsg, (pmsg, tmsg)
    elif exact:
        assert pmsg == tmsg, (pmsg, tmsg)


def check_grads(rng, fn, arrays, double=True, rtol=1e-9, atol=1e-9):
    """fn(lib, *leaves) on float64 leaves made from `arrays`: same output, same gradients for a
    random output gradient v, and (double) the same gradient of <grads, w> with respect to v,
    which runs the backward formulas' own backward."""
    tl = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]
    pl = [pf.from_numpy(a.copy()).requires_grad_() for a in arrays]
    to, po = fn(torch, *tl), fn(pf, *pl)
    assert_matches(po.detach(), to.detach(), rtol=rtol, atol=atol)
    v = rng.standard_normal(tuple(to.shape))
    tv = torch.from_numpy(v.copy()).requires_grad_()
    pv = pf.from_numpy(v.copy()).requires_grad_()
    tg = torch.autograd.grad(to, tl, tv, allow_unused=True, create_graph=double)
    pg = pf.autograd.grad(po, pl, pv, allow_unused=True, create_graph=double)
    for p, t in zip(pg, tg):
        if t is None:
            assert p is None or float(p.abs().sum()) == 0.0
        else:
            assert p is not None
            assert_matches(p.detach(), t.detach(), rtol=rtol, atol=atol)
    if not double:
        return
    used = [i for i, t in enumerate(tg) if t is not None and t.requires_grad]
    if not used:
        return
    ws = [rng.standard_normal(tuple(tg[i].shape)) for i in used]
    ts = sum((tg[i] * torch.from_numpy(w)).sum() for i, w in zip(used, ws))
    ps = sum((pg[i] * pf.from_numpy(w.copy())).sum() for i, w in zip(used, ws))
    (tvv,) = torch.autograd.grad(ts, [tv])
    (pvv,) = pf.autograd.grad(ps, [pv])
    assert_matches(pvv.detach(), tvv, rtol=rtol, atol=atol)


def random_shape(rng, max_dims=4, low=1, high=4):
    return tuple(int(s) for s in rng.integers(low, high + 1, size=rng.integers(1, max_dims + 1)))


def broadcastable(rng, bshape):
    """A random shape that broadcasts to bshape (dims set to 1, leading dims dropped)."""
    shape = [s if rng.random() < 0.7 else 1 for s in bshape]
    drop = int(rng.integers(0, len(shape) + 1)) if rng.random() < 0.3 else 0
    return tuple(shape[drop:])


def random_advanced_index(rng, shape, unique=False):
    """A random index for `shape` mixing ints, slices, None, ..., bools, int64 tensors (negative
    values, broadcasting against each other) or one boolean mask, and lists. With unique=True
    the tensor indices address distinct elements (so assignment order cannot matter)."""
    nd = len(shape)
    items = []
    if rng.random() < 0.25:  # one boolean mask over one or two dims, the rest basic
        start = int(rng.integers(0, nd))
        span = 2 if start + 1 < nd and rng.random() < 0.4 else 1
        for d in range(start):
            items.append(int(rng.integers(-shape[d], shape[d])) if rng.random() < 0.3 else slice(None))
        mask = rng.random(shape[start:start + span]) < 0.5
        items.append(mask if rng.random() < 0.7 else mask.tolist())
        for d in range(start + span, nd):
            items.append(slice(int(rng.integers(0, shape[d])), None) if rng.random() < 0.4 else slice(None))
        if rng.random() < 0.3:  # before the mask (after it, PyTorch would split the mask's dims)
            items.insert(int(rng.integers(0, start + 1)), None)
        return tuple(items)

    bshape = [(), (2,), (3,), (2, 3), (1, 2), (2, 1, 2)][int(rng.integers(0, 6))]
    kinds = []
    for d in range(nd):
        r = rng.random()
        kinds.append("tensor" if r < 0.45 else "int" if r < 0.55 else "slice" if r < 0.8 else "full")
    if "tensor" not in kinds:
        kinds[int(rng.integers(0, nd))] = "tensor"
    tensor_dims = [d for d in range(nd) if kinds[d] == "tensor"]
    if unique:
        space = int(np.prod([shape[d] for d in tensor_dims]))
        n = int(np.prod(bshape)) if bshape else 1
        if n > space:
            bshape = (space,)
            n = space
        flat = rng.permutation(space)[:n]
        coords = np.unravel_index(flat, [shape[d] for d in tensor_dims])
        per_dim = {d: c.reshape(bshape) for d, c in zip(tensor_dims, coords)}
    for d in range(nd):
        size = shape[d]
        if kinds[d] == "tensor":
            if unique:
                values = per_dim[d] - (size if rng.random() < 0.5 else 0)
            else:
                values = rng.integers(-size, size, size=broadcastable(rng, bshape))
            use_list = not unique and values.ndim == 1 and rng.random() < 0.3
            items.append(values.tolist() if use_list else values.astype(np.int64))
        elif kinds[d] == "int":
            items.append(int(rng.integers(-size, size)))
        elif kinds[d] == "slice":
            items.append(slice(int(rng.integers(0, size)), None, int(rng.integers(1, 3))))
        else:
            items.append(slice(None))
    while items and isinstance(items[-1], slice) and items[-1] == slice(None) and rng.random() < 0.5:
        items.pop()
    if rng.random() < 0.2:
        items.insert(int(rng.integers(0, len(items) + 1)), None)
    if rng.random() < 0.15 and not unique:
        items.insert(int(rng.integers(0, len(items) + 1)), True)
    if items and isinstance(items[0], slice) and items[0] == slice(None) and rng.random() < 0.5:
        items[0] = Ellipsis
        items = [Ellipsis] + [i for i in items[1:]]
        # "..." stands for the leading full slices only when no other item follows for them.
        if sum(1 for i in items if i is not None and i is not Ellipsis and not isinstance(i, bool)) > nd - 1:
            items[0] = slice(None)
    return tuple(items)


# ---- advanced indexing ------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(60))
def test_random_advanced_getitem(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng)
    layout = ["contiguous", "strided", "transposed"][seed % 3]
    a, t = both(rng, shape, "float32", layout)
    index = random_advanced_index(rng, shape)
    expected = t[for_lib(torch, index)]
    got = a[for_lib(pf, index)]
    assert_matches(got, expected)
    # A copy whenever PyTorch copies (a view when only ints, slices, None and ... remain).
    got.fill_(123.0)
    expected.fill_(123.0)
    assert_matches(a, t)


@pytest.mark.parametrize("seed", range(40))
def test_random_advanced_setitem(seed):
    rng = np.random.default_rng(1000 + seed)
    shape = random_shape(rng)
    a, t = both(rng, shape, "float64", ["contiguous", "strided"][seed % 2])
    index = random_advanced_index(rng, shape, unique=True)
    target = t[for_lib(torch, index)].shape
    kind = seed % 4
    if kind == 0:
        pv, tv = 7.5, 7.5
    elif kind == 1:
        pv, tv = make_pair(rng, target, "float64")
    elif kind == 2:  # broadcast over the leading dims
        pv, tv = make_pair(rng, tuple(target[int(rng.integers(0, len(target) + 1)):]), "float64")
    else:  # extra leading 1s are dropped
        pv, tv = make_pair(rng, (1, 1) + tuple(target), "float64")
    t[for_lib(torch, index)] = tv
    a[for_lib(pf, index)] = pv
    assert_matches(a, t)


@pytest.mark.parametrize("seed", range(30))
def test_random_advanced_getitem_grad(seed):
    rng = np.random.default_rng(2000 + seed)
    shape = random_shape(rng)
    index = random_advanced_index(rng, shape)
    transpose = seed % 2 == 1 and len(shape) >= 2
    data = rng.uniform(-2, 2, size=tuple(reversed(shape)) if transpose else shape)

    def fn(lib, x):
        if transpose:
            x = x.permute(tuple(reversed(range(x.dim()))))
        return x[for_lib(lib, index)] * 2

    check_grads(rng, fn, [data])


@pytest.mark.parametrize("seed", range(20))
def test_random_advanced_setitem_grad(seed):
    rng = np.random.default_rng(3000 + seed)
    shape = random_shape(rng)
    index = random_advanced_index(rng, shape, unique=True)
    target = torch.zeros(shape)[for_lib(torch, index)].shape
    vshape = tuple(target[int(rng.integers(0, len(target) + 1)):])

    def fn(lib, x, v):
        y = x * 1.5
        y[for_lib(lib, index)] = v
        return y

    check_grads(rng, fn, [rng.uniform(-2, 2, size=shape), rng.uniform(-2, 2, size=vshape)])


def test_index_result_dims_placement():
    a, t = both(np.random.default_rng(0), (2, 3, 4, 5), "float32")
    i0, ti0 = ints([0, 1])
    i1, ti1 = ints([[0], [2]])
    cases = [
        lambda lib, x, i, j: x[i],
        lambda lib, x, i, j: x[:, i],
        lambda lib, x, i, j: x[:, :, j],  # adjacent: the result dims replace the indexed dims
        lambda lib, x, i, j: x[:, i, j],
        lambda lib, x, i, j: x[i, :, j],  # separated by a slice: the result dims come first
        lambda lib, x, i, j: x[i, ..., j],
        lambda lib, x, i, j: x[0, :, i],
        lambda lib, x, i, j: x[None, i, None, j],
        lambda lib, x, i, j: x[..., i, None],
        lambda lib, x, i, j: x[i, 1:, j, ::2],
        lambda lib, x, i, j: x[[1, 0], 0, [3, 2]],
        lambda lib, x, i, j: x[[[0, 1], [1, 0]]],  # a list of lists is a tuple of indices
        lambda lib, x, i, j: x[[0, slice(None), 1]],
        lambda lib, x, i, j: x[np.array([1, 0])],
        lambda lib, x, i, j: x[lib.tensor(1)],  # a 0-d long tensor is an int
        lambda lib, x, i, j: x[lib.tensor(True)],
        lambda lib, x, i, j: x[lib.tensor(False)],
        lambda lib, x, i, j: x[True, 1, [0, 1]],
        lambda lib, x, i, j: x[..., False],
        lambda lib, x, i, j: x[x > 0],
        lambda lib, x, i, j: x[0][x[0] > 0],
        lambda lib, x, i, j: x[:, x[0, :, :, 0] > 0],
        lambda lib, x, i, j: x[x[:, :, 0, 0] > 0],
        lambda lib, x, i, j: x[1:, x[0, :, :, 0] > 0],
        lambda lib, x, i, j: x[[0.0, 1.7]],  # a float list is truncated to longs, like PyTorch
        lambda lib, x, i, j: x[[True, False], [1]],
    ]
    for case in cases:
        assert_matches(case(pf, a, i0, i1), case(torch, t, ti0, ti1))


def test_index_edge_sizes():
    for shape, index in [((3,), []), ((0,), np.zeros(0, np.int64)), ((0, 3), (slice(None), np.array([0, 2]))),
                         ((3, 0), np.array([1, 1])), ((1,), np.zeros((2, 2), np.int64)), ((2, 1), (np.array([1]), 0)),
                         ((3, 4), np.zeros((0, 2), np.int64)), ((), True), ((), False), ((), None),
                         ((5,), np.array(-5)), ((2, 3), np.zeros((2, 3), bool))]:
        a, t = both(np.random.default_rng(1), shape, "float32")
        assert_matches(a[for_lib(pf, index)], t[for_lib(torch, index)])


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                                   "float32", "float64"])
def test_index_dtypes(dtype):
    rng = np.random.default_rng(2)
    a, t = both(rng, (4, 5), dtype, "strided")
    i, ti = ints([[3, -1], [0, 0]])
    assert_matches(a[i, 1:], t[ti, 1:])
    assert_matches(a[a != 0], t[t != 0])
    v, tv = make_pair(rng, (2, 2, 4), dtype)
    a[i, 1:] = v
    t[ti, 1:] = tv
    assert_matches(a, t)


def test_index_many_index_tensors():
    """More index tensors than one kernel call takes are folded into one offset."""
    rng = np.random.default_rng(3)
    shape = (2, 3, 2, 3, 2, 2, 3, 2)
    a, t = both(rng, shape, "float64")
    idx = [rng.integers(-s, s, size=(4,)) for s in shape]
    assert_matches(a[tuple(pf.from_numpy(i.copy()) for i in idx)], t[tuple(torch.from_numpy(i.copy()) for i in idx)])
    v = rng.standard_normal(4)
    a.index_put_(tuple(pf.from_numpy(i.copy()) for i in idx), pf.from_numpy(v.copy()), accumulate=True)
    t.index_put_(tuple(torch.from_numpy(i.copy()) for i in idx), torch.from_numpy(v.copy()), accumulate=True)
    assert_matches(a, t)
    bad = [i.copy() for i in idx]
    bad[6][2] = 7
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 6 with size 3"):
        a[tuple(pf.from_numpy(i) for i in bad)]


def test_setitem_special_values():
    a, t = pf.zeros(3, 4), torch.zeros(3, 4)
    a[[0, 2]] = 5  # a number is cast to self's dtype
    t[[0, 2]] = 5
    a[pf.tensor([1]), 1:] = pf.tensor(2.5)  # 0-d value
    t[torch.tensor([1]), 1:] = torch.tensor(2.5)
    a[a > 4] = -1.0
    t[t > 4] = -1.0
    a[False] = 9.0  # selects nothing
    t[False] = 9.0
    a[True, 1] = 3.0
    t[True, 1] = 3.0
    assert_matches(a, t)
    i = pf.zeros(4, dtype=pf.int32)
    i[[1, 3]] = 2.7  # truncated, as PyTorch does
    assert i.tolist() == [0, 2, 0, 2]
    b = pf.arange(6.0)
    b[[0, 1]] = b[[4, 5]]  # reads before writing
    assert b.tolist() == [4.0, 5.0, 2.0, 3.0, 4.0, 5.0]
    c = pf.arange(6)
    c[c[[5, 4]]] = c[[0, 1]]  # the index reads c itself
    assert c.tolist() == [0, 1, 2, 3, 1, 0]


def test_index_put():
    rng = np.random.default_rng(4)
    a, t = both(rng, (4, 3), "float64", "transposed")
    i, ti = ints([0, 2, 0, 0])
    j, tj = ints([1, -1, 1, 1])
    v, tv = make_pair(rng, (4,), "float64")
    # Duplicates accumulate.
    assert_matches(a.index_put((i, j), v, accumulate=True), t.index_put((ti, tj), tv, accumulate=True))
    assert_matches(pf.index_put(a, (i,), v[:3], True), torch.index_put(t, (ti,), tv[:3], True))
    u, tu = ints([3, 1])
    assert_matches(a.index_put([u], pf.tensor(2.0, dtype=pf.float64)),
                   t.index_put([tu], torch.tensor(2.0, dtype=torch.float64)))
    m, tm = bools([True, False, True, False])
    assert_matches(a.index_put((m,), v[:3], accumulate=True), t.index_put((tm,), tv[:3], accumulate=True))
    r = a.index_put_((i, j), v, accumulate=True)
    t.index_put_((ti, tj), tv, accumulate=True)
    assert r is a
    assert_matches(a, t)
    # Integers accumulate too (and wrap like PyTorch's).
    n, tn = both(rng, (5,), "int32")
    k, tk = ints([1, 1, 1, 4])
    w, tw = make_pair(rng, (4,), "int32")
    assert_matches(n.index_put_((k,), w, accumulate=True), tn.index_put_((tk,), tw, accumulate=True))


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_grad(accumulate):
    rng = np.random.default_rng(5)
    idx = np.array([[0, 2], [2, 2]]) if accumulate else np.array([[0, 2], [1, 3]])

    def fn(lib, x, v):
        return x.index_put((lib.from_numpy(idx.copy()), lib.from_numpy(idx.copy() % 2)), v, accumulate=accumulate)

    check_grads(rng, fn, [rng.standard_normal((4, 2)), rng.standard_normal((2,))])

    def fn_inplace(lib, x, v):
        y = x * 2
        y.index_put_((lib.from_numpy(idx.copy()),), v, accumulate=accumulate)
        return y

    check_grads(rng, fn_inplace, [rng.standard_normal((4, 2)), rng.standard_normal((2, 2, 2))])


# ---- gather / scatter ---------------------------------------------------------------------------------

def unique_scatter_index(rng, self_shape, index_shape, dim):
    """An index for scatter along dim whose entries never collide (each column a permutation)."""
    idx = np.empty(index_shape, dtype=np.int64)
    moved = np.moveaxis(idx, dim, -1)
    for pos in np.ndindex(moved.shape[:-1]):
        moved[pos] = rng.permutation(self_shape[dim])[:index_shape[dim]]
    return idx


def smaller_shape(rng, shape, dim, allow_bigger_dim=True):
    out = [int(rng.integers(1, s + 1)) for s in shape]
    if allow_bigger_dim:
        out[dim] = int(rng.integers(1, shape[dim] + 3))
    return tuple(out)


@pytest.mark.parametrize("seed", SEEDS)
def test_gather(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng)
    dim = int(rng.integers(-len(shape), len(shape)))
    d = dim % len(shape)
    ishape = smaller_shape(rng, shape, d)
    index = rng.integers(0, shape[d], size=ishape)
    dtype = ["float32", "int64", "bool", "float16"][seed % 4]
    a, t = both(rng, shape, dtype, ["contiguous", "strided", "transposed"][seed % 3])
    i, ti = ints(index)
    assert_matches(a.gather(dim, i), t.gather(dim, ti))
    assert_matches(pf.gather(a, dim, index=i), torch.gather(t, dim, index=ti))
    check_grads(rng, lambda lib, x: x.gather(dim, lib.from_numpy(index.copy())),
                [rng.standard_normal(shape)])


@pytest.mark.parametrize("seed", SEEDS)
def test_scatter(seed):
    rng = np.random.default_rng(100 + seed)
    shape = random_shape(rng)
    dim = int(rng.integers(0, len(shape)))
    ishape = smaller_shape(rng, shape, dim, allow_bigger_dim=False)
    index = unique_scatter_index(rng, shape, ishape, dim)
    sshape = tuple(s + int(rng.integers(0, 2)) for s in ishape)  # src may be larger than index
    dtype = ["float64", "int32", "float32"][seed % 3]
    a, t = both(rng, shape, dtype, ["contiguous", "strided"][seed % 2])
    s, ts = both(rng, sshape, dtype, ["contiguous", "transposed"][seed % 2])
    i, ti = ints(index)
    assert_matches(a.scatter(dim, i, s), t.scatter(dim, ti, ts))
    assert_matches(pf.scatter(a, dim, i, s), torch.scatter(t, dim, ti, ts))
    assert_matches(a.scatter(dim, i, 3), t.scatter(dim, ti, 3))
    assert_matches(a.scatter(dim, i, value=-2), t.scatter(dim, ti, value=-2))
    assert_matches(a.clone().scatter_(dim, i, s), t.clone().scatter_(dim, ti, ts))
    assert_matches(a.clone().scatter_(dim, i, 1.5), t.clone().scatter_(dim, ti, 1.5))
    data_s = rng.standard_normal(ishape)
    check_grads(rng, lambda lib, x, src: x.scatter(dim, lib.from_numpy(index.copy()), src),
                [rng.standard_normal(shape), data_s])
    check_grads(rng, lambda lib, x: x.scatter(dim, lib.from_numpy(index.copy()), 2.0), [rng.standard_normal(shape)])


def test_scatter_grad_src_larger_than_index():
    """The src gradient has src's shape: zeros outside the index's corner."""
    s = pf.ones(3, 4, dtype=pf.float64, requires_grad=True)
    x = pf.zeros(2, 4, dtype=pf.float64, requires_grad=True)
    x.scatter(0, pf.tensor([[1, 0]]), s).sum().backward()
    assert s.grad.tolist() == [[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert x.grad.tolist() == [[1, 0, 1, 1], [0, 1, 1, 1]]


@pytest.mark.parametrize("op", ["scatter", "scatter_add", "diag_embed"])
def test_empty_index_keeps_the_autograd_connection(op):
    # An empty index writes nothing, but the result is still part of the graph: self's and
    # src's gradients flow (zeros for src), as PyTorch's (found by the fuzzer via diag_embed).
    results = []
    for lib in (torch, pf):
        self_ = lib.ones(2, 3, dtype=lib.float64, requires_grad=True)
        src = lib.ones(2, 0, dtype=lib.float64, requires_grad=True)
        index = lib.zeros(2, 0, dtype=lib.int64)
        if op == "diag_embed":
            out = lib.diag_embed(src)
        else:
            out = getattr(self_ * 2, op)(1, index, src)
        assert out.requires_grad
        out.sum().backward()
        results.append((src.grad, self_.grad))
    assert_matches(results[1][0], results[0][0])
    if op != "diag_embed":
        assert_matches(results[1][1], results[0][1])


@pytest.mark.parametrize("seed", SEEDS)
def test_scatter_add(seed):
    rng = np.random.default_rng(200 + seed)
    shape = random_shape(rng)
    dim = int(rng.integers(-len(shape), len(shape)))
    d = dim % len(shape)
    ishape = smaller_shape(rng, shape, d)
    index = rng.integers(0, shape[d], size=ishape)  # duplicates accumulate
    dtype = ["float64", "int64", "float32"][seed % 3]
    a, t = both(rng, shape, dtype, ["contiguous", "transposed"][seed % 2])
    s, ts = both(rng, ishape, dtype, ["strided", "contiguous"][seed % 2])
    i, ti = ints(index)
    assert_matches(a.scatter_add(dim, i, s), t.scatter_add(dim, ti, ts))
    assert_matches(pf.scatter_add(a, dim, i, s), torch.scatter_add(t, dim, ti, ts))
    r = a.scatter_add_(dim, i, s)
    assert r is a
    assert_matches(a, t.scatter_add_(dim, ti, ts))
    check_grads(rng, lambda lib, x, src: x.scatter_add(dim, lib.from_numpy(index.copy()), src),
                [rng.standard_normal(shape), rng.standard_normal(ishape)])


def test_gather_scatter_edge_cases():
    x, tx = both(np.random.default_rng(6), (2, 3), "float32")
    e, te = ints(np.zeros((0, 2)))
    assert_matches(x.gather(1, e), tx.gather(1, te))
    assert_matches(x.scatter(1, e, 5.0), tx.scatter(1, te, 5.0))
    assert_matches(x.gather(0, ints([[1], [1], [0]])[0]), tx.gather(0, ints([[1], [1], [0]])[1]))
    s, ts = pf.tensor(5.0), torch.tensor(5.0)  # 0-d tensors index like one element
    z, tz = ints(0)
    assert_matches(s.gather(0, z), ts.gather(0, tz))
    assert_matches(s.gather(0, ints([0, 0])[0]), ts.gather(0, ints([0, 0])[1]))
    assert_matches(s.scatter(0, z, 3.0), ts.scatter(0, tz, 3.0))
    assert_matches(s.scatter_add(0, z, pf.tensor(2.0)), ts.scatter_add(0, tz, torch.tensor(2.0)))


# ---- index_select / index_add / take ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_index_select(seed):
    rng = np.random.default_rng(300 + seed)
    shape = random_shape(rng)
    dim = int(rng.integers(-len(shape), len(shape)))
    d = dim % len(shape)
    n = int(rng.integers(0, 5))
    index = rng.integers(0, shape[d], size=(n,))
    dtype = ["float32", "int16", "bool", "bfloat16", "float64"][seed % 5]
    a, t = both(rng, shape, dtype, ["contiguous", "strided", "transposed"][seed % 3])
    i, ti = ints(index)
    assert_matches(a.index_select(dim, i), t.index_select(dim, ti))
    assert_matches(pf.index_select(a, dim, i.int()), torch.index_select(t, dim, ti.int()))
    if n > 0:
        assert_matches(a.index_select(dim, i[0]), t.index_select(dim, ti[0]))  # a 0-d index
    check_grads(rng, lambda lib, x: x.index_select(dim, lib.from_numpy(index.copy())), [rng.standard_normal(shape)])


@pytest.mark.parametrize("seed", SEEDS)
def test_index_add(seed):
    rng = np.random.default_rng(400 + seed)
    shape = random_shape(rng)
    dim = int(rng.integers(-len(shape), len(shape)))
    d = dim % len(shape)
    n = int(rng.integers(0, 6))
    index = rng.integers(0, shape[d], size=(n,))  # duplicates accumulate
    sshape = list(shape)
    sshape[d] = n
    dtype = ["float64", "int32", "float32"][seed % 3]
    alpha = [1, 2, -0.5][seed % 3] if dtype != "int32" else [1, 3, -2][seed % 3]
    a, t = both(rng, shape, dtype, ["contiguous", "transposed"][seed % 2])
    s, ts = both(rng, tuple(sshape), dtype, ["strided", "contiguous"][seed % 2])
    i, ti = ints(index)
    assert_matches(a.index_add(dim, i, s, alpha=alpha), t.index_add(dim, ti, ts, alpha=alpha))
    assert_matches(pf.index_add(a, dim, i.int(), s), torch.index_add(t, dim, ti.int(), ts))
    r = a.index_add_(dim, i, s, alpha=alpha)
    assert r is a
    assert_matches(a, t.index_add_(dim, ti, ts, alpha=alpha))
    check_grads(rng, lambda lib, x, src: x.index_add(dim, lib.from_numpy(index.copy()), src, alpha=2.5),
                [rng.standard_normal(shape), rng.standard_normal(tuple(sshape))])


def test_index_add_scalar_and_special_dtypes():
    a, t = pf.tensor(1.0), torch.tensor(1.0)
    assert_matches(a.index_add(0, pf.tensor([0]), pf.tensor(2.0)), t.index_add(0, torch.tensor([0]), torch.tensor(2.0)))
    h, th = pf.zeros(2, 3, dtype=pf.float16), torch.zeros(2, 3, dtype=torch.float16)
    assert_matches(h.index_add(0, pf.tensor([0, 0]), pf.ones(2, 3, dtype=pf.float16)),
                   th.index_add(0, torch.tensor([0, 0]), torch.ones(2, 3, dtype=torch.float16)))
    b, tb = pf.zeros(2, 3, dtype=pf.bool), torch.zeros(2, 3, dtype=torch.bool)
    assert_matches(b.index_add(0, pf.tensor([1, 1]), pf.ones(2, 3, dtype=pf.bool)),
                   tb.index_add(0, torch.tensor([1, 1]), torch.ones(2, 3, dtype=torch.bool)))
    n, tn = pf.arange(6).reshape(2, 3), torch.arange(6).reshape(2, 3)
    assert_matches(n.index_add(1, pf.tensor([1, 1]), pf.ones(2, 2, dtype=pf.int64), alpha=2),
                   tn.index_add(1, torch.tensor([1, 1]), torch.ones(2, 2, dtype=torch.int64), alpha=2))


@pytest.mark.parametrize("seed", SEEDS)
def test_take(seed):
    rng = np.random.default_rng(500 + seed)
    shape = random_shape(rng, low=0 if seed % 7 == 0 else 1)
    numel = int(np.prod(shape))
    ishape = random_shape(rng, max_dims=3, low=0, high=3) if numel > 0 else (0,)
    index = rng.integers(-numel, numel, size=ishape) if numel > 0 else np.zeros(ishape, np.int64)
    a, t = both(rng, shape, ["float32", "int8"][seed % 2], ["strided", "transposed"][seed % 2])
    i, ti = ints(index)
    assert_matches(a.take(i), t.take(ti))
    assert_matches(pf.take(a, i), torch.take(t, ti))
    if numel > 0:
        check_grads(rng, lambda lib, x: x.take(lib.from_numpy(index.copy())), [rng.standard_normal(shape)])


# ---- masked ops, where, nonzero -------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_masked_fill(seed):
    rng = np.random.default_rng(600 + seed)
    shape = random_shape(rng, low=0 if seed % 9 == 0 else 1)
    mshape = broadcastable(rng, shape)
    dtype = ["float32", "int64", "bool", "float16", "float64"][seed % 5]
    a, t = both(rng, shape, dtype, ["contiguous", "strided", "transposed"][seed % 3])
    m, tm = bools(rng.random(mshape) < 0.5)
    value = [2.5, -3, True, 7][seed % 4]
    assert_matches(a.masked_fill(m, value), t.masked_fill(tm, value))
    assert_matches(pf.masked_fill(a, m, pf.tensor(value)), torch.masked_fill(t, tm, torch.tensor(value)))
    r = a.masked_fill_(m, value)
    assert r is a
    assert_matches(a, t.masked_fill_(tm, value))
    # A mask of more dims broadcasts self out of place.
    big, tbig = bools(rng.random((2,) + shape) < 0.5)
    assert_matches(a.masked_fill(big, value), t.masked_fill(tbig, value))
    mask = np.asarray(rng.random(mshape) < 0.5)
    check_grads(rng, lambda lib, x: x.masked_fill(lib.from_numpy(mask.copy()), 1.5), [rng.standard_normal(shape)])
    check_grads(rng, lambda lib, x, v: x.masked_fill(lib.from_numpy(mask.copy()), v),
                [rng.standard_normal(shape), rng.standard_normal(())])


@pytest.mark.parametrize("seed", SEEDS)
def test_masked_select(seed):
    rng = np.random.default_rng(700 + seed)
    shape = random_shape(rng, low=0 if seed % 9 == 0 else 1)
    mshape = broadcastable(rng, shape)
    if seed % 2:
        shape, mshape = mshape, shape  # self broadcasts to the mask
    a, t = both(rng, shape, ["float64", "int32", "bool"][seed % 3], ["contiguous", "strided"][seed % 2])
    mask = np.asarray(rng.random(mshape) < 0.5)
    m, tm = bools(mask)
    assert_matches(a.masked_select(m), t.masked_select(tm))
    assert_matches(pf.masked_select(a, m), torch.masked_select(t, tm))
    check_grads(rng, lambda lib, x: x.masked_select(lib.from_numpy(mask.copy())), [rng.standard_normal(shape)])


@pytest.mark.parametrize("seed", SEEDS)
def test_where(seed):
    rng = np.random.default_rng(800 + seed)
    shape = random_shape(rng, max_dims=3, low=0 if seed % 9 == 0 else 1)
    shapes = [broadcastable(rng, shape) for _ in range(3)]
    shapes[int(rng.integers(0, 3))] = shape
    dtypes = [("float32", "float32"), ("int32", "float64"), ("float16", "int64"), ("bool", "int8"),
              ("int64", "uint8")][seed % 5]
    c, tc = bools(rng.random(shapes[0]) < 0.5)
    a, ta = both(rng, shapes[1], dtypes[0], ["contiguous", "transposed"][seed % 2])
    b, tb = both(rng, shapes[2], dtypes[1], ["strided", "contiguous"][seed % 2])
    assert_matches(pf.where(c, a, b), torch.where(tc, ta, tb))
    assert_matches(a.where(c, b), ta.where(tc, tb))
    for other in [2, 2.5, True]:
        assert_matches(pf.where(c, a, other), torch.where(tc, ta, other))
        assert_matches(pf.where(c, other, b), torch.where(tc, other, tb))
    assert_matches(pf.where(c, 1, 0.5), torch.where(tc, 1, 0.5))
    assert_matches(pf.where(c, 1, 0), torch.where(tc, 1, 0))
    mask = np.asarray(rng.random(shapes[0]) < 0.5)
    check_grads(rng, lambda lib, x, y: lib.where(lib.from_numpy(mask.copy()), x, y),
                [rng.standard_normal(shapes[1]), rng.standard_normal(shapes[2])])
    check_grads(rng, lambda lib, x: lib.where(lib.from_numpy(mask.copy()), x, 0.0), [rng.standard_normal(shapes[1])])


def test_where_mixed_float_grads():
    """Gradients arrive in each input's own dtype."""
    x = pf.ones(3, dtype=pf.float32, requires_grad=True)
    y = pf.ones(3, dtype=pf.float64, requires_grad=True)
    pf.where(pf.tensor([True, False, True]), x, y).sum().backward()
    assert x.grad.dtype is pf.float32 and x.grad.tolist() == [1, 0, 1]
    assert y.grad.dtype is pf.float64 and y.grad.tolist() == [0, 1, 0]


@pytest.mark.parametrize("seed", SEEDS)
def test_nonzero(seed):
    rng = np.random.default_rng(900 + seed)
    shape = random_shape(rng, low=0 if seed % 9 == 0 else 1) if seed % 10 else ()
    dtype = ["float32", "int64", "bool", "float16", "uint8"][seed % 5]
    data = random_data(rng, shape, dtype, -1, 2)
    t = torch.from_numpy(np.ascontiguousarray(data))
    a = pf.from_numpy(np.ascontiguousarray(data).copy())
    if len(shape) >= 2:
        a, t = a.transpose(0, 1), t.transpose(0, 1)
    assert_matches(a.nonzero(), t.nonzero())
    assert_matches(pf.nonzero(a), torch.nonzero(t))
    assert_matches(pf.argwhere(a), torch.argwhere(t))
    for p, q in zip(pf.nonzero(a, as_tuple=True), torch.nonzero(t, as_tuple=True)):
        assert_matches(p, q)
    assert len(a.nonzero(as_tuple=True)) == len(t.nonzero(as_tuple=True))
    for p, q in zip(pf.where(a != 0), torch.where(t != 0)):
        assert_matches(p, q)


def test_nonzero_large_parallel():
    """Big enough for several threads: row-major order across slices."""
    rng = np.random.default_rng(7)
    data = rng.random((300, 500)) < 0.3
    a, t = pf.from_numpy(data.copy()), torch.from_numpy(data.copy())
    assert_matches(a.nonzero(), t.nonzero())
    assert_matches(a.t().nonzero(), t.t().nonzero())
    x, tx = both(rng, (300, 500), "float32")
    assert_matches(x[a], tx[t])
    assert_matches(x.masked_fill(a, 0.0), tx.masked_fill(t, 0.0))
    v = rng.standard_normal(int(data.sum())).astype(np.float32)
    x[a] = pf.from_numpy(v.copy())
    tx[t] = torch.from_numpy(v.copy())
    assert_matches(x, tx)


# ---- autograd semantics ------------------------------------------------------------------------------------

def test_grad_fn_names():
    x = pf.randn(2, 3, requires_grad=True)
    i = pf.tensor([0])
    m = pf.tensor([True, False, True])
    names = {
        "IndexBackward0": x[i], "MaskedSelectBackward0": x.masked_select(m), "WhereBackward0": pf.where(m, x, x),
        "TakeBackward0": x.take(i), "GatherBackward0": x.gather(1, pf.tensor([[0]])),
        "IndexSelectBackward0": x.index_select(0, i), "ScatterBackward1": x.scatter(1, pf.tensor([[0]]), 1.0),
        "ScatterBackward0": x.scatter(1, pf.tensor([[0]]), x), "ScatterAddBackward0": x.scatter_add(1, pf.tensor([[0]]), x),
        "IndexAddBackward0": x.index_add(0, i, x[:1]), "MaskedFillBackward0": x.masked_fill(m, 1.0),
        "MaskedFillBackward1": x.masked_fill(m, pf.tensor(1.0)),
        "IndexPutBackward0": x.index_put((i,), pf.tensor(1.0)),
    }
    for name, y in names.items():
        assert y.grad_fn.name() == name
    y = x * 1
    y[i] = 1.0
    assert y.grad_fn.name() == "IndexPutBackward0"
    y = x * 1
    y[0][pf.tensor([1])] = 2.0  # through a view: the base's history is rewritten
    assert y.grad_fn.name() == "CopySlices"
    assert x.nonzero().grad_fn is None and x.nonzero().requires_grad is False


def test_inplace_autograd_semantics():
    x = pf.randn(3, 4, dtype=pf.float64, requires_grad=True)
    for op in [lambda t: t.scatter_(0, pf.tensor([[0]]), 1.0), lambda t: t.masked_fill_(t > 0, 0.0),
               lambda t: t.index_add_(0, pf.tensor([0]), pf.ones(1, 4, dtype=pf.float64)),
               lambda t: t.index_put_((pf.tensor([0]),), pf.tensor(1.0, dtype=pf.float64)),
               lambda t: t.__setitem__(pf.tensor([0]), 1.0)]:
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
            op(x)
        with pf.no_grad():
            op(x.clone())
    # In place on a view of a non-leaf: gradients flow through the base (CopySlices).
    tx = torch.from_numpy(x.detach().numpy().copy()).requires_grad_()

    def fn(lib, base):
        y = base * 2
        y[1:].masked_fill_(y[1:] > 0, 0.0)
        y[:, 1].index_add_(0, lib.tensor([0, 0]), lib.ones(2, dtype=lib.float64) * base[0, 0])
        y[0][lib.tensor([3, 1])] = base[2, :2]
        return y

    out, tout = fn(pf, x), fn(torch, tx)
    assert_matches(out.detach(), tout.detach())
    g = np.random.default_rng(8).standard_normal((3, 4))
    out.backward(pf.from_numpy(g.copy()))
    tout.backward(torch.from_numpy(g.copy()))
    assert_matches(x.grad, tx.grad)


def test_saved_index_modified_in_place_is_caught():
    x = pf.randn(3, requires_grad=True)
    i = pf.tensor([0, 1])
    y = x.gather(0, i)
    i.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_where_scalar_grads_and_broadcast():
    x = pf.randn(3, 1, dtype=pf.float64, requires_grad=True)
    c = pf.tensor([[True, False], [False, False], [True, True]])
    pf.where(c, x, 0.0).sum().backward()
    assert x.grad.tolist() == [[1.0], [0.0], [2.0]]


# ---- out= ---------------------------------------------------------------------------------------------

def test_out():
    rng = np.random.default_rng(9)
    a, t = both(rng, (3, 4), "float32")
    i, ti = ints([[0, 1], [2, 0], [1, 1]])
    m, tm = bools(rng.random((3, 4)) < 0.5)
    j, tj = ints([2, 0])
    cases = [
        (lambda lib, x, i, j, m, out: lib.gather(x, 1, i, out=out), "float32"),
        (lambda lib, x, i, j, m, out: lib.index_select(x, 0, j, out=out), "float32"),
        (lambda lib, x, i, j, m, out: lib.masked_select(x, m, out=out), "float32"),
        (lambda lib, x, i, j, m, out: lib.take(x, i, out=out), "float32"),
        (lambda lib, x, i, j, m, out: lib.where(m, x, x * 2, out=out), "float32"),
        (lambda lib, x, i, j, m, out: lib.nonzero(m, out=out), "int64"),
        (lambda lib, x, i, j, m, out: lib.scatter_add(x, 1, i, x, out=out), "float32"),
        (lambda lib, x, i, j, m, out: lib.index_add(x, 0, j, x[:2], out=out), "float32"),
    ]
    for fn, dtype in cases:
        po = pf.empty(0, dtype=getattr(pf, dtype))
        to = torch.empty(0, dtype=getattr(torch, dtype))
        r = fn(pf, a, i, j, m, po)
        fn(torch, t, ti, tj, tm, to)
        assert r is po
        assert_matches(po, to)
    with pytest.raises(RuntimeError, match="dtype"):
        pf.gather(a, 1, i, out=pf.empty(0, dtype=pf.float64))
    x = pf.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        pf.take(x, pf.tensor([0]), out=pf.empty(1))


# ---- errors ------------------------------------------------------------------------------------------------

ERROR_CASES = {
    "getitem out of range": lambda lib: lib.ones(3)[lib.tensor([5])],
    "getitem negative out of range": lambda lib: lib.ones(2, 3)[lib.tensor([-3])],
    "getitem second index": lambda lib: lib.ones(2, 3)[lib.tensor([1]), lib.tensor([5])],
    "getitem slice then index": lambda lib: lib.ones(2, 3)[:, lib.tensor([3])],
    "getitem list": lambda lib: lib.ones(2, 3)[[0, 2]],
    "getitem int32 index": lambda lib: lib.ones(3)[lib.tensor([1], dtype=lib.int32)],
    "getitem float index": lambda lib: lib.ones(3)[lib.tensor([1.0])],
    "getitem float 0-d": lambda lib: lib.ones(3)[lib.tensor(1.5)],
    "getitem mask shape": lambda lib: lib.ones(2, 3)[lib.tensor([True, False, True])],
    # PyTorch's dim bookkeeping counts a mask as one dim for the items after it; plugflow agrees.
    "getitem 2-d mask then slice": lambda lib: lib.ones(2, 3, 4)[lib.ones(2, 3, dtype=lib.bool), 1:],
    "getitem mask shape dim 1": lambda lib: lib.ones(2, 3)[:, lib.tensor([True, False])],
    "getitem broadcast": lambda lib: lib.ones(2, 3)[lib.tensor([0, 1]), lib.tensor([0, 1, 2])],
    "getitem too many": lambda lib: lib.ones(2, 3)[lib.tensor([0]), lib.tensor([0]), lib.tensor([0])],
    "getitem empty dim": lambda lib: lib.ones(0)[lib.tensor([0])],
    "getitem float": lambda lib: lib.ones(3)[1.5],
    "setitem out of range": lambda lib: lib.ones(3).__setitem__(lib.tensor([3]), 1.0),
    "setitem dtype": lambda lib: lib.ones(3).__setitem__(lib.tensor([1]), lib.ones(1, dtype=lib.float64)),
    "setitem shape": lambda lib: lib.ones(2, 3).__setitem__([0, 1], lib.ones(4)),
    "index_put out of range": lambda lib: lib.zeros(2, 3).index_put_((lib.tensor([5]),), lib.tensor(1.0)),
    "index_put accumulate out of range": lambda lib: lib.zeros(2, 3).index_put_(
        (lib.tensor([-3]),), lib.tensor(1.0), accumulate=True),
    "index_put dtype": lambda lib: lib.zeros(2).index_put_((lib.tensor([0]),), lib.ones(1, dtype=lib.int64)),
    "index_put shape": lambda lib: lib.zeros(2, 3).index_put_((lib.tensor([0]),), lib.ones(4)),
    "index_put None": lambda lib: lib.zeros(2, 3).index_put_((lib.tensor([0]), None), lib.tensor(1.0)),
    "gather out of range": lambda lib: lib.ones(2, 3).gather(1, lib.tensor([[5]])),
    "gather negative": lambda lib: lib.ones(2, 3).gather(1, lib.tensor([[-1]])),
    "gather dtype": lambda lib: lib.ones(2, 3).gather(1, lib.tensor([[1]], dtype=lib.int32)),
    "gather dims": lambda lib: lib.ones(2, 3).gather(1, lib.tensor([[[1]]])),
    "gather size": lambda lib: lib.ones(2, 3).gather(1, lib.tensor([[1], [1], [1]])),
    "gather dim": lambda lib: lib.ones(2, 3).gather(2, lib.tensor([[1]])),
    "gather empty dim": lambda lib: lib.ones(2, 0).gather(1, lib.zeros(2, 1, dtype=lib.int64)),
    "scatter out of range": lambda lib: lib.ones(2, 3).scatter_(1, lib.tensor([[5]]), 1.0),
    "scatter negative": lambda lib: lib.ones(2, 3).scatter(1, lib.tensor([[-1]]), 1.0),
    "scatter size": lambda lib: lib.ones(2, 3).scatter(0, lib.tensor([[1, 1, 1, 1]]), 1.0),
    "scatter src size": lambda lib: lib.ones(2, 3).scatter(0, lib.tensor([[1, 1, 1]]), lib.ones(1, 2)),
    "scatter src dims": lambda lib: lib.ones(2, 3).scatter(0, lib.tensor([[1, 1, 1]]), lib.ones(1, 2, 3)),
    "scatter src dtype": lambda lib: lib.ones(2, 3).scatter(1, lib.tensor([[1]]), lib.ones(1, 1, dtype=lib.float64)),
    "scatter index dtype": lambda lib: lib.ones(2, 3).scatter(1, lib.tensor([[1]], dtype=lib.int32), 2.0),
    "scatter_add out of range": lambda lib: lib.ones(2, 3).scatter_add_(1, lib.tensor([[5]]), lib.ones(1, 1)),
    "scatter_add index dtype": lambda lib: lib.ones(2, 3).scatter_add(0, lib.tensor([[1.0, 1, 1]]), lib.ones(1, 3)),
    "index_select out of range": lambda lib: lib.ones(2, 3).index_select(0, lib.tensor([5])),
    "index_select negative": lambda lib: lib.ones(2, 3).t().index_select(0, lib.tensor([-1])),
    "index_select matrix": lambda lib: lib.ones(2, 3).index_select(0, lib.tensor([[1]])),
    "index_select float": lambda lib: lib.ones(2, 3).index_select(0, lib.tensor([1.0])),
    "index_select dim": lambda lib: lib.ones(2, 3).index_select(2, lib.tensor([1])),
    "index_add out of range": lambda lib: lib.ones(2, 3).index_add_(1, lib.tensor([5]), lib.ones(2, 1)),
    "index_add negative": lambda lib: lib.ones(2, 3).index_add_(1, lib.tensor([-1]), lib.ones(2, 1)),
    "index_add dtype": lambda lib: lib.ones(2, 3).index_add(1, lib.tensor([1, 1]), lib.ones(2, 2, dtype=lib.float64)),
    "index_add count": lambda lib: lib.ones(2, 3).index_add(1, lib.tensor([1, 1]), lib.ones(2, 3)),
    "index_add matrix": lambda lib: lib.ones(2, 3).index_add(1, lib.tensor([[1, 1]]), lib.ones(2, 2)),
    "index_add index dtype": lambda lib: lib.ones(2, 3).index_add(0, lib.tensor([1.0]), lib.ones(1, 3)),
    "take out of range": lambda lib: lib.ones(2, 3).take(lib.tensor([6])),
    "take negative out of range": lambda lib: lib.ones(2, 3).take(lib.tensor([-7])),
    "take dtype": lambda lib: lib.ones(2, 3).take(lib.tensor([1], dtype=lib.int32)),
    "take empty": lambda lib: lib.ones(0).take(lib.tensor([0])),
    "masked_fill value dims": lambda lib: lib.ones(2, 3).masked_fill(lib.tensor([True, False, True]), lib.tensor([7.0])),
    "masked_fill_ broadcast": lambda lib: lib.ones(2, 3).masked_fill_(lib.tensor([[[True, False, True]]]), 7),
    "masked_fill shape": lambda lib: lib.ones(2, 3).masked_fill(lib.tensor([True, False]), 7),
    "masked_select dtype": lambda lib: lib.ones(2, 3).masked_select(lib.tensor([1, 0, 1])),
    "masked_select shape": lambda lib: lib.ones(2, 3).masked_select(lib.tensor([True, False])),
    "where condition dtype": lambda lib: lib.where(lib.tensor([1, 0, 1]), lib.ones(3), lib.ones(3)),
    "where shapes": lambda lib: lib.where(lib.tensor([True, False]), lib.ones(2, 3), lib.ones(2, 3)),
    # Found by the fuzzer: indices are checked even where the result is empty.
    "index_select empty axis": lambda lib: lib.zeros(3, 0).index_select(1, lib.tensor([0])),
    "index_select empty self": lambda lib: lib.zeros(2, 0).index_select(0, lib.tensor([-1])),
    "index_select empty 1-d": lambda lib: lib.zeros(0).index_select(0, lib.tensor([0])),
    "index_add empty self": lambda lib: lib.zeros(0, 3).index_add_(1, lib.tensor([5]), lib.zeros(0, 1)),
    "masked_fill uint8 mask values": lambda lib: lib.zeros(3).masked_fill(lib.tensor([2, 0, 1], dtype=lib.uint8), 1),
    "setitem uint8 mask values": lambda lib: lib.zeros(3).__setitem__(lib.tensor([2, 0, 1], dtype=lib.uint8), 1),
}


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_errors_match_torch(name):
    assert_same_error(ERROR_CASES[name])


def test_error_types_plugflow_specific():
    with pytest.raises(NotImplementedError, match="reduce"):
        pf.ones(2, 3).scatter(1, pf.tensor([[0]]), 1.0, reduce="add")
    with pytest.raises(TypeError, match="expected Tensor as element 1 in argument 0, but got NoneType"):
        pf.zeros(2, 3).index_put_((pf.tensor([0]), None), pf.tensor(1.0))
    with pytest.raises(IndexError, match="Index to scalar can have only 1 value"):
        pf.tensor(3.0).index_select(0, pf.tensor([0, 0]))
    with pytest.raises(RuntimeError, match="only supports boolean masks"):
        pf.ones(3).masked_fill(pf.tensor([1, 0, 1]), 2.0)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        pf.zeros(1, 3).expand(2, 3).index_put_((pf.tensor([0]),), pf.tensor(1.0))
    with pytest.raises(IndexError, match="only integers, slices"):
        pf.ones(3)[{0: 1}]


# Found by the fuzzer. PyTorch's index_put_ (t[mask] = v included) sends one boolean or uint8
# mask with a one-element value of any dtype to masked_fill_; an empty index skips gather's and
# scatter's index checks (not src's dtype, nor an in-place self's shared elements).
@pytest.mark.parametrize("code", [
    "lib.zeros(3, dtype=lib.int8).index_put((lib.tensor([True, False, True]),), lib.tensor(2.0))",
    "lib.zeros(3, 2, dtype=lib.float16).index_put((lib.tensor([True, False, True]),), lib.tensor([7]))",
    "lib.zeros(3, dtype=lib.int8).index_put((lib.tensor([True, False, True]),), lib.tensor(300.0))",
    "lib.zeros(3, dtype=lib.int8).index_put((lib.tensor([0, 2]),), lib.tensor(2.0))",
    "lib.zeros(3, dtype=lib.int8).index_put((lib.tensor([True, False, True]),), lib.tensor([1., 2.]))",
    "lib.zeros(2, 3, dtype=lib.int32).index_put((lib.tensor([True, True]), lib.tensor([0, 1])), lib.tensor(5.0))",
    "lib.gather(lib.zeros(2, 3), 0, lib.zeros(0, dtype=lib.int32))",
    "lib.gather(lib.zeros(2, 3), 1, lib.zeros(0, 5, 7, dtype=lib.int64))",
    "lib.zeros(2, 3).scatter_(0, lib.zeros(0, 5, dtype=lib.int32), 1.0)",
    "lib.zeros(2, 3).scatter(0, lib.zeros(0, dtype=lib.int64), lib.zeros(1, dtype=lib.float64))",
    "lib.zeros(1, 3).expand(2, 3).scatter_(0, lib.zeros(0, 3, dtype=lib.int64), 1.0)",
])
def test_mask_put_and_empty_index_rules_match_torch(code):
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307


def test_setitem_value_of_another_dtype_through_a_mask():
    for lib in (torch, pf):
        t = lib.zeros(2, 3, dtype=lib.int32)
        t[lib.tensor([True, False]), 1] = lib.tensor(4.0, dtype=lib.float16)
        t[:, lib.tensor([False, True, True])] = lib.tensor([True])
        if lib is torch:
            expected = t
    assert_matches(t, expected)
    with pytest.raises(RuntimeError, match="without overflow"):
        pf.zeros(2, dtype=pf.uint8)[pf.tensor([True, False])] = pf.tensor(300.0)


def test_gather_of_an_empty_index_keeps_the_graph():
    x = pf.ones(2, 3, requires_grad=True)
    y = x.gather(1, pf.zeros(2, 0, dtype=pf.int64))
    assert y.shape == (2, 0) and y.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [[0.0] * 3] * 2



def test_masked_fill_with_a_tensor_value_checks_that_it_fits():
    # Found by the fuzzer: PyTorch fills with value.item(), converted with overflow checks.
    assert_same_outcome(lambda lib: lib.zeros(3, dtype=lib.uint8).masked_fill_(lib.tensor([True, False, True]),
                                                                            lib.tensor(300., dtype=lib.bfloat16)))
    assert_same_outcome(lambda lib: lib.zeros(3, dtype=lib.uint8).masked_fill(lib.tensor([True, False, True]),
                                                                           lib.tensor(3., dtype=lib.bfloat16)))


@pytest.mark.parametrize("code", ["lib.zeros(7, dtype=lib.float16).index_add(0, lib.tensor([1]), lib.ones(1, dtype=lib.float16), alpha=1e40)",
                                  "lib.zeros(3, dtype=lib.uint8).index_add(0, lib.tensor([1]), lib.ones(1, dtype=lib.uint8), alpha=-1)",
                                  "lib.zeros(3, dtype=lib.int32).index_add(0, lib.tensor([1]), lib.ones(1, dtype=lib.int32), alpha=2.5)"])
def test_index_add_alpha_must_fit_the_dtype(code):
    # Found by the fuzzer: PyTorch's kernel converts alpha with overflow checks.
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307
