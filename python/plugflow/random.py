"""plugflow.random: the default generator's seed and state, as torch.random.

plugflow has one default generator for every device (docs/design.md), a Philox stream whose
state is its seed and counter offset. get_rng_state() returns that state as a uint8 tensor in
plugflow's own 24-byte layout (not PyTorch's 5056-byte mt19937 state): set_rng_state() with it
replays the same numbers from any random function, and it saves, loads and pickles like any
tensor. A state of another length or layout (a PyTorch state, a damaged file) raises."""

import contextlib

from ._C import Generator, default_generator, manual_seed, initial_seed

__all__ = ["Generator", "default_generator", "manual_seed", "seed", "initial_seed", "get_rng_state",
           "set_rng_state", "fork_rng"]


def seed():
    """Seeds the default generator with a non-deterministic random number and returns it."""
    return default_generator.seed()


def get_rng_state():
    """The default generator's state, as a torch.ByteTensor."""
    return default_generator.get_state()


def set_rng_state(new_state):
    """Restores the default generator's state from get_rng_state()."""
    default_generator.set_state(new_state)


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True):
    """Restores the random state on exit, as torch.random.fork_rng. The default generator serves
    every device, so restoring it restores the CUDA streams too; naming CUDA devices (devices)
    without them fails as in PyTorch. enabled=False forks nothing."""
    if not enabled:
        yield
        return
    if devices is not None:
        from . import cuda

        for device in devices:
            cuda._check_device(device)
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
