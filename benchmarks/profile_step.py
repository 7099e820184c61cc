#!/usr/bin/env python3
"""The profiler on one workload of benchmarks/workloads.py: the step time with recording off
and on (medians of alternating rounds: the profiler's overhead) and the per-op table.

    .venv/bin/python benchmarks/profile_step.py resnet18_cifar_train --rounds 5
    .venv/bin/python benchmarks/profile_step.py resnet18_infer --mode graph-bf16   # an nn.Graph with bf16 AMP
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plugflow as pf  # noqa: E402
import workloads  # noqa: E402
from workloads import WORKLOADS  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rows", type=int, default=12)
    p.add_argument("--mode", choices=("eager", "graph", "graph-bf16"), default="eager",
                   help="run the step eagerly or as an nn.Graph (float32, or with bf16 AMP)")
    args = p.parse_args()
    workloads.MODE = args.mode
    pf.set_num_threads(args.threads)
    pf.manual_seed(0)
    step = WORKLOADS[args.workload][0](pf)
    for _ in range(2):
        step()
    off, on = [], []
    for _ in range(args.rounds):
        t = time.perf_counter()
        step()
        off.append(time.perf_counter() - t)
        with pf.profiler.profile(record_shapes=True, profile_memory=True) as prof:
            t = time.perf_counter()
            step()
            on.append(time.perf_counter() - t)
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"{args.workload} ({args.mode}), {args.threads} threads: off {m_off * 1e3:.1f} ms, on {m_on * 1e3:.1f} ms "
          f"({100 * (m_on / m_off - 1):+.1f}%), {len(prof.events())} kernel calls per step")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
