// The optim family (plugflow/ops_optim.h): catalog entries and argument checks of the fused
// optimizer steps. The kernels (docs/kernels.md, "Optimizer family") update their inputs in
// place, so the ops have no outputs; the functional layer bumps the storage versions.
#include <cmath>

#include "plugflow/autograd.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/op.h"
#include "plugflow/ops.h"
#include "opdefs.h"

namespace plugflow {
namespace {

// Every operand of a fused step is a dense tensor of the parameter's shape and floating dtype.
void check_operand(const Tensor& t, const Tensor& param, const char* op, const char* what) {
  PF_CHECK_T(t.dtype() == param.dtype(), TypeError, op, ": ", what, " has dtype ", dtype_name(t.dtype()),
             " but the parameter has dtype ", dtype_name(param.dtype()));
  PF_CHECK(t.sizes() == param.sizes(), op, ": ", what, " has shape ", shape_str(t.sizes()),
           " but the parameter has shape ", shape_str(param.sizes()));
  PF_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous");
}

void check_param(const Tensor& param, const char* op) {
  PF_CHECK_T(is_floating(param.dtype()), TypeError, op, ": expected a floating parameter, got ",
             dtype_name(param.dtype()));
  PF_CHECK(param.is_contiguous(), op, ": the parameter must be contiguous");
}

void check_one_element(const Tensor& t, DType dtype, const char* what) {
  PF_CHECK(t.numel() == 1, what, " must be a one-element tensor.");
  PF_CHECK(t.dtype() == dtype, what, " must be a ", dtype == DType::Float32 ? "float" : "int", " tensor.");
}

// param, grad, momentum_buffer (param itself as a placeholder without momentum)[, found_inf].
std::vector<TensorMeta> sgd_step_meta(std::span<const Tensor> in, const Attrs& attrs) {
  check_param(in[0], "sgd_step_");
  check_operand(in[1], in[0], "sgd_step_", "grad");
  check_operand(in[2], in[0], "sgd_step_", "momentum_buffer");
  if (in.size() > 3) check_one_element(in[3], DType::Float32, "found_inf");
  for (const char* name : {"lr", "momentum", "dampening", "weight_decay"}) attrs.get<double>(name);
  for (const char* name : {"nesterov", "maximize", "first_step"}) attrs.get<bool>(name);
  return {};
}

// param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq (exp_avg_sq as a placeholder without
// amsgrad)[, found_inf].
std::vector<TensorMeta> adam_step_meta(std::span<const Tensor> in, const Attrs& attrs) {
  check_param(in[0], "adam_step_");
  const char* names[] = {"param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  for (int i = 1; i < 5; ++i) check_operand(in[i], in[0], "adam_step_", names[i]);
  if (in.size() > 5) check_one_element(in[5], DType::Float32, "found_inf");
  for (const char* name : {"beta1", "beta2", "eps", "weight_decay", "param_scale", "step_size", "bias_correction2_sqrt"})
    attrs.get<double>(name);
  for (const char* name : {"amsgrad", "maximize", "decoupled_weight_decay"}) attrs.get<bool>(name);
  return {};
}

// The multi-tensor steps (graph-only: nn.Graph's fuse_model_update pass makes them) update the
// `count` parameters of one optimizer group in one kernel. Their updated tensors are outputs
// that alias the inputs holding the same tensors (a static mutated_inputs list cannot name a
// variable number of them): the graph sees the writes, the kernel reads and writes in place.
int64_t multi_count(std::span<const Tensor> in, const Attrs& attrs, int64_t per_param, const char* op) {
  const int64_t n = attrs.get<int64_t>("count");
  PF_CHECK(n > 0 && static_cast<int64_t>(in.size()) == n * per_param, op, ": expected ", per_param, " x ", n,
           " operands, got ", in.size());
  for (int64_t i = 0; i < n; ++i) {
    check_param(in[i], op);
    PF_CHECK(in[i].device() == in[0].device() && in[i].dtype() == in[0].dtype(), op,
             ": every parameter of one multi-tensor step must have the first's dtype and device");
  }
  return n;
}

TensorMeta meta_of(const Tensor& t) { return {t.sizes(), t.dtype(), t.device()}; }

// params, grads, momentum_buffers (with has_momentum) -> the params and buffers, updated.
std::vector<TensorMeta> multi_sgd_step_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const bool momentum = attrs.get<bool>("has_momentum");
  const int64_t n = multi_count(in, attrs, momentum ? 3 : 2, "multi_sgd_step_");
  for (int64_t i = 0; i < n; ++i) {
    check_operand(in[n + i], in[i], "multi_sgd_step_", "grad");
    if (momentum) check_operand(in[2 * n + i], in[i], "multi_sgd_step_", "momentum_buffer");
  }
  for (const char* name : {"lr", "momentum", "dampening", "weight_decay"}) attrs.get<double>(name);
  for (const char* name : {"nesterov", "maximize"}) attrs.get<bool>(name);
  PF_CHECK(static_cast<int64_t>(attrs.get<Shape>("first_step").size()) == n,
           "multi_sgd_step_: first_step needs one flag per parameter");
  std::vector<TensorMeta> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(meta_of(in[i]));
  if (momentum)
    for (int64_t i = 0; i < n; ++i) out.push_back(meta_of(in[2 * n + i]));
  return out;
}

// params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs (with amsgrad), steps (0-d, the step
// counts after this step's increment) -> the params and moments, updated.
std::vector<TensorMeta> multi_adam_step_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const bool amsgrad = attrs.get<bool>("amsgrad");
  const int64_t moments = amsgrad ? 3 : 2;
  const int64_t n = multi_count(in, attrs, 3 + moments, "multi_adam_step_");
  const char* names[] = {"grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 1; k <= 1 + moments; ++k) check_operand(in[k * n + i], in[i], "multi_adam_step_", names[k - 1]);
    const Tensor& step = in[(2 + moments) * n + i];
    PF_CHECK_T(step.numel() == 1 && is_floating(step.dtype()) && step.device().is_cpu(), TypeError,
               "multi_adam_step_: each step count must be a one-element floating CPU tensor");
  }
  for (const char* name : {"lr", "beta1", "beta2", "eps", "weight_decay"}) attrs.get<double>(name);
  for (const char* name : {"maximize", "decoupled_weight_decay"}) attrs.get<bool>(name);
  std::vector<TensorMeta> out;
  for (int64_t k = 0; k <= moments; ++k)
    for (int64_t i = 0; i < n; ++i) out.push_back(meta_of(in[(k == 0 ? 0 : k + 1) * n + i]));
  return out;
}

// grad, found_inf, inv_scale.
std::vector<TensorMeta> unscale_meta(std::span<const Tensor> in, const Attrs&) {
  PF_CHECK_T(is_floating(in[0].dtype()), TypeError, "non_finite_check_and_unscale_: expected a floating gradient, got ",
             dtype_name(in[0].dtype()));
  check_one_element(in[1], DType::Float32, "found_inf");
  check_one_element(in[2], DType::Float32, "inv_scale");
  return {};
}

// scale, growth_tracker, found_inf.
std::vector<TensorMeta> update_scale_meta(std::span<const Tensor> in, const Attrs& attrs) {
  PF_CHECK(in[0].numel() == 1 && in[0].dtype() == DType::Float32, "current_scale must be a single-element float tensor.");
  PF_CHECK(in[1].numel() == 1 && in[1].dtype() == DType::Int32, "growth_tracker must be a single-element int tensor.");
  PF_CHECK(in[2].numel() == 1 && in[2].dtype() == DType::Float32, "found_inf must be a single-element float tensor.");
  attrs.get<double>("growth_factor");
  attrs.get<double>("backoff_factor");
  attrs.get<int64_t>("growth_interval");
  return {};
}

// The catalog entries of core/opdefs/optim.yaml, with the meta functions above.
const bool kOptimOpsRegistered = [] {
#define PF_X(name, signature, meta, mutated) register_op(name, signature, meta, {PF_OPDEFS_UNPAREN mutated});
  PF_OPDEFS_OPTIM(PF_X)
#undef PF_X
  return true;
}();

// The tensors a step writes: in place and outside autograd, like the op-by-op update under no_grad.
void check_writable(const Tensor& t) {
  PF_CHECK(t.defined(), "fused optimizer step: a state tensor is undefined");
  autograd::check_inplace(t);
}

}  // namespace

namespace ops {

void sgd_step_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr, double momentum,
               double dampening, double weight_decay, bool nesterov, bool maximize, bool first_step,
               const Tensor& found_inf) {
  PF_CHECK(param.defined() && grad.defined(), "sgd_step_: param and grad must be defined");
  const bool has_momentum = momentum != 0;
  PF_CHECK_T(momentum_buffer.defined() == has_momentum, ValueError,
             "sgd_step_: a momentum_buffer is required exactly when momentum != 0");
  check_writable(param);
  if (has_momentum) check_writable(momentum_buffer);
  static const OpDef& op = find_op("sgd_step_");
  const Tensor in[] = {param, grad, has_momentum ? momentum_buffer : param, found_inf};
  const Attrs attrs{{"lr", lr},         {"momentum", momentum},     {"dampening", dampening},
                    {"weight_decay", weight_decay}, {"nesterov", nesterov}, {"maximize", maximize},
                    {"first_step", first_step}};
  call_op(op, std::span<const Tensor>(in, found_inf.defined() ? 4 : 3), attrs);
  param.storage()->bump_version();
  if (has_momentum) momentum_buffer.storage()->bump_version();
}

Attrs adam_step_attrs(double step, double lr, double beta1, double beta2, double eps, double weight_decay,
                      bool amsgrad, bool maximize, bool decoupled_weight_decay) {
  // The scalars of PyTorch's loop, computed in double as Python does.
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const double step_size = lr / bias_correction1;
  const bool shrink = decoupled_weight_decay && weight_decay != 0;
  return Attrs{{"beta1", beta1},
               {"beta2", beta2},
               {"eps", eps},
               {"weight_decay", decoupled_weight_decay ? 0.0 : weight_decay},
               {"param_scale", shrink ? 1 - lr * weight_decay : 1.0},
               {"step_size", step_size},
               {"bias_correction2_sqrt", std::sqrt(bias_correction2)},
               {"amsgrad", amsgrad},
               {"maximize", maximize},
               {"decoupled_weight_decay", shrink}};
}

void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& max_exp_avg_sq,
                double step, double lr, double beta1, double beta2, double eps, double weight_decay, bool amsgrad,
                bool maximize, bool decoupled_weight_decay, const Tensor& found_inf) {
  PF_CHECK(param.defined() && grad.defined(), "adam_step_: param and grad must be defined");
  PF_CHECK_T(step >= 1, ValueError, "adam_step_: step must be >= 1 (it is incremented before the update), got ",
             step);
  PF_CHECK_T(max_exp_avg_sq.defined() == amsgrad, ValueError,
             "adam_step_: a max_exp_avg_sq is required exactly when amsgrad is set");
  check_writable(param);
  check_writable(exp_avg);
  check_writable(exp_avg_sq);
  if (amsgrad) check_writable(max_exp_avg_sq);
  static const OpDef& op = find_op("adam_step_");
  const Tensor in[] = {param, grad, exp_avg, exp_avg_sq, amsgrad ? max_exp_avg_sq : exp_avg_sq, found_inf};
  call_op(op, std::span<const Tensor>(in, found_inf.defined() ? 6 : 5),
          adam_step_attrs(step, lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled_weight_decay));  // no outputs: the kernel runs (and loops over nothing) even when empty
  param.storage()->bump_version();
  exp_avg.storage()->bump_version();
  exp_avg_sq.storage()->bump_version();
  if (amsgrad) max_exp_avg_sq.storage()->bump_version();
}

void non_finite_check_and_unscale_(std::vector<Tensor>& grads, Tensor& found_inf, const Tensor& inv_scale) {
  static const OpDef& op = find_op("non_finite_check_and_unscale_");
  check_writable(found_inf);
  for (Tensor& g : grads) {
    PF_CHECK(g.defined(), "_amp_foreach_non_finite_check_and_unscale_: a gradient is undefined");
    PF_CHECK(g.device() == found_inf.device() && g.device() == inv_scale.device(),
             "_amp_foreach_non_finite_check_and_unscale_: the gradients, found_inf and inv_scale must be on one "
             "device");
    check_writable(g);
    const Tensor in[] = {g, found_inf, inv_scale};
    call_op(op, in, {});
    g.storage()->bump_version();
  }
  found_inf.storage()->bump_version();
}

Tensor& amp_update_scale_(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                          double backoff_factor, int64_t growth_interval) {
  static const OpDef& op = find_op("amp_update_scale_");
  check_writable(scale);
  check_writable(growth_tracker);
  const Tensor in[] = {scale, growth_tracker, found_inf};
  call_op(op, in,
          Attrs{{"growth_factor", growth_factor}, {"backoff_factor", backoff_factor},
                {"growth_interval", growth_interval}});
  scale.storage()->bump_version();
  growth_tracker.storage()->bump_version();
  return scale;
}

}  // namespace ops
}  // namespace plugflow
