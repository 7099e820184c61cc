#!/usr/bin/env python3
"""2-process data-parallel training, plugflow against PyTorch 1.13 (DDP over Gloo), on the
digits CNN of examples/train_digits.py (float32, a global batch of 64: 32 images per rank),
plugflow both eagerly and as an nn.Graph over the DDP model (the buckets' all-reduces are
nodes of the graph).

The driver starts 2 ranks per framework (OMP_NUM_THREADS=1 each, the environment a launcher
sets; PyTorch 1.13's torchrun fails under Python 3.11 here); every rank times, in turn:
  compute  the training step without DDP (no communication; both ranks still share the cores)
  comm     the gradient all-reduce alone: one all_reduce per DDP bucket's worth of bytes
  ddp      the training step through DistributedDataParallel (communication overlapping backward)
and, for plugflow, the same two steps as an nn.Graph (graph compute: a graph over the model
alone; graph ddp: a graph over the DDP model); rank 0 prints the medians. "hidden" is
compute + comm - ddp: the communication time that overlap hid (negative: DDP costs more than
the two apart).

    .venv/bin/python benchmarks/ddp.py [--steps 30] [--rounds 5]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
FRAMEWORKS = ("plugflow", "torch")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(fw):
    nn = fw.nn

    class DigitsCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
            self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10))

        def forward(self, x):
            return self.classifier(self.features(x))

    return DigitsCNN()


def graph_step(fw, net, opt, x, y):
    """A training step of `net` as a plugflow nn.Graph (forward, backward, update)."""
    F = fw.nn.functional

    class Step(fw.nn.Graph):
        def __init__(self):
            super().__init__()
            self.net = net
            self.add_optimizer(opt)

        def build(self, x, y):
            loss = F.cross_entropy(self.net(x), y)
            loss.backward()
            return loss

    step = Step()
    return lambda: step(x, y)


def worker(framework, steps, rounds):
    fw = __import__(framework)
    dist = fw.distributed
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    fw.manual_seed(0)
    model = build(fw)
    x, y = fw.randn(32, 1, 8, 8), fw.randint(0, 10, (32,))
    F = fw.nn.functional

    def train_step(net, opt):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()

    plain_opt = fw.optim.SGD(model.parameters(), lr=0.01)
    ddp = fw.nn.parallel.DistributedDataParallel(model)
    ddp_opt = fw.optim.SGD(ddp.parameters(), lr=0.01)
    grads = [fw.zeros(p.numel()) for p in model.parameters()]
    bucket = fw.cat(grads)  # the model's gradients (under 25 MB): one DDP bucket

    modes = {"compute": lambda: train_step(model, plain_opt),
             "comm": lambda: dist.all_reduce(bucket),
             "ddp": lambda: train_step(ddp, ddp_opt)}
    if framework == "plugflow":
        modes["graph_compute"] = graph_step(fw, model, plain_opt, x, y)
        modes["graph_ddp"] = graph_step(fw, ddp, ddp_opt, x, y)
    times = {m: [] for m in modes}
    for fn in modes.values():  # warm-up
        for _ in range(3):
            fn()
    for _ in range(rounds):
        for mode, fn in modes.items():
            dist.barrier()
            start = time.perf_counter()
            for _ in range(steps):
                fn()
            times[mode].append((time.perf_counter() - start) / steps)
    if rank == 0:
        print("RESULT " + json.dumps({m: statistics.median(t) for m, t in times.items()}), flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worker", choices=FRAMEWORKS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.rounds)
        return
    results = {}
    for framework in FRAMEWORKS:
        cmd = [sys.executable, HERE, "--worker", framework, "--steps", str(args.steps), "--rounds", str(args.rounds)]
        port = str(free_port())
        ranks = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, OMP_NUM_THREADS="1", RANK=str(rank), WORLD_SIZE="2",
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
                 for rank in range(2)]
        outs = [p.communicate() for p in ranks]
        lines = [line for line in outs[0][0].splitlines() if line.startswith("RESULT ")]
        if any(p.returncode for p in ranks) or not lines:
            raise SystemExit(f"{framework} failed:\n" + "\n".join(out + err for out, err in outs))
        results[framework] = json.loads(lines[-1][len("RESULT "):])
    print("2-process DDP, digits CNN, float32, 32 images per rank, OMP_NUM_THREADS=1 (ms per step, median)")
    print(f"{'':16s}{'compute':>10s}{'comm':>10s}{'sum':>10s}{'ddp':>10s}{'hidden':>10s}")
    rows = [("torch", results["torch"]["compute"], results["torch"]["ddp"]),
            ("plugflow", results["plugflow"]["compute"], results["plugflow"]["ddp"]),
            ("plugflow graph", results["plugflow"]["graph_compute"], results["plugflow"]["graph_ddp"])]
    for name, compute, ddp in rows:
        comm = results["torch" if name == "torch" else "plugflow"]["comm"]
        print(f"{name:16s}{1e3 * compute:10.2f}{1e3 * comm:10.2f}{1e3 * (compute + comm):10.2f}"
              f"{1e3 * ddp:10.2f}{1e3 * (compute + comm - ddp):10.2f}")
    torch_ddp = results["torch"]["ddp"]
    print(f"DDP step time, PyTorch / plugflow: eager {torch_ddp / results['plugflow']['ddp']:.2f}, "
          f"graph {torch_ddp / results['plugflow']['graph_ddp']:.2f} (> 1: plugflow is faster)")


if __name__ == "__main__":
    main()
