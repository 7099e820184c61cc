#!/usr/bin/env bash
# `make test-sanitize`: plugflow under AddressSanitizer + UndefinedBehaviorSanitizer.
#   1. builds the core, the CPU plugin, the collectives, the GoogleTest suites and the Python
#      extension into build-sanitize/ (no CUDA; -O1 with line tables, assertions on, UBSan
#      fatal: -fno-sanitize-recover),
#   2. runs every GoogleTest suite under the sanitizers, leak checks on,
#   3. runs a pytest subset (below) against a package staged from build-sanitize by
#      tools/stage.py.
#      CPython is not sanitized: the sanitizer runtimes are preloaded and leak checks are off
#      (CPython keeps objects alive until exit by design).
# A report aborts its process (UBSan too: -fno-sanitize-recover). Reports also fail the run
# when a test would not notice: ASan's and LeakSanitizer's go to files (log_path) from every
# process, subprocesses whose failure a test expects included; UBSan's (which ignores log_path
# inside the ASan runtime) are looked for in the test output. Exits non-zero on any test
# failure or report. JOBS (default: nproc) sets the build and test parallelism.
set -uo pipefail
cd "$(dirname "$0")/../.."

BUILD=build-sanitize
PY=$PWD/.venv/bin/python
JOBS=${JOBS:-$(nproc)}
LOGDIR=$(mktemp -d /tmp/plugflow-sanitize.XXXXXX)
START=$(date +%s)
failed=0

# The pytest subset (most of the suite's tests and of its C++ paths): core ops, CPU and
# oneDNN kernels, LAPACK linear algebra, autograd, nn.Graph capture, passes and replay, nn layers, optimizers, DataLoader
# workers, serialization, Gloo collectives. Left out: files of Python-only logic (schedulers, module
# bookkeeping, repr), the model-level and algorithm-search tests (minutes under ASan, paths
# covered above) and test_vendor_plugin (it checks the installed package, not a staged one).
PYTEST_FILES=(
  test_creation.py test_indexing.py test_indexing_ops.py test_runtime.py test_errors.py test_hardening.py
  test_cpu_kernels.py test_elementwise.py test_math.py test_reduction.py test_shape.py test_matmul.py test_linalg.py
  test_conv.py test_onednn_pool.py test_onednn_layer_norm_softmax.py test_batch_norm_cpu.py
  test_autograd.py test_graph.py test_graph_passes.py
  test_nn_layers.py test_loss.py test_norm.py
  test_optim.py test_data.py
  test_serialization.py
  test_distributed.py
)

# Float32 precision bounds hold for the optimized kernels (vectorized, FMA-contracted), which
# `make test` checks; this -O1 build rounds differently (log_softmax's worst element 3e-7
# relative where the optimized kernel stays under 1.8e-7), so they are left out here.
PYTEST_DESELECT="not worst_element_relative_error"

step() { echo "== $* ($(($(date +%s) - START))s)"; }

MARKERS='runtime error: |ERROR: (Address|Leak|UndefinedBehavior)Sanitizer'
ALLOCATION_WARNING='^==[0-9]+==WARNING: AddressSanitizer failed to allocate 0x[0-9a-f]+ bytes$'

# Prints the sanitizer report files under LOGDIR named prefix.* and the report lines of the
# output log; non-zero when there are any.
reports() {
  local prefix=$1 output=$2 found=0 f
  for f in "$LOGDIR"/"$prefix".*; do
    [ -e "$f" ] || continue
    # The null returns that allocator_may_return_null asks for (the huge-size tests) only warn.
    grep -qvE "$ALLOCATION_WARNING" "$f" || continue
    found=1
    echo "---- sanitizer report $f"
    cat "$f"
  done
  if grep -qE "$MARKERS" "$output"; then
    found=1
    echo "---- sanitizer reports in $output"
    grep -E -A 12 "$MARKERS" "$output"
  fi
  return $found
}

step "configure and build $BUILD"
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false \
    -Ddebug=false -Doptimization=1 -Db_ndebug=false \
    "-Dcpp_args=-g1 -fno-sanitize-recover=undefined" "-Dcpp_link_args=-fno-sanitize-recover=undefined" ||
    exit 1
fi
ninja -C "$BUILD" -j "$JOBS" || exit 1

export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# A request the machine cannot hold returns null, as malloc does outside ASan (ASan aborts by
# default), so the tests of "out of memory" errors for huge sizes run as they do unsanitized.
ASAN_COMMON="allocator_may_return_null=1"

step "GoogleTest suites"
ASAN_OPTIONS="$ASAN_COMMON:log_path=$LOGDIR/gtest-asan:detect_leaks=1" \
  meson test -C "$BUILD" --no-rebuild --print-errorlogs --num-processes "$JOBS" --timeout-multiplier 5 || failed=1
reports gtest-asan "$BUILD/meson-logs/testlog.txt" || failed=1

step "pytest subset"
STAGE=$LOGDIR/stage
"$PY" tools/stage.py "$BUILD" "$STAGE" >/dev/null || exit 1
PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libubsan.so)"
(cd tests/python &&
  LD_PRELOAD=$PRELOAD PYTHONPATH=$STAGE ASAN_OPTIONS="$ASAN_COMMON:log_path=$LOGDIR/py-asan:detect_leaks=0" \
  "$PY" -m pytest -q -n "$JOBS" -p no:cacheprovider -k "$PYTEST_DESELECT" "${PYTEST_FILES[@]}") 2>&1 | tee "$LOGDIR/pytest.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
reports py-asan "$LOGDIR/pytest.log" || failed=1

step "done"
if [ $failed -eq 0 ]; then
  echo "sanitized build: all tests passed, no sanitizer reports"
  rm -rf "$LOGDIR"
else
  echo "sanitized build: FAILED (logs in $LOGDIR)"
fi
exit $failed
