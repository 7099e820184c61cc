"""The GPU check's model step (tests/gpu/run.sh): ResNet-50 (torchvision's architecture as
benchmarks/workloads.py writes it out) and a BERT-base encoder with its masked-LM head
(tests/gpu/bert.py). Neither uses an installed torchvision: the lent GPU machine carries
torchvision 0.26, whose package imports torch.library and torch._prims_common
(torchvision/_meta_registrations.py), which plugflow does not have, so it cannot run on plugflow
through plugflow.mock_torch as Debian's torchvision 0.14 does.

  compare:    the same initial weights and batches trained a few steps on the CPU (float32) and on
              the device in float32 (TF32 off) and with AMP (autocast float16 + GradScaler): the
              per-step losses must agree (float32 within 1e-3 relative, AMP within 3e-2);
  throughput: training steps on the device, synchronized, printed as one "result:" line
              (samples/s, ms/step, batch, AMP, the config's conv_algo_search) for the table.

Dropout is off in compare (the CPU and CUDA Philox streams agree, but one dropout mask per step
would hide nothing a loss comparison can see) and on (0.1) in throughput.
Without a GPU, --dry-run runs the same code on the CPU against itself with small shapes.

Usage: PLUGFLOW_CONFIG=<config> python tests/gpu/train_models.py {resnet50,bert} {compare,throughput}
           [--batch N] [--steps N] [--warmup N] [--amp off|fp16|bf16] [--dry-run]"""

import argparse
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "benchmarks")]

import plugflow  # noqa: E402
import plugflow as torch  # noqa: E402

from bert import BertConfig, build_bert_for_mlm, mlm_batch  # noqa: E402
from workloads import resnet50  # noqa: E402

AMP_DTYPES = {"off": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_model(name, dry_run, dropout):
    if name == "resnet50":
        return resnet50(torch)
    config = BertConfig.tiny(dropout) if dry_run else BertConfig.base(dropout)
    return build_bert_for_mlm(torch, config)


def make_batches(name, batch, steps, dry_run):
    """`steps` batches on the CPU, the same for every device."""
    out = []
    for step in range(steps):
        if name == "resnet50":
            g = torch.Generator().manual_seed(1000 + step)
            size = 64 if dry_run else 224
            x = torch.randn(batch, 3, size, size, generator=g)
            y = torch.randint(0, 1000, (batch,), generator=g)
            out.append((x, y))
        else:
            config = BertConfig.tiny() if dry_run else BertConfig.base()
            out.append(mlm_batch(torch, config, batch, 32 if dry_run else 128, 1000 + step))
    return out


def make_optimizer(name, model):
    if name == "resnet50":
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    return torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)


def loss_of(name, model, batch):
    if name == "resnet50":
        x, y = batch
        return torch.nn.functional.cross_entropy(model(x), y)
    return model(*batch)


def train(name, model, batches, device, amp):
    """Trains one step per batch; returns the losses (floats) and the seconds per step after the
    first (the device synchronized around the timed steps)."""
    model.to(device).train()
    optimizer = make_optimizer(name, model)
    dtype = AMP_DTYPES[amp] if device == "cuda" or amp != "fp16" else None
    scaler = torch.cuda.amp.GradScaler(enabled=dtype is torch.float16 and device == "cuda")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":  # page-locked once, so the copies below are asynchronous
        batches = [tuple(t.pin_memory() for t in batch) for batch in batches]
    losses, t_first_done = [], None
    for i, batch in enumerate(batches):
        batch = tuple(t.to(device, non_blocking=True) for t in batch)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device if dtype is not None else "cpu", dtype=dtype or torch.bfloat16,
                            enabled=dtype is not None):
            loss = loss_of(name, model, batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss)
        if i == 0:
            sync()
            t_first_done = time.perf_counter()
    sync()
    per_step = (time.perf_counter() - t_first_done) / max(1, len(batches) - 1)
    return [float(l.item()) for l in losses], per_step


def compare(args, device):
    torch.manual_seed(0)
    cpu_model = make_model(args.model, args.dry_run, dropout=0.0)
    initial = {k: v.clone() for k, v in cpu_model.state_dict().items()}
    batches = make_batches(args.model, args.batch, args.steps, args.dry_run)
    want, _ = train(args.model, cpu_model, batches, "cpu", "off")
    print(f"losses cpu float32: {' '.join(f'{l:.6f}' for l in want)}")
    failed = False
    torch.backends.cudnn.allow_tf32 = False
    # The CPU dry run checks the AMP path with the CPU's autocast type, bfloat16, for ResNet only:
    # CPU autocast leaves layer_norm to its input type and a bfloat16 input with float32 weights
    # raises, in PyTorch 1.13 as in plugflow (CUDA autocast runs layer_norm in float32).
    amp = args.amp if device == "cuda" or args.amp == "off" else "bf16" if args.model == "resnet50" else "off"
    for run_amp, rtol in [("off", 1e-3)] + ([(amp, 3e-2)] if amp != "off" else []):
        model = make_model(args.model, args.dry_run, dropout=0.0)
        model.load_state_dict(initial)
        got, _ = train(args.model, model, batches, device, run_amp)
        worst = max(abs(g - w) / abs(w) for g, w in zip(got, want))
        ok = all(math.isfinite(g) for g in got) and worst <= rtol
        label = "float32" if run_amp == "off" else f"amp {run_amp}"
        print(f"losses {device} {label}: {' '.join(f'{l:.6f}' for l in got)} "
              f"(worst relative difference {worst:.2e}, limit {rtol:g}) {'ok' if ok else 'MISMATCH'}")
        failed |= not ok
    return 1 if failed else 0


def throughput(args, device):
    torch.manual_seed(0)
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default for convolutions
    model = make_model(args.model, args.dry_run, dropout=0.1)
    batches = make_batches(args.model, args.batch, 1, args.dry_run) * (args.warmup + args.steps)
    train(args.model, model, batches[:args.warmup], device, args.amp)  # warm-up (algorithm search, caches)
    _, per_step = train(args.model, model, [batches[0]] + batches[:args.steps], device, args.amp)
    strategy = plugflow._C.current_config()["optimizations"]["conv_algo_search"]
    unit = "images" if args.model == "resnet50" else "sequences"
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    print(f"result: model={args.model} batch={args.batch} amp={args.amp} search={strategy} "
          f"{unit}_per_s={args.batch / per_step:.1f} ms_per_step={per_step * 1e3:.1f} peak_gib={peak:.2f}")
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=["resnet50", "bert"])
    p.add_argument("mode", choices=["compare", "throughput"])
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--amp", choices=sorted(AMP_DTYPES), default="off")
    p.add_argument("--dry-run", action="store_true", help="no GPU: the same code on the CPU, small shapes")
    args = p.parse_args()
    if torch.cuda.is_available():
        device = "cuda"
    elif args.dry_run:
        device = "cpu"
        print("no CUDA device: dry run on the CPU with small shapes")
    else:
        print("FAIL: plugflow sees no CUDA device (use --dry-run to check the script on the CPU)")
        return 1
    if args.batch is None:
        args.batch = 2 if args.dry_run else {"resnet50": 64, "bert": 32}[args.model]
    return compare(args, device) if args.mode == "compare" else throughput(args, device)


if __name__ == "__main__":
    sys.exit(main())
