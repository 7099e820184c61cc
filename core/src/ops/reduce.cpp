// Reductions: dims normalized and dtypes decided here; kernels see sorted unique dims.
#include <algorithm>
#include <limits>

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

}  // namespace

Tensor reduce(const std::string& name, const Tensor& a_in, const Shape& dims_in, bool keepdim,
              std::optional<DType> dtype) {
  PF_CHECK_T(name == "sum" || name == "prod" || name == "mean" || name == "amax" || name == "amin", ValueError,
             "unknown reduction '", name, "'");
  // A 0-d tensor reduces like a 1-element 1-d one, then drops the dim again.
  const Tensor a = a_in.dim() == 0 ? reshape(a_in, {1}) : a_in;
  if (a_in.dim() == 0)
    for (int64_t d : dims_in) wrap_dim(d, 0);
  const Shape dims = a_in.dim() == 0 ? Shape{0} : normalize_dims(a, dims_in);
  const bool keep = a_in.dim() == 0 ? false : keepdim;

  DType out_dtype = dtype.value_or(a.dtype());
  if (!dtype && (name == "sum" || name == "prod") && !is_floating(a.dtype())) out_dtype = DType::Int64;
  if (name == "mean")
    PF_CHECK(is_floating(out_dtype), "mean(): could not infer output dtype. ",
             dtype ? "Optional dtype" : "Input dtype", " must be either a floating point or complex dtype. Got: ",
             dtype_name(out_dtype));
  if (name == "amax" || name == "amin") {
    PF_CHECK(!dtype || *dtype == a.dtype(), name, "(): dtype is not supported");
    PF_CHECK_T(!reduces_over_empty(a, dims), IndexError, name,
               "(): Expected reduction dim to have non-zero size.");
  }

  const Shape out_shape = reduced_shape(a, dims, keep);
  if (reduces_over_empty(a, dims)) {  // identity of the reduction (PyTorch: sum 0, prod 1, mean nan)
    const Scalar identity = name == "sum"    ? Scalar(int64_t{0})
                            : name == "prod" ? Scalar(int64_t{1})
                                             : Scalar(std::numeric_limits<double>::quiet_NaN());
    return full(out_shape, identity, out_dtype, a.device());
  }
  const Tensor in[] = {to(a, std::nullopt, out_dtype)};
  return call_op(find_op(name), in, Attrs{{"dims", dims}, {"keepdim", keep}})[0];
}

namespace {

std::pair<Tensor, Tensor> value_index(const char* op, const char* user_name, const Tensor& a_in, int64_t dim,
                                      bool keepdim) {
  const Tensor a = a_in.dim() == 0 ? reshape(a_in, {1}) : a_in;
  const int64_t d = wrap_dim(dim, a_in.dim());
  PF_CHECK_T(a.sizes()[d] != 0, IndexError, user_name, "(): Expected reduction dim ", d,
             " to have non-zero size.");
  const Tensor in[] = {a};
  auto outs = call_op(find_op(op), in, Attrs{{"dim", d}, {"keepdim", a_in.dim() == 0 ? false : keepdim}});
  return {outs[0], outs[1]};
}

Tensor arg_reduce(const char* op, const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) {
    PF_CHECK_T(a.numel() > 0, IndexError, op, "(): Expected reduction dim to be specified for input.numel() == 0.");
    const Tensor flat[] = {reshape(a, {-1})};
    Tensor r = call_op(find_op(op), flat, Attrs{{"dim", int64_t{0}}, {"keepdim", false}})[0];
    if (keepdim && a.dim() > 0) r = reshape(r, Shape(a.dim(), 1));
    return r;
  }
  const Tensor b = a.dim() == 0 ? reshape(a, {1}) : a;
  const int64_t d = wrap_dim(*dim, a.dim());
  PF_CHECK_T(b.sizes()[d] != 0, IndexError, op, "(): Expected reduction dim ", d, " to have non-zero size.");
  const Tensor in[] = {b};
  return call_op(find_op(op), in, Attrs{{"dim", d}, {"keepdim", a.dim() == 0 ? false : keepdim}})[0];
}

}  // namespace

std::pair<Tensor, Tensor> max_dim(const Tensor& a, int64_t dim, bool keepdim) {
  return value_index("max_dim", "max", a, dim, keepdim);
}
std::pair<Tensor, Tensor> min_dim(const Tensor& a, int64_t dim, bool keepdim) {
  return value_index("min_dim", "min", a, dim, keepdim);
}
Tensor argmax(const Tensor& a, std::optional<int64_t> dim, bool keepdim) { return arg_reduce("argmax", a, dim, keepdim); }
Tensor argmin(const Tensor& a, std::optional<int64_t> dim, bool keepdim) { return arg_reduce("argmin", a, dim, keepdim); }

}  // namespace plugflow::ops
