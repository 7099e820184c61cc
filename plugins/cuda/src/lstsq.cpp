// linalg_lstsq (docs/kernels.md, "Least squares") on CUDA for float32 and float64: the 'gels'
// driver, the only one PyTorch 1.13 allows on CUDA (the functional layer picks it by default
// there and refuses the others), computed as PyTorch's CUDA path does it (linalg_lstsq_gels):
//   m >= n: A = QR (cuSOLVER geqrf), B <- Q^T B (ormqr), R X = B (cuBLAS trsm);
//   m < n:  A^T = QR, R^T Z = B (trsm), X = Q [Z; 0] (ormqr).
// One matrix at a time, on the call's stream. The result has the CPU kernel's form: X in rows
// [0, n) of a (batch, max(m, n), k) solution and, for m > n, the residual components in rows
// [n, m); rank and singular values are zeros (gels computes neither).
//
// Unlike PyTorch's CUDA path, which returns infinities for a matrix without full rank, the
// triangular factor's diagonal is read back and a zero raises the CPU's (LAPACK ?gels's) error:
// one small device-to-host copy per call.
//
// cuSOLVER is loaded on first use (dlopen), not linked, for cuBLAS's reasons (matmul.cpp).
#include <cusolverDn.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <string>
#include <vector>

#include "kernel_common.h"
#include "plugflow/linalg_error.h"
#include "launchers.h"

namespace plugflow::cuda {
namespace {

struct Cusolver {
  decltype(&cusolverDnCreate) create;
  decltype(&cusolverDnSetStream) set_stream;
  decltype(&cusolverDnSgeqrf_bufferSize) sgeqrf_buffer_size;
  decltype(&cusolverDnDgeqrf_bufferSize) dgeqrf_buffer_size;
  decltype(&cusolverDnSgeqrf) sgeqrf;
  decltype(&cusolverDnDgeqrf) dgeqrf;
  decltype(&cusolverDnSormqr_bufferSize) sormqr_buffer_size;
  decltype(&cusolverDnDormqr_bufferSize) dormqr_buffer_size;
  decltype(&cusolverDnSormqr) sormqr;
  decltype(&cusolverDnDormqr) dormqr;
};

// Loaded once, on the first call; a failure raises and is retried by the next call.
const Cusolver& cusolver() {
  static const Cusolver api = [] {
    const std::string soname = "libcusolver.so." + std::to_string(CUSOLVER_VER_MAJOR);
    // RTLD_NODELETE: handles outlive any unload of this plugin (as cuBLAS's).
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (lib == nullptr) PF_THROW(DeviceError, "cuda linalg_lstsq: cannot load cuSOLVER (", soname, "): ", dlerror());
    const auto symbol = [&]<typename F>(F& fn, const char* name) {
      fn = reinterpret_cast<F>(dlsym(lib, name));
      if (fn == nullptr) PF_THROW(DeviceError, "cuda linalg_lstsq: ", soname, " has no ", name);
    };
    Cusolver c{};
    symbol(c.create, "cusolverDnCreate");
    symbol(c.set_stream, "cusolverDnSetStream");
    symbol(c.sgeqrf_buffer_size, "cusolverDnSgeqrf_bufferSize");
    symbol(c.dgeqrf_buffer_size, "cusolverDnDgeqrf_bufferSize");
    symbol(c.sgeqrf, "cusolverDnSgeqrf");
    symbol(c.dgeqrf, "cusolverDnDgeqrf");
    symbol(c.sormqr_buffer_size, "cusolverDnSormqr_bufferSize");
    symbol(c.dormqr_buffer_size, "cusolverDnDormqr_bufferSize");
    symbol(c.sormqr, "cusolverDnSormqr");
    symbol(c.dormqr, "cusolverDnDormqr");
    return c;
  }();
  return api;
}

#define PF_CUSOLVER_CHECK(expr)                                                                            \
  do {                                                                                                     \
    const cusolverStatus_t pf_st_ = (expr);                                                                \
    if (pf_st_ != CUSOLVER_STATUS_SUCCESS)                                                                 \
      PF_THROW(DeviceError, "cuSOLVER error ", static_cast<int>(pf_st_), " in ", #expr);                   \
  } while (0)

// One cuSOLVER handle per device, created on first use and never destroyed (as cuBLAS's);
// calls on a handle are serialized, its stream set per call.
struct SolverHandles {
  std::mutex mutex;
  std::vector<cusolverDnHandle_t> handles;
};
SolverHandles& solver_handles() {
  static SolverHandles h;
  return h;
}

class SolverLease {
 public:
  SolverLease(int device, cudaStream_t stream) : lock_(solver_handles().mutex) {
    auto& hs = solver_handles().handles;
    const auto d = static_cast<size_t>(device);
    if (hs.size() <= d) hs.resize(d + 1, nullptr);
    if (hs[d] == nullptr) {
      cusolverDnHandle_t h = nullptr;
      PF_CUSOLVER_CHECK(cusolver().create(&h));
      hs[d] = h;
    }
    handle_ = hs[d];
    PF_CUSOLVER_CHECK(cusolver().set_stream(handle_, stream));
  }
  cusolverDnHandle_t get() const { return handle_; }

 private:
  std::lock_guard<std::mutex> lock_;
  cusolverDnHandle_t handle_ = nullptr;
};

// geqrf and ormqr of one precision.
template <typename T>
struct Qr;
template <>
struct Qr<float> {
  static int geqrf_work(cusolverDnHandle_t h, int m, int n, float* a, int lda) {
    int lwork = 0;
    PF_CUSOLVER_CHECK(cusolver().sgeqrf_buffer_size(h, m, n, a, lda, &lwork));
    return lwork;
  }
  static void geqrf(cusolverDnHandle_t h, int m, int n, float* a, int lda, float* tau, float* work, int lwork,
                    int* info) {
    PF_CUSOLVER_CHECK(cusolver().sgeqrf(h, m, n, a, lda, tau, work, lwork, info));
  }
  static int ormqr_work(cusolverDnHandle_t h, cublasOperation_t op, int m, int n, int k, const float* a, int lda,
                        const float* tau, const float* c, int ldc) {
    int lwork = 0;
    PF_CUSOLVER_CHECK(cusolver().sormqr_buffer_size(h, CUBLAS_SIDE_LEFT, op, m, n, k, a, lda, tau, c, ldc, &lwork));
    return lwork;
  }
  static void ormqr(cusolverDnHandle_t h, cublasOperation_t op, int m, int n, int k, const float* a, int lda,
                    const float* tau, float* c, int ldc, float* work, int lwork, int* info) {
    PF_CUSOLVER_CHECK(cusolver().sormqr(h, CUBLAS_SIDE_LEFT, op, m, n, k, a, lda, tau, c, ldc, work, lwork, info));
  }
};
template <>
struct Qr<double> {
  static int geqrf_work(cusolverDnHandle_t h, int m, int n, double* a, int lda) {
    int lwork = 0;
    PF_CUSOLVER_CHECK(cusolver().dgeqrf_buffer_size(h, m, n, a, lda, &lwork));
    return lwork;
  }
  static void geqrf(cusolverDnHandle_t h, int m, int n, double* a, int lda, double* tau, double* work, int lwork,
                    int* info) {
    PF_CUSOLVER_CHECK(cusolver().dgeqrf(h, m, n, a, lda, tau, work, lwork, info));
  }
  static int ormqr_work(cusolverDnHandle_t h, cublasOperation_t op, int m, int n, int k, const double* a, int lda,
                        const double* tau, const double* c, int ldc) {
    int lwork = 0;
    PF_CUSOLVER_CHECK(cusolver().dormqr_buffer_size(h, CUBLAS_SIDE_LEFT, op, m, n, k, a, lda, tau, c, ldc, &lwork));
    return lwork;
  }
  static void ormqr(cusolverDnHandle_t h, cublasOperation_t op, int m, int n, int k, const double* a, int lda,
                    const double* tau, double* c, int ldc, double* work, int lwork, int* info) {
    PF_CUSOLVER_CHECK(cusolver().dormqr(h, CUBLAS_SIDE_LEFT, op, m, n, k, a, lda, tau, c, ldc, work, lwork, info));
  }
};

int checked_int(int64_t v) {
  PF_CHECK(v <= INT_MAX, "linalg.lstsq: a dimension of ", v, " exceeds cuSOLVER's 32-bit sizes");
  return static_cast<int>(v);
}

// A view of `t`'s storage with these sizes and strides (elements, from t's offset).
Tensor strided_view(const Tensor& t, const Shape& sizes, const Shape& strides) {
  return Tensor::view_of(t.storage(), sizes, strides, t.offset(), t.dtype());
}

void zero(const Tensor& t, cudaStream_t stream) {
  if (t.numel() > 0)
    PF_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, static_cast<size_t>(t.numel()) * t.itemsize(), stream));
}

template <typename T>
void lstsq(KernelContext& ctx, const KernelScope& scope) {
  const Tensor &a_t = ctx.input(0), &b_t = ctx.input(1);
  const int64_t batch = a_t.sizes()[0], m = a_t.sizes()[1], n = a_t.sizes()[2], k = b_t.sizes()[2];
  const int64_t rows = std::max(m, n), diag = std::min(m, n);
  const bool tall = m >= n;
  const int mi = checked_int(m), ni = checked_int(n), ki = checked_int(k), ldb = checked_int(rows);
  zero(ctx.output(1), scope.stream);  // rank and singular values: gels computes neither
  zero(ctx.output(2), scope.stream);
  const Tensor& x = ctx.output(0);
  if (k == 0 || batch == 0) return;  // LAPACK's quick return: nothing to solve, nothing checked

  // Column-major operands: A (m x n, lda m) when tall, else A^T (n x m, lda n), which is the
  // row-major A itself; B in the first m rows of a zeroed (rows x k, ldb rows) block.
  Tensor a = Tensor::empty(tall ? Shape{batch, n, m} : Shape{batch, m, n}, a_t.dtype(), a_t.device());
  launch_copy(a, tall ? strided_view(a_t, {batch, n, m}, {m * n, 1, n}) : a_t, scope.stream);
  const int lda = tall ? mi : ni, qr_rows = tall ? mi : ni, qr_cols = tall ? ni : mi;
  Tensor b = Tensor::empty({batch, k, rows}, b_t.dtype(), b_t.device());
  zero(b, scope.stream);
  launch_copy(strided_view(b, {batch, k, m}, {k * rows, rows, 1}), strided_view(b_t, {batch, k, m}, {m * k, 1, k}),
              scope.stream);

  T* a_data = static_cast<T*>(a.data_ptr());
  T* b_data = static_cast<T*>(b.data_ptr());
  Workspace tau(scope.device, static_cast<size_t>(diag) * sizeof(T));
  // geqrf's and ormqr's info only reports an invalid argument, the same for every matrix: one
  // slot, read once at the end
  Workspace info(scope.device, sizeof(int));
  std::vector<T> diagonal(static_cast<size_t>(batch * diag));
  {
    SolverLease solver(scope.device, scope.stream);
    const cublasOperation_t apply_q = tall ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int lwork = std::max(Qr<T>::geqrf_work(solver.get(), qr_rows, qr_cols, a_data, lda),
                               Qr<T>::ormqr_work(solver.get(), apply_q, ni > mi ? ni : mi, ki, qr_cols, a_data, lda,
                                                 tau.as<T>(), b_data, ldb));
    Workspace work(scope.device, static_cast<size_t>(std::max(lwork, 1)) * sizeof(T));
    for (int64_t i = 0; i < batch; ++i) {
      T* ai = a_data + i * m * n;
      T* bi = b_data + i * k * rows;
      Qr<T>::geqrf(solver.get(), qr_rows, qr_cols, ai, lda, tau.as<T>(), work.as<T>(), lwork, info.as<int>());
      if (tall) {
        Qr<T>::ormqr(solver.get(), CUBLAS_OP_T, mi, ki, ni, ai, lda, tau.as<T>(), bi, ldb, work.as<T>(), lwork,
                     info.as<int>());
        triangular_solve(a_t.dtype(), scope, /*transpose=*/false, ni, ki, ai, lda, bi, ldb);
      } else {
        triangular_solve(a_t.dtype(), scope, /*transpose=*/true, mi, ki, ai, lda, bi, ldb);
        Qr<T>::ormqr(solver.get(), CUBLAS_OP_N, ni, ki, mi, ai, lda, tau.as<T>(), bi, ldb, work.as<T>(), lwork,
                     info.as<int>());
      }
      // R's diagonal, for the rank check below
      PF_CUDA_CHECK(cudaMemcpy2DAsync(diagonal.data() + i * diag, sizeof(T), ai, static_cast<size_t>(lda + 1) * sizeof(T),
                                      sizeof(T), static_cast<size_t>(diag), cudaMemcpyDeviceToHost, scope.stream));
    }
  }
  // Row-major X (and residual rows): x[i, r, c] = b[i, c, r].
  launch_copy(x, strided_view(b, {batch, rows, k}, {k * rows, 1, rows}), scope.stream);
  int last_info = 0;
  PF_CUDA_CHECK(cudaMemcpyAsync(&last_info, info.as<void>(), sizeof(int), cudaMemcpyDeviceToHost, scope.stream));
  PF_CUDA_CHECK(cudaStreamSynchronize(scope.stream));
  PF_CHECK(last_info >= 0, "linalg.lstsq: cuSOLVER argument ", -last_info, " was invalid");
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t d = 0; d < diag; ++d)
      // (the core drops the batch element from the message of a single matrix, as on the CPU)
      PF_CHECK_T(diagonal[i * diag + d] != T(0), LinAlgError, "torch.linalg.lstsq: (Batch element ", i,
                 "): The least squares solution could not be computed because the input matrix does not have full "
                 "rank (error code: ", d + 1, ").");
}

void lstsq_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  for (const Tensor& t : ctx.inputs)
    PF_CHECK_T(t.is_contiguous(), ValueError, "cuda 'linalg_lstsq' reads contiguous inputs");
  for (const Tensor& t : ctx.outputs)
    PF_CHECK_T(t.is_contiguous(), ValueError, "cuda 'linalg_lstsq' writes contiguous outputs");
  PF_CHECK(ctx.attr<std::string>("driver") == "gels",
           "torch.linalg.lstsq: `driver` other than `gels` is not supported on CUDA");
  const DType t = ctx.input(0).dtype();
  if (t == DType::Float32) lstsq<float>(ctx, scope);
  else if (t == DType::Float64) lstsq<double>(ctx, scope);
  else throw_unsupported_dtype(ctx, t);
}

}  // namespace

std::vector<KernelDef> lstsq_kernels() { return {{"linalg_lstsq", {DType::Float32, DType::Float64}, &lstsq_kernel}}; }

}  // namespace plugflow::cuda
