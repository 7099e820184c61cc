// Ops that work on 1-d lines along one dim (cumsum, softmax, sort, topk): the line bases come
// from the reduction indexing (the line's dim is the "reduced" one, kept in the outputs), the
// step along the line from the dim's strides.
#pragma once
#include <cstdint>

#include "indexing.h"
#include "plugflow/tensor.h"

namespace plugflow::cuda {

struct Lines {
  ReduceIndexing ix;           // ix.output_offsets(line, in, out0, out1): byte offsets of a line's start
  int64_t n = 0;               // elements per line in the input
  int64_t num_lines = 0;
  int64_t in_step = 0;         // byte stride along the line: input, output 0, output 1
  int64_t out0_step = 0;
  int64_t out1_step = 0;
  bool inner = false;          // the line is closer together in memory than neighbouring lines
};

// Lines of `in` along `dim`; the outputs have in's shape except (possibly) the size at dim.
inline Lines make_lines(const Tensor& in, int64_t dim, const Tensor& out0, const Tensor* out1) {
  PF_CHECK_T(dim >= 0 && dim < in.dim(), IndexError, "dim ", dim, " out of range for a ", in.dim(), "-d input");
  PF_CHECK(out0.dim() == in.dim() && (out1 == nullptr || out1->dim() == in.dim()),
           "line op: outputs must have the input's number of dims");
  Lines L;
  L.ix = make_reduce_indexing(in, {dim}, /*keepdim=*/true, out0, out1);
  L.n = in.sizes()[static_cast<size_t>(dim)];
  L.num_lines = L.ix.num_outputs;
  L.in_step = in.strides()[static_cast<size_t>(dim)] * static_cast<int64_t>(in.itemsize());
  L.out0_step = out0.strides()[static_cast<size_t>(dim)] * static_cast<int64_t>(out0.itemsize());
  L.out1_step = out1 ? out1->strides()[static_cast<size_t>(dim)] * static_cast<int64_t>(out1->itemsize()) : 0;
  L.inner = L.ix.inner;
  return L;
}

}  // namespace plugflow::cuda
