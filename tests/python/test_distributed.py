"""plugflow.distributed with the gloo backend: 2 and 3 ranks as separate processes on loopback
(dist_worker.py), results checked against values computed here; the timeout of a group whose
peer never starts; and the errors of the Python API, in process."""

import datetime
import json
import os
import socket
import subprocess
import sys
import time

import pytest

import plugflow as pf
import plugflow.distributed as dist

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_worker.py")
# A whole scenario (import + rendezvous + collectives) takes well under a second; this only
# bounds a broken run so that it fails instead of hanging the suite.
PROCESS_DEADLINE_S = 120


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def run_ranks(world_size, args, ranks=None):
    """Starts dist_worker.py for each rank in `ranks` (default: all) and returns their JSON
    results by rank. Fails with the worker's output if one exits non-zero."""
    port = free_port()
    procs = {}
    for rank in (range(world_size) if ranks is None else ranks):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs[rank] = subprocess.Popen([sys.executable, WORKER, *args], env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    results = {}
    try:
        for rank, p in procs.items():
            out, err = p.communicate(timeout=PROCESS_DEADLINE_S)
            assert p.returncode == 0, f"rank {rank} exited with {p.returncode}\nstdout:\n{out}\nstderr:\n{err}"
            results[rank] = json.loads(out.strip().splitlines()[-1])
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


@pytest.mark.parametrize("world_size", [2, 3])
def test_collectives_across_processes(world_size):
    ws = world_size
    results = run_ranks(ws, ["collectives"])
    for rank, r in results.items():
        assert r["rank"] == rank
        assert r["world_size"] == ws
        assert r["backend"] == "gloo"
        assert r["initialized"] is True
        assert r["sum"] == [ws * (ws + 1) / 2, ws * (ws + 1)]
        assert r["max"] == [ws - 1, 0, 7]
        product = 1.0
        for i in range(1, ws + 1):
            product *= i
        assert r["product"] == [product]
        assert r["avg"] == pytest.approx([(ws - 1) / 2])
        assert r["avg_work_completed"] is True
        assert r["broadcast"] == [10 * (ws - 1), 10 * (ws - 1) + 1]
        assert r["all_gather"] == [[i, i + 0.5] for i in range(ws)]
        assert r["all_gather_into_tensor"] == [v for i in range(ws) for v in (i, -i)]
        assert r["reduce_scatter"] == [sum(k + rank for k in range(ws)), 100.0 * rank * ws]
        assert r["reduce_scatter_tensor"] == [float(rank * ws)]
        # Ranks other than 0 arrive 0.3 s late: rank 0 must have waited for them.
        if rank == 0:
            assert r["barrier_s"] >= 0.25
        assert r["initialized_after_destroy"] is False
    assert results[1]["recv"] == [3.5, 4.5]
    assert results[1]["recv_src"] == 0


def test_missing_peer_times_out():
    timeout_s = 2.0
    result = run_ranks(2, ["missing_peer", str(timeout_s)], ranks=[0])[0]
    assert result["error"] is not None, "init_process_group returned although rank 1 never started"
    assert result["is_timeout"], f"expected TimeoutError, got {result['error']}: {result['message']}"
    assert "rank(s) 1" in result["message"]
    assert result["elapsed"] >= timeout_s - 0.1, "gave up before the timeout"
    assert result["elapsed"] < timeout_s + 2.0, "took far longer than the timeout"


@pytest.mark.parametrize("scheme", ["tcp", "file"])
def test_init_method_urls(scheme, tmp_path):
    url = f"tcp://127.0.0.1:{free_port()}" if scheme == "tcp" else f"file://{tmp_path / 'rendezvous'}"
    results = run_ranks(3, ["init_method", url])
    for rank, r in results.items():
        assert r == {"rank": rank, "sum": [6]}
    if scheme == "file":
        assert os.listdir(tmp_path / "rendezvous") == [], "rendezvous keys were left behind"


# ---- in process ---------------------------------------------------------------------------

@pytest.fixture
def single_rank_group():
    """A world of one on a free port, destroyed afterwards whatever the test did."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_not_initialized_errors():
    assert not dist.is_initialized()
    message = "Default process group has not been initialized, please make sure to call init_process_group."
    for call in (dist.get_rank, dist.get_world_size, dist.get_backend, dist.barrier, dist.destroy_process_group,
                 lambda: dist.all_reduce(pf.ones(2)), lambda: dist.broadcast(pf.ones(2), 0)):
        with pytest.raises(RuntimeError) as e:
            call()
        assert str(e.value) == message


def test_availability():
    assert dist.is_available()
    assert dist.is_gloo_available()
    assert "gloo" in pf._C._communicator_backends()


def test_world_of_one(single_rank_group):
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "gloo")
    assert dist.group.WORLD is not None and dist.group.WORLD.size() == 1
    t = pf.tensor([1.0, 2.0])
    work = dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True)
    assert work.wait() and work.is_completed() and work.result() == [t]
    assert t.tolist() == [1.0, 2.0]
    dist.barrier()
    with pytest.raises(RuntimeError, match="twice"):
        dist.init_process_group("gloo")
    dist.destroy_process_group()
    assert not dist.is_initialized()
    assert dist.group.WORLD is None


def test_bad_arguments(single_rank_group):
    with pytest.raises(TypeError, match="must be a plugflow.Tensor"):
        dist.all_reduce([1.0, 2.0])
    with pytest.raises(TypeError, match="ReduceOp"):
        dist.all_reduce(pf.ones(2), op="sum")
    with pytest.raises(ValueError, match="root 3 is not a rank"):
        dist.broadcast(pf.ones(2), src=3)
    with pytest.raises(ValueError, match="one per rank"):
        dist.all_gather([pf.zeros(2), pf.zeros(2)], pf.ones(2))
    with pytest.raises(TypeError, match="AVG"):
        dist.all_reduce(pf.ones(2, dtype=pf.bool), op=dist.ReduceOp.AVG)
    with pytest.raises(ValueError, match="src"):
        dist.recv(pf.zeros(2))
    with pytest.raises(ValueError, match="only the default"):
        dist.barrier(group=object())
    # Argument errors leave the group usable.
    t = pf.tensor([5.0])
    dist.all_reduce(t)
    assert t.tolist() == [5.0]


def test_init_errors(monkeypatch):
    for var in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="MASTER_ADDR expected, but not set"):
        dist.init_process_group("gloo")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    with pytest.raises(ValueError, match="MASTER_PORT expected, but not set"):
        dist.init_process_group("gloo")
    with pytest.raises(ValueError, match="rank parameter missing"):
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:1234", world_size=2)
    with pytest.raises(ValueError, match="host and a port"):
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1", rank=0, world_size=1)
    with pytest.raises(ValueError, match="not supported"):
        dist.init_process_group("gloo", init_method="mpi://somewhere", rank=0, world_size=1)
    with pytest.raises(ValueError, match="Store object"):
        dist.init_process_group("gloo", store=object(), rank=0, world_size=1)
    with pytest.raises(TypeError, match="timedelta"):
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:1234", rank=0, world_size=1, timeout=5)
    with pytest.raises(ValueError, match="out of range"):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=2, world_size=2)
    with pytest.raises(pf.PluginError, match="no communicator backend 'mpi'"):
        dist.init_process_group("mpi", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    assert not dist.is_initialized()


def test_default_backend_comes_from_the_config():
    assert pf._C.current_config()["collectives"]["cpu"] == "gloo"
    dist.init_process_group(init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        assert dist.get_backend() == "gloo"
    finally:
        dist.destroy_process_group()


def test_port_in_use_fails_fast():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        s.listen()
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="MASTER_PORT"):
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{s.getsockname()[1]}", rank=0,
                                    world_size=2, timeout=datetime.timedelta(seconds=30))
        assert time.monotonic() - start < 5
    assert not dist.is_initialized()
