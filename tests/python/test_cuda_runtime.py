"""plugflow.cuda's runtime API (streams, events, memory statistics) and pinned memory, as far as
they can be checked without a GPU: the names exist with PyTorch's signatures, answer as PyTorch
does before CUDA initializes (statistics 0 / empty), and the calls that need a device raise
RuntimeError naming why. non_blocking is accepted everywhere a copy is made; DataLoader's
pin_memory pins nothing without a device (PyTorch 1.13) and its container walk follows
PyTorch's pin_memory(). The GPU side is tests/gpu/runtime_check.py (tests/gpu/run.sh)."""

import collections

import numpy as np
import pytest
import torch

import plugflow as pf
from plugflow.utils.data import dataloader as pf_dataloader

no_gpu = pytest.mark.skipif(pf.cuda.is_available(), reason="checks the answers without a CUDA device")


def test_the_cuda_runtime_names_exist():
    for name in ("Stream", "Event", "current_stream", "default_stream", "set_stream", "stream", "synchronize",
                 "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                 "memory_stats", "reset_peak_memory_stats", "empty_cache"):
        assert hasattr(pf.cuda, name), name
        assert name in pf.cuda.__all__, name


@no_gpu
def test_statistics_without_a_device_answer_as_pytorch_before_cuda_initializes():
    assert pf.cuda.memory_stats() == collections.OrderedDict() == torch.cuda.memory_stats()
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        assert getattr(pf.cuda, name)() == 0 == getattr(torch.cuda, name)(), name
    pf.cuda.empty_cache()  # a no-op, as PyTorch's
    with pytest.raises(ValueError, match="Expected a cuda device"):
        pf.cuda.memory_stats("cpu")


@no_gpu
@pytest.mark.parametrize("call", [
    lambda: pf.cuda.Stream(),
    lambda: pf.cuda.current_stream(),
    lambda: pf.cuda.default_stream(),
    lambda: pf.cuda.Event().record(),
    lambda: pf.cuda.synchronize(),
    lambda: pf.randn(3).pin_memory(),
])
def test_calls_that_need_a_device_raise_runtime_error_saying_why(call):
    with pytest.raises(RuntimeError, match="CUDA device|page-locked"):
        call()


def test_an_unrecorded_event_is_complete_and_cannot_be_timed():
    e = pf.cuda.Event(enable_timing=True)
    assert e.query()
    e.synchronize()  # nothing recorded: returns at once
    with pytest.raises(RuntimeError, match="recorded"):
        e.elapsed_time(pf.cuda.Event(enable_timing=True))
    with pytest.raises(NotImplementedError):
        pf.cuda.Event(interprocess=True)


def test_stream_none_is_a_no_op_context():
    with pf.cuda.stream(None):
        x = pf.ones(2) + 1
    assert x.tolist() == [2.0, 2.0]


@no_gpu
def test_pageable_tensors_are_not_pinned():
    t = pf.randn(3)
    assert t.is_pinned() is False and torch.randn(3).is_pinned() is False


@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_non_blocking_is_accepted_by_every_copy(dtype):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype("float32")
    t = pf.tensor(x)
    want = torch.tensor(x).to(getattr(torch, dtype), non_blocking=True).numpy()
    for got in (t.to(getattr(pf, dtype), non_blocking=True), t.to("cpu", getattr(pf, dtype), True),
                t.to(device="cpu", dtype=getattr(pf, dtype), non_blocking=True, copy=True),
                pf.empty(3, 4, dtype=getattr(pf, dtype)).copy_(t, non_blocking=True)):
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(TypeError, match="non_blocking"):
        t.to(pf.float64, non_blocking=1)


@no_gpu
def test_dataloader_pin_memory_without_a_device_yields_the_plain_batches():
    data = pf.utils.data.TensorDataset(pf.arange(8.0).view(4, 2), pf.arange(4))
    batches = list(pf.utils.data.DataLoader(data, batch_size=2, pin_memory=True))
    assert [b[0].tolist() for b in batches] == [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]]]
    assert not any(t.is_pinned() for b in batches for t in b)


class _Pinnable:
    """A custom batch with its own pin_memory(), as PyTorch's docs suggest."""

    def __init__(self):
        self.pinned = False

    def pin_memory(self):
        self.pinned = True
        return self


def test_the_pin_memory_walk_follows_pytorchs_containers():
    Pair = collections.namedtuple("Pair", "a b")
    custom = _Pinnable()
    out = pf_dataloader._pin_memory({"x": (custom, "text"), "n": Pair(1, [2, 3]), "s": b"raw"})
    assert out["x"] == [custom, "text"]  # tuples become lists, as PyTorch 1.13's pin_memory()
    assert custom.pinned
    assert out["n"] == Pair(1, [2, 3]) and type(out["n"]) is Pair
    assert out["s"] == b"raw"
    from torch.utils.data._utils.pin_memory import pin_memory as torch_pin_memory
    custom2 = _Pinnable()
    assert torch_pin_memory({"x": (custom2, "text"), "n": Pair(1, [2, 3]), "s": b"raw"}) == \
        {"x": [custom2, "text"], "n": Pair(1, [2, 3]), "s": b"raw"}


def test_cpu_memory_stats_are_an_ordered_dict_of_sorted_keys():
    stats = pf.memory_stats("cpu")
    assert isinstance(stats, collections.OrderedDict)
    assert list(stats) == sorted(stats)
    assert stats["allocated_bytes.all.current"] == pf.memory_allocated()


def _a_stream(lib):
    """A stream object of `lib`: the current CUDA stream on a GPU; without one neither library can
    create a CUDA stream, and an uninitialized stream object is enough for the argument checks."""
    if lib.cuda.is_available():
        return lib.cuda.current_stream()
    return torch._C.Stream.__new__(torch._C.Stream) if lib is torch else pf.cuda.Stream.__new__(pf.cuda.Stream)


@pytest.mark.parametrize("arg", [5, None, "stream", object()])
def test_record_stream_takes_a_stream(arg):
    with pytest.raises(RuntimeError) as expected:  # PyTorch 1.13's argument parser raises RuntimeError
        torch.ones(2).record_stream(arg)
    with pytest.raises(type(expected.value), match="must be Stream, not"):
        pf.ones(2).record_stream(arg)


def test_record_stream_of_a_cpu_tensor_is_not_implemented():
    with pytest.raises(NotImplementedError, match="'aten::record_stream' with arguments from the 'CPU' backend"):
        torch.ones(2).record_stream(_a_stream(torch))
    with pytest.raises(NotImplementedError, match="'aten::record_stream' with arguments from the 'CPU' backend"):
        pf.ones(2).record_stream(_a_stream(pf))
