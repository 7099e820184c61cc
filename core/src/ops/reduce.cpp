// Reductions: dims normalized and dtypes decided here; kernels see sorted unique dims. The
// reductions over dims (sum, prod, mean, amax, amin, all, any) are defined in
// core/opdefs/reductions.yaml, those to the extreme's index over one dim (max_dim, argmax, ...)
// in core/opdefs/indexed.yaml.
#include <algorithm>
#include <limits>
#include <string_view>
#include <unordered_map>

#include "../autograd/grad_utils.h"
#include "op_tables.h"
#include "opdefs_derivatives.inc"
#include "plugflow/autocast.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace plugflow::ops {
namespace {

// Sorted unique non-negative dims; empty `dims` means all of them.
Shape normalize_dims(const Tensor& a, const Shape& dims) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < a.dim(); ++d) out.push_back(d);
    return out;
  }
  std::vector<bool> seen(std::max<int64_t>(a.dim(), 1), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, a.dim());
    PF_CHECK(!seen[w], "dim ", w, " appears multiple times in the list of dims");
    seen[w] = true;
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Shape reduced_shape(const Tensor& a, const Shape& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < a.dim(); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced) out.push_back(a.sizes()[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

bool reduces_over_empty(const Tensor& a, const Shape& dims) {
  for (int64_t d : dims)
    if (a.sizes()[d] == 0) return true;
  return false;
}

// The reduced gradient broadcast back over the input's shape.
Tensor expand_back(const Tensor& g, const Shape& in_shape, const Shape& dims, bool keepdim) {
  Tensor r = g;
  if (!keepdim)
    for (int64_t d : dims) r = unsqueeze(r, d);  // ascending, so positions line up
  return expand(r, in_shape);
}

using Tensors = std::vector<Tensor>;

// PyTorch's prod_safe_zeros_backward along dim: each element's gradient is the product of the
// others, as the product of the elements before it times that of the elements after it.
Tensor prod_others(const Tensor& a, int64_t dim) {
  if (a.numel() == 0) return a;
  Shape ones_shape = a.sizes();
  ones_shape[dim] = 1;
  const Tensor ones_slice = ones(ones_shape, a.dtype(), a.device());
  const int64_t n = a.sizes()[dim];
  const Tensor before = cumprod(cat({ones_slice, narrow(a, dim, 0, n - 1)}, dim), dim);
  const Tensor after = flip(cumprod(cat({ones_slice, flip(narrow(a, dim, 1, n - 1), {dim})}, dim), dim), {dim});
  return binary("mul", before, after);
}

// What a reduction's backward reads besides the gradient and the saved tensors. `all_dims`: the
// user reduced everything (no dim argument).
struct ReduceArgs {
  Shape shape, dims;
  bool keepdim, all_dims;
};

// ---- the backwards named by the definitions (core/opdefs/reductions.yaml, `derivative:`) -------

Tensor sum_backward(const Tensor& g, const Tensor&, const Tensor&, const ReduceArgs& r) {
  return expand_back(g, r.shape, r.dims, r.keepdim);
}

// The gradient skips the NaN inputs (PyTorch's grad * self.isnan().logical_not()).
Tensor nansum_backward(const Tensor& g, const Tensor& a, const Tensor&, const ReduceArgs& r) {
  const Tensor counted = autograd::mask_as(unary("logical_not", unary("isnan", a)), g.dtype());
  return binary("mul", expand_back(g, r.shape, r.dims, r.keepdim), counted);
}

Tensor mean_backward(const Tensor& g, const Tensor&, const Tensor&, const ReduceArgs& r) {
  int64_t n = 1;
  for (int64_t d : r.dims) n *= r.shape[d];
  return binary("div", expand_back(g, r.shape, r.dims, r.keepdim), Scalar(n));
}

// PyTorch's prod_backward: grad * prod / x without a zero; with zeros, the products of the
// others (zeros everywhere for a full reduction with two zeros or more, outside double
// backward), so a NaN or infinity elsewhere propagates exactly as in PyTorch.
Tensor prod_backward(const Tensor& g, const Tensor& a, const Tensor& out, const ReduceArgs& r) {
  if (a.dim() == 0) return g;
  const Shape& shape = a.sizes();
  const Tensor ge = expand_back(g, shape, r.dims, r.keepdim);
  const int64_t zeros_count = item(reduce("sum", binary("eq", a, Scalar(int64_t{0})), {}, false)).to_int();
  if (zeros_count == 0)
    return binary("mul", ge,
                  binary("div", expand(r.keepdim ? out : expand_back(out, shape, r.dims, false), shape), a));
  if (r.all_dims) {
    if (zeros_count > 1 && !autograd::is_grad_enabled()) return zeros(shape, a.dtype(), a.device());
    return binary("mul", ge, reshape(prod_others(reshape(a, {-1}), 0), shape));
  }
  return binary("mul", ge, prod_others(a, r.dims[0]));
}

// amax / amin: the gradient is shared evenly by the elements equal to the extreme.
Tensor extreme_backward(const Tensor& g, const Tensor& a, const Tensor& out, const ReduceArgs& r) {
  const Tensor hit = autograd::mask_as(binary("eq", a, expand_back(out, r.shape, r.dims, r.keepdim)), a.dtype());
  const Tensor count = reduce("sum", hit, r.dims, true);
  return binary("div", autograd::mul(expand_back(g, r.shape, r.dims, r.keepdim), hit), expand(count, r.shape));
}

struct ReductionGrad {
  Tensor (*fn)(const Tensor& g, const Tensor& self, const Tensor& result, const ReduceArgs& r);
  const char* needs;      // subset of "ao": the input, the output (only those are saved)
  const char* full_node;  // PyTorch's node names: reduced over every dim, over `dims`
  const char* dims_node;
};

const std::unordered_map<std::string, ReductionGrad>& reduction_grads() {
  static const std::unordered_map<std::string, ReductionGrad> table = {PF_OPDEFS_REDUCTION_DERIVATIVES};
  return table;
}

bool needs(const char* list, char what) { return std::string_view(list).find(what) != std::string_view::npos; }

void record_reduce(const std::string& name, const Tensor& in, const Tensor& out, const Shape& dims, bool keepdim,
                   bool all_dims) {
  if (!is_floating(out.dtype()) || !autograd::any_requires_grad({&in})) return;
  auto it = reduction_grads().find(name);
  PF_CHECK_T(it != reduction_grads().end(), NotImplementedError, "the derivative for '", name,
             "' is not implemented.");
  const ReductionGrad& spec = it->second;
  auto node = autograd::make_node(all_dims ? spec.full_node : spec.dims_node,
                                  [fn = spec.fn, args = ReduceArgs{in.sizes(), dims, keepdim, all_dims}](
                                      const Tensors& g, const Tensors& s) -> Tensors {
                                    return {fn(g[0], s[0], s[1], args)};
                                  });
  node->reserve_saved(2);
  node->save(needs(spec.needs, 'a') ? in : Tensor());
  node->save_output(needs(spec.needs, 'o') ? out : Tensor(), 0);
  autograd::record(node, {in}, {out});
}

// ---- the reductions to the extreme's index over one dim (core/opdefs/indexed.yaml) ---------------

// What their backward reads besides the gradient and the saved tensors.
struct IndexedArgs {
  Shape shape;  // the input's (at least 1-d)
  int64_t dim;  // wrapped
  bool keepdim;
};

// max_dim / min_dim: the gradient goes to the picked element, a one-hot mask along dim times it.
// outs: the saved outputs (values, indices).
Tensor value_index_backward(const Tensor& g, const Tensor&, const Tensors& outs, const IndexedArgs& r) {
  const Tensor& idx = outs[1];
  const Tensor idx_k = r.keepdim ? idx : unsqueeze(idx, r.dim);
  Shape pos_shape(r.shape.size(), 1);
  pos_shape[r.dim] = r.shape[r.dim];
  const Tensor pos = reshape(
      arange(Scalar(int64_t{0}), Scalar(r.shape[r.dim]), Scalar(int64_t{1}), DType::Int64, idx.device()), pos_shape);
  const Tensor onehot = autograd::mask_as(binary("eq", expand(pos, r.shape), expand(idx_k, r.shape)), g.dtype());
  const Tensor gk = r.keepdim ? g : unsqueeze(g, r.dim);
  return autograd::mul(expand(gk, r.shape), onehot);
}

struct IndexedGrad {
  Tensor (*fn)(const Tensor& g, const Tensor& self, const Tensors& outs, const IndexedArgs& r);
  const char* needs;  // the saved tensors: 'a' the input, a digit an output's index
  const char* node;   // PyTorch's node name (its function's: MaxBackward0)
};

const std::unordered_map<std::string_view, IndexedGrad>& indexed_grads() {
  static const std::unordered_map<std::string_view, IndexedGrad> table = {PF_OPDEFS_INDEXED_DERIVATIVES};
  return table;
}

void record_indexed(const std::string& name, const Tensor& in, const std::vector<Tensor>& outs, int64_t dim,
                    bool keepdim) {
  if (!is_floating(outs[0].dtype()) || !autograd::any_requires_grad({&in})) return;  // (indices alone: int64)
  const auto it = indexed_grads().find(name);
  PF_CHECK_T(it != indexed_grads().end(), NotImplementedError, "the derivative for '", name, "' is not implemented.");
  const IndexedGrad spec = it->second;
  auto node = autograd::make_node(spec.node, [spec, args = IndexedArgs{in.sizes(), dim, keepdim}](
                                                 const Tensors& g, const Tensors& s) -> Tensors {
    return {spec.fn(g[0], s[0], Tensors(s.begin() + 1, s.end()), args)};
  });
  const std::string_view needs = spec.needs;
  node->reserve_saved(1 + outs.size());
  node->save(needs.find('a') != std::string_view::npos ? in : Tensor());
  for (size_t i = 0; i < outs.size(); ++i)
    node->save_output(needs.find(static_cast<char>('0' + i)) != std::string_view::npos ? outs[i] : Tensor(),
                      static_cast<uint32_t>(i));
  const Tensor recorded_in[] = {in};
  autograd::record(node, recorded_in, outs);
}

struct IndexedInfo {
  const char* torch_name;  // the PyTorch function, for errors
  bool dim_optional;       // no dim: over the flattened input
};

const std::unordered_map<std::string_view, IndexedInfo>& indexed_ops() {
  static const std::unordered_map<std::string_view, IndexedInfo> table = {
#define PF_X(name, Camel, dtypes, n_outputs, torch_name, dim_optional, sig) {name, {torch_name, dim_optional}},
      PF_OPDEFS_INDEXED(PF_X)
#undef PF_X
  };
  return table;
}

}  // namespace

Tensor reduce(const std::string& name, const Tensor& a_in, const Shape& dims_in, bool keepdim,
              std::optional<DType> dtype) {
  if (autocast::active() && !dtype) [[unlikely]]
    if (autocast::OpScope cast{name, {a_in}}) return reduce(name, cast[0], dims_in, keepdim, dtype);
  const internal::ReductionInfo* info = internal::find_reduction(name);
  PF_CHECK_T(info != nullptr, ValueError, "unknown reduction '", name, "'");
  // A 0-d tensor reduces like a 1-element 1-d one, then drops the dim again.
  const Tensor a = a_in.dim() == 0 ? reshape(a_in, {1}) : a_in;
  if (a_in.dim() == 0) normalize_dims(a_in, dims_in);  // the dims are still checked (range, repeats)
  const Shape dims = a_in.dim() == 0 ? Shape{0} : normalize_dims(a, dims_in);
  const bool keep = a_in.dim() == 0 ? false : keepdim;

  DType out_dtype = dtype.value_or(a.dtype());
  using internal::ReduceDtype;
  using internal::ReduceIdentity;
  switch (info->dtype) {
    case ReduceDtype::Accumulate:
      if (!dtype && !is_floating(a.dtype())) out_dtype = DType::Int64;
      break;
    case ReduceDtype::Floating:
      PF_CHECK(is_floating(out_dtype), name, "(): could not infer output dtype. ",
               dtype ? "Optional dtype" : "Input dtype", " must be either a floating point or complex dtype. Got: ",
               dtype_name(out_dtype));
      break;
    case ReduceDtype::Input:
      PF_CHECK(!dtype || *dtype == a.dtype(), name, "(): dtype is not supported");
      break;
    case ReduceDtype::Logical:
      PF_CHECK(!dtype, name, "(): dtype is not supported");
      out_dtype = a.dtype() == DType::UInt8 ? DType::UInt8 : DType::Bool;
      break;
  }
  // The kernel reads the output's dtype (cast first), except a logical reduction's: the input's.
  const DType in_dtype = info->dtype == ReduceDtype::Logical ? a.dtype() : out_dtype;
  PF_CHECK_T(info->identity != ReduceIdentity::None || !reduces_over_empty(a, dims), IndexError, name,
             "(): Expected reduction dim to have non-zero size.");

  const Shape out_shape = reduced_shape(a, dims, keep);
  if (reduces_over_empty(a, dims)) {  // the reduction's identity (PyTorch: sum 0, prod 1, mean nan)
    const Scalar identity = info->identity == ReduceIdentity::Zero  ? Scalar(int64_t{0})
                            : info->identity == ReduceIdentity::One ? Scalar(int64_t{1})
                                                                    : Scalar(std::numeric_limits<double>::quiet_NaN());
    Tensor out = full(out_shape, identity, out_dtype, a.device());
    record_reduce(name, to(a, std::nullopt, in_dtype), out, dims, keep, dims_in.empty());  // still differentiable
    return out;
  }
  const Tensor in[] = {to(a, std::nullopt, in_dtype)};
  Tensor out = call_op(find_op(name), in, Attrs{{"dims", dims}, {"keepdim", keep}})[0];
  record_reduce(name, in[0], out, dims, keep, dims_in.empty());
  return out;
}

std::vector<Tensor> indexed(const std::string& name, const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  const auto it = indexed_ops().find(name);
  PF_CHECK_T(it != indexed_ops().end(), ValueError, "unknown indexed reduction '", name, "'");
  const char* fn = it->second.torch_name;
  PF_CHECK_T(dim || it->second.dim_optional, ValueError, fn, "(): a dim is required");
  // Without dim: over the flattened input; a 0-d input reduces like a 1-element 1-d one. Either
  // gives outputs without the reduced dim, reshaped after (keepdim: ones).
  const Tensor x = !dim ? reshape(a, {-1}) : a.dim() == 0 ? reshape(a, {1}) : a;
  PF_CHECK_T(dim || a.numel() > 0, IndexError, fn, "(): Expected reduction dim to be specified for input.numel() == 0.");
  const int64_t d = dim ? wrap_dim(*dim, a.dim()) : 0;
  PF_CHECK_T(x.sizes()[d] != 0, IndexError, fn, "(): Expected reduction dim ", d, " to have non-zero size.");
  const bool keep = dim && a.dim() > 0 && keepdim;
  const Tensor in[] = {x};
  std::vector<Tensor> outs = call_op(find_op(name), in, Attrs{{"dim", d}, {"keepdim", keep}});
  record_indexed(name, x, outs, d, keep);
  if (!dim && keepdim && a.dim() > 0)
    for (Tensor& o : outs) o = reshape(o, Shape(a.dim(), 1));
  return outs;
}

std::pair<Tensor, Tensor> max_dim(const Tensor& a, int64_t dim, bool keepdim) {
  auto r = indexed("max_dim", a, dim, keepdim);
  return {r[0], r[1]};
}
std::pair<Tensor, Tensor> min_dim(const Tensor& a, int64_t dim, bool keepdim) {
  auto r = indexed("min_dim", a, dim, keepdim);
  return {r[0], r[1]};
}
Tensor argmax(const Tensor& a, std::optional<int64_t> dim, bool keepdim) { return indexed("argmax", a, dim, keepdim)[0]; }
Tensor all(const Tensor& a, const Shape& dims, bool keepdim) { return reduce("all", a, dims, keepdim); }
Tensor any(const Tensor& a, const Shape& dims, bool keepdim) { return reduce("any", a, dims, keepdim); }
Tensor argmin(const Tensor& a, std::optional<int64_t> dim, bool keepdim) { return indexed("argmin", a, dim, keepdim)[0]; }

}  // namespace plugflow::ops
