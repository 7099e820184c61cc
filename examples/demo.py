#!/usr/bin/env python3
"""plugflow's demo (for now): fit a linear model by gradient descent with hand-written
gradients, on the backend chosen by --config. Autograd and nn arrive in later issues; this
exercises the runtime end to end: config, plugins, creation, broadcasting, matmul, reductions.
"""
import argparse
import time

import plugflow as pf


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default=None, help="YAML config (default: the built-in cpu.yaml)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--features", type=int, default=32)
    args = parser.parse_args()

    if args.config:
        pf.init(args.config)
    device = "cuda" if pf.cuda.is_available() else "cpu"
    print(f"plugflow {pf.__version__} on {device}, {pf.get_num_threads()} threads")

    pf.manual_seed(0)
    true_w = pf.randn(args.features, 1, device=device)
    x = pf.randn(args.samples, args.features, device=device)
    y = x @ true_w + 0.01 * pf.randn(args.samples, 1, device=device)

    w = pf.zeros(args.features, 1, device=device)
    lr = 0.1
    start = time.perf_counter()
    for step in range(args.steps + 1):
        residual = x @ w - y                       # (n, 1)
        loss = (residual * residual).mean()
        grad = x.t() @ residual * (2.0 / args.samples)  # d loss / d w
        w -= lr * grad
        if step % 50 == 0:
            print(f"step {step:4d}  loss {loss.item():.6f}")
    elapsed = time.perf_counter() - start
    err = (w - true_w).abs().max().item()
    print(f"max |w - w_true| = {err:.4f}  ({elapsed * 1e3 / (args.steps + 1):.2f} ms/step)")
    if err > 0.05:
        raise SystemExit("demo failed: the model did not converge")


if __name__ == "__main__":
    main()
