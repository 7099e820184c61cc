#!/usr/bin/env bash
# Makes the GPU bundle: one archive, gpu-bundle/plugflow-gpu.tar.xz, holding everything
# tests/gpu/run.sh needs on the lent GPU machine (kind nvidia-h200, image 'cuda') that the
# machine lacks. That machine has no network and no apt, so `make build` cannot run there; it has
# Python 3.12 with numpy, pytest and PyYAML, nvcc 13, and CUDA's libraries (cudart, cuBLAS,
# cuDNN, NCCL, ...) as the nvidia-* pip packages. Run this on a development machine (Debian 12,
# repository root or anywhere in it):
#
#   tests/gpu/make_bundle.sh
#
# then, through the device tool: run with carry ["gpu-bundle"] and the command
# `bash tests/gpu/run.sh` (it unpacks the bundle when `make build` cannot work there).
#
# It builds plugflow with CUDA (the options of build-cuda, in build-gpu-bundle/) with the pybind11
# module for Python 3.12 (pyenv's, which has the headers), and packs:
#   python/plugflow/   the staged package (tools/stage.py): Python sources, _C for Python 3.12,
#                      lib/libplugflow_core.so and lib/plugins/ (cpu, cuda, gloo, nccl)
#   tests/             the CUDA GoogleTest binaries (meson's suite 'cuda') and cuda-tests.tsv,
#                      their names, timeouts and environments as meson.build defines them
#   lib/               every shared library those need that is neither a base system library
#                      (glibc, libstdc++, libgcc_s) nor one of CUDA's own, which the machine has
#   MANIFEST.txt       the commit, the Python, the bundled libraries, CUDA's libraries expected
# Before packing it checks that the bundle is self-contained: `ldd` of every binary with only
# the bundle's directories added must find every library that is not a base or CUDA library in
# the bundle; otherwise it fails, naming the library.
#
# Environment: GPU_BUNDLE_PYTHON (default pyenv's 3.12.1), JOBS (default 2), BUILD_DIR (default
# build-gpu-bundle).
set -euo pipefail
cd "$(dirname "$0")/../.."

PY312=${GPU_BUNDLE_PYTHON:-/root/.pyenv/versions/3.12.1/bin/python3}
BUILD=${BUILD_DIR:-build-gpu-bundle}
JOBS=${JOBS:-2}
OUT_DIR=gpu-bundle
ARCHIVE=$OUT_DIR/plugflow-gpu.tar.xz
export PATH=/usr/local/cuda/bin:$PATH

# Base system libraries: on every Linux machine and ABI-compatible with newer versions (the GPU
# machine's must provide the symbol versions MANIFEST.txt lists). Never bundled.
BASE_LIBS='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s)\.so'
# CUDA's own libraries (and the driver's): the GPU machine has them (nvidia-* pip packages,
# /usr/local/cuda, the driver's mount); bundling them would shadow the versions that match its
# driver. Never bundled.
CUDA_LIBS='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libcusolver|libcusparse|libnvJitLink|libcufft|libcurand|libnvrtc|libnvidia-[a-z-]*)\.so'

die() { echo "make_bundle: $*" >&2; exit 1; }

[ -x "$PY312" ] || die "$PY312 not found (set GPU_BUNDLE_PYTHON to a Python 3.12 with its headers)"
command -v nvcc >/dev/null || die "nvcc not found (CUDA 13 in /usr/local/cuda is needed to build the CUDA plugin)"

STAGE=$(mktemp -d)
TESTS_TSV=$(mktemp)
trap 'rm -rf "$STAGE" "$TESTS_TSV"' EXIT

# Meson 1.0.1 asks the target Python for distutils, which Python 3.12 no longer has; setuptools'
# copy (Debian's python3-setuptools) answers for it. Only this script's meson and ninja see it
# (a regeneration of $BUILD needs it too: rerun this script rather than ninja alone).
if ! "$PY312" -c 'import distutils' 2>/dev/null; then
  DISTUTILS=/usr/lib/python3/dist-packages/setuptools/_distutils
  [ -d $DISTUTILS ] || die "Meson needs distutils for $PY312: install python3-setuptools"
  mkdir -p "$STAGE/shim"
  ln -s $DISTUTILS "$STAGE/shim/distutils"
  export PYTHONPATH=$STAGE/shim${PYTHONPATH:+:$PYTHONPATH}
fi

# 1. Build: the CUDA build's options, the extension for Python 3.12; only what the bundle holds.
if [ ! -f "$BUILD/build.ninja" ]; then
  nice -n 10 meson setup "$BUILD" -Dcuda=enabled -Dpython="$PY312"
fi
# The CUDA suite's test executables, their names, timeouts and environments, as meson.build has them
# (regenerated first, so that tests added since the last build are listed).
ninja -C "$BUILD" build.ninja >/dev/null
meson introspect --tests "$BUILD" | /usr/bin/python3 -c '
import json, os, sys
build = os.path.abspath(sys.argv[1])
for t in json.load(sys.stdin):
    if "plugflow:cuda" not in t["suite"]:
        continue
    env = " ".join(f"{k}={v}" for k, v in sorted(t["env"].items()) if k != "LD_LIBRARY_PATH")
    print(t["name"], os.path.relpath(t["cmd"][0], build), t["timeout"], env, sep="\t")
' "$BUILD" >"$TESTS_TSV"
[ -s "$TESTS_TSV" ] || die "meson lists no test of suite 'cuda' in $BUILD"
grep -q 'test_cuda_conformance' "$TESTS_TSV" || die "$BUILD has no CUDA conformance test: was the CUDA plugin configured?"
EXT=$("$PY312" -c 'import sysconfig; print("_C" + sysconfig.get_config_var("EXT_SUFFIX"))')
TARGETS=(core/libplugflow_core.so plugins/cpu/libplugflow_cpu.so plugins/cuda/libplugflow_cuda.so
         plugins/collectives/libplugflow_gloo.so plugins/collectives/libplugflow_nccl.so "python/$EXT")
mapfile -t TEST_BINS < <(cut -f2 "$TESTS_TSV")
nice -n 10 ninja -C "$BUILD" -j "$JOBS" "${TARGETS[@]}" "${TEST_BINS[@]}"

# 2. Stage into a fresh tree.
B=$STAGE/plugflow-gpu
mkdir -p "$B/lib" "$B/tests"
/usr/bin/python3 tools/stage.py "$BUILD" "$STAGE/staged" >/dev/null
# stage.py links the Python sources; the bundle needs copies (no __pycache__). Its `core` link
# is for the build's rpath; the bundle's LD_LIBRARY_PATH names plugflow/lib instead.
mkdir -p "$B/python"
cp -rL "$STAGE/staged/plugflow" "$B/python/"
find "$B/python" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$B/python/plugflow/lib/pkgconfig"  # points into this machine's source tree
for t in "${TEST_BINS[@]}"; do cp "$BUILD/$t" "$B/tests/"; done
awk -F'\t' -v OFS='\t' '{ n = split($2, p, "/"); $2 = p[n]; print }' "$TESTS_TSV" >"$B/tests/cuda-tests.tsv"

# 3. The libraries: everything the ELF files need, resolved here, less base, CUDA and plugflow's.
PF_LIB=$B/python/plugflow/lib
elfs() { find "$B/python" "$B/tests" "$B/lib" -type f \( -name '*.so*' -o -perm -u+x \) -exec sh -c 'head -c 4 "$1" | grep -q ELF' _ {} \; -print; }
bundle_ld_path="$B/lib:$PF_LIB:$PF_LIB/plugins"
for _ in 1 2 3; do  # a library's own needs are found on the next pass
  while read -r name path; do
    [ -f "$B/lib/$name" ] || cp -L "$path" "$B/lib/$name"
  done < <(for f in $(elfs); do LD_LIBRARY_PATH=$bundle_ld_path ldd "$f"; done |
           awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
           grep -Ev "$BASE_LIBS" | grep -Ev "$CUDA_LIBS" | grep -v '^libplugflow_' || true)
done
chmod 644 "$B"/lib/*.so*

# 4. Self-containment: with the bundle's directories first, every library that is not base or
# CUDA's resolves inside the bundle, and nothing but CUDA's may be missing.
bad=0
for f in $(elfs); do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [[ "$name" =~ $CUDA_LIBS ]] || [[ "$name" =~ $BASE_LIBS ]]; then continue; fi
    case "$path" in
      "$B"/*) ;;
      not) echo "make_bundle: ${f#"$B"/} needs $name, not found" >&2; bad=1 ;;
      *) echo "make_bundle: ${f#"$B"/} needs $name, found at $path, outside the bundle" >&2; bad=1 ;;
    esac
  done < <(LD_LIBRARY_PATH=$bundle_ld_path ldd "$f")
done
[ $bad -eq 0 ] || die "the bundle is not self-contained (see above)"

# 5. The manifest, then the archive.
cuda_needed=$(for f in $(elfs); do LD_LIBRARY_PATH=$bundle_ld_path ldd "$f"; done | awk '{ print $1 }' |
              grep -E "$CUDA_LIBS" | sort -u | tr '\n' ' ')
# The CUDA plugin dlopens cuBLAS, cuDNN and cuSOLVER on first use, by the sonames its headers give
# (plugins/cuda/src/matmul.cpp, cudnn.cpp, lstsq.cpp); ldd cannot see them.
define() { grep -rhoE "#define $1 [0-9]+" /usr/local/cuda/include /usr/include 2>/dev/null | head -n 1 | awk '{ print $3 }'; }
cuda_dlopened="libcublas.so.$(define CUBLAS_VER_MAJOR) libcudnn.so.$(define CUDNN_MAJOR) libcusolver.so.$(define CUSOLVER_VER_MAJOR)"
# The newest glibc and libstdc++ symbol versions the bundle uses: the machine's must have them.
system_needs=$(for f in $(elfs); do objdump -T "$f"; done | grep -oE '(GLIBC|GLIBCXX|CXXABI)_[0-9.]+' |
               sort -u -V | awk -F_ '{ v[$1] = $0 } END { for (k in v) printf "%s ", v[k] }')
dirty=$(git status --porcelain --untracked-files=no | grep -qv '^??' && echo " (with uncommitted changes)" || true)
{
  echo "plugflow GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "commit: $(git rev-parse HEAD)$dirty"
  echo "python: $("$PY312" -c 'import platform; print(platform.python_version())') (extension $EXT)"
  echo "bundled libraries: $(cd "$B/lib" && ls | tr '\n' ' ')"
  echo "CUDA libraries expected on the machine: $cuda_needed"
  echo "CUDA libraries dlopened: $cuda_dlopened"
  echo "system libraries at least: $system_needs"
  echo "CUDA tests: $(cut -f1 "$B/tests/cuda-tests.tsv" | tr '\n' ' ')"
} >"$B/MANIFEST.txt"
mkdir -p "$OUT_DIR"
tar -C "$STAGE" -cf - plugflow-gpu | xz -9 -T "$JOBS" >"$ARCHIVE.new"
mv "$ARCHIVE.new" "$ARCHIVE"
cat "$B/MANIFEST.txt"
echo "unpacked: $(du -sh "$B" | cut -f1); archive: $ARCHIVE, $(du -h "$ARCHIVE" | cut -f1) ($(stat -c %s "$ARCHIVE") bytes)"
