"""Stochastic weight averaging (torch.optim.swa_utils, PyTorch 1.13): AveragedModel keeps a
running average of a model's parameters (and buffers with use_buffers=True), SWALR anneals each
group's lr towards a constant SWA lr, and update_bn recomputes batch-norm statistics for the
averaged weights with one pass over the data."""

import itertools
import math
from copy import deepcopy

from .. import _creation
from ..autograd.grad_mode import no_grad
from ..nn.modules.batchnorm import _BatchNorm
from ..nn.modules.module import Module
from .lr_scheduler import LRScheduler

__all__ = ["AveragedModel", "update_bn", "SWALR"]


def _pf():
    import plugflow
    return plugflow


class AveragedModel(Module):
    """A deep copy of `model` (moved to `device` if given) whose parameters update_parameters(model)
    averages: equally (the default avg_fn: p_avg + (p - p_avg) / (n + 1)) or with avg_fn(p_avg, p,
    n_averaged), e.g. an exponential moving average. The count is the buffer n_averaged."""

    def __init__(self, model, device=None, avg_fn=None, use_buffers=False):
        super().__init__()
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", _creation.tensor(0, dtype=_pf().long, device=device))
        if avg_fn is None:
            def avg_fn(averaged_model_parameter, model_parameter, num_averaged):
                return averaged_model_parameter + (model_parameter - averaged_model_parameter) / (num_averaged + 1)
        self.avg_fn = avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def update_parameters(self, model):
        """Folds model's current parameters (and buffers with use_buffers) into the average; the
        first call copies them."""
        self_params = (itertools.chain(self.module.parameters(), self.module.buffers()) if self.use_buffers
                       else self.parameters())
        model_params = (itertools.chain(model.parameters(), model.buffers()) if self.use_buffers
                        else model.parameters())
        for p_swa, p_model in zip(self_params, model_params):
            device = p_swa.device
            p_model_ = p_model.detach().to(device)
            if self.n_averaged == 0:
                p_swa.detach().copy_(p_model_)
            else:
                p_swa.detach().copy_(self.avg_fn(p_swa.detach(), p_model_, self.n_averaged.to(device)))
        self.n_averaged += 1


@no_grad()
def update_bn(loader, model, device=None):
    """Recomputes the running statistics of model's batch-norm layers as the plain average over one
    pass of loader (each item a tensor, or a list/tuple whose first element is the input)."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.running_mean = _creation.zeros_like(module.running_mean)
            module.running_var = _creation.ones_like(module.running_var)
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None  # a cumulative average over the batches
        module.num_batches_tracked *= 0
    for input in loader:
        if isinstance(input, (list, tuple)):
            input = input[0]
        if device is not None:
            input = input.to(device)
        model(input)
    for bn_module, momentum in momenta.items():
        bn_module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneals each group's lr to swa_lr (one value, or one per group) over anneal_epochs steps with
    a cosine or linear ramp, then holds it."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1):
        swa_lrs = self._format_param(optimizer, swa_lr)
        for lr, group in zip(swa_lrs, optimizer.param_groups):
            group["swa_lr"] = lr
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError(f"anneal_strategy must by one of 'cos' or 'linear', instead got {anneal_strategy}")
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _format_param(optimizer, swa_lrs):
        if isinstance(swa_lrs, (list, tuple)):
            if len(swa_lrs) != len(optimizer.param_groups):
                raise ValueError("swa_lr must have the same length as optimizer.param_groups: swa_lr has "
                                 f"{len(swa_lrs)}, optimizer.param_groups has {len(optimizer.param_groups)}")
            return swa_lrs
        return [swa_lrs] * len(optimizer.param_groups)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self):
        self._warn_if_called_directly()
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        # The lr the schedule alone would have given last step is recovered from the current one, so
        # that another scheduler's changes in between carry over (PyTorch's chainable form).
        prev_t = max(0, min(1, (step - 1) / max(1, self.anneal_epochs)))
        prev_alpha = self.anneal_func(prev_t)
        prev_lrs = [self._get_initial_lr(group["lr"], group["swa_lr"], prev_alpha)
                    for group in self.optimizer.param_groups]
        t = max(0, min(1, step / max(1, self.anneal_epochs)))
        alpha = self.anneal_func(t)
        return [group["swa_lr"] * alpha + lr * (1 - alpha) for group, lr in zip(self.optimizer.param_groups, prev_lrs)]
