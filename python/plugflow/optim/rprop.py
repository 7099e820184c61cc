"""Rprop (torch.optim.Rprop): resilient backpropagation, a per-element step size grown while the
gradient keeps its sign and shrunk when it flips."""

from typing import List, Optional

from .._C import Tensor
from .._creation import full_like, zeros_like
from ..autograd import no_grad
from .optimizer import Optimizer, _evaluate_closure, _params_with_grads

__all__ = ["Rprop", "rprop"]


class Rprop(Optimizer):
    r"""step_size *= etaplus where g * g_prev > 0, etaminus where < 0 (and g is then taken as 0),
    clamped to step_sizes; p -= sign(g) * step_size; g_prev = g.

    `foreach` is accepted for compatibility; the per-tensor loop always runs (same numbers).
    """

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50),
                 foreach: Optional[bool] = None, maximize: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        defaults = dict(lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach, maximize=maximize)
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
            params, grads, states = _params_with_grads(
                self, group, "Rprop",
                lambda p: {"step": 0, "prev": zeros_like(p), "step_size": full_like(p.grad, group["lr"])})
            for state in states:
                state["step"] += 1  # a Python int in PyTorch 1.13's Rprop state
            etaminus, etaplus = group["etas"]
            step_size_min, step_size_max = group["step_sizes"]
            rprop(params, grads, [s["prev"] for s in states], [s["step_size"] for s in states],
                  step_size_min=step_size_min, step_size_max=step_size_max, etaminus=etaminus, etaplus=etaplus,
                  maximize=group["maximize"])
        return loss


def rprop(params: List[Tensor], grads: List[Tensor], prevs: List[Tensor], step_sizes: List[Tensor],
          foreach: Optional[bool] = None, maximize: bool = False, *, step_size_min: float, step_size_max: float,
          etaminus: float, etaplus: float):
    """Functional Rprop (torch.optim._functional.rprop), in PyTorch's single-tensor order: a NaN
    product keeps its NaN factor, as PyTorch's masked assignments do."""
    for param, grad, prev, step_size in zip(params, grads, prevs, step_sizes):
        grad = grad if not maximize else -grad
        sign = grad.mul(prev).sign()
        sign[sign.gt(0)] = etaplus
        sign[sign.lt(0)] = etaminus
        sign[sign.eq(0)] = 1
        step_size.mul_(sign).clamp_(step_size_min, step_size_max)
        grad = grad.clone()
        grad[sign.eq(etaminus)] = 0  # after a sign flip, no move and no memory of the gradient
        param.addcmul_(grad.sign(), step_size, value=-1)
        prev.copy_(grad)
