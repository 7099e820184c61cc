"""plugflow.distributed with the gloo backend: 2 and 3 ranks as separate processes on loopback
(dist_worker.py), results checked against values computed here; the timeout of a group whose
peer never starts; two jobs on one port; ranks whose calls disagree, with and without
PLUGFLOW_DISTRIBUTED_DEBUG; and the errors of the Python API, in process."""

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


def start_rank(port, rank, world_size, args, env=None):
    """dist_worker.py as rank `rank` of `world_size` with MASTER_PORT=port; `env` adds variables."""
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.Popen([sys.executable, WORKER, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(procs):
    """Waits for every process of {key: Popen}; fails with its output if one exits non-zero (a
    crash, SIGABRT included). Returns {key: stdout}. Kills what is left on the way out."""
    outputs = {}
    try:
        for key, p in procs.items():
            out, err = p.communicate(timeout=PROCESS_DEADLINE_S)
            assert p.returncode == 0, f"{key} exited with {p.returncode}\nstdout:\n{out}\nstderr:\n{err}"
            outputs[key] = out
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return outputs


def run_ranks(world_size, args, ranks=None, env=None):
    """Starts dist_worker.py for each rank in `ranks` (default: all) and returns their JSON
    results by rank. Fails with the worker's output if one exits non-zero."""
    port = free_port()
    procs = {rank: start_rank(port, rank, world_size, args, env)
             for rank in (range(world_size) if ranks is None else ranks)}
    return {rank: json.loads(out.strip().splitlines()[-1]) for rank, out in finish(procs).items()}


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
        assert r["reduce"] == ([float(ws), -1.0] if rank == ws - 1 else [rank + 1.0, -1.0])
        assert r["gather"] == ([[[i, 2], [1, 3 * i]] for i in range(ws)] if rank == 1 else None)
        assert r["scatter"] == [float(rank), float(rank + ws), float(rank + 2 * ws)]
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


TWO_JOBS_TIMEOUT_S = 10.0


@pytest.mark.parametrize("apart_by", ["run_id", "world_size"])
def test_two_jobs_started_together_on_one_port_never_mix(apart_by, tmp_path):
    """Jobs a (2 ranks, each adding 1) and b (each adding 100) start at the same moment on one
    MASTER_PORT, told apart by their run ids or by their world sizes (b has 3 ranks then).
    Before job identity, ranks of both paired up and summed 101. Now the job whose rank 0 gets
    the port computes its sum and every process of the other fails with a clear error."""
    jobs = {"a": (1.0, 2), "b": (100.0, 2 if apart_by == "run_id" else 3)}
    for trial in range(3):
        port = free_port()
        release = tmp_path / f"release-{trial}"
        procs, result_paths = {}, {}
        for name, (value, ws) in jobs.items():
            env = {"PLUGFLOW_RUN_ID": f"trial{trial}-{name}"} if apart_by == "run_id" else {}
            for rank in range(ws):
                result_paths[name, rank] = tmp_path / f"{trial}-{name}-{rank}.json"
                procs[name, rank] = start_rank(port, rank, ws, ["two_jobs", str(value), str(result_paths[name, rank]),
                                                                str(release), str(TWO_JOBS_TIMEOUT_S)], env)
        # The winner holds the port until every process has reported.
        give_up = time.monotonic() + PROCESS_DEADLINE_S
        while not all(result_paths[k].exists() or p.poll() is not None for k, p in procs.items()):
            assert time.monotonic() < give_up, "the processes did not report"
            time.sleep(0.05)
        release.touch()
        finish(procs)
        results = {k: json.loads(path.read_text()) for k, path in result_paths.items()}

        for r in results.values():
            assert r["elapsed"] < TWO_JOBS_TIMEOUT_S + 10, f"a rank waited past its timeout: {results}"
        winners = [name for name, (_, ws) in jobs.items() if all("sum" in results[name, r] for r in range(ws))]
        assert len(winners) == 1, f"trial {trial}: exactly one job must run: {results}"
        winner, loser = winners[0], ("b" if winners[0] == "a" else "a")
        value, ws = jobs[winner]
        assert [results[winner, r]["sum"] for r in range(ws)] == [value * ws] * ws
        for rank in range(jobs[loser][1]):
            r = results[loser, rank]
            assert "sum" not in r and r["error"] == "RuntimeError", f"{loser} rank {rank}: {r}"
            if rank == 0:
                assert f"cannot serve the rendezvous store on MASTER_ADDR:MASTER_PORT 127.0.0.1:{port}" in r["message"]
            else:
                assert "was refused by the rendezvous store" in r["message"]
            assert ("run id" if apart_by == "run_id" else "world size") in r["message"], r["message"]


@pytest.mark.parametrize("kind", ["count", "dtype", "send_recv"])
def test_calls_that_disagree_raise_on_every_rank(kind):
    """Rank 0 and rank 1 pass different element counts or dtypes (or a recv larger than the
    send). Gloo used to abort rank 0 (an enforce on its event-loop thread) and could leave rank
    1 a silently wrong sum; now both raise and exit cleanly, the broken group destroyed on rank
    0 and left to the interpreter's exit on rank 1. The first to reach the timeout raises
    TimeoutError; Gloo then closes its connections, which the other may see first."""
    timeout_s = 2.0
    results = run_ranks(2, ["mismatch", kind, str(timeout_s)])
    for rank, r in results.items():
        assert r["error"] in ("TimeoutError", "RuntimeError"), f"rank {rank}: {r}"
        if r["error"] == "TimeoutError":
            assert "PLUGFLOW_DISTRIBUTED_DEBUG=1 names the ranks" in r["message"]
            assert r["elapsed"] >= timeout_s - 0.1
        else:
            assert "its own operation failed first" in r["message"], r["message"]
        assert r["elapsed"] < timeout_s + 10
    assert "TimeoutError" in [r["error"] for r in results.values()]


def test_debug_flag_names_the_ranks_whose_calls_differ():
    results = run_ranks(3, ["debug_mismatch"], env={"PLUGFLOW_DISTRIBUTED_DEBUG": "DETAIL"})
    prefix = "detected mismatch between collectives on ranks (PLUGFLOW_DISTRIBUTED_DEBUG): "
    expected = {
        "count": "all_reduce: " + prefix + "ranks 0, 2: all_reduce(shape=[4], dtype=plugflow.float32, op=SUM); "
                 "rank 1: all_reduce(shape=[1000], dtype=plugflow.float32, op=SUM)",
        "dtype": "all_reduce: " + prefix + "ranks 0, 2: all_reduce(shape=[2, 3], dtype=plugflow.float32, op=SUM); "
                 "rank 1: all_reduce(shape=[2, 3], dtype=plugflow.float64, op=SUM)",
        "op": "all_reduce: " + prefix + "ranks 0, 2: all_reduce(shape=[4], dtype=plugflow.float32, op=SUM); "
              "rank 1: all_reduce(shape=[4], dtype=plugflow.float32, op=MAX)",
        "src": "broadcast: " + prefix + "ranks 0, 2: broadcast(shape=[2], dtype=plugflow.float32, src=2); "
               "rank 1: broadcast(shape=[2], dtype=plugflow.float32, src=0)",
    }
    for rank, r in results.items():
        for name, message in expected.items():
            assert r[name].startswith(message), f"rank {rank}, {name}: {r[name]}"
        assert "ranks 0, 2: all_reduce(shape=[1], dtype=plugflow.float32, op=SUM); rank 1: barrier()" in r["collective"]
        # Nothing was exchanged for the mismatched calls: the group still works.
        assert r["sum_after"] == [6.0]


# ---- in process ---------------------------------------------------------------------------

@pytest.fixture
def single_rank_group():
    """A world of one on a free port (the fixture's value), destroyed afterwards whatever the
    test did."""
    port = free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    yield port
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
    with pytest.raises(ValueError, match="must be a ProcessGroup"):
        dist.barrier(group=object())
    with pytest.raises(ValueError, match="dst 3 is not a rank"):
        dist.reduce(pf.ones(2), dst=3)
    with pytest.raises(ValueError, match="one tensor per rank"):
        dist.gather(pf.ones(2), [pf.zeros(2), pf.zeros(2)], dst=0)
    with pytest.raises(ValueError, match="must match"):
        dist.scatter(pf.zeros(2), [pf.zeros(3)], src=0)
    # A world of one: the root keeps its own tensor.
    out = [pf.zeros(2)]
    dist.gather(pf.tensor([1.0, 2.0]), out, dst=0)
    t = pf.zeros(2)
    dist.scatter(t, [pf.tensor([3.0, 4.0])], src=0)
    assert out[0].tolist() == [1.0, 2.0] and t.tolist() == [3.0, 4.0]
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
        port = s.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=f"MASTER_ADDR:MASTER_PORT 127.0.0.1:{port} .*Address already in use"):
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=2,
                                    timeout=datetime.timedelta(seconds=30))
        assert time.monotonic() - start < 5
    assert not dist.is_initialized()


def test_a_running_group_keeps_its_port(single_rank_group):
    """Rank 0 serves the rendezvous store, and so holds MASTER_PORT, until the group is
    destroyed; a second job's rank 0 on that port fails and leaves the group alone."""
    port = single_rank_group
    with pytest.raises(RuntimeError, match=f"127.0.0.1:{port} .*completed its rendezvous"):
        pf._C._Communicator("gloo", "127.0.0.1", port, "", 0, 1, 5.0)
    t = pf.tensor([2.0])
    dist.all_reduce(t)
    assert t.tolist() == [2.0]


def test_debug_flag_values(monkeypatch):
    for value, on in [("1", True), ("INFO", True), ("detail", True), ("0", False), ("OFF", False), ("", False)]:
        monkeypatch.setenv("PLUGFLOW_DISTRIBUTED_DEBUG", value)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=30))
        try:
            assert dist.group.WORLD._debug is on, value
            t = pf.tensor([1.0, 2.0])
            dist.all_reduce(t)
            dist.barrier()
            assert t.tolist() == [1.0, 2.0]
        finally:
            dist.destroy_process_group()
    monkeypatch.setenv("PLUGFLOW_DISTRIBUTED_DEBUG", "yes")
    with pytest.raises(ValueError, match="PLUGFLOW_DISTRIBUTED_DEBUG must be one of 0, 1, OFF, INFO or DETAIL"):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    assert not dist.is_initialized()


def test_run_id_comes_from_the_launcher(monkeypatch):
    monkeypatch.delenv("PLUGFLOW_RUN_ID", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert dist._run_id() == ""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "torchrun-42")
    assert dist._run_id() == "torchrun-42"
    monkeypatch.setenv("PLUGFLOW_RUN_ID", "mine")
    assert dist._run_id() == "mine"
