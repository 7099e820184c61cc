#!/usr/bin/env python3
"""plugflow's main job: train a small CNN on scikit-learn's handwritten digits (8x8 images,
10 classes, bundled with python3-sklearn, nothing downloaded) with the backend chosen by
--config, then save a checkpoint, reload it into a fresh model, re-evaluate, and plot loss and
accuracy per epoch.

    python examples/train_digits.py --config configs/cpu.yaml --epochs 15 --batch-size 64

Data-parallel on 2 processes (make demo-ddp): the launcher starts the ranks, each trains on its
share of every batch (DistributedSampler) through DistributedDataParallel, rank 0 reports and
saves, and every rank reloads the checkpoint.

    python -m plugflow.distributed.run --nproc-per-node 2 examples/train_digits.py --epochs 15

This is ordinary PyTorch code: `import plugflow as torch` is the only change.
"""
import argparse
import os
import time

import numpy as np
from sklearn.datasets import load_digits
from tqdm import tqdm

import plugflow as torch
import plugflow.distributed as dist
import plugflow.nn as nn
import plugflow.nn.functional as F
from plugflow.nn.parallel import DistributedDataParallel
from plugflow.utils.data import DataLoader, TensorDataset
from plugflow.utils.data.distributed import DistributedSampler


class DigitsCNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.MaxPool2d(2),  # 8x8 -> 4x4
            nn.Dropout(0.25),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def load_data(test_fraction, seed):
    """The digits as (N, 1, 8, 8) float32 in [0, 1] and int64 labels, split into train/test."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = int(len(labels) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return ((torch.from_numpy(images[train]), torch.from_numpy(labels[train])),
            (torch.from_numpy(images[test]), torch.from_numpy(labels[test])))


class TrainGraph(nn.Graph):
    """One training step as a static graph (configs with `optimizations.graph: true`)."""

    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        return loss


class EvalGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def evaluate(model, loader, device, graph=None):
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = graph(x) if graph is not None else model(x)
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(dim=1) == y).sum().item()
            total += y.numel()
    return loss_sum / total, correct / total


def plot_history(history, path):
    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    epochs = range(1, len(history["train_loss"]) + 1)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, history["train_loss"], label="train")
    ax_loss.plot(epochs, history["test_loss"], label="held-out")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("cross-entropy loss")
    ax_loss.legend()
    ax_acc.plot(epochs, [100 * a for a in history["test_acc"]], label="held-out", color="tab:green")
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("accuracy (%)")
    ax_acc.legend()
    fig.suptitle("plugflow: CNN on scikit-learn digits")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def wants_cuda():
    """Whether the active config asks for the CUDA plugin (configs/cuda.yaml does)."""
    return any(p["name"] == "cuda" or "libplugflow_cuda" in p["name"] for p in torch._C.current_config()["plugins"])


def cuda_unavailable_reason():
    """Why there is no CUDA device: the plugin's own reason, or why it did not load."""
    failures = [f.reason for f in torch._C.plugin_failures() if "cuda" in f.name]
    if failures:
        return "the cuda plugin did not load: " + failures[0].splitlines()[0]
    info = next((d for d in torch._C.device_info() if d["type"] == "cuda"), None)
    return info["unavailable_reason"] if info else "no cuda device type is registered"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="plugflow YAML config (default: the built-in cpu.yaml)")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", default="demo-output", help="where the checkpoint and the plot go")
    args = parser.parse_args()
    if args.epochs < 1 or args.batch_size < 1:
        parser.error("--epochs and --batch-size must be positive")

    if args.config:
        torch.init(args.config)
    # Under plugflow.distributed.run (or torchrun's environment) with more than one rank.
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    if args.batch_size % world_size:
        parser.error(f"--batch-size {args.batch_size} must be a multiple of the {world_size} ranks")
    log = print if rank == 0 else (lambda *a, **k: None)
    device = "cuda" if torch.cuda.is_available() and not distributed else "cpu"
    if device == "cpu" and not distributed and wants_cuda():
        log(f"CUDA requested by the config but not usable, FALLING BACK TO THE CPU: {cuda_unavailable_reason()}")
    torch.manual_seed(args.seed)
    log(f"plugflow {torch.__version__} on {device}, {torch.get_num_threads()} threads, "
        f"config {args.config or '<built-in cpu.yaml>'}" + (f", {world_size} ranks" if distributed else ""))

    (x_train, y_train), (x_test, y_test) = load_data(test_fraction=0.2, seed=args.seed)
    train_set = TensorDataset(x_train, y_train)
    if distributed:
        # Each rank takes its share of every global batch of --batch-size images.
        sampler = DistributedSampler(train_set, shuffle=True, seed=args.seed)
        train_loader = DataLoader(train_set, batch_size=args.batch_size // world_size, sampler=sampler)
    else:
        sampler = None
        generator = torch.Generator().manual_seed(args.seed)
        train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, generator=generator)
    test_loader = DataLoader(TensorDataset(x_test, y_test), batch_size=256)
    log(f"{len(y_train)} training and {len(y_test)} held-out images")

    model = DigitsCNN().to(device)
    trained = DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    history = {"train_loss": [], "test_loss": [], "test_acc": []}
    # With `optimizations.graph: true` (configs/cpu-graph.yaml) each step runs as an nn.Graph:
    # compiled at the first batch (and once more for the last, smaller one), then replayed.
    if nn.graph_mode() and distributed:
        raise SystemExit("nn.Graph training is not data-parallel: run the distributed demo with an eager config")
    train_graph = TrainGraph(model, optimizer) if nn.graph_mode() else None
    eval_graph = EvalGraph(model) if nn.graph_mode() else None
    log("execution: " + (f"nn.Graph ({train_graph.config})" if train_graph else
                         "eager, DistributedDataParallel" if distributed else "eager"))

    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        if sampler is not None:
            sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        running, seen = 0.0, 0
        bar = tqdm(train_loader, desc=f"epoch {epoch:2d}/{args.epochs}", unit="batch", leave=True,
                   disable=rank != 0)
        for x, y in bar:
            x, y = x.to(device), y.to(device)
            if train_graph is not None:
                loss = train_graph(x, y)
            else:
                loss = F.cross_entropy(trained(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            running += loss.item() * y.numel()
            seen += y.numel()
            bar.set_postfix(loss=f"{running / seen:.4f}")
        if distributed:  # the epoch's loss over every rank's images
            totals = torch.tensor([running, seen], dtype=torch.float64)
            dist.all_reduce(totals)
            running, seen = totals.tolist()
        scheduler.step()
        test_loss, test_acc = evaluate(model, test_loader, device, eval_graph)
        history["train_loss"].append(running / seen)
        history["test_loss"].append(test_loss)
        history["test_acc"].append(test_acc)
        if rank == 0:
            tqdm.write(f"epoch {epoch:2d}: train loss {running / seen:.4f}  held-out loss {test_loss:.4f}  "
                       f"held-out accuracy {100 * test_acc:.2f}%")
    elapsed = time.perf_counter() - start
    log(f"trained {args.epochs} epochs in {elapsed:.1f} s")

    # Rank 0 saves; once it has, every rank reloads the checkpoint and must find rank 0's accuracy
    # (the ranks' own models differ in BatchNorm's running statistics: each rank updates them
    # from its share of the last batch; broadcast_buffers copies rank 0's before each forward).
    expected_acc = [history["test_acc"][-1]]
    if distributed:
        dist.broadcast_object_list(expected_acc, src=0)
    os.makedirs(args.out_dir, exist_ok=True)
    checkpoint = os.path.join(args.out_dir, "digits_cnn.pt")
    if rank == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": args.epochs},
                   checkpoint)
    if distributed:
        dist.barrier()
    restored = DigitsCNN().to(device)
    restored.load_state_dict(torch.load(checkpoint)["model"])
    _, restored_acc = evaluate(restored, test_loader, device, EvalGraph(restored) if eval_graph else None)
    log(f"checkpoint {checkpoint} reloaded: held-out accuracy {100 * restored_acc:.2f}%")
    if restored_acc != expected_acc[0]:
        raise SystemExit(f"rank {rank}: the reloaded model does not reproduce the trained model's accuracy")

    if rank == 0:
        plot = os.path.join(args.out_dir, "digits_training.png")
        plot_history(history, plot)
        print(f"loss/accuracy plot: {plot}")
        print(f"final held-out accuracy: {100 * history['test_acc'][-1]:.2f}%")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
