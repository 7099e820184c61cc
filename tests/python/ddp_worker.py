"""One rank of a test_ddp.py scenario, started by plugflow.distributed.run (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT and PLUGFLOW_RUN_ID come from the launcher).

    ddp_worker.py SCENARIO OUT_DIR [OPTIONS_JSON]

Writes OUT_DIR/rank<R>.json: the final parameters (float64 values as lists) and whatever the
scenario reports. The model, data and steps are those of ddp_reference() in test_ddp.py,
which computes the same training in one process on the global batch.
"""

import json
import os
import signal
import sys

import plugflow as pf
import plugflow.distributed as dist
import plugflow.nn as nn
import plugflow.nn.functional as F
from plugflow.nn.parallel import DistributedDataParallel as DDP

GLOBAL_BATCH = 8


class SmallCNN(nn.Module):
    def __init__(self, unused_branch=False, hidden=4, batch_norm=False):
        super().__init__()
        self.conv1 = nn.Conv2d(1, hidden, 3, padding=1)
        self.bn = nn.BatchNorm2d(hidden) if batch_norm else nn.Identity()
        self.conv2 = nn.Conv2d(hidden, 6, 3, stride=2)
        self.fc = nn.Linear(6 * 3 * 3, 5)
        self.unused = nn.Linear(3, 3) if unused_branch else None

    def forward(self, x):
        x = F.relu(self.bn(self.conv1(x)))
        x = F.relu(self.conv2(x))
        return self.fc(x.flatten(1))


def make_model(seed, **kwargs):
    pf.manual_seed(seed)
    return SmallCNN(**kwargs).double()


def make_batches(steps, micro=1):
    """steps x micro global batches of (images, labels), the same in every process."""
    g = pf.Generator().manual_seed(1234)
    return [[(pf.randn(GLOBAL_BATCH, 1, 8, 8, generator=g, dtype=pf.float64),
              pf.randint(0, 5, (GLOBAL_BATCH,), generator=g)) for _ in range(micro)] for _ in range(steps)]


def train(model, batches, rows, step_fn=None):
    """SGD with momentum over `batches`; each process uses `rows` of every global batch. Each
    step's micro-batches accumulate (the first ones under `no_sync` when `model` is DDP)."""
    opt = pf.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step, micro_batches in enumerate(batches):
        opt.zero_grad()
        for k, (x, y) in enumerate(micro_batches):
            last = k == len(micro_batches) - 1
            ctx = model.no_sync() if isinstance(model, DDP) and not last else _nothing()
            with ctx:
                if step_fn is not None:
                    step_fn(step, k)
                loss = F.cross_entropy(model(x[rows]), y[rows])
                loss.backward()
        opt.step()
    return model


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def params_of(model):
    """Parameters and floating buffers (running statistics), as lists of floats by name."""
    state = list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if b.is_floating_point()]
    return {name: t.detach().reshape(-1).tolist() for name, t in state}


def extras(rank, ws):
    """new_group, async work, all_to_all and the object collectives on 3 ranks."""
    out = {}
    work = dist.all_reduce(pf.tensor([float(rank)]), async_op=True)
    out["async"] = [work.wait(), work.is_completed(), work.is_success(), work.result()[0].tolist()]
    group = dist.new_group([0, 2])
    out["group_rank"] = dist.get_rank(group)
    out["group_size"] = dist.get_world_size(group)
    t = pf.tensor([rank + 1.0])
    out["group_all_reduce_returned"] = repr(dist.all_reduce(t, group=group))
    out["group_sum"] = t.tolist()
    b = pf.tensor([float(rank)] * 2)
    dist.broadcast(b, src=2, group=group)
    out["group_broadcast"] = b.tolist()
    # Rank i sends j + 1 copies of 10 * i + j to rank j.
    inputs = [pf.full((j + 1,), 10.0 * rank + j) for j in range(ws)]
    outputs = [pf.zeros(rank + 1) for _ in range(ws)]
    dist.all_to_all(outputs, inputs)
    out["all_to_all"] = [o.tolist() for o in outputs]
    objects = [None] * ws
    dist.all_gather_object(objects, {"rank": rank, "text": "x" * rank})
    out["objects"] = objects
    listed = [f"from {rank}", rank] if rank == 1 else [None, None]
    dist.broadcast_object_list(listed, src=1)
    out["broadcast_objects"] = listed
    dist.destroy_process_group(group)  # does nothing on rank 1, which is not a member
    return out


def main():
    scenario, out_dir = sys.argv[1], sys.argv[2]
    options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    rank = int(os.environ["RANK"])
    with open(os.path.join(out_dir, f"pid{rank}"), "w") as f:
        f.write(str(os.getpid()))
    timeout_s = options.get("timeout_s", 60)
    import datetime
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    ws = dist.get_world_size()
    per_rank = GLOBAL_BATCH // ws
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    result = {"rank": rank, "world_size": ws, "env": {k: os.environ.get(k) for k in (
        "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PLUGFLOW_RUN_ID",
        "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS", "GROUP_RANK")}}

    if scenario == "train":
        # Each rank starts from its own weights: DDP must take rank 0's.
        model = make_model(seed=rank, batch_norm=options.get("sync_batch_norm", False))
        model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(model), bucket_cap_mb=options.get("bucket_cap_mb", 25),
                    gradient_as_bucket_view=options.get("gradient_as_bucket_view", False))
        train(model, make_batches(options.get("steps", 3), options.get("micro", 1)), rows)
        result["params"] = params_of(model.module)
    elif scenario == "unused":
        model = DDP(make_model(seed=rank, unused_branch=True),
                    find_unused_parameters=options["find_unused_parameters"])
        try:
            train(model, make_batches(3), rows)
            result["params"] = params_of(model.module)
            result["unused_grad_is_none"] = model.module.unused.weight.grad is None
        except RuntimeError as e:
            result["error"] = str(e)
    elif scenario == "mismatch":
        try:
            DDP(make_model(seed=0, hidden=4 + rank))
        except RuntimeError as e:
            result["error"] = str(e)
    elif scenario == "killed":
        # Rank 1 dies in the second step, after its forward: rank 0 is then inside backward,
        # waiting for buckets rank 1 never sends.
        def die(step, _k):
            if step == 1 and rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
        model = DDP(make_model(seed=0))
        try:
            train(model, make_batches(3), rows, step_fn=die)
        except (RuntimeError, TimeoutError) as e:
            result["error"] = f"{type(e).__name__}: {e}"
    elif scenario == "env":
        dist.barrier()
    elif scenario == "extras":
        result.update(extras(rank, ws))
    elif scenario == "fail_first_attempt":
        if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and rank == 1:
            print("rank 1 fails on purpose", file=sys.stderr)
            sys.exit(3)
        dist.barrier()
    elif scenario == "fail":
        if rank == options.get("failing_rank", 1):
            if options.get("kill"):
                os.kill(os.getpid(), signal.SIGKILL)
            print("about to fail: a line of context", file=sys.stderr)
            raise ValueError("this rank failed on purpose")
        dist.barrier()  # the others wait here until the launcher stops them
    else:
        raise SystemExit(f"unknown scenario {scenario}")

    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
