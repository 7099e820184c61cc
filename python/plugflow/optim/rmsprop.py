"""RMSprop (torch.optim.RMSprop): Hinton's running average of squared gradients, optionally
centered (Graves) and with momentum."""

from typing import List, Optional

from .._C import Tensor
from .._creation import zeros_like
from .optimizer import Optimizer, _check_dense, _evaluate_closure, _use_grad_for_differentiable

__all__ = ["RMSprop", "rmsprop"]


class RMSprop(Optimizer):
    r"""v = alpha * v + (1 - alpha) * g^2; with `centered`, the running mean m of g is tracked too
    and v - m^2 is used; the step is g / (sqrt(.) + eps), through a momentum buffer if momentum > 0.

    `foreach` is accepted for compatibility; the per-tensor loop always runs (same numbers).
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 foreach: Optional[bool] = None, maximize: bool = False, differentiable: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("momentum", 0)
            group.setdefault("centered", False)
            group.setdefault("foreach", None)
            group.setdefault("maximize", False)
            group.setdefault("differentiable", False)

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Performs one update; closure, if given, re-evaluates the loss (with grad) and is returned."""
        loss = _evaluate_closure(closure)
        for group in self.param_groups:
            params, grads, square_avgs, grad_avgs, momentum_buffers = [], [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                _check_dense(p.grad, "RMSprop")
                params.append(p)
                grads.append(p.grad)
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0  # a plain int in PyTorch 1.13's RMSprop state
                    state["square_avg"] = zeros_like(p)
                    if group["momentum"] > 0:
                        state["momentum_buffer"] = zeros_like(p)
                    if group["centered"]:
                        state["grad_avg"] = zeros_like(p)
                square_avgs.append(state["square_avg"])
                if group["momentum"] > 0:
                    momentum_buffers.append(state["momentum_buffer"])
                if group["centered"]:
                    grad_avgs.append(state["grad_avg"])
                if group["differentiable"] and isinstance(state["step"], Tensor):
                    raise RuntimeError("`step` can't be a tensor")
                state["step"] += 1

            rmsprop(params, grads, square_avgs, grad_avgs, momentum_buffers, lr=group["lr"], alpha=group["alpha"],
                    eps=group["eps"], weight_decay=group["weight_decay"], momentum=group["momentum"],
                    centered=group["centered"], maximize=group["maximize"], differentiable=group["differentiable"])
        return loss


def rmsprop(params: List[Tensor], grads: List[Tensor], square_avgs: List[Tensor], grad_avgs: List[Tensor],
            momentum_buffer_list: List[Tensor], foreach: Optional[bool] = None, maximize: bool = False,
            differentiable: bool = False, *, lr: float, alpha: float, eps: float, weight_decay: float,
            momentum: float, centered: bool):
    """Functional RMSprop (torch.optim._functional.rmsprop), in PyTorch's single-tensor order."""
    for i, param in enumerate(params):
        grad = grads[i] if not maximize else -grads[i]
        square_avg = square_avgs[i]
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)

        square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        if centered:
            grad_avg = grad_avgs[i]
            grad_avg.mul_(alpha).add_(grad, alpha=1 - alpha)
            avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
        else:
            avg = square_avg.sqrt()
        # In differentiable mode avg may be a view of recorded history: no in-place add then.
        avg = avg.add(eps) if differentiable else avg.add_(eps)

        if momentum > 0:
            buf = momentum_buffer_list[i]
            buf.mul_(momentum).addcdiv_(grad, avg)
            param.add_(buf, alpha=-lr)
        else:
            param.addcdiv_(grad, avg, value=-lr)
