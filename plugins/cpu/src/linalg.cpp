// The LAPACK-backed torch.linalg ops (docs/kernels.md, "Linear algebra"): linalg_solve (?getrf, ?getrs),
// linalg_cholesky (?potrf), linalg_slogdet (?getrf), linalg_qr (?geqrf, ?orgqr), linalg_svd
// (?gesdd) and linalg_eigh (?syevd) from OpenBLAS, the routines PyTorch 1.13 calls on the CPU.
// The core hands contiguous, non-empty (batch, rows, cols) operands; each matrix is copied to a
// column-major scratch, factored there (OpenBLAS threads inside LAPACK) and copied back row-major.
// Singular and non-positive-definite inputs are reported through the info outputs (the core
// raises, or returns them for the _ex functions); a decomposition that does not converge throws.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels.h"
#include "lapack.h"
#include "plugflow/linalg_error.h"

namespace plugflow::cpu {
namespace {

void check_operands(KernelContext& ctx, const char* op) {
  for (const Tensor& t : ctx.inputs) PF_CHECK(t.is_contiguous(), "cpu '", op, "' reads contiguous inputs");
  for (const Tensor& t : ctx.outputs) PF_CHECK(t.is_contiguous(), "cpu '", op, "' writes contiguous outputs");
}

void check_argument(const char* op, int info) { PF_CHECK(info >= 0, op, ": LAPACK argument ", -info, " was invalid"); }

// Row-major (rows, cols) -> column-major with leading dimension ld (>= rows), and back.
template <typename T>
void to_column_major(const T* src, int64_t rows, int64_t cols, T* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ld + r] = src[r * cols + c];
}
template <typename T>
void from_column_major(const T* src, int64_t ld, int64_t rows, int64_t cols, T* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = src[c * ld + r];
}

// LAPACK's workspace query: the optimal lwork it reports in work[0].
template <typename T>
int queried(T size) {
  return std::max(1, static_cast<int>(size));
}

// As PyTorch for a contiguous A: the row-major A is A^T column-major, so LU-factor A^T as it lies
// and solve A X = B as (A^T)^T X = B (which zero pivot info names follows from that).
template <typename T>
void solve_kernel(KernelContext& ctx) {
  check_operands(ctx, "linalg_solve");
  const Tensor &a_t = ctx.input(0), &b_t = ctx.input(1);
  const int64_t batch = a_t.sizes()[0], n = a_t.sizes()[1], k = b_t.sizes()[2];
  const int ni = lapack_int("linalg.solve", n), ki = lapack_int("linalg.solve", k);
  std::vector<T> lu(static_cast<size_t>(n * n)), b(static_cast<size_t>(n * k));
  std::vector<int> pivots(static_cast<size_t>(n));
  T* x = ctx.output(0).data<T>();
  int32_t* infos = ctx.output(1).data<int32_t>();
  for (int64_t i = 0; i < batch; ++i) {
    const T* a = a_t.data<T>() + i * n * n;
    std::copy(a, a + n * n, lu.begin());
    to_column_major(b_t.data<T>() + i * n * k, n, k, b.data(), n);
    int info = 0;
    Lapack<T>::getrf(&ni, &ni, lu.data(), &ni, pivots.data(), &info);
    check_argument("linalg.solve", info);
    infos[i] = info;
    if (info == 0) {
      Lapack<T>::getrs("T", &ni, &ki, lu.data(), &ni, pivots.data(), b.data(), &ni, &info, 1);
      check_argument("linalg.solve", info);
    } else {  // singular: no solution (PyTorch's is NaN as well)
      std::fill(b.begin(), b.end(), std::numeric_limits<T>::quiet_NaN());
    }
    from_column_major(b.data(), n, n, k, x + i * n * k);
  }
}

// No copies: the row-major A is A^T column-major and the row-major B (n, k) is B^T (k, n), so
// A X = B is solved as X^T A^T = B^T in place in the output (A^T's triangle the other one).
// As PyTorch's, no singularity check: a zero on the diagonal gives inf / NaN.
template <typename T>
void solve_triangular_kernel(KernelContext& ctx) {
  check_operands(ctx, "linalg_solve_triangular");
  const Tensor &a_t = ctx.input(0), &b_t = ctx.input(1);
  const bool upper = ctx.attr<bool>("upper"), unitriangular = ctx.attr<bool>("unitriangular");
  const int64_t batch = a_t.sizes()[0], n = a_t.sizes()[1], k = b_t.sizes()[2];
  const int ni = lapack_int("linalg.solve_triangular", n), ki = lapack_int("linalg.solve_triangular", k);
  const T one = 1;
  T* x = ctx.output(0).data<T>();
  std::copy(b_t.data<T>(), b_t.data<T>() + batch * n * k, x);
  for (int64_t i = 0; i < batch; ++i)
    Lapack<T>::trsm("R", upper ? "L" : "U", "N", unitriangular ? "U" : "N", &ki, &ni, &one, a_t.data<T>() + i * n * n,
                    &ni, x + i * n * k, &ki, 1, 1, 1, 1);
}

template <typename T>
void cholesky_kernel(KernelContext& ctx) {
  check_operands(ctx, "linalg_cholesky");
  const Tensor& a_t = ctx.input(0);
  const bool upper = ctx.attr<bool>("upper");
  const int64_t batch = a_t.sizes()[0], n = a_t.sizes()[1];
  const int ni = lapack_int("linalg.cholesky", n);
  std::vector<T> a(static_cast<size_t>(n * n));
  T* out = ctx.output(0).data<T>();
  int32_t* infos = ctx.output(1).data<int32_t>();
  for (int64_t i = 0; i < batch; ++i) {
    to_column_major(a_t.data<T>() + i * n * n, n, n, a.data(), n);
    int info = 0;
    Lapack<T>::potrf(upper ? "U" : "L", &ni, a.data(), &ni, &info, 1);
    check_argument("linalg.cholesky", info);
    infos[i] = info;
    for (int64_t c = 0; c < n; ++c)  // potrf leaves the other triangle as it was
      for (int64_t r = 0; r < n; ++r)
        if (upper ? r > c : r < c) a[c * n + r] = T(0);
    from_column_major(a.data(), n, n, n, out + i * n * n);
  }
}

template <typename T>
void slogdet_kernel(KernelContext& ctx) {
  check_operands(ctx, "linalg_slogdet");
  const Tensor& a_t = ctx.input(0);
  const int64_t batch = a_t.sizes()[0], n = a_t.sizes()[1];
  const int ni = lapack_int("linalg.slogdet", n);
  std::vector<T> a(static_cast<size_t>(n * n));
  std::vector<int> pivots(static_cast<size_t>(n));
  T* sign = ctx.output(0).data<T>();
  T* logabsdet = ctx.output(1).data<T>();
  for (int64_t i = 0; i < batch; ++i) {
    to_column_major(a_t.data<T>() + i * n * n, n, n, a.data(), n);
    int info = 0;
    Lapack<T>::getrf(&ni, &ni, a.data(), &ni, pivots.data(), &info);
    check_argument("linalg.slogdet", info);
    if (info > 0) {  // an exact zero on U's diagonal: det(a) = 0
      sign[i] = T(0);
      logabsdet[i] = -std::numeric_limits<T>::infinity();
      continue;
    }
    bool negative = false;
    T log_sum = 0;  // in T, as PyTorch sums log|U_jj|
    for (int64_t j = 0; j < n; ++j) {
      const T u = a[j * n + j];
      negative ^= (u < 0) != (pivots[j] != j + 1);  // each row swap flips the sign
      log_sum += std::log(std::abs(u));
    }
    sign[i] = negative ? T(-1) : T(1);
    logabsdet[i] = log_sum;
  }
}

template <typename T>
void qr_kernel(KernelContext& ctx) {
  check_operands(ctx, "linalg_qr");
  const Tensor& a_t = ctx.input(0);
  const int64_t batch = a_t.sizes()[0], m = a_t.sizes()[1], n = a_t.sizes()[2], k = std::min(m, n);
  const Tensor &q_t = ctx.output(0), &r_t = ctx.output(1);
  const bool with_q = q_t.numel() > 0;
  const int64_t q_cols = with_q ? q_t.sizes()[2] : 0, r_rows = r_t.sizes()[1];
  const int mi = lapack_int("linalg.qr", m), ni = lapack_int("linalg.qr", n), ki = static_cast<int>(k);
  const int q_ci = lapack_int("linalg.qr", q_cols);
  // a holds the factored matrix; for Q, its first columns (the reflectors) widened to q_cols
  std::vector<T> a(static_cast<size_t>(m * n)), q(static_cast<size_t>(m * q_cols)), tau(static_cast<size_t>(k));
  int info = 0, lwork = -1;
  T size = 0;
  Lapack<T>::geqrf(&mi, &ni, a.data(), &mi, tau.data(), &size, &lwork, &info);
  int geqrf_lwork = queried(size), orgqr_lwork = 1;
  if (with_q) {
    Lapack<T>::orgqr(&mi, &q_ci, &ki, q.data(), &mi, tau.data(), &size, &lwork, &info);
    orgqr_lwork = queried(size);
  }
  std::vector<T> work(static_cast<size_t>(std::max(geqrf_lwork, orgqr_lwork)));
  for (int64_t i = 0; i < batch; ++i) {
    to_column_major(a_t.data<T>() + i * m * n, m, n, a.data(), m);
    Lapack<T>::geqrf(&mi, &ni, a.data(), &mi, tau.data(), work.data(), &geqrf_lwork, &info);
    check_argument("linalg.qr", info);
    T* r = r_t.data<T>() + i * r_rows * n;
    for (int64_t row = 0; row < r_rows; ++row)
      for (int64_t c = 0; c < n; ++c) r[row * n + c] = row <= c ? a[c * m + row] : T(0);
    if (!with_q) continue;
    std::fill(q.begin(), q.end(), T(0));
    std::copy(a.begin(), a.begin() + std::min(n, q_cols) * m, q.begin());
    Lapack<T>::orgqr(&mi, &q_ci, &ki, q.data(), &mi, tau.data(), work.data(), &orgqr_lwork, &info);
    check_argument("linalg.qr", info);
    from_column_major(q.data(), m, m, q_cols, q_t.data<T>() + i * m * q_cols);
  }
}

template <typename T>
void svd_kernel(KernelContext& ctx) {
  check_operands(ctx, "linalg_svd");
  const Tensor& a_t = ctx.input(0);
  const int64_t batch = a_t.sizes()[0], m = a_t.sizes()[1], n = a_t.sizes()[2], k = std::min(m, n);
  const Tensor &u_t = ctx.output(0), &s_t = ctx.output(1), &vh_t = ctx.output(2);
  const bool compute_uv = ctx.attr<bool>("compute_uv"), full = ctx.attr<bool>("full_matrices");
  const char* jobz = !compute_uv ? "N" : full ? "A" : "S";
  const int64_t u_cols = compute_uv ? u_t.sizes()[2] : 0, vh_rows = compute_uv ? vh_t.sizes()[1] : 0;
  const int mi = lapack_int("linalg.svd", m), ni = lapack_int("linalg.svd", n);
  const int ldu = std::max(1, mi), ldvt = std::max<int>(1, static_cast<int>(vh_rows));
  std::vector<T> a(static_cast<size_t>(m * n)), u(static_cast<size_t>(std::max<int64_t>(1, m * u_cols)));
  std::vector<T> vt(static_cast<size_t>(std::max<int64_t>(1, vh_rows * n)));
  std::vector<int> iwork(static_cast<size_t>(8 * k));
  int info = 0, lwork = -1;
  T size = 0;
  T* s = s_t.data<T>();
  Lapack<T>::gesdd(jobz, &mi, &ni, a.data(), &mi, s, u.data(), &ldu, vt.data(), &ldvt, &size, &lwork, iwork.data(),
                   &info, 1);
  check_argument("linalg.svd", info);
  lwork = queried(size);
  std::vector<T> work(static_cast<size_t>(lwork));
  for (int64_t i = 0; i < batch; ++i) {
    to_column_major(a_t.data<T>() + i * m * n, m, n, a.data(), m);
    Lapack<T>::gesdd(jobz, &mi, &ni, a.data(), &mi, s + i * k, u.data(), &ldu, vt.data(), &ldvt, work.data(), &lwork,
                     iwork.data(), &info, 1);
    check_argument("linalg.svd", info);
    // (the core drops the batch element from the message of a single matrix, as PyTorch's)
    PF_CHECK_T(info == 0, LinAlgError, "linalg.svd: (Batch element ", i, "): The algorithm failed to converge "
               "because the input matrix is ill-conditioned or has too many repeated singular values (error code: ",
               info, ").");
    if (!compute_uv) continue;
    from_column_major(u.data(), m, m, u_cols, u_t.data<T>() + i * m * u_cols);
    from_column_major(vt.data(), vh_rows, vh_rows, n, vh_t.data<T>() + i * vh_rows * n);
  }
}

template <typename T>
void eigh_kernel(KernelContext& ctx) {
  check_operands(ctx, "linalg_eigh");
  const Tensor& a_t = ctx.input(0);
  const int64_t batch = a_t.sizes()[0], n = a_t.sizes()[1];
  const bool compute_v = ctx.attr<bool>("compute_v");
  const char* jobz = compute_v ? "V" : "N";
  const char* uplo = ctx.attr<std::string>("uplo") == "U" ? "U" : "L";
  const int ni = lapack_int("linalg.eigh", n);
  std::vector<T> a(static_cast<size_t>(n * n));
  T* w = ctx.output(0).data<T>();
  int info = 0, lwork = -1, liwork = -1, isize = 0;
  T size = 0;
  Lapack<T>::syevd(jobz, uplo, &ni, a.data(), &ni, w, &size, &lwork, &isize, &liwork, &info, 1, 1);
  check_argument("linalg.eigh", info);
  lwork = queried(size);
  liwork = std::max(1, isize);
  std::vector<T> work(static_cast<size_t>(lwork));
  std::vector<int> iwork(static_cast<size_t>(liwork));
  for (int64_t i = 0; i < batch; ++i) {
    to_column_major(a_t.data<T>() + i * n * n, n, n, a.data(), n);
    Lapack<T>::syevd(jobz, uplo, &ni, a.data(), &ni, w + i * n, work.data(), &lwork, iwork.data(), &liwork, &info, 1,
                     1);
    check_argument("linalg.eigh", info);
    PF_CHECK_T(info == 0, LinAlgError, "linalg.eigh: (Batch element ", i, "): The algorithm failed to converge because "
               "the input matrix is ill-conditioned or has too many repeated eigenvalues (error code: ", info, ").");
    if (compute_v) from_column_major(a.data(), n, n, n, ctx.output(1).data<T>() + i * n * n);
  }
}

}  // namespace

void register_linalg_decomposition_kernels(Registrar& reg) {
  reg.kernel("linalg_solve", DeviceType::CPU, {DType::Float32}, solve_kernel<float>);
  reg.kernel("linalg_solve", DeviceType::CPU, {DType::Float64}, solve_kernel<double>);
  reg.kernel("linalg_solve_triangular", DeviceType::CPU, {DType::Float32}, solve_triangular_kernel<float>);
  reg.kernel("linalg_solve_triangular", DeviceType::CPU, {DType::Float64}, solve_triangular_kernel<double>);
  reg.kernel("linalg_cholesky", DeviceType::CPU, {DType::Float32}, cholesky_kernel<float>);
  reg.kernel("linalg_cholesky", DeviceType::CPU, {DType::Float64}, cholesky_kernel<double>);
  reg.kernel("linalg_slogdet", DeviceType::CPU, {DType::Float32}, slogdet_kernel<float>);
  reg.kernel("linalg_slogdet", DeviceType::CPU, {DType::Float64}, slogdet_kernel<double>);
  reg.kernel("linalg_qr", DeviceType::CPU, {DType::Float32}, qr_kernel<float>);
  reg.kernel("linalg_qr", DeviceType::CPU, {DType::Float64}, qr_kernel<double>);
  reg.kernel("linalg_svd", DeviceType::CPU, {DType::Float32}, svd_kernel<float>);
  reg.kernel("linalg_svd", DeviceType::CPU, {DType::Float64}, svd_kernel<double>);
  reg.kernel("linalg_eigh", DeviceType::CPU, {DType::Float32}, eigh_kernel<float>);
  reg.kernel("linalg_eigh", DeviceType::CPU, {DType::Float64}, eigh_kernel<double>);
}

}  // namespace plugflow::cpu
