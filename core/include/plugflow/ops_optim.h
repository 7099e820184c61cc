// The functional API of the `optim` family: one optimizer step for one parameter in one pass
// over memory. Included from plugflow/ops.h.
//
// Each element follows PyTorch 1.13's single-tensor arithmetic (torch/optim/sgd.py
// _single_tensor_sgd, adam.py _single_tensor_adam, adamw.py _single_tensor_adamw) in the
// parameter's dtype, every scalar rounded to that dtype first, so the results equal the
// op-by-op update's. The tensors are updated in place, outside autograd (optimizers run under
// no_grad): every tensor must be dense (contiguous), of one floating dtype and one shape, on
// one device; anything else is an error (the Python optimizers keep the op-by-op path for it).
#pragma once
#include "plugflow/export.h"
#include "plugflow/op.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// SGD: g = ±grad (+ weight_decay·param); with momentum, buf = g on the first step, else
// buf = momentum·buf + (1 - dampening)·g, then g = g + momentum·buf (nesterov) or g = buf;
// param -= lr·g. `momentum_buffer` is undefined when momentum == 0 (and only then).
PF_API void sgd_step_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr, double momentum,
                      double dampening, double weight_decay, bool nesterov, bool maximize, bool first_step);

// Adam / AdamW for step number `step` (already incremented, >= 1): g = ±grad; weight decay
// either shrinks param by (1 - lr·weight_decay) (decoupled, AdamW) or adds weight_decay·param
// to g; m = beta1·m + (1 - beta1)·g; v = beta2·v + (1 - beta2)·g·g; with amsgrad
// vmax = max(vmax, v) replaces v below; param += -lr / (1 - beta1^step) · m /
// (sqrt(v) / sqrt(1 - beta2^step) + eps). `max_exp_avg_sq` is undefined unless amsgrad.
PF_API void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                       Tensor& max_exp_avg_sq, double step, double lr, double beta1, double beta2, double eps,
                       double weight_decay, bool amsgrad, bool maximize, bool decoupled_weight_decay);
// The attributes of the adam_step_ kernel for these hyperparameters (PyTorch's scalars,
// computed in double): what adam_step_ passes, and what an nn.Graph sets before each replay.
PF_API Attrs adam_step_attrs(double step, double lr, double beta1, double beta2, double eps, double weight_decay,
                             bool amsgrad, bool maximize, bool decoupled_weight_decay);

}  // namespace plugflow::ops
