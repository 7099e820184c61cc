#include "fused_compose.h"

#include <cmath>
#include <vector>

#include "plugflow/device.h"
#include "plugflow/dispatch.h"
#include "plugflow/op.h"

namespace plugflow::fused_compose {
namespace {

// Runs op `name`'s kernel for the calling kernel's device on `in` -> `out`.
void run_kernel(const KernelContext& ctx, const char* name, std::vector<Tensor> in, std::vector<Tensor> out,
                const Attrs& attrs) {
  const OpDef& op = find_op(name);
  KernelContext inner{op, in, out, attrs, ctx.device, ctx.stream};
  find_kernel(op, ctx.device.type, in[0].dtype())(inner);
}

bool same_memory(const Tensor& a, const Tensor& b) { return a.data_ptr() == b.data_ptr(); }

// A dense host copy of a device tensor (the tensor itself on the CPU).
Tensor on_host(const KernelContext& ctx, const Tensor& t) {
  if (ctx.device.is_cpu()) return t;
  Tensor dense = t;
  if (!t.is_contiguous()) {
    dense = Tensor::empty(t.sizes(), t.dtype(), t.device());
    run_kernel(ctx, "copy", {t}, {dense}, {});
  }
  Tensor host = Tensor::empty(t.sizes(), t.dtype(), Device{DeviceType::CPU, 0});
  device_backend(ctx.device).copy_to_host(ctx.device.index, host.data_ptr(), dense.data_ptr(), t.numel() * t.itemsize());
  return host;
}

template <typename T>
void fold_conv_bn_typed(const KernelContext& ctx) {
  const bool has_bias = ctx.attr<bool>("has_bias"), has_gamma = ctx.attr<bool>("has_bn_weight");
  const bool has_beta = ctx.attr<bool>("has_bn_bias");
  const double eps = ctx.attr<double>("eps");
  size_t next = 1;
  auto vector = [&](bool present) { return present ? on_host(ctx, ctx.input(next++)) : Tensor(); };
  const Tensor bias = vector(has_bias), gamma = vector(has_gamma), beta = vector(has_beta);
  const Tensor mean = on_host(ctx, ctx.input(next)), var = on_host(ctx, ctx.input(next + 1));
  const Tensor w = on_host(ctx, ctx.input(0));
  PF_CHECK(w.is_contiguous(), "fold_conv_bn: the weight must be contiguous");
  const Device cpu{DeviceType::CPU, 0};
  const Tensor wout = ctx.device.is_cpu() ? ctx.output(0) : Tensor::empty(w.sizes(), w.dtype(), cpu);
  const Tensor bout = ctx.device.is_cpu() ? ctx.output(1) : Tensor::empty(ctx.output(1).sizes(), w.dtype(), cpu);
  const int64_t o = w.sizes()[0], per_channel = o == 0 ? 0 : w.numel() / o;
  auto at = [](const Tensor& t, int64_t i) { return static_cast<double>(t.data<T>()[i * t.strides()[0]]); };
  const T* wp = w.data<T>();
  T* wo = wout.data<T>();
  T* bo = bout.data<T>();
  for (int64_t c = 0; c < o; ++c) {
    const double s = (gamma.defined() ? at(gamma, c) : 1.0) / std::sqrt(at(var, c) + eps);
    for (int64_t i = c * per_channel; i < (c + 1) * per_channel; ++i)
      wo[i] = static_cast<T>(static_cast<double>(wp[i]) * s);
    bo[c] = static_cast<T>(((bias.defined() ? at(bias, c) : 0.0) - at(mean, c)) * s +
                           (beta.defined() ? at(beta, c) : 0.0));
  }
  if (ctx.device.is_cpu()) return;
  for (int k = 0; k < 2; ++k) {  // the outputs the dispatcher allocated are dense
    const Tensor& host = k == 0 ? wout : bout;
    PF_CHECK(ctx.output(k).is_contiguous(), "fold_conv_bn: outputs must be contiguous");
    device_backend(ctx.device).copy_from_host(ctx.device.index, ctx.output(k).data_ptr(), host.data_ptr(),
                                              host.numel() * host.itemsize());
  }
}

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
    if (!same_memory(acc, out)) run_kernel(ctx, "copy", {acc}, {out}, {});
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

void fold_conv_bn_native(KernelContext& ctx) {
  const DType dt = ctx.input(0).dtype();
  if (dt == DType::Float32) fold_conv_bn_typed<float>(ctx);
  else if (dt == DType::Float64) fold_conv_bn_typed<double>(ctx);
  else PF_THROW(NotImplementedError, "'fold_conv_bn' supports float32 and float64, got ", dtype_name(dt));
}

}  // namespace plugflow::fused_compose
