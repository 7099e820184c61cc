#!/usr/bin/env python3
"""plugflow against PyTorch on the same workloads (benchmarks/workloads.py), in the same run.

For each workload two worker processes start, one per framework, with the same thread count.
Each builds the workload and warms up; then the driver alternates them, round by round, each
round timing `--steps` calls. It prints the median time per step of each framework, the ratio
PyTorch / plugflow (> 1: plugflow is faster) and each worker's peak RSS (whole process,
framework included). Separate processes keep the peak RSS figures apart.

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


def worker(framework, workload, threads, warmup):
    """Runs in a child: builds the workload, then answers the driver's commands on stdin."""
    import resource
    sys.path.insert(0, HERE)
    from workloads import THROUGHPUT, WORKLOADS

    fw = __import__(framework)
    fw.set_num_threads(threads)
    fw.manual_seed(0)
    made = {**WORKLOADS, **THROUGHPUT}[workload][0](fw)
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
    def __init__(self, framework, workload, args):
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


def run_workload(name, args, steps):
    workers = {fw: Worker(fw, name, args) for fw in ("torch", "plugflow")}
    try:
        samples = {fw: [] for fw in workers}
        for r in range(args.rounds):
            order = list(workers) if r % 2 == 0 else list(reversed(workers))
            for fw in order:
                # Let the other worker's idle threads stop spinning first (OpenMP and OpenBLAS
                # spin after work), so that neither framework is timed against the other's spin.
                time.sleep(0.3)
                samples[fw].append(workers[fw].ask(f"round {steps}"))
        rss = {fw: w.ask("rss") for fw, w in workers.items()}
        info = workers["plugflow"].info
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
        print(f"| {label} | {info['device']} | {info['batch']} | {rate['torch']:.1f} | {rate['plugflow']:.1f} | "
              f"{rate['plugflow'] / rate['torch']:.2f} |", flush=True)
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
    parser.add_argument("--throughput", action="store_true",
                        help="instead: training samples/s of ResNet-50 and BERT-base (DLPerf-style), on cuda when present")
    args = parser.parse_args()
    if args.throughput:
        return throughput_table(args, THROUGHPUT)

    names = args.workloads or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    print(f"{time.strftime('%Y-%m-%d')}, {args.threads} threads, median of {args.rounds} rounds")
    print(f"| workload | PyTorch ms | plugflow ms | ratio PyTorch/plugflow | PyTorch peak RSS MB | plugflow peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|")
    failed = False
    for name in names:
        try:
            med, rss, _ = run_workload(name, args, args.steps or WORKLOADS[name][2])
        except Exception as e:  # one failing workload does not hide the others' figures
            print(f"| {WORKLOADS[name][1]} | failed: {e} |")
            failed = True
            continue
        print(f"| {WORKLOADS[name][1]} | {med['torch'] * 1e3:.3f} | {med['plugflow'] * 1e3:.3f} | "
              f"{med['torch'] / med['plugflow']:.2f} | {rss['torch'] / 2**20:.0f} | {rss['plugflow'] / 2**20:.0f} |",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
