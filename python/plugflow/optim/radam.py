"""RAdam (torch.optim.RAdam, Liu et al.): Adam with the variance of its adaptive step size
rectified, plain momentum SGD while that variance is intractable (the first steps)."""

import math
from typing import List, Optional

from .._C import Tensor
from .._creation import tensor, zeros_like
from ..autograd import no_grad
from .adam import _check_adam_hyperparameters, _step_as_tensor
from .optimizer import Optimizer, _evaluate_closure, _params_with_grads

__all__ = ["RAdam", "radam"]


class RAdam(Optimizer):
    r"""rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t); above 5 the step is Adam's times the
    rectification sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)),
    else lr times the bias-corrected first moment.

    `foreach` is accepted for compatibility; the per-tensor loop always runs (same numbers).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach: Optional[bool] = None):
        _check_adam_hyperparameters(lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("foreach", None)
        _step_as_tensor(list(self.state.values()))

    @no_grad()
    def step(self, closure=None):
        """Performs one update; closure, if given, re-evaluates the loss (with grad) and is returned."""
        loss = _evaluate_closure(closure)
        for group in self.param_groups:
            params, grads, states = _params_with_grads(
                self, group, "RAdam", lambda p: {"step": tensor(0.0), "exp_avg": zeros_like(p), "exp_avg_sq": zeros_like(p)})
            exp_avgs, exp_avg_sqs = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
            state_steps = [s["step"] for s in states]
            beta1, beta2 = group["betas"]
            radam(params, grads, exp_avgs, exp_avg_sqs, state_steps, beta1=beta1, beta2=beta2, lr=group["lr"],
                  weight_decay=group["weight_decay"], eps=group["eps"])
        return loss


def radam(params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
          state_steps: List[Tensor], foreach: Optional[bool] = None, *, beta1: float, beta2: float, lr: float,
          weight_decay: float, eps: float):
    """Functional RAdam (torch.optim._functional.radam), in PyTorch's single-tensor order."""
    if not all(isinstance(t, Tensor) for t in state_steps):
        raise RuntimeError("API has changed, `state_steps` argument must contain a list of singleton tensors")
    for param, grad, exp_avg, exp_avg_sq, step_t in zip(params, grads, exp_avgs, exp_avg_sqs, state_steps):
        step_t += 1
        step = step_t.item()
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_corrected_exp_avg = exp_avg / bias_correction1
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        if rho_t > 5.:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            # PyTorch's `number / tensor` is reciprocal() * number: two roundings, kept here.
            adaptive_lr = exp_avg_sq.sqrt().add_(eps).reciprocal_().mul_(math.sqrt(bias_correction2))
            param.add_(bias_corrected_exp_avg * lr * adaptive_lr * rect, alpha=-1.0)
        else:
            param.add_(bias_corrected_exp_avg * lr, alpha=-1.0)
