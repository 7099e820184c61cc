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
#include <vector>

#include "plugflow/export.h"
#include "plugflow/op.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// SGD: g = ±grad (+ weight_decay·param); with momentum, buf = g on the first step, else
// buf = momentum·buf + (1 - dampening)·g, then g = g + momentum·buf (nesterov) or g = buf;
// param -= lr·g. `momentum_buffer` is undefined when momentum == 0 (and only then).
//
// Both steps take an optional `found_inf` (GradScaler's one-element float32 flag): when it is
// non-zero the step writes nothing, a skipped step decided on the device without a host
// synchronization (nn.Graph's loss scaling).
PF_API void sgd_step_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr, double momentum,
                      double dampening, double weight_decay, bool nesterov, bool maximize, bool first_step,
                      const Tensor& found_inf = Tensor());

// Adam / AdamW for step number `step` (already incremented, >= 1): g = ±grad; weight decay
// either shrinks param by (1 - lr·weight_decay) (decoupled, AdamW) or adds weight_decay·param
// to g; m = beta1·m + (1 - beta1)·g; v = beta2·v + (1 - beta2)·g·g; with amsgrad
// vmax = max(vmax, v) replaces v below; param += -lr / (1 - beta1^step) · m /
// (sqrt(v) / sqrt(1 - beta2^step) + eps). `max_exp_avg_sq` is undefined unless amsgrad.
PF_API void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                       Tensor& max_exp_avg_sq, double step, double lr, double beta1, double beta2, double eps,
                       double weight_decay, bool amsgrad, bool maximize, bool decoupled_weight_decay,
                       const Tensor& found_inf = Tensor());
// The attributes of the adam_step_ kernel for these hyperparameters (PyTorch's scalars,
// computed in double): what adam_step_ passes, and what an nn.Graph sets before each replay.
PF_API Attrs adam_step_attrs(double step, double lr, double beta1, double beta2, double eps, double weight_decay,
                             bool amsgrad, bool maximize, bool decoupled_weight_decay);

// ---- gradient scaling (GradScaler) ----------------------------------------------------------------
// torch._amp_foreach_non_finite_check_and_unscale_: multiplies every gradient by inv_scale in
// place (computed in float32 for 16-bit floats) and sets found_inf to 1 when any element of any
// gradient is infinite or NaN (else leaves it as it is). found_inf and inv_scale are
// one-element float32 tensors on the gradients' device.
PF_API void non_finite_check_and_unscale_(std::vector<Tensor>& grads, Tensor& found_inf, const Tensor& inv_scale);
// torch._amp_update_scale_: with found_inf set, scale *= backoff_factor and growth_tracker = 0;
// else growth_tracker + 1 successful steps, and at growth_interval of them scale *=
// growth_factor (unless that overflows float32) and growth_tracker = 0. scale and found_inf
// are one-element float32 tensors, growth_tracker a one-element int32 tensor.
PF_API Tensor& amp_update_scale_(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                                 double backoff_factor, int64_t growth_interval);

}  // namespace plugflow::ops
