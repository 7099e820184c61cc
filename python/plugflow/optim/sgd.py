"""SGD with optional momentum, dampening, Nesterov momentum and L2 weight decay (torch.optim.SGD)."""

from typing import List, Optional

from .. import _C
from .._C import Tensor
from .._creation import empty_like
from .optimizer import Optimizer, required, _can_fuse, _check_dense, _evaluate_closure, _use_grad_for_differentiable

__all__ = ["SGD", "sgd"]


class SGD(Optimizer):
    r"""Stochastic gradient descent, PyTorch's formulation:

        g = grad (+ weight_decay * p);  b = momentum * b + (1 - dampening) * g  (b = g at first);
        g = g + momentum * b if nesterov else b;  p -= lr * g  (p += with maximize).

    Each dense parameter (contiguous, with a contiguous gradient and buffer of its dtype) is
    updated by one fused kernel in a single pass over memory (PyTorch's `fused`, which SGD 1.13
    lacks, is implied); others, and differentiable=True, run the per-tensor op sequence. Both give
    the same numbers, PyTorch's single-tensor ones, so `foreach` is accepted for compatibility only.
    """

    def __init__(self, params, lr=required, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False, foreach: Optional[bool] = None, differentiable=False):
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                        maximize=maximize, foreach=foreach, differentiable=differentiable)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)
            group.setdefault("foreach", None)
            group.setdefault("differentiable", False)

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Performs one update; closure, if given, re-evaluates the loss (with grad) and is returned."""
        loss = _evaluate_closure(closure)
        for group in self.param_groups:
            params_with_grad = []
            grads = []
            momentum_buffers = []
            for p in group["params"]:
                if p.grad is None:
                    continue
                _check_dense(p.grad, "SGD")
                params_with_grad.append(p)
                grads.append(p.grad)
                momentum_buffers.append(self.state[p].get("momentum_buffer"))

            sgd(params_with_grad, grads, momentum_buffers, weight_decay=group["weight_decay"],
                momentum=group["momentum"], lr=group["lr"], dampening=group["dampening"],
                nesterov=group["nesterov"], maximize=group["maximize"])

            # The first step creates the buffers; PyTorch records them (None without momentum).
            for p, buf in zip(params_with_grad, momentum_buffers):
                self.state[p]["momentum_buffer"] = buf
        return loss


def sgd(params: List[Tensor], d_p_list: List[Tensor], momentum_buffer_list: List[Optional[Tensor]],
        has_sparse_grad: Optional[bool] = None, foreach: Optional[bool] = None, *, weight_decay: float,
        momentum: float, lr: float, dampening: float, nesterov: bool, maximize: bool):
    """Functional SGD (torch.optim._functional.sgd): updates params in place and fills the
    None entries of momentum_buffer_list with new buffers. Dense parameters take the fused
    one-pass step when grad mode is off (see SGD)."""
    for i, param in enumerate(params):
        buf = momentum_buffer_list[i] if momentum != 0 else None
        if _can_fuse("sgd_step_", param, d_p_list[i], buf):
            first_step = momentum != 0 and buf is None
            if first_step:
                buf = momentum_buffer_list[i] = empty_like(param)
            _C._sgd_step_(param, d_p_list[i], buf, lr=lr, momentum=momentum, dampening=dampening,
                          weight_decay=weight_decay, nesterov=nesterov, maximize=maximize, first_step=first_step)
            continue
        d_p = d_p_list[i] if not maximize else -d_p_list[i]
        if weight_decay != 0:
            d_p = d_p.add(param, alpha=weight_decay)
        if momentum != 0:
            buf = momentum_buffer_list[i]
            if buf is None:
                buf = _C.clone(d_p).detach()
                momentum_buffer_list[i] = buf
            else:
                buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
            if nesterov:
                d_p = d_p.add(buf, alpha=momentum)
            else:
                d_p = buf
        param.add_(d_p, alpha=-lr)
