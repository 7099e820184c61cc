// mm and bmm. float32/float64 go to OpenBLAS (cblas_sgemm/dgemm) reading strided operands in
// place when they are row-major or transposed row-major, and through a packed copy otherwise;
// float16/bfloat16 are widened to float for sgemm; integers use a plain loop with wrapping
// 64-bit accumulation (the same result modulo 2^bits as PyTorch's same-type arithmetic).
#include <cblas.h>

#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "blas.h"
#include "kernels.h"
#include "loops.h"

namespace plugflow::cpu {
namespace {

// One (rows x cols) matrix of a (batched) operand: element strides.
struct Mat {
  const char* data;
  int64_t rows, cols, s0, s1;
};

// How BLAS can read a row-major matrix in place: as is, or as the transpose of a row-major
// matrix; ld follows the BLAS rules (>= max(1, row length)). Size-1 dims may have any stride.
struct BlasView {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};
std::optional<BlasView> blas_view(const Mat& m) {
  if ((m.cols == 1 || m.s1 == 1) && (m.rows == 1 || m.s0 >= std::max<int64_t>(1, m.cols)))
    return BlasView{CblasNoTrans, m.rows == 1 ? std::max<int64_t>(1, m.cols) : m.s0};
  if ((m.rows == 1 || m.s0 == 1) && (m.cols == 1 || m.s1 >= std::max<int64_t>(1, m.rows)))
    return BlasView{CblasTrans, m.cols == 1 ? std::max<int64_t>(1, m.rows) : m.s1};
  return std::nullopt;
}

// Copies m into a contiguous row-major buffer of Dst.
template <typename Dst, typename Src>
void pack(const Mat& m, Dst* out) {
  parallel_for(m.rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(m.cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const Src* row = reinterpret_cast<const Src*>(m.data) + r * m.s0;
      for (int64_t c = 0; c < m.cols; ++c) out[r * m.cols + c] = convert<Dst>(row[c * m.s1]);
    }
  });
}

// C (M x N, row-major, leading dim N) = A (M x K) * B (K x N) for float/double storage.
template <typename T>
void gemm_blas(const Mat& a, const Mat& b, T* c) {
  const int64_t M = a.rows, K = a.cols, N = b.cols;
  std::unique_ptr<T[]> a_buf, b_buf;
  const T* ap = reinterpret_cast<const T*>(a.data);
  const T* bp = reinterpret_cast<const T*>(b.data);
  auto va = blas_view(a), vb = blas_view(b);
  if (!va) {
    a_buf.reset(new T[M * K]);
    pack<T, T>(a, a_buf.get());
    ap = a_buf.get();
    va = BlasView{CblasNoTrans, std::max<int64_t>(1, K)};
  }
  if (!vb) {
    b_buf.reset(new T[K * N]);
    pack<T, T>(b, b_buf.get());
    bp = b_buf.get();
    vb = BlasView{CblasNoTrans, std::max<int64_t>(1, N)};
  }
  cpu::gemm<T>(va->trans == CblasTrans, vb->trans == CblasTrans, M, N, K, ap, va->ld, bp, vb->ld, T(0), c,
               std::max<int64_t>(1, N));
}

// float16/bfloat16: widen to float, sgemm, round once at the end.
template <typename T>
void gemm_widened(const Mat& a, const Mat& b, T* c) {
  const int64_t M = a.rows, K = a.cols, N = b.cols;
  std::unique_ptr<float[]> af(new float[M * K]), bf(new float[K * N]), cf(new float[M * N]);
  pack<float, T>(a, af.get());
  pack<float, T>(b, bf.get());
  const Mat a2{reinterpret_cast<const char*>(af.get()), M, K, K, 1}, b2{reinterpret_cast<const char*>(bf.get()), K, N, N, 1};
  gemm_blas<float>(a2, b2, cf.get());
  parallel_for(M * N, kGrainSize, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) c[i] = T(cf[i]);
  });
}

// Integers: rows of C in parallel; each row accumulates a_ik * B[k, :] in uint64, which wraps
// instead of overflowing and vectorizes over j when B's rows are contiguous.
template <typename T>
void gemm_integer(const Mat& a, const Mat& b, T* c) {
  const int64_t M = a.rows, K = a.cols, N = b.cols;
  const T* ap = reinterpret_cast<const T*>(a.data);
  const T* bp = reinterpret_cast<const T*>(b.data);
  parallel_for(M, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(K * N, 1)), [&](int64_t i0, int64_t i1) {
    std::vector<uint64_t> acc(N);
    for (int64_t i = i0; i < i1; ++i) {
      std::fill(acc.begin(), acc.end(), 0);
      for (int64_t k = 0; k < K; ++k) {
        const uint64_t aik = static_cast<uint64_t>(static_cast<int64_t>(ap[i * a.s0 + k * a.s1]));
        const T* brow = bp + k * b.s0;
        if (b.s1 == 1) {
#pragma omp simd
          for (int64_t j = 0; j < N; ++j) acc[j] += aik * static_cast<uint64_t>(static_cast<int64_t>(brow[j]));
        } else {
          for (int64_t j = 0; j < N; ++j) acc[j] += aik * static_cast<uint64_t>(static_cast<int64_t>(brow[j * b.s1]));
        }
      }
      for (int64_t j = 0; j < N; ++j) c[i * N + j] = static_cast<T>(static_cast<int64_t>(acc[j]));
    }
  });
}

template <typename T>
struct MatmulSupported {
  static constexpr bool supported = !std::is_same_v<T, bool>;
};

template <typename T>
void gemm(const Mat& a, const Mat& b, T* c) {
  const int64_t M = a.rows, K = a.cols, N = b.cols;
  if (M == 0 || N == 0) return;
  if (K == 0) {  // empty sum
    std::fill(c, c + M * N, T(0.0f));
    return;
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) gemm_blas<T>(a, b, c);
  else if constexpr (is_reduced_float_v<T>) gemm_widened<T>(a, b, c);
  else gemm_integer<T>(a, b, c);
}

// Shared by mm (batch = 1, no batch dim) and bmm.
void matmul(KernelContext& ctx, bool batched) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  const Tensor& out = ctx.output(0);
  const int64_t bd = batched ? 1 : 0;  // first matrix dim
  PF_CHECK_T(a.dim() == bd + 2 && b.dim() == bd + 2 && out.dim() == bd + 2, ValueError, "cpu '", ctx.op.name,
             "' expects ", bd + 2, "-d operands, got ", shape_str(a.sizes()), ", ", shape_str(b.sizes()), " -> ",
             shape_str(out.sizes()));
  const int64_t batch = batched ? a.sizes()[0] : 1;
  const int64_t M = a.sizes()[bd], K = a.sizes()[bd + 1], N = b.sizes()[bd + 1];
  PF_CHECK_T(b.sizes()[bd] == K && out.sizes()[bd] == M && out.sizes()[bd + 1] == N &&
                 (!batched || (b.sizes()[0] == batch && out.sizes()[0] == batch)),
             ValueError, "cpu '", ctx.op.name, "': shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " cannot be multiplied into ", shape_str(out.sizes()));
  PF_CHECK(a.dtype() == b.dtype() && out.dtype() == a.dtype(), "cpu '", ctx.op.name, "' expects one dtype, got ",
           dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " -> ", dtype_name(out.dtype()));
  if (out.numel() == 0) return;
  // The kernel writes a contiguous result; any other output layout goes through a temporary.
  if (!out.is_contiguous()) {
    Tensor tmp = Tensor::empty(out.sizes(), out.dtype(), out.device());
    std::vector<Tensor> outs{tmp};
    KernelContext inner{ctx.op, ctx.inputs, outs, ctx.attrs, ctx.device, ctx.stream};
    matmul(inner, batched);
    copy_tensor(out, tmp);
    return;
  }
  dispatch_supported<MatmulSupported>(ctx, a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t isz = sizeof(T);
    // Matrices of a batch in parallel, each GEMM on one thread; a batch too small to share
    // runs one matrix after another, each split over the threads.
    parallel_for(batch, std::max<int64_t>(1, kGemmGrain / std::max<int64_t>(1, M * N * K)), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t ao = batched ? i * a.strides()[0] : 0, bo = batched ? i * b.strides()[0] : 0;
        const Mat am{static_cast<const char*>(a.data_ptr()) + ao * isz, M, K, a.strides()[bd], a.strides()[bd + 1]};
        const Mat bm{static_cast<const char*>(b.data_ptr()) + bo * isz, K, N, b.strides()[bd], b.strides()[bd + 1]};
        gemm<T>(am, bm, out.data<T>() + i * M * N);
      }
    });
  });
}

}  // namespace

void mm_native(KernelContext& ctx) { matmul(ctx, false); }
void bmm_native(KernelContext& ctx) { matmul(ctx, true); }

void register_matmul_kernels(Registrar& reg) {
  register_supported<MatmulSupported>(reg, "mm", mm_native);
  register_supported<MatmulSupported>(reg, "bmm", bmm_native);
}

}  // namespace plugflow::cpu
