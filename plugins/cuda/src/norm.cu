// The norm family (docs/kernels.md, "Norm family") on CUDA: batch_norm (+ the graph's fused
// batch_norm + add + relu and their backward), layer_norm, group_norm and their backward,
// embedding and its dense backward, dropout. The CPU kernels' arithmetic, step for step
// (plugins/cpu/src/norm.cpp), with the formulas both share from plugins/common/nn_math.h:
//
//   * statistics accumulate in double, as shifted sums (the slice's first element as shift);
//     outputs are computed from x - mean in the input's type (its mean split into hi + lo),
//     float for float16/bfloat16; this file is compiled with --fmad=false, so every product
//     and sum rounds as on the CPU;
//   * one block per channel (batch_norm), row (layer_norm) or (sample, group) slice
//     (group_norm) reduces with block_sum and then writes its slice; parameter gradients that
//     sum across rows (layer_norm's, group_norm's) are a second kernel with a thread per column;
//   * float16/bfloat16 layer/group norm and embedding_backward compute in float, as the CPU's
//     float32 copies do; batch_norm's 16-bit path is the CPU's "reduced" one (float32 saved
//     statistics and parameter gradients, parameters bfloat16/float16 or float32);
//   * embedding_backward adds rows with atomics (float accumulation for the 16-bit types):
//     the order of additions of duplicate indices varies from run to run, so results differ
//     from the CPU's by float rounding only;
//   * dropout draws element i from Philox counter offset + i / 4, word i % 4, as the CPU.
#include <cmath>
#include <optional>

#include "index_check.cuh"
#include "nn_common.cuh"
#include "opdefs.h"
#include "plugflow/philox.h"
#include "row_major_outputs.h"

namespace plugflow::cuda {
namespace {

using nn_math::SplitMean;

constexpr int kNormThreads = 256;

void check_contiguous(const KernelContext& ctx, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    PF_CHECK(t->is_contiguous(), "cuda '", ctx.op.name, "' kernel needs contiguous inputs (the functional layer makes them)");
}

// Calls f(type_tag<T>) for a floating dtype (a registration mistake otherwise).
template <typename F>
void dispatch_float(const KernelContext& ctx, DType t, F&& f) {
  dispatch_supported<FloatTypes>(ctx, t, std::forward<F>(f));
}

// The gradient through the fused relu, relu_backward(g, out): 0 where out <= 0 (a NaN output
// passes the gradient, as PyTorch's threshold_backward); g itself without a relu. In opmath.
template <typename D>
PF_DEVICE opmath_t<D> relu_masked(const D* grad, const D* relu_out, int64_t off) {
  using C = opmath_t<D>;
  return relu_out && to_opmath(relu_out[off]) <= C(0) ? C(0) : to_opmath(grad[off]);
}

// ---- batch_norm ---------------------------------------------------------------------------------

struct BatchNormArgs {
  int64_t n, c, l;
  bool training, has_running, relu;
  double momentum, eps;
  ChannelVec weight, bias, running_mean, running_var, save_mean, save_invstd;
};

// One block per channel: statistics (training) or the running ones (eval), then the channel's
// outputs. D is the storage type; 16-bit types take the CPU's reduced path (the affine map in
// float, rounded to D where the separate ops round: batch_norm's output, then the add's).
template <typename D>
__global__ void batch_norm_channel_kernel(BatchNormArgs a, const D* x, D* y, const D* addend) {
  using C = opmath_t<D>;
  constexpr bool reduced = is_reduced_float_v<D>;
  const int64_t count = a.n * a.l;
  __shared__ double stat_mean, stat_invstd;
  for (int64_t ch = blockIdx.x; ch < a.c; ch += gridDim.x) {
    if (a.training) {
      const double shift = nn_math::assumed_mean(static_cast<double>(to_opmath(x[ch * a.l])));
      double s[2] = {0.0, 0.0};
      for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
        const int64_t i = e / a.l, j = e - i * a.l;
        const double d = static_cast<double>(to_opmath(x[(i * a.c + ch) * a.l + j])) - shift;
        s[0] += d;
        s[1] += d * d;
      }
      block_sum(s);
      if (threadIdx.x == 0) {
        double mean, var;
        nn_math::moments(s[0], s[1], shift, count, mean, var);
        if (a.has_running) {
          a.running_mean.set(ch, nn_math::running_mean_update(a.running_mean.get(ch), mean, a.momentum));
          a.running_var.set(ch, nn_math::running_var_update(a.running_var.get(ch), var, count, a.momentum));
        }
        stat_mean = mean;
        stat_invstd = 1.0 / ::sqrt(var + a.eps);
      }
    } else if (threadIdx.x == 0) {
      stat_mean = a.running_mean.get(ch);
      stat_invstd = 1.0 / ::sqrt(a.running_var.get(ch) + a.eps);
    }
    __syncthreads();
    const double mean = stat_mean, invstd = stat_invstd;
    if (threadIdx.x == 0) {
      a.save_mean.set(ch, mean);
      a.save_invstd.set(ch, invstd);
    }
    if constexpr (reduced) {
      const float m = static_cast<float>(mean);
      const float scale = static_cast<float>(invstd * (a.weight.present() ? a.weight.get(ch) : 1.0));
      const float shift = static_cast<float>(a.bias.present() ? a.bias.get(ch) : 0.0);
      for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
        const int64_t i = e / a.l, off = (i * a.c + ch) * a.l + (e - i * a.l);
        float v = static_cast<float>(cast_to<D>((static_cast<float>(x[off]) - m) * scale + shift));
        if (addend) v = static_cast<float>(cast_to<D>(v + static_cast<float>(addend[off])));
        if (a.relu && v < 0.0f) v = 0.0f;
        y[off] = cast_to<D>(v);
      }
    } else {
      const SplitMean<C> split(mean);
      const C scale = static_cast<C>(invstd) * (a.weight.present() ? static_cast<C>(a.weight.get(ch)) : C(1));
      const C shift = a.bias.present() ? static_cast<C>(a.bias.get(ch)) : C(0);
      for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
        const int64_t i = e / a.l, off = (i * a.c + ch) * a.l + (e - i * a.l);
        C v = split.centre(x[off]) * scale + shift;
        if (addend) v = v + addend[off];
        if (a.relu && v < C(0)) v = C(0);
        y[off] = v;
      }
    }
    __syncthreads();  // stat_mean / stat_invstd are rewritten for the next channel
  }
}

unsigned channel_blocks(int64_t c) { return static_cast<unsigned>(std::min<int64_t>(c, 65535)); }

// batch_norm and batch_norm_fused (the graph's batch_norm + add + relu).
void batch_norm_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& x = ctx.input(0);
  const bool has_addend = ctx.attrs.has("has_addend") && ctx.attr<bool>("has_addend");
  check_contiguous(ctx, {&x});
  if (has_addend) check_contiguous(ctx, {&ctx.input(5)});
  BatchNormArgs a{};
  a.n = x.sizes()[0], a.c = x.sizes()[1], a.l = a.n * a.c == 0 ? 0 : x.numel() / (a.n * a.c);  // (N, C, *)
  a.training = ctx.attr<bool>("training");
  a.has_running = ctx.attr<bool>("has_running");
  a.relu = ctx.attrs.has("activation") && ctx.attr<std::string>("activation") == "relu";
  a.momentum = ctx.attr<double>("momentum");
  a.eps = ctx.attr<double>("eps");
  a.weight = channel_vec(ctx.input(1), ctx.attr<bool>("has_weight"));
  a.bias = channel_vec(ctx.input(2), ctx.attr<bool>("has_bias"));
  const bool read_running = a.has_running || !a.training;
  a.running_mean = channel_vec(ctx.input(3), read_running);
  a.running_var = channel_vec(ctx.input(4), read_running);
  a.save_mean = channel_vec(ctx.output(1), true);
  a.save_invstd = channel_vec(ctx.output(2), true);
  if (a.c == 0) return;
  dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const D* addend = has_addend ? static_cast<const D*>(ctx.input(5).data_ptr()) : nullptr;
    batch_norm_channel_kernel<D><<<channel_blocks(a.c), kNormThreads, 0, scope.stream>>>(
        a, static_cast<const D*>(x.data_ptr()), static_cast<D*>(ctx.output(0).data_ptr()), addend);
    PF_CUDA_CHECK_LAUNCH();
  });
}

struct BatchNormBackwardArgs {
  int64_t n, c, l;
  bool training;
  ChannelVec weight, mean, invstd, grad_weight, grad_bias;
};

// One block per channel: sum(g) and sum(g * (x - mean)), then grad_x. `relu_out` (the fused
// relu's output) masks the gradient, g' = (out <= 0 ? 0 : g), stored into grad_pre when given.
template <typename D>
__global__ void batch_norm_backward_channel_kernel(BatchNormBackwardArgs a, const D* grad, const D* relu_out,
                                                   const D* x, D* grad_x, D* grad_pre) {
  using C = opmath_t<D>;
  constexpr bool reduced = is_reduced_float_v<D>;
  const int64_t count = a.n * a.l;
  for (int64_t ch = blockIdx.x; ch < a.c; ch += gridDim.x) {
    const double mean = a.mean.get(ch), invstd = a.invstd.get(ch);
    double s[2] = {0.0, 0.0};
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
      const int64_t i = e / a.l, off = (i * a.c + ch) * a.l + (e - i * a.l);
      const double gd = static_cast<double>(relu_masked(grad, relu_out, off));
      s[0] += gd;
      s[1] += gd * (static_cast<double>(to_opmath(x[off])) - mean);
    }
    block_sum(s);
    const double sum_g = s[0], dot = s[1];
    if (threadIdx.x == 0) {
      a.grad_weight.set(ch, dot * invstd);
      a.grad_bias.set(ch, sum_g);
    }
    const nn_math::BatchNormGradCoefs k = nn_math::batch_norm_grad_coefs(
        a.training, a.weight.present() ? a.weight.get(ch) : 1.0, invstd, sum_g, dot, count);
    if constexpr (reduced) {  // the CPU's reduced path: the full formula even in eval mode
      const float ka = static_cast<float>(k.a), kb = static_cast<float>(k.b), kc = static_cast<float>(k.c);
      const float m = static_cast<float>(mean);
      for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
        const int64_t i = e / a.l, off = (i * a.c + ch) * a.l + (e - i * a.l);
        const float g = relu_masked(grad, relu_out, off);
        if (grad_pre) grad_pre[off] = cast_to<D>(g);  // exact: g is a D value or 0
        grad_x[off] = cast_to<D>(g * ka + (static_cast<float>(x[off]) - m) * kb + kc);
      }
    } else {
      const C ka = static_cast<C>(k.a), kb = static_cast<C>(k.b), kc = static_cast<C>(k.c);
      const SplitMean<C> split(mean);
      for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
        const int64_t i = e / a.l, off = (i * a.c + ch) * a.l + (e - i * a.l);
        const C g = relu_masked(grad, relu_out, off);
        if (grad_pre) grad_pre[off] = g;
        // eval: the input does not enter, so an infinite one gives no NaN (as PyTorch)
        grad_x[off] = a.training ? g * ka + split.centre(x[off]) * kb + kc : g * ka;
      }
    }
  }
}

// batch_norm_backward (grad, x, weight, save_mean, save_invstd) and batch_norm_relu_backward
// (grad, relu_out, x, weight, save_mean, save_invstd; grad_pre as a 4th output when asked).
void batch_norm_backward_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const bool masked = ctx.op.name == "batch_norm_relu_backward";
  const int xi = masked ? 2 : 1;
  const Tensor& x = ctx.input(xi);
  check_contiguous(ctx, {&ctx.input(0), &x});
  if (masked) check_contiguous(ctx, {&ctx.input(1)});
  BatchNormBackwardArgs a{};
  a.n = x.sizes()[0], a.c = x.sizes()[1], a.l = a.n * a.c == 0 ? 0 : x.numel() / (a.n * a.c);  // (N, C, *)
  a.training = ctx.attr<bool>("training");
  a.weight = channel_vec(ctx.input(xi + 1), ctx.attr<bool>("has_weight"));
  a.mean = channel_vec(ctx.input(xi + 2), true);
  a.invstd = channel_vec(ctx.input(xi + 3), true);
  a.grad_weight = channel_vec(ctx.output(1), true);
  a.grad_bias = channel_vec(ctx.output(2), true);
  const bool has_grad_pre = masked && ctx.attr<bool>("has_grad_pre");
  if (a.c == 0) return;
  dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    batch_norm_backward_channel_kernel<D><<<channel_blocks(a.c), kNormThreads, 0, scope.stream>>>(
        a, static_cast<const D*>(ctx.input(0).data_ptr()),
        masked ? static_cast<const D*>(ctx.input(1).data_ptr()) : nullptr, static_cast<const D*>(x.data_ptr()),
        static_cast<D*>(ctx.output(0).data_ptr()), has_grad_pre ? static_cast<D*>(ctx.output(3).data_ptr()) : nullptr);
    PF_CUDA_CHECK_LAUNCH();
  });
}

// ---- layer_norm / group_norm -----------------------------------------------------------------------

// Mean and 1/sqrt(var + eps) of k contiguous elements (a row or a group slice), by the block.
template <typename D>
__device__ void slice_stats(const D* s, int64_t k, double eps, double& mean, double& rstd) {
  const double shift = nn_math::assumed_mean(static_cast<double>(to_opmath(s[0])));
  double v[2] = {0.0, 0.0};
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
    const double d = static_cast<double>(to_opmath(s[j])) - shift;
    v[0] += d;
    v[1] += d * d;
  }
  block_sum(v);
  double var;
  nn_math::moments(v[0], v[1], shift, k, mean, var);
  rstd = 1.0 / ::sqrt(var + eps);
}

// One block per row: y = (x - mean) * rstd * w + b, in C (float for the 16-bit types, as the
// CPU's float32 copies), rounded once to D.
template <typename D>
__global__ void layer_norm_row_kernel(int64_t m, int64_t n, double eps, const D* x, const D* w, const D* b, D* y,
                                      D* mean_out, D* rstd_out) {
  using C = opmath_t<D>;
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const D* row = x + r * n;
    double mean, rstd;
    slice_stats(row, n, eps, mean, rstd);
    if (threadIdx.x == 0) {
      mean_out[r] = cast_to<D>(static_cast<C>(mean));
      rstd_out[r] = cast_to<D>(static_cast<C>(rstd));
    }
    const SplitMean<C> mu(mean);
    const C scale = static_cast<C>(rstd);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      C v = mu.centre(to_opmath(row[j])) * scale;
      if (w) v = v * to_opmath(w[j]);
      if (b) v = v + to_opmath(b[j]);
      y[r * n + j] = cast_to<D>(v);
    }
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, 65535)); }

template <typename D>
const D* optional_ptr(const KernelContext& ctx, int input, const char* flag) {
  return ctx.attr<bool>(flag) ? static_cast<const D*>(ctx.input(input).data_ptr()) : nullptr;
}

void layer_norm_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& x = ctx.input(0);
  check_contiguous(ctx, {&x, &ctx.input(1), &ctx.input(2)});
  const int64_t m = x.sizes()[0], n = x.sizes()[1];
  if (m == 0 || n == 0) return;
  dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    layer_norm_row_kernel<D><<<row_blocks(m), kNormThreads, 0, scope.stream>>>(
        m, n, ctx.attr<double>("eps"), static_cast<const D*>(x.data_ptr()), optional_ptr<D>(ctx, 1, "has_weight"),
        optional_ptr<D>(ctx, 2, "has_bias"), static_cast<D*>(ctx.output(0).data_ptr()),
        static_cast<D*>(ctx.output(1).data_ptr()), static_cast<D*>(ctx.output(2).data_ptr()));
    PF_CUDA_CHECK_LAUNCH();
  });
}

// grad_x per row: rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)), as g * (w * rstd) +
// (x - mean) * b + c with b = -rstd^2 * mean(g*w*xhat), c = -rstd * mean(g*w).
template <typename D>
__global__ void layer_norm_backward_row_kernel(int64_t m, int64_t n, const D* grad, const D* x, const D* w,
                                               const D* mean_in, const D* rstd_in, D* grad_x) {
  using C = opmath_t<D>;
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const D* g = grad + r * n;
    const D* xr = x + r * n;
    const double mean = static_cast<double>(to_opmath(mean_in[r])), rstd = static_cast<double>(to_opmath(rstd_in[r]));
    double s[2] = {0.0, 0.0};  // sum(g*w), sum(g*w*xhat)
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double xhat = (static_cast<double>(to_opmath(xr[j])) - mean) * rstd;
      double gw = static_cast<double>(to_opmath(g[j]));
      if (w) gw *= static_cast<double>(to_opmath(w[j]));
      s[0] += gw;
      s[1] += gw * xhat;
    }
    block_sum(s);
    const double b = -rstd * rstd * s[1] / static_cast<double>(n), c = -rstd * s[0] / static_cast<double>(n);
    const C tr = static_cast<C>(rstd), tb = static_cast<C>(b), tc = static_cast<C>(c);
    const SplitMean<C> mu(mean);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const C a = w ? to_opmath(w[j]) * tr : tr;
      grad_x[r * n + j] = cast_to<D>(to_opmath(g[j]) * a + mu.centre(to_opmath(xr[j])) * tb + tc);
    }
  }
}

// grad_weight[j] = sum over rows of g * xhat, grad_bias[j] = sum of g: a thread per column (a
// warp reads 32 neighbouring columns of a row).
template <typename D>
__global__ void layer_norm_param_grad_kernel(int64_t m, int64_t n, const D* grad, const D* x, const D* mean_in,
                                             const D* rstd_in, D* grad_w, D* grad_b) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += step) {
    double sw = 0, sb = 0;
    for (int64_t r = 0; r < m; ++r) {
      const double g = static_cast<double>(to_opmath(grad[r * n + j]));
      const double mean = static_cast<double>(to_opmath(mean_in[r])), rstd = static_cast<double>(to_opmath(rstd_in[r]));
      sw += g * ((static_cast<double>(to_opmath(x[r * n + j])) - mean) * rstd);
      sb += g;
    }
    grad_w[j] = cast_to<D>(static_cast<opmath_t<D>>(sw));
    grad_b[j] = cast_to<D>(static_cast<opmath_t<D>>(sb));
  }
}

void layer_norm_backward_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& x = ctx.input(1);
  check_contiguous(ctx, {&ctx.input(0), &x, &ctx.input(2), &ctx.input(3), &ctx.input(4)});
  const int64_t m = x.sizes()[0], n = x.sizes()[1];
  if (n == 0) return;
  dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const D* g = static_cast<const D*>(ctx.input(0).data_ptr());
    const D* xp = static_cast<const D*>(x.data_ptr());
    const D* mean = static_cast<const D*>(ctx.input(3).data_ptr());
    const D* rstd = static_cast<const D*>(ctx.input(4).data_ptr());
    if (m > 0) {
      layer_norm_backward_row_kernel<D><<<row_blocks(m), kNormThreads, 0, scope.stream>>>(
          m, n, g, xp, optional_ptr<D>(ctx, 2, "has_weight"), mean, rstd, static_cast<D*>(ctx.output(0).data_ptr()));
      PF_CUDA_CHECK_LAUNCH();
    }
    layer_norm_param_grad_kernel<D><<<scope.blocks_for(n), kBlockThreads, 0, scope.stream>>>(
        m, n, g, xp, mean, rstd, static_cast<D*>(ctx.output(1).data_ptr()), static_cast<D*>(ctx.output(2).data_ptr()));
    PF_CUDA_CHECK_LAUNCH();
  });
}

struct GroupShape {
  int64_t n, c, l, groups, d, k;  // d channels and k = d * l elements per group
};
GroupShape group_shape(const Tensor& x, int64_t groups) {
  const int64_t c = x.sizes()[1], l = x.sizes()[2];
  return {x.sizes()[0], c, l, groups, c / groups, (c / groups) * l};
}

// One block per (sample, group) slice r of k contiguous elements: its statistics, then
// y = (x - mean) * (rstd * w[ch]) + b[ch].
template <typename D>
__global__ void group_norm_slice_kernel(GroupShape s, double eps, const D* x, const D* w, const D* b, D* y,
                                        D* mean_out, D* rstd_out) {
  using C = opmath_t<D>;
  for (int64_t r = blockIdx.x; r < s.n * s.groups; r += gridDim.x) {
    const D* slice = x + r * s.k;
    double mean, rstd;
    slice_stats(slice, s.k, eps, mean, rstd);
    if (threadIdx.x == 0) {
      mean_out[r] = cast_to<D>(static_cast<C>(mean));
      rstd_out[r] = cast_to<D>(static_cast<C>(rstd));
    }
    const SplitMean<C> mu(mean);
    const int64_t c_first = (r % s.groups) * s.d;
    for (int64_t e = threadIdx.x; e < s.k; e += blockDim.x) {
      const int64_t ch = c_first + e / s.l;
      const C scale = static_cast<C>(rstd) * (w ? to_opmath(w[ch]) : C(1));
      y[r * s.k + e] = cast_to<D>(mu.centre(to_opmath(slice[e])) * scale + (b ? to_opmath(b[ch]) : C(0)));
    }
  }
}

void group_norm_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& x = ctx.input(0);
  check_contiguous(ctx, {&x, &ctx.input(1), &ctx.input(2)});
  const GroupShape s = group_shape(x, ctx.attr<int64_t>("groups"));
  if (s.n * s.groups == 0 || s.k == 0) return;
  dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    group_norm_slice_kernel<D><<<row_blocks(s.n * s.groups), kNormThreads, 0, scope.stream>>>(
        s, ctx.attr<double>("eps"), static_cast<const D*>(x.data_ptr()), optional_ptr<D>(ctx, 1, "has_weight"),
        optional_ptr<D>(ctx, 2, "has_bias"), static_cast<D*>(ctx.output(0).data_ptr()),
        static_cast<D*>(ctx.output(1).data_ptr()), static_cast<D*>(ctx.output(2).data_ptr()));
    PF_CUDA_CHECK_LAUNCH();
  });
}

// group_norm_backward, pass 1: per (sample, channel) row of l elements, sum(g) and
// sum(g * (x - mean)) with its group's mean.
template <typename D>
__global__ void group_norm_row_sums_kernel(GroupShape s, const D* grad, const D* x, const D* mean_in, double* sum_g,
                                           double* dot) {
  for (int64_t row = blockIdx.x; row < s.n * s.c; row += gridDim.x) {
    const double mean = static_cast<double>(to_opmath(mean_in[row / s.d]));
    double v[2] = {0.0, 0.0};
    for (int64_t j = threadIdx.x; j < s.l; j += blockDim.x) {
      const double g = static_cast<double>(to_opmath(grad[row * s.l + j]));
      v[0] += g;
      v[1] += g * (static_cast<double>(to_opmath(x[row * s.l + j])) - mean);
    }
    block_sum(v);
    if (threadIdx.x == 0) {
      sum_g[row] = v[0];
      dot[row] = v[1];
    }
  }
}

// Pass 2, one block per (sample, group) slice: gx = g * (w_c * rstd) + (x - mean) * b + c with
// b = -rstd^3 * sum_c(w_c * dot_c) / K, c = -rstd * sum_c(w_c * sum_g_c) / K.
template <typename D>
__global__ void group_norm_grad_input_kernel(GroupShape s, const D* grad, const D* x, const D* w, const D* mean_in,
                                             const D* rstd_in, const double* sum_g, const double* dot, D* grad_x) {
  using C = opmath_t<D>;
  for (int64_t r = blockIdx.x; r < s.n * s.groups; r += gridDim.x) {
    const double mean = static_cast<double>(to_opmath(mean_in[r])), rstd = static_cast<double>(to_opmath(rstd_in[r]));
    const int64_t c_first = (r % s.groups) * s.d, row0 = r * s.d;
    double v[2] = {0.0, 0.0};  // sum_c w_c * sum_g_c, sum_c w_c * dot_c
    for (int64_t j = threadIdx.x; j < s.d; j += blockDim.x) {
      const double wc = w ? static_cast<double>(to_opmath(w[c_first + j])) : 1.0;
      v[0] += wc * sum_g[row0 + j];
      v[1] += wc * dot[row0 + j];
    }
    block_sum(v);
    const C tb = static_cast<C>(-rstd * rstd * rstd * v[1] / static_cast<double>(s.k));
    const C tc = static_cast<C>(-rstd * v[0] / static_cast<double>(s.k));
    const SplitMean<C> mu(mean);
    for (int64_t e = threadIdx.x; e < s.k; e += blockDim.x) {
      const int64_t off = r * s.k + e;
      const double wc = w ? static_cast<double>(to_opmath(w[c_first + e / s.l])) : 1.0;
      grad_x[off] = cast_to<D>(to_opmath(grad[off]) * static_cast<C>(wc * rstd) + mu.centre(to_opmath(x[off])) * tb + tc);
    }
  }
}

// Pass 3, a thread per channel: grad_weight = sum_i dot * rstd, grad_bias = sum_i sum_g.
template <typename D>
__global__ void group_norm_param_grad_kernel(GroupShape s, const D* rstd_in, const double* sum_g, const double* dot,
                                             D* grad_w, D* grad_b) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; ch < s.c; ch += step) {
    double sw = 0, sb = 0;
    for (int64_t i = 0; i < s.n; ++i) {
      sw += dot[i * s.c + ch] * static_cast<double>(to_opmath(rstd_in[i * s.groups + ch / s.d]));
      sb += sum_g[i * s.c + ch];
    }
    grad_w[ch] = cast_to<D>(static_cast<opmath_t<D>>(sw));
    grad_b[ch] = cast_to<D>(static_cast<opmath_t<D>>(sb));
  }
}

void group_norm_backward_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& x = ctx.input(1);
  check_contiguous(ctx, {&ctx.input(0), &x, &ctx.input(2), &ctx.input(3), &ctx.input(4)});
  const GroupShape s = group_shape(x, ctx.attr<int64_t>("groups"));
  if (s.c == 0) return;
  const int64_t rows = std::max<int64_t>(1, s.n * s.c);
  Workspace sums(scope.device, 2 * static_cast<size_t>(rows) * sizeof(double));
  double* sum_g = sums.as<double>();
  double* dot = sum_g + rows;
  PF_CUDA_CHECK(cudaMemsetAsync(sum_g, 0, 2 * static_cast<size_t>(rows) * sizeof(double), scope.stream));
  dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const D* g = static_cast<const D*>(ctx.input(0).data_ptr());
    const D* xp = static_cast<const D*>(x.data_ptr());
    const D* w = optional_ptr<D>(ctx, 2, "has_weight");
    const D* mean = static_cast<const D*>(ctx.input(3).data_ptr());
    const D* rstd = static_cast<const D*>(ctx.input(4).data_ptr());
    if (s.n > 0 && s.l > 0) {
      group_norm_row_sums_kernel<D><<<row_blocks(s.n * s.c), kNormThreads, 0, scope.stream>>>(s, g, xp, mean, sum_g, dot);
      PF_CUDA_CHECK_LAUNCH();
      group_norm_grad_input_kernel<D><<<row_blocks(s.n * s.groups), kNormThreads, 0, scope.stream>>>(
          s, g, xp, w, mean, rstd, sum_g, dot, static_cast<D*>(ctx.output(0).data_ptr()));
      PF_CUDA_CHECK_LAUNCH();
    }
    group_norm_param_grad_kernel<D><<<scope.blocks_for(s.c), kBlockThreads, 0, scope.stream>>>(
        s, rstd, sum_g, dot, static_cast<D*>(ctx.output(1).data_ptr()), static_cast<D*>(ctx.output(2).data_ptr()));
    PF_CUDA_CHECK_LAUNCH();
  });
}

// ---- embedding -------------------------------------------------------------------------------------

[[noreturn]] void embedding_index_error(int64_t index, int64_t size) {
  PF_THROW(IndexError, "index out of range in self (index ", index, " is out of bounds for an embedding of size ",
           size, ")");
}

// out[i, j] = weight[indices[i], j], copied as E-byte words (every dtype); a bad index is
// recorded and its row skipped.
template <typename E>
__global__ void embedding_gather_kernel(int64_t m, int64_t d, int64_t v, const int64_t* idx, const E* w,
                                        int64_t row_stride, int64_t col_stride, E* out, BadIndex* bad) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < m * d; e += step) {
    const int64_t i = e / d, j = e - i * d, row = idx[i];
    if (row < 0 || row >= v) {
      report_bad_index(bad, row, 0);
      continue;
    }
    out[e] = w[row * row_stride + j * col_stride];
  }
}

template <typename E>
void launch_embedding(const KernelScope& scope, const Tensor& w, const Tensor& idx, const Tensor& out, BadIndex* bad) {
  const int64_t m = idx.sizes()[0], d = w.sizes()[1];
  embedding_gather_kernel<E><<<scope.blocks_for(m * d), kBlockThreads, 0, scope.stream>>>(
      m, d, w.sizes()[0], static_cast<const int64_t*>(idx.data_ptr()), static_cast<const E*>(w.data_ptr()),
      w.strides()[0], w.strides()[1], static_cast<E*>(out.data_ptr()), bad);
  PF_CUDA_CHECK_LAUNCH();
}

void embedding_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& w = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const Tensor& out = ctx.output(0);
  check_contiguous(ctx, {&idx});
  PF_CHECK(out.is_contiguous(), "cuda 'embedding' writes a contiguous output");
  if (idx.numel() == 0 || w.sizes()[1] == 0) return;
  BadIndexCheck check(scope);
  switch (w.itemsize()) {
    case 1: launch_embedding<uint8_t>(scope, w, idx, out, check.slot()); break;
    case 2: launch_embedding<uint16_t>(scope, w, idx, out, check.slot()); break;
    case 4: launch_embedding<uint32_t>(scope, w, idx, out, check.slot()); break;
    default: launch_embedding<uint64_t>(scope, w, idx, out, check.slot()); break;
  }
  if (const auto bad = check.wait()) embedding_index_error(bad->value, w.sizes()[0]);
}

// Bounds check of the indices and, with scale_grad_by_freq, their counts.
__global__ void embedding_count_kernel(int64_t m, int64_t v, const int64_t* idx, int* counts, BadIndex* bad) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m; i += step) {
    const int64_t row = idx[i];
    if (row < 0 || row >= v) report_bad_index(bad, row, 0);
    else if (counts) atomicAdd(counts + row, 1);
  }
}

// acc[indices[i], j] += grad[i, j] (* 1 / count), skipping padding_idx; A is D for float32 and
// float64, float for the 16-bit types (the CPU's float32 copy), so the scale is 1 / count in A.
template <typename D, typename A>
__global__ void embedding_scatter_kernel(int64_t m, int64_t d, int64_t padding, const int64_t* idx, const D* grad,
                                         const int* counts, A* acc) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < m * d; e += step) {
    const int64_t i = e / d, row = idx[i];
    if (row == padding) continue;
    A g = static_cast<A>(to_opmath(grad[e]));
    if (counts) g = g * (A(1) / static_cast<A>(counts[row]));
    atomicAdd(acc + row * d + (e - i * d), g);
  }
}

template <typename D>
__global__ void cast_from_float_kernel(int64_t n, const float* in, D* out) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = cast_to<D>(in[i]);
}

void embedding_backward_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& g = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const Tensor& out = ctx.output(0);
  check_contiguous(ctx, {&g, &idx});
  PF_CHECK(out.is_contiguous(), "cuda 'embedding_backward' writes a contiguous output");
  const int64_t m = g.sizes()[0], d = g.sizes()[1];
  const int64_t v = ctx.attr<int64_t>("num_weights"), padding = ctx.attr<int64_t>("padding_idx");
  const bool by_freq = ctx.attr<bool>("scale_grad_by_freq");
  const size_t out_elems = static_cast<size_t>(v * d);
  const bool reduced = itemsize(g.dtype()) == 2;
  // The 16-bit dtypes accumulate in a float32 buffer, cast once at the end.
  std::optional<Workspace> acc32, counts;
  if (reduced) acc32.emplace(scope.device, std::max<size_t>(1, out_elems) * sizeof(float));
  if (by_freq) counts.emplace(scope.device, std::max<size_t>(1, static_cast<size_t>(v)) * sizeof(int));
  int* count_ptr = by_freq ? counts->as<int>() : nullptr;
  void* acc = reduced ? acc32->as<void>() : out.data_ptr();
  PF_CUDA_CHECK(cudaMemsetAsync(acc, 0, out_elems * (reduced ? sizeof(float) : out.itemsize()), scope.stream));
  if (by_freq) PF_CUDA_CHECK(cudaMemsetAsync(count_ptr, 0, static_cast<size_t>(v) * sizeof(int), scope.stream));
  if (m > 0) {
    BadIndexCheck check(scope);
    embedding_count_kernel<<<scope.blocks_for(m), kBlockThreads, 0, scope.stream>>>(
        m, v, static_cast<const int64_t*>(idx.data_ptr()), count_ptr, check.slot());
    PF_CUDA_CHECK_LAUNCH();
    if (const auto bad = check.wait()) embedding_index_error(bad->value, v);
  }
  dispatch_float(ctx, g.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    using A = opmath_t<D>;
    if (m > 0 && d > 0) {
      embedding_scatter_kernel<D, A><<<scope.blocks_for(m * d), kBlockThreads, 0, scope.stream>>>(
          m, d, padding, static_cast<const int64_t*>(idx.data_ptr()), static_cast<const D*>(g.data_ptr()),
          count_ptr, static_cast<A*>(acc));
      PF_CUDA_CHECK_LAUNCH();
    }
    if constexpr (is_reduced_float_v<D>) {
      if (out_elems > 0) {
        cast_from_float_kernel<D><<<scope.blocks_for(static_cast<int64_t>(out_elems)), kBlockThreads, 0, scope.stream>>>(
            static_cast<int64_t>(out_elems), acc32->as<float>(), static_cast<D*>(out.data_ptr()));
        PF_CUDA_CHECK_LAUNCH();
      }
    }
  });
}

// ---- dropout ---------------------------------------------------------------------------------------

// One Philox draw (counter offset + q) serves elements 4q .. 4q + 3: mask = keep ? scale : 0
// (the scale rounded to D, as the CPU's), y = x * mask rounded once.
template <typename D>
__global__ void dropout_kernel_impl(int64_t numel, uint64_t seed, uint64_t offset, uint32_t threshold, D scale,
                                    const D* x, D* y, D* mask) {
  const int64_t quads = (numel + 3) / 4;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += step) {
    uint32_t w[4];
    Philox4x32::generate(seed, offset + static_cast<uint64_t>(q), w);
    const int64_t base = q * 4, end = numel - base < 4 ? numel - base : 4;
    for (int64_t j = 0; j < end; ++j) {
      const D m = nn_math::dropout_keeps(w[j], threshold) ? scale : cast_to<D>(0.0f);
      mask[base + j] = m;
      y[base + j] = cast_to<D>(to_opmath(x[base + j]) * to_opmath(m));
    }
  }
}

void dropout_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& x = ctx.input(0);
  check_contiguous(ctx, {&x});
  for (int o = 0; o < 2; ++o) PF_CHECK(ctx.output(o).is_contiguous(), "cuda 'dropout' kernel writes contiguous outputs");
  const int64_t numel = x.numel();
  if (numel == 0) return;
  const uint32_t threshold = nn_math::dropout_threshold(ctx.attr<double>("p"));
  const auto seed = static_cast<uint64_t>(ctx.attr<int64_t>("seed"));
  const auto offset = static_cast<uint64_t>(ctx.attr<int64_t>("offset"));
  dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const D scale = cast_to<D>(ctx.attr<double>("scale"));
    dropout_kernel_impl<D><<<scope.blocks_for((numel + 3) / 4), kBlockThreads, 0, scope.stream>>>(
        numel, seed, offset, threshold, scale, static_cast<const D*>(x.data_ptr()),
        static_cast<D*>(ctx.output(0).data_ptr()), static_cast<D*>(ctx.output(1).data_ptr()));
    PF_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

std::vector<KernelDef> norm_kernels() {
  const std::vector<DType> bf16_floats = {DType::BFloat16, DType::Float32, DType::Float64};
  const std::vector<DType> all_floats = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
  return {
      // float16 batch norm is CUDA-only (autocast on CUDA runs batch norm in float16, as PyTorch).
      // Channels-last activations run the row-major kernels on row-major copies.
      {"batch_norm", all_floats, &with_row_major_operands<batch_norm_kernel>},
      {"batch_norm_backward", all_floats, &with_row_major_operands<batch_norm_backward_kernel>},
      {"batch_norm_fused", bf16_floats, &with_row_major_operands<batch_norm_kernel>},
      {"batch_norm_relu_backward", bf16_floats, &with_row_major_operands<batch_norm_backward_kernel>},
      {"layer_norm", all_floats, &layer_norm_kernel},
      {"layer_norm_backward", all_floats, &layer_norm_backward_kernel},
      {"group_norm", all_floats, &group_norm_kernel},
      {"group_norm_backward", all_floats, &group_norm_backward_kernel},
      {"embedding_backward", all_floats, &embedding_backward_kernel},
      // core/opdefs/norm.yaml names the kernel function and dtypes of embedding and dropout.
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) {name, {PF_OPDEFS_UNPAREN cuda_dtypes}, fn},
      PF_OPDEFS_NORM_KERNELS(PF_X)
#undef PF_X
  };
}

}  // namespace plugflow::cuda
