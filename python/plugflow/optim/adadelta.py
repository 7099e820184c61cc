"""Adadelta (torch.optim.Adadelta, Zeiler): step sizes from running averages of squared gradients
and of squared updates."""

from typing import List, Optional

from .._C import Tensor
from .._creation import zeros_like
from ..autograd import no_grad
from .optimizer import Optimizer, _check_dense, _evaluate_closure

__all__ = ["Adadelta", "adadelta"]


class Adadelta(Optimizer):
    r"""v = rho * v + (1 - rho) * g^2; delta = sqrt(u + eps) / sqrt(v + eps) * g;
    u = rho * u + (1 - rho) * delta^2; p -= lr * delta.

    `foreach` is accepted for compatibility; the per-tensor loop always runs (same numbers).
    """

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach: Optional[bool] = None, *,
                 maximize: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize, foreach=foreach)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("foreach", None)
            group.setdefault("maximize", False)

    @no_grad()
    def step(self, closure=None):
        """Performs one update; closure, if given, re-evaluates the loss (with grad) and is returned."""
        loss = _evaluate_closure(closure)
        for group in self.param_groups:
            params, grads, square_avgs, acc_deltas = [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                _check_dense(p.grad, "Adadelta")
                params.append(p)
                grads.append(p.grad)
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0  # a plain int in PyTorch 1.13's Adadelta state
                    state["square_avg"] = zeros_like(p)
                    state["acc_delta"] = zeros_like(p)
                square_avgs.append(state["square_avg"])
                acc_deltas.append(state["acc_delta"])
                state["step"] += 1
            adadelta(params, grads, square_avgs, acc_deltas, lr=group["lr"], rho=group["rho"], eps=group["eps"],
                     weight_decay=group["weight_decay"], maximize=group["maximize"])
        return loss


def adadelta(params: List[Tensor], grads: List[Tensor], square_avgs: List[Tensor], acc_deltas: List[Tensor],
             foreach: Optional[bool] = None, *, lr: float, rho: float, eps: float, weight_decay: float,
             maximize: bool):
    """Functional Adadelta (torch.optim._functional.adadelta), in PyTorch's single-tensor order."""
    for param, grad, square_avg, acc_delta in zip(params, grads, square_avgs, acc_deltas):
        grad = grad if not maximize else -grad
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
        std = square_avg.add(eps).sqrt_()
        delta = acc_delta.add(eps).sqrt_().div_(std).mul_(grad)
        acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
        param.add_(delta, alpha=-lr)
