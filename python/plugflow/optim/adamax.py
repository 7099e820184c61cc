"""Adamax (torch.optim.Adamax): Adam with the infinity norm of past gradients in place of the
second moment."""

from typing import List, Optional

from .. import _C
from .._C import Tensor
from .._creation import tensor, zeros_like
from ..autograd import no_grad
from .adam import _check_adam_hyperparameters, _step_as_tensor
from .optimizer import Optimizer, _evaluate_closure, _params_with_grads

__all__ = ["Adamax", "adamax"]


class Adamax(Optimizer):
    r"""m = beta1 * m + (1 - beta1) * g; u = max(beta2 * u, |g| + eps);
    p -= lr / (1 - beta1^step) * m / u.

    `foreach` is accepted for compatibility; the per-tensor loop always runs (same numbers).
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach: Optional[bool] = None, *, maximize: bool = False):
        _check_adam_hyperparameters(lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach, maximize=maximize)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("foreach", None)
            group.setdefault("maximize", False)
        _step_as_tensor(list(self.state.values()))

    @no_grad()
    def step(self, closure=None):
        """Performs one update; closure, if given, re-evaluates the loss (with grad) and is returned."""
        loss = _evaluate_closure(closure)
        for group in self.param_groups:
            params, grads, states = _params_with_grads(
                self, group, "Adamax", lambda p: {"step": tensor(0.0), "exp_avg": zeros_like(p), "exp_inf": zeros_like(p)})
            exp_avgs, exp_infs = [s["exp_avg"] for s in states], [s["exp_inf"] for s in states]
            state_steps = [s["step"] for s in states]
            beta1, beta2 = group["betas"]
            adamax(params, grads, exp_avgs, exp_infs, state_steps, eps=group["eps"], beta1=beta1, beta2=beta2,
                   lr=group["lr"], weight_decay=group["weight_decay"], maximize=group["maximize"])
        return loss


def adamax(params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_infs: List[Tensor],
           state_steps: List[Tensor], foreach: Optional[bool] = None, maximize: bool = False, *, eps: float,
           beta1: float, beta2: float, lr: float, weight_decay: float):
    """Functional Adamax (torch.optim._functional.adamax), in PyTorch's single-tensor order."""
    if not all(isinstance(t, Tensor) for t in state_steps):
        raise RuntimeError("API has changed, `state_steps` argument must contain a list of singleton tensors")
    for param, grad, exp_avg, exp_inf, step_t in zip(params, grads, exp_avgs, exp_infs, state_steps):
        grad = grad if not maximize else -grad
        step_t += 1
        step = step_t.item()
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        # PyTorch takes amax over the two stacked; maximum is the same (NaN propagates in both).
        _C.maximum(exp_inf.mul_(beta2), grad.abs().add_(eps), out=exp_inf)
        clr = lr / (1 - beta1 ** step)
        param.addcdiv_(exp_avg, exp_inf, value=-clr)
