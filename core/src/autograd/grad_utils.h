// Core-internal helpers for backward formulas.
#pragma once
#include <string>
#include <vector>

#include "plugflow/autograd.h"
#include "plugflow/ops.h"

namespace plugflow::autograd {

// Sums `g` down to `shape` (undoing broadcasting): leading dims are summed away, dims where
// shape has 1 are summed with keepdim.
inline Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.sizes() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  Shape dims;
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] == 1 && g.sizes()[lead + i] != 1) dims.push_back(lead + static_cast<int64_t>(i));
  Tensor r = dims.empty() ? g : ops::reduce("sum", g, dims, true);
  return lead > 0 || r.sizes() != shape ? ops::reshape(r, shape) : r;
}

// A 0/1 tensor of `dtype` from a bool tensor.
inline Tensor mask_as(const Tensor& cond, DType dtype) { return ops::to(cond, std::nullopt, dtype); }

inline Tensor mul(const Tensor& a, const Tensor& b) { return ops::binary("mul", a, b); }
inline Tensor mul(const Tensor& a, Scalar b) { return ops::binary("mul", a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return ops::binary("div", a, b); }
inline Tensor neg(const Tensor& a) { return ops::unary("neg", a); }

// In-place writes into a tensor where several elements share one memory location (a
// broadcast/expanded view) would be order-dependent: PyTorch refuses them (its
// has_internal_overlap: a dim of stride 0 and size > 1). fill_ and zero_ are exempt, and so is
// an empty tensor (numpy gives size-0 arrays zero strides).
inline void check_no_internal_overlap(const Tensor& t) {
  if (t.numel() == 0) return;
  for (int64_t d = 0; d < t.dim(); ++d)
    PF_CHECK(!(t.strides()[d] == 0 && t.sizes()[d] > 1),
             "unsupported operation: more than one element of the written-to tensor refers to a single memory "
             "location. Please clone() the tensor before performing the operation.");
}

// The gradients of a @ b (matrices) for a and for b, PyTorch's mm_mat1_backward /
// mm_mat2_backward: an operand stored column-major (a transposed row-major matrix, as
// nn.Linear's weight.t()) gets its gradient column-major too, (b @ g^T)^T / (g^T @ a)^T, so the
// weight's gradient arrives in the parameter's own row-major layout with no transposing copy.
inline bool column_major(const Tensor& m) { return m.strides()[0] == 1 && m.strides()[1] == m.sizes()[0]; }
inline Tensor mm_grad_a(const Tensor& g, const Tensor& b, bool a_column_major) {
  return a_column_major ? ops::transpose(ops::mm(b, ops::transpose(g, 0, 1)), 0, 1) : ops::mm(g, ops::transpose(b, 0, 1));
}
inline Tensor mm_grad_b(const Tensor& g, const Tensor& a, bool b_column_major) {
  return b_column_major ? ops::transpose(ops::mm(ops::transpose(g, 0, 1), a), 0, 1) : ops::mm(ops::transpose(a, 0, 1), g);
}

// Records `node` for an op with these inputs/outputs when any input requires grad.
inline bool should_record(const std::vector<Tensor>& inputs) { return any_requires_grad(inputs); }

}  // namespace plugflow::autograd
