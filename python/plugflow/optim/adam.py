"""Adam (torch.optim.Adam) and the per-tensor update that AdamW shares."""

import math
from typing import List, Optional

from .. import _C
from .._C import Tensor
from .._creation import tensor, zeros, zeros_like
from .optimizer import Optimizer, _can_fuse, _check_dense, _evaluate_closure, _use_grad_for_differentiable

__all__ = ["Adam", "adam"]


def _check_adam_hyperparameters(lr, betas, eps, weight_decay):
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


def _step_as_tensor(state_values):
    """Old state dicts stored 'step' as a number; PyTorch >= 1.12 keeps a tensor."""
    if state_values and not isinstance(state_values[0]["step"], Tensor):
        for s in state_values:
            s["step"] = tensor(float(s["step"]))


def _gather_adam_state(optimizer, group, name, step_on_device):
    """The tensors one Adam/AdamW step needs for a group's parameters that have a gradient,
    creating their state on first use. 'step' is a float32 tensor: 0-d on the CPU, or shape (1,)
    on the parameter's device when the bias correction is computed with tensor ops."""
    params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = [], [], [], [], [], []
    for p in group["params"]:
        if p.grad is None:
            continue
        _check_dense(p.grad, name)
        params.append(p)
        grads.append(p.grad)
        state = optimizer.state[p]
        if len(state) == 0:
            state["step"] = (zeros((1,), dtype=_C.float32, device=p.device) if step_on_device else tensor(0.0))
            state["exp_avg"] = zeros_like(p)  # first-moment running average
            state["exp_avg_sq"] = zeros_like(p)  # second-moment running average
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = zeros_like(p)  # the largest second moment so far
        exp_avgs.append(state["exp_avg"])
        exp_avg_sqs.append(state["exp_avg_sq"])
        if group["amsgrad"]:
            max_exp_avg_sqs.append(state["max_exp_avg_sq"])
        if group.get("differentiable", False) and state["step"].requires_grad:
            raise RuntimeError("`requires_grad` is not supported for `step` in differentiable mode")
        steps.append(state["step"])
    return params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps


def _adam_update(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, amsgrad, beta1, beta2,
                 lr, weight_decay, eps, maximize, decoupled_weight_decay, step_on_device=False,
                 differentiable=False):
    """One Adam (or, with decoupled_weight_decay, AdamW) step, in the operation order of PyTorch's
    single-tensor implementation so float32 results agree to rounding. A dense parameter (with
    dense state of its dtype) takes the fused one-pass kernel, which follows the same order."""
    fusable = not (step_on_device or differentiable)
    for i, param in enumerate(params):
        exp_avg = exp_avgs[i]
        exp_avg_sq = exp_avg_sqs[i]
        step_t = state_steps[i]
        max_exp_avg_sq = max_exp_avg_sqs[i] if amsgrad else None
        if fusable and _can_fuse("adam_step_", param, grads[i], exp_avg, exp_avg_sq, max_exp_avg_sq):
            step_t += 1
            _C._adam_step_(param, grads[i], exp_avg, exp_avg_sq, max_exp_avg_sq, step=step_t.item(), lr=lr,
                           beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                           maximize=maximize, decoupled_weight_decay=decoupled_weight_decay)
            continue

        grad = grads[i] if not maximize else -grads[i]
        step_t += 1
        if weight_decay != 0:
            if decoupled_weight_decay:
                param.mul_(1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)

        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)

        if step_on_device or differentiable:
            # The bias corrections stay tensors (no .item() sync); the step size is folded into
            # denom because addcdiv_ takes its scale as a number only.
            bias_correction1 = 1 - _C.pow(beta1, step_t)
            bias_correction2 = 1 - _C.pow(beta2, step_t)
            step_size_neg = (lr / bias_correction1).neg()
            bias_correction2_sqrt = bias_correction2.sqrt()
            if amsgrad:
                running_max = max_exp_avg_sqs[i].clone() if differentiable else max_exp_avg_sqs[i]
                max_exp_avg_sqs[i].copy_(_C.maximum(running_max, exp_avg_sq))
                second_moment = max_exp_avg_sqs[i]
            else:
                second_moment = exp_avg_sq
            denom = (second_moment.sqrt() / (bias_correction2_sqrt * step_size_neg)).add_(eps / step_size_neg)
            param.addcdiv_(exp_avg, denom)
        else:
            step = step_t.item()
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            step_size = lr / bias_correction1
            bias_correction2_sqrt = math.sqrt(bias_correction2)
            if amsgrad:
                _C.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
                denom = (max_exp_avg_sqs[i].sqrt() / bias_correction2_sqrt).add_(eps)
            else:
                denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            param.addcdiv_(exp_avg, denom, value=-step_size)


class Adam(Optimizer):
    r"""Adam (Kingma & Ba) with optional L2 weight decay added to the gradient and AMSGrad.

    Each dense parameter (contiguous, with a contiguous gradient and state of its dtype) is updated
    by one fused kernel in a single pass over memory whenever it is eligible, whatever `fused` and
    `foreach` say (fused=False/None included): it gives the same numbers as the per-tensor op
    sequence, PyTorch's single-tensor ones. Other parameters, `capturable` and `differentiable`
    run that sequence. fused=True keeps PyTorch's argument checks. plugflow has no CUDA graphs,
    so `capturable` only keeps the step count and bias correction in tensors on the parameter's
    device, on any device.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach: Optional[bool] = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: bool = False):
        _check_adam_hyperparameters(lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        if fused:
            if differentiable:
                raise RuntimeError("`fused` cannot be `differentiable`")
            if not all(p.is_cuda and p.is_floating_point() for g in self.param_groups for p in g["params"]):
                raise RuntimeError("FusedAdam requires all the params to be CUDA, floating point")

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)
            group.setdefault("maximize", False)
            group.setdefault("foreach", None)
            group.setdefault("capturable", False)
            group.setdefault("differentiable", False)
            group.setdefault("fused", False)
        _step_as_tensor(list(self.state.values()))

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Performs one update; closure, if given, re-evaluates the loss (with grad) and is returned."""
        loss = _evaluate_closure(closure)
        step_on_device = bool(self.defaults["capturable"] or self.defaults["fused"])
        for group in self.param_groups:
            tensors = _gather_adam_state(self, group, "Adam", step_on_device)
            beta1, beta2 = group["betas"]
            _adam_update(*tensors, amsgrad=group["amsgrad"], beta1=beta1, beta2=beta2, lr=group["lr"],
                         weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"],
                         decoupled_weight_decay=False, step_on_device=group["capturable"],
                         differentiable=group["differentiable"])
        return loss


def adam(params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
         max_exp_avg_sqs: List[Tensor], state_steps: List[Tensor], foreach: Optional[bool] = None,
         capturable: bool = False, differentiable: bool = False, fused: bool = False, *, amsgrad: bool,
         beta1: float, beta2: float, lr: float, weight_decay: float, eps: float, maximize: bool):
    """Functional Adam (torch.optim._functional.adam): updates params and the state in place."""
    if not all(isinstance(t, Tensor) for t in state_steps):
        raise RuntimeError("API has changed, `state_steps` argument must contain a list of singleton tensors")
    _adam_update(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, amsgrad=amsgrad, beta1=beta1,
                 beta2=beta2, lr=lr, weight_decay=weight_decay, eps=eps, maximize=maximize,
                 decoupled_weight_decay=False, step_on_device=capturable, differentiable=differentiable)
