// Iteration layout for elementwise kernels on any device: operands of one shape (the
// output first, broadcast inputs as stride-0 views), their dims reordered to the output's
// memory order and merged where every operand allows, strides in bytes. A kernel then walks
// `ndim` dims, innermost last.
#pragma once
#include <array>
#include <cstdint>
#include <span>

#include "plugflow/export.h"
#include "plugflow/tensor.h"

namespace plugflow {

inline constexpr int kMaxLayoutDims = 16;
inline constexpr int kMaxLayoutOperands = 8;

struct StridedLayout {
  int ndim = 0;         // 0 for a single element
  int num_operands = 0;
  int64_t numel = 0;
  std::array<int64_t, kMaxLayoutDims> sizes{};                                      // innermost last
  std::array<std::array<int64_t, kMaxLayoutDims>, kMaxLayoutOperands> byte_strides{};  // [operand][dim]
  std::array<char*, kMaxLayoutOperands> data{};  // base pointers (operand's data_ptr)

  // True when every operand's innermost dim has stride == its itemsize (or 0 for a broadcast
  // scalar), i.e. the inner loop is a plain vector loop.
  bool inner_contiguous(int operand, size_t itemsize) const {
    return ndim == 0 || byte_strides[operand][ndim - 1] == static_cast<int64_t>(itemsize);
  }
};

// All operands must have the same sizes. The output (operand 0) decides the dim order.
PF_API StridedLayout make_layout(std::span<const Tensor* const> operands);
inline StridedLayout make_layout(std::initializer_list<const Tensor*> operands) {
  return make_layout(std::span<const Tensor* const>(operands.begin(), operands.size()));
}

// Calls f(ptrs, n) for each innermost run: ptrs[k] points at operand k's first element of
// the run, the run has n elements spaced by byte_strides[k][ndim-1].
template <typename F>
void for_each_run(const StridedLayout& L, int64_t begin_run, int64_t end_run, F&& f) {
  // A "run" is one innermost row; rows are numbered in row-major order over dims [0, ndim-1).
  std::array<char*, kMaxLayoutOperands> ptrs;
  if (L.ndim == 0) {
    for (int k = 0; k < L.num_operands; ++k) ptrs[k] = L.data[k];
    if (begin_run == 0 && end_run > 0) f(ptrs.data(), int64_t{1});
    return;
  }
  const int outer = L.ndim - 1;
  std::array<int64_t, kMaxLayoutDims> idx{};
  int64_t r = begin_run;
  for (int d = outer - 1; d >= 0; --d) {
    idx[d] = r % L.sizes[d];
    r /= L.sizes[d];
  }
  for (int64_t run = begin_run; run < end_run; ++run) {
    for (int k = 0; k < L.num_operands; ++k) {
      char* p = L.data[k];
      for (int d = 0; d < outer; ++d) p += idx[d] * L.byte_strides[k][d];
      ptrs[k] = p;
    }
    f(ptrs.data(), L.sizes[L.ndim - 1]);
    for (int d = outer - 1; d >= 0; --d) {
      if (++idx[d] < L.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

inline int64_t num_runs(const StridedLayout& L) {
  if (L.ndim == 0) return 1;
  return L.sizes[L.ndim - 1] == 0 ? 0 : L.numel / L.sizes[L.ndim - 1];
}

}  // namespace plugflow
