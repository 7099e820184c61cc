#!/usr/bin/env bash
# The GPU check, in one call on a lent GPU machine (repository root as cwd):
#   1. build everything (`make build`; installs missing Debian packages, makes .venv),
#   2. run the CUDA GoogleTest suite (`meson test --suite cuda`); on a GPU a skipped
#      comparison means the plugin did not see the device, which counts as a failure,
#   3. a Python smoke check: tensors on cuda, add, matmul, and a few calls of each op family
#      (shape, reduction, indexing, math), compared with the CPU,
#   4. timings: a 4096x4096 float32 matmul and a large elementwise add, synchronized,
#   5. cuDNN convolutions against the CPU and a small CNN trained on both devices, under each
#      conv_algo_search strategy, with its training speed (tests/gpu/conv_train.py).
# Prints a summary and writes it to $OUT/gpu-report.txt when $OUT is set (with the test log).
# Exits non-zero when any step fails.
set -uo pipefail
cd "$(dirname "$0")/../.."

BUILD=build
PY=.venv/bin/python
OUT_DIR=${OUT:-}
REPORT=$(mktemp)
LOGDIR=$(mktemp -d)
failed=0

say() { echo "$*" | tee -a "$REPORT"; }

# run_step NAME LOGFILE COMMAND...: runs the command with its output in LOGFILE (tail shown on
# failure) and records status and duration.
run_step() {
  local name=$1 log=$2
  shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$@" >"$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if [ $rc -eq 0 ]; then
    say "PASS  $name (${secs}s)"
  else
    say "FAIL  $name (${secs}s, exit $rc); last lines of $log:"
    tail -n 40 "$log" | sed 's/^/      /' | tee -a "$REPORT"
    failed=1
  fi
  return $rc
}

finish() {
  say ""
  if [ $failed -eq 0 ]; then say "GPU check: all steps passed"; else say "GPU check: FAILED"; fi
  if [ -n "$OUT_DIR" ]; then
    mkdir -p "$OUT_DIR"
    cp "$REPORT" "$OUT_DIR/gpu-report.txt"
    cp "$LOGDIR"/*.log "$OUT_DIR/" 2>/dev/null
    [ -f "$BUILD/meson-logs/testlog.txt" ] && cp "$BUILD/meson-logs/testlog.txt" "$OUT_DIR/cuda-testlog.txt"
  fi
  exit $failed
}

say "plugflow GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
if command -v nvidia-smi >/dev/null 2>&1; then
  say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1)"
else
  say "GPU: nvidia-smi not found"
fi
say ""

# 1. Build. An existing build dir configured without CUDA is switched on first.
if [ -f "$BUILD/build.ninja" ]; then
  PATH=/usr/local/cuda/bin:$PATH meson configure "$BUILD" -Dcuda=enabled >/dev/null 2>&1
fi
run_step "build (make build)" "$LOGDIR/build.log" make build JOBS="$(nproc)" || finish
if [ ! -f "$BUILD/plugins/cuda/libplugflow_cuda.so" ]; then
  say "FAIL  the CUDA plugin was not built ($BUILD/plugins/cuda/libplugflow_cuda.so missing; nvcc and cuBLAS are"
  say "      needed: is /usr/local/cuda/bin/nvcc there? see $LOGDIR/build.log)"
  failed=1
  finish
fi

# 2. The CUDA GoogleTest suite. Skips are failures here: this machine has a GPU.
run_step "meson test --suite cuda" "$LOGDIR/cuda-tests.log" \
  meson test -C "$BUILD" --suite cuda --no-rebuild --print-errorlogs --num-processes 1 -v
if grep -q '\[  SKIPPED \]' "$LOGDIR/cuda-tests.log"; then
  say "FAIL  CUDA conformance tests were skipped on a GPU machine:"
  grep -m 5 -A 1 'Skipped\|SKIPPED' "$LOGDIR/cuda-tests.log" | sed 's/^/      /' | tee -a "$REPORT"
  failed=1
fi
passed=$(grep -o '\[  PASSED  \] [0-9]* test' "$LOGDIR/cuda-tests.log" | awk '{ s += $4 } END { print s + 0 }')
say "      gtest cases passed: $passed"

# 3 + 4. Python: smoke check against the CPU, then timings.
cat >"$LOGDIR/smoke.py" <<'PYEOF'
import time

import numpy as np

import plugflow as torch

assert torch.cuda.is_available(), "plugflow sees no CUDA device"
print("devices:", torch.cuda.device_count())

a = torch.randn(513, 257)
b = torch.randn(257, 129)
ga, gb = a.to("cuda"), b.to("cuda")
assert str(ga.device).startswith("cuda"), ga.device
c = (ga @ gb + 1.5).cpu()
np.testing.assert_allclose(c.numpy(), a.numpy() @ b.numpy() + 1.5, rtol=1e-4, atol=1e-4)
s = (ga * 2 - ga).sum().item()
np.testing.assert_allclose(s, float(a.numpy().astype(np.float64).sum()), rtol=1e-4, atol=1e-3)
m = ga.amax(dim=1).cpu()
np.testing.assert_array_equal(m.numpy(), a.numpy().max(axis=1))
h = (ga.half() @ gb.half()).float().cpu()
np.testing.assert_allclose(h.numpy(), a.numpy() @ b.numpy(), rtol=2e-2, atol=1e-1)
print("smoke: ok")

# The op families beyond the elementwise core (shape, reduction, indexing, math) on cuda
# against the CPU, on fresh random inputs incl. a transposed view.
x = torch.randn(37, 53)
xt = torch.randn(53, 37).t()
ints = torch.randint(-3, 4, (29, 31))
idx = torch.randint(0, 37, (11, 53))
mask = x > 0.3


def check(name, fn, rtol=1e-5, atol=1e-5):
    want, got = fn(lambda t: t), fn(lambda t: t.to("cuda"))
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    assert len(want) == len(got), name
    for w, g in zip(want, got):
        assert str(g.device).startswith("cuda"), (name, g.device)
        np.testing.assert_allclose(g.cpu().numpy(), w.numpy(), rtol=rtol, atol=atol, err_msg=name)


check("sort", lambda d: d(xt).sort(dim=0, descending=True, stable=True), 0, 0)
check("topk", lambda d: torch.topk(d(ints), 5, dim=1), 0, 0)
check("unique", lambda d: torch.unique(d(ints), return_inverse=True, return_counts=True), 0, 0)
check("flip/tril/pad", lambda d: (torch.flip(d(xt), [0, 1]), torch.tril(d(x), -2),
                                  torch.nn.functional.pad(d(x)[None], (2, 3), mode="reflect")), 0, 0)
check("var/std/norm", lambda d: (d(xt).var(dim=1), d(x).std(dim=0, unbiased=False), d(x).norm(p=3, dim=1)))
check("logsumexp/softmax", lambda d: (torch.logsumexp(d(x), 1), torch.softmax(d(xt), 0),
                                      torch.log_softmax(d(x), 1)))
check("all/any/cumsum/cumprod", lambda d: (d(mask).all(1), d(ints).any(0), d(ints).cumsum(1), d(x).cumprod(0)),
      1e-4, 1e-4)
check("gather/scatter_add", lambda d: (torch.gather(d(x), 0, d(idx)),
                                       torch.zeros(37, 53, device=d(x).device).scatter_add(0, d(idx), d(x)[:11])),
      1e-5, 1e-5)
check("index_select/masked/nonzero", lambda d: (d(x).index_select(1, d(idx)[0, :7]), d(x).masked_fill(d(mask), 2.0),
                                                 d(x).masked_select(d(mask)), d(mask).nonzero()), 0, 0)
check("advanced indexing", lambda d: (d(x)[d(idx)[:3, :4]], d(x).index_put((d(idx)[0],), d(x)[0], accumulate=True)))
check("clamp/lerp/addcmul/addcdiv", lambda d: (d(x).clamp(-0.5, 0.5), torch.lerp(d(x), d(xt), 0.3),
                                               torch.addcmul(d(x), d(x), d(x), value=0.5),
                                               torch.addcdiv(d(x), d(x), d(x).abs() + 1, value=2)))
print("families: ok")


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


n = 4096
x = torch.randn(n, n, device="cuda")
y = torch.randn(n, n, device="cuda")
dt = timed(lambda: x @ y, 20)
print(f"timing: matmul {n}x{n} float32: {dt * 1e3:.3f} ms/iter, {2 * n**3 / dt / 1e12:.1f} TFLOP/s")

numel = 1 << 26
u = torch.randn(numel, device="cuda")
v = torch.randn(numel, device="cuda")
dt = timed(lambda: u + v, 20)
print(f"timing: add of {numel} float32: {dt * 1e3:.3f} ms/iter, {3 * 4 * numel / dt / 1e9:.0f} GB/s")

r = torch.randn(4096, 4096, device="cuda")
dt = timed(lambda: r.sum(dim=1), 20)
print(f"timing: sum over rows of 4096x4096 float32: {dt * 1e3:.3f} ms/iter, {4 * n * n / dt / 1e9:.0f} GB/s")
PYEOF
if run_step "python smoke check + timings" "$LOGDIR/python.log" timeout 300 "$PY" "$LOGDIR/smoke.py"; then
  grep '^timing:\|^smoke:\|^families:\|^devices:' "$LOGDIR/python.log" | sed 's/^/      /' | tee -a "$REPORT"
fi

# 5. cuDNN convolutions against the CPU, a small CNN trained on both devices, and its speed, under
# each conv_algo_search strategy (the exhaustive one writes its choices to a fresh cache file).
for strategy in heuristic exhaustive; do
  cfg="$LOGDIR/cuda-$strategy.yaml"
  sed -e "s|conv_algo_search: .*|conv_algo_search: $strategy|" \
      -e "s|algo_cache: .*|algo_cache: $LOGDIR/algos.yaml|" configs/cuda.yaml >"$cfg"
  if run_step "convolutions + small CNN training ($strategy)" "$LOGDIR/conv-$strategy.log" \
      env PLUGFLOW_CONFIG="$cfg" timeout 300 "$PY" tests/gpu/conv_train.py 1; then
    grep '^timing:\|^losses\|^algo choices' "$LOGDIR/conv-$strategy.log" | sed 's/^/      /' | tee -a "$REPORT"
  fi
done
[ -f "$LOGDIR/algos.yaml" ] && cp "$LOGDIR/algos.yaml" "$LOGDIR/algos.log"

finish
