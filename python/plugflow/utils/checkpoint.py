"""plugflow.utils.checkpoint (torch.utils.checkpoint): activation checkpointing.

checkpoint(function, *args) runs function without keeping its intermediate activations; the
backward pass runs it again, with grad enabled, to rebuild them and backpropagate through it.
Memory for activations drops to the checkpoint inputs, at the cost of a second forward.

This is PyTorch's reentrant implementation (use_reentrant=True, the default in 1.13): the
recomputation and its backward run inside the checkpoint node's backward. As in PyTorch, then:
- gradients flow to the parameters function uses only when some tensor input requires grad
  (otherwise the output does not require grad, with a warning);
- it works with .backward() but not with autograd.grad() or backward(inputs=...), which raise;
- the random state at the forward is restored for the recomputation (preserve_rng_state=True),
  so dropout masks match. plugflow has one generator for every device, so this covers CUDA too.
use_reentrant=False, PyTorch's variant built on saved-tensor hooks, raises NotImplementedError:
plugflow's autograd has no saved-tensor hooks.
"""

import warnings

from .. import _C
from .._C import Tensor
from ..autograd import Function, backward as autograd_backward
from ..autograd.grad_mode import enable_grad
from ..random import fork_rng, get_rng_state, set_rng_state

__all__ = ["checkpoint", "checkpoint_sequential"]


def detach_variable(inputs):
    """Detached copies of the tensors in inputs that keep their requires_grad (other items as is)."""
    if not isinstance(inputs, tuple):
        raise RuntimeError(f"Only tuple of tensors is supported. Got Unsupported input type: {type(inputs).__name__}")
    out = []
    for inp in inputs:
        if not isinstance(inp, Tensor):
            out.append(inp)
            continue
        x = inp.detach()
        x.requires_grad = inp.requires_grad
        out.append(x)
    return tuple(out)


def _check_backward_validity(inputs):
    if not any(isinstance(inp, Tensor) and inp.requires_grad for inp in inputs):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None")


class CheckpointFunction(Function):
    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        _check_backward_validity(args)
        ctx.run_function = run_function
        ctx.preserve_rng_state = preserve_rng_state
        if preserve_rng_state:
            ctx.fwd_rng_state = get_rng_state()
        # Tensor arguments are saved for backward, the others kept as they are.
        ctx.inputs = [None if isinstance(arg, Tensor) else arg for arg in args]
        ctx.tensor_indices = [i for i, arg in enumerate(args) if isinstance(arg, Tensor)]
        ctx.save_for_backward(*(args[i] for i in ctx.tensor_indices))
        return run_function(*args)  # Function.apply runs forward without grad

    @staticmethod
    def backward(ctx, *grad_outputs):
        if not _C._is_checkpoint_valid():
            raise RuntimeError("Checkpointing is not compatible with .grad() or when an `inputs` parameter is passed "
                               "to .backward(). Please use .backward() and do not pass its `inputs` argument.")
        inputs = list(ctx.inputs)
        for i, tensor in zip(ctx.tensor_indices, ctx.saved_tensors):
            inputs[i] = tensor
        with fork_rng(enabled=ctx.preserve_rng_state):
            if ctx.preserve_rng_state:
                set_rng_state(ctx.fwd_rng_state)
            detached_inputs = detach_variable(tuple(inputs))
            with enable_grad():
                outputs = ctx.run_function(*detached_inputs)
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        pairs = [(out, grad) for out, grad in zip(outputs, grad_outputs) if isinstance(out, Tensor) and out.requires_grad]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        autograd_backward([out for out, _ in pairs], [grad for _, grad in pairs])
        grads = tuple(inp.grad if isinstance(inp, Tensor) else None for inp in detached_inputs)
        return (None, None) + grads


def checkpoint(function, *args, use_reentrant=True, **kwargs):
    """function(*args), with its activations recomputed in backward instead of kept
    (preserve_rng_state=True by default: the recomputation sees the forward's random state)."""
    preserve = kwargs.pop("preserve_rng_state", True)
    if not use_reentrant:
        raise NotImplementedError("torch.utils.checkpoint.checkpoint(use_reentrant=False) needs saved-tensor hooks, "
                                  "which plugflow's autograd does not have; use use_reentrant=True")
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    return CheckpointFunction.apply(function, preserve, *args)


def checkpoint_sequential(functions, segments, input, use_reentrant=True, **kwargs):  # noqa: A002
    """Runs a sequence of modules (an nn.Sequential or a list) in `segments` chunks, checkpointing
    every chunk but the last."""
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))

    def run_function(start, end, functions):
        def forward(input):  # noqa: A002
            for j in range(start, end + 1):
                input = functions[j](input)
            return input

        return forward

    from ..nn import Sequential

    if isinstance(functions, Sequential):
        functions = list(functions.children())
    segment_size = len(functions) // segments
    end = -1
    for start in range(0, segment_size * (segments - 1), segment_size):
        end = start + segment_size - 1
        input = checkpoint(run_function(start, end, functions), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run_function(end + 1, len(functions) - 1, functions)(input)
