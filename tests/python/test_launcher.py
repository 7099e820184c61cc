"""plugflow.distributed.run / launch (torchrun) with ranks of tests/python/ddp_worker.py: the
environment each worker gets, flags in both spellings, a fresh run id per launch, the summary
naming a failed or killed rank, no orphans, restarts, signal forwarding, argument errors; and,
on 3 launched ranks, new_group, async work, all_to_all and the object collectives."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ddp_worker.py")
# Bounds a broken run so that it fails instead of hanging the suite.
DEADLINE_S = 180


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def launcher(*flags, module="plugflow.distributed.run"):
    return [sys.executable, "-m", module, *flags]


def launch(scenario, out_dir, options=None, nproc=2, flags=(), expect_ok=True):
    """Runs ddp_worker.py SCENARIO under the launcher; returns (completed process, {rank: result})."""
    cmd = launcher("--nproc-per-node", str(nproc), "--master-port", str(free_port()), *flags, WORKER, scenario,
                   str(out_dir), json.dumps(options or {}))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S)
    if expect_ok:
        assert proc.returncode == 0, f"launcher exited with {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc, read_results(out_dir)


def read_results(out_dir):
    results = {}
    for name in os.listdir(out_dir):
        if name.startswith("rank") and name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                r = json.load(f)
            results[r["rank"]] = r
    return results


def pids_alive(out_dir):
    alive = []
    for name in os.listdir(out_dir):
        if name.startswith("pid"):
            with open(os.path.join(out_dir, name)) as f:
                pid = int(f.read())
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
    return alive


def test_groups_async_work_all_to_all_and_objects(tmp_path):
    _, results = launch("extras", tmp_path, nproc=3)
    for rank, r in results.items():
        assert r["async"] == [True, True, True, [3.0]]
        assert (r["group_rank"], r["group_size"]) == ({0: (0, 2), 1: (-1, -1), 2: (1, 2)}[rank])
        assert r["group_all_reduce_returned"] == "None"
        assert r["group_sum"] == ([2.0] if rank == 1 else [4.0])
        assert r["group_broadcast"] == ([1.0, 1.0] if rank == 1 else [2.0, 2.0])
        assert r["all_to_all"] == [[10.0 * src + rank] * (rank + 1) for src in range(3)]
        assert r["objects"] == [{"rank": i, "text": "x" * i} for i in range(3)]
        assert r["broadcast_objects"] == ["from 1", 1]


def test_launcher_environment_and_both_flag_spellings(tmp_path):
    port = free_port()
    cmd = launcher("--nproc_per_node=2", "--nnodes=1", "--node_rank=0", "--master_addr=127.0.0.1",
                   f"--master_port={port}", "--rdzv_id=job-7", WORKER, "fail_first_attempt", str(tmp_path), "{}")
    # fail_first_attempt fails rank 1 on attempt 0; without restarts the job fails...
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode != 0
    assert "rank 1 (local rank 1 on node 0" in proc.stderr and "exited with code 3" in proc.stderr
    assert "rank 1 fails on purpose" in proc.stderr
    # ... and with one restart it succeeds.
    cmd = launcher("--nproc-per-node", "2", "--master-port", str(free_port()), "--rdzv-id", "job-7",
                   "--max-restarts", "1", WORKER, "fail_first_attempt", str(tmp_path), "{}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stderr
    assert "restarting the group (1 of 1)" in proc.stderr
    results = read_results(tmp_path)
    for rank, r in results.items():
        env = r["env"]
        assert env["RANK"] == str(rank) and env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == "2" and env["LOCAL_WORLD_SIZE"] == "2" and env["GROUP_RANK"] == "0"
        assert env["PLUGFLOW_RUN_ID"] == env["TORCHELASTIC_RUN_ID"] == "job-7"
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["OMP_NUM_THREADS"] == "1"


def test_launcher_makes_a_fresh_run_id_per_launch(tmp_path):
    ids = []
    for attempt in range(2):
        out = tmp_path / str(attempt)
        out.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "PLUGFLOW_RUN_ID"}
        cmd = launcher("--nproc-per-node", "2", "--master-port", str(free_port()), WORKER, "env", str(out))
        subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S, env=env, check=True)
        results = read_results(out)
        assert results[0]["env"]["PLUGFLOW_RUN_ID"] == results[1]["env"]["PLUGFLOW_RUN_ID"]
        ids.append(results[0]["env"]["PLUGFLOW_RUN_ID"])
    assert ids[0] and ids[1] and ids[0] != ids[1]


@pytest.mark.parametrize("failing_rank", [0, 1])
def test_launcher_names_the_failed_rank_and_stops_the_others(tmp_path, failing_rank):
    """The other rank fails too (its barrier loses its peer), and may exit first: the summary
    still names the rank that failed first."""
    proc, _ = launch("fail", tmp_path, {"failing_rank": failing_rank}, expect_ok=False)
    assert proc.returncode == 1
    summary = proc.stderr[proc.stderr.index("FAILED"):]
    assert f"rank {failing_rank} (local rank {failing_rank} on node 0" in summary
    assert "exited with code 1" in summary
    assert "ValueError: this rank failed on purpose" in summary
    assert "about to fail: a line of context" in summary
    assert pids_alive(tmp_path) == []


def test_launcher_reports_a_killed_rank(tmp_path):
    proc, _ = launch("fail", tmp_path, {"failing_rank": 1, "kill": True}, expect_ok=False)
    assert proc.returncode == 1
    assert "rank 1 (local rank 1 on node 0" in proc.stderr and "was killed by signal SIGKILL" in proc.stderr
    assert pids_alive(tmp_path) == []


def test_launcher_forwards_signals_and_leaves_no_orphans(tmp_path):
    cmd = launcher("--nproc-per-node", "2", "--master-port", str(free_port()), WORKER, "fail", str(tmp_path),
                   json.dumps({"failing_rank": -1, "wait": True}))  # workers run until stopped
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len([n for n in os.listdir(tmp_path) if n.startswith("pid")]) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "received SIGINT" in err
    assert pids_alive(tmp_path) == []


def test_launcher_argument_errors():
    def fails(*flags):
        proc = subprocess.run(launcher(*flags, "script.py"), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        return proc.stderr
    assert "needs --rdzv-id" in fails("--nnodes", "2", "--node-rank", "0")
    assert "--node-rank must be in [0, 2)" in fails("--nnodes", "2", "--node-rank", "2", "--rdzv-id", "x")
    assert "--nproc-per-node must be >= 1" in fails("--nproc-per-node", "0")
