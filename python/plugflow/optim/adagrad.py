"""Adagrad (torch.optim.Adagrad, Duchi et al.): per-element step sizes from the running sum of
squared gradients."""

from typing import List, Optional

from .._C import Tensor
from .._creation import full_like, tensor
from ..autograd import no_grad
from .adam import _step_as_tensor
from .optimizer import Optimizer, _check_dense, _evaluate_closure

__all__ = ["Adagrad", "adagrad"]


class Adagrad(Optimizer):
    r"""sum += g^2; p -= clr * g / (sqrt(sum) + eps) with clr = lr / (1 + (step - 1) * lr_decay).

    State is created for every parameter at construction, as in PyTorch (so state_dict() is full
    from the start), with the constructor's initial_accumulator_value for every group (PyTorch
    ignores a group's own value there). Groups added later with add_param_group, which PyTorch's
    Adagrad cannot step, get their state on first use, from their own value.
    `foreach` is accepted for compatibility; the per-tensor loop always runs (same numbers).
    """

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach: Optional[bool] = None, *, maximize: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach, maximize=maximize)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, initial_accumulator_value)

    def _init_state(self, p, initial_accumulator_value):
        state = self.state[p]
        state["step"] = tensor(0.0)
        state["sum"] = full_like(p, initial_accumulator_value)

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
            params, grads, state_sums, state_steps = [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                _check_dense(p.grad, "Adagrad")
                if len(self.state[p]) == 0:
                    self._init_state(p, group["initial_accumulator_value"])
                params.append(p)
                grads.append(p.grad)
                state_sums.append(self.state[p]["sum"])
                state_steps.append(self.state[p]["step"])
            adagrad(params, grads, state_sums, state_steps, lr=group["lr"], weight_decay=group["weight_decay"],
                    lr_decay=group["lr_decay"], eps=group["eps"], maximize=group["maximize"])
        return loss


def adagrad(params: List[Tensor], grads: List[Tensor], state_sums: List[Tensor], state_steps: List[Tensor],
            has_sparse_grad: Optional[bool] = None, foreach: Optional[bool] = None, *, lr: float,
            weight_decay: float, lr_decay: float, eps: float, maximize: bool):
    """Functional Adagrad (torch.optim._functional.adagrad), in PyTorch's single-tensor order."""
    if not all(isinstance(t, Tensor) for t in state_steps):
        raise RuntimeError("API has changed, `state_steps` argument must contain a list of singleton tensors")
    for param, grad, state_sum, step_t in zip(params, grads, state_sums, state_steps):
        step_t += 1
        step = step_t.item()
        grad = grad if not maximize else -grad
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        clr = lr / (1 + (step - 1) * lr_decay)
        state_sum.addcmul_(grad, grad, value=1)
        std = state_sum.sqrt().add_(eps)
        param.addcdiv_(grad, std, value=-clr)
