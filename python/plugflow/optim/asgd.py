"""ASGD (torch.optim.ASGD, Polyak & Juditsky): SGD with a decaying step size and a running
average `ax` of the iterates."""

import math
from typing import List, Optional

from .._C import Tensor
from .._creation import tensor, zeros_like
from ..autograd import no_grad
from .adam import _step_as_tensor
from .optimizer import Optimizer, _check_dense, _evaluate_closure

__all__ = ["ASGD", "asgd"]


class ASGD(Optimizer):
    r"""p = p (1 - lambd eta) - eta g; ax averages p from step t0 on (mu = 1 / max(1, step - t0));
    eta = lr / (1 + lambd lr step)^alpha. eta, mu and step are float32 tensors in the state, as in
    PyTorch, so their rounding agrees.

    `foreach` is accepted for compatibility; the per-tensor loop always runs (same numbers).
    """

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach: Optional[bool] = None, maximize: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("foreach", None)
            group.setdefault("maximize", False)
        state_values = list(self.state.values())
        _step_as_tensor(state_values)
        if state_values and not isinstance(state_values[0]["eta"], Tensor):
            for s in state_values:
                s["eta"] = tensor(s["eta"])
        if state_values and not isinstance(state_values[0]["mu"], Tensor):
            for s in state_values:
                s["mu"] = tensor(float(s["mu"]))

    @no_grad()
    def step(self, closure=None):
        """Performs one update; closure, if given, re-evaluates the loss (with grad) and is returned."""
        loss = _evaluate_closure(closure)
        for group in self.param_groups:
            params, grads, mus, axs, etas, state_steps = [], [], [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                _check_dense(p.grad, "ASGD")
                params.append(p)
                grads.append(p.grad)
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = tensor(0.0)
                    state["eta"] = tensor(group["lr"])
                    state["mu"] = tensor(1.0)
                    state["ax"] = zeros_like(p)
                mus.append(state["mu"])
                axs.append(state["ax"])
                etas.append(state["eta"])
                state_steps.append(state["step"])
            asgd(params, grads, axs, mus, etas, state_steps, lambd=group["lambd"], lr=group["lr"], t0=group["t0"],
                 alpha=group["alpha"], weight_decay=group["weight_decay"], maximize=group["maximize"])
        return loss


def asgd(params: List[Tensor], grads: List[Tensor], axs: List[Tensor], mus: List[Tensor], etas: List[Tensor],
         state_steps: List[Tensor], foreach: Optional[bool] = None, maximize: bool = False, *, lambd: float,
         lr: float, t0: float, alpha: float, weight_decay: float):
    """Functional ASGD (torch.optim._functional.asgd), in PyTorch's single-tensor order."""
    for param, grad, ax, mu, eta, step_t in zip(params, grads, axs, mus, etas, state_steps):
        grad = grad if not maximize else -grad
        step_t += 1
        step = step_t.item()
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        param.mul_(1 - lambd * eta.item())
        param.add_(grad, alpha=-eta.item())
        if mu.item() != 1:
            ax.add_(param.sub(ax).mul(mu))
        else:
            ax.copy_(param)
        eta.copy_(tensor(lr / math.pow((1 + lambd * lr * step), alpha)))
        mu.copy_(tensor(1 / max(1, step - t0)))
