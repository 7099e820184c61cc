#!/usr/bin/env python3
"""plugflow against PyTorch on the same workloads (benchmarks/workloads.py), in the same run.

For each workload two worker processes start, one per framework, with the same thread count.
Each builds the workload and warms up; then the driver alternates them, round by round, each
round timing `--steps` calls. It prints the median time per step of each framework, the ratio
PyTorch / plugflow (> 1: plugflow is faster) and each worker's peak RSS (whole process,
framework included). Separate processes keep the peak RSS figures apart.

    .venv/bin/python benchmarks/run.py                     # every workload (make bench)
    .venv/bin/python benchmarks/run.py mlp_train --rounds 9
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
    from workloads import WORKLOADS

    fw = __import__(framework)
    fw.set_num_threads(threads)
    fw.manual_seed(0)
    step = WORKLOADS[workload][0](fw)
    for _ in range(warmup):
        step()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *arg = line.split()
        if cmd == "round":
            n = int(arg[0])
            start = time.perf_counter()
            for _ in range(n):
                step()
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
        self._expect("ready")

    def _expect(self, what=None):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.framework} worker exited (rc {self.proc.wait()})")
        return line.strip() if what else json.loads(line)

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._expect()

    def close(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait()


def run_workload(name, args):
    workers = {fw: Worker(fw, name, args) for fw in ("torch", "plugflow")}
    try:
        samples = {fw: [] for fw in workers}
        for r in range(args.rounds):
            order = list(workers) if r % 2 == 0 else list(reversed(workers))
            for fw in order:
                samples[fw].append(workers[fw].ask(f"round {args.steps}"))
        rss = {fw: w.ask("rss") for fw, w in workers.items()}
    finally:
        for w in workers.values():
            w.close()
    med = {fw: statistics.median(s) for fw, s in samples.items()}
    return med, rss


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        p = argparse.ArgumentParser()
        p.add_argument("--worker", nargs=2)
        p.add_argument("--threads", type=int)
        p.add_argument("--warmup", type=int)
        a = p.parse_args()
        return worker(a.worker[0], a.worker[1], a.threads, a.warmup)

    sys.path.insert(0, HERE)
    from workloads import WORKLOADS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", help=f"workloads to run (default: all): {', '.join(WORKLOADS)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5, help="steps timed per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    names = args.workloads or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    print(f"{time.strftime('%Y-%m-%d')}, {args.threads} threads, median of {args.rounds} rounds x {args.steps} steps")
    print(f"| workload | PyTorch ms | plugflow ms | ratio PyTorch/plugflow | PyTorch peak RSS MB | plugflow peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|")
    failed = False
    for name in names:
        try:
            med, rss = run_workload(name, args)
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
