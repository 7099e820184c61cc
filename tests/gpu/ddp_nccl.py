"""The GPU check's DDP step (tests/gpu/run.sh, needs 2 GPUs): DistributedDataParallel over NCCL,
2 processes with one GPU each (started by plugflow.distributed.run), trains a small CNN for a few
steps; the final parameters must equal (within float32 rounding) one process training the same
model on the global batch on the CPU. Exits non-zero on a mismatch.

Usage: python tests/gpu/ddp_nccl.py            (launches the two ranks, then compares)
       python tests/gpu/ddp_nccl.py --rank-worker OUT_DIR   (one rank; started by the launcher)"""

import json
import os
import socket
import subprocess
import sys
import tempfile

import plugflow as torch
import plugflow.distributed as dist
import plugflow.nn as nn
import plugflow.nn.functional as F
from plugflow.nn.parallel import DistributedDataParallel as DDP

GLOBAL_BATCH, STEPS = 16, 4


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(),
                         nn.Flatten(), nn.Linear(8 * 7 * 7, 10))


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(GLOBAL_BATCH, 3, 16, 16, generator=g), torch.randint(0, 10, (GLOBAL_BATCH,), generator=g))
            for _ in range(STEPS)]


def train(model, data, part, device):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(x[part].to(device)), y[part].to(device)).backward()
        opt.step()
    return {k: v.detach().cpu().double().flatten().tolist() for k, v in model.state_dict().items()}


def rank_worker(out_dir):
    dist.init_process_group("nccl")
    torch.backends.cudnn.allow_tf32 = False  # float32 convolutions, to compare with the CPU
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank)
    model = DDP(make_model().to(device), device_ids=[rank])
    per_rank = GLOBAL_BATCH // world
    params = train(model, batches(), slice(rank * per_rank, (rank + 1) * per_rank), device)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({k.removeprefix("module."): v for k, v in params.items()}, f)
    dist.destroy_process_group()


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "plugflow.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
               os.path.abspath(__file__), "--rank-worker", out]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        print(proc.stdout, proc.stderr, sep="\n")
        if proc.returncode != 0:
            print(f"FAIL: the launcher exited with {proc.returncode}")
            return 1
        ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(2)]
    want = train(make_model(), batches(), slice(None), "cpu")
    worst = 0.0
    for got in ranks:
        for name, values in want.items():
            worst = max(worst, max(abs(a - b) for a, b in zip(got[name], values)))
    print(f"ddp over nccl: worst parameter difference against one CPU process {worst:.2e}")
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rank-worker":
        rank_worker(sys.argv[2])
    else:
        sys.exit(main())
