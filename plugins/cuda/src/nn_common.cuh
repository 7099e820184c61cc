// Helpers of the nn kernel families (norm.cu, pool.cu): block-wide sums in double and
// per-channel parameter vectors of any floating dtype and 1-d stride.
#pragma once
#include <cstdint>

#include "elementwise.cuh"
#include "nn_math.h"
#include "types.cuh"

namespace plugflow::cuda {
namespace {

// Sums v[0..K) over the block; every thread gets the totals. blockDim.x must be a multiple of
// 32 (at most 1024); every thread of the block must call it.
template <int K>
__device__ void block_sum(double (&v)[K]) {
  __shared__ double partial[K][32];
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
#pragma unroll
  for (int k = 0; k < K; ++k)
    for (int off = 16; off > 0; off >>= 1) v[k] += __shfl_down_sync(0xffffffffu, v[k], off);
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) partial[k][warp] = v[k];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      double s = lane < warps ? partial[k][lane] : 0.0;
      for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
      if (lane == 0) partial[k][0] = s;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = partial[k][0];
  __syncthreads();  // partial may be reused by the next call
}

// A per-channel vector (weight, bias, running or saved statistics, parameter gradients) of any
// floating dtype, read and written as double; absent when p is null.
struct ChannelVec {
  enum Kind : int { F32, F64, F16, BF16 };
  void* p = nullptr;
  int64_t stride = 0;
  Kind kind = F32;
  PF_DEVICE bool present() const { return p != nullptr; }
  PF_DEVICE double get(int64_t i) const {
    const int64_t at = i * stride;
    switch (kind) {
      case F32: return static_cast<const float*>(p)[at];
      case F64: return static_cast<const double*>(p)[at];
      case F16: return static_cast<double>(static_cast<float>(static_cast<const __half*>(p)[at]));
      default: return static_cast<double>(static_cast<float>(static_cast<const __nv_bfloat16*>(p)[at]));
    }
  }
  // Rounds like a tensor cast to the vector's dtype (16-bit types through float).
  PF_DEVICE void set(int64_t i, double v) const {
    const int64_t at = i * stride;
    switch (kind) {
      case F32: static_cast<float*>(p)[at] = static_cast<float>(v); break;
      case F64: static_cast<double*>(p)[at] = v; break;
      case F16: static_cast<__half*>(p)[at] = cast_to<__half>(v); break;
      default: static_cast<__nv_bfloat16*>(p)[at] = cast_to<__nv_bfloat16>(v); break;
    }
  }
};

// Host: the vector view of a 1-d tensor (or of a 0-d / placeholder one when `defined` is false).
inline ChannelVec channel_vec(const Tensor& t, bool defined) {
  ChannelVec v;
  if (!defined) return v;
  v.p = t.data_ptr();
  v.stride = t.dim() == 1 ? t.strides()[0] : 1;
  switch (t.dtype()) {
    case DType::Float32: v.kind = ChannelVec::F32; break;
    case DType::Float64: v.kind = ChannelVec::F64; break;
    case DType::Float16: v.kind = ChannelVec::F16; break;
    case DType::BFloat16: v.kind = ChannelVec::BF16; break;
    default: PF_THROW(TypeError, "a per-channel vector must be floating, got ", dtype_name(t.dtype()));
  }
  return v;
}

}  // namespace
}  // namespace plugflow::cuda
