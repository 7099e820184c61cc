// The `optim` family on CUDA (docs/kernels.md, "Optimizer family"): SGD and Adam/AdamW steps for
// one parameter (sgd_step_, adam_step_) or for all parameters of a group at once
// (multi_sgd_step_, multi_adam_step_: nn.Graph's fuse_model_update), and GradScaler's
// non_finite_check_and_unscale_ and amp_update_scale_.
//
// Every element follows the CPU plugin's arithmetic (plugins/cpu/src/optim.cpp, PyTorch 1.13's
// single-tensor order) with the same scalars rounded to the parameter's dtype: each `add(alpha=)`
// and addcmul of PyTorch's step is one fused multiply-add, as PyTorch's kernels compute them
// (scalar_math::add_scaled / addcmul, shared with the CPU), every other multiply and add is
// rounded on its own (dm::mul_rn / add_rn: nvcc would otherwise contract them into FMAs), and
// CUDA's default `/` and sqrt are IEEE round-to-nearest: so float32 and float64 results equal the
// CPU's bit for bit.
//
// One launch updates up to kMaxTensors parameters: their pointers and element offsets travel in
// the kernel's argument block (no device-side table to upload and keep alive, as PyTorch's
// multi_tensor_apply), and each thread finds its parameter by binary search over the offsets.
// GradScaler's found_inf stays on the device: a step with a non-zero flag writes nothing, decided
// by the kernel, so a scaled step needs no host synchronization.
#include <algorithm>
#include <vector>

#include "dmath.cuh"
#include "elementwise.cuh"
#include "opdefs.h"
#include "plugflow/ops_optim.h"

namespace plugflow::cuda {
namespace {

// Parameters per launch: keeps the Adam argument block (about 2 KiB for double) well inside
// the 4 KiB every CUDA device accepts.
constexpr int kMaxTensors = 32;

struct Segments {
  int count = 0;
  int64_t start[kMaxTensors + 1];  // element offset of each parameter in the launch's concatenation

  // The parameter holding concatenated element i (start[p] <= i < start[p + 1]).
  __device__ int find(int64_t i) const {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (start[mid] <= i) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
};

void check_dense(const KernelContext& ctx, size_t n) {
  for (size_t i = 0; i < n; ++i)
    PF_CHECK(ctx.input(i).is_contiguous(), "cuda '", ctx.op.name, "' kernel needs contiguous operands");
}

// Calls f(T{}) for float32 and float64 (the CPU plugin's dtypes for these ops).
template <typename F>
void dispatch_float(const KernelContext& ctx, F&& f) {
  const DType dt = ctx.input(0).dtype();
  if (dt == DType::Float32) f(float{});
  else if (dt == DType::Float64) f(double{});
  else throw_unsupported_dtype(ctx, dt);
}

// GradScaler's flag (an optional one-element float32 input), read on the device; nullptr: none.
const float* found_inf_input(const KernelContext& ctx, size_t index) {
  return ctx.inputs.size() > index ? ctx.input(index).data<float>() : nullptr;
}

// Splits parameters [0, n) into launches of at most kMaxTensors; fill(segments, p, slot) records
// parameter p in a launch's slot, launch(segments, total) runs it.
template <typename Batch, typename Fill, typename Launch>
void for_each_launch(int64_t n, const std::vector<int64_t>& numel, Fill&& fill, Launch&& launch) {
  for (int64_t first = 0; first < n; first += kMaxTensors) {
    Batch batch{};
    batch.seg.count = static_cast<int>(std::min<int64_t>(kMaxTensors, n - first));
    int64_t total = 0;
    for (int s = 0; s < batch.seg.count; ++s) {
      batch.seg.start[s] = total;
      total += numel[static_cast<size_t>(first + s)];
      fill(batch, first + s, s);
    }
    batch.seg.start[batch.seg.count] = total;
    if (total > 0) launch(batch, total);
  }
}

// ---- SGD -----------------------------------------------------------------------------------------

template <typename T>
struct SgdScalars {
  T grad_sign, neg_lr, momentum, one_minus_dampening, weight_decay;
  bool decay, has_momentum, nesterov;
};

template <typename T>
SgdScalars<T> sgd_scalars(const Attrs& at) {
  return {at.get<bool>("maximize") ? T(-1) : T(1),
          static_cast<T>(-at.get<double>("lr")),
          static_cast<T>(at.get<double>("momentum")),
          static_cast<T>(1 - at.get<double>("dampening")),
          static_cast<T>(at.get<double>("weight_decay")),
          at.get<double>("weight_decay") != 0,
          at.get<double>("momentum") != 0,
          at.get<bool>("nesterov")};
}

template <typename T>
struct SgdBatch {
  Segments seg;
  T* param[kMaxTensors];
  const T* grad[kMaxTensors];
  T* buf[kMaxTensors];  // nullptr without momentum
  bool first_step[kMaxTensors];
};

template <typename T>
__global__ void sgd_kernel(int64_t total, SgdBatch<T> b, SgdScalars<T> c, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  using dm::add_rn;
  using dm::mul_rn;
  using scalar_math::add_scaled;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total; g += step) {
    const int t = b.seg.find(g);
    const int64_t i = g - b.seg.start[t];
    const T p = b.param[t][i];
    T d_p = mul_rn(b.grad[t][i], c.grad_sign);
    if (c.decay) d_p = add_scaled(d_p, c.weight_decay, p);  // d_p.add(param, alpha=weight_decay)
    if (c.has_momentum) {
      T buf;
      if (b.first_step[t]) {
        buf = d_p;  // torch.clone(d_p)
      } else {
        buf = add_scaled(mul_rn(b.buf[t][i], c.momentum), c.one_minus_dampening, d_p);
      }
      b.buf[t][i] = buf;
      d_p = c.nesterov ? add_scaled(d_p, c.momentum, buf) : buf;
    }
    b.param[t][i] = add_scaled(p, c.neg_lr, d_p);  // param.add_(d_p, alpha=-lr)
  }
}

// params (n), grads (n), buffers (n, or none without momentum): tensor lists by pointer so the
// single and multi-tensor entry points share the launch.
template <typename T>
void launch_sgd(const KernelScope& scope, const std::vector<const Tensor*>& params,
                const std::vector<const Tensor*>& grads, const std::vector<const Tensor*>& bufs,
                const std::vector<bool>& first_step, const SgdScalars<T>& c, const float* found_inf) {
  const auto n = static_cast<int64_t>(params.size());
  std::vector<int64_t> numel;
  for (const Tensor* p : params) numel.push_back(p->numel());
  for_each_launch<SgdBatch<T>>(
      n, numel,
      [&](SgdBatch<T>& b, int64_t p, int s) {
        b.param[s] = params[p]->template data<T>();
        b.grad[s] = grads[p]->template data<T>();
        b.buf[s] = c.has_momentum ? bufs[p]->template data<T>() : nullptr;
        b.first_step[s] = first_step[p];
      },
      [&](const SgdBatch<T>& b, int64_t total) {
        sgd_kernel<T><<<scope.blocks_for(total), kBlockThreads, 0, scope.stream>>>(total, b, c, found_inf);
        PF_CUDA_CHECK_LAUNCH();
      });
}

// param, grad, momentum_buffer (param as a placeholder without momentum)[, found_inf].
void sgd_step_kernel(KernelContext& ctx) {
  check_dense(ctx, 3);
  KernelScope scope(ctx);
  dispatch_float(ctx, [&](auto tag) {
    using T = decltype(tag);
    const SgdScalars<T> c = sgd_scalars<T>(ctx.attrs);
    launch_sgd<T>(scope, {&ctx.input(0)}, {&ctx.input(1)}, {&ctx.input(2)}, {ctx.attr<bool>("first_step")}, c,
                  found_inf_input(ctx, 3));
  });
}

// params, grads[, momentum_buffers] -> the same params and buffers (outputs aliasing them).
void multi_sgd_step_kernel(KernelContext& ctx) {
  const int64_t n = ctx.attr<int64_t>("count");
  const bool momentum = ctx.attr<double>("momentum") != 0;
  PF_CHECK(!momentum || ctx.attr<bool>("has_momentum"), "cuda 'multi_sgd_step_': momentum ",
           ctx.attr<double>("momentum"), " needs the momentum buffers the graph was compiled without");
  check_dense(ctx, ctx.inputs.size());
  KernelScope scope(ctx);
  const Shape& first = ctx.attr<Shape>("first_step");
  std::vector<const Tensor*> params, grads, bufs;
  std::vector<bool> first_step;
  for (int64_t i = 0; i < n; ++i) {
    params.push_back(&ctx.output(i));
    grads.push_back(&ctx.input(n + i));
    if (momentum) bufs.push_back(&ctx.output(n + i));
    first_step.push_back(first[i] != 0);
  }
  dispatch_float(ctx, [&](auto tag) {
    using T = decltype(tag);
    launch_sgd<T>(scope, params, grads, bufs, first_step, sgd_scalars<T>(ctx.attrs), nullptr);
  });
}

// ---- Adam / AdamW ----------------------------------------------------------------------------------

// The scalars every parameter of a launch shares, rounded to T.
template <typename T>
struct AdamScalars {
  T grad_sign, param_scale, weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  bool decay, amsgrad;
};

template <typename T>
AdamScalars<T> adam_scalars(const Attrs& at) {
  const double beta1 = at.get<double>("beta1"), beta2 = at.get<double>("beta2");
  return {at.get<bool>("maximize") ? T(-1) : T(1),
          // 1 unless decoupled (AdamW): p·1 is p exactly.
          at.get<bool>("decoupled_weight_decay") ? static_cast<T>(at.get<double>("param_scale")) : T(1),
          static_cast<T>(at.get<double>("weight_decay")),
          static_cast<T>(beta1),
          static_cast<T>(1 - beta1),
          static_cast<T>(beta2),
          static_cast<T>(1 - beta2),
          static_cast<T>(at.get<double>("eps")),
          at.get<double>("weight_decay") != 0,
          at.get<bool>("amsgrad")};
}

template <typename T>
struct AdamBatch {
  Segments seg;
  T* param[kMaxTensors];
  const T* grad[kMaxTensors];
  T* exp_avg[kMaxTensors];
  T* exp_avg_sq[kMaxTensors];
  T* max_exp_avg_sq[kMaxTensors];  // nullptr without amsgrad
  // Per parameter: they depend on its step count.
  T neg_step_size[kMaxTensors];
  T bias_correction2_sqrt[kMaxTensors];
};

// torch.maximum: NaN in either operand gives NaN.
template <typename T>
__device__ __forceinline__ T nan_maximum(T a, T b) {
  return (a != a || a > b) ? a : b;
}

template <typename T>
__global__ void adam_kernel(int64_t total, AdamBatch<T> b, AdamScalars<T> c, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  using dm::add_rn;
  using dm::mul_rn;
  using scalar_math::add_scaled;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total; g += step) {
    const int t = b.seg.find(g);
    const int64_t i = g - b.seg.start[t];
    const T p = mul_rn(b.param[t][i], c.param_scale);  // param.mul_(1 - lr * weight_decay) (AdamW)
    T grad = mul_rn(b.grad[t][i], c.grad_sign);        // -grad with maximize
    if (c.decay) grad = add_scaled(grad, c.weight_decay, p);  // grad.add(param, alpha=weight_decay)
    // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    const T m = add_scaled(mul_rn(b.exp_avg[t][i], c.beta1), c.one_minus_beta1, grad);
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    const T v = scalar_math::addcmul(mul_rn(b.exp_avg_sq[t][i], c.beta2), c.one_minus_beta2, grad, grad);
    b.exp_avg[t][i] = m;
    b.exp_avg_sq[t][i] = v;
    T second_moment = v;
    if (c.amsgrad) {
      second_moment = nan_maximum(b.max_exp_avg_sq[t][i], v);  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=...)
      b.max_exp_avg_sq[t][i] = second_moment;
    }
    const T denom = add_rn(dm::sqrt(second_moment) / b.bias_correction2_sqrt[t], c.eps);
    b.param[t][i] = add_rn(p, mul_rn(b.neg_step_size[t], m) / denom);  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

// Per-parameter tensors of an Adam launch and each parameter's step attributes
// (ops::adam_step_attrs).
struct AdamOperands {
  std::vector<const Tensor*> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
  std::vector<Attrs> attrs;
};

template <typename T>
void launch_adam(const KernelScope& scope, const AdamOperands& o, const float* found_inf) {
  const auto n = static_cast<int64_t>(o.params.size());
  if (n == 0) return;
  const AdamScalars<T> c = adam_scalars<T>(o.attrs[0]);  // the same for every parameter
  std::vector<int64_t> numel;
  for (const Tensor* p : o.params) numel.push_back(p->numel());
  for_each_launch<AdamBatch<T>>(
      n, numel,
      [&](AdamBatch<T>& b, int64_t p, int s) {
        b.param[s] = o.params[p]->template data<T>();
        b.grad[s] = o.grads[p]->template data<T>();
        b.exp_avg[s] = o.exp_avgs[p]->template data<T>();
        b.exp_avg_sq[s] = o.exp_avg_sqs[p]->template data<T>();
        b.max_exp_avg_sq[s] = c.amsgrad ? o.max_exp_avg_sqs[p]->template data<T>() : nullptr;
        b.neg_step_size[s] = static_cast<T>(-o.attrs[p].get<double>("step_size"));
        b.bias_correction2_sqrt[s] = static_cast<T>(o.attrs[p].get<double>("bias_correction2_sqrt"));
      },
      [&](const AdamBatch<T>& b, int64_t total) {
        adam_kernel<T><<<scope.blocks_for(total), kBlockThreads, 0, scope.stream>>>(total, b, c, found_inf);
        PF_CUDA_CHECK_LAUNCH();
      });
}

// param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq (exp_avg_sq as a placeholder without
// amsgrad)[, found_inf].
void adam_step_kernel(KernelContext& ctx) {
  check_dense(ctx, 5);
  KernelScope scope(ctx);
  const AdamOperands o{{&ctx.input(0)}, {&ctx.input(1)}, {&ctx.input(2)}, {&ctx.input(3)}, {&ctx.input(4)},
                       {ctx.attrs}};
  dispatch_float(ctx, [&](auto tag) { launch_adam<decltype(tag)>(scope, o, found_inf_input(ctx, 5)); });
}

// params, grads, exp_avgs, exp_avg_sqs[, max_exp_avg_sqs], steps (one-element CPU tensors, read
// here without touching the device) -> params, exp_avgs, exp_avg_sqs[, max_exp_avg_sqs].
void multi_adam_step_kernel(KernelContext& ctx) {
  const int64_t n = ctx.attr<int64_t>("count");
  const bool amsgrad = ctx.attr<bool>("amsgrad");
  check_dense(ctx, static_cast<size_t>((amsgrad ? 5 : 4) * n));
  KernelScope scope(ctx);
  const int64_t step_input = (amsgrad ? 5 : 4) * n;
  AdamOperands o;
  for (int64_t i = 0; i < n; ++i) {
    o.params.push_back(&ctx.output(i));
    o.grads.push_back(&ctx.input(n + i));
    o.exp_avgs.push_back(&ctx.output(n + i));
    o.exp_avg_sqs.push_back(&ctx.output(2 * n + i));
    if (amsgrad) o.max_exp_avg_sqs.push_back(&ctx.output(3 * n + i));
    const Tensor& step_t = ctx.input(step_input + i);
    const double step = step_t.dtype() == DType::Float64 ? *step_t.data<double>() : *step_t.data<float>();
    o.attrs.push_back(ops::adam_step_attrs(step, ctx.attr<double>("lr"), ctx.attr<double>("beta1"),
                                           ctx.attr<double>("beta2"), ctx.attr<double>("eps"),
                                           ctx.attr<double>("weight_decay"), amsgrad, ctx.attr<bool>("maximize"),
                                           ctx.attr<bool>("decoupled_weight_decay")));
  }
  dispatch_float(ctx, [&](auto tag) { launch_adam<decltype(tag)>(scope, o, nullptr); });
}

// ---- gradient scaling ------------------------------------------------------------------------------

// grad * inv_scale in opmath (float for f16/bf16, as the CPU and PyTorch), setting *found_inf
// to 1 when the element is infinite or NaN. Concurrent threads store the same value: benign.
template <typename C>
struct UnscaleFn {
  float* found_inf;
  const float* inv_scale;
  PF_DEVICE C operator()(C x) const {
    if (!isfinite(x)) *found_inf = 1.0f;
    return x * static_cast<C>(*inv_scale);
  }
};

// grad (any strides, in place), found_inf, inv_scale: both one-element float32 device tensors.
void unscale_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& grad = ctx.input(0);
  float* found_inf = ctx.input(1).data<float>();
  const float* inv_scale = ctx.input(2).data<float>();
  dispatch_supported<FloatTypes>(ctx, grad.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    launch_elementwise<D, D>(make_layout({&grad, &grad}), scope, UnscaleFn<opmath_t<D>>{found_inf, inv_scale});
  });
}

// PyTorch's _amp_update_scale_ (the scale never grows past float32's range), on the device.
__global__ void update_scale_device(float* scale, int32_t* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(*scale * backoff_factor);
    *growth_tracker = 0;
    return;
  }
  const int32_t successful = *growth_tracker + 1;
  if (successful == growth_interval) {
    const auto grown = static_cast<float>(*scale * growth_factor);
    if (isfinite(grown)) *scale = grown;
    *growth_tracker = 0;
  } else {
    *growth_tracker = successful;
  }
}

void update_scale_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  update_scale_device<<<1, 1, 0, scope.stream>>>(ctx.input(0).data<float>(), ctx.input(1).data<int32_t>(),
                                                 ctx.input(2).data<float>(), ctx.attr<double>("growth_factor"),
                                                 ctx.attr<double>("backoff_factor"),
                                                 ctx.attr<int64_t>("growth_interval"));
  PF_CUDA_CHECK_LAUNCH();
}

}  // namespace

std::vector<KernelDef> optim_kernels() {
  // core/opdefs/optim.yaml names each op's kernel function and dtypes.
  return {
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) {name, {PF_OPDEFS_UNPAREN cuda_dtypes}, fn},
      PF_OPDEFS_OPTIM_KERNELS(PF_X)
#undef PF_X
  };
}

}  // namespace plugflow::cuda
