// Kernels of the `optim` family (docs/kernels.md, "Optimizer family"): one SGD or Adam/AdamW
// step for one dense parameter in a single pass over its memory, instead of the five to ten
// elementwise passes of the op-by-op update.
//
// Each element follows PyTorch 1.13's single-tensor order of operations with every scalar
// rounded to the parameter's dtype first (what the op-by-op path does when it multiplies by a
// Python number), so float32 results equal that path's. The plugin is built with ISO C++
// (-ffp-contract=off) and without -ffast-math, so the compiler neither fuses a multiply into an
// add nor reassociates. The per-call branches are template flags, so the loops are branch-free
// (SGD's vectorizes; Adam's stays scalar, see adam_loop). The multi-tensor steps of nn.Graph's
// fuse_model_update run the same loops over all parameters of a group at once.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels.h"
#include "loops.h"
#include "opdefs.h"
#include "parallel.h"
#include "plugflow/ops_optim.h"

// Fused multiply-adds only where written (std::fma: where PyTorch's kernels have them), none
// contracted by the compiler from a * b + c: every step below then rounds as PyTorch's op-by-op
// optimizer does (AdamW's param.mul_ is its own op). The loops' FMA clones would contract.
#pragma GCC optimize("fp-contract=off")

namespace plugflow::cpu {
namespace {

void check_dense(const KernelContext& ctx, int n) {
  for (int i = 0; i < n; ++i)
    PF_CHECK(ctx.input(i).is_contiguous(), "cpu '", ctx.op.name, "' kernel needs contiguous operands");
}

template <typename F>
void dispatch_float(const KernelContext& ctx, F&& f) {
  const DType dt = ctx.input(0).dtype();
  if (dt == DType::Float32) f(float{});
  else if (dt == DType::Float64) f(double{});
  else PF_THROW(NotImplementedError, "cpu '", ctx.op.name, "' kernel supports float32 and float64, got ", dtype_name(dt));
}

// torch.maximum: NaN in either operand gives NaN.
template <typename T>
T nan_maximum(T a, T b) {
  return (a != a || a > b) ? a : b;
}

// ---- SGD ------------------------------------------------------------------------------------------

// The scalars of one SGD step, rounded to the parameter's dtype.
template <typename T>
struct SgdScalars {
  T grad_sign, neg_lr, momentum, one_minus_dampening, weight_decay;
};

// Elements [begin, end). The branches are template flags so that the loop is branch-free and
// vectorizes; maximize is an exact multiplication by -1. Everything arrives by value (restrict
// pointers, scalars in registers): read through the parallel_for closure's references, the
// scalars could alias the stores and the loop would stay scalar.
// Each `x.add(y, alpha=a)` of PyTorch's step is one fused multiply-add, as PyTorch's add kernel
// computes it (scalar_math::add_scaled), so a step equals PyTorch's bit for bit; the loops are
// compiled for FMA (x86-64-v3).
template <typename T, bool Decay, bool Momentum, bool FirstStep, bool Nesterov>
[[gnu::target_clones("arch=x86-64-v3", "default")]] void sgd_loop(T* __restrict param, const T* __restrict grad,
                                                                  T* __restrict buf, const SgdScalars<T> c,
                                                                  int64_t begin, int64_t end) {
  using scalar_math::add_scaled;
  for (int64_t i = begin; i < end; ++i) {
    const T p = param[i];
    T d_p = grad[i] * c.grad_sign;
    if constexpr (Decay) d_p = add_scaled(d_p, c.weight_decay, p);  // d_p.add(param, alpha=weight_decay)
    if constexpr (Momentum) {
      T b;
      if constexpr (FirstStep) {
        b = d_p;  // torch.clone(d_p)
      } else {
        b = buf[i] * c.momentum;                       // buf.mul_(momentum)
        b = add_scaled(b, c.one_minus_dampening, d_p);  // .add_(d_p, alpha=1 - dampening)
      }
      buf[i] = b;
      if constexpr (Nesterov) d_p = add_scaled(d_p, c.momentum, b);  // d_p.add(buf, alpha=momentum)
      else d_p = b;
    }
    param[i] = add_scaled(p, c.neg_lr, d_p);  // param.add_(d_p, alpha=-lr)
  }
}

// The per-call flags of one parameter's SGD step.
struct SgdFlags {
  bool decay, momentum, first_step, nesterov;
};

template <typename T>
SgdScalars<T> sgd_scalars(const KernelContext& ctx) {
  return {ctx.attr<bool>("maximize") ? T(-1) : T(1), static_cast<T>(-ctx.attr<double>("lr")),
          static_cast<T>(ctx.attr<double>("momentum")), static_cast<T>(1 - ctx.attr<double>("dampening")),
          static_cast<T>(ctx.attr<double>("weight_decay"))};
}

// Elements [begin, end) of one parameter with the loop its flags select.
template <typename T>
void sgd_run(const SgdFlags f, T* param, const T* grad, T* buf, const SgdScalars<T>& c, int64_t begin, int64_t end) {
  const auto run = [&](auto decay) {
    constexpr bool D = decltype(decay)::value;
    if (!f.momentum) sgd_loop<T, D, false, false, false>(param, grad, buf, c, begin, end);
    else if (f.first_step) f.nesterov ? sgd_loop<T, D, true, true, true>(param, grad, buf, c, begin, end)
                                      : sgd_loop<T, D, true, true, false>(param, grad, buf, c, begin, end);
    else f.nesterov ? sgd_loop<T, D, true, false, true>(param, grad, buf, c, begin, end)
                    : sgd_loop<T, D, true, false, false>(param, grad, buf, c, begin, end);
  };
  if (f.decay) run(std::true_type{});
  else run(std::false_type{});
}

template <typename T>
void sgd_step_typed(const KernelContext& ctx) {
  T* param = ctx.input(0).data<T>();
  const T* grad = ctx.input(1).data<T>();
  const SgdFlags f{ctx.attr<double>("weight_decay") != 0, ctx.attr<double>("momentum") != 0,
                   ctx.attr<bool>("first_step"), ctx.attr<bool>("nesterov")};
  // Without momentum input 2 is a placeholder aliasing param: never touched.
  T* buf = f.momentum ? ctx.input(2).data<T>() : nullptr;
  const SgdScalars<T> c = sgd_scalars<T>(ctx);
  parallel_for(ctx.input(0).numel(), kGrainSize, [=](int64_t begin, int64_t end) {
    sgd_run<T>(f, param, grad, buf, c, begin, end);
  });
}

// GradScaler's flag (an optional last input): a skipped step writes nothing.
bool step_skipped(const KernelContext& ctx, size_t found_inf_input) {
  return ctx.inputs.size() > found_inf_input && *ctx.input(found_inf_input).data<float>() != 0.0f;
}

void sgd_step_kernel(KernelContext& ctx) {
  if (step_skipped(ctx, 3)) return;
  check_dense(ctx, 3);
  dispatch_float(ctx, [&](auto tag) { sgd_step_typed<decltype(tag)>(ctx); });
}

// ---- Adam / AdamW -----------------------------------------------------------------------------------

// The scalars of one Adam step, rounded to the parameter's dtype.
template <typename T>
struct AdamScalars {
  T grad_sign, param_scale, weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, neg_step_size,
      bias_correction2_sqrt;
};

// Elements [begin, end), arguments by value as in sgd_loop. Amsgrad and Decay are template flags
// so that the loop is branch-free; maximize and AdamW's shrink are exact multiplications (by -1
// and by 1 when off) instead.
// The adds with alpha and the addcmul are fused multiply-adds as PyTorch's kernels compute them
// (scalar_math::add_scaled, addcmul), compiled for FMA as sgd_loop.
template <typename T, bool Amsgrad, bool Decay>
[[gnu::target_clones("arch=x86-64-v3", "default")]] void adam_loop(T* __restrict param, const T* __restrict grad,
                                                                   T* __restrict exp_avg, T* __restrict exp_avg_sq,
                                                                   T* __restrict max_exp_avg_sq, const AdamScalars<T> c,
                                                                   int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T p = param[i] * c.param_scale;  // param.mul_(1 - lr * weight_decay) (AdamW)
    T g = grad[i] * c.grad_sign;  // -grad with maximize
    if constexpr (Decay) g = scalar_math::add_scaled(g, c.weight_decay, p);  // grad.add(param, alpha=weight_decay)
    // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    const T m = scalar_math::add_scaled(T(exp_avg[i] * c.beta1), c.one_minus_beta1, g);
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    const T v = scalar_math::addcmul(T(exp_avg_sq[i] * c.beta2), c.one_minus_beta2, g, g);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    T second_moment = v;
    if constexpr (Amsgrad) {
      second_moment = nan_maximum(max_exp_avg_sq[i], v);  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=...)
      max_exp_avg_sq[i] = second_moment;
    }
    const T denom = std::sqrt(second_moment) / c.bias_correction2_sqrt + c.eps;
    param[i] = p + c.neg_step_size * m / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

// The scalars of adam_step_'s attributes (ops::adam_step_attrs), rounded to T.
template <typename T>
AdamScalars<T> adam_scalars(const Attrs& attrs) {
  const double beta1 = attrs.get<double>("beta1"), beta2 = attrs.get<double>("beta2");
  return {attrs.get<bool>("maximize") ? T(-1) : T(1),
          // 1 unless decoupled (AdamW): p·1 is p exactly.
          attrs.get<bool>("decoupled_weight_decay") ? static_cast<T>(attrs.get<double>("param_scale")) : T(1),
          static_cast<T>(attrs.get<double>("weight_decay")),
          static_cast<T>(beta1),
          static_cast<T>(1 - beta1),
          static_cast<T>(beta2),
          static_cast<T>(1 - beta2),
          static_cast<T>(attrs.get<double>("eps")),
          static_cast<T>(-attrs.get<double>("step_size")),
          static_cast<T>(attrs.get<double>("bias_correction2_sqrt"))};
}

// Elements [begin, end) of one parameter with the loop its flags select.
template <typename T>
void adam_run(bool amsgrad, bool decay, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
              const AdamScalars<T>& c, int64_t begin, int64_t end) {
  if (amsgrad) decay ? adam_loop<T, true, true>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, c, begin, end)
                     : adam_loop<T, true, false>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, c, begin, end);
  else decay ? adam_loop<T, false, true>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, c, begin, end)
             : adam_loop<T, false, false>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, c, begin, end);
}

template <typename T>
void adam_step_typed(const KernelContext& ctx) {
  T* param = ctx.input(0).data<T>();
  const T* grad = ctx.input(1).data<T>();
  T* exp_avg = ctx.input(2).data<T>();
  T* exp_avg_sq = ctx.input(3).data<T>();
  const bool amsgrad = ctx.attr<bool>("amsgrad"), decay = ctx.attr<double>("weight_decay") != 0;
  // Without amsgrad input 4 is a placeholder aliasing exp_avg_sq: never touched.
  T* max_exp_avg_sq = amsgrad ? ctx.input(4).data<T>() : nullptr;
  const AdamScalars<T> c = adam_scalars<T>(ctx.attrs);
  parallel_for(ctx.input(0).numel(), kGrainSize, [=](int64_t begin, int64_t end) {
    adam_run<T>(amsgrad, decay, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, c, begin, end);
  });
}

void adam_step_kernel(KernelContext& ctx) {
  if (step_skipped(ctx, 5)) return;
  check_dense(ctx, 5);
  dispatch_float(ctx, [&](auto tag) { adam_step_typed<decltype(tag)>(ctx); });
}

// ---- multi-tensor steps ---------------------------------------------------------------------------
// All parameters of one optimizer group in one parallel loop over their concatenated elements:
// every element gets exactly the arithmetic of the single-parameter kernel (the same loops), so
// results are bit-identical to one sgd_step_/adam_step_ per parameter, and small parameters no
// longer run one by one on the calling thread.

// Calls run(param, begin, end) over the parts of [0, total) that fall in each parameter.
template <typename F>
void for_each_segment(const std::vector<int64_t>& starts, int64_t b, int64_t e, const F& run) {
  size_t p = std::upper_bound(starts.begin(), starts.end(), b) - starts.begin() - 1;
  for (; b < e; ++p) {
    const int64_t end = std::min(e, starts[p + 1]);
    if (end > b) run(p, b - starts[p], end - starts[p]);
    b = std::max(b, end);
  }
}

std::vector<int64_t> segment_starts(const KernelContext& ctx, int64_t n) {
  std::vector<int64_t> starts{0};
  for (int64_t i = 0; i < n; ++i) starts.push_back(starts.back() + ctx.input(i).numel());
  return starts;
}

template <typename T>
void multi_sgd_step_typed(const KernelContext& ctx) {
  const int64_t n = ctx.attr<int64_t>("count");
  const bool momentum = ctx.attr<double>("momentum") != 0;
  PF_CHECK(!momentum || ctx.attr<bool>("has_momentum"), "cpu 'multi_sgd_step_': momentum ",
           ctx.attr<double>("momentum"), " needs the momentum buffers the graph was compiled without");
  const Shape& first_step = ctx.attr<Shape>("first_step");
  const SgdScalars<T> c = sgd_scalars<T>(ctx);
  const bool decay = ctx.attr<double>("weight_decay") != 0, nesterov = ctx.attr<bool>("nesterov");
  const std::vector<int64_t> starts = segment_starts(ctx, n);
  parallel_for(starts.back(), kGrainSize, [&](int64_t b, int64_t e) {
    for_each_segment(starts, b, e, [&](size_t p, int64_t begin, int64_t end) {
      T* buf = momentum ? ctx.output(n + p).template data<T>() : nullptr;
      sgd_run<T>(SgdFlags{decay, momentum, first_step[p] != 0, nesterov}, ctx.output(p).template data<T>(),
                 ctx.input(n + p).template data<T>(), buf, c, begin, end);
    });
  });
}

void multi_sgd_step_kernel(KernelContext& ctx) {
  check_dense(ctx, static_cast<int>(ctx.inputs.size()));
  dispatch_float(ctx, [&](auto tag) { multi_sgd_step_typed<decltype(tag)>(ctx); });
}

template <typename T>
void multi_adam_step_typed(const KernelContext& ctx) {
  const int64_t n = ctx.attr<int64_t>("count");
  const bool amsgrad = ctx.attr<bool>("amsgrad");
  const int64_t step_input = (amsgrad ? 5 : 4) * n;
  // Each parameter's scalars from its own step count, as an adam_step_ call would get them.
  std::vector<AdamScalars<T>> scalars;
  bool decay = false;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& step_t = ctx.input(step_input + i);
    const double step = step_t.dtype() == DType::Float64 ? *step_t.data<double>() : *step_t.data<float>();
    const Attrs attrs = ops::adam_step_attrs(step, ctx.attr<double>("lr"), ctx.attr<double>("beta1"),
                                             ctx.attr<double>("beta2"), ctx.attr<double>("eps"),
                                             ctx.attr<double>("weight_decay"), amsgrad, ctx.attr<bool>("maximize"),
                                             ctx.attr<bool>("decoupled_weight_decay"));
    decay = attrs.get<double>("weight_decay") != 0;  // the same for every parameter
    scalars.push_back(adam_scalars<T>(attrs));
  }
  const std::vector<int64_t> starts = segment_starts(ctx, n);
  parallel_for(starts.back(), kGrainSize, [&](int64_t b, int64_t e) {
    for_each_segment(starts, b, e, [&](size_t p, int64_t begin, int64_t end) {
      T* vmax = amsgrad ? ctx.output(3 * n + p).template data<T>() : nullptr;
      adam_run<T>(amsgrad, decay, ctx.output(p).template data<T>(), ctx.input(n + p).template data<T>(),
                  ctx.output(n + p).template data<T>(), ctx.output(2 * n + p).template data<T>(), vmax, scalars[p],
                  begin, end);
    });
  });
}

void multi_adam_step_kernel(KernelContext& ctx) {
  const int64_t n = ctx.attr<int64_t>("count");
  check_dense(ctx, static_cast<int>((ctx.attr<bool>("amsgrad") ? 5 : 4) * n));
  dispatch_float(ctx, [&](auto tag) { multi_adam_step_typed<decltype(tag)>(ctx); });
}

// ---- gradient scaling ---------------------------------------------------------------------------------

// grad *= inv_scale in place (in float32 for 16-bit floats, PyTorch's opmath), any strides;
// found_inf = 1 when an element is infinite or NaN.
template <typename T>
void unscale_typed(const KernelContext& ctx) {
  const Tensor& grad = ctx.input(0);
  float* found_inf = ctx.input(1).data<float>();
  const opmath_t<T> inv_scale = static_cast<opmath_t<T>>(*ctx.input(2).data<float>());
  const StridedLayout layout = make_layout({&grad});
  const int64_t stride = layout.ndim == 0 ? 0 : layout.byte_strides[0][layout.ndim - 1];
  std::atomic<bool> non_finite{false};
  parallel_for(layout.numel, kGrainSize, [&](int64_t begin, int64_t end) {
    bool bad = false;
    for_each_piece(layout, begin, end, [&](char* const* ptrs, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        T& v = *reinterpret_cast<T*>(ptrs[0] + i * stride);
        const opmath_t<T> x = static_cast<opmath_t<T>>(v);
        bad |= !std::isfinite(x);
        v = static_cast<T>(x * inv_scale);
      }
    });
    if (bad) non_finite.store(true, std::memory_order_relaxed);
  });
  if (non_finite.load()) *found_inf = 1.0f;
}

void unscale_kernel(KernelContext& ctx) {
  visit_dtype(ctx.input(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) unscale_typed<T>(ctx);
    else PF_THROW(NotImplementedError, "cpu 'non_finite_check_and_unscale_' kernel: floating gradients only");
  });
}

// PyTorch's _amp_update_scale_ (the scale never grows past float32's range).
void update_scale_kernel(KernelContext& ctx) {
  float* scale = ctx.input(0).data<float>();
  int32_t* growth_tracker = ctx.input(1).data<int32_t>();
  const float found_inf = *ctx.input(2).data<float>();
  if (found_inf != 0.0f) {
    *scale = static_cast<float>(*scale * ctx.attr<double>("backoff_factor"));
    *growth_tracker = 0;
    return;
  }
  const int32_t successful = *growth_tracker + 1;
  if (successful == ctx.attr<int64_t>("growth_interval")) {
    const auto grown = static_cast<float>(*scale * ctx.attr<double>("growth_factor"));
    if (std::isfinite(grown)) *scale = grown;
    *growth_tracker = 0;
  } else {
    *growth_tracker = successful;
  }
}

}  // namespace

void register_optim_kernels(Registrar& reg) {
  // core/opdefs/optim.yaml names each op's kernel function and dtypes.
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) reg.kernel(name, DeviceType::CPU, {PF_OPDEFS_UNPAREN cpu_dtypes}, fn);
  PF_OPDEFS_OPTIM_KERNELS(PF_X)
#undef PF_X
}

}  // namespace plugflow::cpu
