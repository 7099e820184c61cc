// The op catalog: every op's signature and meta function, registered when the core loads.
// Meta functions check the contract of docs/kernels.md; user-facing argument checks happen
// earlier, in the functional layer, where the user's own words (dims, shapes) are known.
#include <string>

#include "linalg_meta.h"
#include "op_tables.h"
#include "plugflow/op.h"

namespace plugflow {
namespace {

void check_same_inputs(std::span<const Tensor> in, const char* what) {
  for (size_t i = 1; i < in.size(); ++i) {
    PF_CHECK(in[i].sizes() == in[0].sizes(), what, ": inputs must have one shape (broadcast first), got ",
             shape_str(in[0].sizes()), " and ", shape_str(in[i].sizes()));
    PF_CHECK_T(in[i].dtype() == in[0].dtype(), TypeError, what, ": inputs must have one dtype (promote first), got ",
               dtype_name(in[0].dtype()), " and ", dtype_name(in[i].dtype()));
  }
}

std::vector<TensorMeta> same_as_input(std::span<const Tensor> in, const Attrs&) {
  check_same_inputs(in, "elementwise op");
  return {{in[0].sizes(), in[0].dtype(), in[0].device(), result_memory_format(in)}};
}

std::vector<TensorMeta> bool_output(std::span<const Tensor> in, const Attrs&) {
  check_same_inputs(in, "elementwise op");
  return {{in[0].sizes(), DType::Bool, in[0].device(), result_memory_format(in)}};
}

// Ops that write into caller-provided outputs (fill, copy, arange, random): the functional
// layer allocates and checks the outputs; an empty result tells call_op_out to accept them.
std::vector<TensorMeta> caller_outputs(std::span<const Tensor>, const Attrs&) { return {}; }

Shape reduced_shape(const Tensor& in, const Shape& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < in.dim(); ++d) {
    bool reduced = false;
    for (int64_t r : dims) reduced = reduced || r == d;
    if (!reduced) out.push_back(in.sizes()[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

void check_dims(const Tensor& in, const Shape& dims) {
  PF_CHECK(!dims.empty(), "reduction: dims must be non-empty (the functional layer expands 'all dims')");
  for (size_t i = 0; i < dims.size(); ++i) {
    PF_CHECK_T(dims[i] >= 0 && dims[i] < in.dim(), IndexError, "reduction dim ", dims[i], " out of range for ",
               in.dim(), "-d input");
    PF_CHECK(i == 0 || dims[i] > dims[i - 1], "reduction dims must be sorted and unique");
  }
}

std::vector<TensorMeta> reduce_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const auto& dims = attrs.get<Shape>("dims");
  check_dims(in[0], dims);
  return {{reduced_shape(in[0], dims, attrs.get<bool>("keepdim")), in[0].dtype(), in[0].device()}};
}

// all / any (the logical reductions): any input; bool output, uint8 for a uint8 input (PyTorch 1.13's).
std::vector<TensorMeta> logical_reduce_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const auto& dims = attrs.get<Shape>("dims");
  check_dims(in[0], dims);
  const DType out = in[0].dtype() == DType::UInt8 ? DType::UInt8 : DType::Bool;
  return {{reduced_shape(in[0], dims, attrs.get<bool>("keepdim")), out, in[0].device()}};
}

// The reductions to the extreme's index over one dim (core/opdefs/indexed.yaml): values in the
// input's dtype and int64 indices (N = 2), or the indices alone (N = 1).
template <size_t N>
std::vector<TensorMeta> indexed_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Shape dims{attrs.get<int64_t>("dim")};
  check_dims(in[0], dims);
  const Shape out = reduced_shape(in[0], dims, attrs.get<bool>("keepdim"));
  std::vector<TensorMeta> metas;
  if constexpr (N == 2) metas.push_back({out, in[0].dtype(), in[0].device()});
  metas.push_back({out, DType::Int64, in[0].device()});
  return metas;
}

std::vector<TensorMeta> mm_meta(std::span<const Tensor> in, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  PF_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D tensors, got ", a.dim(), "-D and ", b.dim(), "-D");
  PF_CHECK(a.sizes()[1] == b.sizes()[0], "mat1 and mat2 shapes cannot be multiplied (", a.sizes()[0], "x",
           a.sizes()[1], " and ", b.sizes()[0], "x", b.sizes()[1], ")");
  PF_CHECK(a.dtype() == b.dtype(), "expected mat1 and mat2 to have the same dtype, but got: ", dtype_name(a.dtype()),
           " != ", dtype_name(b.dtype()));
  return {{{a.sizes()[0], b.sizes()[1]}, a.dtype(), a.device()}};
}

std::vector<TensorMeta> bmm_meta(std::span<const Tensor> in, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  PF_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got ", a.dim(), "-D and ", b.dim(), "-D");
  PF_CHECK(a.sizes()[0] == b.sizes()[0], "bmm: batch sizes differ: ", a.sizes()[0], " and ", b.sizes()[0]);
  PF_CHECK(a.sizes()[2] == b.sizes()[1], "bmm: shapes cannot be multiplied (", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()), ")");
  PF_CHECK(a.dtype() == b.dtype(), "expected batch1 and batch2 to have the same dtype, but got: ",
           dtype_name(a.dtype()), " != ", dtype_name(b.dtype()));
  return {{{a.sizes()[0], a.sizes()[1], b.sizes()[2]}, a.dtype(), a.device()}};
}

const bool kCatalogRegistered = [] {
  using internal::BinaryKind;
  using internal::UnaryKind;
  // core/opdefs/creation.yaml, random.yaml and linalg.yaml (whose lstsq and norm metas live with
  // their ops, linalg_meta.h).
  using internal::lstsq_meta;
  using internal::norm_meta;
  using internal::linalg_solve_meta, internal::linalg_solve_triangular_meta, internal::linalg_cholesky_meta,
      internal::linalg_slogdet_meta,
      internal::linalg_qr_meta, internal::linalg_svd_meta, internal::linalg_eigh_meta;
#define PF_X(name, signature, meta, mutated) register_op(name, signature, meta, {PF_OPDEFS_UNPAREN mutated});
  PF_OPDEFS_CREATION(PF_X)
  PF_OPDEFS_RANDOM(PF_X)
  PF_OPDEFS_LINALG(PF_X)
#undef PF_X

  for (const auto& b : internal::kBinaryOps)
    register_op(std::string(b.name), std::string(b.signature),
                b.kind == BinaryKind::Arithmetic ? same_as_input : bool_output);
  for (const auto& u : internal::kUnaryOps)
    register_op(std::string(u.name), std::string(u.signature), u.kind == UnaryKind::BoolOut ? bool_output : same_as_input);
  for (const auto& act : internal::kParamActivations)
    register_op(std::string(act.name), std::string(act.signature), same_as_input);
  for (const auto& r : internal::kReductions)
    register_op(std::string(r.name), std::string(r.signature),
                r.dtype == internal::ReduceDtype::Logical ? logical_reduce_meta : reduce_meta);
#define PF_X(name, Camel, dtypes, n_outputs, torch_name, dim_optional, sig) register_op(name, sig, indexed_meta<n_outputs>);
  PF_OPDEFS_INDEXED(PF_X)
#undef PF_X
  return true;
}();

}  // namespace
}  // namespace plugflow
