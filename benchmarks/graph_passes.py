#!/usr/bin/env python3
"""nn.Graph's fusion passes, each alone and all together, against the graph with all of them off,
in float32 and with bfloat16 AMP, on the benchmark workloads (benchmarks/workloads.py), beside
PyTorch float32 eager on the same workload in the same run.

Every graph variant builds its own copy of the workload in this process (same seed, so the same
weights and data); PyTorch runs in a worker process of benchmarks/run.py. Each round times the
workload's steps per round (workloads.WORKLOADS) of every variant in turn, rotating the order,
and the markdown table shows per set of passes and precision the median ms per step, the ratio
off / on within the precision (> 1: the passes help), the ratio PyTorch float32 ms / its ms
(> 1: faster than PyTorch) and the plan's peak of live temporary bytes.

    .venv/bin/python benchmarks/graph_passes.py                       # every workload
    .venv/bin/python benchmarks/graph_passes.py resnet18_infer resnet18_cifar_train --rounds 9
    .venv/bin/python benchmarks/graph_passes.py resnet18_infer --amp off --no-torch
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import plugflow as pf  # noqa: E402
import workloads  # noqa: E402

PASSES = ("fuse_pad_conv", "fuse_conv_bn", "fuse_bias_act", "fuse_add_to_output", "fuse_model_update", "blocked_layout")
WORKLOADS = [name for name in workloads.WORKLOADS if name != "small_op"]
PRECISIONS = {"off": ("graph",), "bf16": ("graph-bf16",), "both": ("graph", "graph-bf16")}


def build(make, passes, mode):
    """The workload's graph step in `mode` ("graph" or "graph-bf16") with exactly `passes` on,
    and its graph."""
    made = []
    original = pf.nn.GraphConfig.__init__

    def configured(config):
        original(config)
        config._passes = {name: name in passes for name in PASSES}
    pf.nn.GraphConfig.__init__ = configured
    real_graph = workloads._graph

    def keep(*args, **kwargs):
        made.append(real_graph(*args, **kwargs))
        return made[-1]
    workloads._graph = keep
    workloads.MODE = mode
    try:
        pf.manual_seed(0)
        step = make(pf)
    finally:
        pf.nn.GraphConfig.__init__ = original
        workloads._graph = real_graph
    return (step[0] if isinstance(step, tuple) else step), made[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=WORKLOADS, help=", ".join(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=float, default=1.0, help="scales each workload's steps per round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--amp", choices=sorted(PRECISIONS), default="both",
                        help="the graphs' precision: float32 (off), bf16 AMP, or both (default)")
    parser.add_argument("--no-torch", dest="torch", action="store_false",
                        help="leave out the PyTorch float32 eager reference (its worker process)")
    args = parser.parse_args()
    for name in args.workloads:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    pf.set_num_threads(args.threads)
    print(f"`{' '.join(['benchmarks/graph_passes.py'] + sys.argv[1:])}`: {time.strftime('%Y-%m-%d %H:%M')}, "
          f"{args.threads} threads, medians of {args.rounds} rounds, load average at start "
          f"{os.getloadavg()[0]:.1f}\n")
    print("| workload | passes on | f32 ms | f32 off/on | PyTorch f32 / f32 | bf16 ms | bf16 off/on | "
          "PyTorch f32 / bf16 | peak live MB f32 / bf16 |\n|---|---|---:|---:|---:|---:|---:|---:|---|", flush=True)
    for name in args.workloads:
        make, label, per_round = workloads.WORKLOADS[name]
        per_round = max(1, round(per_round * args.steps))
        variants = {}  # (mode, variant) -> passes
        for mode in PRECISIONS[args.amp]:
            variants |= {(mode, "none"): ()} | {(mode, p): (p,) for p in PASSES} | {(mode, "all"): PASSES}
        steps, graphs = {}, {}
        for key, passes in variants.items():
            steps[key], graphs[key] = build(make, passes, key[0])
            for _ in range(2):
                steps[key]()  # compile, warm up
        torch_worker = None
        if args.torch:
            import run  # benchmarks/run.py: the PyTorch worker process

            torch_worker = run.Worker(run.TORCH, name, argparse.Namespace(threads=args.threads, warmup=2))
        order = list(variants) + (["torch"] if torch_worker else [])
        times = {v: [] for v in order}
        try:
            for r in range(args.rounds):
                for v in order[r % len(order):] + order[:r % len(order)]:
                    if v == "torch":
                        time.sleep(0.3)  # let the other process's idle OpenMP threads stop spinning
                        times[v].append(torch_worker.ask(f"round {per_round}") * 1e3)
                        continue
                    start = time.perf_counter()
                    for _ in range(per_round):
                        steps[v]()
                    times[v].append((time.perf_counter() - start) / per_round * 1e3)
        finally:
            if torch_worker:
                torch_worker.close()
        torch_ms = statistics.median(times["torch"]) if torch_worker else None
        if torch_worker:
            print(f"| {label} | (PyTorch float32 eager) | {torch_ms:.2f} | | 1.00 | | | | |")
        for variant in ["none", *PASSES, "all"]:
            cells, peaks = [], []
            for mode in ("graph", "graph-bf16"):
                if (mode, variant) not in variants:
                    cells += ["-", "-", "-"]
                    peaks.append("-")
                    continue
                ms = statistics.median(times[(mode, variant)])
                off = statistics.median(times[(mode, "none")])
                cells += [f"{ms:.2f}", f"{off / ms:.2f}", f"{torch_ms / ms:.2f}" if torch_ms else "-"]
                peaks.append(f"{graphs[(mode, variant)]._last.plan.peak_live_bytes / 2**20:.1f}")
            print(f"| {label} | {variant} | {' | '.join(cells)} | {' / '.join(peaks)} |", flush=True)


if __name__ == "__main__":
    main()
