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
import time

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


def resnet18(seed):
    """torchvision's ResNet-18 (benchmarks/workloads.py writes it out; CIFAR stem), float64, its
    BatchNorms made SyncBatchNorm when running under DDP."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "benchmarks"))
    from workloads import _resnet
    pf.manual_seed(seed)
    return _resnet(pf, 18, 5, cifar_stem=True).double()


def digits_cnn(seed):
    """The demo's model (examples/train_digits.py), float64, without its dropout (each rank's
    masks cannot equal one process's)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "examples"))
    from train_digits import DigitsCNN
    pf.manual_seed(seed)
    model = DigitsCNN().double()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return model


# The models of the image scenario: (constructor, input channels, classes).
IMAGE_MODELS = {"resnet18": (resnet18, 3, 5), "digits": (digits_cnn, 1, 10)}


def make_image_batches(steps, channels=3, classes=5):
    """Global batches of 8x8 images for the IMAGE_MODELS."""
    g = pf.Generator().manual_seed(4321)
    return [[(pf.randn(GLOBAL_BATCH, channels, 8, 8, generator=g, dtype=pf.float64),
              pf.randint(0, classes, (GLOBAL_BATCH,), generator=g))] for _ in range(steps)]


def graph_step(model, opt):
    """An nn.Graph training step (forward, backward and the optimizer update) over `model`."""
    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(opt)

        def build(self, x, y):
            loss = F.cross_entropy(self.model(x), y)
            loss.backward()
            return loss
    return Step()


def join_steps(rank, options):
    """How many steps rank `rank` takes in the join scenario: ranks run out one after another,
    rank 0 first."""
    return options.get("first_steps", 1) + rank


def comm_hook(name, record):
    """The communication hook of the comm_hook scenario: a default hook, or a user hook that
    averages with all_reduce + Future.then and records what it saw of each GradBucket."""
    from plugflow.distributed.algorithms.ddp_comm_hooks import default_hooks
    if name != "custom":
        return {"allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
                "bf16": default_hooks.bf16_compress_hook}[name]

    def hook(state, bucket):
        buffer = bucket.buffer()
        grads, params = bucket.gradients(), bucket.parameters()
        flat = pf.cat([g.reshape(-1) for g in grads])
        record.append({"index": bucket.index(), "is_last": bucket.is_last(), "numel": buffer.numel(),
                       "shapes_match": [list(g.shape) == list(p.shape) for g, p in zip(grads, params)],
                       "grads_view_buffer": bool(pf.equal(flat, buffer)), "state": state})
        fut = dist.all_reduce(buffer, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0].div_(dist.get_world_size()))
    return hook


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


def state_of(model):
    """Parameters and floating buffers (running statistics) by name."""
    state = list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if b.is_floating_point()]
    return {name: t.detach() for name, t in state}


def params_of(model):
    """state_of(model) as lists of floats."""
    return {name: t.reshape(-1).tolist() for name, t in state_of(model).items()}


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
    if "first_bucket_bytes" in options:
        # DDP's first bucket holds 1 MB (PyTorch's), all of these small models: a smaller one
        # makes the tiny bucket_cap_mb of the tests split them into several buckets.
        import plugflow.nn.parallel.distributed as ddp_module
        ddp_module._DEFAULT_FIRST_BUCKET_BYTES = options["first_bucket_bytes"]
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
    elif scenario == "graph":
        # DDP inside an nn.Graph: the buckets' all-reduces and the update are nodes of the graph.
        # With "compare_eager", an eager DDP copy trains alongside on the same group.
        def ddp_model():
            model = DDP(make_model(seed=rank, batch_norm=options.get("batch_norm", False)),
                        bucket_cap_mb=options.get("bucket_cap_mb", 25),
                        gradient_as_bucket_view=options.get("gradient_as_bucket_view", False))
            if "hook" in options:
                model.register_comm_hook(None, comm_hook(options["hook"], []))
            return model
        model = ddp_model()
        step = graph_step(model, pf.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
        batches = make_batches(options.get("steps", 3))
        for ((x, y),) in batches:
            step(x[rows].clone(), y[rows].clone())
        result["params"] = params_of(model.module)
        result["ops"] = step._last.plan.node_ops()
        result["buckets"] = len(model._buckets)
        if options.get("compare_eager"):
            eager = ddp_model()
            train(eager, batches, rows)
            result["eager_params"] = params_of(eager.module)
    elif scenario == "image_model":
        make, channels, classes = IMAGE_MODELS[options["model"]]
        model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(make(seed=rank)))
        batches = make_image_batches(options.get("steps", 2), channels, classes)
        if options.get("graph"):
            # SyncBatchNorm's statistics all-reduces are captured with DDP's buckets.
            step = graph_step(model, pf.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
            for ((x, y),) in batches:
                step(x[rows].clone(), y[rows].clone())
        else:
            train(model, batches, rows)
        # 11 M values: saved as tensors, not as JSON lists.
        result["params_file"] = os.path.join(out_dir, f"params{rank}.pt")
        pf.save(state_of(model.module), result["params_file"])
    elif scenario == "join":
        # Uneven inputs: rank r takes join_steps(r) steps of its rows of the global batches.
        model = DDP(make_model(seed=rank), bucket_cap_mb=options.get("bucket_cap_mb", 25))
        batches = make_batches(join_steps(rank, options))
        try:
            with model.join(divide_by_initial_world_size=options.get("divide_by_initial_world_size", True),
                            throw_on_early_termination=options.get("throw", False)):
                train(model, batches, rows)
        except RuntimeError as e:
            result["error"] = str(e)
        result["params"] = params_of(model.module)
    elif scenario == "comm_hook":
        model = DDP(make_model(seed=rank), bucket_cap_mb=options.get("bucket_cap_mb", 25))
        record = []
        # The default hooks' state is the process group (None: the default one).
        state = "the state" if options["hook"] == "custom" else None
        model.register_comm_hook(state, comm_hook(options["hook"], record))
        try:
            model.register_comm_hook(None, comm_hook("allreduce", record))
        except RuntimeError as e:
            result["second_registration"] = str(e)
        train(model, make_batches(options.get("steps", 3)), rows)
        result["params"] = params_of(model.module)
        result["buckets_seen"] = record
        result["buckets"] = len(model._buckets)
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
        if options.get("wait"):
            time.sleep(600)  # until the launcher stops it (the signal-forwarding test)
        dist.barrier()  # the others wait here until the launcher stops them
    else:
        raise SystemExit(f"unknown scenario {scenario}")

    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
