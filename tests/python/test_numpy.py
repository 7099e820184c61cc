"""numpy interop: from_numpy and .numpy() share memory, every dtype round-trips."""

import gc
import io
import pickle
import weakref

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import DTYPE_NAMES, assert_matches, pf_dtype

NUMPY_NAMES = [n for n in DTYPE_NAMES if n != "bfloat16"]


@pytest.mark.parametrize("name", NUMPY_NAMES)
def test_round_trip_every_dtype(name):
    rng = np.random.default_rng(0)
    arr = (rng.random((3, 4)) * 10).astype(name)
    t = pf.from_numpy(arr)
    assert t.dtype is pf_dtype(name)
    assert t.shape == arr.shape
    back = t.numpy()
    assert back.dtype == arr.dtype
    np.testing.assert_array_equal(back, arr)
    assert_matches(t, torch.from_numpy(arr))
    np.testing.assert_array_equal(pf.tensor(arr).numpy(), arr)


def test_from_numpy_shares_memory_both_ways():
    arr = np.zeros((2, 3), dtype=np.float32)
    t = pf.from_numpy(arr)
    arr[0, 1] = 5
    assert t[0, 1].item() == 5.0
    t[1] = 7
    assert arr[1].tolist() == [7, 7, 7]
    assert t.data_ptr() == arr.ctypes.data


def test_from_numpy_keeps_the_array_alive():
    arr = np.arange(5.0)
    ref = weakref.ref(arr)
    t = pf.from_numpy(arr)
    del arr
    gc.collect()
    assert ref() is not None  # the tensor's storage holds the array
    view = t[1:]
    del t
    gc.collect()
    assert view.tolist() == [1.0, 2.0, 3.0, 4.0]
    del view
    gc.collect()
    assert ref() is None  # released with the last tensor on the storage


def test_from_numpy_non_contiguous():
    base = np.arange(24, dtype=np.int64).reshape(4, 6)
    for arr in (base[:, ::2], base.T, base[1:3, 2:5], base[:, None, 3], np.broadcast_to(base[0], (3, 6))):
        t = pf.from_numpy(arr)
        assert t.tolist() == arr.tolist()
        assert t.stride() == tuple(s // 8 for s in arr.strides)


def test_from_numpy_errors():
    with pytest.raises(ValueError, match="negative"):
        pf.from_numpy(np.arange(4)[::-1])
    with pytest.raises(TypeError, match="can't convert np.ndarray of type numpy.uint16"):
        pf.from_numpy(np.zeros(2, dtype=np.uint16))
    with pytest.raises(TypeError, match="complex128"):
        pf.from_numpy(np.zeros(2, dtype=np.complex128))
    with pytest.raises(TypeError, match="expected np.ndarray"):
        pf.from_numpy([1, 2])
    with pytest.raises(ValueError, match="byte order"):
        pf.from_numpy(np.zeros(2, dtype=">f4"))
    # tensor() converts a non-native byte order instead of refusing it
    assert pf.tensor(np.array([1.5, 2.5], dtype=">f8")).tolist() == [1.5, 2.5]


def test_numpy_shares_memory_and_strides():
    t = pf.arange(12, dtype=pf.float64).reshape(3, 4)
    arr = t.numpy()
    arr[0, 0] = -1
    assert t[0, 0].item() == -1.0
    tt = t.t()
    a = tt.numpy()
    assert a.strides == (8, 32)
    assert a.tolist() == tt.tolist()
    sl = t[:, 1::2].numpy()
    assert sl.tolist() == [[1, 3], [5, 7], [9, 11]]
    sl[...] = 0
    assert t[:, 1].tolist() == [0, 0, 0]
    # The array keeps the tensor's memory alive.
    arr = pf.ones(3).numpy()
    gc.collect()
    assert arr.tolist() == [1.0, 1.0, 1.0]


def test_numpy_errors_and_array_protocol():
    with pytest.raises(TypeError, match="BFloat16"):
        pf.ones(2, dtype=pf.bfloat16).numpy()
    t = pf.tensor([[1, 2], [3, 4]], dtype=pf.int32)
    a = np.asarray(t)
    assert a.dtype == np.int32 and a.tolist() == [[1, 2], [3, 4]]
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert np.add(np.ones(2), pf.ones(2).numpy()).tolist() == [2.0, 2.0]


def test_numpy_of_a_tensor_that_requires_grad():
    rng = np.random.default_rng()
    data = rng.standard_normal((3, 4)).astype(np.float32)
    p, t = pf.from_numpy(data.copy()).requires_grad_(), torch.from_numpy(data.copy()).requires_grad_()
    for convert in (lambda x: x.numpy(), np.asarray, lambda x: np.array(x, dtype=np.float64),
                    lambda x: (x * 2).numpy(), lambda x: x[1:].numpy()):
        with pytest.raises(RuntimeError) as expected:
            convert(t)
        with pytest.raises(RuntimeError) as got:
            convert(p)
        assert str(got.value) == str(expected.value)  # "Can't call numpy() on Tensor that requires grad..."
    # No grad mode, detach() and force=True (PyTorch 1.13) give the values, sharing memory.
    with pf.no_grad(), torch.no_grad():
        np.testing.assert_array_equal(p.numpy(), t.numpy())
    np.testing.assert_array_equal(p.detach().numpy(), data)
    for x in (p, t):
        forced = x.numpy(force=True)
        np.testing.assert_array_equal(forced, data)
        forced[0, 0] = 7.0
        assert x[0, 0].item() == 7.0
    np.testing.assert_array_equal((p * 2).numpy(force=True), (t * 2).numpy(force=True))
    np.testing.assert_array_equal(p.t().numpy(force=True), t.t().numpy(force=True))
    for x in (p, t):
        with pytest.raises(TypeError):
            x.numpy(True)  # force is keyword-only
    # Reading values without numpy() still works on tensors that require grad, as in PyTorch.
    assert p.tolist() == t.tolist() and p[0, 1].item() == t[0, 1].item()
    assert "requires_grad=True" in repr(p) and "grad_fn" in repr(p * 1)
    parameter = pf.nn.Parameter(pf.from_numpy(data.copy()))
    copy = pickle.loads(pickle.dumps(parameter))
    np.testing.assert_array_equal(copy.detach().numpy(), data)
    buf = io.BytesIO()
    pf.save({"p": p, "y": p * 2}, buf)
    buf.seek(0)
    loaded = pf.load(buf)
    assert loaded["p"].requires_grad and loaded["y"].requires_grad
    np.testing.assert_array_equal(loaded["y"].detach().numpy(), (t * 2).detach().numpy())


def test_loading_and_sampling_with_tensors_that_require_grad():
    rng = np.random.default_rng()
    samples = [pf.from_numpy(rng.standard_normal(3).astype(np.float32)).requires_grad_() for _ in range(4)]
    # Worker processes send the leaves pickled; they arrive as leaves that require grad, as in
    # PyTorch (which cannot batch them in a worker: its stack into shared memory refuses them).
    received = list(pf.utils.data.DataLoader(samples, batch_size=None, num_workers=1))
    assert len(received) == len(samples)
    for got, sent in zip(received, samples):
        assert got.requires_grad and got.is_leaf
        np.testing.assert_array_equal(got.detach().numpy(), sent.detach().numpy())
    weights = pf.tensor([0.0, 1.0, 2.0], dtype=pf.float64, requires_grad=True)
    picks = list(pf.utils.data.WeightedRandomSampler(weights, 50))
    assert set(picks) <= {1, 2} and len(picks) == 50
