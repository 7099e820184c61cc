"""AdamW: Adam with decoupled weight decay (torch.optim.AdamW, Loshchilov & Hutter)."""

from typing import List, Optional

from .._C import Tensor
from ..autograd import no_grad
from .adam import _adam_update, _check_adam_hyperparameters, _gather_adam_state, _step_as_tensor
from .optimizer import Optimizer, _evaluate_closure

__all__ = ["AdamW", "adamw"]


class AdamW(Optimizer):
    r"""Adam whose weight decay shrinks the parameter directly (p *= 1 - lr * weight_decay) instead
    of being added to the gradient. The update is otherwise Adam's, AMSGrad included.

    Dense parameters take the fused one-pass kernel as in Adam (same numbers), so `foreach` is
    accepted for compatibility only; `capturable` works as in Adam.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize: bool = False, foreach: Optional[bool] = None, capturable: bool = False):
        _check_adam_hyperparameters(lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, foreach=foreach,
                        maximize=maximize, capturable=capturable)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)
            group.setdefault("maximize", False)
            group.setdefault("foreach", None)
            group.setdefault("capturable", False)
        _step_as_tensor(list(self.state.values()))

    @no_grad()
    def step(self, closure=None):
        """Performs one update; closure, if given, re-evaluates the loss (with grad) and is returned."""
        loss = _evaluate_closure(closure)
        for group in self.param_groups:
            tensors = _gather_adam_state(self, group, "AdamW", bool(self.defaults["capturable"]))
            beta1, beta2 = group["betas"]
            _adam_update(*tensors, amsgrad=group["amsgrad"], beta1=beta1, beta2=beta2, lr=group["lr"],
                         weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"],
                         decoupled_weight_decay=True, step_on_device=group["capturable"])
        return loss


def adamw(params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
          max_exp_avg_sqs: List[Tensor], state_steps: List[Tensor], foreach: Optional[bool] = None,
          capturable: bool = False, *, amsgrad: bool, beta1: float, beta2: float, lr: float, weight_decay: float,
          eps: float, maximize: bool):
    """Functional AdamW (torch.optim._functional.adamw): updates params and the state in place."""
    if not all(isinstance(t, Tensor) for t in state_steps):
        raise RuntimeError("API has changed, `state_steps` argument must contain a list of singleton tensors")
    _adam_update(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, amsgrad=amsgrad, beta1=beta1,
                 beta2=beta2, lr=lr, weight_decay=weight_decay, eps=eps, maximize=maximize,
                 decoupled_weight_decay=True, step_on_device=capturable)
