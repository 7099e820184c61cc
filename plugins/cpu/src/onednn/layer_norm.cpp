// layer_norm (docs/kernels.md, "Norm family") on oneDNN's layer_normalization_forward for
// float32, registered with Priority::Optimized over the plugin's own kernel (norm.cpp), which
// stays the float64 path and this file's fallback (non-contiguous operands, which it refuses
// with its own error; mixed dtypes; the shapes below).
//
// The op's x is (M, N), normalized per row. oneDNN computes the variance, plugflow saves
// rstd = 1 / sqrt(var + eps); the mean goes straight to the op's output.
//
// Where oneDNN is faster (medians, float32, weight and bias, ms, 1 thread; native / oneDNN):
// (1024, 128) 0.061 / 0.049, (1024, 768) 0.295 / 0.249, (4096, 768) 1.21 / 0.97,
// (4096, 128) 0.334 / 0.248; but (64, 256) 0.009 / 0.011, (256, 256) 0.029 / 0.032,
// (128, 768) 0.037 / 0.036 and (8192, 64) 0.274 / 0.304: oneDNN's fixed cost per call and per
// row outweighs its faster arithmetic below 2^17 elements or 128 per row, so those run natively.
// layer_norm_backward stays native: oneDNN's takes one more pass over x and the gradient for
// grad_weight/grad_bias, e.g. (1024, 768) 0.77 / 0.91, (4096, 768) 3.4 / 4.1,
// (4096, 128) 0.51 / 0.72, (1024, 128) 0.136 / 0.131.
#include <bit>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "../kernels.h"
#include "common.h"
#include "plugflow/error.h"

namespace plugflow::cpu::onednn {
namespace {

constexpr int64_t kMinElements = int64_t{1} << 17, kMinRow = 128;

// oneDNN subtracts the mean rounded to float: y is off by up to |mean| * rstd * 2^-24 (as in
// PyTorch's float32 kernel). The native kernel keeps the mean's rounding remainder, so a call
// with a row whose |mean| exceeds 64 standard deviations (error > 4e-6) is redone natively.
constexpr double kMaxMeanOverStd = 64;

void layer_norm_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const bool has_weight = ctx.attr<bool>("has_weight"), has_bias = ctx.attr<bool>("has_bias");
  const Tensor& w = has_weight ? ctx.input(1) : x;
  const Tensor& b = has_bias ? ctx.input(2) : x;
  const int64_t m = x.sizes()[0], n = x.sizes()[1];
  bool take = m * n >= kMinElements && n >= kMinRow;
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &w, &b, &ctx.output(0), &ctx.output(1),
                                                              &ctx.output(2)})
    take &= t->dtype() == DType::Float32 && t->is_contiguous();
  if (!take) return layer_norm_native(ctx);
  const double eps = ctx.attr<double>("eps");
  const auto flags = (has_weight ? dnnl::normalization_flags::use_scale : dnnl::normalization_flags::none) |
                     (has_bias ? dnnl::normalization_flags::use_shift : dnnl::normalization_flags::none);
  const memory::desc data({m, n}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc stat({m}, memory::data_type::f32, memory::format_tag::a);
  const memory::desc vec({n}, memory::data_type::f32, memory::format_tag::a);
  std::vector<float> var(static_cast<size_t>(m));
  const auto attempt = [&] {
    const std::string key = "layer_norm " + std::to_string(m) + "x" + std::to_string(n) + " flags=" +
                            std::to_string(static_cast<unsigned>(flags)) + " eps=" +
                            std::to_string(std::bit_cast<uint32_t>(static_cast<float>(eps)));
    const dnnl::primitive p = cached_primitive(key, [&] {
      return dnnl::layer_normalization_forward(
          {{dnnl::prop_kind::forward_training, data, stat, static_cast<float>(eps), flags}, engine()});
    });
    const dnnl::engine& eng = engine();
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, memory(data, eng, x.data_ptr())},
                                            {DNNL_ARG_DST, memory(data, eng, ctx.output(0).data_ptr())},
                                            {DNNL_ARG_MEAN, memory(stat, eng, ctx.output(1).data_ptr())},
                                            {DNNL_ARG_VARIANCE, memory(stat, eng, var.data())}};
    if (has_weight) args.emplace(DNNL_ARG_SCALE, memory(vec, eng, w.data_ptr()));
    if (has_bias) args.emplace(DNNL_ARG_SHIFT, memory(vec, eng, b.data_ptr()));
    p.execute(stream(), args);
    stream().wait();
    const float* mean = ctx.output(1).data<float>();
    float* rstd = ctx.output(2).data<float>();
    bool precise = true;
    for (int64_t r = 0; r < m; ++r) {
      const double rs = 1.0 / std::sqrt(static_cast<double>(var[r]) + eps);
      rstd[r] = static_cast<float>(rs);
      precise &= std::abs(static_cast<double>(mean[r])) * rs <= kMaxMeanOverStd;
    }
    return precise;  // else the native kernel redoes the call
  };
  run_or_fall_back(ctx, attempt, [&] { layer_norm_native(ctx); });
}

}  // namespace
}  // namespace plugflow::cpu::onednn

namespace plugflow::cpu {

void register_onednn_layer_norm_kernels(Registrar& reg) {
  reg.kernel("layer_norm", DeviceType::CPU, {DType::Float32}, onednn::layer_norm_kernel, Priority::Optimized);
}

}  // namespace plugflow::cpu
