"""plugflow.autograd: reverse-mode automatic differentiation (torch.autograd's API)."""

from .. import _C
from .._C import Tensor
from .grad_mode import (no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled,
                        is_inference_mode_enabled)
from .function import Function, FunctionCtx

__all__ = ["backward", "grad", "Function", "FunctionCtx", "no_grad", "enable_grad", "set_grad_enabled",
           "inference_mode", "is_grad_enabled"]


def _as_list(x):
    if x is None:
        return None
    if isinstance(x, Tensor):
        return [x]
    return list(x)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    """Accumulates gradients of `tensors` into the .grad of the leaves (or of `inputs`)."""
    if grad_variables is not None:
        grad_tensors = grad_variables
    tensors = _as_list(tensors)
    grads = _as_list(grad_tensors) or []
    if retain_graph is None:
        retain_graph = create_graph
    if inputs is not None and len(_as_list(inputs)) == 0:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    _C._autograd_backward(tensors, grads, bool(retain_graph), bool(create_graph), _as_list(inputs))


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=False, is_grads_batched=False):
    """The gradients of `outputs` with respect to `inputs` (a tuple), leaving .grad untouched."""
    if is_grads_batched:
        raise NotImplementedError("is_grads_batched=True is not supported")
    outputs = _as_list(outputs)
    inputs_list = _as_list(inputs)
    grads = _as_list(grad_outputs) or []
    if retain_graph is None:
        retain_graph = create_graph
    return _C._autograd_grad(outputs, inputs_list, grads, bool(retain_graph), bool(create_graph), bool(allow_unused))

from . import profiler  # noqa: E402,F401  (torch.autograd.profiler)
from . import functional  # noqa: E402,F401  (torch.autograd.functional)
