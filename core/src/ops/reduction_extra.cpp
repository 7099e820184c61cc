// The reduction family (plugflow/ops_reduction.h): catalog entries, PyTorch's argument rules
// and messages, and backward formulas written with ops (so double backward works).
//
// Kernels (docs/kernels.md, "Reduction family"): norm over sorted unique dims like sum (all and
// any are reductions over dims, core/opdefs/reductions.yaml); the reductions with several
// outputs (var_mean, behind var, std, var_mean and std_mean) are defined in
// core/opdefs/moments.yaml, the ops along one dim (the scans, with a `reverse` flag which
// cumsum's backward uses, and the softmax family) in core/opdefs/along_dim.yaml.
// logsumexp (core/opdefs/composite.yaml) is composed from amax/sub/exp/sum/log.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <unordered_map>

#include "../autograd/grad_utils.h"
#include "composite.h"
#include "linalg_meta.h"
#include "opdefs.h"
#include "opdefs_derivatives.inc"
#include "plugflow/autocast.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/op.h"
#include "plugflow/ops.h"

namespace plugflow {
namespace {

// ---- catalog -----------------------------------------------------------------------------------

Shape meta_reduced_shape(const Tensor& in, const Shape& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < in.dim(); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced) out.push_back(in.sizes()[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

void meta_check_dims(const Tensor& in, const Shape& dims, const char* op) {
  PF_CHECK(!dims.empty(), op, ": dims must be non-empty (the functional layer expands 'all dims')");
  for (size_t i = 0; i < dims.size(); ++i) {
    PF_CHECK_T(dims[i] >= 0 && dims[i] < in.dim(), IndexError, op, ": dim ", dims[i], " out of range for a ", in.dim(),
               "-d input");
    PF_CHECK(i == 0 || dims[i] > dims[i - 1], op, ": dims must be sorted and unique");
  }
}

void meta_check_floating(const Tensor& in, const char* op) {
  PF_CHECK_T(is_floating(in.dtype()), TypeError, op, ": expected a floating input, got ", dtype_name(in.dtype()));
}

// The moments (core/opdefs/moments.yaml): N outputs of the reduced shape and the input's dtype
// (the kernel reads its own attributes).
template <size_t N>
std::vector<TensorMeta> moments_meta(std::span<const Tensor> in, const Attrs& attrs) {
  meta_check_floating(in[0], "moments");
  const auto& dims = attrs.get<Shape>("dims");
  meta_check_dims(in[0], dims, "moments");
  attrs.get<double>("correction");
  const Shape out = meta_reduced_shape(in[0], dims, attrs.get<bool>("keepdim"));
  return std::vector<TensorMeta>(N, {out, in[0].dtype(), in[0].device()});
}

}  // namespace

// The catalog entry is core/opdefs/linalg.yaml's (registered by meta.cpp).
std::vector<TensorMeta> internal::norm_meta(std::span<const Tensor> in, const Attrs& attrs) {
  meta_check_floating(in[0], "norm");
  const auto& dims = attrs.get<Shape>("dims");
  meta_check_dims(in[0], dims, "norm");
  attrs.get<double>("p");
  return {{meta_reduced_shape(in[0], dims, attrs.get<bool>("keepdim")), in[0].dtype(), in[0].device()}};
}

namespace {

std::vector<TensorMeta> along_dim_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const int64_t dim = attrs.get<int64_t>("dim");
  PF_CHECK_T(dim >= 0 && dim < in[0].dim(), IndexError, "dim ", dim, " out of range for a ", in[0].dim(),
             "-d input (the functional layer wraps dims and makes 0-d inputs 1-d)");
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> scan_meta(std::span<const Tensor> in, const Attrs& attrs) {
  attrs.get<bool>("reverse");
  return along_dim_meta(in, attrs);
}

std::vector<TensorMeta> softmax_meta(std::span<const Tensor> in, const Attrs& attrs) {
  meta_check_floating(in[0], "softmax");
  return along_dim_meta(in, attrs);
}

const bool kReductionOpsRegistered = [] {
  // The reductions with several outputs (core/opdefs/moments.yaml).
#define PF_X(name, Camel, dtypes, n_outputs, sig) register_op(name, sig, moments_meta<n_outputs>);
  PF_OPDEFS_MOMENTS(PF_X)
#undef PF_X
  // The ops along one dim (core/opdefs/along_dim.yaml).
#define PF_X(name, Camel, dtypes, sig) register_op(name, sig, scan_meta);
  PF_OPDEFS_SCAN(PF_X)
#undef PF_X
#define PF_X(name, Camel, dtypes, sig) register_op(name, sig, softmax_meta);
  PF_OPDEFS_SOFTMAX(PF_X)
#undef PF_X
  return true;
}();

}  // namespace

namespace ops {
namespace {

using Tensors = std::vector<Tensor>;
using autograd::mask_as;
using autograd::mul;

// An input prepared for a reduction over `dims`: 0-d inputs reduce like a 1-element 1-d one
// (dim 0 or -1 only) and give a 0-d result.
struct Reduction {
  Tensor a;
  Shape dims;          // sorted, unique, non-negative; all dims when the user gave none
  bool keepdim = false;
  Shape out_shape;
  bool over_empty = false;  // some reduced dim has size 0
  int64_t count = 1;        // elements per reduced slice
};

Reduction prepare(const Tensor& a_in, const Shape& dims_in, bool keepdim) {
  Reduction r;
  std::vector<bool> seen(std::max<int64_t>(a_in.dim(), 1), false);  // (a 0-d tensor takes dim 0 / -1 once)
  for (int64_t d : dims_in) {
    const int64_t w = wrap_dim(d, a_in.dim());
    PF_CHECK(!seen[w], "dim ", w, " appears multiple times in the list of dims");
    seen[w] = true;
  }
  if (a_in.dim() == 0) {
    r.a = reshape(a_in, {1});
    r.dims = {0};
  } else {
    r.a = a_in;
    for (int64_t d = 0; d < a_in.dim(); ++d)
      if (dims_in.empty() || seen[d]) r.dims.push_back(d);
    r.keepdim = keepdim;
  }
  r.out_shape = meta_reduced_shape(r.a, r.dims, r.keepdim);
  for (int64_t d : r.dims) {
    r.count *= r.a.sizes()[d];
    if (r.a.sizes()[d] == 0) r.over_empty = true;
  }
  return r;
}

Attrs reduce_attrs(const Reduction& r) { return Attrs{{"dims", r.dims}, {"keepdim", r.keepdim}}; }

// A reduced tensor (keepdim or not) with the reduced dims back as size 1, broadcastable
// against the input.
Tensor keep_dims(const Tensor& t, const Shape& dims, bool keepdim) {
  Tensor r = t;
  if (!keepdim)
    for (int64_t d : dims) r = unsqueeze(r, d);  // ascending, so positions line up
  return r;
}

// 1 where t == 0 (as t's dtype): added to a divisor, makes it safe; the masked result is 0.
Tensor zero_mask(const Tensor& t) { return mask_as(binary("eq", t, Scalar(int64_t{0})), t.dtype()); }

// ---- the reductions with several outputs (core/opdefs/moments.yaml) -------------------------------

// What a moments backward reads besides the gradients and the saved tensors.
struct MomentArgs {
  Shape dims;  // sorted, unique, non-negative (of an input at least 1-d)
  bool keepdim;
  int64_t count;      // elements per reduced slice
  double correction;
  Attrs attrs;        // the kernel's own attributes, as the variant fixed them
};

// The gradient of var (or std, take_sqrt; output 0) and mean (output 1) with respect to x.
// g: one gradient per output, undefined where none flows; outs: the saved outputs (var).
Tensor var_mean_backward(const Tensors& g, const Tensor& x, const Tensors& outs, const MomentArgs& args) {
  const auto& [dims, keepdim, count, correction, attrs] = args;
  Tensor gx;
  if (g[0].defined()) {
    Tensor gv = keep_dims(g[0], dims, keepdim);
    if (attrs.get<bool>("take_sqrt")) {  // d std = d var / (2 std); 0 where std == 0 (PyTorch's masking)
      const Tensor s = keep_dims(outs[0], dims, keepdim);
      const Tensor z = zero_mask(s);
      gv = mul(binary("div", gv, mul(binary("add", s, z), Scalar(2.0))), binary("sub", Scalar(int64_t{1}), z));
    }
    const Tensor centered = binary("sub", x, reduce("mean", x, dims, true));
    gx = mul(mul(gv, centered), Scalar(2.0 / (static_cast<double>(count) - correction)));
  }
  if (g[1].defined()) {
    const Tensor gm = binary("div", expand(keep_dims(g[1], dims, keepdim), x.sizes()), Scalar(count));
    gx = gx.defined() ? binary("add", gx, gm) : gm;
  }
  if (gx.defined() && gx.sizes() != x.sizes()) gx = expand(gx, x.sizes());
  return gx;
}

struct MomentsGrad {
  Tensor (*fn)(const Tensors& g, const Tensor& self, const Tensors& outs, const MomentArgs& args);
  const char* needs;  // the saved tensors: 'a' the input, a digit an output's index
};

const std::unordered_map<std::string_view, MomentsGrad>& moments_grads() {
  static const std::unordered_map<std::string_view, MomentsGrad> table = {PF_OPDEFS_MOMENTS_DERIVATIVES};
  return table;
}

// A Python function over a moments kernel (`variants:`).
struct MomentsVariant {
  const char* kernel;
  Attrs fixed;           // the kernel's own attributes
  unsigned output_mask;  // bit i: returns output i
  const char* node;      // PyTorch's backward node name
};

const std::unordered_map<std::string_view, MomentsVariant>& moments_variants() {
  static const std::unordered_map<std::string_view, MomentsVariant> table = {
#define PF_X(name, kernel, fixed, mask, node, function, method) {name, {kernel, fixed, mask, node}},
      PF_OPDEFS_MOMENT_VARIANTS(PF_X)
#undef PF_X
  };
  return table;
}

std::vector<Tensor> moments_impl(const std::string& name, const MomentsVariant& variant, const Tensor& a_in,
                                 const Shape& dims_in, double correction, bool keepdim) {
  PF_CHECK(is_floating(a_in.dtype()), "std and var only support floating point and complex dtypes");
  const Reduction r = prepare(a_in, dims_in, keepdim);
  const OpDef& op = find_op(variant.kernel);
  Attrs attrs = reduce_attrs(r);
  attrs.set("correction", correction);
  for (const auto& [n, v] : variant.fixed.items()) attrs.set(n, v);
  const Tensor in[] = {r.a};
  std::vector<Tensor> outs;
  if (r.over_empty) {  // nothing to average: nan, as PyTorch
    const size_t n_outputs = op.meta(std::span<const Tensor>(in), attrs).size();
    for (size_t i = 0; i < n_outputs; ++i)
      outs.push_back(full(r.out_shape, Scalar(std::numeric_limits<double>::quiet_NaN()), r.a.dtype(), r.a.device()));
  } else {
    outs = call_op(op, in, attrs);
  }
  std::vector<Tensor> returned;
  for (size_t i = 0; i < outs.size(); ++i)
    if (variant.output_mask & (1u << i)) returned.push_back(outs[i]);
  if (autograd::any_requires_grad({&r.a})) {
    const auto it = moments_grads().find(variant.kernel);
    PF_CHECK_T(it != moments_grads().end(), NotImplementedError, "the derivative for '", name, "' is not implemented.");
    const MomentsGrad spec = it->second;
    const size_t n_outputs = outs.size();
    const unsigned mask = variant.output_mask;
    auto node = autograd::make_node(
        variant.node, [spec, mask, n_outputs, args = MomentArgs{r.dims, r.keepdim, r.count, correction, variant.fixed}](
                          const Tensors& g, const Tensors& s) -> Tensors {
          Tensors grads(n_outputs), saved(n_outputs);
          for (size_t i = 0, k = 0; i < n_outputs; ++i) {
            if (mask & (1u << i)) grads[i] = g[k++];
            saved[i] = s[1 + i];
          }
          return {spec.fn(grads, s[0], saved, args)};
        });
    const std::string_view needs = spec.needs;
    node->reserve_saved(1 + n_outputs);
    node->save(needs.find('a') != std::string_view::npos ? r.a : Tensor());
    for (size_t i = 0, nr = 0; i < n_outputs; ++i) {
      const Tensor saved = needs.find(static_cast<char>('0' + i)) != std::string_view::npos ? outs[i] : Tensor();
      if (mask & (1u << i)) node->save_output(saved, nr++);  // (a returned output is saved without a cycle)
      else node->save(saved);
    }
    const Tensor recorded_in[] = {r.a};
    autograd::record(node, recorded_in, returned);
  }
  return returned;
}

// ---- the ops along one dim (core/opdefs/along_dim.yaml) -------------------------------------------

// What their backward reads besides the gradient and the saved tensors.
struct LineArgs {
  int64_t dim;   // wrapped, of an input at least 1-d
  bool reverse;  // scans: the forward scan ran from the end
};

// The scan kernel along dim (x at least 1-d), recorded for autograd.
Tensor run_scan(const std::string& op, const Tensor& x, int64_t dim, bool reverse);

// sum_{i >= j} g_i along dim: the backward of cumsum (and cumsum's own double backward).
Tensor reverse_cumsum(const Tensor& g, int64_t dim) { return run_scan("cumsum", g, dim, true); }

// ---- the backwards named by the definitions (`derivative:`) ----------------------------------------

Tensor cumsum_backward(const Tensor& g, const Tensor&, const Tensor&, const LineArgs& args) {
  return run_scan("cumsum", g, args.dim, !args.reverse);
}

// d/dx of cumprod along dim, zeros included, in PyTorch's formulas and order (an overflowed
// product must give the same inf, never a 0 * inf = NaN of its own). Without a zero it is
// rev_cumsum(g * out) / x. With z the first zero of a line and z2 the second: positions before
// z get rev_cumsum(g * out over [0, z)) / x; z gets out[z - 1] times the sum over j in [z, z2)
// of g_j * prod_{z < k <= j} x_k; positions after z get 0 (each of their products holds x_z).
Tensor cumprod_backward(const Tensor& g, const Tensor& x, const Tensor& out, const LineArgs& args) {
  PF_CHECK(!args.reverse, "cumprod: the reverse scan is not differentiable");  // (only cumsum's backward runs one)
  const int64_t dim = args.dim;
  const Tensor w = mul(g, out);
  const Tensor is_zero = zero_mask(x);
  if (!item(any(is_zero)).to_bool()) return binary("div", reverse_cumsum(w, dim), x);
  const Tensor zeros_so_far = run_scan("cumsum", is_zero, dim, false);
  const Tensor before = binary("eq", zeros_so_far, Scalar(int64_t{0}));
  // (divided by x with its zeros as 1: no 0 / 0 for a double backward through the where)
  const Tensor t_before = binary("div", reverse_cumsum(where(before, w, Scalar(0.0)), dim), binary("add", x, is_zero));
  const Tensor up_to_second = binary("eq", zeros_so_far, Scalar(int64_t{1}));  // [z, z2)
  const Tensor first = binary("logical_and", up_to_second, binary("eq", is_zero, Scalar(int64_t{1})));
  const Tensor between = binary("logical_and", up_to_second, unary("logical_not", first));  // (z, z2)
  const Tensor products = run_scan("cumprod", where(between, x, Scalar(1.0)), dim, false);
  const Tensor sums = reduce("sum", mul(products, where(up_to_second, g, Scalar(0.0))), {dim}, true);
  // out[z - 1] (1 where z is the line's first element)
  const Tensor z = argmax(mask_as(first, x.dtype()), dim, true);
  const Tensor previous = where(binary("eq", z, Scalar(int64_t{0})), Scalar(1.0),
                                gather(out, dim, clamp(binary("sub", z, Scalar(int64_t{1})), Scalar(int64_t{0}), std::nullopt)));
  return where(before, t_before, where(first, mul(sums, previous), Scalar(0.0)));
}

// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g) (y: the output)
Tensor softmax_backward(const Tensor& g, const Tensor&, const Tensor& y, const LineArgs& args) {
  return mul(y, binary("sub", g, reduce("sum", mul(g, y), {args.dim}, true)));
}
Tensor log_softmax_backward(const Tensor& g, const Tensor&, const Tensor& y, const LineArgs& args) {
  return binary("sub", g, mul(unary("exp", y), reduce("sum", g, {args.dim}, true)));
}

struct LineGrad {
  Tensor (*fn)(const Tensor& g, const Tensor& self, const Tensor& result, const LineArgs& args);
  const char* needs;  // subset of "ao": the input, the output (only those are saved)
  const char* node;   // PyTorch's node name
};

const std::unordered_map<std::string, LineGrad>& line_grads() {
  static const std::unordered_map<std::string, LineGrad> table = {PF_OPDEFS_ALONG_DIM_DERIVATIVES};
  return table;
}

void record_along_dim(const std::string& name, const Tensor& in, const Tensor& out, LineArgs args) {
  if (!is_floating(out.dtype()) || !autograd::any_requires_grad({&in})) return;
  const auto it = line_grads().find(name);
  PF_CHECK_T(it != line_grads().end(), NotImplementedError, "the derivative for '", name, "' is not implemented.");
  const LineGrad& spec = it->second;
  auto node = autograd::make_node(spec.node, [fn = spec.fn, args](const Tensors& g, const Tensors& s) -> Tensors {
    return {fn(g[0], s[0], s[1], args)};
  });
  const std::string_view needs = spec.needs;
  node->reserve_saved(2);
  node->save(needs.find('a') != std::string_view::npos ? in : Tensor());
  node->save_output(needs.find('o') != std::string_view::npos ? out : Tensor(), 0);
  autograd::record(node, {in}, {out});
}

// ---- scans -------------------------------------------------------------------------------------

Tensor run_scan(const std::string& op, const Tensor& x, int64_t dim, bool reverse) {
  const Tensor in[] = {x};
  Tensor out = call_op(find_op(op), in, Attrs{{"dim", dim}, {"reverse", reverse}})[0];
  record_along_dim(op, x, out, {dim, reverse});
  return out;
}

Tensor scan(const std::string& op, const Tensor& a, int64_t dim, std::optional<DType> dtype) {
  const int64_t d = wrap_dim(dim, a.dim());
  const DType out_dtype = dtype.value_or(is_floating(a.dtype()) ? a.dtype() : DType::Int64);
  // PyTorch's scan kernels have no bool variant; a 0-d or empty input never reaches them.
  PF_CHECK(out_dtype != DType::Bool || a.dim() == 0 || a.numel() == 0, "\"", op, "_out_cpu\" not implemented for 'Bool'");
  // PyTorch fills a 0-d result with the value: converted with overflow checks.
  if (a.dim() == 0 && a.dtype() != out_dtype) check_scalar_fits(item(a), out_dtype);
  const Tensor x = to(a.dim() == 0 ? reshape(a, {1}) : a, std::nullopt, out_dtype);
  const Tensor out = run_scan(op, x, d, false);
  return a.dim() == 0 ? reshape(out, {}) : out;
}

// ---- softmax -------------------------------------------------------------------------------------

Tensor softmax_impl(const std::string& op, const Tensor& a_in, int64_t dim, std::optional<DType> dtype) {
  const Tensor a = dtype ? to(a_in, std::nullopt, *dtype) : a_in;
  PF_CHECK(is_floating(a.dtype()), "\"", op, "_lastdim_kernel_impl\" not implemented for '",
           scalar_type_name(a.dtype()), "'");
  const int64_t d = wrap_dim(dim, a.dim());
  const Tensor x = a.dim() == 0 ? reshape(a, {1}) : a;
  const Tensor in[] = {x};
  Tensor out = call_op(find_op(op), in, Attrs{{"dim", d}})[0];
  record_along_dim(op, x, out, {d, false});
  return a.dim() == 0 ? reshape(out, {}) : out;
}

enum class LineFamily { Scan, Softmax };

const std::unordered_map<std::string_view, LineFamily>& line_ops() {
  static const std::unordered_map<std::string_view, LineFamily> table = {
#define PF_X(name, ...) {name, LineFamily::Scan},
      PF_OPDEFS_SCAN(PF_X)
#undef PF_X
#define PF_X(name, ...) {name, LineFamily::Softmax},
      PF_OPDEFS_SOFTMAX(PF_X)
#undef PF_X
  };
  return table;
}

// The largest finite value of a floating dtype (clamping a max keeps infinities out of x - max).
double finite_max(DType t) {
  switch (t) {
    case DType::Float16: return 65504.0;
    case DType::BFloat16: return 3.3895313892515355e38;
    case DType::Float32: return static_cast<double>(std::numeric_limits<float>::max());
    default: return std::numeric_limits<double>::max();
  }
}

}  // namespace

// ---- public API ------------------------------------------------------------------------------------

std::vector<Tensor> moments(const std::string& name, const Tensor& a, const Shape& dims, double correction,
                            bool keepdim) {
  const auto it = moments_variants().find(name);
  PF_CHECK_T(it != moments_variants().end(), ValueError, "unknown moments function '", name, "'");
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{name, {a}}) return moments(name, cast[0], dims, correction, keepdim);
  return moments_impl(name, it->second, a, dims, correction, keepdim);
}

Tensor var(const Tensor& a, const Shape& dims, double correction, bool keepdim) {
  return moments("var", a, dims, correction, keepdim)[0];
}
Tensor std_dev(const Tensor& a, const Shape& dims, double correction, bool keepdim) {
  return moments("std", a, dims, correction, keepdim)[0];
}
std::pair<Tensor, Tensor> var_mean(const Tensor& a, const Shape& dims, double correction, bool keepdim) {
  auto r = moments("var_mean", a, dims, correction, keepdim);
  return {r[0], r[1]};
}
std::pair<Tensor, Tensor> std_mean(const Tensor& a, const Shape& dims, double correction, bool keepdim) {
  auto r = moments("std_mean", a, dims, correction, keepdim);
  return {r[0], r[1]};
}

Tensor logsumexp(const Tensor& a, const Shape& dims, bool keepdim) {
  return composite("logsumexp", a, Attrs{{"dim", dims}, {"keepdim", keepdim}});
}

Tensor extreme(const Tensor& a, bool is_max) {
  Tensor out;
  {
    autograd::GradModeGuard no_grad(false);  // recorded below as PyTorch's own node
    out = reduce(is_max ? "amax" : "amin", a, {}, false);
  }
  if (autograd::any_requires_grad({&a})) {
    // PyTorch's evenly_distribute_backward: the gradient shared by the elements equal to the
    // result, a NaN result counting its NaNs (amax's backward gives NaN everywhere there).
    auto node = autograd::make_node(is_max ? "MaxBackward1" : "MinBackward1", [](const Tensors& g,
                                                                                 const Tensors& s) -> Tensors {
      const Tensor& x = s[0];
      const Tensor value = expand(s[1], x.sizes());
      const Tensor chosen = where(unary("isnan", value), unary("isnan", x), binary("eq", x, value));
      const Tensor share = binary("div", g[0], reduce("sum", chosen, {}, false));
      return {mul(chosen, share)};
    });
    node->save(a);
    node->save_output(out, 0);
    autograd::record(node, {a}, {out});
  }
  return out;
}

// The composite ops of core/opdefs/composite.yaml (ops::composite applied the dtype rule and
// autocast): logsumexp, floating here.
Tensor composites::logsumexp(const Tensor& a, const Attrs& attrs) {
  const Reduction r = prepare(a, attrs.get<Shape>("dim"), attrs.get<bool>("keepdim"));
  Tensor out;
  {
    autograd::GradModeGuard no_grad(false);  // the gradient is recorded below, in one node
    if (r.over_empty) {
      out = full(r.out_shape, Scalar(-std::numeric_limits<double>::infinity()), a.dtype(), a.device());
    } else {
      // max clamped to finite values: an infinite max (all -inf, or some +inf) must not give
      // inf - inf; with the clamp, exp(x - max) is 0 or inf there and the log gives -inf / inf.
      const double fmax = finite_max(a.dtype());
      Tensor m = reduce("amax", r.a, r.dims, true);
      m = binary("maximum", binary("minimum", m, Scalar(fmax)), Scalar(-fmax));
      Tensor s = reduce("sum", unary("exp", binary("sub", r.a, m)), r.dims, r.keepdim);
      Tensor mk = r.keepdim ? m : reshape(m, meta_reduced_shape(r.a, r.dims, false));
      out = binary("add", unary("log", s), mk);
    }
  }
  if (autograd::any_requires_grad({&r.a})) {
    auto node = autograd::make_node("LogsumexpBackward0", [dims = r.dims, keep = r.keepdim, shape = r.a.sizes()](
                                                              const Tensors& g, const Tensors& s) -> Tensors {
      const Tensor& x = s[0];
      const Tensor res = reshape(s[1], meta_reduced_shape(x, dims, keep));
      const Tensor w = unary("exp", binary("sub", x, keep_dims(res, dims, keep)));
      return {mul(expand(keep_dims(reshape(g[0], meta_reduced_shape(x, dims, keep)), dims, keep), shape), w)};
    });
    node->save(r.a);
    node->save_output(out, 0);
    autograd::record(node, {r.a}, {out});
  }
  return out;
}

Tensor norm(const Tensor& a_in, double p, const Shape& dims_in, bool keepdim, std::optional<DType> dtype) {
  if (autocast::active() && !dtype) [[unlikely]]
    if (autocast::OpScope cast{"norm", {a_in}}) return norm(cast[0], p, dims_in, keepdim, dtype);
  PF_CHECK(is_floating(a_in.dtype()), "norm(): input dtype should be either floating point or complex. Got ",
           scalar_type_name(a_in.dtype()), " instead.");
  if (dtype)
    PF_CHECK(is_floating(*dtype), "norm(): the desired output dtype should be either floating point or complex. Got ",
             scalar_type_name(*dtype), " instead.");
  PF_CHECK_T(!std::isnan(p), ValueError, "norm(): p must not be nan");
  const Tensor a = dtype ? to(a_in, std::nullopt, *dtype) : a_in;
  const Reduction r = prepare(a, dims_in, keepdim);
  Tensor out;
  if (r.over_empty) {
    out = zeros(r.out_shape, a.dtype(), a.device());
  } else {
    static const OpDef& op = find_op("norm");
    Attrs attrs = reduce_attrs(r);
    attrs.set("p", p);
    const Tensor in[] = {r.a};
    out = call_op(op, in, attrs)[0];
  }
  if (autograd::any_requires_grad({&r.a})) {
    auto node = autograd::make_node(
        "NormBackward1", [p, dims = r.dims, keep = r.keepdim](const Tensors& g, const Tensors& s) -> Tensors {
          const Tensor& x = s[0];
          const Shape red = meta_reduced_shape(x, dims, keep);
          const Tensor gk = expand(keep_dims(reshape(g[0], red), dims, keep), x.sizes());
          const Tensor n = expand(keep_dims(reshape(s[1], red), dims, keep), x.sizes());
          if (p == 0) return {Tensor()};  // no gradient, as PyTorch (the input's .grad stays None)
          if (p == 1) return {mul(unary("sign", x), gk)};
          if (p == 2) {  // x / n, 0 where n == 0 (x is 0 there too)
            return {mul(gk, binary("div", x, binary("add", n, zero_mask(n))))};
          }
          const Tensor ax = unary("abs", x);
          if (std::isinf(p)) {  // shared evenly by the elements equal to the extreme (or NaN)
            const Tensor hit = mask_as(binary("logical_or", binary("eq", ax, n), unary("isnan", ax)), x.dtype());
            const Tensor count = expand(reduce("sum", hit, dims, true), x.sizes());
            return {mul(unary("sign", x), mul(binary("div", gk, count), hit))};
          }
          const Tensor nz = zero_mask(n);  // slices whose norm is 0 get no gradient
          const Tensor keep_n = binary("sub", Scalar(int64_t{1}), nz);
          if (p < 1) {  // sign(x) |x|^(p-1) (0 at x == 0) * g * n^(1-p)
            const Tensor xz = zero_mask(x);
            const Tensor scaled = mul(mul(unary("sign", x), binary("pow", binary("add", ax, xz), Scalar(p - 1))),
                                      binary("sub", Scalar(int64_t{1}), xz));
            return {mul(mul(scaled, gk), binary("pow", n, Scalar(1 - p)))};
          }
          const Tensor scale = mul(binary("div", gk, binary("pow", binary("add", n, nz), Scalar(p - 1))), keep_n);
          if (p < 2) return {mul(mul(unary("sign", x), binary("pow", ax, Scalar(p - 1))), scale)};
          return {mul(mul(x, binary("pow", ax, Scalar(p - 2))), scale)};
        });
    node->save(r.a);
    node->save_output(out, 0);
    autograd::record(node, {r.a}, {out});
  }
  return out;
}

// The ops along one dim are autocast only when the caller gave no dtype.
Tensor along_dim(const std::string& name, const Tensor& a, int64_t dim, std::optional<DType> dtype) {
  const auto it = line_ops().find(name);
  PF_CHECK_T(it != line_ops().end(), ValueError, "unknown op along one dim '", name, "'");
  if (autocast::active() && !dtype) [[unlikely]]
    if (autocast::OpScope cast{name, {a}}) return along_dim(name, cast[0], dim, dtype);
  return it->second == LineFamily::Scan ? scan(name, a, dim, dtype) : softmax_impl(name, a, dim, dtype);
}

Tensor cumsum(const Tensor& a, int64_t dim, std::optional<DType> dtype) { return along_dim("cumsum", a, dim, dtype); }
Tensor cumprod(const Tensor& a, int64_t dim, std::optional<DType> dtype) { return along_dim("cumprod", a, dim, dtype); }
Tensor softmax(const Tensor& a, int64_t dim, std::optional<DType> dtype) { return along_dim("softmax", a, dim, dtype); }
Tensor log_softmax(const Tensor& a, int64_t dim, std::optional<DType> dtype) {
  return along_dim("log_softmax", a, dim, dtype);
}

}  // namespace ops
}  // namespace plugflow
