#!/usr/bin/env python3
"""How OpenMP's waiting policy fares on an idle and on a busy machine, against PyTorch.

OpenMP workers that finish a parallel region spin for a while before they sleep. Spinning makes
the next region start at once on an idle machine, and costs a scheduler round trip per region
when another process wants the core: a busy machine then runs every parallel loop at the speed
of the slowest, descheduled worker. This script times, for each waiting policy of plugflow and
for PyTorch with its defaults, a few `benchmarks/workloads.py` workloads and a small-tensor loop
(relu on 262k floats, the case that first showed the problem), once on the machine as it is
("idle") and once with `--busy N` processes spinning beside the workers ("loaded").

    .venv/bin/python benchmarks/threads.py --rounds 5            # the table in docs/design.md

Each variant is one worker process; rounds alternate the variants; medians are printed, and
each plugflow policy's worst ratio against PyTorch over all rows and both conditions.
"""
import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# plugflow's policies: the environment each worker starts with. "default" is what
# `import plugflow` sets up by itself.
POLICIES = {
    "default": {},
    "spin 300000 (libgomp's default)": {"GOMP_SPINCOUNT": "300000"},
    "spin 20000": {"GOMP_SPINCOUNT": "20000"},
    "spin 2000": {"GOMP_SPINCOUNT": "2000"},
    "passive": {"OMP_WAIT_POLICY": "passive"},
}

WORKLOADS = ["relu_262k", "mlp_train", "resnet18_cifar_train", "bert_tiny_train", "resnet18_infer"]


def make_relu(fw):
    """relu on 262144 float32 (a 64x64x64 activation): one short parallel region per call."""
    x = fw.randn(64, 64, 64)

    def step():
        for _ in range(100):
            fw.relu(x)
    return step


def worker(framework, workload, threads):
    sys.path.insert(0, HERE)
    from workloads import WORKLOADS as W
    fw = __import__(framework)
    fw.set_num_threads(threads)
    fw.manual_seed(0)
    step = make_relu(fw) if workload == "relu_262k" else W[workload][0](fw)
    for _ in range(3):
        step()
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        if not line.startswith("round"):
            return
        n = int(line.split()[1])
        start = time.perf_counter()
        for _ in range(n):
            step()
        print(json.dumps((time.perf_counter() - start) / n), flush=True)


class Worker:
    def __init__(self, framework, workload, threads, env):
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", framework, workload, str(threads)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **env})
        self.ask(None)

    def ask(self, command):
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited (rc {self.proc.wait()})")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def spin():
    while True:
        pass


def measure(workload, args):
    steps = {"relu_262k": 5, "mlp_train": 50, "resnet18_cifar_train": 2, "bert_tiny_train": 3,
             "resnet18_infer": 10}[workload]
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    variants = {"PyTorch": Worker("torch", workload, args.threads, {})}
    for name, env in POLICIES.items():
        os.environ.clear()
        os.environ.update(clean)
        variants[name] = Worker("plugflow", workload, args.threads, env)
    samples = {v: [] for v in variants}
    try:
        for r in range(args.rounds):
            names = list(variants)
            for name in names[r % len(names):] + names[:r % len(names)]:
                time.sleep(0.2)
                samples[name].append(variants[name].ask(f"round {steps}"))
    finally:
        for w in variants.values():
            w.close()
    return {v: statistics.median(s) for v, s in samples.items()}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--busy", type=int, default=2, help="spinning processes for the loaded condition")
    p.add_argument("workloads", nargs="*", default=WORKLOADS)
    args = p.parse_args()
    names = ["PyTorch", *POLICIES]
    worst = {n: 0.0 for n in POLICIES}
    print(f"{time.strftime('%Y-%m-%d')}, {args.threads} threads, median ms of {args.rounds} rounds; "
          f"loaded = {args.busy} spinning processes beside the workers; in brackets: ms / PyTorch's ms")
    print("| condition | workload | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for condition in ("idle", "loaded"):
        busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy if condition == "loaded" else 0)]
        for b in busy:
            b.start()
        try:
            for w in args.workloads:
                med = measure(w, args)
                cells = [f"{med['PyTorch'] * 1e3:.3f}"]
                for n in POLICIES:
                    ratio = med[n] / med["PyTorch"]
                    worst[n] = max(worst[n], ratio)
                    cells.append(f"{med[n] * 1e3:.3f} ({ratio:.2f})")
                print(f"| {condition} | {w} | " + " | ".join(cells) + " |", flush=True)
        finally:
            for b in busy:
                b.terminate()
    print("\nworst plugflow / PyTorch time over all rows: " +
          ", ".join(f"{n}: {r:.2f}" for n, r in worst.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
