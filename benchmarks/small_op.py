#!/usr/bin/env python3
"""Eager overhead: `a.add(b)` on 100 floats, plugflow vs PyTorch in the same process.

Each round times a block of calls for each framework, alternating, and the medians of the
per-call times over the rounds are reported with the ratio PyTorch / plugflow (> 1 means
plugflow is faster). Both run single-threaded (the op is far below any parallel grain).
"""
import argparse
import statistics
import time


def time_block(fn, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def bench(label, make_fns, rounds, calls):
    fns = make_fns()
    for fn in fns.values():  # warm up (caches, allocator, dispatcher)
        time_block(fn, calls // 10 + 1)
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(time_block(fn, calls))
    med = {name: statistics.median(s) for name, s in samples.items()}
    ratio = med["torch"] / med["plugflow"]
    print(f"{label:<28} torch {med['torch'] * 1e6:7.3f} us   plugflow {med['plugflow'] * 1e6:7.3f} us   "
          f"ratio torch/plugflow {ratio:5.2f}")
    return ratio


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()

    import torch
    import plugflow
    torch.set_num_threads(1)
    plugflow.set_num_threads(1)

    def add_fns():
        ta, tb = torch.rand(100), torch.rand(100)
        pa, pb = plugflow.rand(100), plugflow.rand(100)
        return {"torch": lambda: ta.add(tb), "plugflow": lambda: pa.add(pb)}

    def mul_scalar_fns():
        ta, pa = torch.rand(100), plugflow.rand(100)
        return {"torch": lambda: ta * 2.0, "plugflow": lambda: pa * 2.0}

    def add_grad_fns():
        ta, tb = torch.rand(100, requires_grad=True), torch.rand(100)
        pa, pb = plugflow.rand(100, requires_grad=True), plugflow.rand(100)
        return {"torch": lambda: ta.add(tb), "plugflow": lambda: pa.add(pb)}

    print(f"torch {torch.__version__}, plugflow {plugflow.__version__}; medians of {args.rounds} rounds x "
          f"{args.calls} calls")
    bench("a.add(b), 100 floats", add_fns, args.rounds, args.calls)
    bench("a * 2.0, 100 floats", mul_scalar_fns, args.rounds, args.calls)
    bench("a.add(b), a requires grad", add_grad_fns, args.rounds, args.calls)


if __name__ == "__main__":
    main()
