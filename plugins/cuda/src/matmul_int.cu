// Integer matrix multiply (no BLAS has one): a shared-memory tiled kernel over any strides,
// accumulating a_ik * b_kj in 64-bit unsigned arithmetic, which wraps instead of overflowing
// and gives the same result modulo 2^bits as the CPU plugin.
#include "elementwise.cuh"
#include "launchers.h"

namespace plugflow::cuda {
namespace {

constexpr int kTile = 16;

struct Strides3 {
  int64_t s0, s1, s2;  // elements: batch, row, col
};

template <typename D>
__device__ __forceinline__ uint64_t widen(D v) {
  return static_cast<uint64_t>(static_cast<int64_t>(v));
}

// Block (kTile x kTile) computes a tile of C; tiles and batches are walked with grid-stride
// loops (uniform per block, so __syncthreads stays legal).
template <typename D>
__global__ void integer_bmm_kernel(const D* a, const D* b, D* c, int64_t batch, int64_t M, int64_t N, int64_t K,
                                   Strides3 sa, Strides3 sb, Strides3 sc) {
  __shared__ uint64_t as[kTile][kTile];
  __shared__ uint64_t bs[kTile][kTile + 1];  // +1: no bank conflicts on the column reads
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tiles_m = (M + kTile - 1) / kTile, tiles_n = (N + kTile - 1) / kTile;
  for (int64_t z = blockIdx.z; z < batch; z += gridDim.z) {
    for (int64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
      for (int64_t tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
        const int64_t row = tm * kTile + ty, col = tn * kTile + tx;
        uint64_t acc = 0;
        for (int64_t k0 = 0; k0 < K; k0 += kTile) {
          as[ty][tx] = (row < M && k0 + tx < K) ? widen(a[z * sa.s0 + row * sa.s1 + (k0 + tx) * sa.s2]) : 0;
          bs[ty][tx] = (k0 + ty < K && col < N) ? widen(b[z * sb.s0 + (k0 + ty) * sb.s1 + col * sb.s2]) : 0;
          __syncthreads();
#pragma unroll
          for (int kk = 0; kk < kTile; ++kk) acc += as[ty][kk] * bs[kk][tx];
          __syncthreads();
        }
        if (row < M && col < N) c[z * sc.s0 + row * sc.s1 + col * sc.s2] = static_cast<D>(static_cast<int64_t>(acc));
      }
    }
  }
}

Strides3 strides3(const Tensor& t) { return {t.strides()[0], t.strides()[1], t.strides()[2]}; }

}  // namespace

void launch_integer_bmm(const Tensor& out, const Tensor& a, const Tensor& b, void* stream) {
  PF_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3, "integer bmm expects 3-d operands");
  const int64_t batch = a.sizes()[0], M = a.sizes()[1], K = a.sizes()[2], N = b.sizes()[2];
  if (batch == 0 || M == 0 || N == 0) return;
  KernelScope scope(out.device().index, stream);
  const dim3 block(kTile, kTile);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((N + kTile - 1) / kTile, 65535)),
                  static_cast<unsigned>(std::min<int64_t>((M + kTile - 1) / kTile, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(batch, 65535)));
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_int_v<T>) {
      integer_bmm_kernel<T><<<grid, block, 0, scope.stream>>>(a.data<T>(), b.data<T>(), out.data<T>(), batch, M, N, K,
                                                             strides3(a), strides3(b), strides3(out));
      PF_CUDA_CHECK_LAUNCH();
    } else {
      PF_THROW(TypeError, "integer bmm: unsupported dtype ", dtype_name(a.dtype()));
    }
  });
}

}  // namespace plugflow::cuda
