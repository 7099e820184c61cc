"""The random state: plugflow.get_rng_state / set_rng_state, Generator.get_state / set_state,
plugflow.random (seed, fork_rng) and the plugflow.cuda variants. A restored state replays every
random function; states travel through save/load and pickle; a foreign or damaged state raises
the exception types PyTorch raises for the checks it also makes."""

import copy
import io
import pickle

import numpy as np
import pytest
import torch

import plugflow as pf
import plugflow.nn.functional as F
from helpers import seeded_rng


def draws(generator=None):
    """One call of each random function; those that take a generator use `generator`, the rest
    (and all of them when it is None) the default generator."""
    g = {} if generator is None else {"generator": generator}
    x = pf.rand(5, 4, **g)
    return [x, pf.randn(3, 5, dtype=pf.float64, **g), pf.randint(-5, 9, (11,), **g), pf.randperm(13, **g),
            pf.multinomial(x[0], 3, **g), pf.multinomial(x, 6, replacement=True, **g), pf.bernoulli(x, **g),
            pf.normal(x, 2.0, **g), pf.normal(0.5, 3.0, (4,), **g), pf.empty(6).uniform_(-2, 3, **g),
            pf.empty(6).normal_(1, 2, **g), F.dropout(x, 0.4), F.dropout2d(x.reshape(1, 5, 4, 1), 0.5), F.alpha_dropout(x, 0.3, training=True),
            F.rrelu(x - 0.5, training=True), pf.rand_like(x), pf.randn_like(x), pf.randint_like(x, 7),
            pf.nn.init.kaiming_uniform_(pf.empty(3, 4)), pf.nn.init.orthogonal_(pf.empty(3, 4))]


def assert_same_draws(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype is y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def differ(a, b):
    return any(not np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a, b))


def test_state_is_a_byte_tensor_copy():
    rng = seeded_rng(seed_plugflow=True)
    pf.rand(int(rng.integers(1, 100)))
    state, reference = pf.get_rng_state(), torch.get_rng_state()
    assert state.dtype is pf.uint8 and reference.dtype == torch.uint8
    assert state.dim() == reference.dim() == 1 and state.device == pf.device("cpu")
    assert state.shape == (24,)  # plugflow's layout; PyTorch's mt19937 state has 5056 bytes
    kept = state.clone()
    pf.rand(10)
    assert np.array_equal(state.numpy(), kept.numpy())  # a copy: drawing does not change it
    assert not np.array_equal(pf.get_rng_state().numpy(), kept.numpy())
    state.zero_()
    assert np.array_equal(pf.random.get_rng_state().numpy(), pf.default_generator.get_state().numpy())


def test_restoring_the_default_state_replays_every_random_function():
    rng = seeded_rng(seed_plugflow=True)
    pf.rand(int(rng.integers(0, 1000)))
    state = pf.get_rng_state()
    first, second = draws(), draws()
    assert differ(first, second)  # the functions do advance the state
    assert pf.set_rng_state(state) is None
    assert_same_draws(draws(), first)
    assert_same_draws(draws(), second)
    pf.random.set_rng_state(state)
    assert_same_draws(draws(), first)


def test_generator_states_replay_and_move_between_generators():
    rng = seeded_rng()
    g = pf.Generator().manual_seed(int(rng.integers(0, 2**63)))
    pf.rand(int(rng.integers(0, 1000)), generator=g)
    state = g.get_state()
    default_before = pf.get_rng_state()  # for the functions without a generator argument
    first = draws(g)
    assert g.set_state(state) is g
    pf.set_rng_state(default_before)
    assert_same_draws(draws(g), first)
    other = pf.Generator().set_state(state)
    assert other.initial_seed() == g.initial_seed()
    np.testing.assert_array_equal(pf.randn(50, generator=other).numpy(),
                                  pf.randn(50, generator=g.set_state(state)).numpy())
    pf.default_generator.set_state(state)
    np.testing.assert_array_equal(pf.randn(50).numpy(), pf.randn(50, generator=g.set_state(state)).numpy())


def test_states_round_trip_through_save_load_and_pickle(tmp_path):
    rng = seeded_rng(seed_plugflow=True)
    g = pf.Generator().manual_seed(int(rng.integers(0, 2**63)))
    pf.rand(int(rng.integers(0, 100)))
    checkpoint = {"rng_state": pf.get_rng_state(), "generator": g.get_state(), "step": 3}
    expected = draws(), pf.rand(20, generator=g)
    pf.save(checkpoint, tmp_path / "ckpt.pt")
    for restored in (pf.load(tmp_path / "ckpt.pt"), pickle.loads(pickle.dumps(checkpoint)), copy.deepcopy(checkpoint)):
        pf.set_rng_state(restored["rng_state"])
        g.set_state(restored["generator"])
        assert_same_draws(draws(), expected[0])
        np.testing.assert_array_equal(pf.rand(20, generator=g).numpy(), expected[1].numpy())
    in_torch = torch.load(tmp_path / "ckpt.pt")  # PyTorch reads it as the same bytes
    assert in_torch["rng_state"].dtype == torch.uint8
    np.testing.assert_array_equal(in_torch["rng_state"].numpy(), checkpoint["rng_state"].numpy())


def test_foreign_and_damaged_states_raise():
    rng = seeded_rng()
    for set_pf, set_torch in ((pf.set_rng_state, torch.set_rng_state),
                              (pf.Generator().set_state, torch.Generator().set_state)):
        before = pf.get_rng_state()
        wrong_size = int(rng.choice([0, 3, 16, 23, 25, 5056]))
        for pf_state, torch_state, error in [
                ([1, 2], [1, 2], TypeError),
                (pf.zeros(24), torch.zeros(5056), TypeError),
                (pf.zeros(24, dtype=pf.int64), torch.zeros(5056, dtype=torch.int64), TypeError),
                (pf.zeros(wrong_size, dtype=pf.uint8), torch.zeros(wrong_size, dtype=torch.uint8), RuntimeError)]:
            with pytest.raises(error) as expected:
                set_torch(torch_state)
            with pytest.raises(error) as got:
                set_pf(pf_state)
            if error is TypeError:
                assert str(got.value) == str(expected.value)
            else:
                assert f"the input RNG state size to be {wrong_size}" in str(got.value)
        with pytest.raises(RuntimeError, match="5056.*PyTorch generator state"):
            set_pf(pf.from_numpy(torch.get_rng_state().numpy()))
        damaged = pf.get_rng_state()
        damaged[int(rng.integers(0, 4))] ^= int(rng.integers(1, 256))
        with pytest.raises(RuntimeError, match="magic"):
            set_pf(damaged)
        future = pf.get_rng_state()
        future[4] += int(rng.integers(1, 200))
        with pytest.raises(RuntimeError, match="version"):
            set_pf(future)
        assert np.array_equal(pf.get_rng_state().numpy(), before.numpy())  # failures change nothing


def test_seeds():
    rng = seeded_rng()
    seed = pf.seed()
    assert isinstance(seed, int) and 0 <= seed < 2**64 and pf.initial_seed() == seed
    assert pf.random.seed() != seed  # 64 random bits
    for s in (int(rng.integers(0, 2**63)), -1, -int(rng.integers(1, 2**63))):
        assert pf.manual_seed(s) is pf.default_generator
        assert pf.initial_seed() == torch.manual_seed(s).initial_seed() == pf.random.initial_seed()
    first = pf.rand(5)
    pf.random.manual_seed(s)
    np.testing.assert_array_equal(pf.rand(5).numpy(), first.numpy())


@pytest.mark.parametrize("lib", [torch, pf], ids=["torch", "plugflow"])
def test_fork_rng_restores_the_state(lib):
    seeded_rng(seed_plugflow=True)
    state = lib.get_rng_state()
    expected = lib.rand(6)
    lib.set_rng_state(state)
    with lib.random.fork_rng(devices=[]):
        inside = lib.rand(6)
        lib.manual_seed(1)
    assert np.array_equal(inside.numpy(), expected.numpy())
    assert np.array_equal(lib.rand(6).numpy(), expected.numpy())  # as if the block had not drawn
    lib.set_rng_state(state)
    with pytest.raises(ValueError):
        with lib.random.fork_rng(devices=[]):
            lib.rand(3)
            raise ValueError
    assert np.array_equal(lib.rand(6).numpy(), expected.numpy())
    lib.set_rng_state(state)
    with lib.random.fork_rng(enabled=False):
        lib.rand(6)
    assert not np.array_equal(lib.rand(6).numpy(), expected.numpy())


@pytest.mark.skipif(pf.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_cuda_rng_functions_without_a_cuda_device():
    # PyTorch's getters fail without a device; its setters and seeders are deferred until CUDA
    # initializes, i.e. do nothing.
    assert pf.cuda.get_rng_state_all() == torch.cuda.get_rng_state_all() == []
    for call in (pf.cuda.get_rng_state, lambda: pf.cuda.get_rng_state(0), pf.cuda.initial_seed,
                 lambda: pf.random.fork_rng(devices=[0]).__enter__()):
        with pytest.raises(RuntimeError, match="CUDA"):
            call()
    before = pf.get_rng_state()
    other = pf.Generator().manual_seed(5).get_state()
    assert pf.cuda.set_rng_state(other) is None and pf.cuda.set_rng_state(other, "cuda:0") is None
    assert pf.cuda.set_rng_state_all([other]) is None and pf.cuda.set_rng_state_all([]) is None
    for seeder in (lambda: pf.cuda.manual_seed(3), lambda: pf.cuda.manual_seed_all(3), pf.cuda.seed,
                   pf.cuda.seed_all):
        assert seeder() is None
    assert np.array_equal(pf.get_rng_state().numpy(), before.numpy())
    with pytest.raises(TypeError):
        pf.cuda.set_rng_state([1, 2])
    with pytest.raises(RuntimeError, match="magic"):
        pf.cuda.set_rng_state(pf.zeros(24, dtype=pf.uint8))


@pytest.mark.skipif(not pf.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_rng_state_is_the_default_generator_state():
    seeded_rng(seed_plugflow=True)
    assert np.array_equal(pf.cuda.get_rng_state().numpy(), pf.get_rng_state().numpy())
    assert len(pf.cuda.get_rng_state_all()) == pf.cuda.device_count()
    state = pf.cuda.get_rng_state(0)
    x = pf.ones(1000, device="cuda")
    first = [pf.rand(50, device="cuda"), F.dropout(x, 0.5), pf.randn(7, device="cuda")]
    pf.cuda.set_rng_state(state)
    again = [pf.rand(50, device="cuda"), F.dropout(x, 0.5), pf.randn(7, device="cuda")]
    assert_same_draws([t.cpu() for t in again], [t.cpu() for t in first])
    pf.cuda.set_rng_state_all([state] * pf.cuda.device_count())
    assert np.array_equal(pf.get_rng_state().numpy(), state.numpy())
    pf.cuda.manual_seed_all(11)
    assert pf.cuda.initial_seed() == pf.initial_seed() == 11
    with pf.random.fork_rng(devices=[0]):
        pf.rand(10, device="cuda")
    assert np.array_equal(pf.get_rng_state().numpy(), pf.Generator().manual_seed(11).get_state().numpy())
