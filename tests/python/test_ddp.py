"""DistributedDataParallel and SyncBatchNorm: 2 processes on loopback, started by
plugflow.distributed.run, train the same float64 parameters as one process on the global
batch (also with tiny buckets and gradient_as_bucket_view, with no_sync accumulation, with
SyncBatchNorm against BatchNorm, and as two "nodes" on one host); unused parameters; models
that differ across ranks; a rank that dies mid-step; errors in process."""

import os
import signal
import subprocess
import sys

import pytest

import plugflow as pf
from test_launcher import DEADLINE_S, WORKER, free_port, launch, launcher, read_results

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_worker  # noqa: E402


def reference(steps=3, micro=1, **model_kwargs):
    """The training of ddp_worker.py in this process on the whole global batch, from rank 0's
    initial weights."""
    model = ddp_worker.make_model(seed=0, **model_kwargs)
    ddp_worker.train(model, ddp_worker.make_batches(steps, micro), slice(None))
    return ddp_worker.params_of(model)


def assert_same_params(got, expected):
    assert got.keys() == expected.keys()
    for name in expected:
        diff = max(abs(a - b) for a, b in zip(got[name], expected[name]))
        assert diff <= 1e-10, f"{name}: max difference {diff}"


@pytest.mark.parametrize("options", [
    {},
    {"bucket_cap_mb": 0.0005, "gradient_as_bucket_view": True},  # one bucket per parameter or so
])
def test_two_processes_train_like_one_on_the_global_batch(tmp_path, options):
    _, results = launch("train", tmp_path, options)
    expected = reference()
    assert sorted(results) == [0, 1]
    for r in results.values():
        assert_same_params(r["params"], expected)


def test_four_processes_train_like_one_on_the_global_batch(tmp_path):
    _, results = launch("train", tmp_path, {"bucket_cap_mb": 0.001}, nproc=4)
    expected = reference()
    assert sorted(results) == [0, 1, 2, 3]
    for r in results.values():
        assert_same_params(r["params"], expected)


def test_no_sync_accumulation_matches_the_global_batch(tmp_path):
    _, results = launch("train", tmp_path, {"steps": 2, "micro": 3})
    expected = reference(steps=2, micro=3)
    for r in results.values():
        assert_same_params(r["params"], expected)


def test_sync_batch_norm_matches_batch_norm_on_the_global_batch(tmp_path):
    _, results = launch("train", tmp_path, {"sync_batch_norm": True})
    expected = reference(batch_norm=True)
    assert "bn.running_var" in expected
    for r in results.values():
        assert_same_params(r["params"], expected)


def test_find_unused_parameters(tmp_path):
    _, results = launch("unused", tmp_path, {"find_unused_parameters": True})
    expected = reference(unused_branch=True)
    for r in results.values():
        assert_same_params(r["params"], expected)
        assert r["unused_grad_is_none"]


def test_unused_parameters_without_detection_raise_at_the_next_forward(tmp_path):
    _, results = launch("unused", tmp_path, {"find_unused_parameters": False})
    for r in results.values():
        assert "Expected to have finished reduction in the prior iteration" in r["error"]
        assert "find_unused_parameters=True" in r["error"]
        assert f"did not receive grad for rank {r['rank']}: 6 7" in r["error"]


def test_different_models_across_ranks_raise(tmp_path):
    _, results = launch("mismatch", tmp_path)
    for r in results.values():
        assert "DDP expects same model across all ranks" in r["error"]


def test_a_killed_rank_makes_the_others_raise(tmp_path):
    """Without the launcher (which would stop rank 0 at once): rank 0, inside backward when
    rank 1 dies, raises instead of hanging."""
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PLUGFLOW_RUN_ID="killed-test", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, WORKER, "killed", str(tmp_path), '{"timeout_s": 30}'],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        out, err = procs[0].communicate(timeout=DEADLINE_S)
        procs[1].wait(timeout=DEADLINE_S)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert procs[1].returncode == -signal.SIGKILL
    assert procs[0].returncode == 0, err
    error = read_results(tmp_path)[0]["error"]
    assert error.startswith(("RuntimeError", "TimeoutError")), error
    assert "gloo" in error


def test_two_nodes_on_one_host(tmp_path):
    port = free_port()
    procs = [subprocess.Popen(launcher("--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                                       "--master-addr", "127.0.0.1", "--master-port", str(port), "--rdzv-id", "two-nodes",
                                       WORKER, "train", str(tmp_path), "{}"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for node in range(2)]
    try:
        for p in procs:
            _, err = p.communicate(timeout=DEADLINE_S)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = read_results(tmp_path)
    assert results[1]["env"]["GROUP_RANK"] == "1" and results[1]["env"]["LOCAL_RANK"] == "0"
    expected = reference()
    for r in results.values():
        assert_same_params(r["params"], expected)


def test_ddp_errors_in_process():
    import plugflow.distributed as dist
    from plugflow.nn.parallel import DistributedDataParallel as DDP
    with pytest.raises(RuntimeError, match="Default process group has not been initialized"):
        DDP(pf.nn.Linear(2, 2))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        frozen = pf.nn.Linear(2, 2).requires_grad_(False)
        with pytest.raises(RuntimeError, match="doesn't have any parameter that requires a gradient"):
            DDP(frozen)
        with pytest.raises(ValueError, match="device_ids and output_device arguments only work"):
            DDP(pf.nn.Linear(2, 2), device_ids=[0])
        model = DDP(pf.nn.Linear(2, 2))
        assert list(model.state_dict()) == ["module.weight", "module.bias"]
        x = pf.randn(3, 2)
        model(x).sum().backward()
        local = pf.nn.Linear(2, 2)
        local.load_state_dict(model.module.state_dict())
        local(x).sum().backward()
        assert pf.equal(model.module.weight.grad, local.weight.grad)
        # A second backward of one forward is not synchronized (PyTorch: the reducer no longer
        # expects hooks): it accumulates locally.
        out = model(x)
        out.sum().backward(retain_graph=True)
        out.sum().backward()
        assert pf.allclose(model.module.weight.grad, 3 * local.weight.grad)
    finally:
        dist.destroy_process_group()


def test_digits_example_under_the_launcher(tmp_path):
    """The main job as 2 data-parallel ranks (make demo-ddp), one epoch: rank 0 saves, both
    ranks reload the checkpoint and check rank 0's accuracy."""
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "examples", "train_digits.py")
    proc = subprocess.run(launcher("--nproc-per-node", "2", "--master-port", str(free_port()), example,
                                   "--epochs", "1", "--out-dir", str(tmp_path)),
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stderr
    assert "2 ranks" in proc.stdout and "DistributedDataParallel" in proc.stdout
    accuracy = float(proc.stdout.split("final held-out accuracy: ")[1].split("%")[0])
    assert accuracy > 80, proc.stdout  # one epoch on 2 ranks measured 92.8%
    assert (tmp_path / "digits_cnn.pt").exists()
