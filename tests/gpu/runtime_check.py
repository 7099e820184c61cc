"""The GPU check's runtime step (tests/gpu/run.sh): streams, events, record_stream, pinned memory
with non_blocking copies, the caching allocator's statistics (torch.cuda.memory_stats semantics), and
GradScaler's device-side skip, on the first CUDA device. Exits non-zero on a mismatch.
Usage: python tests/gpu/runtime_check.py"""

import numpy as np

import plugflow as torch

assert torch.cuda.is_available(), "plugflow sees no CUDA device"
cuda = torch.cuda

# ---- memory statistics ----------------------------------------------------------------------------
cuda.synchronize()
cuda.empty_cache()
cuda.reset_peak_memory_stats()
base = cuda.memory_allocated()
stats0 = cuda.memory_stats()
for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
            "segment.all.current", "allocation.all.allocated", "num_alloc_retries", "num_ooms"):
    assert key in stats0, key
x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # 64 MiB
assert cuda.memory_allocated() == base + (64 << 20), (cuda.memory_allocated(), base)
assert cuda.max_memory_allocated() >= base + (64 << 20)
assert cuda.memory_reserved() >= cuda.memory_allocated()
del x
assert cuda.memory_allocated() == base
assert cuda.max_memory_allocated() >= base + (64 << 20), "the peak survives the free"
assert cuda.memory_reserved() >= base + (64 << 20), "the freed block stays cached"
cuda.empty_cache()
assert cuda.memory_reserved() == cuda.memory_stats()["reserved_bytes.all.current"]
assert cuda.memory_reserved() < base + (64 << 20) or base > 0, "empty_cache returns the cached block"
cuda.reset_peak_memory_stats()
assert cuda.max_memory_allocated() == cuda.memory_allocated()
s1 = cuda.memory_stats()
assert s1["allocation.all.allocated"] >= stats0["allocation.all.allocated"] + 1
print("memory stats: ok")

# ---- pinned memory and non_blocking copies ----------------------------------------------------------
host = torch.randn(1 << 22)
assert not host.is_pinned()
pinned = host.pin_memory()
assert pinned.is_pinned() and pinned.pin_memory() is pinned
np.testing.assert_array_equal(pinned.numpy(), host.numpy())
dev = pinned.to("cuda", non_blocking=True)
back = torch.empty(1 << 22).pin_memory()
back.copy_(dev * 2, non_blocking=True)
cuda.synchronize()
np.testing.assert_array_equal(back.numpy(), host.numpy() * 2)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3), torch.arange(8)),
                                     batch_size=4, pin_memory=True)
for xb, yb in loader:
    assert xb.is_pinned() and yb.is_pinned()
print("pinned memory: ok")

# ---- streams and events ------------------------------------------------------------------------------
default = cuda.current_stream()
assert default == cuda.default_stream()
side = cuda.Stream()
assert side != default
a = torch.randn(2048, 2048, device="cuda")
start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
side.wait_stream(default)  # a was made on the default stream
with cuda.stream(side):
    assert cuda.current_stream() == side
    start.record()
    b = a @ a
    end.record()
assert cuda.current_stream() == default
default.wait_stream(side)
end.synchronize()
assert end.query() and side.query()
elapsed = start.elapsed_time(end)
assert elapsed > 0, elapsed
np.testing.assert_allclose(b.cpu().numpy(), a.cpu().numpy() @ a.cpu().numpy(), rtol=1e-3, atol=1e-2)
print(f"streams and events: ok (2048^3 matmul on a side stream: {elapsed:.3f} ms)")

# ---- record_stream: a block read on a side stream is not reused before that stream is done --------------
n = 1 << 24  # 64 MiB of float32
side = cuda.Stream()
src = torch.full((n,), 2.0, device="cuda")  # allocated on the default stream
busy = torch.randn(2048, 2048, device="cuda")
side.wait_stream(default)
with cuda.stream(side):
    for _ in range(40):  # queues milliseconds of work ahead of the read of src
        busy = torch.tanh(busy @ busy)
    copy = src * 1
src.record_stream(side)
del src  # the block waits for the side stream's event
if not side.query():  # the deferred free is observable while the side stream still runs
    s = cuda.memory_stats()
    assert s["active_bytes.all.current"] >= s["allocated_bytes.all.current"] + 4 * n, s
overwrite = torch.zeros(n, device="cuda")  # on the default stream: must not take src's block early
cuda.synchronize()
np.testing.assert_array_equal(copy.cpu().numpy(), np.full(n, 2.0, np.float32))
s = cuda.memory_stats()
assert s["active_bytes.all.current"] == s["allocated_bytes.all.current"], "synchronize returns deferred blocks"
# A recorded stream destroyed first (it finished) is no longer waited for.
kept = torch.ones(n, device="cuda")
with cuda.stream(side):
    kept.add_(1)
kept.record_stream(side)
del side
del kept
s = cuda.memory_stats()
assert s["active_bytes.all.current"] == s["allocated_bytes.all.current"], s
for bad in (5, None):
    try:
        overwrite.record_stream(bad)
        raise AssertionError("record_stream accepted a non-Stream")
    except RuntimeError:
        pass
del overwrite, copy, busy
print("record_stream: ok")

# ---- GradScaler: a step with inf gradients is skipped on the device ----------------------------------
model = torch.nn.Linear(16, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scaler = torch.cuda.amp.GradScaler(init_scale=2.0**16)
before = model.weight.detach().clone()
with torch.autocast("cuda", dtype=torch.float16):
    loss = model(torch.randn(8, 16, device="cuda")).float().sum()
scaler.scale(loss).backward()
model.weight.grad[0, 0] = float("inf")
scaler.step(opt)
scaler.update()
assert torch.equal(model.weight.detach(), before), "an inf gradient must skip the step"
assert scaler.get_scale() == 2.0**15, scaler.get_scale()
print("grad scaler: ok")
