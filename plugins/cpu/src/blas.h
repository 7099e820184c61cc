// GEMM for the CPU kernels, on the plugin's one OpenMP thread pool.
//
// float32 runs on oneDNN's jit sgemm (dnnl_sgemm), which picks its kernels from the CPU at run
// time and threads on libgomp's pool, like the plugin's loops: as fast as OpenBLAS's tuned
// kernels single-threaded (1.2x faster on BERT-tiny/MLP-size products, within 20% either way on
// BERT-base ones), and independent of how OpenBLAS was loaded. OpenBLAS 0.3.21 detects recent
// Xeons as Prescott (4-6x slower GEMM) unless OPENBLAS_CORETYPE is set before it loads, which
// `import plugflow` cannot do when numpy (`import numpy` first is the usual script) loaded it
// already. Products above ~2^30 multiply-adds, where OpenBLAS's tuned kernels measured up to
// 1.2x faster, go to OpenBLAS when it has them, and float64 always does.
//
// OpenBLAS always runs single-threaded (set_num_threads sets it to one thread): a GEMM large
// enough to share is split here into row or column blocks, one per OpenMP thread, each a
// single-threaded OpenBLAS call. Debian's default OpenBLAS has its own pthreads pool; letting
// it run beside libgomp's had the two pools spinning against each other on every GEMM/loop
// boundary.
#pragma once
#include <cstdint>

namespace plugflow::cpu {

// C (M x N) = A (M x K) * B (K x N) + beta * C, row-major, each operand read transposed when
// its flag is set (BLAS rules for lda/ldb/ldc). T is float or double. Runs in parallel over the
// plugin's threads when the product is large enough and the caller is not in a parallel region.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc);

// Multiply-adds below which a GEMM runs on the calling thread: about 10 µs of one core, a few
// times the cost of waking the pool.
inline constexpr int64_t kGemmGrain = int64_t{1} << 18;

}  // namespace plugflow::cpu
