// The reduction driver shared by the CUDA reduction kernels (reduce.cu: sum ... argmin;
// reduction_extra.cu: var_mean, norm, all, any); any input and output strides.
//
// make_reduce_indexing (indexing.cpp) turns the call into num_outputs independent
// reductions of reduce_size elements. One kernel covers every case with a 2-d block:
// threadIdx.x walks the reduced elements of one output, threadIdx.y picks the output.
//   * inner reductions (reduced elements closer in memory than neighbouring outputs, e.g.
//     sum over the last dim): up to 256 threads share one output, reading consecutive
//     memory, and fold their partials in shared memory;
//   * outer reductions (e.g. sum over dim 0 of a matrix): one thread per output, so a warp
//     reads 32 neighbouring outputs' elements at once.
// When that leaves the GPU underused (few outputs, long reductions), the reduced range is
// cut into chunks along gridDim.y; each block writes a partial accumulator and a second
// kernel merges the chunks in order and writes the outputs.
//
// A reducer (on device type D) has acc_t, identity(), step(acc, x, r), merge(a, b) and
// write(out0, out1, acc, count). merge must be associative and, for the indexed ones,
// independent of the merge order (ties go to the smaller index), because the block-level
// tree does not merge left to right.
#pragma once
#include <algorithm>

#include "elementwise.cuh"
#include "indexing.h"
#include "launchers.h"

namespace plugflow::cuda {
// Internal linkage: every .cu file instantiates its own kernels (no relocatable device code).
namespace {

// Sum and product accumulate floats in double (float32/64) or float (f16/bf16), integers in
// 64-bit unsigned arithmetic (wraps like int64, without signed overflow); as on the CPU.
template <typename D>
using sum_acc_t = std::conditional_t<is_reduced_float_v<D>, float,
                                     std::conditional_t<std::is_floating_point_v<D>, double, uint64_t>>;

template <typename D, typename Acc>
PF_DEVICE Acc to_acc(D x) {
  if constexpr (std::is_same_v<Acc, uint64_t>) return static_cast<uint64_t>(static_cast<int64_t>(x));
  else return static_cast<Acc>(to_opmath(x));
}
template <typename D, typename Acc>
PF_DEVICE D from_acc(Acc a) {
  if constexpr (std::is_same_v<Acc, uint64_t>) return cast_to<D>(static_cast<int64_t>(a));
  else return cast_to<D>(a);
}

// ---- kernels -------------------------------------------------------------------------------

template <typename Red, typename D>
__global__ void reduce_kernel(ReduceIndexing ix, const char* in, char* out0, char* out1, Red red,
                              typename Red::acc_t* partial, int64_t chunk_len) {
  using acc_t = typename Red::acc_t;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = o < ix.num_outputs;
  acc_t acc = red.identity();
  int64_t in_off = 0, off0 = 0, off1 = 0;
  if (active) {
    ix.output_offsets(o, in_off, off0, off1);
    const char* base = in + in_off;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk_len;
    const int64_t r1 = min(ix.reduce_size, r0 + chunk_len);
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
      acc = red.step(acc, *reinterpret_cast<const D*>(base + ix.reduce_offset(r)), r);
  }
  if (blockDim.x > 1) {  // fold the row of partials (blockDim.x is a power of two)
    acc_t* row = reinterpret_cast<acc_t*>(smem_raw) + threadIdx.y * blockDim.x;
    row[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) row[threadIdx.x] = red.merge(row[threadIdx.x], row[threadIdx.x + s]);
      __syncthreads();
    }
    acc = row[0];
  }
  if (threadIdx.x != 0 || !active) return;
  if (partial == nullptr) red.write(out0 + off0, out1 + off1, acc, ix.reduce_size);
  else partial[o * gridDim.y + blockIdx.y] = acc;
}

template <typename Red>
__global__ void reduce_chunks_kernel(ReduceIndexing ix, char* out0, char* out1, Red red,
                                     const typename Red::acc_t* partial, int chunks) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < ix.num_outputs; o += step) {
    typename Red::acc_t acc = red.identity();
    for (int c = 0; c < chunks; ++c) acc = red.merge(acc, partial[o * chunks + c]);
    int64_t in_off, off0, off1;
    ix.output_offsets(o, in_off, off0, off1);
    red.write(out0 + off0, out1 + off1, acc, ix.reduce_size);
  }
}

inline int64_t pow2_ceil(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

template <typename Red, typename D>
void run_reduce(const ReduceIndexing& ix, const Tensor& in, char* out0, char* out1, const Red& red,
                const KernelScope& scope) {
  using acc_t = typename Red::acc_t;
  const int64_t O = ix.num_outputs, R = ix.reduce_size;
  if (O == 0) return;
  // Block shape: threads along the reduction (tx) x outputs per block (ty), 256 in all.
  int64_t tx;
  if (ix.inner) tx = std::min<int64_t>(kBlockThreads, pow2_ceil(std::max<int64_t>(R, 1)));
  else tx = kBlockThreads / std::min<int64_t>(kBlockThreads, pow2_ceil(O));  // 1 unless few outputs
  const int64_t ty = kBlockThreads / tx;
  const int64_t blocks_x = (O + ty - 1) / ty;
  // Chunks along the reduction when the outputs alone do not fill the GPU; each thread keeps
  // at least 64 elements of work.
  const int64_t target_blocks = static_cast<int64_t>(backend().multiprocessor_count(scope.device)) * 4;
  int64_t chunks = 1;
  if (blocks_x < target_blocks)
    chunks = std::clamp<int64_t>(std::min((target_blocks + blocks_x - 1) / blocks_x, R / (tx * 64)), 1, 65535);
  const int64_t chunk_len = (R + chunks - 1) / chunks;
  chunks = std::max<int64_t>(1, (R + chunk_len - 1) / std::max<int64_t>(chunk_len, 1));
  PF_CHECK(blocks_x <= INT32_MAX, "reduction with ", O, " outputs is too large for one launch");

  const dim3 block(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  const size_t smem = tx > 1 ? static_cast<size_t>(kBlockThreads) * sizeof(acc_t) : 0;
  const char* in_ptr = static_cast<const char*>(in.data_ptr());
  if (chunks == 1) {
    reduce_kernel<Red, D><<<dim3(static_cast<unsigned>(blocks_x), 1), block, smem, scope.stream>>>(
        ix, in_ptr, out0, out1, red, nullptr, chunk_len);
    PF_CUDA_CHECK_LAUNCH();
    return;
  }
  Workspace partial(scope.device, static_cast<size_t>(O * chunks) * sizeof(acc_t));
  reduce_kernel<Red, D><<<dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(chunks)), block, smem,
                          scope.stream>>>(ix, in_ptr, out0, out1, red, partial.as<acc_t>(), chunk_len);
  PF_CUDA_CHECK_LAUNCH();
  reduce_chunks_kernel<Red><<<scope.blocks_for(O), kBlockThreads, 0, scope.stream>>>(
      ix, out0, out1, red, partial.as<acc_t>(), static_cast<int>(chunks));
  PF_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace plugflow::cuda
