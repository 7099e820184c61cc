#!/usr/bin/env python3
"""nn.Graph's fusion passes, each alone and all together, against the graph with all of them off,
on the benchmark workloads (benchmarks/workloads.py, MODE "graph").

Every variant builds its own copy of the workload in this process (same seed, so the same
weights and data); each round times the workload's steps per round (workloads.WORKLOADS) of
every variant in turn, rotating the order, and the table shows the median ms per step, the
ratio off / on (> 1: the pass helps) and the plan's peak of live temporary bytes.

    .venv/bin/python benchmarks/graph_passes.py                       # every workload
    .venv/bin/python benchmarks/graph_passes.py resnet18_infer --rounds 9
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import plugflow as pf  # noqa: E402
import workloads  # noqa: E402

PASSES = ("fuse_pad_conv", "fuse_conv_bn", "fuse_bias_act", "fuse_add_to_output", "fuse_model_update")
WORKLOADS = [name for name in workloads.WORKLOADS if name != "small_op"]


def build(make, passes):
    """The workload's graph step with exactly `passes` on, and its graph."""
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
    args = parser.parse_args()
    for name in args.workloads:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    pf.set_num_threads(args.threads)
    workloads.MODE = "graph"
    print(f"| workload | variant | ms/step | off/on | peak live MB |\n|---|---|---|---|---|")
    for name in args.workloads:
        variants = {"off": ()} | {p: (p,) for p in PASSES} | {"all": PASSES}
        make, _, per_round = workloads.WORKLOADS[name]
        per_round = max(1, round(per_round * args.steps))
        steps, graphs = {}, {}
        for v, passes in variants.items():
            steps[v], graphs[v] = build(make, passes)
            for _ in range(2):
                steps[v]()  # compile, warm up
        times = {v: [] for v in variants}
        order = list(variants)
        for r in range(args.rounds):
            for v in order[r % len(order):] + order[:r % len(order)]:
                start = time.perf_counter()
                for _ in range(per_round):
                    steps[v]()
                times[v].append((time.perf_counter() - start) / per_round * 1e3)
        off = statistics.median(times["off"])
        for v in variants:
            ms = statistics.median(times[v])
            peak = graphs[v]._last.plan.peak_live_bytes / 2**20
            print(f"| {name} | {v} | {ms:.2f} | {off / ms:.2f} | {peak:.1f} |", flush=True)


if __name__ == "__main__":
    main()
