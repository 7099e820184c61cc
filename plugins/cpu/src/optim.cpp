// Kernels of the `optim` family (docs/kernels.md, "Optimizer family"): one SGD or Adam/AdamW
// step for one dense parameter in a single pass over its memory, instead of the five to ten
// elementwise passes of the op-by-op update.
//
// Each element follows PyTorch 1.13's single-tensor order of operations with every scalar
// rounded to the parameter's dtype first (what the op-by-op path does when it multiplies by a
// Python number), so float32 results equal that path's. The plugin is built with ISO C++
// (-ffp-contract=off) and without -ffast-math, so the compiler neither fuses a multiply into an
// add nor reassociates. SGD's per-call flags are loop-invariant: -O3 unswitches its loop on them
// and vectorizes each version; Adam's loop has too many, so two are template arguments.
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

template <typename T>
void sgd_step_typed(const KernelContext& ctx) {
  T* __restrict param = ctx.input(0).data<T>();
  const T* __restrict grad = ctx.input(1).data<T>();
  const bool has_momentum = ctx.attr<double>("momentum") != 0;
  // Without momentum input 2 is a placeholder aliasing param: never touched.
  T* __restrict buf = has_momentum ? ctx.input(2).data<T>() : nullptr;
  const T neg_lr = static_cast<T>(-ctx.attr<double>("lr"));
  const T momentum = static_cast<T>(ctx.attr<double>("momentum"));
  const T one_minus_dampening = static_cast<T>(1 - ctx.attr<double>("dampening"));
  const double weight_decay_d = ctx.attr<double>("weight_decay");
  const T weight_decay = static_cast<T>(weight_decay_d);
  const bool decay = weight_decay_d != 0;
  const bool nesterov = ctx.attr<bool>("nesterov"), maximize = ctx.attr<bool>("maximize");
  const bool first_step = ctx.attr<bool>("first_step");
  parallel_for(ctx.input(0).numel(), kGrainSize, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T p = param[i];
      T d_p = maximize ? -grad[i] : grad[i];
      if (decay) d_p = d_p + weight_decay * p;  // d_p.add(param, alpha=weight_decay)
      if (has_momentum) {
        T b;
        if (first_step) {
          b = d_p;  // torch.clone(d_p)
        } else {
          b = buf[i] * momentum;              // buf.mul_(momentum)
          b = b + one_minus_dampening * d_p;  // .add_(d_p, alpha=1 - dampening)
        }
        buf[i] = b;
        d_p = nesterov ? d_p + momentum * b : b;  // d_p.add(buf, alpha=momentum) or buf
      }
      param[i] = p + neg_lr * d_p;  // param.add_(d_p, alpha=-lr)
    }
  });
}

void sgd_step_kernel(KernelContext& ctx) {
  check_dense(ctx, 3);
  dispatch_float(ctx, [&](auto tag) { sgd_step_typed<decltype(tag)>(ctx); });
}

// ---- Adam / AdamW -----------------------------------------------------------------------------------

// Amsgrad and Decay are template flags so that the loop has no control flow left to vectorize
// around; maximize and the decoupled decay become exact multiplications (by -1 / by 1) instead.
template <typename T, bool Amsgrad, bool Decay>
void adam_step_typed(const KernelContext& ctx) {
  T* __restrict param = ctx.input(0).data<T>();
  const T* __restrict grad = ctx.input(1).data<T>();
  T* __restrict exp_avg = ctx.input(2).data<T>();
  T* __restrict exp_avg_sq = ctx.input(3).data<T>();
  // Without amsgrad input 4 is a placeholder aliasing exp_avg_sq: never touched.
  T* __restrict max_exp_avg_sq = Amsgrad ? ctx.input(4).data<T>() : nullptr;
  const T grad_sign = ctx.attr<bool>("maximize") ? T(-1) : T(1);
  // 1 unless decoupled (AdamW); p·1 is p exactly, so the multiply can stay unconditional.
  const T param_scale = ctx.attr<bool>("decoupled_weight_decay") ? static_cast<T>(ctx.attr<double>("param_scale")) : T(1);
  const T weight_decay = static_cast<T>(ctx.attr<double>("weight_decay"));
  const double beta1 = ctx.attr<double>("beta1"), beta2 = ctx.attr<double>("beta2");
  const T b1 = static_cast<T>(beta1), one_minus_b1 = static_cast<T>(1 - beta1);
  const T b2 = static_cast<T>(beta2), one_minus_b2 = static_cast<T>(1 - beta2);
  const T eps = static_cast<T>(ctx.attr<double>("eps"));
  const T neg_step_size = static_cast<T>(-ctx.attr<double>("step_size"));
  const T bias_correction2_sqrt = static_cast<T>(ctx.attr<double>("bias_correction2_sqrt"));
  // std::sqrt's errno side effect keeps GCC from vectorizing this loop (the SGD one vectorizes);
  // -fno-math-errno for the plugin would lift that without changing any result.
  parallel_for(ctx.input(0).numel(), kGrainSize, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T p = param[i] * param_scale;  // param.mul_(1 - lr * weight_decay) (AdamW)
      T g = grad[i] * grad_sign;            // -grad with maximize
      if constexpr (Decay) g = g + weight_decay * p;  // grad.add(param, alpha=weight_decay)
      const T m = exp_avg[i] * b1 + one_minus_b1 * g;        // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
      const T v = exp_avg_sq[i] * b2 + one_minus_b2 * g * g;  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      T second_moment = v;
      if constexpr (Amsgrad) {
        second_moment = nan_maximum(max_exp_avg_sq[i], v);  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=...)
        max_exp_avg_sq[i] = second_moment;
      }
      const T denom = std::sqrt(second_moment) / bias_correction2_sqrt + eps;
      param[i] = p + neg_step_size * m / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
    }
  });
}

template <typename T>
void adam_step_dispatch(const KernelContext& ctx) {
  const bool amsgrad = ctx.attr<bool>("amsgrad"), decay = ctx.attr<double>("weight_decay") != 0;
  if (amsgrad) decay ? adam_step_typed<T, true, true>(ctx) : adam_step_typed<T, true, false>(ctx);
  else decay ? adam_step_typed<T, false, true>(ctx) : adam_step_typed<T, false, false>(ctx);
}

void adam_step_kernel(KernelContext& ctx) {
  check_dense(ctx, 5);
  dispatch_float(ctx, [&](auto tag) { adam_step_dispatch<decltype(tag)>(ctx); });
}

}  // namespace

void register_optim_kernels(Registrar& reg) {
  const auto floats = {DType::Float32, DType::Float64};
  reg.kernel("sgd_step_", DeviceType::CPU, floats, sgd_step_kernel);
  reg.kernel("adam_step_", DeviceType::CPU, floats, adam_step_kernel);
}

}  // namespace plugflow::cpu
