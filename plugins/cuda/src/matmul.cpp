// mm and bmm, and the row-major gemm other kernels call (launchers.h). Floating dtypes go to
// cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx): float32 in exact fp32 (no TF32, as
// PyTorch's default), float64 in fp64, and f16/bf16 with float accumulation (reduced-precision
// split-K reductions disallowed). Integer dtypes use launch_integer_bmm (matmul_int.cu).
//
// cuBLAS is column-major; a row-major C = A @ B is the column-major C^T = B^T @ A^T, so the
// operands are passed swapped. A strided operand is read in place when it is row-major or
// transposed row-major (any leading dimension); otherwise it is copied to a contiguous
// buffer first.
//
// cuBLAS is loaded on first use (dlopen), not linked: mapping libcublas pulls in libcublasLt,
// whose initialization alone takes ~150 MB of resident memory, and the default config loads
// this plugin (optionally) on every machine, with or without a GPU. Only the header is used
// at build time; the soname is the one of the toolkit plugflow was built with.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <climits>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kernel_common.h"
#include "launchers.h"

namespace plugflow::cuda {
namespace {

// The cuBLAS entry points this file calls. cublas_api.h also declares C++ inline overloads of
// the two GEMMs, so their types are spelled out; the static_asserts check them against the
// header's declarations without referencing the symbols.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                  const void*, const void*, cudaDataType, int, long long int,
                                                  const void*, cudaDataType, int, long long int, const void*, void*,
                                                  cudaDataType, int, long long int, int, cublasComputeType_t,
                                                  cublasGemmAlgo_t);
static_assert(std::is_same_v<decltype(static_cast<GemmExFn>(&cublasGemmEx)), GemmExFn>);
static_assert(std::is_same_v<decltype(static_cast<GemmStridedBatchedExFn>(&cublasGemmStridedBatchedEx)),
                             GemmStridedBatchedExFn>);

struct Cublas {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  GemmExFn gemm_ex;
  GemmStridedBatchedExFn gemm_strided_batched_ex;
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
  decltype(&cublasStrsm_v2) strsm;  // triangular solves (linalg_lstsq, lstsq.cpp)
  decltype(&cublasDtrsm_v2) dtrsm;
};

// Loaded once, on the first floating matmul; a failure raises and is retried by the next call.
const Cublas& cublas() {
  static const Cublas api = [] {
    const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    // RTLD_NODELETE: handles outlive any unload of this plugin (see BlasHandles).
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (lib == nullptr) PF_THROW(DeviceError, "cuda matmul: cannot load cuBLAS (", soname, "): ", dlerror());
    const auto symbol = [&]<typename F>(F& fn, const char* name) {
      fn = reinterpret_cast<F>(dlsym(lib, name));
      if (fn == nullptr) PF_THROW(DeviceError, "cuda matmul: ", soname, " has no ", name);
    };
    Cublas c{};
    symbol(c.create, "cublasCreate_v2");
    symbol(c.set_stream, "cublasSetStream_v2");
    symbol(c.set_math_mode, "cublasSetMathMode");
    symbol(c.gemm_ex, "cublasGemmEx");
    symbol(c.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
    symbol(c.status_name, "cublasGetStatusName");
    symbol(c.status_string, "cublasGetStatusString");
    symbol(c.strsm, "cublasStrsm_v2");
    symbol(c.dtrsm, "cublasDtrsm_v2");
    return c;
  }();
  return api;
}

#define PF_CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                              \
    const cublasStatus_t pf_st_ = (expr);                                                           \
    if (pf_st_ != CUBLAS_STATUS_SUCCESS)                                                            \
      PF_THROW(DeviceError, "cuBLAS error ", cublas().status_name(pf_st_), " (", cublas().status_string(pf_st_), \
               ") in ", #expr);                                                                     \
  } while (0)

// One cuBLAS handle per device, created on first use. Calls on a handle are serialized: the
// stream is set per call and a handle is not safe to reconfigure concurrently.
struct BlasHandles {
  std::mutex mutex;
  std::vector<cublasHandle_t> handles;
};
BlasHandles& blas_handles() {
  static BlasHandles h;  // never destroyed handles: see CachingAllocator's destructor
  return h;
}

// Locks the device's handle, bound to `stream`, for one call.
class BlasLease {
 public:
  BlasLease(int device, cudaStream_t stream) : lock_(blas_handles().mutex) {
    auto& hs = blas_handles().handles;
    if (hs.size() <= static_cast<size_t>(device)) hs.resize(static_cast<size_t>(device) + 1, nullptr);
    if (hs[static_cast<size_t>(device)] == nullptr) {
      cublasHandle_t h = nullptr;
      PF_CUBLAS_CHECK(cublas().create(&h));
      // Float accumulation for f16/bf16 all the way (no reduced-precision split-K).
      PF_CUBLAS_CHECK(cublas().set_math_mode(h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                      CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
      hs[static_cast<size_t>(device)] = h;
    }
    handle_ = hs[static_cast<size_t>(device)];
    PF_CUBLAS_CHECK(cublas().set_stream(handle_, stream));
  }
  cublasHandle_t get() const { return handle_; }

 private:
  std::lock_guard<std::mutex> lock_;
  cublasHandle_t handle_ = nullptr;
};

// How cuBLAS can read a row-major (rows x cols) matrix with element strides (s0, s1) in
// place: as is (row-major, ld = s0) or as a transposed row-major one (column-major, ld = s1).
// ld follows the BLAS rule ld >= max(1, row length); size-1 dims may have any stride.
struct BlasView {
  bool transposed;  // column-major storage
  int64_t ld;
};
std::optional<BlasView> blas_view(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= std::max<int64_t>(1, cols)))
    return BlasView{false, rows == 1 ? std::max<int64_t>(1, cols) : s0};
  if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= std::max<int64_t>(1, rows)))
    return BlasView{true, cols == 1 ? std::max<int64_t>(1, rows) : s1};
  return std::nullopt;
}

struct BlasTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
};
BlasTypes blas_types(DType t) {
  switch (t) {
    case DType::Float32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::Float64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::Float16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case DType::BFloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    default: PF_THROW(TypeError, "cuBLAS matmul: unsupported dtype ", dtype_name(t));
  }
}

// An operand prepared for cuBLAS: the tensor actually read (the input or a contiguous copy)
// and how to read one matrix of it.
struct Operand {
  Tensor tensor;
  BlasView view;
  int64_t batch_stride;  // elements
};

Operand prepare(const Tensor& t, bool batched, const KernelScope& scope) {
  const int64_t bd = batched ? 1 : 0;
  const int64_t rows = t.sizes()[bd], cols = t.sizes()[bd + 1];
  if (auto v = blas_view(rows, cols, t.strides()[bd], t.strides()[bd + 1]); v && v->ld <= INT_MAX)
    return {t, *v, batched ? t.strides()[0] : 0};
  Tensor dense = Tensor::empty(t.sizes(), t.dtype(), t.device());
  launch_copy(dense, t, scope.stream);
  return {dense, BlasView{false, std::max<int64_t>(1, cols)}, batched ? rows * cols : 0};
}

// C (batch x M x N, contiguous) = A @ B through cuBLAS.
void blas_matmul(const Tensor& c, const Tensor& a, const Tensor& b, bool batched, const KernelScope& scope) {
  const int64_t bd = batched ? 1 : 0;
  const int64_t batch = batched ? a.sizes()[0] : 1;
  const int64_t M = a.sizes()[bd], K = a.sizes()[bd + 1], N = b.sizes()[bd + 1];
  PF_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX, "matrix multiply: sizes beyond 2^31-1 are not supported by cuBLAS (",
           M, "x", K, " @ ", K, "x", N, ")");
  const Operand A = prepare(a, batched, scope), B = prepare(b, batched, scope);
  const BlasTypes types = blas_types(a.dtype());
  // alpha/beta have the compute type's C type.
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const bool f64 = types.compute == CUBLAS_COMPUTE_64F;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  // Swapped operands: C^T (N x M) = op(B) (N x K) @ op(A) (K x M), column-major.
  const cublasOperation_t op_b = B.view.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = A.view.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int ldb = static_cast<int>(B.view.ld), lda = static_cast<int>(A.view.ld), ldc = std::max(1, m);

  BlasLease blas(scope.device, scope.stream);
  if (!batched) {
    PF_CUBLAS_CHECK(cublas().gemm_ex(blas.get(), op_b, op_a, m, n, k, alpha, B.tensor.data_ptr(), types.data, ldb,
                                 A.tensor.data_ptr(), types.data, lda, beta, c.data_ptr(), types.data, ldc,
                                 types.compute, CUBLAS_GEMM_DEFAULT));
    return;
  }
  // Batches in groups cuBLAS's grid can hold.
  constexpr int64_t kMaxBatch = 65535;
  const int64_t isz = static_cast<int64_t>(a.itemsize());
  for (int64_t b0 = 0; b0 < batch; b0 += kMaxBatch) {
    const int count = static_cast<int>(std::min(kMaxBatch, batch - b0));
    const char* bp = static_cast<const char*>(B.tensor.data_ptr()) + b0 * B.batch_stride * isz;
    const char* ap = static_cast<const char*>(A.tensor.data_ptr()) + b0 * A.batch_stride * isz;
    char* cp = static_cast<char*>(c.data_ptr()) + b0 * M * N * isz;
    PF_CUBLAS_CHECK(cublas().gemm_strided_batched_ex(blas.get(), op_b, op_a, m, n, k, alpha, bp, types.data, ldb,
                                               B.batch_stride, ap, types.data, lda, A.batch_stride, beta, cp,
                                               types.data, ldc, M * N, count, types.compute, CUBLAS_GEMM_DEFAULT));
  }
}

// A (1, rows, cols) view of a matrix, for the batched integer kernel.
Tensor with_batch_dim(const Tensor& t) {
  Shape sizes = t.sizes(), strides = t.strides();
  sizes.insert(sizes.begin(), 1);
  strides.insert(strides.begin(), 0);
  return Tensor::view_of(t.storage(), sizes, strides, t.offset(), t.dtype());
}

// Shared by mm (no batch dim) and bmm.
void matmul(KernelContext& ctx, bool batched) {
  KernelScope scope(ctx);
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  const Tensor& out = ctx.output(0);
  const int64_t bd = batched ? 1 : 0;
  PF_CHECK_T(a.dim() == bd + 2 && b.dim() == bd + 2 && out.dim() == bd + 2, ValueError, "cuda '", ctx.op.name,
             "' expects ", bd + 2, "-d operands, got ", shape_str(a.sizes()), ", ", shape_str(b.sizes()), " -> ",
             shape_str(out.sizes()));
  const int64_t M = a.sizes()[bd], K = a.sizes()[bd + 1], N = b.sizes()[bd + 1];
  PF_CHECK_T(b.sizes()[bd] == K && out.sizes()[bd] == M && out.sizes()[bd + 1] == N &&
                 (!batched || (b.sizes()[0] == a.sizes()[0] && out.sizes()[0] == a.sizes()[0])),
             ValueError, "cuda '", ctx.op.name, "': shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " cannot be multiplied into ", shape_str(out.sizes()));
  PF_CHECK(a.dtype() == b.dtype() && out.dtype() == a.dtype(), "cuda '", ctx.op.name, "' expects one dtype, got ",
           dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " -> ", dtype_name(out.dtype()));
  if (out.numel() == 0) return;
  if (!is_floating(a.dtype())) {
    if (batched) launch_integer_bmm(out, a, b, scope.stream);
    else launch_integer_bmm(with_batch_dim(out), with_batch_dim(a), with_batch_dim(b), scope.stream);
    return;
  }
  // cuBLAS writes a contiguous result; any other output layout goes through a temporary.
  if (!out.is_contiguous()) {
    Tensor tmp = Tensor::empty(out.sizes(), out.dtype(), out.device());
    std::vector<Tensor> outs{tmp};
    KernelContext inner{ctx.op, ctx.inputs, outs, ctx.attrs, ctx.device, scope.stream};
    matmul(inner, batched);
    launch_copy(out, tmp, scope.stream);
    return;
  }
  if (K == 0) {  // an empty sum: zeros (with k == 0 cuBLAS only scales C by beta)
    PF_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, static_cast<size_t>(out.numel()) * out.itemsize(), scope.stream));
    return;
  }
  blas_matmul(out, a, b, batched, scope);
}

void mm_kernel(KernelContext& ctx) { matmul(ctx, false); }
void bmm_kernel(KernelContext& ctx) { matmul(ctx, true); }

}  // namespace

void triangular_solve(DType dtype, const KernelScope& scope, bool transpose, int n, int nrhs, const void* a, int lda,
                      void* b, int ldb) {
  BlasLease blas(scope.device, scope.stream);
  const cublasOperation_t op = transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (dtype == DType::Float64) {
    const double one = 1.0;
    PF_CUBLAS_CHECK(cublas().dtrsm(blas.get(), CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, op, CUBLAS_DIAG_NON_UNIT, n,
                                   nrhs, &one, static_cast<const double*>(a), lda, static_cast<double*>(b), ldb));
  } else {
    PF_CHECK(dtype == DType::Float32, "cuda triangular_solve: unsupported dtype ", dtype_name(dtype));
    const float one = 1.0f;
    PF_CUBLAS_CHECK(cublas().strsm(blas.get(), CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, op, CUBLAS_DIAG_NON_UNIT, n,
                                   nrhs, &one, static_cast<const float*>(a), lda, static_cast<float*>(b), ldb));
  }
}

void gemm(DType dtype, const KernelScope& scope, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
          const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc) {
  PF_CHECK(dtype == DType::Float32 || dtype == DType::Float64, "cuda gemm: unsupported dtype ", dtype_name(dtype));
  // Overwrite or accumulate: the K == 0 shortcut below has no other beta to scale C by.
  PF_CHECK(beta == 0.0 || beta == 1.0, "cuda gemm: beta must be 0 or 1, got ", beta);
  if (M == 0 || N == 0) return;
  for (int64_t v : {M, N, K, lda, ldb, ldc})
    PF_CHECK(v <= INT_MAX, "cuda gemm: sizes beyond 2^31-1 are not supported by cuBLAS (", M, "x", K, " @ ", K, "x",
             N, ")");
  const size_t isz = dtype == DType::Float64 ? sizeof(double) : sizeof(float);
  if (K == 0) {  // an empty sum (cuBLAS would only scale C by beta)
    if (beta == 0.0)
      PF_CUDA_CHECK(cudaMemset2DAsync(c, static_cast<size_t>(ldc) * isz, 0, static_cast<size_t>(N) * isz,
                                      static_cast<size_t>(M), scope.stream));
    return;
  }
  const BlasTypes types = blas_types(dtype);
  const float alpha_f = 1.0f, beta_f = static_cast<float>(beta);
  const double alpha_d = 1.0;
  const bool f64 = dtype == DType::Float64;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta_p = f64 ? static_cast<const void*>(&beta) : static_cast<const void*>(&beta_f);
  // Row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: the operands swapped.
  BlasLease blas(scope.device, scope.stream);
  PF_CUBLAS_CHECK(cublas().gemm_ex(blas.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), alpha, b, types.data,
                                   static_cast<int>(ldb), a, types.data, static_cast<int>(lda), beta_p, c, types.data,
                                   static_cast<int>(ldc), types.compute, CUBLAS_GEMM_DEFAULT));
}

std::vector<KernelDef> matmul_kernels() {
  std::vector<DType> numeric;
  for (int i = 0; i < kNumDTypes; ++i)
    if (static_cast<DType>(i) != DType::Bool) numeric.push_back(static_cast<DType>(i));
  return {{"mm", numeric, &mm_kernel}, {"bmm", numeric, &bmm_kernel}};
}

}  // namespace plugflow::cuda
