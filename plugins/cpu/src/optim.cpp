// Kernels of the `optim` family (docs/kernels.md, "Optimizer family"): one SGD or Adam/AdamW
// step for one dense parameter in a single pass over its memory, instead of the five to ten
// elementwise passes of the op-by-op update.
//
// Each element follows PyTorch 1.13's single-tensor order of operations with every scalar
// rounded to the parameter's dtype first (what the op-by-op path does when it multiplies by a
// Python number), so float32 results equal that path's. The plugin is built with ISO C++
// (-ffp-contract=off) and without -ffast-math, so the compiler neither fuses a multiply into an
// add nor reassociates. The per-call branches are template flags, so the loops are branch-free
// (SGD's vectorizes; Adam's stays scalar, see adam_loop).
#include <atomic>
#include <cmath>

#include "kernels.h"
#include "loops.h"
#include "parallel.h"

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
template <typename T, bool Decay, bool Momentum, bool FirstStep, bool Nesterov>
void sgd_loop(T* __restrict param, const T* __restrict grad, T* __restrict buf, const SgdScalars<T> c,
              int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T p = param[i];
    T d_p = grad[i] * c.grad_sign;
    if constexpr (Decay) d_p = d_p + c.weight_decay * p;  // d_p.add(param, alpha=weight_decay)
    if constexpr (Momentum) {
      T b;
      if constexpr (FirstStep) {
        b = d_p;  // torch.clone(d_p)
      } else {
        b = buf[i] * c.momentum;              // buf.mul_(momentum)
        b = b + c.one_minus_dampening * d_p;  // .add_(d_p, alpha=1 - dampening)
      }
      buf[i] = b;
      if constexpr (Nesterov) d_p = d_p + c.momentum * b;  // d_p.add(buf, alpha=momentum)
      else d_p = b;
    }
    param[i] = p + c.neg_lr * d_p;  // param.add_(d_p, alpha=-lr)
  }
}

template <typename T, bool Decay, bool Momentum, bool FirstStep, bool Nesterov>
void sgd_step_typed(const KernelContext& ctx) {
  T* param = ctx.input(0).data<T>();
  const T* grad = ctx.input(1).data<T>();
  // Without momentum input 2 is a placeholder aliasing param: never touched.
  T* buf = Momentum ? ctx.input(2).data<T>() : nullptr;
  const SgdScalars<T> c{ctx.attr<bool>("maximize") ? T(-1) : T(1), static_cast<T>(-ctx.attr<double>("lr")),
                        static_cast<T>(ctx.attr<double>("momentum")),
                        static_cast<T>(1 - ctx.attr<double>("dampening")),
                        static_cast<T>(ctx.attr<double>("weight_decay"))};
  parallel_for(ctx.input(0).numel(), kGrainSize, [=](int64_t begin, int64_t end) {
    sgd_loop<T, Decay, Momentum, FirstStep, Nesterov>(param, grad, buf, c, begin, end);
  });
}

template <typename T, bool Decay>
void sgd_step_momentum(const KernelContext& ctx) {
  if (ctx.attr<double>("momentum") == 0) return sgd_step_typed<T, Decay, false, false, false>(ctx);
  const bool first_step = ctx.attr<bool>("first_step"), nesterov = ctx.attr<bool>("nesterov");
  if (first_step) nesterov ? sgd_step_typed<T, Decay, true, true, true>(ctx) : sgd_step_typed<T, Decay, true, true, false>(ctx);
  else nesterov ? sgd_step_typed<T, Decay, true, false, true>(ctx) : sgd_step_typed<T, Decay, true, false, false>(ctx);
}

template <typename T>
void sgd_step_dispatch(const KernelContext& ctx) {
  if (ctx.attr<double>("weight_decay") != 0) sgd_step_momentum<T, true>(ctx);
  else sgd_step_momentum<T, false>(ctx);
}

// GradScaler's flag (an optional last input): a skipped step writes nothing.
bool step_skipped(const KernelContext& ctx, size_t found_inf_input) {
  return ctx.inputs.size() > found_inf_input && *ctx.input(found_inf_input).data<float>() != 0.0f;
}

void sgd_step_kernel(KernelContext& ctx) {
  if (step_skipped(ctx, 3)) return;
  check_dense(ctx, 3);
  dispatch_float(ctx, [&](auto tag) { sgd_step_dispatch<decltype(tag)>(ctx); });
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
// The loop stays scalar: std::sqrt's errno side effect (for negative inputs) keeps GCC from
// vectorizing it. -fno-math-errno for the plugin would lift that without changing any value
// (a function attribute does not: GCC still emits the errno path).
template <typename T, bool Amsgrad, bool Decay>
void adam_loop(T* __restrict param, const T* __restrict grad, T* __restrict exp_avg, T* __restrict exp_avg_sq,
               T* __restrict max_exp_avg_sq, const AdamScalars<T> c, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T p = param[i] * c.param_scale;  // param.mul_(1 - lr * weight_decay) (AdamW)
    T g = grad[i] * c.grad_sign;            // -grad with maximize
    if constexpr (Decay) g = g + c.weight_decay * p;  // grad.add(param, alpha=weight_decay)
    const T m = exp_avg[i] * c.beta1 + c.one_minus_beta1 * g;  // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    const T v = exp_avg_sq[i] * c.beta2 + c.one_minus_beta2 * g * g;
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

template <typename T, bool Amsgrad, bool Decay>
void adam_step_typed(const KernelContext& ctx) {
  T* param = ctx.input(0).data<T>();
  const T* grad = ctx.input(1).data<T>();
  T* exp_avg = ctx.input(2).data<T>();
  T* exp_avg_sq = ctx.input(3).data<T>();
  // Without amsgrad input 4 is a placeholder aliasing exp_avg_sq: never touched.
  T* max_exp_avg_sq = Amsgrad ? ctx.input(4).data<T>() : nullptr;
  const double beta1 = ctx.attr<double>("beta1"), beta2 = ctx.attr<double>("beta2");
  const AdamScalars<T> c{
      ctx.attr<bool>("maximize") ? T(-1) : T(1),
      // 1 unless decoupled (AdamW): p·1 is p exactly.
      ctx.attr<bool>("decoupled_weight_decay") ? static_cast<T>(ctx.attr<double>("param_scale")) : T(1),
      static_cast<T>(ctx.attr<double>("weight_decay")),
      static_cast<T>(beta1),
      static_cast<T>(1 - beta1),
      static_cast<T>(beta2),
      static_cast<T>(1 - beta2),
      static_cast<T>(ctx.attr<double>("eps")),
      static_cast<T>(-ctx.attr<double>("step_size")),
      static_cast<T>(ctx.attr<double>("bias_correction2_sqrt"))};
  parallel_for(ctx.input(0).numel(), kGrainSize, [=](int64_t begin, int64_t end) {
    adam_loop<T, Amsgrad, Decay>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, c, begin, end);
  });
}

template <typename T>
void adam_step_dispatch(const KernelContext& ctx) {
  const bool amsgrad = ctx.attr<bool>("amsgrad"), decay = ctx.attr<double>("weight_decay") != 0;
  if (amsgrad) decay ? adam_step_typed<T, true, true>(ctx) : adam_step_typed<T, true, false>(ctx);
  else decay ? adam_step_typed<T, false, true>(ctx) : adam_step_typed<T, false, false>(ctx);
}

void adam_step_kernel(KernelContext& ctx) {
  if (step_skipped(ctx, 5)) return;
  check_dense(ctx, 5);
  dispatch_float(ctx, [&](auto tag) { adam_step_dispatch<decltype(tag)>(ctx); });
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
  const auto floats = {DType::Float32, DType::Float64};
  reg.kernel("sgd_step_", DeviceType::CPU, floats, sgd_step_kernel);
  reg.kernel("adam_step_", DeviceType::CPU, floats, adam_step_kernel);
  reg.kernel("non_finite_check_and_unscale_", DeviceType::CPU,
             {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}, unscale_kernel);
  reg.kernel("amp_update_scale_", DeviceType::CPU, {DType::Float32}, update_scale_kernel);
}

}  // namespace plugflow::cpu
