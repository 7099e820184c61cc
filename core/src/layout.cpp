#include "plugflow/layout.h"

#include <array>

#include "plugflow/error.h"

namespace plugflow {

StridedLayout make_layout(std::span<const Tensor* const> operands) {
  PF_CHECK(!operands.empty() && operands.size() <= static_cast<size_t>(kMaxLayoutOperands),
           "make_layout: between 1 and ", kMaxLayoutOperands, " operands, got ", operands.size());
  const Tensor& out = *operands[0];
  const int nops = static_cast<int>(operands.size());
  for (int k = 1; k < nops; ++k)
    PF_CHECK(operands[k]->sizes() == out.sizes(), "make_layout: operand ", k, " has shape ",
             shape_str(operands[k]->sizes()), " but the output has ", shape_str(out.sizes()));

  StridedLayout L;
  L.num_operands = nops;
  L.numel = out.numel();
  for (int k = 0; k < nops; ++k) L.data[k] = static_cast<char*>(operands[k]->data_ptr());

  // Fixed-size scratch: this runs once per elementwise kernel call, so no heap allocation.
  constexpr int kMaxInputDims = 64;
  PF_CHECK(out.dim() <= kMaxInputDims, "tensors with more than ", kMaxInputDims, " dims are not supported");
  // Dims of size 1 never move a pointer: drop them.
  std::array<int, kMaxInputDims> dims;
  int ndims = 0;
  for (int d = 0; d < out.dim(); ++d)
    if (out.sizes()[d] != 1) dims[ndims++] = d;

  // Order dims outermost-first by stride, the output deciding first and the inputs breaking
  // ties (so a transposed output is still written in memory order). Insertion sort: stable,
  // and the comparison is not a strict weak order once stride-0 dims are involved.
  auto inner_than = [&](int a, int b) {  // should dim a go inside dim b?
    for (int k = 0; k < nops; ++k) {
      const int64_t sa = operands[k]->strides()[a], sb = operands[k]->strides()[b];
      if (sa == 0 || sb == 0 || sa == sb) continue;
      return sa < sb;
    }
    return false;
  };
  for (int i = 1; i < ndims; ++i)
    for (int j = i; j > 0 && inner_than(dims[j - 1], dims[j]); --j) std::swap(dims[j - 1], dims[j]);

  // Merge neighbours (outer o, inner i) where every operand has stride[o] == stride[i]*size[i].
  std::array<int64_t, kMaxInputDims> sizes;
  std::array<std::array<int64_t, kMaxInputDims>, kMaxLayoutOperands> strides;
  int n = 0;
  for (int i = 0; i < ndims; ++i) {
    const int d = dims[i];
    const int64_t size = out.sizes()[d];
    if (n > 0) {
      bool merge = true;
      for (int k = 0; k < nops && merge; ++k) merge = strides[k][n - 1] == operands[k]->strides()[d] * size;
      if (merge) {
        sizes[n - 1] *= size;
        for (int k = 0; k < nops; ++k) strides[k][n - 1] = operands[k]->strides()[d];
        continue;
      }
    }
    sizes[n] = size;
    for (int k = 0; k < nops; ++k) strides[k][n] = operands[k]->strides()[d];
    ++n;
  }
  PF_CHECK(n <= kMaxLayoutDims, "tensor iteration needs ", n, " dims after merging; at most ", kMaxLayoutDims,
           " are supported");
  L.ndim = n;
  for (int d = 0; d < L.ndim; ++d) {
    L.sizes[d] = sizes[d];
    for (int k = 0; k < nops; ++k)
      L.byte_strides[k][d] = strides[k][d] * static_cast<int64_t>(operands[k]->itemsize());
  }
  return L;
}

}  // namespace plugflow
