"""Basic indexing and slicing (views sharing storage), __setitem__, iteration and views ops."""

import operator

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_matches, assert_same_outcome, make_pair, random_shape, to_torch


def random_index(rng, shape):
    """A random basic index for a tensor of `shape`: ints (maybe negative), slices with steps,
    None and at most one Ellipsis."""
    items = []
    dims_left = len(shape)
    dim = 0
    used_ellipsis = False
    while True:
        r = rng.random()
        if r < 0.15:
            items.append(None)
        elif r < 0.25 and not used_ellipsis:
            items.append(Ellipsis)
            used_ellipsis = True
            dim = len(shape)  # the rest of the index is for trailing dims; keep it simple
            break
        elif dims_left > 0:
            size = shape[dim]
            if rng.random() < 0.4 and size > 0:
                items.append(int(rng.integers(-size, size)))
            else:
                start = None if rng.random() < 0.3 else int(rng.integers(-size - 2, size + 2))
                stop = None if rng.random() < 0.3 else int(rng.integers(-size - 2, size + 2))
                step = None if rng.random() < 0.3 else int(rng.integers(1, 4))
                items.append(slice(start, stop, step))
            dims_left -= 1
            dim += 1
        if dims_left == 0 or rng.random() < 0.2:
            break
    return tuple(items) if len(items) != 1 or rng.random() < 0.5 else items[0]


@pytest.mark.parametrize("seed", range(40))
def test_random_basic_indexing_matches_torch_and_shares_storage(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=4, max_size=5)
    a, ta = make_pair(rng, shape, "float32")
    index = random_index(rng, shape)
    view, tview = a[index], ta[index]
    assert_matches(view, tview)
    # A view: writing through it changes the base exactly where PyTorch's does.
    view.fill_(100.0)
    tview.fill_(100.0)
    assert_matches(a, ta)
    if view.numel() > 0:
        assert view.storage_offset() == tview.storage_offset()
        assert view.stride() == tview.stride()


def test_views_share_memory():
    base = pf.arange(12.0).reshape(3, 4)
    row = base[1]
    col = base[:, 2]
    assert row.data_ptr() == base.data_ptr() + 4 * 4
    assert col.stride() == (4,)
    row[0] = -1
    col[2] = -2
    assert base.tolist() == [[0, 1, 2, 3], [-1, 5, 6, 7], [8, 9, -2, 11]]
    t = base.t()
    assert not t.is_contiguous() and t.contiguous().is_contiguous()
    assert t.contiguous().tolist() == to_torch(base).t().tolist()
    c = base.contiguous()
    assert c is base


def test_index_errors():
    t = pf.ones(3)
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 3"):
        t[5]
    with pytest.raises(IndexError, match="index -4 is out of bounds for dimension 0 with size 3"):
        t[-4]
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 1 with size 3"):
        pf.ones(2, 3)[0, 3]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        pf.ones(2, 2)[0, 0, 0]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        t[::-1]
    with pytest.raises(IndexError, match="only integers, slices"):
        t["a"]
    with pytest.raises(IndexError, match="single ellipsis"):
        pf.ones(2, 2)[..., 0, ...]
    with pytest.raises(IndexError, match="0-dim"):
        pf.tensor(1.0)[0]
    # Advanced indexing (lists, tensors, masks) is tested in test_indexing_ops.py.
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        pf.ones(3)[[0, 3]]


def test_special_index_kinds():
    a, ta = pf.arange(6).reshape(2, 3), torch.arange(6).reshape(2, 3)
    assert_matches(a[pf.tensor(1)], ta[torch.tensor(1)])  # a 0-d integer tensor indexes like an int
    assert_matches(a[np.int64(1), np.int32(2)], ta[1, 2])
    assert_matches(a[True], ta[True])
    assert_matches(a[False], ta[False])
    assert_matches(a[None, ..., None], ta[None, ..., None])
    assert_matches(a[...], ta[...])
    assert_matches(a[()], ta[()])


@pytest.mark.parametrize("seed", range(20))
def test_setitem_matches_torch(seed):
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_dims=3, max_size=4)
    a, ta = make_pair(rng, shape, "float64")
    index = random_index(rng, shape)
    target_shape = ta[index].shape
    kind = rng.integers(0, 3)
    if kind == 0:
        a[index] = 7.5
        ta[index] = 7.5
    else:
        # A value broadcast to the target: its trailing dims only, or all of it.
        vshape = tuple(target_shape[int(rng.integers(0, len(target_shape) + 1)):]) if kind == 1 else target_shape
        v, tv = make_pair(rng, vshape, "float64")
        a[index] = v
        ta[index] = tv
    assert_matches(a, ta)


def test_setitem_value_kinds():
    a, ta = pf.zeros(2, 3), torch.zeros(2, 3)
    a[0] = [1, 2, 3]
    ta[0] = torch.tensor([1.0, 2.0, 3.0])
    a[1, 1:] = pf.tensor([5, 6])  # an int64 value cast into float32
    ta[1, 1:] = torch.tensor([5, 6])
    a[:, 0] = True
    ta[:, 0] = True
    assert_matches(a, ta)
    i = pf.zeros(3, dtype=pf.int32)
    i[1] = 2.7  # truncated, as PyTorch does
    assert i.tolist() == [0, 2, 0]
    with pytest.raises(RuntimeError):
        a[0] = pf.ones(4)


def test_iteration_len_and_scalars():
    t = pf.arange(6).reshape(3, 2)
    rows = list(t)
    assert len(rows) == 3 and all(r.shape == (2,) for r in rows)
    assert rows[2].tolist() == [4, 5]
    assert len(t) == 3
    assert [r.tolist() for r in reversed(t)] == [[4, 5], [2, 3], [0, 1]]
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(pf.tensor(1.0))
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(pf.tensor(1.0))
    assert float(pf.tensor([2.5])) == 2.5
    assert int(pf.tensor(-2.7)) == -2
    assert operator.index(pf.tensor(3)) == 3
    assert list(range(10))[pf.tensor(4)] == 4
    assert bool(pf.tensor([0.0])) is False
    assert 4 in pf.arange(6) and 9 not in pf.arange(6)
    assert pf.tensor([1.0, 2.0]) in pf.tensor([[1.0, 2.0]])
    with pytest.raises(ValueError, match="only one element tensors"):
        float(pf.ones(2))
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        bool(pf.ones(2))
    with pytest.raises(RuntimeError, match="no values is ambiguous"):
        bool(pf.ones(0))
    with pytest.raises(TypeError, match="only integer tensors"):
        operator.index(pf.tensor(1.5))
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        pf.ones(2).item()
    with pytest.raises(RuntimeError, match="__contains__ only supports"):
        "a" in pf.ones(2)


@pytest.mark.parametrize("dtype", ["bool", "int64", "float32", "float16", "bfloat16", "uint8"])
def test_item_and_tolist_types(dtype):
    a, ta = make_pair(np.random.default_rng(0), (2, 3), dtype)
    assert a.tolist() == ta.tolist()
    assert a.t().tolist() == ta.t().tolist()
    assert a[1, 2].item() == ta[1, 2].item()
    assert type(a[0, 0].item()) is type(ta[0, 0].item())
    assert pf.tensor(5).tolist() == 5


def test_view_ops_match_torch():
    a, ta = make_pair(np.random.default_rng(1), (2, 3, 4), "float32")
    cases = [
        lambda x: x.view(6, 4), lambda x: x.view(-1), lambda x: x.view((4, -1)), lambda x: x.reshape(4, 6),
        lambda x: x.permute(2, 0, 1), lambda x: x.permute((1, 2, 0)), lambda x: x.transpose(0, 2),
        lambda x: x.transpose(-1, -2).reshape(-1), lambda x: x[:, :1].expand(2, 5, 4),
        lambda x: x[:, :1].expand(-1, 3, -1), lambda x: x[:1].squeeze(), lambda x: x[:1].squeeze(0),
        lambda x: x.unsqueeze(1), lambda x: x.unsqueeze(-1), lambda x: x.flatten(), lambda x: x.flatten(1),
        lambda x: x.flatten(0, 1), lambda x: x.narrow(2, 1, 2), lambda x: x.select(1, -1), lambda x: x[0].t(),
        lambda x: x[0].T, lambda x: x.swapaxes(0, 1), lambda x: x.view_as(x.reshape(4, 6)),
        lambda x: x[:, :1].expand_as(x), lambda x: x.repeat(2, 1, 2), lambda x: x[0].repeat(3, 1, 1),
        lambda x: x.as_strided((2, 2), (1, 2), 1),
    ]
    for case in cases:
        assert_matches(case(a), case(ta))
    assert_matches(a.T, ta.permute(2, 1, 0))  # .T reverses every dim
    assert_matches(pf.reshape(a, (3, 8)), torch.reshape(ta, (3, 8)))
    assert_matches(pf.permute(a, (2, 1, 0)), torch.permute(ta, (2, 1, 0)))
    assert_matches(pf.transpose(a, 0, 1), torch.transpose(ta, 0, 1))
    assert_matches(pf.squeeze(a[:1]), torch.squeeze(ta[:1]))
    assert_matches(pf.flatten(a), torch.flatten(ta))


def test_view_errors():
    with pytest.raises(RuntimeError, match="invalid for input of size 6"):
        pf.ones(2, 3).view(4)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        pf.ones(2, 3).t().view(6)
    assert pf.ones(2, 3).t().reshape(6).shape == (6,)
    with pytest.raises(RuntimeError, match="t\\(\\) expects a tensor with <= 2 dimensions"):
        pf.ones(2, 2, 2).t()
    with pytest.raises(IndexError, match="Dimension out of range"):
        pf.ones(2, 3).transpose(0, 3)
    with pytest.raises(TypeError):
        pf.ones(6).view(2.0, 3)


def test_shape_size_stride():
    t = pf.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4) and isinstance(t.shape, pf.Size)
    assert t.size() == t.shape and t.size(1) == 3 and t.size(-1) == 4
    assert t.stride() == (12, 4, 1) and t.stride(0) == 12
    assert t.ndim == t.dim() == 3 and t.numel() == 24 and t.nelement() == 24
    assert t.element_size() == 4 and t.itemsize == 4 and t.nbytes == 96
    assert t.shape[1:] == pf.Size([3, 4]) and isinstance(t.shape[1:], pf.Size)
    assert repr(t.shape) == "plugflow.Size([2, 3, 4])"
    assert repr(pf.Size([])) == "plugflow.Size([])"
    assert pf.Size([2, 3]).numel() == 6
    assert isinstance(t.shape + (5,), pf.Size)
    with pytest.raises(IndexError):
        t.size(3)


# Found by the fuzzer: PyTorch's THPVariable_setitem converts the value first (a number must fit
# even where False selects nothing), writes a lone True through self[None], and its copy_to
# fills with a 0-d tensor as with a number (it must fit) when the shapes differ.
@pytest.mark.parametrize("code", [
    "t = lib.zeros(2, 3, dtype=lib.int32); t[True] = lib.tensor(5., dtype=lib.float64)",
    "t = lib.zeros(2, 2); t[True, 0] = lib.tensor(3., dtype=lib.float64)",
    "t = lib.zeros(8, dtype=lib.int32); t[-7:] = lib.tensor(2**40)",
    "t = lib.zeros(3, dtype=lib.uint8); t[None] = lib.tensor(1e10)",
    "t = lib.zeros(3, dtype=lib.uint8); t[1:] = lib.tensor([1e10, 1.])",
    "t = lib.zeros(3, dtype=lib.uint8); t[False] = -2147483649",
    "t = lib.zeros(3, dtype=lib.uint8); t[False] = -1",
    "t = lib.zeros(()); t[...] = lib.tensor(3.)",
    "t = lib.zeros(3, dtype=lib.int8); t[lib.tensor([0, 2])] = lib.tensor(1.5)",
])
def test_setitem_value_conversion_matches_torch(code):
    def run(lib):
        env = {"lib": lib}
        exec(code, env)  # noqa: S102
        return env["t"]
    assert_same_outcome(run)


def test_setitem_of_a_0d_tensor_value_keeps_its_gradient():
    grads = []
    for lib in (torch, pf):
        x = lib.zeros(3, requires_grad=True)
        v = lib.tensor(2.0, requires_grad=True)
        y = x * 1
        y[1:] = v
        y.sum().backward()
        grads.append(v.grad.item())
    assert grads == [2.0, 2.0]
