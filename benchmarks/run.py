#!/usr/bin/env python3
"""plugflow against PyTorch on the same workloads (benchmarks/workloads.py), in the same run.

For each workload one worker process starts per variant, all with the same thread count:
PyTorch eager, plugflow eager, plugflow's nn.Graph of the same step (and, for ResNet-18
inference and training and BERT-tiny training, a bfloat16 AMP row: plugflow eager under
autocast and the graph with AMP against PyTorch float32, beside PyTorch's own CPU autocast). Each builds the
workload and warms up (a graph compiles then); the driver then runs them in turn, round by
round (rotating the order), each round timing `--steps` calls. It prints the median time per
step of each variant, the ratios against PyTorch eager (> 1: plugflow is faster) and each
worker's peak RSS (whole process, framework included). Separate processes keep the peak RSS
figures apart.

    .venv/bin/python benchmarks/run.py                     # every workload (make bench)
    .venv/bin/python benchmarks/run.py mlp_train --rounds 9
    .venv/bin/python benchmarks/run.py --throughput --rounds 2 --steps 2   # ResNet-50, BERT-base
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# The variants of a workload: (framework, mode). "autocast" is PyTorch eager under
# torch.autocast("cpu", torch.bfloat16).
EAGER, GRAPH, GRAPH_BF16, AUTOCAST = ("plugflow", "eager"), ("plugflow", "graph"), ("plugflow", "graph-bf16"), \
    ("torch", "autocast")
EAGER_AUTOCAST = ("plugflow", "autocast")  # plugflow eager under plugflow.autocast("cpu", bfloat16)
AMP_WORKLOADS = ("resnet18_infer", "resnet18_cifar_train", "bert_tiny_train")
TORCH = ("torch", "eager")


def worker(variant, workload, threads, warmup):
    """Runs in a child: builds the workload, then answers the driver's commands on stdin."""
    import resource
    sys.path.insert(0, HERE)
    import workloads
    from workloads import THROUGHPUT, WORKLOADS

    framework, mode = variant.split(":")
    fw = __import__(framework)
    fw.set_num_threads(threads)
    fw.manual_seed(0)
    workloads.MODE = "eager" if mode == "autocast" else mode
    made = {**WORKLOADS, **THROUGHPUT}[workload][0](fw)
    if mode == "autocast":
        eager_step = made

        def made():
            with fw.autocast("cpu", dtype=fw.bfloat16):
                eager_step()
    step, batch = made if isinstance(made, tuple) else (made, 1)
    for _ in range(warmup):
        step()
    sync = fw.cuda.synchronize if fw.cuda.is_available() else (lambda: None)
    sync()
    print(json.dumps({"batch": batch, "device": "cuda" if fw.cuda.is_available() else "cpu"}), flush=True)
    for line in sys.stdin:
        cmd, *arg = line.split()
        if cmd == "round":
            n = int(arg[0])
            start = time.perf_counter()
            for _ in range(n):
                step()
            sync()
            print(json.dumps((time.perf_counter() - start) / n), flush=True)
        elif cmd == "rss":
            print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024), flush=True)
        else:
            return


class Worker:
    def __init__(self, variant, workload, args):
        framework = ":".join(variant)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", framework, workload, "--threads", str(args.threads),
             "--warmup", str(args.warmup)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.framework = framework
        self.info = self._expect()  # {"batch": ..., "device": ...} once the workload is built

    def _expect(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.framework} worker exited (rc {self.proc.wait()})")
        return json.loads(line)

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._expect()

    def close(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait()


def run_workload(name, args, steps, variants=(TORCH, EAGER)):
    workers = {v: Worker(v, name, args) for v in variants}
    try:
        samples = {fw: [] for fw in workers}
        for r in range(args.rounds):
            order = list(workers)[r % len(workers):] + list(workers)[:r % len(workers)]
            for fw in order:
                # Let the other worker's idle threads stop spinning first (OpenMP and OpenBLAS
                # spin after work), so that neither framework is timed against the other's spin.
                time.sleep(0.3)
                samples[fw].append(workers[fw].ask(f"round {steps}"))
        rss = {fw: w.ask("rss") for fw, w in workers.items()}
        info = next(iter(workers.values())).info  # batch and device: the same in every variant
    finally:
        for w in workers.values():
            w.close()
    med = {fw: statistics.median(s) for fw, s in samples.items()}
    return med, rss, info


def throughput_table(args, models):
    print(f"{time.strftime('%Y-%m-%d')}, {args.threads} CPU threads, median of {args.rounds} rounds")
    print("| model | device | batch | PyTorch samples/s | plugflow samples/s | ratio plugflow/PyTorch |")
    print("|---|---|---:|---:|---:|---:|")
    failed = False
    for name, (_, label, steps) in models.items():
        try:
            med, _, info = run_workload(name, args, args.steps or steps)
        except Exception as e:
            print(f"| {label} | failed: {e} |")
            failed = True
            continue
        rate = {fw: info["batch"] / t for fw, t in med.items()}
        print(f"| {label} | {info['device']} | {info['batch']} | {rate[TORCH]:.1f} | {rate[EAGER]:.1f} | "
              f"{rate[EAGER] / rate[TORCH]:.2f} |", flush=True)
    return 1 if failed else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        p = argparse.ArgumentParser()
        p.add_argument("--worker", nargs=2)
        p.add_argument("--threads", type=int)
        p.add_argument("--warmup", type=int)
        a = p.parse_args()
        return worker(a.worker[0], a.worker[1], a.threads, a.warmup)

    sys.path.insert(0, HERE)
    from workloads import THROUGHPUT, WORKLOADS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", help=f"workloads to run (default: all): {', '.join(WORKLOADS)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="steps timed per round (default: per workload)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-graph", action="store_true", help="skip the nn.Graph variants")
    parser.add_argument("--no-amp", dest="amp", action="store_false", help="skip the bfloat16 AMP row")
    parser.add_argument("--throughput", action="store_true",
                        help="instead: training samples/s of ResNet-50 and BERT-base (DLPerf-style), on cuda when present")
    args = parser.parse_args()
    if args.throughput:
        return throughput_table(args, THROUGHPUT)

    names = args.workloads or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    print(f"{time.strftime('%Y-%m-%d')}, {args.threads} threads, median of {args.rounds} rounds; ratios are "
          "PyTorch eager ms / plugflow ms (> 1: plugflow is faster)")
    print("| workload | PyTorch ms | plugflow eager ms | plugflow graph ms | ratio eager | ratio graph | "
          "graph / eager speed-up | peak RSS MB: PyTorch / eager / graph |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    failed = False
    for name in names:
        label = WORKLOADS[name][1]
        graph = name != "small_op" and not args.no_graph
        variants = (TORCH, EAGER, GRAPH) if graph else (TORCH, EAGER)
        try:
            med, rss, _ = run_workload(name, args, args.steps or WORKLOADS[name][2], variants)
        except Exception as e:  # one failing workload does not hide the others' figures
            print(f"| {label} | failed: {e} |")
            failed = True
            continue
        mb = {v: f"{rss[v] / 2**20:.0f}" for v in variants}
        if graph:
            print(f"| {label} | {med[TORCH] * 1e3:.3f} | {med[EAGER] * 1e3:.3f} | {med[GRAPH] * 1e3:.3f} | "
                  f"{med[TORCH] / med[EAGER]:.2f} | {med[TORCH] / med[GRAPH]:.2f} | {med[EAGER] / med[GRAPH]:.2f} | "
                  f"{mb[TORCH]} / {mb[EAGER]} / {mb[GRAPH]} |", flush=True)
        else:
            print(f"| {label} | {med[TORCH] * 1e3:.3f} | {med[EAGER] * 1e3:.3f} | - | {med[TORCH] / med[EAGER]:.2f} | "
                  f"- | - | {mb[TORCH]} / {mb[EAGER]} / - |", flush=True)
        if name in AMP_WORKLOADS and args.amp:
            variants = (TORCH, AUTOCAST, EAGER_AUTOCAST, GRAPH_BF16)
            try:
                med, rss, _ = run_workload(name, args, args.steps or WORKLOADS[name][2], variants)
            except Exception as e:
                print(f"| {label}, bfloat16 AMP | failed: {e} |")
                failed = True
                continue
            # PyTorch's column is its float32 run; plugflow's eager column is its autocast run.
            print(f"| {label}, bfloat16 AMP (PyTorch: float32; its autocast: {med[AUTOCAST] * 1e3:.3f} ms) | "
                  f"{med[TORCH] * 1e3:.3f} | {med[EAGER_AUTOCAST] * 1e3:.3f} | {med[GRAPH_BF16] * 1e3:.3f} | "
                  f"{med[TORCH] / med[EAGER_AUTOCAST]:.2f} | {med[TORCH] / med[GRAPH_BF16]:.2f} | "
                  f"{med[EAGER_AUTOCAST] / med[GRAPH_BF16]:.2f} | {rss[TORCH] / 2**20:.0f} / "
                  f"{rss[EAGER_AUTOCAST] / 2**20:.0f} / {rss[GRAPH_BF16] / 2**20:.0f} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
