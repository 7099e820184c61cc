"""NAdam (torch.optim.NAdam, Dozat): Adam with Nesterov momentum and a momentum schedule."""

from typing import List, Optional

from .._C import Tensor
from .._creation import tensor, zeros_like
from ..autograd import no_grad
from .adam import _check_adam_hyperparameters, _step_as_tensor
from .optimizer import Optimizer, _check_dense, _evaluate_closure

__all__ = ["NAdam", "nadam"]


class NAdam(Optimizer):
    r"""Adam whose update mixes the current gradient and the first moment with the momentum
    schedule mu_t = beta1 * (1 - 0.5 * 0.96^(t * momentum_decay)); the running product of the mu_t
    is kept in the state ('mu_product', a float32 tensor as in PyTorch, so rounding agrees).

    `foreach` is accepted for compatibility; the per-tensor loop always runs. That is PyTorch
    1.13's default; its foreach=True path computes the second step size with mu_product * mu_next
    where the per-tensor one (followed here) uses mu_product * mu * mu_next.
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                 foreach: Optional[bool] = None):
        _check_adam_hyperparameters(lr, betas, eps, weight_decay)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay,
                        foreach=foreach)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("foreach", None)
        state_values = list(self.state.values())
        _step_as_tensor(state_values)
        if state_values and not isinstance(state_values[0]["mu_product"], Tensor):
            for s in state_values:
                s["mu_product"] = tensor(s["mu_product"])

    @no_grad()
    def step(self, closure=None):
        """Performs one update; closure, if given, re-evaluates the loss (with grad) and is returned."""
        loss = _evaluate_closure(closure)
        for group in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, mu_products, state_steps = [], [], [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                _check_dense(p.grad, "NAdam")
                params.append(p)
                grads.append(p.grad)
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = tensor(0.0)
                    state["mu_product"] = tensor(1.0)
                    state["exp_avg"] = zeros_like(p)
                    state["exp_avg_sq"] = zeros_like(p)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                mu_products.append(state["mu_product"])
                state_steps.append(state["step"])
            beta1, beta2 = group["betas"]
            nadam(params, grads, exp_avgs, exp_avg_sqs, mu_products, state_steps, beta1=beta1, beta2=beta2,
                  lr=group["lr"], weight_decay=group["weight_decay"], momentum_decay=group["momentum_decay"],
                  eps=group["eps"])
        return loss


def nadam(params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
          mu_products: List[Tensor], state_steps: List[Tensor], foreach: Optional[bool] = None, *, beta1: float,
          beta2: float, lr: float, weight_decay: float, momentum_decay: float, eps: float):
    """Functional NAdam (torch.optim._functional.nadam), in PyTorch's single-tensor order."""
    if not all(isinstance(t, Tensor) for t in state_steps):
        raise RuntimeError("API has changed, `state_steps` argument must contain a list of singleton tensors")
    if not all(isinstance(t, Tensor) for t in mu_products):
        raise RuntimeError("API has changed, `mu_products` argument must contain a list of singleton tensors")
    for param, grad, exp_avg, exp_avg_sq, mu_product, step_t in zip(params, grads, exp_avgs, exp_avg_sqs,
                                                                    mu_products, state_steps):
        step_t += 1
        step = step_t.item()
        bias_correction2 = 1 - beta2 ** step
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        mu = beta1 * (1. - 0.5 * (0.96 ** (step * momentum_decay)))
        mu_next = beta1 * (1. - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
        mu_product *= mu  # float32 tensor arithmetic, as PyTorch's
        mu_product_next = mu_product * mu * mu_next
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = exp_avg_sq.div(bias_correction2).sqrt().add_(eps)
        param.addcdiv_(grad, denom, value=-lr * (1. - mu) / (1. - mu_product.item()))
        param.addcdiv_(exp_avg, denom, value=-lr * mu_next / (1. - mu_product_next.item()))
