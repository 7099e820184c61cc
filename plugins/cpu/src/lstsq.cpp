// linalg_lstsq (docs/kernels.md, "Least squares"): LAPACK's ?gels, ?gelsy, ?gelsd and ?gelss
// from OpenBLAS, the routines PyTorch 1.13 calls for torch.linalg.lstsq on the CPU, one matrix
// at a time (OpenBLAS threads inside them).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels.h"
#include "lapack.h"
#include "loops.h"
#include "plugflow/linalg_error.h"

namespace plugflow::cpu {
namespace {

enum class Driver { Gels, Gelsy, Gelsd, Gelss };

// Solves one column-major system in place: a (lda = m) is overwritten, b (ldb) holds B on entry
// and X (plus residual rows) on exit. Returns LAPACK's info.
template <typename T>
int solve(Driver driver, int m, int n, int nrhs, T* a, T* b, int ldb, T rcond, int* rank, T* s) {
  using L = Lapack<T>;
  const int lda = std::max(1, m);
  int info = 0, lwork = -1;
  T query = 0;
  std::vector<int> ints;
  auto call = [&](T* work, int lw) {
    switch (driver) {
      case Driver::Gels: L::gels("N", &m, &n, &nrhs, a, &lda, b, &ldb, work, &lw, &info, 1); break;
      case Driver::Gelsy: L::gelsy(&m, &n, &nrhs, a, &lda, b, &ldb, ints.data(), &rcond, rank, work, &lw, &info); break;
      case Driver::Gelsd: L::gelsd(&m, &n, &nrhs, a, &lda, b, &ldb, s, &rcond, rank, work, &lw, ints.data(), &info); break;
      case Driver::Gelss: L::gelss(&m, &n, &nrhs, a, &lda, b, &ldb, s, &rcond, rank, work, &lw, &info); break;
    }
  };
  // gelsy: jpvt zeroed (every column free to pivot); gelsd: iwork sized by the query
  ints.assign(static_cast<size_t>(driver == Driver::Gelsy ? n : 1), 0);
  call(&query, lwork);
  if (info != 0) return info;
  if (driver == Driver::Gelsd) ints.assign(static_cast<size_t>(std::max(1, ints[0])), 0);
  lwork = std::max(1, static_cast<int>(query));
  std::vector<T> work(static_cast<size_t>(lwork));
  call(work.data(), lwork);
  return info;
}

template <typename T>
void lstsq_kernel(KernelContext& ctx) {
  for (const Tensor& t : ctx.inputs)
    PF_CHECK_T(t.is_contiguous(), ValueError, "cpu 'linalg_lstsq' reads contiguous inputs");
  const std::string& name = ctx.attr<std::string>("driver");
  const Driver driver = name == "gels"    ? Driver::Gels
                        : name == "gelsd" ? Driver::Gelsd
                        : name == "gelss" ? Driver::Gelss
                                          : Driver::Gelsy;
  const Tensor &a_t = ctx.input(0), &b_t = ctx.input(1);
  const int64_t batch = a_t.sizes()[0], m = a_t.sizes()[1], n = a_t.sizes()[2], k = b_t.sizes()[2];
  const int64_t rows = std::max(m, n), diag = std::min(m, n);
  const int mi = lapack_int("linalg.lstsq", m), ni = lapack_int("linalg.lstsq", n), ki = lapack_int("linalg.lstsq", k), ldb = lapack_int("linalg.lstsq", std::max<int64_t>(rows, 1));
  const T rcond = static_cast<T>(ctx.attr<double>("rcond"));
  const T* a = a_t.data<T>();
  const T* b = b_t.data<T>();
  T* x = ctx.output(0).data<T>();
  int64_t* rank = ctx.output(1).data<int64_t>();
  T* sv = ctx.output(2).data<T>();
  std::vector<T> a_col(static_cast<size_t>(m * n)), b_col(static_cast<size_t>(ldb * std::max<int64_t>(k, 1)));
  std::vector<T> s(static_cast<size_t>(std::max<int64_t>(diag, 1)));
  for (int64_t i = 0; i < batch; ++i) {
    const T* ai = a + i * m * n;
    const T* bi = b + i * m * k;
    for (int64_t r = 0; r < m; ++r)  // row-major -> column-major
      for (int64_t c = 0; c < n; ++c) a_col[c * m + r] = ai[r * n + c];
    std::fill(b_col.begin(), b_col.end(), T(0));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < k; ++c) b_col[c * ldb + r] = bi[r * k + c];
    int rank_i = 0;
    const int info = solve<T>(driver, mi, ni, ki, a_col.data(), b_col.data(), ldb, rcond, &rank_i, s.data());
    PF_CHECK(info >= 0, "linalg.lstsq: LAPACK argument ", -info, " was invalid");
    // (the core drops the batch element from the message of a single matrix, as PyTorch's)
    if (driver == Driver::Gels)
      PF_CHECK_T(info == 0, LinAlgError, "torch.linalg.lstsq: (Batch element ", i, "): The least squares solution "
                 "could not be computed because the input matrix does not have full rank (error code: ", info, ").");
    PF_CHECK_T(info == 0, LinAlgError, "torch.linalg.lstsq: (Batch element ", i, "): The algorithm failed to converge "
               "because the input matrix is ill-conditioned or has too many repeated singular values (error code: ",
               info, ").");
    T* xi = x + i * rows * k;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < k; ++c) xi[r * k + c] = b_col[c * ldb + r];
    rank[i] = driver == Driver::Gels ? 0 : rank_i;
    for (int64_t d = 0; d < diag; ++d)
      sv[i * diag + d] = driver == Driver::Gelsd || driver == Driver::Gelss ? s[d] : T(0);
  }
}

}  // namespace

void register_linalg_kernels(Registrar& reg) {
  reg.kernel("linalg_lstsq", DeviceType::CPU, {DType::Float32}, lstsq_kernel<float>);
  reg.kernel("linalg_lstsq", DeviceType::CPU, {DType::Float64}, lstsq_kernel<double>);
}

}  // namespace plugflow::cpu
