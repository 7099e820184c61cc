"""DistributedDataParallel and SyncBatchNorm: 2 processes on loopback, started by
plugflow.distributed.run, train the same float64 parameters as one process on the global
batch (also with tiny buckets and gradient_as_bucket_view, with no_sync accumulation, with
SyncBatchNorm against BatchNorm, as two "nodes" on one host, inside an nn.Graph, with
communication hooks, and for ResNet-18); join() on uneven inputs; unused parameters; models
that differ across ranks; a rank that dies mid-step; errors in process; Future."""

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
    # one bucket per parameter or so
    {"bucket_cap_mb": 0.0005, "first_bucket_bytes": 512, "gradient_as_bucket_view": True},
])
def test_two_processes_train_like_one_on_the_global_batch(tmp_path, options):
    _, results = launch("train", tmp_path, options)
    expected = reference()
    assert sorted(results) == [0, 1]
    for r in results.values():
        assert_same_params(r["params"], expected)


def test_four_processes_train_like_one_on_the_global_batch(tmp_path):
    _, results = launch("train", tmp_path, {"bucket_cap_mb": 0.001, "first_bucket_bytes": 1024}, nproc=4)
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


# ---- DDP inside nn.Graph --------------------------------------------------------------------

@pytest.mark.parametrize("nproc,options", [
    (2, {}),
    (2, {"bucket_cap_mb": 0.0005, "first_bucket_bytes": 512, "gradient_as_bucket_view": True}),  # ~ a parameter each
    (4, {"bucket_cap_mb": 0.001, "first_bucket_bytes": 1024}),
])
def test_graph_over_ddp_trains_like_one_process_on_the_global_batch(tmp_path, nproc, options):
    _, results = launch("graph", tmp_path, options, nproc=nproc)
    expected = reference()
    assert sorted(results) == list(range(nproc))
    for r in results.values():
        assert_same_params(r["params"], expected)
        ops = r["ops"]
        starts = [i for i, op in enumerate(ops) if op == "host:all_reduce.start"]
        waits = [i for i, op in enumerate(ops) if op == "host:all_reduce.wait"]
        assert len(starts) == len(waits) == r["buckets"]
        assert any(op.startswith("multi_sgd_step_") for op in ops[waits[-1]:])  # the fused update after
        if options:
            # The first buckets go out while the graph's backward still computes gradients.
            assert r["buckets"] > 2
            last_gradient = max(i for i, op in enumerate(ops) if op.startswith("conv2d_grad"))
            assert starts[0] < starts[1] < last_gradient


@pytest.mark.parametrize("options", [
    {"batch_norm": True},  # per-rank statistics, rank 0's buffers broadcast by each forward
    {"hook": "fp16"},
])
def test_graph_over_ddp_matches_eager_ddp(tmp_path, options):
    """What the graph captures of DDP's forward (the buffers' broadcast) and of a communication
    hook (fp16 compression) replays as eager DDP runs it."""
    _, results = launch("graph", tmp_path, dict(options, compare_eager=True))
    for r in results.values():
        assert_same_params(r["params"], r["eager_params"])
        assert ("host:broadcast.start" in r["ops"]) == ("batch_norm" in options)
    if "batch_norm" in options:
        assert "bn.running_mean" in results[0]["params"]
    else:
        assert results[0]["params"] != reference()  # float16 averages, not float64 ones


def test_collectives_in_graphs_in_process():
    import plugflow.distributed as dist
    from plugflow.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        model = DDP(ddp_worker.make_model(seed=0), find_unused_parameters=True)
        step = ddp_worker.graph_step(model, pf.optim.SGD(model.parameters(), lr=0.1))
        x, y = ddp_worker.make_batches(1)[0][0]
        with pytest.raises(NotImplementedError, match="find_unused_parameters"):
            step(x, y)

        class Gather(pf.nn.Graph):
            def build(self, t):
                out = [pf.zeros_like(t)]
                dist.all_gather(out, t)
                return out[0]
        with pytest.raises(pf.nn.GraphCaptureError, match="all_gather inside an nn.Graph"):
            Gather()(pf.ones(2))

        class Reduce(pf.nn.Graph):  # an all_reduce in build() is replayed on every call
            def build(self, t):
                u = t * 2
                dist.all_reduce(u)
                return u + 1
        g = Reduce()
        assert g(pf.ones(2)).tolist() == [3.0, 3.0]
        assert g(pf.full((2,), 5.0)).tolist() == [11.0, 11.0]
        assert "host:all_reduce.start" in g._last.plan.node_ops()

        # no_sync() is part of the signature: its plan has no all-reduce, the next synced call's has.
        model = DDP(ddp_worker.make_model(seed=0))
        step = ddp_worker.graph_step(model, pf.optim.SGD(model.parameters(), lr=0.1))
        with model.no_sync():
            step(x, y)
        assert "host:all_reduce.start" not in step._last.plan.node_ops()
        step(x, y)
        assert "host:all_reduce.start" in step._last.plan.node_ops()
    finally:
        dist.destroy_process_group()


# ---- ResNet-18 and the demo's CNN ----------------------------------------------------------------

@pytest.mark.parametrize("model_name,nproc,graph", [("resnet18", 2, False), ("resnet18", 4, False),
                                                    ("resnet18", 2, True), ("resnet18", 4, True), ("digits", 2, False),
                                                    ("digits", 4, False), ("digits", 2, True), ("digits", 4, True)])
def test_image_model_with_sync_batch_norm_trains_like_one_process(tmp_path, model_name, nproc, graph):
    """Under DDP, BatchNorm normalizes with each rank's own statistics, so only SyncBatchNorm
    (convert_sync_batchnorm) matches BatchNorm on the global batch: the ranks run it, eagerly
    or as an nn.Graph over the DDP model, for ResNet-18 and the demo's DigitsCNN."""
    _, results = launch("image_model", tmp_path, {"model": model_name, "steps": 2, "graph": graph}, nproc=nproc)
    make, channels, classes = ddp_worker.IMAGE_MODELS[model_name]
    model = make(seed=0)
    ddp_worker.train(model, ddp_worker.make_image_batches(2, channels, classes), slice(None))
    expected = ddp_worker.state_of(model)
    assert any(name.endswith("running_var") for name in expected)
    assert sorted(results) == list(range(nproc))
    for r in results.values():
        got = pf.load(r["params_file"])
        assert got.keys() == expected.keys()
        for name, t in expected.items():
            diff = (got[name] - t).abs().max().item()
            assert diff <= 1e-10, f"{name}: max difference {diff}"


# ---- join() -----------------------------------------------------------------------------------

def join_reference(ws, divide_by_initial_world_size=True, first_steps=1):
    """One process: at each step, the rows of the ranks that still have inputs, each rank's mean
    loss summed and divided by the world size (or by the number of ranks still training)."""
    model = ddp_worker.make_model(seed=0)
    opt = pf.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    steps = [ddp_worker.join_steps(r, {"first_steps": first_steps}) for r in range(ws)]
    per_rank = ddp_worker.GLOBAL_BATCH // ws
    for step, ((x, y),) in enumerate(ddp_worker.make_batches(max(steps))):
        active = [r for r in range(ws) if steps[r] > step]
        opt.zero_grad()
        losses = [pf.nn.functional.cross_entropy(model(x[r * per_rank:(r + 1) * per_rank]),
                                                 y[r * per_rank:(r + 1) * per_rank]) for r in active]
        (sum(losses) / (ws if divide_by_initial_world_size else len(active))).backward()
        opt.step()
    return ddp_worker.params_of(model)


@pytest.mark.parametrize("nproc,options", [
    (2, {}),
    (4, {"divide_by_initial_world_size": False, "bucket_cap_mb": 0.001, "first_bucket_bytes": 1024}),
])
def test_join_shadows_the_ranks_that_ran_out(tmp_path, nproc, options):
    """Rank r has 1 + r steps of inputs: rank 0 joins first, the last rank trains alone at the
    end; every rank ends with the last joiner's parameters."""
    _, results = launch("join", tmp_path, options, nproc=nproc)
    expected = join_reference(nproc, options.get("divide_by_initial_world_size", True))
    assert sorted(results) == list(range(nproc))
    for r in results.values():
        assert "error" not in r, r["error"]
        assert_same_params(r["params"], expected)


def test_join_throw_on_early_termination(tmp_path):
    _, results = launch("join", tmp_path, {"throw": True})
    assert results[0]["error"] == "Rank 0 exhausted all inputs."
    assert results[1]["error"] == "Detected at least one rank that exhausted inputs. Throwing across all ranks."


# ---- communication hooks ----------------------------------------------------------------------

@pytest.mark.parametrize("hook", ["allreduce", "custom"])
def test_comm_hooks_that_average_exactly(tmp_path, hook):
    _, results = launch("comm_hook", tmp_path, {"hook": hook, "bucket_cap_mb": 0.001, "first_bucket_bytes": 1024})
    expected = reference()
    for r in results.values():
        assert_same_params(r["params"], expected)
        assert r["second_registration"] == "register_comm_hook or register_builtin_comm_hook can only be called once."
        if hook == "custom":
            n = r["buckets"]
            assert n > 1
            seen = r["buckets_seen"]
            assert [b["index"] for b in seen] == list(range(n)) * 3  # 3 steps, buckets in order
            assert [b["is_last"] for b in seen] == ([False] * (n - 1) + [True]) * 3
            assert all(all(b["shapes_match"]) and b["grads_view_buffer"] for b in seen)
            assert all(b["state"] == "the state" for b in seen)
            assert sum(b["numel"] for b in seen[:n]) == sum(len(v) for k, v in expected.items())


@pytest.mark.parametrize("hook,eps", [("fp16", 2.0 ** -11), ("bf16", 2.0 ** -8)])
def test_compress_hooks_average_in_low_precision(tmp_path, hook, eps):
    """float64 gradients averaged in float16 / bfloat16: the ranks agree exactly, and the
    parameters are those of exact averaging up to the format's rounding."""
    _, results = launch("comm_hook", tmp_path, {"hook": hook})
    expected = reference()
    assert results[0]["params"] == results[1]["params"]
    worst = max(max(abs(a - b) for a, b in zip(results[0]["params"][k], expected[k])) for k in expected)
    # Each averaged gradient is off by about eps of its size (the cast, then the sum's rounding);
    # 3 steps of lr 0.1 with momentum 0.9 move a parameter by at most 0.1 * (2.71 + 1.9 + 1) = 0.561
    # times the largest gradient, which is below 1 here. Measured: fp16 1.7e-5, bf16 2.3e-4.
    assert 0 < worst < 0.561 * eps


def test_future():
    from plugflow.futures import Future
    fut = Future()
    chained = fut.then(lambda f: f.value() * 2).then(lambda f: f.value() + 1)
    assert not fut.done() and not chained.done()
    with pytest.raises(RuntimeError, match="not completed"):
        fut.value()
    fut.set_result(20)
    assert chained.done() and chained.wait() == 41 and chained.value() == 41
    with pytest.raises(RuntimeError, match="only be marked completed once"):
        fut.set_result(1)
    failing = Future()
    after = failing.then(lambda f: f.value())
    failing.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        after.wait()
    with pytest.raises(RuntimeError, match="nothing will complete"):
        Future().wait()
