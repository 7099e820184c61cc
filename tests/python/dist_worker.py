"""One rank of a test_distributed.py scenario, run as its own process.

    python dist_worker.py SCENARIO [ARG]

The rank, world size and master address come from the environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), as torchrun sets them. The worker prints one JSON object as its last
line of output; the test compares it with the values it expects. Expected values are never
computed here, so a wrong collective cannot agree with itself.
"""

import datetime
import json
import os
import sys
import time

import plugflow as pf
import plugflow.distributed as dist


def collectives():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, ws = dist.get_rank(), dist.get_world_size()
    out = {"rank": rank, "world_size": ws, "backend": dist.get_backend(), "initialized": dist.is_initialized()}

    t = pf.tensor([rank + 1.0, 2.0 * (rank + 1)], dtype=pf.float32)
    dist.all_reduce(t)
    out["sum"] = t.tolist()

    t = pf.tensor([rank, -rank, 7], dtype=pf.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["max"] = t.tolist()

    t = pf.tensor([rank + 1.0], dtype=pf.float64)
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    out["product"] = t.tolist()

    t = pf.tensor([float(rank)], dtype=pf.float64)
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    out["avg_work_completed"] = work.wait() and work.is_completed()
    out["avg"] = t.tolist()

    t = pf.tensor([10 * rank, 10 * rank + 1], dtype=pf.int32)
    dist.broadcast(t, src=ws - 1)
    out["broadcast"] = t.tolist()

    gathered = [pf.zeros(2, dtype=pf.float32) for _ in range(ws)]
    dist.all_gather(gathered, pf.tensor([rank, rank + 0.5], dtype=pf.float32))
    out["all_gather"] = [g.tolist() for g in gathered]

    flat = pf.zeros(2 * ws, dtype=pf.float32)
    dist.all_gather_into_tensor(flat, pf.tensor([rank, -rank], dtype=pf.float32))
    out["all_gather_into_tensor"] = flat.tolist()

    # input_list[i] = [rank + i, 100 * i]: rank r receives sum over ranks of input_list[r].
    output = pf.zeros(2, dtype=pf.float32)
    dist.reduce_scatter(output, [pf.tensor([rank + i, 100.0 * i], dtype=pf.float32) for i in range(ws)])
    out["reduce_scatter"] = output.tolist()

    output = pf.zeros(1, dtype=pf.float32)
    dist.reduce_scatter_tensor(output, pf.arange(ws, dtype=pf.float32), op=dist.ReduceOp.SUM)
    out["reduce_scatter_tensor"] = output.tolist()

    # reduce into the last rank; gather to and scatter from rank 1 (views and a non-contiguous part)
    t = pf.tensor([rank + 1.0, -1.0], dtype=pf.float64)
    dist.reduce(t, dst=ws - 1, op=dist.ReduceOp.MAX)
    out["reduce"] = t.tolist()
    gathered = [pf.zeros(2, 2, dtype=pf.int64) for _ in range(ws)] if rank == 1 else None
    dist.gather(pf.tensor([[rank, 1], [2, 3 * rank]]).t(), gathered, dst=1)
    out["gather"] = [g.tolist() for g in gathered] if gathered else None
    parts = list(pf.arange(3 * ws, dtype=pf.float32).view(3, ws).t()) if rank == 1 else None
    received = pf.zeros(3, dtype=pf.float32)
    work = dist.scatter(received, parts, src=1, async_op=True)
    work.wait()
    out["scatter"] = received.tolist()

    if rank == 0:
        dist.send(pf.tensor([3.5, 4.5]), dst=1, tag=3)
    elif rank == 1:
        got = pf.zeros(2)
        out["recv_src"] = dist.recv(got, src=0, tag=3)
        out["recv"] = got.tolist()

    if rank != 0:
        time.sleep(0.3)
    start = time.monotonic()
    dist.barrier()
    out["barrier_s"] = time.monotonic() - start

    dist.destroy_process_group()
    out["initialized_after_destroy"] = dist.is_initialized()
    return out


def missing_peer(timeout_s):
    """world_size=2, but only this rank (0) runs: init must give up after the timeout."""
    start = time.monotonic()
    try:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(timeout_s)))
    except Exception as e:  # noqa: BLE001 - the test checks the type
        return {"error": type(e).__name__, "is_timeout": isinstance(e, TimeoutError), "message": str(e),
                "elapsed": time.monotonic() - start}
    return {"error": None, "elapsed": time.monotonic() - start}


def init_method(url):
    """init through a tcp:// or file:// URL; rank and world_size as arguments, not env."""
    rank, ws = int(os.environ.pop("RANK")), int(os.environ.pop("WORLD_SIZE"))
    os.environ.pop("MASTER_ADDR")
    os.environ.pop("MASTER_PORT")
    dist.init_process_group(backend="gloo", init_method=url, rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=60))
    t = pf.tensor([rank + 1], dtype=pf.int64)
    dist.all_reduce(t)
    result = {"rank": dist.get_rank(), "sum": t.tolist()}
    dist.destroy_process_group()
    return result


def error_of(e, start):
    return {"error": type(e).__name__, "message": str(e), "elapsed": time.monotonic() - start}


def two_jobs(value, result_path, release_path, timeout_s):
    """One rank of one of two jobs started together on one port: the sum of `value` over the
    job's ranks, or the error. The result goes to result_path at once; the rank then keeps its
    group until release_path exists, so the winning job holds the port until every process of
    both jobs has tried it."""
    start = time.monotonic()
    try:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(timeout_s)))
        t = pf.tensor([float(value)], dtype=pf.float64)
        dist.all_reduce(t)
        result = {"sum": t.item(), "elapsed": time.monotonic() - start}
    except Exception as e:  # noqa: BLE001 - the test checks the type
        result = error_of(e, start)
    with open(result_path + ".tmp", "w") as f:
        json.dump(result, f)
    os.rename(result_path + ".tmp", result_path)
    give_up = time.monotonic() + float(timeout_s) + 60
    while not os.path.exists(release_path) and time.monotonic() < give_up:
        time.sleep(0.02)
    if dist.is_initialized():
        dist.destroy_process_group()
    return result


def mismatch(kind, timeout_s):
    """Rank 0 and rank 1 make calls that disagree (`kind`: element count, dtype, or a send
    and a recv of different sizes): both must raise, and exit cleanly. Rank 0 destroys the
    broken group; rank 1 leaves it to the interpreter's exit."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(timeout_s)))
    rank = dist.get_rank()
    start = time.monotonic()
    try:
        if kind == "count":
            dist.all_reduce(pf.ones(4 if rank == 0 else 1000))
        elif kind == "dtype":
            dist.all_reduce(pf.ones(4, dtype=pf.float32 if rank == 0 else pf.float64))
        elif kind == "send_recv":
            if rank == 0:
                dist.send(pf.ones(4), dst=1)
            else:
                dist.recv(pf.ones(8), src=0)
        result = {"error": None}
    except Exception as e:  # noqa: BLE001 - the test checks the type
        result = error_of(e, start)
    if rank == 0:
        dist.destroy_process_group()
    return result


def debug_mismatch():
    """PLUGFLOW_DISTRIBUTED_DEBUG is set: calls that disagree between ranks each raise a
    RuntimeError; a matching all_reduce afterwards still works."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    calls = {
        "count": lambda: dist.all_reduce(pf.ones(1000 if rank == 1 else 4)),
        "dtype": lambda: dist.all_reduce(pf.ones(2, 3, dtype=pf.float64 if rank == 1 else pf.float32)),
        "op": lambda: dist.all_reduce(pf.ones(4), op=dist.ReduceOp.MAX if rank == 1 else dist.ReduceOp.SUM),
        "src": lambda: dist.broadcast(pf.ones(2), src=0 if rank == 1 else 2),
        "collective": lambda: dist.barrier() if rank == 1 else dist.all_reduce(pf.ones(1)),
    }
    result = {}
    for name, call in calls.items():
        try:
            call()
            result[name] = None
        except RuntimeError as e:
            result[name] = str(e)
    t = pf.tensor([rank + 1.0])
    dist.all_reduce(t)
    result["sum_after"] = t.tolist()
    dist.destroy_process_group()
    return result


def main():
    scenario = sys.argv[1]
    if scenario == "collectives":
        result = collectives()
    elif scenario == "missing_peer":
        result = missing_peer(sys.argv[2])
    elif scenario == "init_method":
        result = init_method(sys.argv[2])
    elif scenario == "two_jobs":
        result = two_jobs(*sys.argv[2:6])
    elif scenario == "mismatch":
        result = mismatch(sys.argv[2], sys.argv[3])
    elif scenario == "debug_mismatch":
        result = debug_mismatch()
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
