// Fused ops: catalog entries (defined in core/opdefs/fused.yaml) of the kernels that nn.Graph's
// fusion passes substitute for chains of ordinary ops (docs/kernels.md, "Fused ops"). They have
// no functional API and no autograd: only graph passes create them, after backward has been
// recorded, and a pass checks that the device has a kernel before it rewrites. Their meta
// functions reuse the plain ops' checks.
//
// The epilogue they share: out = act(result + bias + addend), in that order (the order of the
// unfused ops, and of oneDNN's post-ops: bias, sum, eltwise), each step rounded to the dtype as
// the separate ops round.
#include <string>

#include "plugflow/error.h"
#include "plugflow/op.h"
#include "opdefs.h"

namespace plugflow {
namespace {

// The activations a fused epilogue may end with (PyTorch's functions, as the unary ops compute
// them): none, relu, gelu (erf form), gelu_tanh, silu.
void check_activation(const Attrs& attrs, bool relu_only, const char* op) {
  const std::string& a = attrs.get<std::string>("activation");
  const bool ok = a == "none" || a == "relu" || (!relu_only && (a == "gelu" || a == "gelu_tanh" || a == "silu"));
  PF_CHECK_T(ok, ValueError, op, ": unsupported activation '", a, "'");
}

// The operands after the plain op's: `flags` name the optional ones, in order.
size_t optional_count(const Attrs& attrs, std::initializer_list<const char*> flags) {
  size_t n = 0;
  for (const char* f : flags) n += attrs.get<bool>(f);
  return n;
}

void check_addend(const Tensor& addend, const TensorMeta& out, const char* op) {
  PF_CHECK(addend.sizes() == out.sizes, op, ": the addend must have the output's shape ", shape_str(out.sizes),
           ", got ", shape_str(addend.sizes()));
  PF_CHECK_T(addend.dtype() == out.dtype, TypeError, op, ": the addend must have the output's dtype");
}

// input, weight, [bias], [addend] -> act(conv2d(input, weight, bias) + addend).
std::vector<TensorMeta> conv2d_fused_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const bool has_bias = attrs.get<bool>("has_bias"), has_addend = attrs.get<bool>("has_addend");
  PF_CHECK(in.size() == 2u + has_bias + has_addend, "conv2d_fused: expected ",
           2 + has_bias + has_addend, " operands, got ", in.size());
  check_activation(attrs, false, "conv2d_fused");
  std::vector<TensorMeta> out = find_op("conv2d").meta(in.first(2 + has_bias), attrs);
  if (has_addend) check_addend(in.back(), out[0], "conv2d_fused");
  return out;
}

// a (M, K), b (K, N), [bias (N)], [addend (M, N)] -> act(a @ b + bias + addend), and with
// save_pre the value before the activation too (a training graph's activation backward reads it).
std::vector<TensorMeta> mm_fused_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const bool has_bias = attrs.get<bool>("has_bias"), has_addend = attrs.get<bool>("has_addend");
  PF_CHECK(in.size() == 2u + has_bias + has_addend, "mm_fused: expected ",
           2 + has_bias + has_addend, " operands, got ", in.size());
  check_activation(attrs, false, "mm_fused");
  std::vector<TensorMeta> out = find_op("mm").meta(in.first(2), attrs);
  if (has_bias) {
    const Tensor& bias = in[2];
    PF_CHECK(bias.dim() == 1 && bias.sizes()[0] == out[0].sizes[1], "mm_fused: the bias must have ",
             out[0].sizes[1], " elements, got shape ", shape_str(bias.sizes()));
    PF_CHECK_T(bias.dtype() == out[0].dtype, TypeError, "mm_fused: the bias must have the operands' dtype");
  }
  if (has_addend) check_addend(in.back(), out[0], "mm_fused");
  if (attrs.get<bool>("save_pre")) out.push_back(out[0]);
  return out;
}

// batch_norm's operands, [addend] -> act(batch_norm(x) + addend), save_mean, save_invstd.
std::vector<TensorMeta> batch_norm_fused_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const bool has_addend = attrs.get<bool>("has_addend");
  PF_CHECK(in.size() == 5u + has_addend, "batch_norm_fused: expected ", 5 + has_addend, " operands, got ", in.size());
  check_activation(attrs, true, "batch_norm_fused");
  std::vector<TensorMeta> out = find_op("batch_norm").meta(in.first(5), attrs);
  if (has_addend) check_addend(in[5], out[0], "batch_norm_fused");
  return out;
}

// grad, out (batch_norm_fused's relu output), x, weight, save_mean, save_invstd -> grad_x,
// grad_weight, grad_bias, and with has_grad_pre the gradient before the relu.
std::vector<TensorMeta> batch_norm_relu_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  PF_CHECK(in.size() == 6, "batch_norm_relu_backward: expected 6 operands, got ", in.size());
  PF_CHECK(in[1].sizes() == in[0].sizes() && in[1].dtype() == in[0].dtype(),
           "batch_norm_relu_backward: the relu output must have the gradient's shape and dtype");
  const std::vector<Tensor> plain{in[0], in[2], in[3], in[4], in[5]};
  std::vector<TensorMeta> out = find_op("batch_norm_backward").meta(plain, attrs);
  if (attrs.get<bool>("has_grad_pre")) out.push_back(out[0]);
  return out;
}

// weight (O, ...), [bias (O)], [bn_weight (O)], [bn_bias (O)], running_mean (O), running_var (O)
// -> the convolution's weight and bias with eval-mode batch norm folded in.
std::vector<TensorMeta> fold_conv_bn_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const size_t expected = 3 + optional_count(attrs, {"has_bias", "has_bn_weight", "has_bn_bias"});
  PF_CHECK(in.size() == expected, "fold_conv_bn: expected ", expected, " operands, got ", in.size());
  const Tensor& w = in[0];
  PF_CHECK_T(is_floating(w.dtype()) && w.dim() >= 1, TypeError, "fold_conv_bn: expected a floating weight");
  const int64_t o = w.sizes()[0];
  for (size_t i = 1; i < in.size(); ++i) {
    PF_CHECK(in[i].dim() == 1 && in[i].sizes()[0] == o, "fold_conv_bn: per-channel operands must have ", o,
             " elements, got shape ", shape_str(in[i].sizes()));
    PF_CHECK_T(in[i].dtype() == w.dtype(), TypeError, "fold_conv_bn: operands must have the weight's dtype");
  }
  PF_CHECK(w.is_contiguous(), "fold_conv_bn: the weight must be contiguous");
  attrs.get<double>("eps");
  return {{w.sizes(), w.dtype(), w.device()}, {{o}, w.dtype(), w.device()}};
}

// The catalog entries of core/opdefs/fused.yaml, with the meta functions above.
const bool kFusedOpsRegistered = [] {
#define PF_X(name, signature, meta, mutated) register_op(name, signature, meta, {PF_OPDEFS_UNPAREN mutated});
  PF_OPDEFS_FUSED(PF_X)
#undef PF_X
  return true;
}();

}  // namespace
}  // namespace plugflow
