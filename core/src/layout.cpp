#include "plugflow/layout.h"

#include <vector>

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

  // Dims of size 1 never move a pointer: drop them.
  std::vector<int> dims;
  for (int d = 0; d < out.dim(); ++d)
    if (out.sizes()[d] != 1) dims.push_back(d);

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
  for (size_t i = 1; i < dims.size(); ++i) {
    // Walking from the innermost position outward: move dims[i] outward past inner dims.
    for (size_t j = i; j > 0 && inner_than(dims[j - 1], dims[j]); --j) std::swap(dims[j - 1], dims[j]);
  }

  // Merge neighbours (outer o, inner i) where every operand has stride[o] == stride[i]*size[i].
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides(nops);
  for (int d : dims) {
    const int64_t size = out.sizes()[d];
    if (!sizes.empty()) {
      bool merge = true;
      const size_t last = sizes.size() - 1;
      // `d` is inside the previous entry: previous (outer) must equal d's stride * d's size.
      for (int k = 0; k < nops && merge; ++k)
        merge = strides[k][last] == operands[k]->strides()[d] * size;
      if (merge) {
        sizes[last] *= size;
        for (int k = 0; k < nops; ++k) strides[k][last] = operands[k]->strides()[d];
        continue;
      }
    }
    sizes.push_back(size);
    for (int k = 0; k < nops; ++k) strides[k].push_back(operands[k]->strides()[d]);
  }
  PF_CHECK(sizes.size() <= static_cast<size_t>(kMaxLayoutDims), "tensor iteration needs ", sizes.size(),
           " dims after merging; at most ", kMaxLayoutDims, " are supported");
  L.ndim = static_cast<int>(sizes.size());
  for (int d = 0; d < L.ndim; ++d) {
    L.sizes[d] = sizes[d];
    for (int k = 0; k < nops; ++k)
      L.byte_strides[k][d] = strides[k][d] * static_cast<int64_t>(operands[k]->itemsize());
  }
  return L;
}

}  // namespace plugflow
