// The fused ops of nn.Graph's passes (docs/kernels.md, "Fused ops"), the plugin's own kernels:
// the float64 path, and the fallback of the oneDNN kernels (onednn/conv.cpp, onednn/fused.cpp)
// for what oneDNN does not take.
//
// conv2d_fused and mm_fused run the plain op's kernel, then their epilogue with the plain add
// and activation kernels (the dispatcher's choice for the device and dtype): the same kernels in
// the same order as the unfused graph, so results are bit-identical to it; the gain of these
// kernels is one node instead of three, the oneDNN kernels' is the epilogue done in registers.
// batch_norm_fused and batch_norm_relu_backward live with batch norm (norm.cpp).
#include <cmath>
#include <string>
#include <vector>

#include "kernels.h"
#include "loops.h"
#include "plugflow/dispatch.h"

namespace plugflow::cpu {
namespace {

// Runs op `name`'s kernel for the plugin's device on `in` -> `out`.
void run_kernel(const KernelContext& ctx, const char* name, std::vector<Tensor> in, std::vector<Tensor> out,
                const Attrs& attrs) {
  const OpDef& op = find_op(name);
  KernelContext inner{op, in, out, attrs, ctx.device, ctx.stream};
  find_kernel(op, DeviceType::CPU, in[0].dtype())(inner);
}

bool same_memory(const Tensor& a, const Tensor& b) { return a.data_ptr() == b.data_ptr(); }

}  // namespace

void fused_epilogue(const KernelContext& ctx, const Tensor& result, const Tensor* bias, const Tensor* addend,
                    const std::string& activation, const Tensor& out) {
  const Attrs add_attrs{{"alpha", Scalar(1)}};
  Tensor acc = result;
  if (bias) {  // a (N) bias over the rows of a (M, N) result; in place while out is the addend
    const Tensor row = Tensor::view_of(bias->storage(), acc.sizes(), {0, bias->strides()[0]}, bias->offset(),
                                       bias->dtype());
    const Tensor target = addend && same_memory(*addend, out) ? result : out;
    run_kernel(ctx, "add", {acc, row}, {target}, add_attrs);
    acc = target;
  }
  if (addend) {
    run_kernel(ctx, "add", {acc, *addend}, {out}, add_attrs);
    acc = out;
  }
  if (activation == "none") {
    if (!same_memory(acc, out)) copy_tensor(out, acc);
  } else if (activation == "relu" || activation == "silu") {
    run_kernel(ctx, activation.c_str(), {acc}, {out}, {});
  } else {
    run_kernel(ctx, "gelu", {acc}, {out}, {{"approximate", std::string(activation == "gelu" ? "none" : "tanh")}});
  }
}

void conv2d_fused_native(KernelContext& ctx) {
  const bool has_bias = ctx.attr<bool>("has_bias"), has_addend = ctx.attr<bool>("has_addend");
  const Tensor* addend = has_addend ? &ctx.inputs.back() : nullptr;
  Tensor& out = ctx.output(0);
  // The convolution (with its bias) into the output, or into a temporary when the output is the
  // addend's memory (the graph writes the sum in place of a dying addend).
  const Tensor conv = addend && same_memory(*addend, out) ? Tensor::empty(out.sizes(), out.dtype(), out.device()) : out;
  std::vector<Tensor> in(ctx.inputs.begin(), ctx.inputs.begin() + 2 + has_bias);
  run_kernel(ctx, "conv2d", in, {conv}, ctx.attrs);
  fused_epilogue(ctx, conv, nullptr, addend, ctx.attr<std::string>("activation"), out);
}

void mm_fused_native(KernelContext& ctx) {
  const bool has_bias = ctx.attr<bool>("has_bias"), has_addend = ctx.attr<bool>("has_addend");
  const Tensor* addend = has_addend ? &ctx.inputs.back() : nullptr;
  const std::string& activation = ctx.attr<std::string>("activation");
  // With save_pre the value before the activation is the second output; the activation reads it.
  Tensor& out = ctx.output(0);
  const Tensor& pre = ctx.attr<bool>("save_pre") ? ctx.output(1) : out;
  const Tensor product = addend && same_memory(*addend, pre) ? Tensor::empty(pre.sizes(), pre.dtype(), pre.device()) : pre;
  run_kernel(ctx, "mm", {ctx.input(0), ctx.input(1)}, {product}, {});
  fused_epilogue(ctx, product, has_bias ? &ctx.input(2) : nullptr, addend, "none", pre);
  if (activation != "none") fused_epilogue(ctx, pre, nullptr, nullptr, activation, out);
}

namespace {

// w' = w * s and b' = (b - mean) * s + beta with s = gamma / sqrt(var + eps) per output channel,
// in double, rounded once to T.
template <typename T>
void fold_conv_bn_typed(const KernelContext& ctx) {
  const bool has_bias = ctx.attr<bool>("has_bias"), has_gamma = ctx.attr<bool>("has_bn_weight");
  const bool has_beta = ctx.attr<bool>("has_bn_bias");
  const double eps = ctx.attr<double>("eps");
  size_t next = 1;
  auto vector = [&](bool present) -> const Tensor* { return present ? &ctx.input(next++) : nullptr; };
  const Tensor* bias = vector(has_bias);
  const Tensor* gamma = vector(has_gamma);
  const Tensor* beta = vector(has_beta);
  const Tensor& mean = ctx.input(next);
  const Tensor& var = ctx.input(next + 1);
  const Tensor& w = ctx.input(0);
  const int64_t o = w.sizes()[0], per_channel = o == 0 ? 0 : w.numel() / o;
  auto at = [](const Tensor* t, int64_t i) { return static_cast<double>(t->data<T>()[i * t->strides()[0]]); };
  const T* wp = w.data<T>();
  T* wout = ctx.output(0).data<T>();
  T* bout = ctx.output(1).data<T>();
  for (int64_t c = 0; c < o; ++c) {
    const double s = (gamma ? at(gamma, c) : 1.0) / std::sqrt(at(&var, c) + eps);
    for (int64_t i = c * per_channel; i < (c + 1) * per_channel; ++i)
      wout[i] = static_cast<T>(static_cast<double>(wp[i]) * s);
    bout[c] = static_cast<T>(((bias ? at(bias, c) : 0.0) - at(&mean, c)) * s + (beta ? at(beta, c) : 0.0));
  }
}

void fold_conv_bn_kernel(KernelContext& ctx) {
  visit_dtype(ctx.input(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) fold_conv_bn_typed<T>(ctx);
    else PF_THROW(NotImplementedError, "cpu 'fold_conv_bn' supports float32 and float64");
  });
}

}  // namespace

void register_fused_kernels(Registrar& reg) {
  const auto floats = {DType::Float32, DType::Float64};
  reg.kernel("conv2d_fused", DeviceType::CPU, floats, conv2d_fused_native);
  reg.kernel("mm_fused", DeviceType::CPU, floats, mm_fused_native);
  reg.kernel("fold_conv_bn", DeviceType::CPU, floats, fold_conv_bn_kernel);
}

}  // namespace plugflow::cpu
