#!/usr/bin/env bash
# The GPU check, in one call on a lent GPU machine (repository root as cwd), under 8 minutes:
#   1. build everything (`make build`; installs missing Debian packages, makes .venv) on Debian 12;
#      anywhere else (the lent machine, kind nvidia-h200: no apt, no network, Python 3.12) unpack
#      the GPU bundle gpu-bundle/plugflow-gpu.tar.xz that tests/gpu/make_bundle.sh made on a
#      development machine, and run every step from it with the machine's python3 and CUDA
#      libraries (its nvidia-* pip packages); with neither, fail at once saying how to make it.
#      GPU_CHECK_FROM=build|bundle forces one way, GPU_CHECK_PYTHON the bundle's python3.
#   2. every CUDA GoogleTest (`meson test --suite cuda`: the CUDA-vs-CPU conformance of every op
#      family, the cuDNN convolutions, the optimizer and GradScaler kernels; on a GPU a skipped
#      comparison means the plugin did not see the device, which counts as a failure),
#   3. a Python smoke check: tensors on cuda and a few calls of each op family against the CPU
#      (conv3d, grid sampling, torchvision's operators and lstsq included), with matmul / add /
#      sum timings,
#   3b. ps_roi_align, ps_roi_pool, deform_conv2d and bicubic upsampling against the CPU on random
#      inputs, outputs and every operand's gradient; conv2d_fused on cuDNN's fused runtime
#      (conv + bias + residual add + relu / silu / none) against the unfused graph and the CPU,
#      float32 off TF32 and bfloat16, with each problem's choice (cuDNN engine or composed)
#      listed (tests/gpu/ops_check.py; each fused problem's first call plans it, compiling
#      cuDNN's runtime-fused kernel, hence the longer timeout),
#   4. the runtime: streams, events, record_stream, pinned memory with non_blocking copies, memory
#      statistics, GradScaler's device-side skip (tests/gpu/runtime_check.py),
#   5. cuDNN convolutions against the CPU and a small CNN under each conv_algo_search strategy
#      (tests/gpu/conv_train.py), and a second exhaustive run that must take every choice from
#      the algo_cache file the first one wrote,
#   6. ResNet-50 (benchmarks/workloads.py) and a BERT-base encoder trained a few steps on the GPU in
#      float32 and with AMP, their losses compared with the CPU's (tests/gpu/train_models.py),
#   7. DistributedDataParallel over NCCL with 2 processes (needs 2 GPUs; said so otherwise),
#   8. a DLPerf-style throughput table: images/s and sequences/s, batch sizes, AMP on/off,
#      heuristic vs exhaustive convolution search.
# Prints a summary and writes it to $OUT/gpu-report.txt when $OUT is set (with every log).
# Exits non-zero when any step fails. Steps past the time budget are skipped and say so.
#
# Without a GPU (nvidia-smi missing or plugflow sees no device) it says so and runs a dry run of
# what works on the CPU: the build as configured, the GoogleTests that run without a device, and
# the model script on the CPU with small shapes, and tests/gpu/ops_check.py comparing the CPU
# with itself.
set -uo pipefail
cd "$(dirname "$0")/../.."

BUILD=build
PY=.venv/bin/python
BUNDLE_ARCHIVE=gpu-bundle/plugflow-gpu.tar.xz
BUNDLE=  # the unpacked bundle, when the check runs from it
OUT_DIR=${OUT:-}
REPORT=$(mktemp)
LOGDIR=$(mktemp -d)
TABLE="$LOGDIR/throughput.tsv"
BUDGET_S=${GPU_CHECK_BUDGET_S:-470}  # under 8 minutes in all
START=$(date +%s)
failed=0

say() { echo "$*" | tee -a "$REPORT"; }
elapsed() { echo $(( $(date +%s) - START )); }
# time_left SECONDS: true while the budget has SECONDS left.
time_left() { [ $(( BUDGET_S - $(elapsed) )) -ge "$1" ]; }

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

skip() { say "SKIP  $1"; }

print_table() {
  [ -s "$TABLE" ] || return 0
  say ""
  say "Throughput (training, DLPerf style; $1):"
  say "$(printf '  %-9s %6s %-5s %-10s %12s %10s %9s' model batch amp conv-search samples/s ms/step peak-GiB)"
  while IFS=$'\t' read -r model batch amp search rate ms peak; do
    say "$(printf '  %-9s %6s %-5s %-10s %12s %10s %9s' "$model" "$batch" "$amp" "$search" "$rate" "$ms" "$peak")"
  done <"$TABLE"
  say "  (OneFlow's published V100 figures for scale: ResNet-50 AMP 1472 images/s, BERT-base 605 sequences/s)"
}

finish() {
  print_table "${1:-}"
  say ""
  local what="GPU check"
  [ $GPU -eq 1 ] || what="GPU check DRY RUN (no GPU: CPU-side parts only, nothing verified on a GPU)"
  if [ $failed -eq 0 ]; then say "$what: all steps passed ($(elapsed)s)"; else say "$what: FAILED ($(elapsed)s)"; fi
  if [ -n "$OUT_DIR" ]; then
    mkdir -p "$OUT_DIR"
    cp "$REPORT" "$OUT_DIR/gpu-report.txt"
    cp "$LOGDIR"/*.log "$OUT_DIR/" 2>/dev/null
    [ "$FROM" = build ] && [ -f "$BUILD/meson-logs/testlog.txt" ] && cp "$BUILD/meson-logs/testlog.txt" "$OUT_DIR/cuda-testlog.txt"
  fi
  exit $failed
}

# config_for STRATEGY: configs/cuda.yaml with that conv_algo_search and a fresh algorithm cache.
config_for() {
  local cfg="$LOGDIR/cuda-$1.yaml"
  sed -e "s|conv_algo_search: .*|conv_algo_search: $1|" \
      -e "s|algo_cache: .*|algo_cache: $LOGDIR/algos.yaml|" configs/cuda.yaml >"$cfg"
  echo "$cfg"
}

# conv_train_from_cache: conv_train.py again under the exhaustive config; the algo_cache file the
# first exhaustive run wrote must answer every problem (a second process times nothing).
conv_train_from_cache() {
  local out rc
  out=$(env PLUGFLOW_CONFIG="$(config_for exhaustive)" timeout 120 "$PY" tests/gpu/conv_train.py 1 2>&1)
  rc=$?
  echo "$out"
  [ $rc -eq 0 ] || return $rc
  if echo "$out" | grep '^algo choices' | tail -n 1 | grep -q "'search'"; then
    echo "the second run searched again: a choice in $LOGDIR/algos.yaml was not reused"
    return 1
  fi
}

# throughput NAME MODEL STRATEGY AMP BATCH: one row of the table (a failure is reported, not fatal
# to the other rows).
throughput() {
  local name=$1 model=$2 strategy=$3 amp=$4 batch=$5
  local log="$LOGDIR/throughput-$model-$amp-$strategy.log"
  if ! time_left 45; then skip "throughput $name (time budget)"; return; fi
  if run_step "throughput $name" "$log" env PLUGFLOW_CONFIG="$(config_for "$strategy")" \
      timeout 150 "$PY" tests/gpu/train_models.py "$model" throughput --batch "$batch" --amp "$amp" \
      --warmup 3 --steps 10 $DRY; then
    grep '^result:' "$log" | sed -e 's/result: //' | tr ' ' '\n' | cut -d= -f2 | paste -sd$'\t' >>"$TABLE"
  fi
}

# unpack_bundle: unpacks $BUNDLE_ARCHIVE into a temporary directory and points PYTHONPATH, PY
# and LD_LIBRARY_PATH at it (the bundle's libraries first, then CUDA's: the nvidia-* pip packages
# of the machine's python3, then /usr/local/cuda); fails when a library is still not found.
unpack_bundle() {
  PY=${GPU_CHECK_PYTHON:-python3}
  local dir
  dir=$(mktemp -d) || return 1
  # shellcheck disable=SC2064  # $dir now: it is local
  trap "rm -rf '$dir'" EXIT  # 135 MB unpacked
  # Python's tarfile, not tar -J: the machine's image need not have xz.
  "$PY" -c 'import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))' \
    "$BUNDLE_ARCHIVE" "$dir" || return 1
  BUNDLE=$dir/plugflow-gpu
  cat "$BUNDLE/MANIFEST.txt"
  local cuda_dirs
  cuda_dirs=$("$PY" - <<'PYEOF'
import glob, importlib.util, os
spec = importlib.util.find_spec("nvidia")
roots = list(spec.submodule_search_locations) if spec else []
dirs = {os.path.dirname(p) for r in roots for p in glob.glob(os.path.join(r, "**", "lib*.so*"), recursive=True)}
dirs |= {d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib") if os.path.isdir(d)}
print(":".join(sorted(dirs, key=lambda d: d.startswith("/usr/local/cuda"))))
PYEOF
  )
  export PYTHONPATH=$BUNDLE/python${PYTHONPATH:+:$PYTHONPATH}
  export LD_LIBRARY_PATH=$BUNDLE/lib:$BUNDLE/python/plugflow/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "python: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  local f missing=0
  for f in "$BUNDLE"/python/plugflow/_C*.so "$BUNDLE"/python/plugflow/lib/*.so "$BUNDLE"/python/plugflow/lib/plugins/*.so \
           "$BUNDLE"/tests/test_*; do
    if ldd "$f" | grep 'not found'; then
      echo "  (needed by ${f#"$BUNDLE"/})"
      missing=1
    fi
  done
  ldd "$BUNDLE/python/plugflow/lib/plugins/libplugflow_cuda.so" | grep -E 'libcud|libcublas|libnccl' | sed 's/^\s*/CUDA library: /'
  # cuBLAS, cuDNN and cuSOLVER are dlopened by the CUDA plugin on first use: found now or never.
  # shellcheck disable=SC2046
  "$PY" - $(sed -n 's/^CUDA libraries dlopened: //p' "$BUNDLE/MANIFEST.txt") <<'PYEOF' || missing=1
import ctypes, sys
failed = False
for name in sys.argv[1:]:
    try:
        ctypes.CDLL(name)
        with open("/proc/self/maps") as f:
            path = next((l.split()[-1] for l in f if "/" + name in l), "?")
        print(f"CUDA library (dlopened): {name} => {path}")
    except OSError as e:
        print(f"CUDA library (dlopened): {name} not found: {e}")
        failed = True
sys.exit(1 if failed else 0)
PYEOF
  return $missing
}

# run_bundle_gtests: the bundle's CUDA GoogleTest binaries, all at once as `meson test` runs
# them, with meson.build's timeouts and environments (tests/cuda-tests.tsv) and the bundle's
# plugins; prints every output and fails when any binary does.
run_bundle_gtests() {
  local name bin timeout envs rc=0
  while IFS=$'\t' read -r name bin timeout envs; do
    # shellcheck disable=SC2086  # envs is a list of NAME=VALUE words
    (env $envs PF_CUDA_TEST_PLUGIN_DIR="$BUNDLE/python/plugflow/lib/plugins" timeout "$timeout" \
       "$BUNDLE/tests/$bin" >"$LOGDIR/gtest-$name.txt" 2>&1
     echo $? >"$LOGDIR/gtest-$name.rc") &
  done <"$BUNDLE/tests/cuda-tests.tsv"
  wait
  while IFS=$'\t' read -r name bin _; do
    echo "==== $name ($bin)"
    cat "$LOGDIR/gtest-$name.txt"
    local code
    code=$(cat "$LOGDIR/gtest-$name.rc")
    echo "==== $name: exit $code"
    [ "$code" = 0 ] || rc=1
  done <"$BUNDLE/tests/cuda-tests.tsv"
  return $rc
}

say "plugflow GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  GPU=1
  say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1)"
else
  say "GPU: none found (nvidia-smi missing or without a device): DRY RUN of the CPU-side parts only;"
  say "     nothing below says anything about the CUDA kernels."
fi
DRY=$([ $GPU -eq 1 ] || echo --dry-run)

# Where the binaries come from: `make build` on Debian 12 (it installs Debian packages), else the
# bundle (the lent machine has neither apt nor a network).
FROM=${GPU_CHECK_FROM:-}
if [ -z "$FROM" ]; then
  if (. /etc/os-release 2>/dev/null && [ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ]); then
    FROM=build
  elif [ -f "$BUNDLE_ARCHIVE" ]; then
    FROM=bundle
  else
    say "FAIL  \`make build\` cannot work here ($(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-not Debian 12}"), not"
    say "      Debian 12 with apt and a network) and there is no GPU bundle ($BUNDLE_ARCHIVE). Make it on a"
    say "      development machine with tests/gpu/make_bundle.sh, then call the device tool's run with"
    say "      carry [\"gpu-bundle\"] and the command: bash tests/gpu/run.sh"
    failed=1
    FROM=none
    finish
  fi
fi
say "binaries: $([ "$FROM" = build ] && echo "make build ($BUILD/)" || echo "the GPU bundle ($BUNDLE_ARCHIVE)")"
say ""

# 1. Build. On a GPU machine an existing build dir configured without CUDA is switched on first;
# a dry run keeps the build as it is configured.
if [ "$FROM" = bundle ]; then
  [ -f "$BUNDLE_ARCHIVE" ] || { say "FAIL  no $BUNDLE_ARCHIVE (tests/gpu/make_bundle.sh makes it)"; failed=1; finish; }
  run_step "unpack the GPU bundle" "$LOGDIR/build.log" unpack_bundle || finish
  sed -n 's/^commit: /      bundle of commit /p; s/^python: /      bundle for Python /p' "$BUNDLE/MANIFEST.txt" | tee -a "$REPORT"
  here=$(git rev-parse HEAD 2>/dev/null || true)
  if [ -n "$here" ] && ! grep -q "^commit: $here" "$BUNDLE/MANIFEST.txt"; then
    say "NOTE  this tree is at commit $here: the bundle's binaries and Python sources are those of its own commit"
  fi
  CUDA_PLUGIN=$BUNDLE/python/plugflow/lib/plugins/libplugflow_cuda.so
else
  if [ $GPU -eq 1 ] && [ -f "$BUILD/build.ninja" ]; then
    PATH=/usr/local/cuda/bin:$PATH meson configure "$BUILD" -Dcuda=enabled >/dev/null 2>&1
  fi
  run_step "build (make build)" "$LOGDIR/build.log" make build JOBS="$(nproc)" || finish
  CUDA_PLUGIN=$BUILD/plugins/cuda/libplugflow_cuda.so
fi
if [ $GPU -eq 1 ] && [ ! -f "$CUDA_PLUGIN" ]; then
  say "FAIL  the CUDA plugin was not built ($CUDA_PLUGIN missing; nvcc and cuBLAS are"
  say "      needed: is /usr/local/cuda/bin/nvcc there? see $LOGDIR/build.log)"
  failed=1
  finish
fi

# 2. The CUDA GoogleTest suite. Skips are failures on a GPU machine.
if [ "$FROM" = bundle ]; then
  run_step "CUDA GoogleTests (the bundle's suite 'cuda')" "$LOGDIR/cuda-tests.log" run_bundle_gtests
else
  run_step "meson test --suite cuda" "$LOGDIR/cuda-tests.log" \
    meson test -C "$BUILD" --suite cuda --no-rebuild --print-errorlogs --num-processes "$(nproc)" -v
fi
if [ $GPU -eq 1 ] && grep -q '\[  SKIPPED \]' "$LOGDIR/cuda-tests.log"; then
  say "FAIL  CUDA conformance tests were skipped on a GPU machine:"
  grep -m 5 -A 1 'Skipped\|SKIPPED' "$LOGDIR/cuda-tests.log" | sed 's/^/      /' | tee -a "$REPORT"
  failed=1
fi
passed=$(grep -o '\[  PASSED  \] [0-9]* test' "$LOGDIR/cuda-tests.log" | awk '{ s += $4 } END { print s + 0 }')
say "      gtest cases passed: $passed"

if [ $GPU -eq 0 ]; then
  # The dry run: the model script's code on the CPU against itself, small shapes.
  for model in resnet50 bert; do
    run_step "dry run: $model compare (CPU vs CPU, bf16 autocast)" "$LOGDIR/dry-$model-compare.log" \
      timeout 300 "$PY" tests/gpu/train_models.py "$model" compare --amp fp16 --steps 2 --dry-run &&
      grep '^losses' "$LOGDIR/dry-$model-compare.log" | sed 's/^/      /' | tee -a "$REPORT"
  done
  run_step "dry run: ops_check.py (CPU vs CPU)" "$LOGDIR/dry-ops.log" timeout 120 "$PY" tests/gpu/ops_check.py --dry-run
  throughput "resnet50 dry run" resnet50 heuristic off 2
  throughput "bert dry run" bert heuristic off 2
  finish "DRY RUN on the CPU, small shapes: not GPU figures"
fi

# 3. Python smoke check against the CPU, then timings.
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

# conv3d (cuDNN's N-d descriptors), grid sampling, torchvision's operators and least squares
# (cuSOLVER) against the CPU.
F = torch.nn.functional
vol, w3 = torch.randn(2, 3, 6, 7, 5), torch.randn(4, 3, 3, 3, 3)
check("conv3d", lambda d: F.conv3d(d(vol), d(w3), padding=1, stride=(1, 2, 1)), 1e-3, 1e-3)
img, grid = torch.randn(2, 3, 9, 11), torch.rand(2, 5, 7, 2) * 2.6 - 1.3
check("grid_sample", lambda d: tuple(F.grid_sample(d(img), d(grid), mode=m, padding_mode=p, align_corners=False)
                                     for m in ("bilinear", "nearest", "bicubic")
                                     for p in ("zeros", "border", "reflection")))
grid3 = torch.rand(2, 3, 4, 5, 3) * 2.6 - 1.3
check("grid_sample 3-d", lambda d: F.grid_sample(d(vol), d(grid3), align_corners=True))
rois = torch.tensor([[0, 1.0, 1.5, 7.2, 6.1], [1, 0.5, 0.0, 10.0, 8.0], [1, 3.0, 2.0, 2.5, 9.0]])
check("roi_align/roi_pool", lambda d: (torch._C._roi_align(d(img), d(rois), 1.0, 3, 3, 0, False),
                                       torch._C._roi_align(d(img), d(rois), 0.5, 2, 4, 2, True),
                                       torch._C._roi_pool(d(img), d(rois), 1.0, 3, 3)[0]))
corner = torch.rand(300, 2) * 50
boxes, scores = torch.cat([corner, corner + torch.rand(300, 2) * 20 + 1], 1), torch.rand(300)
check("nms", lambda d: torch._C._nms(d(boxes), d(scores), 0.5), 0, 0)
a, b = torch.randn(3, 7, 4) + 4 * torch.eye(7, 4), torch.randn(3, 7, 2)
check("lstsq", lambda d: torch.linalg.lstsq(d(a), d(b), driver="gels").solution, 1e-4, 1e-4)
print("issue 13 kernels: ok")


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
if run_step "python smoke check + timings" "$LOGDIR/python.log" timeout 120 "$PY" "$LOGDIR/smoke.py"; then
  grep '^timing:\|^smoke:\|^families:\|^issue 13 kernels:\|^devices:' "$LOGDIR/python.log" | sed 's/^/      /' | tee -a "$REPORT"
fi

# 3b. The torchvision operators and bicubic upsampling against the CPU, forward and gradients.
if run_step "ps_roi_align, ps_roi_pool, deform_conv2d, bicubic upsampling, conv2d_fused on cuDNN against the CPU" \
    "$LOGDIR/ops.log" timeout 240 "$PY" tests/gpu/ops_check.py; then
  grep '^issue 13 kernels:\|^conv2d_fused choice:\|^conv2d_fused:' "$LOGDIR/ops.log" | sed 's/^/      /' | tee -a "$REPORT"
fi

# 4. Streams, events, pinned memory, memory statistics, GradScaler.
run_step "runtime: streams, events, pinned memory, memory stats, GradScaler" "$LOGDIR/runtime.log" \
  timeout 60 "$PY" tests/gpu/runtime_check.py

# 5. cuDNN convolutions and a small CNN under each strategy.
for strategy in heuristic exhaustive; do
  if ! time_left 200; then skip "convolutions + small CNN ($strategy): time budget"; continue; fi
  if run_step "convolutions + small CNN training ($strategy)" "$LOGDIR/conv-$strategy.log" \
      env PLUGFLOW_CONFIG="$(config_for "$strategy")" timeout 120 "$PY" tests/gpu/conv_train.py 1; then
    grep '^timing:\|^losses\|^algo choices' "$LOGDIR/conv-$strategy.log" | sed 's/^/      /' | tee -a "$REPORT"
  fi
done
if time_left 150 && [ -s "$LOGDIR/algos.yaml" ]; then
  run_step "exhaustive choices reused from algo_cache by a second run" "$LOGDIR/conv-exhaustive-cached.log" \
    conv_train_from_cache &&
    grep '^algo choices' "$LOGDIR/conv-exhaustive-cached.log" | tail -n 1 | sed 's/^/      /' | tee -a "$REPORT"
else
  skip "exhaustive choices reused from algo_cache: time budget, or no cache file written"
fi

# 6. ResNet-50 and BERT-base: losses on the GPU (float32, AMP float16) against the CPU.
for model in resnet50 bert; do
  batch=$([ $model = resnet50 ] && echo 8 || echo 4)
  if ! time_left 150; then skip "$model losses against the CPU: time budget"; continue; fi
  if run_step "$model: float32 and AMP losses against the CPU" "$LOGDIR/$model-compare.log" \
      env PLUGFLOW_CONFIG="$(config_for heuristic)" timeout 180 "$PY" tests/gpu/train_models.py "$model" compare \
      --amp fp16 --batch "$batch" --steps 3; then
    grep '^losses' "$LOGDIR/$model-compare.log" | sed 's/^/      /' | tee -a "$REPORT"
  fi
done

# 7. DistributedDataParallel over NCCL, 2 processes: one GPU each.
ngpu=$(nvidia-smi -L | wc -l)
if [ "$ngpu" -lt 2 ]; then
  skip "DDP over NCCL with 2 processes: needs 2 GPUs, this machine has $ngpu"
elif time_left 60; then
  run_step "DDP over NCCL, 2 processes" "$LOGDIR/ddp.log" timeout 120 "$PY" tests/gpu/ddp_nccl.py
fi

# 8. Throughput rows: ResNet-50 (float32 / AMP, heuristic / exhaustive search), BERT-base.
throughput "resnet50 amp heuristic" resnet50 heuristic fp16 128
throughput "resnet50 amp exhaustive" resnet50 exhaustive fp16 128
throughput "resnet50 fp32 heuristic" resnet50 heuristic off 64
throughput "bert amp" bert heuristic fp16 32
throughput "bert fp32" bert heuristic off 32
throughput "resnet50 fp32 exhaustive" resnet50 exhaustive off 64
[ -f "$LOGDIR/algos.yaml" ] && cp "$LOGDIR/algos.yaml" "$LOGDIR/algos.log"

finish "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
