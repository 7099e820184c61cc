// The norm family (plugflow/ops_norm.h): catalog entries (defined in core/opdefs/norm.yaml),
// PyTorch's argument rules and messages, and the autograd nodes.
//
// Kernels (docs/kernels.md, "Norm family"): batch_norm, layer_norm and group_norm each run one
// fused forward kernel (statistics and the affine normalization together, saving mean and
// 1/std) and one fused backward kernel (input, weight and bias gradients together). The
// functional layer hands them contiguous inputs reshaped to the few dims they need (batch norm:
// the input itself when it is channels last, whose layout the results keep); absent
// weight/bias/running statistics are flagged by attributes and passed as placeholders that are
// never read. Backward under create_graph (double backward) runs the same formulas composed
// from differentiable ops instead of the fused backward kernels.
//
// embedding gathers rows (its backward accumulates rows into a dense gradient), dropout draws
// its mask from Philox in the same pass that applies it, and the losses are composed from
// log_softmax, gather and reductions.
#include <algorithm>
#include <cmath>
#include <limits>

#include "../autograd/grad_utils.h"
#include "plugflow/autocast.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/graph.h"
#include "plugflow/op.h"
#include "plugflow/ops.h"
#include "opdefs.h"

namespace plugflow {
namespace {

// ---- catalog -----------------------------------------------------------------------------------

TensorMeta meta_like(const Tensor& t, Shape sizes) { return {std::move(sizes), t.dtype(), t.device()}; }

void meta_check_floating(const Tensor& t, const char* op) {
  PF_CHECK_T(is_floating(t.dtype()), TypeError, op, ": expected a floating input, got ", dtype_name(t.dtype()));
}

// A per-channel / per-feature vector: `numel` elements of x's dtype (or float32 beside a 16-bit
// x where `mixed_ok`: batch norm's parameters and statistics), any 1-d layout.
void meta_check_vector(const Tensor& v, const Tensor& x, int64_t numel, const char* op, const char* what,
                       bool mixed_ok = false) {
  PF_CHECK(v.dim() == 1 && v.sizes()[0] == numel, op, ": ", what, " must have ", numel, " elements, got shape ",
           shape_str(v.sizes()));
  const bool mixed = mixed_ok && itemsize(x.dtype()) == 2 && v.dtype() == DType::Float32;
  PF_CHECK_T(v.dtype() == x.dtype() || mixed, TypeError, op, ": ", what, " must have the input's dtype");
}

// batch_norm's saved statistics and parameter gradients: float32 for a 16-bit input (its
// parameters may be float32, the mixed type), else the input's dtype.
DType batch_norm_stat_dtype(const Tensor& x) { return itemsize(x.dtype()) == 2 ? DType::Float32 : x.dtype(); }

// batch norm's activations (x, y, grad, grad_x): (N, C, *), dense row-major or channels last,
// the results in x's layout (docs/kernels.md, "Norm family").
TensorMeta activation_meta(const Tensor& x) {
  return {x.sizes(), x.dtype(), x.device(), x.suggest_memory_format()};
}

// x (N, C, *), weight, bias, running_mean, running_var -> y, save_mean (C), save_invstd (C).
std::vector<TensorMeta> batch_norm_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[0];
  meta_check_floating(x, "batch_norm");
  PF_CHECK(x.dim() >= 2, "batch_norm: the kernel takes a (N, C, *) input, got ", shape_str(x.sizes()));
  const int64_t c = x.sizes()[1];
  const bool training = attrs.get<bool>("training");
  if (attrs.get<bool>("has_weight")) meta_check_vector(in[1], x, c, "batch_norm", "weight", true);
  if (attrs.get<bool>("has_bias")) meta_check_vector(in[2], x, c, "batch_norm", "bias", true);
  if (attrs.get<bool>("has_running") || !training) {
    meta_check_vector(in[3], x, c, "batch_norm", "running_mean", true);
    meta_check_vector(in[4], x, c, "batch_norm", "running_var", true);
  }
  attrs.get<double>("momentum");
  attrs.get<double>("eps");
  const TensorMeta stat{{c}, batch_norm_stat_dtype(x), x.device()};
  return {activation_meta(x), stat, stat};
}

// grad (N, C, *), x, weight, save_mean, save_invstd -> grad_x, grad_weight (C), grad_bias (C).
std::vector<TensorMeta> batch_norm_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[1];
  meta_check_floating(x, "batch_norm_backward");
  PF_CHECK(x.dim() >= 2 && in[0].sizes() == x.sizes(),
           "batch_norm_backward: grad and input must be (N, C, *) of one shape");
  const int64_t c = x.sizes()[1];
  if (attrs.get<bool>("has_weight")) meta_check_vector(in[2], x, c, "batch_norm_backward", "weight", true);
  meta_check_vector(in[3], x, c, "batch_norm_backward", "save_mean", true);
  meta_check_vector(in[4], x, c, "batch_norm_backward", "save_invstd", true);
  attrs.get<bool>("training");
  const TensorMeta stat{{c}, batch_norm_stat_dtype(x), x.device()};
  return {activation_meta(x), stat, stat};
}

// x (M, N), weight (N), bias (N) -> y, mean (M), rstd (M).
std::vector<TensorMeta> layer_norm_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[0];
  meta_check_floating(x, "layer_norm");
  PF_CHECK(x.dim() == 2, "layer_norm: the kernel takes a (M, N) input, got ", shape_str(x.sizes()));
  if (attrs.get<bool>("has_weight")) meta_check_vector(in[1], x, x.sizes()[1], "layer_norm", "weight");
  if (attrs.get<bool>("has_bias")) meta_check_vector(in[2], x, x.sizes()[1], "layer_norm", "bias");
  attrs.get<double>("eps");
  return {meta_like(x, x.sizes()), meta_like(x, {x.sizes()[0]}), meta_like(x, {x.sizes()[0]})};
}

// grad (M, N), x, weight, mean (M), rstd (M) -> grad_x, grad_weight (N), grad_bias (N).
std::vector<TensorMeta> layer_norm_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[1];
  meta_check_floating(x, "layer_norm_backward");
  PF_CHECK(x.dim() == 2 && in[0].sizes() == x.sizes(), "layer_norm_backward: grad and input must be (M, N)");
  if (attrs.get<bool>("has_weight")) meta_check_vector(in[2], x, x.sizes()[1], "layer_norm_backward", "weight");
  meta_check_vector(in[3], x, x.sizes()[0], "layer_norm_backward", "mean");
  meta_check_vector(in[4], x, x.sizes()[0], "layer_norm_backward", "rstd");
  return {meta_like(x, x.sizes()), meta_like(x, {x.sizes()[1]}), meta_like(x, {x.sizes()[1]})};
}

// x (N, C, L), weight (C), bias (C) -> y, mean (N * G), rstd (N * G).
std::vector<TensorMeta> group_norm_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[0];
  meta_check_floating(x, "group_norm");
  PF_CHECK(x.dim() == 3, "group_norm: the kernel takes a (N, C, L) input, got ", shape_str(x.sizes()));
  const int64_t groups = attrs.get<int64_t>("groups");
  PF_CHECK(groups > 0 && x.sizes()[1] % groups == 0, "group_norm: ", x.sizes()[1], " channels in ", groups, " groups");
  if (attrs.get<bool>("has_weight")) meta_check_vector(in[1], x, x.sizes()[1], "group_norm", "weight");
  if (attrs.get<bool>("has_bias")) meta_check_vector(in[2], x, x.sizes()[1], "group_norm", "bias");
  attrs.get<double>("eps");
  const int64_t rows = x.sizes()[0] * groups;
  return {meta_like(x, x.sizes()), meta_like(x, {rows}), meta_like(x, {rows})};
}

// grad (N, C, L), x, weight, mean (N * G), rstd (N * G) -> grad_x, grad_weight (C), grad_bias (C).
std::vector<TensorMeta> group_norm_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[1];
  meta_check_floating(x, "group_norm_backward");
  PF_CHECK(x.dim() == 3 && in[0].sizes() == x.sizes(), "group_norm_backward: grad and input must be (N, C, L)");
  const int64_t groups = attrs.get<int64_t>("groups");
  PF_CHECK(groups > 0 && x.sizes()[1] % groups == 0, "group_norm_backward: ", x.sizes()[1], " channels in ", groups,
           " groups");
  if (attrs.get<bool>("has_weight")) meta_check_vector(in[2], x, x.sizes()[1], "group_norm_backward", "weight");
  meta_check_vector(in[3], x, x.sizes()[0] * groups, "group_norm_backward", "mean");
  meta_check_vector(in[4], x, x.sizes()[0] * groups, "group_norm_backward", "rstd");
  return {meta_like(x, x.sizes()), meta_like(x, {x.sizes()[1]}), meta_like(x, {x.sizes()[1]})};
}

// weight (V, D), indices (M) int64 -> out (M, D).
std::vector<TensorMeta> embedding_meta(std::span<const Tensor> in, const Attrs&) {
  const Tensor& w = in[0];
  PF_CHECK(w.dim() == 2, "embedding: weight must be 2-D");
  PF_CHECK_T(in[1].dtype() == DType::Int64 && in[1].dim() == 1, TypeError, "embedding: indices must be 1-d int64");
  return {meta_like(w, {in[1].sizes()[0], w.sizes()[1]})};
}

// grad (M, D), indices (M) int64 -> grad_weight (num_weights, D).
std::vector<TensorMeta> embedding_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& g = in[0];
  meta_check_floating(g, "embedding_backward");
  PF_CHECK(g.dim() == 2, "embedding_backward: grad must be (M, D)");
  PF_CHECK_T(in[1].dtype() == DType::Int64 && in[1].dim() == 1 && in[1].sizes()[0] == g.sizes()[0], TypeError,
             "embedding_backward: indices must be 1-d int64 with one entry per grad row");
  const int64_t num_weights = attrs.get<int64_t>("num_weights");
  PF_CHECK(num_weights >= 0, "embedding_backward: num_weights must be >= 0");
  attrs.get<int64_t>("padding_idx");
  attrs.get<bool>("scale_grad_by_freq");
  return {meta_like(g, {num_weights, g.sizes()[1]})};
}

// x -> y (x's shape), mask (x's shape; `scale` where kept, 0 where dropped).
std::vector<TensorMeta> dropout_meta(std::span<const Tensor> in, const Attrs& attrs) {
  meta_check_floating(in[0], "dropout");
  const double p = attrs.get<double>("p");
  PF_CHECK_T(p >= 0 && p <= 1, ValueError, "dropout probability has to be between 0 and 1, but got ", p);
  attrs.get<double>("scale");
  attrs.get<int64_t>("seed");
  attrs.get<int64_t>("offset");
  return {meta_like(in[0], in[0].sizes()), meta_like(in[0], in[0].sizes())};
}

// The catalog entries of core/opdefs/norm.yaml, with the meta functions above.
const bool kNormOpsRegistered = [] {
#define PF_X(name, signature, meta, mutated) register_op(name, signature, meta, {PF_OPDEFS_UNPAREN mutated});
  PF_OPDEFS_NORM(PF_X)
#undef PF_X
  return true;
}();

}  // namespace

namespace ops {
namespace {

using Tensors = std::vector<Tensor>;
using autograd::mul;

void check_floating(const Tensor& x, const char* kernel) {
  PF_CHECK(is_floating(x.dtype()), "\"", kernel, "\" not implemented for '", scalar_type_name(x.dtype()), "'");
}

// An optional parameter must match the input's dtype and device (PyTorch's CPU kernels refuse
// mixed dtypes too).
void check_param(const Tensor& p, const Tensor& x) {
  if (!p.defined()) return;
  PF_CHECK(p.dtype() == x.dtype(), "expected scalar type ", scalar_type_name(x.dtype()), " but found ",
           scalar_type_name(p.dtype()));
  PF_CHECK(p.device() == x.device(), "expected all tensors to be on the same device, but found ",
           p.device().str(), " and ", x.device().str());
}

// The (N, C, L) view a per-channel kernel takes: contiguous, dims >= 2 folded into L.
Tensor as_ncl(const Tensor& x) {
  const int64_t n = x.sizes()[0], c = x.dim() > 1 ? x.sizes()[1] : 1;
  return reshape(contiguous(x), {n, c, n * c == 0 ? 0 : x.numel() / (n * c)});
}

// batch norm's (N, C, *) operand: the input itself when it is dense row-major or channels last
// (the kernels take either, and the results keep the layout, as PyTorch's), else a row-major copy.
Tensor batch_norm_operand(const Tensor& x) {
  return x.suggest_memory_format() == MemoryFormat::ChannelsLast ? x : contiguous(x);
}

// The gradient that did not flow (undefined) as zeros, so the fused kernels always get one.
Tensor grad_or_zeros(const Tensor& g, const Tensor& like) {
  return g.defined() ? g : zeros(like.sizes(), like.dtype(), like.device());
}

// A kernel's fresh contiguous output with the caller's shape, as a plain tensor: a reshape
// would make it an autograd view of the kernel output, and an in-place op on the result would
// then rewrite the history of that base (which has none) instead of the result's own.
Tensor result_as(const Tensor& t, const Shape& sizes) {
  return Tensor::view_of(t.storage(), sizes, contiguous_strides(sizes), t.offset(), t.dtype());
}

// Records `node` for (x, weight, bias) -> out; weight/bias may be undefined (no edge).
void record_affine(const std::shared_ptr<autograd::FunctionNode>& node, const Tensor& x, const Tensor& weight,
                   const Tensor& bias, const Tensor& out) {
  autograd::record(node, {x, weight, bias}, {out});
}

// layer_norm / group_norm of an empty input: an empty result whose gradients are zeros shaped
// like the input and the given weight and bias (PyTorch's).
Tensor empty_affine_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, const char* node_name) {
  Tensor out = empty(input.sizes(), input.dtype(), input.device());
  if (autograd::any_requires_grad({&input, &weight, &bias})) {
    auto node = autograd::make_node(node_name, [](const Tensors&, const Tensors& s) -> Tensors {
      const auto zeros_like = [](const Tensor& t) { return t.defined() ? zeros(t.sizes(), t.dtype(), t.device()) : Tensor(); };
      return {zeros_like(s[0]), zeros_like(s[1]), zeros_like(s[2])};
    });
    node->save(input);
    node->save(weight);
    node->save(bias);
    record_affine(node, input, weight, bias, out);
  }
  return out;
}

// ---- composed backward (double backward) -------------------------------------------------------
//
// Under create_graph the gradients must themselves be differentiable, so the backward nodes
// recompute the statistics from x with ops and apply the textbook formulas. Shapes: x and g are
// (R, K) rows that normalize together; `w` broadcasts against (R, K) (undefined: no weight).
// Returns grad_x (R, K) and xhat (R, K), from which the parameter gradients are reductions.
std::pair<Tensor, Tensor> composed_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w, double eps,
                                                 bool batch_stats, const Tensor& fixed_mean,
                                                 const Tensor& fixed_invstd, int64_t stat_dim) {
  Tensor mean, invstd;
  if (batch_stats) {
    mean = reduce("mean", x, {stat_dim}, true);
    const Tensor var = ops::var(x, {stat_dim}, 0, true);
    invstd = unary("rsqrt", binary("add", var, Scalar(eps)));
  } else {
    mean = fixed_mean;
    invstd = fixed_invstd;
  }
  const Tensor xhat = mul(binary("sub", x, mean), invstd);
  const Tensor gw = w.defined() ? mul(g, w) : g;
  if (!batch_stats) return {mul(gw, invstd), xhat};
  const Tensor mean_gw = reduce("mean", gw, {stat_dim}, true);
  const Tensor mean_gw_xhat = reduce("mean", mul(gw, xhat), {stat_dim}, true);
  const Tensor gx = mul(invstd, binary("sub", binary("sub", gw, mean_gw), mul(xhat, mean_gw_xhat)));
  return {gx, xhat};
}

// ---- batch_norm --------------------------------------------------------------------------------

// x is batch_norm_operand's; the gradient takes its layout (an expanded one, from sum(), too).
Tensors batch_norm_backward_fused(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                  const Tensor& save_invstd, bool training) {
  static const OpDef& op = find_op("batch_norm_backward");
  const Tensor w = weight.defined() ? reshape(weight, {x.sizes()[1]}) : x;  // any shape of C elements
  const Tensor in[] = {contiguous(g, x.suggest_memory_format()), x, w, save_mean, save_invstd};
  return call_op(op, in, Attrs{{"training", training}, {"has_weight", weight.defined()}});
}

// The gradients of batch_norm from ops (create_graph); statistics over N and the dims after C.
Tensors batch_norm_backward_composed(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                     const Tensor& save_invstd, bool training, double eps) {
  const Tensor x3 = as_ncl(x);
  const int64_t n = x3.sizes()[0], c = x3.sizes()[1], l = x3.sizes()[2];
  // (C, N * L): one row per channel.
  const Tensor xr = reshape(permute(x3, {1, 0, 2}), {c, n * l});
  const Tensor gr = reshape(permute(reshape(g, x3.sizes()), {1, 0, 2}), {c, n * l});
  const Tensor w = weight.defined() ? reshape(weight, {c, 1}) : Tensor();
  auto [gx, xhat] = composed_norm_backward(gr, xr, w, eps, training, reshape(save_mean, {c, 1}),
                                           reshape(save_invstd, {c, 1}), 1);
  const Tensor gx3 = permute(reshape(gx, {c, n, l}), {1, 0, 2});
  return {contiguous(reshape(gx3, x.sizes()), x.suggest_memory_format()), reduce("sum", mul(gr, xhat), {1}, false),
          reduce("sum", gr, {1}, false)};
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  check_floating(input, "batch_norm");
  PF_CHECK(input.dim() >= 2, "batch_norm: expected a 2-d or higher input (N, C, ...), got a ", input.dim(),
           "-d input");
  PF_CHECK(training || (running_mean.defined() && running_var.defined()),
           "running_mean must be defined in evaluation mode");
  const int64_t c = input.sizes()[1];
  const std::pair<const Tensor*, const char*> params[] = {
      {&running_mean, "running_mean"}, {&running_var, "running_var"}, {&weight, "weight"}, {&bias, "bias"}};
  // PyTorch's "mixed type": a bfloat16 input with float32 parameters (autocast keeps a
  // convolution's bfloat16 output and the module's float32 parameters); the first defined one
  // of weight, bias, running_mean, running_var decides.
  const Tensor* first = nullptr;
  for (const Tensor* p : {&weight, &bias, &running_mean, &running_var})
    if (first == nullptr && p->defined()) first = p;
  const bool mixed = first != nullptr && first->dtype() != input.dtype();
  if (mixed) {  // PyTorch's order: the parameters' type first, then the input's
    for (const auto& [p, name] : params)
      PF_CHECK(!p->defined() || p->dtype() == DType::Float32,
               "mixed dtype (CPU): expect parameter to have scalar type of Float");
    PF_CHECK(input.dtype() == DType::BFloat16, "mixed dtype (CPU): expect input to have scalar type of BFloat16");
  }
  for (const auto& [p, name] : params) {
    if (!p->defined()) continue;
    PF_CHECK(p->numel() == c, name, " should contain ", c, " elements not ", p->numel());
    if (!mixed) {
      check_param(*p, input);
      continue;
    }
    PF_CHECK(p->dtype() == DType::Float32, "mixed dtype (CPU): expect parameter to have scalar type of Float");
    PF_CHECK(p->device() == input.device(), "expected all tensors to be on the same device, but found ",
             p->device().str(), " and ", input.device().str());
  }
  PF_CHECK(running_mean.defined() == running_var.defined(),
           "batch_norm: running_mean and running_var must be given together");
  const bool update_running = training && running_mean.defined();
  const int64_t per_channel = c == 0 ? 0 : input.numel() / c;
  if (input.numel() == 0) {  // PyTorch: an empty output, running statistics untouched
    Tensor out = empty(input.sizes(), input.dtype(), input.device());
    if (autograd::any_requires_grad({&input, &weight, &bias})) {
      auto node = autograd::make_node("NativeBatchNormBackward0", [](const Tensors& g, const Tensors& s) -> Tensors {
        return {zeros(s[0].sizes(), s[0].dtype(), s[0].device()), Tensor(), Tensor()};
      });
      node->save(input);
      record_affine(node, input, weight, bias, out);
    }
    return out;
  }
  PF_CHECK_T(!training || per_channel > 1, ValueError,
             "Expected more than 1 value per channel when training, got input size ", shape_str(input.sizes()));
  if (update_running) {
    PF_CHECK(running_mean.dim() == 1 && running_var.dim() == 1, "batch_norm: running statistics must be 1-d");
    Tensor rm = running_mean, rv = running_var;
    autograd::check_inplace(rm);
    autograd::check_inplace(rv);
  }

  const Tensor x = batch_norm_operand(input);
  // 1-d views of the per-channel tensors (the kernel reads any stride; running statistics are
  // written in place, so they are never copied).
  auto vec = [&](const Tensor& t) { return t.defined() ? reshape(t, {c}) : x; };
  static const OpDef& op = find_op("batch_norm");
  const Tensor in[] = {x, vec(weight), vec(bias), vec(running_mean), vec(running_var)};
  const Attrs attrs{{"training", training},           {"momentum", momentum},
                    {"eps", eps},                     {"has_weight", weight.defined()},
                    {"has_bias", bias.defined()},     {"has_running", running_mean.defined()}};
  Tensors outs = call_op(op, in, attrs);
  if (update_running) {
    running_mean.storage()->bump_version();
    running_var.storage()->bump_version();
  }
  Tensor out = outs[0];
  if (autograd::any_requires_grad({&input, &weight, &bias})) {
    auto node = autograd::make_node(
        "NativeBatchNormBackward0",
        [training, eps, has_weight = weight.defined(), has_bias = bias.defined(),
         wshape = weight.defined() ? weight.sizes() : Shape{}, bshape = bias.defined() ? bias.sizes() : Shape{},
         wdtype = weight.defined() ? weight.dtype() : input.dtype(),
         bdtype = bias.defined() ? bias.dtype() : input.dtype()](const Tensors& g, const Tensors& s) -> Tensors {
          const Tensor weight = has_weight ? s[1] : Tensor();
          const Tensor x = batch_norm_operand(s[0]);
          const Tensor gy = grad_or_zeros(g[0], x);
          Tensors r = autograd::is_grad_enabled()
                          ? batch_norm_backward_composed(gy, x, weight, s[2], s[3], training, eps)
                          : batch_norm_backward_fused(gy, x, weight, s[2], s[3], training);
          // The kernel sums parameter gradients in float32 for a 16-bit input: back to their dtype.
          return {to(r[0], std::nullopt, x.dtype()),
                  has_weight ? to(reshape(r[1], wshape), std::nullopt, wdtype) : Tensor(),
                  has_bias ? to(reshape(r[2], bshape), std::nullopt, bdtype) : Tensor()};
        });
    node->save(input);
    node->save(weight.defined() ? weight : Tensor());
    node->save(outs[1]);
    node->save(outs[2]);
    record_affine(node, input, weight, bias, out);
  }
  return out;
}

// ---- layer_norm ------------------------------------------------------------------------------------

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"layer_norm", {input, weight, bias}})
      return layer_norm(cast[0], normalized_shape, cast[1], cast[2], eps);
  const auto k = static_cast<int64_t>(normalized_shape.size());
  PF_CHECK(k >= 1, "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, "
                   "but got normalized_shape = ", shape_str(normalized_shape));
  PF_CHECK(!weight.defined() || weight.sizes() == normalized_shape,
           "Expected weight to be of same shape as normalized_shape, but got weight of shape ",
           shape_str(weight.defined() ? weight.sizes() : Shape{}), " and normalized_shape = ",
           shape_str(normalized_shape));
  PF_CHECK(!bias.defined() || bias.sizes() == normalized_shape,
           "Expected bias to be of same shape as normalized_shape, but got bias of shape ",
           shape_str(bias.defined() ? bias.sizes() : Shape{}), " and normalized_shape = ",
           shape_str(normalized_shape));
  const int64_t axis = input.dim() - k;
  bool match = axis >= 0;
  for (int64_t i = 0; match && i < k; ++i) match = input.sizes()[axis + i] == normalized_shape[i];
  if (!match) {
    std::string star = "[*";
    for (int64_t s : normalized_shape) star += ", " + std::to_string(s);
    PF_THROW(Error, "Given normalized_shape=", shape_str(normalized_shape), ", expected input with shape ", star,
             "], but got input of size", shape_str(input.sizes()));
  }
  check_floating(input, "LayerNormKernelImpl");
  check_param(weight, input);
  check_param(bias, input);
  const int64_t n = shape_numel(normalized_shape);
  const int64_t m = n == 0 ? 0 : input.numel() / n;
  if (input.numel() == 0) return empty_affine_norm(input, weight, bias, "NativeLayerNormBackward0");
  const Tensor x2 = reshape(contiguous(input), {m, n});
  auto vec = [&](const Tensor& t) { return t.defined() ? contiguous(reshape(t, {n})) : x2; };
  static const OpDef& op = find_op("layer_norm");
  const Tensor in[] = {x2, vec(weight), vec(bias)};
  Tensors outs = call_op(op, in,
                         Attrs{{"eps", eps}, {"has_weight", weight.defined()}, {"has_bias", bias.defined()}});
  Tensor out = result_as(outs[0], input.sizes());
  if (autograd::any_requires_grad({&input, &weight, &bias})) {
    auto node = autograd::make_node(
        "NativeLayerNormBackward0",
        [m, n, eps, normalized_shape, has_weight = weight.defined(), has_bias = bias.defined()](const Tensors& g,
                                                                             const Tensors& s) -> Tensors {
          const Tensor& x = s[0];
          const Tensor weight = has_weight ? s[1] : Tensor();
          const Tensor x2 = reshape(contiguous(x), {m, n});
          const Tensor gy = reshape(contiguous(grad_or_zeros(g[0], x)), {m, n});
          const Tensor w = has_weight ? reshape(weight, {n}) : Tensor();
          Tensors r;
          if (autograd::is_grad_enabled()) {
            auto [gx, xhat] = composed_norm_backward(gy, x2, w, eps, true, Tensor(), Tensor(), 1);
            r = {gx, reduce("sum", mul(gy, xhat), {0}, false), reduce("sum", gy, {0}, false)};
          } else {
            static const OpDef& bop = find_op("layer_norm_backward");
            const Tensor in[] = {gy, x2, has_weight ? contiguous(w) : x2, s[2], s[3]};
            r = call_op(bop, in, Attrs{{"has_weight", has_weight}});
          }
          return {reshape(r[0], x.sizes()), has_weight ? reshape(r[1], normalized_shape) : Tensor(),
                  has_bias ? reshape(r[2], normalized_shape) : Tensor()};
        });
    node->save(input);
    node->save(weight.defined() ? weight : Tensor());
    node->save(outs[1]);
    node->save(outs[2]);
    record_affine(node, input, weight, bias, out);
  }
  return out;
}

// ---- group_norm ------------------------------------------------------------------------------------

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"group_norm", {input, weight, bias}})
      return group_norm(cast[0], num_groups, cast[1], cast[2], eps);
  PF_CHECK_T(input.dim() >= 2, IndexError, "Dimension out of range (expected to be in range of [-", input.dim(),
             ", ", input.dim() - 1, "], but got 1)");
  const int64_t n = input.sizes()[0], c = input.sizes()[1];
  PF_CHECK_T(num_groups != 0, ValueError, "group_norm: num_groups must be positive, got 0");
  PF_CHECK(num_groups > 0 && c % num_groups == 0,
           "Expected number of channels in input to be divisible by num_groups, but got input of shape ",
           shape_str(input.sizes()), " and num_groups=", num_groups);
  PF_CHECK(!weight.defined() || (weight.dim() == 1 && weight.numel() == c),
           "Expected weight to be a vector of size equal to the number of channels in input, but got weight of "
           "shape ", shape_str(weight.defined() ? weight.sizes() : Shape{}), " and input of shape ",
           shape_str(input.sizes()));
  PF_CHECK(!bias.defined() || (bias.dim() == 1 && bias.numel() == c),
           "Expected bias to be a vector of size equal to the number of channels in input, but got bias of shape ",
           shape_str(bias.defined() ? bias.sizes() : Shape{}), " and input of shape ", shape_str(input.sizes()));
  check_floating(input, "GroupNormKernelImpl");
  check_param(weight, input);
  check_param(bias, input);
  if (input.numel() == 0) return empty_affine_norm(input, weight, bias, "NativeGroupNormBackward0");
  const Tensor x3 = as_ncl(input);
  auto vec = [&](const Tensor& t) { return t.defined() ? contiguous(t) : x3; };
  static const OpDef& op = find_op("group_norm");
  const Tensor in[] = {x3, vec(weight), vec(bias)};
  Tensors outs = call_op(op, in,
                         Attrs{{"groups", num_groups},
                               {"eps", eps},
                               {"has_weight", weight.defined()},
                               {"has_bias", bias.defined()}});
  Tensor out = result_as(outs[0], input.sizes());
  if (autograd::any_requires_grad({&input, &weight, &bias})) {
    auto node = autograd::make_node(
        "NativeGroupNormBackward0",
        [num_groups, n, c, eps, has_weight = weight.defined(), has_bias = bias.defined()](
            const Tensors& g, const Tensors& s) -> Tensors {
          const Tensor& x = s[0];
          const Tensor weight = has_weight ? s[1] : Tensor();
          const Tensor x3 = as_ncl(x);
          const Tensor gy = reshape(contiguous(grad_or_zeros(g[0], x)), x3.sizes());
          const int64_t l = x3.sizes()[2];
          Tensors r;
          if (autograd::is_grad_enabled()) {
            // Rows are (n, group); the weight varies along a row by channel.
            const int64_t k = (c / num_groups) * l;
            const Tensor xr = reshape(x3, {n * num_groups, k});
            const Tensor gr = reshape(gy, {n * num_groups, k});
            Tensor w;
            if (has_weight)  // (C) -> (N * G, D * L): each channel's weight repeated over L
              w = reshape(expand(reshape(weight, {1, c, 1}), {n, c, l}), {n * num_groups, k});
            auto [gx, xhat] = composed_norm_backward(gr, xr, w, eps, true, Tensor(), Tensor(), 1);
            const Tensor gxh = reshape(mul(gr, xhat), {n, c, l});
            r = {gx, reduce("sum", gxh, {0, 2}, false), reduce("sum", gy, {0, 2}, false)};
          } else {
            static const OpDef& bop = find_op("group_norm_backward");
            const Tensor in[] = {gy, x3, has_weight ? contiguous(weight) : x3, s[2], s[3]};
            r = call_op(bop, in, Attrs{{"groups", num_groups}, {"has_weight", has_weight}});
          }
          return {reshape(r[0], x.sizes()), has_weight ? r[1] : Tensor(), has_bias ? r[2] : Tensor()};
        });
    node->save(input);
    node->save(weight.defined() ? weight : Tensor());
    node->save(outs[1]);
    node->save(outs[2]);
    record_affine(node, input, weight, bias, out);
  }
  return out;
}

// ---- embedding -------------------------------------------------------------------------------------

namespace {

Tensor embedding_backward(const Tensor& grad, const Tensor& flat_indices, int64_t num_weights, int64_t padding_idx,
                          bool scale_grad_by_freq) {
  const int64_t d = grad.sizes().back();
  const Tensor g2 = reshape(contiguous(grad), {flat_indices.numel(), d});
  if (autograd::is_grad_enabled()) {
    // Differentiable in grad (double backward): index_add of the (masked, scaled) rows.
    Tensor rows = g2;
    if (padding_idx >= 0 || scale_grad_by_freq) {
      Tensor factor = ones({flat_indices.numel()}, grad.dtype(), grad.device());
      if (scale_grad_by_freq) {
        const Tensor counts = index_add(zeros({num_weights}, grad.dtype(), grad.device()), 0, flat_indices,
                                        ones({flat_indices.numel()}, grad.dtype(), grad.device()));
        factor = binary("div", factor, index_select(counts, 0, flat_indices));
      }
      if (padding_idx >= 0)
        factor = mul(factor, autograd::mask_as(binary("ne", flat_indices, Scalar(padding_idx)), grad.dtype()));
      rows = mul(rows, unsqueeze(factor, 1));
    }
    return index_add(zeros({num_weights, d}, grad.dtype(), grad.device()), 0, flat_indices, rows);
  }
  static const OpDef& op = find_op("embedding_backward");
  const Tensor in[] = {g2, flat_indices};
  return call_op(op, in,
                 Attrs{{"num_weights", num_weights},
                       {"padding_idx", padding_idx},
                       {"scale_grad_by_freq", scale_grad_by_freq}})[0];
}

Tensor embedding_indices(const Tensor& indices) {
  PF_CHECK(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32,
           "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got ",
           scalar_type_name(indices.dtype()), " tensor instead (while checking arguments for embedding)");
  return contiguous(reshape(to(indices, std::nullopt, DType::Int64), {indices.numel()}));
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx,
                 bool scale_grad_by_freq) {
  PF_CHECK(weight.dim() == 2, "'weight' must be 2-D");
  const int64_t num_weights = weight.sizes()[0];
  if (padding_idx)
    PF_CHECK(*padding_idx >= 0 && *padding_idx < num_weights, "embedding: padding_idx ", *padding_idx,
             " must be within [0, ", num_weights, ")");
  PF_CHECK(indices.device() == weight.device(), "expected all tensors to be on the same device, but found ",
           indices.device().str(), " and ", weight.device().str());
  const Tensor flat = embedding_indices(indices);
  Shape out_shape = indices.sizes();
  out_shape.push_back(weight.sizes()[1]);
  if (weight.sizes()[1] == 0) {  // no kernel runs for an empty result: index_select checks the indices
    autograd::GradModeGuard no_grad(false);
    index_select(weight, 0, flat);
  }
  static const OpDef& op = find_op("embedding");
  const Tensor in[] = {weight, flat};
  Tensor out = result_as(call_op(op, in)[0], out_shape);
  if (autograd::any_requires_grad({&weight})) {
    const int64_t pad = padding_idx.value_or(-1);
    auto node = autograd::make_node(
        "EmbeddingBackward0", [num_weights, pad, scale_grad_by_freq](const Tensors& g, const Tensors& s) -> Tensors {
          return {embedding_backward(g[0], s[0], num_weights, pad, scale_grad_by_freq)};
        });
    node->save(flat);
    autograd::record(node, {weight}, {out});
  }
  return out;
}

Tensor& embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm, double norm_type) {
  PF_CHECK(weight.dim() == 2, "'weight' must be 2-D");
  autograd::GradModeGuard no_grad(false);  // PyTorch renormalizes under no_grad
  const Tensor flat = embedding_indices(indices);
  if (flat.numel() == 0) return weight;
  // The distinct rows referenced (index_select checks the range).
  const Tensor rows_idx = unique(flat).values;
  const Tensor rows = index_select(weight, 0, rows_idx);
  const Tensor norms = norm(rows, norm_type, {1}, true);
  // PyTorch's scale: max_norm / (norm + 1e-7) for rows over the limit, 1 for the others.
  const Tensor scale = where(binary("gt", norms, Scalar(max_norm)),
                             binary("div", Scalar(max_norm), binary("add", norms, Scalar(1e-7))), Scalar(1.0));
  index_put_(weight, {rows_idx}, mul(rows, scale));
  return weight;
}

// ---- dropout -----------------------------------------------------------------------------------------

namespace {

void check_dropout_p(double p) {
  PF_CHECK_T(p >= 0 && p <= 1, ValueError, "dropout probability has to be between 0 and 1, but got ", p);
}

// The mask of one dropout call (0 or `scale` per element of `shape`, x's dtype) and, when x
// has that shape, x * mask, from one fused kernel. It reserves a counter range of the default
// generator like every random op, so results depend only on the seed and the sequence of calls
// (docs/design.md, "Random numbers").
std::pair<Tensor, Tensor> dropout_kernel(const Tensor& x, double p, double scale) {
  const auto [seed, offset] = default_generator().reserve(static_cast<uint64_t>(x.numel()));
  static const OpDef& op = find_op("dropout");
  const Tensor in[] = {contiguous(x)};
  Tensors outs = call_op(op, in,
                         Attrs{{"p", p}, {"scale", scale}, {"seed", static_cast<int64_t>(seed)},
                               {"offset", static_cast<int64_t>(offset)}});
  return {outs[0], outs[1]};
}

// x * mask with autograd (the mask is a constant): MulBackward through the existing op would
// also work, but a dedicated node keeps PyTorch's name and saves only the mask.
Tensor apply_mask(const Tensor& x, const Tensor& y, const Tensor& mask) {
  if (autograd::any_requires_grad({&x})) {
    auto node = autograd::make_node("NativeDropoutBackward0", [](const Tensors& g, const Tensors& s) -> Tensors {
      return {mul(g[0], s[0])};
    });
    node->save(mask);
    autograd::record(node, {x}, {y});
  }
  return y;
}

// The (N, C, 1, ...) shape of a feature-dropout mask (PyTorch's make_feature_noise).
Shape feature_noise_shape(const Tensor& x) {
  PF_CHECK(x.dim() >= 2, "Feature dropout requires at least 2 dimensions in the input");
  Shape s(x.dim(), 1);
  s[0] = x.sizes()[0];
  s[1] = x.sizes()[1];
  return s;
}

// A 0/scale mask of `shape` in x's dtype.
Tensor draw_mask(const Tensor& x, const Shape& shape, double p, double scale) {
  return dropout_kernel(ones(shape, x.dtype(), x.device()), p, scale).second;
}

// PyTorch's _dropout_impl: what to do before drawing anything. Returns true when `result`
// is the answer.
bool dropout_shortcut(const Tensor& input, double p, bool training, bool inplace, Tensor& result) {
  check_dropout_p(p);
  if (p == 0 || !training || input.numel() == 0) {
    result = input;
    return true;
  }
  if (p == 1) {  // input * 0 keeps the graph (and NaN * 0 = NaN, as PyTorch)
    const Tensor zero = zeros({}, input.dtype(), input.device());
    if (inplace) {
      Tensor t = input;
      binary_("mul", t, zero);
      result = t;
    } else {
      result = binary("mul", input, zero);
    }
    return true;
  }
  check_floating(input, "bernoulli_tensor_cpu_p_");
  return false;
}

constexpr double kSeluAlpha = 1.7580993408473766;  // -SELU's negative saturation value

Tensor alpha_dropout_impl(const Tensor& input, double p, bool training, bool feature, bool inplace) {
  Tensor result;
  if (dropout_shortcut(input, p, training, inplace, result)) return result;
  const Shape shape = feature ? feature_noise_shape(input) : input.sizes();
  const Tensor keep = draw_mask(input, shape, p, 1.0);  // 0/1
  const double a = 1.0 / std::sqrt((kSeluAlpha * kSeluAlpha * p + 1) * (1 - p));
  // b = (keep - 1) * alpha * a + alpha * a * p; out = input * (keep * a) + b.
  const Tensor b = binary("add", mul(binary("sub", keep, Scalar(1.0)), Scalar(kSeluAlpha * a)),
                          Scalar(kSeluAlpha * a * p));
  const Tensor noise = mul(keep, Scalar(a));
  if (inplace) {
    Tensor t = input;
    binary_("mul", t, noise);
    binary_("add", t, b);
    return t;
  }
  return binary("add", binary("mul", input, noise), b);
}

}  // namespace

Tensor dropout(const Tensor& input, double p, bool training) {
  Tensor result;
  if (dropout_shortcut(input, p, training, false, result)) return result;
  auto [y, mask] = dropout_kernel(input, p, 1.0 / (1.0 - p));
  return apply_mask(input, y, mask);
}

Tensor& dropout_(Tensor& input, double p, bool training) {
  Tensor result;
  if (dropout_shortcut(input, p, training, true, result)) return input;
  return binary_("mul", input, draw_mask(input, input.sizes(), p, 1.0 / (1.0 - p)));
}

Tensor feature_dropout(const Tensor& input, double p, bool training) {
  Tensor result;
  if (dropout_shortcut(input, p, training, false, result)) return result;
  return binary("mul", input, draw_mask(input, feature_noise_shape(input), p, 1.0 / (1.0 - p)));
}

Tensor& feature_dropout_(Tensor& input, double p, bool training) {
  Tensor result;
  if (dropout_shortcut(input, p, training, true, result)) return input;
  return binary_("mul", input, draw_mask(input, feature_noise_shape(input), p, 1.0 / (1.0 - p)));
}

Tensor alpha_dropout(const Tensor& input, double p, bool training, bool feature) {
  return alpha_dropout_impl(input, p, training, feature, false);
}

Tensor& alpha_dropout_(Tensor& input, double p, bool training, bool feature) {
  alpha_dropout_impl(input, p, training, feature, true);
  return input;
}

// ---- losses --------------------------------------------------------------------------------------------

namespace {

void check_reduction(const std::string& reduction) {
  PF_CHECK_T(reduction == "none" || reduction == "mean" || reduction == "sum", ValueError, reduction,
             " is not a valid value for reduction");
}

// The class dim of a loss input: 1, or 0 for a single unbatched (C) input.
int64_t class_dim(const Tensor& input) { return input.dim() == 1 ? 0 : 1; }

void check_loss_target(const Tensor& input, const Tensor& target) {
  PF_CHECK_T(input.dim() >= 1, ValueError, "Expected 1 or more dimensions (got ", input.dim(), ")");
  PF_CHECK(target.dtype() == DType::Int64, "expected scalar type Long but found ", scalar_type_name(target.dtype()));
  if (input.dim() == 1) {
    PF_CHECK(target.dim() == 0, "size mismatch (got input: ", shape_str(input.sizes()), ", target: ",
             shape_str(target.sizes()), ")");
    return;
  }
  PF_CHECK_T(target.dim() >= 1 && target.sizes()[0] == input.sizes()[0], ValueError, "Expected input batch_size (",
             input.sizes()[0], ") to match target batch_size (", target.dim() >= 1 ? target.sizes()[0] : 0, ").");
  if (input.dim() == 2) {
    PF_CHECK(target.dim() == 1, "1D target tensor expected, multi-target not supported");
    return;
  }
  Shape expected = input.sizes();
  expected.erase(expected.begin() + 1);
  PF_CHECK(target.sizes() == expected, "Expected target size ", shape_str(expected), ", got ",
           shape_str(target.sizes()));
}

}  // namespace

Tensor nll_loss(const Tensor& input, const Tensor& target_in, const Tensor& weight, const std::string& reduction,
                int64_t ignore_index) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"nll_loss", {input, target_in, weight}})
      return nll_loss(cast[0], cast[1], cast[2], reduction, ignore_index);
  check_reduction(reduction);
  check_loss_target(input, target_in);
  check_floating(input, "nll_loss_forward_out_frame");
  const int64_t cdim = class_dim(input);
  const int64_t classes = input.sizes()[cdim];
  if (weight.defined()) {
    PF_CHECK(weight.dim() == 1 && weight.numel() == classes, "weight tensor should be defined either for all ",
             classes, " classes or no classes but got weight tensor of shape: ", shape_str(weight.sizes()));
    check_param(weight, input);
  }
  const Tensor& target = target_in;
  const Tensor ignored = binary("eq", target, Scalar(ignore_index));
  const Tensor used = autograd::mask_as(unary("logical_not", ignored), input.dtype());
  const Tensor safe_target = where(ignored, Scalar(int64_t{0}), target);
  // An index outside [0, C) (and not ignore_index) is an error, as PyTorch's kernel asserts.
  // (A static graph cannot read it on the host: gather's kernel raises instead.)
  if (safe_target.numel() > 0 && !graph::capturing()) {
    const Tensor lo = reduce("amin", safe_target, {}, false), hi = reduce("amax", safe_target, {}, false);
    const int64_t vmin = *to(lo, Device{}, std::nullopt).data<int64_t>();  // host copies (any device)
    const int64_t vmax = *to(hi, Device{}, std::nullopt).data<int64_t>();
    PF_CHECK_T(vmin >= 0 && vmax < classes, IndexError, "Target ", vmin < 0 ? vmin : vmax, " is out of bounds.");
  }
  const Tensor picked = squeeze(gather(input, cdim, unsqueeze(safe_target, cdim)), cdim);
  Tensor w = used;  // the weight of each target, 0 where ignored
  if (weight.defined())
    w = mul(reshape(index_select(weight, 0, reshape(safe_target, {safe_target.numel()})), safe_target.sizes()), used);
  const Tensor loss = unary("neg", mul(picked, w));
  if (reduction == "none") return loss;
  const Tensor total = reduce("sum", loss, {}, false);
  if (reduction == "sum") return total;
  return binary("div", total, reduce("sum", w, {}, false));
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, const std::string& reduction,
                     int64_t ignore_index, double label_smoothing) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"cross_entropy", {input, target, weight}})
      return cross_entropy(cast[0], cast[1], cast[2], reduction, ignore_index, label_smoothing);
  check_reduction(reduction);
  PF_CHECK(label_smoothing >= 0 && label_smoothing <= 1,
             "label_smoothing must be between 0.0 and 1.0. Got: ", label_smoothing);
  check_loss_target(input, target);
  const int64_t cdim = class_dim(input);
  const Tensor logp = log_softmax(input, cdim);
  const Tensor nll = nll_loss(logp, target, weight, reduction, ignore_index);
  if (label_smoothing == 0) return nll;
  // PyTorch's label smoothing: (1 - e) * nll + e / C * smooth, where smooth is the (weighted)
  // sum of -log p over the classes, reduced like the nll term.
  const int64_t classes = input.sizes()[cdim];
  const Tensor& target64 = target;
  const Tensor ignored = binary("eq", target64, Scalar(ignore_index));
  Tensor wlogp = logp;
  if (weight.defined()) {
    Shape wshape(input.dim(), 1);
    wshape[cdim] = classes;
    wlogp = mul(logp, reshape(weight, wshape));
  }
  Tensor smooth = unary("neg", reduce("sum", wlogp, {cdim}, false));
  smooth = where(ignored, Scalar(0.0), smooth);
  Tensor ret;
  if (reduction == "none") {
    ret = smooth;
  } else if (reduction == "sum") {
    ret = reduce("sum", smooth, {}, false);
  } else {
    Tensor denom;
    const Tensor used = autograd::mask_as(unary("logical_not", ignored), input.dtype());
    if (weight.defined()) {
      const Tensor safe = where(ignored, Scalar(int64_t{0}), target64);
      denom = reduce("sum", mul(reshape(index_select(weight, 0, reshape(safe, {safe.numel()})), safe.sizes()), used),
                     {}, false);
    } else {
      denom = reduce("sum", used, {}, false);
    }
    ret = binary("div", reduce("sum", smooth, {}, false), denom);
  }
  return binary("add", mul(nll, Scalar(1 - label_smoothing)), mul(ret, Scalar(label_smoothing / classes)));
}

}  // namespace ops
}  // namespace plugflow
