#include "blas.h"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <string>

#include "onednn/common.h"
#include "parallel.h"
#include "plugflow/error.h"

extern "C" char* openblas_get_corename();  // OpenBLAS's own API

namespace plugflow::cpu {
namespace {

// Multiply-adds above which float32 goes to OpenBLAS when it runs tuned kernels (blas.h).
constexpr int64_t kLargeGemm = int64_t{1} << 30;

bool openblas_has_tuned_kernels() {
  static const bool tuned = [] {
    const std::string core = openblas_get_corename();
    for (const char* name : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
      if (core == name) return true;
    return false;
  }();
  return tuned;
}

// oneDNN's sgemm, threaded by oneDNN over the plugin's thread count (one thread for a small
// product or inside a parallel region).
void onednn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const onednn::OmpThreads threads(omp_in_parallel() || M * N * K < kGemmGrain ? 1 : num_threads());
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, 1.0f, a, lda, b, ldb, beta, c, ldc);
  PF_CHECK(status == dnnl_success, "matrix multiply: oneDNN sgemm failed (status ", static_cast<int>(status), ") for ",
           M, "x", K, " @ ", K, "x", N);
}

template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* a, int64_t lda, const T* b,
                 int64_t ldb, T beta, T* c, int64_t ldc) {
  const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (M * N * K < kLargeGemm || !openblas_has_tuned_kernels()) {
      onednn_sgemm(trans_a, trans_b, M, N, K, a, lda, b, ldb, beta, c, ldc);
      return;
    }
  }
  constexpr int64_t kMax = std::numeric_limits<int>::max();  // cblas takes int sizes
  PF_CHECK(M <= kMax && N <= kMax && K <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
           "matrix multiply: a GEMM dimension or leading dimension beyond 2^31-1 is not supported by BLAS (", M, "x",
           K, " @ ", K, "x", N, ")");
  // Blocks of whole 16-row (or column) strips, over the longer side of C: each thread's block
  // keeps the full K extent, so no partial sums need combining.
  constexpr int64_t kStrip = 16;
  const bool split_rows = M >= N;
  const int64_t strips = ((split_rows ? M : N) + kStrip - 1) / kStrip;
  const int64_t grain = std::max<int64_t>(1, kGemmGrain / std::max<int64_t>(1, kStrip * (split_rows ? N : M) * K));
  parallel_for(strips, grain, [&](int64_t s0, int64_t s1) {
    const int64_t begin = s0 * kStrip, end = std::min(s1 * kStrip, split_rows ? M : N);
    if (split_rows) {  // rows of A (columns when transposed) and of C
      const T* a_block = a + begin * (trans_a ? 1 : lda);
      gemm_serial<T>(trans_a, trans_b, end - begin, N, K, a_block, lda, b, ldb, beta, c + begin * ldc, ldc);
    } else {  // columns of B (rows when transposed) and of C
      const T* b_block = b + begin * (trans_b ? ldb : 1);
      gemm_serial<T>(trans_a, trans_b, M, end - begin, K, a, lda, b_block, ldb, beta, c + begin, ldc);
    }
  });
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float,
                          float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t,
                           double, double*, int64_t);

}  // namespace plugflow::cpu
