"""Creation functions and dtype inference, against PyTorch."""

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import DTYPE_NAMES, assert_matches, assert_same_outcome, dtype_name, pf_dtype, to_torch, torch_dtype


@pytest.mark.parametrize("fn", ["zeros", "ones", "empty", "rand", "randn"])
def test_size_forms(fn):
    f = getattr(pf, fn)
    for args in [(2, 3), ((2, 3),), ([2, 3],), (pf.Size([2, 3]),), (pf.ones(2, 3).shape,)]:
        t = f(*args)
        assert t.shape == (2, 3)
        assert t.dtype is pf.float32
        assert t.device == pf.device("cpu")
    assert f(size=(2, 3)).shape == (2, 3)
    assert f(()).shape == ()  # f() alone raises, as in PyTorch (test_a_size_is_required)
    assert f(0).shape == (0,)
    assert f(np.int64(4)).shape == (4,)


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_zeros_ones_full_every_dtype(name):
    dt = pf_dtype(name)
    assert_matches(pf.zeros(2, 3, dtype=dt), torch.zeros(2, 3, dtype=torch_dtype(name)))
    assert_matches(pf.ones(4, dtype=dt), torch.ones(4, dtype=torch_dtype(name)))
    assert_matches(pf.full((3, 1), 1, dtype=dt), torch.full((3, 1), 1, dtype=torch_dtype(name)))
    assert pf.empty(2, 2, dtype=dt).dtype is dt


@pytest.mark.parametrize("value", [True, 3, -2, 2.5, float("inf")])
def test_full_infers_dtype_from_value(value):
    assert_matches(pf.full((2, 3), value), torch.full((2, 3), value))


@pytest.mark.parametrize("args", [(5,), (0,), (2, 7), (1, 10, 3), (10, 1, -2), (0.0, 1.0, 0.1), (1, 4.0),
                                  (-3.5, 2.25, 0.75), (0, 1, 0.3), (5, 5)])
def test_arange_matches_torch(args):
    assert_matches(pf.arange(*args), torch.arange(*args))


@pytest.mark.parametrize("name", ["int32", "int64", "float32", "float64"])
def test_arange_dtype(name):
    assert_matches(pf.arange(1, 8, 2, dtype=pf_dtype(name)), torch.arange(1, 8, 2, dtype=torch_dtype(name)))


@pytest.mark.parametrize("args", [(0, 1, 5), (-2.5, 10, 7), (3, -3, 4), (0, 1, 1), (1, 2, 0), (0, 100, 101)])
def test_linspace_matches_torch(args):
    assert_matches(pf.linspace(*args), torch.linspace(*args))
    assert_matches(pf.linspace(*args, dtype=pf.float64), torch.linspace(*args, dtype=torch.float64))


def test_rand_randn_ranges_and_seed():
    pf.manual_seed(1234)
    a = pf.rand(10000)
    b = pf.randn(10000, dtype=pf.float64)
    pf.manual_seed(1234)
    assert pf.rand(10000).tolist() == a.tolist()
    assert pf.randn(10000, dtype=pf.float64).tolist() == b.tolist()
    x = a.numpy()
    assert x.min() >= 0.0 and x.max() < 1.0
    assert abs(x.mean() - 0.5) < 0.02
    y = b.numpy()
    assert b.dtype is pf.float64
    assert abs(y.mean()) < 0.05 and abs(y.std() - 1.0) < 0.05
    assert len(set(x.tolist())) > 9000  # not a constant or a short cycle


def test_randint_forms():
    pf.manual_seed(0)
    t = pf.randint(3, 10, (20, 30))
    assert t.dtype is pf.int64 and t.shape == (20, 30)
    v = t.numpy()
    assert v.min() >= 3 and v.max() < 10
    assert set(np.unique(v).tolist()) == set(range(3, 10))
    t = pf.randint(5, (100,))
    assert t.numpy().min() >= 0 and t.numpy().max() < 5
    assert pf.randint(0, 2, size=(3,), dtype=pf.int32).dtype is pf.int32
    assert pf.randint(4, size=(3,)).shape == (3,)
    with pytest.raises(RuntimeError, match="from=5 >= to=5"):
        pf.randint(5, 5, (2,))


@pytest.mark.parametrize("fn", ["empty_like", "zeros_like", "ones_like", "rand_like", "randn_like"])
def test_like_functions(fn):
    src = pf.ones(2, 3, dtype=pf.float64)
    t = getattr(pf, fn)(src)
    assert t.shape == (2, 3) and t.dtype is pf.float64 and t.device == src.device
    t = getattr(pf, fn)(src, dtype=pf.float32)
    assert t.dtype is pf.float32
    if fn in ("zeros_like", "ones_like"):
        assert_matches(t, getattr(torch, fn)(torch.ones(2, 3)))


def test_full_like_and_randint_like():
    src = pf.zeros(3, 2, dtype=pf.int32)
    assert_matches(pf.full_like(src, 7), torch.full_like(torch.zeros(3, 2, dtype=torch.int32), 7))
    r = pf.randint_like(src, 4)
    assert r.dtype is pf.int32 and r.numpy().max() < 4
    r = pf.randint_like(src, 2, 5)
    assert r.numpy().min() >= 2 and r.numpy().max() < 5


INFERENCE_CASES = [
    1, 2.5, True, [], [[], []], [1, 2, 3], [1.0, 2], [True, False], [True, 2], [True, 2.0],
    [[1, 2], [3, 4]], ((1, 2), (3, 4)), [[[1.5]], [[2.5]]], [np.float64(1.0), 2.0], [np.float32(1.0)],
    [np.int32(3), 4], [np.int16(1), np.int16(2)], np.float64(2.0), np.int8(3), [2 ** 40, -(2 ** 40)],
    [float("nan"), float("inf"), -float("inf")], np.arange(6, dtype=np.int16).reshape(2, 3),
    np.ones((2, 2), dtype=np.float16), np.array([True, False]), np.arange(4.0)[::2],
]


@pytest.mark.parametrize("data", INFERENCE_CASES, ids=[repr(c)[:40] for c in INFERENCE_CASES])
def test_tensor_infers_like_torch(data):
    assert_matches(pf.tensor(data), torch.tensor(data))


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_tensor_with_dtype(name):
    data = [[0, 1, 2], [3, 4, 5]]
    assert_matches(pf.tensor(data, dtype=pf_dtype(name)), torch.tensor(data, dtype=torch_dtype(name)))
    data = [[0.0, 1.5, -2.5]]
    if name != "uint8":  # negative float -> uint8 is undefined behaviour in PyTorch
        assert_matches(pf.tensor(data, dtype=pf_dtype(name)), torch.tensor(data, dtype=torch_dtype(name)))


def test_tensor_of_tensors_and_copies():
    src = pf.tensor([1.0, 2.0])
    t = pf.tensor(src)
    t[0] = 5
    assert src.tolist() == [1.0, 2.0]  # a copy
    assert pf.tensor([pf.tensor(1), pf.tensor(2)]).tolist() == [1, 2]
    assert pf.tensor(src, dtype=pf.int64).dtype is pf.int64
    arr = np.ones(3)
    t = pf.tensor(arr)
    arr[0] = 7
    assert t.tolist() == [1.0, 1.0, 1.0]  # tensor() copies numpy data too


def test_tensor_bad_data():
    with pytest.raises(ValueError, match=r"expected sequence of length 2 at dim 1 \(got 1\)"):
        pf.tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match="invalid data type 'str'"):
        pf.tensor(["a"])
    with pytest.raises(TypeError):
        pf.tensor("abc")
    with pytest.raises(TypeError):
        pf.tensor([[1, 2], 3])
    with pytest.raises(RuntimeError, match="Overflow"):
        pf.tensor([2 ** 70])
    with pytest.raises(TypeError, match="zeros\\(\\): argument 'size' must be tuple of ints, but found element of "
                                        "type float at pos 2"):
        pf.zeros(2, 3.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'shape'"):
        pf.ones(shape=(2,))


def test_tensor_constructor_class():
    assert pf.Tensor().shape == (0,)
    assert pf.Tensor(2, 3).shape == (2, 3) and pf.Tensor(2, 3).dtype is pf.float32
    assert_matches(pf.Tensor([1, 2]), torch.Tensor([1, 2]))
    base = pf.zeros(3)
    alias = pf.Tensor(base)
    alias[1] = 4
    assert base.tolist() == [0.0, 4.0, 0.0]  # shares storage


def test_as_tensor_shares_when_possible():
    arr = np.zeros(3, dtype=np.float32)
    t = pf.as_tensor(arr)
    arr[0] = 2
    assert t[0].item() == 2.0
    src = pf.ones(2)
    assert pf.as_tensor(src) is src
    assert pf.as_tensor([1, 2]).dtype is pf.int64
    assert pf.as_tensor(arr, dtype=pf.float64).dtype is pf.float64


def test_default_dtype_and_is_tensor():
    assert pf.get_default_dtype() is pf.float32
    assert pf.is_tensor(pf.ones(1)) and not pf.is_tensor([1])
    assert pf.numel(pf.ones(2, 5)) == 10


def test_exact_sum_check():
    # The smoke test from the README: a broadcast add of int64 into float32, then a reduction.
    value = (pf.ones(2, 3) + pf.arange(3)).sum().item()
    assert value == (torch.ones(2, 3) + torch.arange(3)).sum().item() == 12.0
    assert isinstance(value, float)
    assert dtype_name(to_torch(pf.ones(2, 3) + pf.arange(3)).dtype) == "float32"


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
def test_randperm_is_a_permutation(n):
    p = pf.randperm(n)
    assert p.dtype == pf.int64 and p.shape == (n,)
    assert sorted(p.numpy().tolist()) == list(range(n))
    assert pf.randperm(n, dtype=pf.float32).dtype == pf.float32


def test_randperm_bad_input():
    with pytest.raises(RuntimeError, match="non-negative"):
        pf.randperm(-1)
    with pytest.raises(RuntimeError, match="representable"):
        pf.randperm(300, dtype=pf.uint8)
    with pytest.raises(RuntimeError, match="representable"):
        pf.randperm(3, dtype=pf.bool)


def test_randperm_spreads_every_position():
    # Each value lands in each position about equally often (a biased shuffle would not).
    counts = np.zeros((5, 5))
    for _ in range(2000):
        counts[np.arange(5), pf.randperm(5).numpy()] += 1
    assert counts.min() > 300 and counts.max() < 500


def test_generator_streams():
    g1, g2 = pf.Generator(), pf.Generator()
    assert g1.manual_seed(7) is g1 and g1.initial_seed() == 7
    g2.manual_seed(7)
    a = pf.rand(50, generator=g1)
    before = pf.default_generator.get_state()
    b = pf.rand(50, generator=g2)
    # The same seed gives the same stream; using a generator leaves the default one alone.
    assert np.array_equal(a.numpy(), b.numpy())
    assert np.array_equal(before.numpy(), pf.default_generator.get_state().numpy())
    state = g1.get_state()
    x = pf.randn(10, generator=g1)
    g1.set_state(state)
    assert np.array_equal(x.numpy(), pf.randn(10, generator=g1).numpy())
    assert np.array_equal(pf.randperm(20, generator=g1.manual_seed(3)).numpy(),
                          pf.randperm(20, generator=g2.manual_seed(3)).numpy())
    t = pf.empty(4, 5)[:, ::2]
    t.uniform_(-1, 1, generator=g1.manual_seed(5))
    assert (t.numpy() >= -1).all() and (t.numpy() < 1).all()
    assert pf.manual_seed(3) is pf.default_generator
    assert isinstance(g1.seed(), int)
    with pytest.raises(TypeError):
        g1.set_state(pf.zeros(3))


def test_empty_numpy_arrays_are_contiguous():
    t = pf.from_numpy(np.zeros((0, 3), dtype=np.float32))
    assert t.is_contiguous() == torch.from_numpy(np.zeros((0, 3), dtype=np.float32)).is_contiguous()
    assert pf.empty(3, 0).t().is_contiguous()


# Found by the fuzzer: PyTorch converts arange's bounds to the accumulate type first (int64 for
# integral dtypes, truncating; float for the 16-bit floats), checking that they fit, and counts
# the elements in double except for int64.
@pytest.mark.parametrize("code", [
    "lib.arange(3.7, dtype=lib.int64)",
    "lib.arange(0, 3.5, 1, dtype=lib.int32)",
    "lib.arange(-3, 5, 0.5, dtype=lib.int64)",
    "lib.arange(0.5, 10, 2.7, dtype=lib.uint8)",
    "lib.arange(5, dtype=lib.bool)",
    "lib.arange(1e40, dtype=lib.float16)",
    "lib.arange(0, 1e40)",
    "lib.arange(float('nan'))",
    "lib.arange(2**62, dtype=lib.int32)",
    "lib.arange(-2.5, 2.5, 0.5, dtype=lib.float16)",
])
def test_arange_bounds_are_converted_like_torch(code):
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307



@pytest.mark.parametrize("code", ["lib.linspace(1e10, 1, 17, dtype=lib.uint8)", "lib.linspace(1e10, 1, 1, dtype=lib.uint8)",
                                  "lib.linspace(1e10, 1, 0, dtype=lib.uint8)", "lib.linspace(-1.5, 1, 1, dtype=lib.bool)",
                                  "lib.linspace(-1.5, 1, 2, dtype=lib.bool)", "lib.linspace(0, 1e5, 3, dtype=lib.float16)",
                                  "lib.linspace(2.5, -3, 4, dtype=lib.int8)"])
def test_linspace_converts_its_ends_like_torch(code):
    # Found by the fuzzer: one step fills with start; more convert both ends to the dtype, checked.
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307


@pytest.mark.parametrize("fn", ["zeros", "ones", "empty", "rand", "randn"])
def test_a_size_is_required(fn):
    # Found by the fuzzer: f() made a 0-d tensor; PyTorch requires a size (f(()) is 0-d).
    for lib in (torch, pf):
        with pytest.raises(TypeError):
            getattr(lib, fn)()
        with pytest.raises(TypeError):
            getattr(lib, fn)(dtype=lib.float64)
        assert getattr(lib, fn)(()).shape == ()


@pytest.mark.parametrize("code", ["lib.randint(-2**63, 2**63 - 1, (3,), dtype=lib.int8).shape",
                                  "lib.randint(0, 257, (3,), dtype=lib.uint8).shape",
                                  "lib.randint(-1, 2, (3,), dtype=lib.uint8).shape",
                                  "lib.randint(0, 256, (3,), dtype=lib.uint8).shape",
                                  "lib.randint(0, 3, (3,), dtype=lib.bool).shape",
                                  "lib.randint(0, 2, (3,), dtype=lib.bool).shape"])
def test_randint_bounds_must_fit_the_dtype(code):
    # Found by the fuzzer: PyTorch refuses a from or to - 1 outside the dtype's range.
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307


def test_eye_with_a_zero_dimension_is_empty_whatever_the_other():
    """eye(2**40, 0) and eye(0, 2**40): empty, as PyTorch's (no work in the other size first)."""
    for n, m in ((2**40, 0), (0, 2**40), (0, 0), (3, 0)):
        assert tuple(pf.eye(n, m).shape) == tuple(torch.eye(n, m).shape)


DEFAULT_DTYPE_CALLS = {
    "tensor": lambda lib: lib.tensor([1.5, 2]), "tensor_ints": lambda lib: lib.tensor([1, 2]),
    "tensor_empty": lambda lib: lib.tensor([]), "number": lambda lib: lib.tensor(2.0),
    "as_tensor": lambda lib: lib.as_tensor(1.5), "zeros": lambda lib: lib.zeros(2), "empty": lambda lib: lib.empty(2),
    "full_float": lambda lib: lib.full((2,), 1.5), "full_int": lambda lib: lib.full((2,), 1),
    "rand": lambda lib: lib.rand(2), "randn": lambda lib: lib.randn(2), "arange_float": lambda lib: lib.arange(0.0, 3.0),
    "arange_int": lambda lib: lib.arange(3), "linspace": lambda lib: lib.linspace(0, 1, 3), "eye": lambda lib: lib.eye(2),
    "int_times_float": lambda lib: lib.tensor([1, 2]) * 1.5, "int_true_div": lambda lib: lib.tensor([1, 2]) / 2,
    "sqrt_int": lambda lib: lib.sqrt(lib.tensor([4])), "float32_times_float": lambda lib: lib.ones(2, dtype=lib.float32) * 1.5,
    "int_plus_float32": lambda lib: lib.tensor([1]) + lib.ones(1, dtype=lib.float32),
    "logsumexp_int": lambda lib: lib.logsumexp(lib.tensor([1, 2]), 0), "legacy": lambda lib: lib.Tensor([1]),
    "legacy_sizes": lambda lib: lib.Tensor(2, 3), "linear": lambda lib: lib.nn.Linear(2, 2).weight,
    "batch_norm_buffer": lambda lib: lib.nn.BatchNorm1d(3).running_var, "float": lambda lib: lib.tensor([1]).float(),
}


@pytest.fixture
def restore_default_dtype():
    yield
    pf.set_default_dtype(pf.float32)
    torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("default", ["float64", "float16", "bfloat16", "float32"])
def test_set_default_dtype_matches_torch(default, restore_default_dtype):
    pf.set_default_dtype(getattr(pf, default))
    torch.set_default_dtype(getattr(torch, default))
    assert str(pf.get_default_dtype()).split(".")[1] == default
    def outcome(make, lib):
        try:
            return str(make(lib).dtype).split(".")[1]
        except Exception as e:  # noqa: BLE001 - PyTorch lacks some float16 CPU kernels
            return type(e).__name__
    for name, make in DEFAULT_DTYPE_CALLS.items():
        expected = outcome(make, torch)
        if expected in ("RuntimeError", "NotImplementedError"):  # no float16 CPU kernel in PyTorch 1.13
            continue
        assert outcome(make, pf) == expected, name
    # repr leaves out the default dtype only
    assert repr(pf.tensor([1.5])) == repr(torch.tensor([1.5])).replace("torch", "plugflow")


def test_set_default_dtype_refuses_what_torch_refuses(restore_default_dtype):
    for bad in (pf.int64, pf.bool, "float64", 1):
        with pytest.raises(TypeError):
            pf.set_default_dtype(bad)
    assert pf.get_default_dtype() is pf.float32
