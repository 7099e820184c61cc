"""The GPU check's convolution step (tests/gpu/run.sh): run under a config whose
optimizations.conv_algo_search is the strategy to check (PLUGFLOW_CONFIG).

1. conv2d forward and both gradients on cuda against the CPU (float32 with TF32 off, float64,
   float16 against the CPU's float32), with groups, dilation, stride, padding and a
   transposed convolution;
2. a small CNN trained a few SGD steps on cuda and on the CPU from the same weights: the losses
   must agree;
3. timings: training steps per second of that CNN at batch 64 (float32, TF32 on), printed as
   "timing:" lines.
Exits non-zero on a mismatch. The CNN uses only ops the CUDA plugin has kernels for (no
pooling or batch norm yet; a gather-based loss; a plain SGD update).
Usage: PLUGFLOW_CONFIG=<config> python tests/gpu/conv_train.py [seed]"""

import sys
import time

import numpy as np

import plugflow as torch
import plugflow.nn.functional as F
from plugflow import _C

assert torch.cuda.is_available(), "plugflow sees no CUDA device"
strategy = _C.current_config()["optimizations"]["conv_algo_search"]
print("strategy:", strategy)
rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 0)


def randn(*shape, dtype="float32"):
    return torch.tensor(rng.standard_normal(shape).astype(dtype))


def close(name, got, want, rtol, atol):
    np.testing.assert_allclose(got.detach().cpu().double().numpy(), want.detach().double().numpy(), rtol=rtol, atol=atol,
                               err_msg=f"{name} ({strategy})")


# ---- 1. convolutions against the CPU ---------------------------------------------------------------
cases = [  # (N, C, H, W, O, k, stride, padding, dilation, groups)
    (2, 3, 17, 13, 8, 3, 1, 1, 1, 1),
    (4, 8, 16, 16, 8, 3, 2, 1, 1, 8),
    (1, 6, 12, 9, 4, 3, 1, 2, 2, 2),
    (3, 16, 8, 8, 32, 1, 1, 0, 1, 1),
]
torch.backends.cudnn.allow_tf32 = False
for dtype, rtol, atol in (("float32", 1e-4, 1e-4), ("float64", 1e-10, 1e-10), ("float16", 1e-2, 5e-2)):
    ref_dtype = "float32" if dtype == "float16" else dtype
    for n, c, h, w, o, k, s, p, d, g in cases:
        x, wt, b = randn(n, c, h, w, dtype=ref_dtype), randn(o, c // g, k, k, dtype=ref_dtype), randn(o, dtype=ref_dtype)
        xs, ws, bs = (t.requires_grad_() for t in (x.clone(), wt.clone(), b.clone()))
        want = F.conv2d(xs, ws, bs, s, p, d, g)
        grad = randn(*want.shape, dtype=ref_dtype)
        want.backward(grad)
        xd, wd, bd = (t.to("cuda", getattr(torch, dtype)).detach().requires_grad_() for t in (x, wt, b))
        got = F.conv2d(xd, wd, bd, s, p, d, g)
        got.backward(grad.to("cuda", getattr(torch, dtype)))
        name = f"conv2d {dtype} {(n, c, h, w, o, k, s, p, d, g)}"
        close(name, got, want, rtol, atol)
        close(name + " grad input", xd.grad, xs.grad, rtol, atol)
        close(name + " grad weight", wd.grad, ws.grad, rtol, atol * 10)
        close(name + " grad bias", bd.grad, bs.grad, rtol, atol * 10)
        wt_t = randn(c, o // g, k, k, dtype=ref_dtype)
        want_t = F.conv_transpose2d(x, wt_t, None, s, p, s - 1, g, d)
        got_t = F.conv_transpose2d(x.to("cuda", getattr(torch, dtype)), wt_t.to("cuda", getattr(torch, dtype)), None, s,
                                   p, s - 1, g, d)
        close(name + " transposed", got_t, want_t, rtol, atol)
torch.backends.cudnn.allow_tf32 = True
print("conv: ok")

# ---- 2. a small CNN trained on both devices ------------------------------------------------------------


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.c3 = torch.nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=4)
        self.fc = torch.nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.relu(self.c2(x))
        x = F.relu(self.c3(x))
        return self.fc(x.flatten(1))


def nll(logits, target):  # gather-based, so only kernels the CUDA plugin has run
    return -F.log_softmax(logits, 1).gather(1, target[:, None]).mean()


def train(device, steps, x, y, state):
    net = Net()
    net.load_state_dict(state)
    net.to(device)
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(steps):
        loss = nll(net(x), y)
        net.zero_grad()
        loss.backward()
        with torch.no_grad():
            for prm in net.parameters():
                prm.sub_(prm.grad, alpha=0.05)
        losses.append(loss.item())
    return losses


torch.backends.cudnn.allow_tf32 = False
state = Net().state_dict()
x, y = randn(16, 3, 32, 32), torch.tensor(rng.integers(0, 10, 16))
cpu_losses = train("cpu", 5, x, y, state)
gpu_losses = train("cuda", 5, x, y, state)
print("losses cpu :", " ".join(f"{v:.5f}" for v in cpu_losses))
print("losses cuda:", " ".join(f"{v:.5f}" for v in gpu_losses))
np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-3, atol=1e-4)
assert gpu_losses[-1] < gpu_losses[0], "the loss did not go down"
print("train: ok")

# ---- 3. timing ------------------------------------------------------------------------------------------
torch.backends.cudnn.allow_tf32 = True
net = Net().to("cuda")
xb, yb = randn(64, 3, 32, 32).to("cuda"), torch.tensor(rng.integers(0, 10, 64)).to("cuda")


def step():
    loss = nll(net(xb), yb)
    net.zero_grad()
    loss.backward()


step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(50):
    step()
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / 50
print(f"timing: small CNN train step, batch 64, float32+TF32, {strategy}: {dt * 1e3:.2f} ms, {64 / dt:.0f} img/s")
choices = [c for c in _C.algo_choices() if c["provider"] == "cuda"]
print(f"algo choices: {len(choices)} (sources: {sorted({c['source'] for c in choices})})")
