// Index -> byte-offset calculators for strided operands, shared by the device kernels and the
// host (the offsets are tested on the CPU, tests/cpp/cuda/indexing_test.cpp). Built on the
// host from a StridedLayout (elementwise) or from a reduction's input and outputs.
#pragma once
#include <climits>
#include <cstdint>
#include <vector>

#include "plugflow/layout.h"
#include "plugflow/philox.h"  // PF_HOST_DEVICE
#include "plugflow/tensor.h"

namespace plugflow::cuda {

// Offsets of N operands that share one iteration shape (dims innermost last).
template <int N>
struct ElementwiseOffsets {
  int ndim = 0;
  int64_t sizes[kMaxLayoutDims] = {};
  int64_t strides[kMaxLayoutDims][N] = {};  // bytes

  static ElementwiseOffsets from_layout(const StridedLayout& L) {
    ElementwiseOffsets c;
    c.ndim = L.ndim;
    for (int d = 0; d < L.ndim; ++d) {
      c.sizes[d] = L.sizes[d];
      for (int k = 0; k < N; ++k) c.strides[d][k] = L.byte_strides[k][d];
    }
    return c;
  }

  // Byte offsets of element `linear` (row-major over sizes). index_t is uint32_t when the
  // iteration space fits, which makes the divisions much cheaper on the GPU.
  template <typename index_t>
  PF_HOST_DEVICE void get(index_t linear, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < kMaxLayoutDims; ++i) {
      const int d = ndim - 1 - i;
      if (d < 0) break;
      const index_t size = static_cast<index_t>(sizes[d]);
      const index_t q = linear / size;
      const int64_t idx = static_cast<int64_t>(linear - q * size);
      linear = q;
      for (int k = 0; k < N; ++k) off[k] += idx * strides[d][k];
    }
  }
};

// Calls fn(sub-layout) for pieces of L whose element counts fit in 32 bits, splitting the
// outermost dim in halves (sub-layouts only move base pointers), as PyTorch's
// TensorIterator::with_32bit_indexing does. The N-d kernel then divides in 32 bits.
template <typename Fn>
void for_each_32bit_piece(const StridedLayout& L, const Fn& fn) {
  if (L.numel <= static_cast<int64_t>(INT32_MAX)) {
    fn(L);
    return;
  }
  int d = 0;  // the outermost dim that can still be split
  while (d < L.ndim && L.sizes[d] == 1) ++d;
  StridedLayout lo = L, hi = L;
  const int64_t half = L.sizes[d] / 2;
  lo.sizes[d] = half;
  hi.sizes[d] = L.sizes[d] - half;
  lo.numel = L.numel / L.sizes[d] * lo.sizes[d];
  hi.numel = L.numel - lo.numel;
  for (int k = 0; k < L.num_operands; ++k) hi.data[k] = L.data[k] + half * L.byte_strides[k][d];
  for_each_32bit_piece(lo, fn);
  for_each_32bit_piece(hi, fn);
}

// A reduction seen as num_outputs independent reductions of reduce_size elements each.
// Output o's elements are at in + input_offset(o) + reduce_offset(r), r in [0, reduce_size).
// For a reduction over one dim (max_dim, argmax), r is the index along that dim.
struct ReduceIndexing {
  int out_ndim = 0;  // kept (non-reduced) dims, coalesced, innermost last
  int64_t out_sizes[kMaxLayoutDims] = {};
  int64_t out_in_strides[kMaxLayoutDims] = {};   // bytes in the input
  int64_t out_strides[2][kMaxLayoutDims] = {};   // bytes in output 0 (values) and 1 (indices)
  int red_ndim = 0;  // reduced dims, coalesced, innermost (smallest input stride) last
  int64_t red_sizes[kMaxLayoutDims] = {};
  int64_t red_strides[kMaxLayoutDims] = {};  // bytes in the input
  int64_t num_outputs = 1;
  int64_t reduce_size = 1;
  // True when the reduced elements of one output are closer together in memory than
  // neighbouring outputs are: then threads of a block share one output (coalesced reads),
  // otherwise each thread owns an output and neighbouring threads read neighbouring memory.
  bool inner = false;

  PF_HOST_DEVICE void output_offsets(int64_t o, int64_t& in_off, int64_t& out0, int64_t& out1) const {
    in_off = out0 = out1 = 0;
    for (int d = out_ndim - 1; d >= 0; --d) {
      const int64_t idx = o % out_sizes[d];
      o /= out_sizes[d];
      in_off += idx * out_in_strides[d];
      out0 += idx * out_strides[0][d];
      out1 += idx * out_strides[1][d];
    }
  }
  PF_HOST_DEVICE int64_t reduce_offset(int64_t r) const {
    if (red_ndim == 1) return r * red_strides[0];  // the common case: no division
    int64_t off = 0;
    for (int d = red_ndim - 1; d >= 0; --d) {
      off += (r % red_sizes[d]) * red_strides[d];
      r /= red_sizes[d];
    }
    return off;
  }
};

// `dims`: the reduced dims of `in` (sorted, unique, in range; empty for a 0-d input).
// Outputs have the reduced shape, with the reduced dims kept as size 1 (keepdim) or removed;
// they may have any strides. `indices` may be null.
ReduceIndexing make_reduce_indexing(const Tensor& in, const std::vector<int64_t>& dims, bool keepdim,
                                    const Tensor& values, const Tensor* indices);

}  // namespace plugflow::cuda
