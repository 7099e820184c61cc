// The indexing family's meta functions and catalog entries (core/opdefs/indexing.yaml;
// docs/kernels.md, "Indexing family"). Four kernels carry the whole family: `index` (gather,
// index_select, take, t[idx]), `index_put` (scatter, scatter_add, index_add, t[idx] = v),
// `where` (where, masked_fill) and `nonzero` (nonzero, masked_select, boolean masks). The
// functional layer (indexing.cpp) restrides its operands so that each kernel is one elementwise
// walk over the iteration shape.
#include <string>

#include "opdefs.h"
#include "plugflow/op.h"

namespace plugflow {
namespace {

// Attributes shared by index and index_put: one entry per index tensor.
void check_index_attrs(std::span<const Tensor> idx, const Attrs& attrs, const char* op) {
  const auto& sizes = attrs.get<Shape>("sizes");
  const auto& strides = attrs.get<Shape>("strides");
  const auto& dims = attrs.get<Shape>("dims");
  attrs.get<bool>("wrap");
  PF_CHECK(!idx.empty(), op, ": expected at least one index tensor");
  PF_CHECK(sizes.size() == idx.size() && strides.size() == idx.size() && dims.size() == idx.size(), op,
           ": attributes sizes, strides and dims need one entry per index tensor (", idx.size(), ")");
  for (const Tensor& t : idx)
    PF_CHECK_T(t.dtype() == DType::Int64, TypeError, op, ": index tensors must be int64, got ", dtype_name(t.dtype()));
}

void check_same_shape(std::span<const Tensor> in, const char* op) {
  for (size_t i = 1; i < in.size(); ++i)
    PF_CHECK(in[i].sizes() == in[0].sizes(), op, ": operands must have the iteration shape ", shape_str(in[0].sizes()),
             " (restride/broadcast first), got ", shape_str(in[i].sizes()));
}

// index(src, idx...): out has src's (restrided) shape and dtype.
std::vector<TensorMeta> index_meta(std::span<const Tensor> in, const Attrs& attrs) {
  PF_CHECK(in.size() >= 2, "index: expected src and at least one index tensor");
  check_same_shape(in, "index");
  check_index_attrs(in.subspan(1), attrs, "index");
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}};
}

// index_put(values, idx...) -> dst (caller's restrided view): dst has values' shape and dtype.
std::vector<TensorMeta> index_put_meta(std::span<const Tensor> in, const Attrs& attrs) {
  PF_CHECK(in.size() >= 2, "index_put: expected values and at least one index tensor");
  check_same_shape(in, "index_put");
  check_index_attrs(in.subspan(1), attrs, "index_put");
  attrs.get<bool>("accumulate");
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}};
}

// where(self, other, condition): condition last so that the key dtype is the values' dtype.
std::vector<TensorMeta> where_meta(std::span<const Tensor> in, const Attrs&) {
  PF_CHECK(in.size() == 3, "where: expected self, other and condition");
  check_same_shape(in, "where");
  PF_CHECK_T(in[0].dtype() == in[1].dtype(), TypeError, "where: self and other must have one dtype (promote first), got ",
             dtype_name(in[0].dtype()), " and ", dtype_name(in[1].dtype()));
  PF_CHECK_T(in[2].dtype() == DType::Bool, TypeError, "where: condition must be bool, got ", dtype_name(in[2].dtype()));
  const Tensor in_torch_order[] = {in[2], in[0], in[1]};  // where(condition, self, other)
  return {{in[0].sizes(), in[0].dtype(), in[0].device(), result_memory_format(in_torch_order)}};
}

// nonzero(self) -> out: the caller counts the non-zeros and allocates out (n, ndim) int64.
std::vector<TensorMeta> nonzero_meta(std::span<const Tensor> in, const Attrs&) {
  PF_CHECK(in.size() == 1, "nonzero: expected one input");
  return {};
}

// The catalog entries of core/opdefs/indexing.yaml, with the meta functions above.
const bool kIndexingRegistered = [] {
#define PF_X(name, signature, meta, mutated) register_op(name, signature, meta, {PF_OPDEFS_UNPAREN mutated});
  PF_OPDEFS_INDEXING(PF_X)
#undef PF_X
  return true;
}();

}  // namespace
}  // namespace plugflow
