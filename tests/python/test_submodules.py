"""The torch submodules training scripts import besides the core, against PyTorch 1.13 on fresh
random inputs: nn.utils.rnn (and packed input to the recurrent layers), testing, optim.swa_utils,
autograd.functional, nn.utils.parametrize / weight_norm / spectral_norm, nn.utils.fusion and
utils.hooks. Values, shapes, float64 gradients and the exception classes of bad input."""

import warnings

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import (assert_matches, assert_param_grads_match, assert_same_outcome, from_torch, load_from_torch,
                     seeded_rng, to_torch)

TOL = dict(rtol=1e-9, atol=1e-10)


def leaf_pair(rng, shape, low=-1.0, high=1.0):
    data = rng.uniform(low, high, size=shape)
    return pf.from_numpy(data.copy()).requires_grad_(), torch.from_numpy(data.copy()).requires_grad_()


def random_lengths(rng, batch, max_len, sorted_):
    lengths = rng.integers(1, max_len + 1, size=batch)
    lengths[rng.integers(0, batch)] = max_len  # the padded length is the longest sequence's
    return sorted(lengths.tolist(), reverse=True) if sorted_ else lengths.tolist()


# ---- nn.utils.rnn ---------------------------------------------------------------------------------

def assert_packed_matches(p, t, **tol):
    assert isinstance(p, pf.nn.utils.rnn.PackedSequence)
    assert_matches(p.data, t.data.detach(), **tol)
    assert_matches(p.batch_sizes, t.batch_sizes)
    for a, b in ((p.sorted_indices, t.sorted_indices), (p.unsorted_indices, t.unsorted_indices)):
        assert (a is None) == (b is None)
        if b is not None:
            assert_matches(a, b)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pack_pad_round_trip_and_gradients(batch_first, enforce_sorted):
    rng = seeded_rng()
    batch, max_len = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    lengths = random_lengths(rng, batch, max_len, enforce_sorted)
    shape = (batch, max_len, 3, 2) if batch_first else (max_len, batch, 3, 2)
    x_p, x_t = leaf_pair(rng, shape)
    use_tensor = bool(rng.integers(0, 2))
    packed_t = torch.nn.utils.rnn.pack_padded_sequence(x_t, torch.tensor(lengths) if use_tensor else lengths,
                                                       batch_first, enforce_sorted)
    packed_p = pf.nn.utils.rnn.pack_padded_sequence(x_p, pf.tensor(lengths) if use_tensor else lengths,
                                                    batch_first, enforce_sorted)
    assert_packed_matches(packed_p, packed_t, **TOL)
    total = max_len + int(rng.integers(0, 3))
    out_t, len_t = torch.nn.utils.rnn.pad_packed_sequence(packed_t, batch_first, padding_value=-7.5,
                                                          total_length=total)
    out_p, len_p = pf.nn.utils.rnn.pad_packed_sequence(packed_p, batch_first, padding_value=-7.5,
                                                       total_length=total)
    assert_matches(out_p, out_t.detach(), **TOL)
    assert_matches(len_p, len_t)
    g = rng.uniform(-1, 1, size=tuple(out_t.shape))
    out_t.backward(torch.from_numpy(g))
    out_p.backward(pf.from_numpy(g))
    assert_matches(x_p.grad, x_t.grad, **TOL)


def test_pad_sequence_pack_sequence_unpack():
    rng = seeded_rng()
    count = int(rng.integers(1, 5))
    data = [rng.uniform(-1, 1, size=(int(rng.integers(1, 5)), 2)) for _ in range(count)]
    seqs_t = [torch.from_numpy(d.copy()).requires_grad_() for d in data]
    seqs_p = [pf.from_numpy(d.copy()).requires_grad_() for d in data]
    for batch_first in (False, True):
        padded_t = torch.nn.utils.rnn.pad_sequence(seqs_t, batch_first, padding_value=3.0)
        padded_p = pf.nn.utils.rnn.pad_sequence(seqs_p, batch_first, padding_value=3.0)
        assert_matches(padded_p, padded_t.detach(), **TOL)
    packed_t = torch.nn.utils.rnn.pack_sequence(seqs_t, enforce_sorted=False)
    packed_p = pf.nn.utils.rnn.pack_sequence(seqs_p, enforce_sorted=False)
    assert_packed_matches(packed_p, packed_t, **TOL)
    for a, b in zip(pf.nn.utils.rnn.unpack_sequence(packed_p), torch.nn.utils.rnn.unpack_sequence(packed_t)):
        assert_matches(a, b.detach(), **TOL)
    g = rng.uniform(-1, 1, size=tuple(packed_t.data.shape))
    packed_t.data.backward(torch.from_numpy(g))
    packed_p.data.backward(pf.from_numpy(g))
    for a, b in zip(seqs_p, seqs_t):
        assert_matches(a.grad, b.grad, **TOL)
    # pad_sequence keeps the first sequence's dtype; unpad_sequence cuts the padding off.
    assert_same_outcome(lambda lib: lib.nn.utils.rnn.pad_sequence([lib.tensor([1, 2]), lib.tensor([1.5])]))
    assert_same_outcome(lambda lib: tuple(lib.nn.utils.rnn.unpad_sequence(
        lib.tensor([[1, 2], [3, 0], [4, 0]]), lib.tensor([3, 1]))))


def test_packed_sequence_conversions():
    for lib in (torch, pf):
        packed = lib.nn.utils.rnn.pack_sequence([lib.tensor([1, 2, 3]), lib.tensor([4])])
        assert packed._fields == ("data", "batch_sizes", "sorted_indices", "unsorted_indices")
        assert packed.to(lib.int64) is packed
        assert packed.float().data.dtype == lib.float32 and packed.double().data.dtype == lib.float64
        assert packed.cpu() is packed and not packed.is_cuda
        assert packed.batch_sizes.tolist() == [2, 1, 1]
        data, batch_sizes, _, _ = packed
        assert data.tolist() == [1, 4, 2, 3]


@pytest.mark.parametrize("case", range(9))
def test_pack_bad_input_raises_as_pytorch(case):
    def run(lib):
        rnn_utils = lib.nn.utils.rnn
        x = lib.zeros(4, 3, 2)
        if case == 0:
            return rnn_utils.pack_padded_sequence(x, [4, 3, 5])          # not decreasing
        if case == 1:
            return rnn_utils.pack_padded_sequence(x, [4, 3])             # wrong count
        if case == 2:
            return rnn_utils.pack_padded_sequence(x, [4, 0, 0])          # a zero length
        if case == 3:
            return rnn_utils.pack_padded_sequence(lib.zeros(0, 3), [0, 0, 0])
        if case == 4:
            return rnn_utils.pack_padded_sequence(x, [[4, 3, 2]])        # 2-d lengths
        if case == 5:
            return rnn_utils.pad_sequence([])
        if case == 6:
            return rnn_utils.pad_sequence([lib.zeros(2, 3), lib.zeros(3, 2)])
        if case == 7:
            return rnn_utils.pad_sequence([lib.tensor(1.0)])
        packed = rnn_utils.pack_sequence([lib.zeros(3), lib.zeros(1)])
        return rnn_utils.pad_packed_sequence(packed, total_length=2)
    assert_same_outcome(run)


def packed_rnn_case(rng, name, batch_first, bidirectional):
    """A random recurrent layer of a kind (float64) as a (plugflow, torch) pair, with its kwargs."""
    kwargs = dict(num_layers=int(rng.integers(1, 3)), bidirectional=bidirectional, bias=bool(rng.integers(0, 2)),
                  batch_first=batch_first)
    if name == "RNN":
        kwargs["nonlinearity"] = ["tanh", "relu"][int(rng.integers(0, 2))]
    if name == "LSTM" and rng.integers(0, 2):
        kwargs["proj_size"] = 2
    torch.manual_seed(int(rng.integers(0, 2**31)))
    mod_t = getattr(torch.nn, name)(3, 4, dtype=torch.float64, **kwargs)
    mod_p = getattr(pf.nn, name)(3, 4, dtype=pf.float64, **kwargs)
    load_from_torch(mod_p, mod_t)
    return mod_p, mod_t, kwargs


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("enforce_sorted", [True, False])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrent_layers_take_packed_sequences(name, enforce_sorted, with_state, bidirectional):
    rng = seeded_rng()
    batch_first = bool(rng.integers(0, 2))
    mod_p, mod_t, kwargs = packed_rnn_case(rng, name, batch_first, bidirectional)
    batch, max_len = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    lengths = random_lengths(rng, batch, max_len, enforce_sorted)
    x_p, x_t = leaf_pair(rng, (batch, max_len, 3) if batch_first else (max_len, batch, 3))
    leaves_p, leaves_t = [x_p], [x_t]
    state_p = state_t = None
    if with_state:
        num_states = kwargs["num_layers"] * (2 if kwargs["bidirectional"] else 1)
        h_p, h_t = leaf_pair(rng, (num_states, batch, kwargs.get("proj_size") or 4))
        leaves_p.append(h_p)
        leaves_t.append(h_t)
        state_p, state_t = h_p, h_t
        if name == "LSTM":
            c_p, c_t = leaf_pair(rng, (num_states, batch, 4))
            leaves_p.append(c_p)
            leaves_t.append(c_t)
            state_p, state_t = (h_p, c_p), (h_t, c_t)
    packed_t = torch.nn.utils.rnn.pack_padded_sequence(x_t, lengths, batch_first, enforce_sorted)
    packed_p = pf.nn.utils.rnn.pack_padded_sequence(x_p, lengths, batch_first, enforce_sorted)
    out_t, hidden_t = mod_t(packed_t, state_t)
    out_p, hidden_p = mod_p(packed_p, state_p)
    assert_packed_matches(out_p, out_t, **TOL)
    results = [(out_p.data, out_t.data)]
    results += list(zip(hidden_p, hidden_t)) if name == "LSTM" else [(hidden_p, hidden_t)]
    loss_p, loss_t = 0, 0
    for a, b in results:
        assert_matches(a, b.detach(), **TOL)
        g = rng.uniform(-1, 1, size=tuple(b.shape))
        loss_t = loss_t + (b * torch.from_numpy(g)).sum()
        loss_p = loss_p + (a * pf.from_numpy(g)).sum()
    loss_t.backward()
    loss_p.backward()
    for a, b in zip(leaves_p, leaves_t):
        assert_matches(a.grad, b.grad, **TOL)
    assert_param_grads_match(mod_p, mod_t, **TOL)


def test_packed_input_checks():
    def run(lib, case):
        lib.manual_seed(0)
        lstm = lib.nn.LSTM(3, 4)
        packed = lib.nn.utils.rnn.pack_sequence([lib.zeros(3, 3), lib.zeros(2, 3)])
        if case == 0:
            return lstm(packed, (lib.zeros(1, 3, 4), lib.zeros(1, 3, 4)))     # wrong batch in the states
        if case == 1:
            return lib.nn.GRU(2, 4)(packed)                                    # wrong input size
        return lib.nn.RNN(3, 4)(packed, lib.zeros(1, 2, 5))                   # wrong hidden size
    for case in range(3):
        assert_same_outcome(lambda lib: run(lib, case))


# ---- testing -------------------------------------------------------------------------------------

def outcome(fn):
    """("ok", None) or (exception class name, message) of fn()."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class is compared
        return type(e).__name__, str(e)
    return "ok", None


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int64", "bool"])
def test_assert_close_default_tolerances_and_messages(dtype):
    rng = seeded_rng()
    shape = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(0, 3))))
    base = torch.from_numpy(rng.uniform(-2, 2, size=shape)).to(getattr(torch, dtype))
    # Perturbations around each dtype's default tolerance, so both outcomes occur.
    scale = {"float16": 1e-3, "bfloat16": 1.6e-2, "float32": 1.3e-6, "float64": 1e-7}.get(dtype, 1)
    delta = torch.from_numpy(np.asarray(rng.uniform(-3, 3, size=shape) * scale * (rng.random(shape) < 0.3)))
    other = (base.double() + delta * base.double().abs()).to(base.dtype)
    if dtype == "bool":
        other = base ^ torch.from_numpy(np.asarray(rng.random(shape) < 0.2))
    for a, b in ((base, other), (other, base)):
        expected = outcome(lambda: torch.testing.assert_close(a, b))
        got = outcome(lambda: pf.testing.assert_close(from_torch(a), from_torch(b)))
        assert got[0] == expected[0], (got, expected)
        if expected[1] is not None:
            assert got[1] == expected[1]


def test_assert_close_options_and_containers():
    def run(lib, case):
        t = lib.tensor
        cases = [
            lambda: lib.testing.assert_close(t([1.0, float("nan")]), t([1.0, float("nan")])),
            lambda: lib.testing.assert_close(t([1.0, float("nan")]), t([1.0, float("nan")]), equal_nan=True),
            lambda: lib.testing.assert_close(t([1.0, 2.0]), t([1.0, 2.0], dtype=lib.float64)),
            lambda: lib.testing.assert_close(t([1.0, 2.0]), t([1.0, 2.0], dtype=lib.float64), check_dtype=False),
            lambda: lib.testing.assert_close(t([1.0, 2.0]), t([1.1, 2.0]), rtol=0.2, atol=0),
            lambda: lib.testing.assert_close(t([1.0]), t([1.1]), rtol=0.2),
            lambda: lib.testing.assert_close(t([1.0]), t([2.0]), msg="custom"),
            lambda: lib.testing.assert_close(t([1.0]), t([2.0]), msg=lambda m: "prefix: " + m),
            lambda: lib.testing.assert_close([t(1.0), {"a": t([2, 3])}], [t(1.0), {"a": t([2, 4])}]),
            lambda: lib.testing.assert_close({"a": 1}, {"b": 1}),
            lambda: lib.testing.assert_close([1, 2], [1, 2, 3]),
            lambda: lib.testing.assert_close(1, 1.0),
            lambda: lib.testing.assert_close(1.0, 1.0 + 1e-9),
            lambda: lib.testing.assert_close(True, False),
            lambda: lib.testing.assert_close(None, t(1.0)),
            lambda: lib.testing.assert_close(t([1.0]), np.array([1.0])),
            lambda: lib.testing.assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.5])),
            lambda: lib.testing.assert_close(t([[1.0, 2.0]]), t([1.0, 2.0])),
            lambda: lib.testing.assert_close(t(1.0), t(1.5)),
        ]
        cases[case]()
    for case in range(19):
        expected = outcome(lambda: run(torch, case))
        got = outcome(lambda: run(pf, case))
        assert got[0] == expected[0], (case, got, expected)
        # Messages name values the same way, but tensor reprs and class names differ by library.
        if expected[1] is not None and "torch" not in expected[1]:
            assert got[1] == expected[1], case


def test_assert_allclose_deprecated_form():
    def run(lib, case):
        t = lib.tensor
        [lambda: lib.testing.assert_allclose(t([1.0, 2.0]), t([1.0, 2.00005])),          # within 1e-4
         lambda: lib.testing.assert_allclose(t([1.0, 2.0]), t([1.0, 2.001])),
         lambda: lib.testing.assert_allclose(t([1.0, float("nan")]), [1.0, float("nan")]),
         lambda: lib.testing.assert_allclose(t([1, 2]), t([1.0, 2.0], dtype=lib.float64)),
         lambda: lib.testing.assert_allclose(t([1.0]), t([1.5]), msg="custom")][case]()
    for case in range(5):
        with warnings.catch_warnings(record=True) as warned_t:
            warnings.simplefilter("always")
            expected = outcome(lambda: run(torch, case))
        with warnings.catch_warnings(record=True) as warned_p:
            warnings.simplefilter("always")
            got = outcome(lambda: run(pf, case))
        assert got == expected, case
        # PyTorch warns after a comparison that passed.
        assert [w.category for w in warned_p] == [w.category for w in warned_t] == \
            ([FutureWarning] if expected[0] == "ok" else [])


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32",
                                   "float64"])
def test_make_tensor(dtype):
    rng = seeded_rng(seed_plugflow=True)
    shape = tuple(int(s) for s in rng.integers(1, 5, size=int(rng.integers(1, 4))))
    low, high = sorted(rng.uniform(0 if dtype == "uint8" else -20, 20, size=2))
    kwargs = {} if dtype == "bool" else dict(low=float(low), high=float(high))
    noncontiguous = bool(rng.integers(0, 2))
    t = pf.testing.make_tensor(shape, dtype=getattr(pf, dtype), device="cpu", noncontiguous=noncontiguous,
                               exclude_zero=True, **kwargs)
    reference = torch.testing.make_tensor(shape, dtype=getattr(torch, dtype), device="cpu",
                                          noncontiguous=noncontiguous, exclude_zero=True, **kwargs)
    assert t.dtype is getattr(pf, dtype) and tuple(t.shape) == tuple(reference.shape)
    assert t.is_contiguous() == reference.is_contiguous()
    values = to_torch(t).double()
    if dtype != "bool":
        import math
        lo, hi = (math.floor(low), math.ceil(high)) if "int" in dtype else (low, high)
        lo, hi = max(lo, 0) if dtype == "uint8" else lo, hi
        # Floating values are computed in the dtype: they may round past the bounds by a few ulps.
        slack = 4 * torch.finfo(getattr(torch, dtype)).eps * max(abs(lo), abs(hi)) if "float" in dtype else 0
        assert bool((values >= lo - slack).all() and (values <= hi + slack).all())
    assert bool((values != 0).all())
    for lib in (torch, pf):
        with pytest.raises(ValueError):
            lib.testing.make_tensor(2, dtype=lib.int64, device="cpu", requires_grad=True)
        with pytest.raises(ValueError):
            lib.testing.make_tensor(2, dtype=lib.float32, device="cpu", low=2, high=1)
    assert pf.testing.make_tensor(2, 3, dtype=pf.float64, device="cpu", requires_grad=True).requires_grad


# ---- autograd.functional -------------------------------------------------------------------------

def assert_nested_matches(a, b, **tol):
    if isinstance(b, tuple):
        assert isinstance(a, tuple) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            assert_nested_matches(x, y, **tol)
    else:
        assert_matches(a, b.detach(), **tol)


def one_output(lib, x, y):
    return (x.tanh().unsqueeze(1) * y.exp()).sum() + (x * x * x).sum() * y.sum()


def two_outputs(lib, x, y):
    return x.sin() * y[:1], (x.unsqueeze(1) * y).exp()


def leaf_pairs(rng, shapes):
    pairs = [leaf_pair(rng, s) for s in shapes]
    return tuple(p for p, _ in pairs), tuple(t for _, t in pairs)


@pytest.mark.parametrize("fn", ["jacobian", "hessian"])
@pytest.mark.parametrize("tuple_inputs", [False, True])
def test_jacobian_hessian(fn, tuple_inputs):
    rng = seeded_rng()
    n, m = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    inputs_p, inputs_t = leaf_pairs(rng, [(n,), (m,)])
    create_graph = bool(rng.integers(0, 2))
    vectorize = bool(rng.integers(0, 2))
    if fn == "jacobian":
        f = two_outputs if tuple_inputs else (lambda lib, x: (x.unsqueeze(1) * x).tanh())
    else:
        f = one_output if tuple_inputs else (lambda lib, x: one_output(lib, x, x))
    if not tuple_inputs:
        inputs_p, inputs_t = inputs_p[0], inputs_t[0]
    res_t = getattr(torch.autograd.functional, fn)(lambda *a: f(torch, *a), inputs_t, create_graph=create_graph,
                                                   vectorize=vectorize)
    res_p = getattr(pf.autograd.functional, fn)(lambda *a: f(pf, *a), inputs_p, create_graph=create_graph,
                                                vectorize=vectorize)
    assert_nested_matches(res_p, res_t, **TOL)
    if create_graph:  # the result is differentiable in the inputs
        flat_t = [t for t in torch.utils._pytree.tree_flatten(res_t)[0]]
        flat_p = [t for t in flatten(res_p)]
        loss_t = sum((t * t).sum() for t in flat_t if t.requires_grad)
        loss_p = sum((t * t).sum() for t in flat_p if t.requires_grad)
        loss_t.backward()
        loss_p.backward()
        for a, b in zip(flatten(inputs_p), flatten(inputs_t)):
            assert (a.grad is None) == (b.grad is None)
            if b.grad is not None:
                assert_matches(a.grad, b.grad, **TOL)


def flatten(x):
    return [t for el in x for t in flatten(el)] if isinstance(x, tuple) else [x]


@pytest.mark.parametrize("fn", ["vjp", "jvp", "vhp", "hvp"])
def test_vector_products(fn):
    rng = seeded_rng()
    n, m = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    inputs_p, inputs_t = leaf_pairs(rng, [(n,), (m,)])
    f = two_outputs if fn in ("vjp", "jvp") else one_output
    v_shapes = {"vjp": [(n,), (n, m)], "jvp": [(n,), (m,)]}.get(fn, [(n,), (m,)])
    v_p, v_t = leaf_pairs(rng, v_shapes)
    create_graph = bool(rng.integers(0, 2))
    out_t, res_t = getattr(torch.autograd.functional, fn)(lambda *a: f(torch, *a), inputs_t, v_t,
                                                          create_graph=create_graph)
    out_p, res_p = getattr(pf.autograd.functional, fn)(lambda *a: f(pf, *a), inputs_p, v_p,
                                                       create_graph=create_graph)
    assert_nested_matches(out_p, out_t, **TOL)
    assert_nested_matches(res_p, res_t, **TOL)
    for a, b in zip(flatten(res_p), flatten(res_t)):
        assert a.requires_grad == b.requires_grad
    if create_graph:
        sum(t.sum() for t in flatten(res_t)).backward()
        sum(t.sum() for t in flatten(res_p)).backward()
        for a, b in zip(inputs_p + v_p, inputs_t + v_t):
            assert (a.grad is None) == (b.grad is None)
            if b.grad is not None:
                assert_matches(a.grad, b.grad, **TOL)


@pytest.mark.parametrize("case", range(14))
def test_autograd_functional_bad_input(case):
    def run(lib):
        F = lib.autograd.functional
        x, y = lib.ones(3, dtype=lib.float64), lib.ones(2, dtype=lib.float64)
        return [
            lambda: F.jacobian(lambda a: a * 2, 3.0),
            lambda: F.jacobian(lambda a, b: a * 2, (x, y), strict=True),           # independent of b
            lambda: F.jacobian(lambda a: lib.ones(2, dtype=lib.float64), x, strict=True),
            lambda: F.jacobian(lambda a: a * 2, x, strict=True, vectorize=True),
            lambda: F.hessian(lambda a: a * 2, x),                                  # not one element
            lambda: F.hessian(lambda a: (a * 2).sum(), x, strict=True),             # linear
            lambda: F.vjp(lambda a: a * 2, x),                                      # v None, 3 outputs
            lambda: F.vjp(lambda a: a * 2, x, y),                                   # v of the wrong size
            lambda: F.jvp(lambda a, b: a * b.sum(), (x, y), (x,)),                  # v too short
            lambda: F.hvp(lambda a: (a * a).sum(), x, (x, x)),
            lambda: F.vhp(lambda a: (a, a), x, x),
            lambda: F.jvp(lambda a: a, [x], x),                                     # a list is not a tuple
            lambda: F.jacobian(lambda a: a[:0], x),                                 # no output elements
            lambda: F.jacobian(lambda a: a.sum(), lib.ones(0, dtype=lib.float64)),  # no input elements
        ][case]()
    assert_same_outcome(lambda lib: run(lib) and None)


# ---- optim.swa_utils -----------------------------------------------------------------------------

def swa_models(lib, seed):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4), lib.nn.ReLU(), lib.nn.Linear(4, 2)).double()


@pytest.mark.parametrize("avg", ["equal", "ema", "ema_buffers"])
def test_averaged_model_and_update_bn(avg):
    rng = seeded_rng()
    model_t = swa_models(torch, 0)
    model_p = swa_models(pf, 0)
    load_from_torch(model_p, model_t)
    kwargs = {}
    if avg != "equal":
        decay = float(rng.uniform(0.5, 0.99))
        kwargs["avg_fn"] = lambda averaged, current, n: decay * averaged + (1 - decay) * current
        kwargs["use_buffers"] = avg == "ema_buffers"
    swa_t = torch.optim.swa_utils.AveragedModel(model_t, **kwargs)
    swa_p = pf.optim.swa_utils.AveragedModel(model_p, **kwargs)
    opt_t = torch.optim.SGD(model_t.parameters(), lr=0.1)
    opt_p = pf.optim.SGD(model_p.parameters(), lr=0.1)
    batches = [rng.uniform(-1, 1, size=(int(rng.integers(2, 6)), 3)) for _ in range(int(rng.integers(1, 5)))]
    for data in batches:
        for lib, model, opt, swa in ((torch, model_t, opt_t, swa_t), (pf, model_p, opt_p, swa_p)):
            opt.zero_grad()
            (model(lib.from_numpy(data.copy())) ** 2).sum().backward()
            opt.step()
            swa.update_parameters(model)
    assert int(swa_p.n_averaged) == int(swa_t.n_averaged) == len(batches)
    state_t = swa_t.state_dict()
    for name, value in swa_p.state_dict().items():
        assert_matches(value, state_t[name], **TOL)
    loader = [(torch.from_numpy(d.copy()), 0) for d in batches]
    torch.optim.swa_utils.update_bn(loader, swa_t)
    pf.optim.swa_utils.update_bn([(pf.from_numpy(d.copy()), 0) for d in batches], swa_p)
    assert swa_p.training and swa_p.module[1].momentum == 0.1
    state_t = swa_t.state_dict()
    for name, value in swa_p.state_dict().items():
        assert_matches(value, state_t[name], **TOL)
    x = rng.uniform(-1, 1, size=(3, 3))
    swa_t.eval()
    swa_p.eval()
    assert_matches(swa_p(pf.from_numpy(x.copy())), swa_t(torch.from_numpy(x.copy())).detach(), **TOL)


@pytest.mark.parametrize("strategy", ["cos", "linear"])
def test_swalr_schedule(strategy):
    rng = seeded_rng()
    anneal_epochs = int(rng.integers(0, 6))
    swa_lr = [float(rng.uniform(0.01, 0.1)), float(rng.uniform(0.01, 0.1))]
    lrs = {}
    for lib in (torch, pf):
        params = [lib.nn.Parameter(lib.zeros(2)), lib.nn.Parameter(lib.zeros(2))]
        opt = lib.optim.SGD([{"params": params[:1]}, {"params": params[1:], "lr": 0.3}], lr=0.5)
        warmup = lib.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        for _ in range(2):
            opt.step()
            warmup.step()
        sched = lib.optim.swa_utils.SWALR(opt, swa_lr, anneal_epochs=anneal_epochs, anneal_strategy=strategy)
        lrs[lib] = [sched.get_last_lr()]
        for _ in range(anneal_epochs + 3):
            opt.step()
            sched.step()
            lrs[lib].append(sched.get_last_lr())
    np.testing.assert_allclose(np.array(lrs[pf]), np.array(lrs[torch]), rtol=1e-15, atol=0)
    for kwargs in (dict(anneal_strategy="exp"), dict(anneal_epochs=-1), dict(anneal_epochs=1.5), dict(swa_lr=[0.1])):
        def make(lib):
            opt = lib.optim.SGD([lib.nn.Parameter(lib.zeros(2))], lr=0.5)
            return lib.optim.swa_utils.SWALR(opt, **{"swa_lr": 0.05, **kwargs}) and None
        assert_same_outcome(make)


# ---- nn.utils: weight_norm, spectral_norm, parametrize, fusion; utils.hooks ------------------------

def module_pair(rng, make):
    """make(lib) built in both libraries (float64), plugflow's with torch's state."""
    torch.manual_seed(int(rng.integers(0, 2**31)))
    mod_t = make(torch).double()
    mod_p = make(pf).double()
    load_from_torch(mod_p, mod_t)
    return mod_p, mod_t


def forward_backward_compare(rng, mod_p, mod_t, x_shape, leaves=()):
    """Runs both modules on the same input, backpropagates the same upstream gradient and compares
    the output, the input's gradient and the gradients of every parameter."""
    x_p, x_t = leaf_pair(rng, x_shape)
    out_p, out_t = mod_p(x_p), mod_t(x_t)
    assert_matches(out_p, out_t.detach(), **TOL)
    g = rng.uniform(-1, 1, size=tuple(out_t.shape))
    out_t.backward(torch.from_numpy(g))
    out_p.backward(pf.from_numpy(g))
    assert_matches(x_p.grad, x_t.grad, **TOL)
    assert_param_grads_match(mod_p, mod_t, **TOL)


CONV_OR_LINEAR = {
    "linear": (lambda lib: lib.nn.Linear(3, 4), (2, 3)),
    "conv2d": (lambda lib: lib.nn.Conv2d(2, 3, 3), (2, 2, 5, 4)),
    "conv_transpose1d": (lambda lib: lib.nn.ConvTranspose1d(2, 3, 3), (2, 2, 5)),
}


@pytest.mark.parametrize("kind", list(CONV_OR_LINEAR))
def test_weight_norm(kind):
    rng = seeded_rng()
    make, x_shape = CONV_OR_LINEAR[kind]
    dim = [0, 1, -1, None][int(rng.integers(0, 4))]
    mod_t = torch.nn.utils.weight_norm(make(torch).double(), dim=dim)
    mod_p = pf.nn.utils.weight_norm(make(pf).double(), dim=dim)
    assert sorted(mod_p.state_dict()) == sorted(mod_t.state_dict())
    with torch.no_grad():  # g away from ||v||, so that the normalization shows
        mod_t.weight_g.mul_(torch.from_numpy(rng.uniform(0.5, 2, size=tuple(mod_t.weight_g.shape))))
    load_from_torch(mod_p, mod_t)
    forward_backward_compare(rng, mod_p, mod_t, x_shape)
    torch.nn.utils.remove_weight_norm(mod_t)
    pf.nn.utils.remove_weight_norm(mod_p)
    assert sorted(mod_p.state_dict()) == sorted(mod_t.state_dict())
    assert_matches(mod_p.weight, mod_t.weight.detach(), **TOL)
    for lib in (torch, pf):
        mod = lib.nn.utils.weight_norm(make(lib))
        with pytest.raises(RuntimeError):
            lib.nn.utils.weight_norm(mod)
        with pytest.raises(ValueError):
            lib.nn.utils.remove_weight_norm(mod, "bias")


@pytest.mark.parametrize("kind", list(CONV_OR_LINEAR))
@pytest.mark.parametrize("flavour", ["hook", "parametrization"])
def test_spectral_norm(kind, flavour):
    rng = seeded_rng()
    make, x_shape = CONV_OR_LINEAR[kind]
    iterations = int(rng.integers(1, 3))
    apply_t = torch.nn.utils.spectral_norm if flavour == "hook" else torch.nn.utils.parametrizations.spectral_norm
    apply_p = pf.nn.utils.spectral_norm if flavour == "hook" else pf.nn.utils.parametrizations.spectral_norm
    mod_t = apply_t(make(torch).double(), n_power_iterations=iterations)
    mod_p = apply_p(make(pf).double(), n_power_iterations=iterations)
    assert sorted(mod_p.state_dict()) == sorted(mod_t.state_dict())
    load_from_torch(mod_p, mod_t)  # the weights and torch's random power-iteration vectors
    for training in (True, True, False):  # each training forward iterates and updates u, v
        mod_t.train(training)
        mod_p.train(training)
        for m in (mod_t, mod_p):
            m.zero_grad()
        forward_backward_compare(rng, mod_p, mod_t, x_shape)
        state_t = mod_t.state_dict()
        for name, value in mod_p.state_dict().items():
            assert_matches(value, state_t[name], **TOL)
    if flavour == "hook":
        # A state dict round trip keeps the version metadata; removing leaves the normalized weight.
        fresh = apply_p(make(pf).double())
        fresh.load_state_dict(mod_p.state_dict())
        torch.nn.utils.remove_spectral_norm(mod_t)
        pf.nn.utils.remove_spectral_norm(mod_p)
        assert sorted(mod_p.state_dict()) == sorted(mod_t.state_dict())
        assert_matches(mod_p.weight, mod_t.weight.detach(), **TOL)
        for lib in (torch, pf):
            with pytest.raises(ValueError):
                lib.nn.utils.remove_spectral_norm(make(lib))
            with pytest.raises(ValueError):
                lib.nn.utils.spectral_norm(make(lib), n_power_iterations=0)
    else:
        for lib in (torch, pf):
            with pytest.raises(IndexError):
                lib.nn.utils.parametrizations.spectral_norm(make(lib), dim=5)
            with pytest.raises(ValueError):
                lib.nn.utils.parametrizations.spectral_norm(make(lib), name="nothing")


def symmetric(lib):
    class Symmetric(lib.nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(0, 1)

        def right_inverse(self, A):
            return A.triu()
    return Symmetric()


def scaled(lib, factor):
    class Scaled(lib.nn.Module):
        def forward(self, X):
            return X * factor

        def right_inverse(self, A):
            return A / factor
    return Scaled()


def test_parametrize_register_chain_assign_remove():
    rng = seeded_rng()
    factor = float(rng.uniform(0.5, 2))
    mod_p, mod_t = module_pair(rng, lambda lib: lib.nn.Linear(4, 4))
    for lib, mod in ((torch, mod_t), (pf, mod_p)):
        P = lib.nn.utils.parametrize
        P.register_parametrization(mod, "weight", symmetric(lib))
        P.register_parametrization(mod, "weight", scaled(lib, factor))
        assert P.is_parametrized(mod) and P.is_parametrized(mod, "weight") and not P.is_parametrized(mod, "bias")
        assert type(mod).__name__ == "ParametrizedLinear" and P.type_before_parametrizations(mod) is lib.nn.Linear
    assert sorted(mod_p.state_dict()) == sorted(mod_t.state_dict())
    state_t = mod_t.state_dict()
    for name, value in mod_p.state_dict().items():
        assert_matches(value, state_t[name], **TOL)
    forward_backward_compare(rng, mod_p, mod_t, (3, 4))
    with torch.nn.utils.parametrize.cached(), pf.nn.utils.parametrize.cached():
        assert mod_p.weight is mod_p.weight and mod_t.weight is mod_t.weight
        assert_matches(mod_p.weight, mod_t.weight.detach(), **TOL)
    assert mod_p.weight is not mod_p.weight
    # Assigning goes through the right inverses; the Parameter object stays the same.
    value = rng.uniform(-1, 1, size=(4, 4))
    original_p = mod_p.parametrizations.weight.original
    mod_t.weight = torch.from_numpy(value.copy())
    mod_p.weight = pf.from_numpy(value.copy())
    assert mod_p.parametrizations.weight.original is original_p
    assert_matches(mod_p.parametrizations.weight.original, mod_t.parametrizations.weight.original.detach(), **TOL)
    assert_matches(mod_p.weight, mod_t.weight.detach(), **TOL)
    leave = bool(rng.integers(0, 2))
    torch.nn.utils.parametrize.remove_parametrizations(mod_t, "weight", leave_parametrized=leave)
    pf.nn.utils.parametrize.remove_parametrizations(mod_p, "weight", leave_parametrized=leave)
    assert type(mod_p) is pf.nn.Linear and isinstance(mod_p.weight, pf.nn.Parameter)
    assert sorted(mod_p.state_dict()) == sorted(mod_t.state_dict())
    assert_matches(mod_p.weight, mod_t.weight.detach(), **TOL)


@pytest.mark.parametrize("case", range(6))
def test_parametrize_bad_input(case):
    def run(lib):
        P = lib.nn.utils.parametrize
        mod = lib.nn.Linear(3, 4)

        class Shrink(lib.nn.Module):
            def forward(self, X):
                return X[:1]

        class ToInt(lib.nn.Module):
            def forward(self, X):
                return X.long()
        if case == 0:
            return P.register_parametrization(mod, "weight", Shrink())       # changes the shape
        if case == 1:
            return P.register_parametrization(mod, "weight", ToInt())        # changes the dtype
        if case == 2:
            return P.register_parametrization(mod, "missing", symmetric(lib))
        if case == 3:
            return P.remove_parametrizations(mod, "weight")
        if case == 4:
            P.register_parametrization(mod, "weight", Shrink(), unsafe=True)
            return tuple(mod.weight.shape)
        P.register_parametrization(mod, "bias", Shrink(), unsafe=True)
        mod.bias = lib.zeros(1)                                              # no right_inverse
    assert_same_outcome(lambda lib: run(lib) and None)


@pytest.mark.parametrize("kind", ["conv2d", "conv_transpose2d", "linear"])
def test_fusion(kind):
    rng = seeded_rng()
    bias = bool(rng.integers(0, 2))
    make_layer, bn_cls, x_shape, transpose = {
        "conv2d": (lambda lib: lib.nn.Conv2d(2, 3, 3, bias=bias), "BatchNorm2d", (2, 2, 5, 5), False),
        "conv_transpose2d": (lambda lib: lib.nn.ConvTranspose2d(2, 3, 3), "BatchNorm2d", (2, 2, 4, 4), True),
        "linear": (lambda lib: lib.nn.Linear(4, 3), "BatchNorm1d", (5, 4), False),
    }[kind]
    layer_p, layer_t = module_pair(rng, make_layer)
    bn_p, bn_t = module_pair(rng, lambda lib: getattr(lib.nn, bn_cls)(3))
    with torch.no_grad():
        for t in (bn_t.running_mean, bn_t.weight, bn_t.bias):
            t.copy_(torch.from_numpy(rng.uniform(-1, 1, size=3)))
        bn_t.running_var.copy_(torch.from_numpy(rng.uniform(0.5, 2, size=3)))
    load_from_torch(bn_p, bn_t)
    for m in (layer_p, layer_t, bn_p, bn_t):
        m.eval()
    if kind == "linear":
        fused_t = torch.nn.utils.fusion.fuse_linear_bn_eval(layer_t, bn_t)
        fused_p = pf.nn.utils.fusion.fuse_linear_bn_eval(layer_p, bn_p)
    else:
        fused_t = torch.nn.utils.fuse_conv_bn_eval(layer_t, bn_t, transpose=transpose)
        fused_p = pf.nn.utils.fuse_conv_bn_eval(layer_p, bn_p, transpose=transpose)
    assert isinstance(fused_p.weight, pf.nn.Parameter) and fused_p is not layer_p
    x_p, x_t = leaf_pair(rng, x_shape)
    assert_matches(fused_p(x_p), fused_t(x_t).detach(), **TOL)
    assert_matches(fused_p(x_p), bn_t(layer_t(x_t)).detach(), rtol=1e-9, atol=1e-9)
    layer_p.train()
    with pytest.raises(AssertionError):
        pf.nn.utils.fuse_conv_bn_eval(layer_p, bn_p)


def test_utils_hooks_removable_handle():
    for lib in (torch, pf):
        calls = []
        mod = lib.nn.Linear(2, 2)
        handle = mod.register_forward_hook(lambda *args: calls.append(1))
        assert isinstance(handle, lib.utils.hooks.RemovableHandle)
        mod(lib.zeros(1, 2))
        handle.remove()
        mod(lib.zeros(1, 2))
        assert calls == [1]


def test_spectral_norm_reads_version_0_state_dicts():
    # Before version 1 the state dict held name_orig, name and name_u: name_v is solved for.
    rng = seeded_rng()
    mod_p, mod_t = (lib.nn.utils.spectral_norm(lib.nn.Linear(3, 4).double()) for lib in (pf, torch))
    weight_orig = rng.uniform(-1, 1, size=(4, 3))
    sigma = float(rng.uniform(0.5, 2))
    u = rng.uniform(-1, 1, size=4)
    u /= np.linalg.norm(u)
    old = {"weight_orig": weight_orig, "weight": weight_orig / sigma, "weight_u": u, "bias": rng.uniform(-1, 1, 4)}
    mod_t.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in old.items()})
    mod_p.load_state_dict({k: pf.from_numpy(v.copy()) for k, v in old.items()})
    assert_matches(mod_p.weight_v, mod_t.weight_v, rtol=1e-7, atol=1e-9)
