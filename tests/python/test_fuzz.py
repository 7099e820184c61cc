"""The randomized differential test against PyTorch (fuzz_harness.py) with a fixed seed and a
bounded number of calls; `make fuzz` runs it longer with a new seed. Also checks the harness
itself: a crash or hang of a call is caught, reported with its replay command, and the run
goes on in a new worker."""

import subprocess
import sys

import numpy as np
import pytest

import fuzz_harness
import fuzz_ops

SEED = 20261201
CHUNKS = 4
CALLS_PER_CHUNK = 1000


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_plugflow_agrees_with_torch_on_random_calls(chunk):
    summary = fuzz_harness.run(SEED, CALLS_PER_CHUNK, start=chunk * CALLS_PER_CHUNK, timeout=60)
    assert summary.calls == CALLS_PER_CHUNK
    assert summary.ok, summary.report()
    assert summary.counts["match"] > CALLS_PER_CHUNK // 2  # most calls compute, not just raise


@pytest.mark.parametrize("kind", ["crash", "hang"])
def test_a_crash_or_hang_is_reported_and_the_run_goes_on(kind):
    summary = fuzz_harness.run(SEED, 6, timeout=5, selftest=(kind, 2))
    assert summary.calls == 6
    assert [(f[0], f[1]) for f in summary.failures if f[0] in ("crash", "hang")] == [(kind, 2)]
    assert f"--seed {SEED} --index 2" in summary.report()


def test_the_generator_depends_only_on_seed_and_index():
    for index in range(50):
        a, b = fuzz_ops.generate(7, index), fuzz_ops.generate(7, index)
        assert a.describe() == b.describe()
        for name in a.specs:
            assert np.array_equal(a.specs[name].data, b.specs[name].data, equal_nan=a.specs[name].data.dtype.kind == "f")


def test_a_runaway_allocation_in_the_worker_is_out_of_memory_not_an_abort():
    # The worker's address-space limit turns an allocation past it into an exception.
    code = ("import resource, fuzz_harness as h; lim = h.WORKER_ADDRESS_SPACE; "
            "resource.setrlimit(resource.RLIMIT_AS, (lim, lim)); import plugflow as pf\n"
            "try:\n    pf.zeros(lim // 4 + 1)\nexcept RuntimeError as e:\n    print('raised', e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=fuzz_harness.HERE,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "raised" in p.stdout and "out of memory" in p.stdout, p.stdout
