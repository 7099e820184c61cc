#!/usr/bin/env python3
"""A stream of small parallel loops, idle and beside busy processes: PyTorch against plugflow with
its late-worker guard on and off (docs/design.md, "Small loops on a busy machine").

Each run is a fresh process that calls relu on 262k float32 (one small parallel region per call)
`--calls` times on 2 threads and reports the total ms; runs alternate between the variants and
each variant's sorted totals are printed as a markdown table row per condition.

    .venv/bin/python benchmarks/busy_loop.py --runs 5
"""
import argparse
import multiprocessing
import os
import subprocess
import sys
import time

VARIANTS = {
    "PyTorch 1.13": ("torch", {}),
    "plugflow, guard off": ("plugflow", {"PLUGFLOW_LATE_WORKER_GUARD": "0"}),
    "plugflow (guard on, the default)": ("plugflow", {}),
}


def one_run(framework, calls, threads):
    fw = __import__(framework)
    fw.set_num_threads(threads)
    x = fw.randn(64, 64, 64)
    for _ in range(300):
        fw.relu(x)
    start = time.perf_counter()
    for _ in range(calls):
        fw.relu(x)
    print((time.perf_counter() - start) * 1e3)


def spin():
    while True:
        pass


def condition(args):
    totals = {name: [] for name in VARIANTS}
    for _ in range(args.runs):
        for name, (framework, env) in VARIANTS.items():
            out = subprocess.run([sys.executable, __file__, "--one", framework, "--calls", str(args.calls),
                                  "--threads", str(args.threads)], env={**os.environ, **env},
                                 check=True, capture_output=True, text=True).stdout
            totals[name].append(float(out.split()[-1]))
    return totals


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--busy", type=int, default=2, help="spinning processes for the loaded condition")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        return one_run(args.one, args.calls, args.threads)
    rows = {"idle": condition(args)}
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for s in spinners:
        s.start()
    try:
        rows["loaded"] = condition(args)
    finally:
        for s in spinners:
            s.terminate()
    print(f"relu on 262k floats, {args.calls} calls, total ms of {args.runs} runs (sorted), {args.threads} threads; "
          f"loaded = {args.busy} spinning processes")
    print("| condition | " + " | ".join(VARIANTS) + " |")
    print("|---|" + "---|" * len(VARIANTS))
    for cond, totals in rows.items():
        cells = [" ".join(f"{t:.0f}" for t in sorted(totals[name])) for name in VARIANTS]
        print(f"| {cond} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
