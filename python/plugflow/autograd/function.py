"""plugflow.autograd.Function: custom differentiable operations written in Python."""

from .. import _C
from .._C import Tensor
from .grad_mode import no_grad


class FunctionCtx:
    """The `ctx` passed to forward and backward."""

    def __init__(self):
        self.to_save = ()
        self._saved = None
        self.non_differentiable = ()
        self.dirty = ()
        self.materialize_grads = True
        self.needs_input_grad = ()

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError("save_for_backward can only save variables, but argument "
                                f"{tensors.index(t)} is of type {type(t).__name__}")
        self.to_save = tensors

    @property
    def saved_tensors(self):
        if self._saved is None:
            raise RuntimeError("saved_tensors is only available inside backward (the tensors are saved by the "
                               "autograd graph, and freed after backward unless retain_graph=True)")
        return self._saved

    def mark_non_differentiable(self, *tensors):
        self.non_differentiable = tensors

    def mark_dirty(self, *tensors):
        raise NotImplementedError("mark_dirty (in-place custom Functions) is not supported yet; return a new tensor "
                                  "from forward instead")

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)


class _FunctionMeta(type):
    pass


class Function(metaclass=_FunctionMeta):
    """Subclass with static `forward(ctx, *args)` and `backward(ctx, *grads)`; call `.apply`."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is deprecated. Please use new-style "
                           "autograd function with static forward method.")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        tensor_args = [a if isinstance(a, Tensor) else None for a in args]
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with no_grad():
            outputs = cls.forward(ctx, *args, **kwargs)
        is_tuple = isinstance(outputs, tuple)
        outs = outputs if is_tuple else (outputs,)
        if _C.is_grad_enabled() and any(ctx.needs_input_grad):
            # Outputs that alias an input get a fresh identity, so the input keeps its history.
            outs = tuple(o.detach() if isinstance(o, Tensor) and any(o is a for a in args) else o for o in outs)
            tensor_outs = [o for o in outs if isinstance(o, Tensor)]
            num_inputs = len(args)
            materialize = ctx.materialize_grads
            out_meta = [(o.shape, o.dtype, o.device) if isinstance(o, Tensor) else None for o in outs]

            def backward(saved, *grads):
                if materialize:
                    from .. import _creation
                    grads = tuple(g if g is not None or m is None else _creation.zeros(m[0], dtype=m[1], device=m[2])
                                  for g, m in zip(grads, out_meta))
                ctx._saved = tuple(saved)
                try:
                    result = cls.backward(ctx, *grads)
                finally:
                    ctx._saved = None
                result = result if isinstance(result, tuple) else (result,)
                if len(result) < num_inputs:
                    raise RuntimeError(f"function {cls.__name__}Backward returned an incorrect number of gradients "
                                       f"(expected {num_inputs}, got {len(result)})")
                result = result[:num_inputs] if all(r is None for r in result[num_inputs:]) else result
                if len(result) != num_inputs:
                    raise RuntimeError(f"function {cls.__name__}Backward returned an incorrect number of gradients "
                                       f"(expected {num_inputs}, got {len(result)})")
                return tuple(g if isinstance(a, Tensor) else None for g, a in zip(result, args))

            _C._record_function(cls.__name__ + "Backward", backward, tensor_args, tensor_outs, list(ctx.to_save),
                                list(ctx.non_differentiable))
            ctx.to_save = ()
            outputs = outs if is_tuple else outs[0]
        return outputs
