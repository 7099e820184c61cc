"""The Optimizer base class (torch.optim.Optimizer's API and state-dict format).

An optimizer holds `param_groups` (dicts of parameters plus their options, missing options filled
from `defaults`) and `state` (a dict per parameter, keyed by the parameter tensor itself).
`state_dict()` packs both the way PyTorch does, with parameters replaced by their position across
all groups, so a dict saved from PyTorch (tensors converted to plugflow) loads here and back.
"""

import functools
import warnings
from collections import defaultdict
from collections import abc as container_abcs
from copy import deepcopy
from itertools import chain

from .. import _C
from .._C import Tensor
from ..autograd import enable_grad

__all__ = ["Optimizer", "required"]


class _RequiredParameter:
    """Marks a default that every param group must supply (SGD's lr)."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def _typename(obj):
    """The type named in error messages, as torch.typename does for non-tensors."""
    cls = type(obj)
    if isinstance(obj, Tensor):
        return "plugflow.Tensor"
    if cls.__module__ in ("builtins", "__builtin__", None):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _use_grad_for_differentiable(step):
    """Runs step() with grad mode equal to the group's `differentiable` flag (off by default), so
    updates are not recorded unless the user asked to differentiate through the optimizer."""

    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        prev = _C.is_grad_enabled()
        try:
            _C._set_grad_enabled(bool(self.defaults.get("differentiable", False)))
            return step(self, *args, **kwargs)
        finally:
            _C._set_grad_enabled(prev)

    return wrapper


def _evaluate_closure(closure):
    """The loss from step()'s optional closure, evaluated with grad on (step itself runs without)."""
    if closure is None:
        return None
    with enable_grad():
        return closure()


def _check_dense(grad, optimizer_name):
    """plugflow has no sparse tensors; a sparse-like gradient (anything claiming is_sparse) is
    rejected with PyTorch's message rather than silently densified."""
    if getattr(grad, "is_sparse", False):
        raise RuntimeError(f"{optimizer_name} does not support sparse gradients")


def _params_with_grads(optimizer, group, optimizer_name, new_state):
    """The parameters of `group` that have a gradient, their gradients and their state dicts;
    `new_state(p)` gives a parameter's first state."""
    params, grads, states = [], [], []
    for p in group["params"]:
        if p.grad is None:
            continue
        _check_dense(p.grad, optimizer_name)
        state = optimizer.state[p]
        if len(state) == 0:
            state.update(new_state(p))
        params.append(p)
        grads.append(p.grad)
        states.append(state)
    return params, grads, states


_fused_kernel_cache = {}


def _can_fuse(op, param, *tensors):
    """Whether a fused one-pass step (_C._sgd_step_, _C._adam_step_) may update `param` with the
    other (possibly None) tensors: grad mode off (the fused ops are invisible to autograd, so
    differentiable=True keeps the op-by-op path), every tensor dense with param's shape and
    dtype, and a kernel for them on param's device (float32/float64 on the CPU today). Tensors on
    another device fail in the op as they would in the op-by-op update. Runs once per parameter
    and step, so it stays a few attribute reads."""
    if _C.is_grad_enabled() or not param.is_contiguous():
        return False
    dtype, shape = param.dtype, param.shape
    for t in tensors:
        if t is not None and not (t.is_contiguous() and t.dtype == dtype and t.shape == shape):
            return False
    key = (op, param.device.type, param.dtype)
    has_kernel = _fused_kernel_cache.get(key)
    if has_kernel is None:
        has_kernel = _fused_kernel_cache[key] = _C.chosen_provider(op, param.device.type, param.dtype) != ""
    return has_kernel


class Optimizer:
    r"""Base class for all optimizers.

    Args:
        params (iterable): tensors, or dicts of options with a 'params' entry, to optimize.
            Use an ordered collection: positions define the state-dict format.
        defaults (dict): option values for groups that do not give their own.
    """

    def __init__(self, params, defaults):
        self.defaults = defaults
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            "but got " + _typename(params))
        self.state = defaultdict(dict)
        self.param_groups = []

        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for param_group in param_groups:
            self.add_param_group(param_group)

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.defaults.setdefault("differentiable", False)

    def __repr__(self):
        lines = [self.__class__.__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {key}: {group[key]}" for key in sorted(group) if key != "params")
        return "\n".join(lines) + "\n)"

    def state_dict(self):
        """The optimizer's state as {'state': {index: dict}, 'param_groups': [dict]}: each
        parameter is replaced by its position, counted across groups in order."""
        param_mappings = {}
        start_index = 0

        def pack_group(group):
            nonlocal start_index
            packed = {k: v for k, v in group.items() if k != "params"}
            param_mappings.update({id(p): i for i, p in enumerate(group["params"], start_index)
                                   if id(p) not in param_mappings})
            packed["params"] = [param_mappings[id(p)] for p in group["params"]]
            start_index += len(packed["params"])
            return packed

        param_groups = [pack_group(g) for g in self.param_groups]
        packed_state = {(param_mappings[id(k)] if isinstance(k, Tensor) else k): v for k, v in self.state.items()}
        return {"state": packed_state, "param_groups": param_groups}

    def load_state_dict(self, state_dict):
        """Loads a dict made by state_dict() (here or, converted, by PyTorch). Group options come
        from the dict; state tensors are copied and cast to their parameter's device (and dtype,
        for floating parameters, except the step counter)."""
        state_dict = deepcopy(state_dict)  # the caller's dict stays untouched, as in Module
        groups = self.param_groups
        saved_groups = state_dict["param_groups"]
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")

        id_map = dict(zip(chain.from_iterable(g["params"] for g in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)))

        def cast(param, value, key=None):
            if isinstance(value, Tensor):
                if key != "step":  # the step counter keeps its own dtype and device
                    if param.is_floating_point():
                        value = value.to(param.dtype)
                    value = value.to(param.device)
                return value
            if isinstance(value, dict):
                return {k: cast(param, v, key=k) for k, v in value.items()}
            if isinstance(value, container_abcs.Iterable) and not isinstance(value, str):
                return type(value)(cast(param, v) for v in value)
            return value

        # State of known parameters is re-keyed by the tensor; anything else is kept as is.
        state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                param = id_map[k]
                state[param] = cast(param, v)
            else:
                state[k] = v

        param_groups = []
        for group, saved in zip(groups, saved_groups):
            saved["params"] = group["params"]
            param_groups.append(saved)
        self.__setstate__({"state": state, "param_groups": param_groups})

    def zero_grad(self, set_to_none: bool = False):
        """Zeroes every parameter's .grad, or sets it to None with set_to_none=True (then the next
        step skips parameters that get no gradient, rather than stepping with zeros)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    def step(self, closure):
        """Performs one update; closure (optional in most optimizers) re-evaluates the loss."""
        raise NotImplementedError

    def add_param_group(self, param_group):
        """Adds a group of parameters with its own options (e.g. unfreezing layers later)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param group must be a dict, but got {_typename(param_group)}")

        params = param_group["params"]
        if isinstance(params, Tensor):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
        else:
            param_group["params"] = list(params)

        for param in param_group["params"]:
            if not isinstance(param, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is " + _typename(param))
            if not self.defaults.get("differentiable", None) and not (param.is_leaf or param.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")

        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError("parameter group didn't specify a value of required optimization parameter " + name)
            param_group.setdefault(name, default)
        if "lr" in param_group and param_group["lr"] is not required and param_group["lr"] < 0.0:
            raise ValueError(f"Invalid learning rate: {param_group['lr']}")

        # Tensors hash by identity, so sets compare parameters by object, as PyTorch does.
        params = param_group["params"]
        if len(params) != len(set(params)):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will "
                          "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)

        param_set = set()
        for group in self.param_groups:
            param_set.update(group["params"])
        if not param_set.isdisjoint(param_group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")

        self.param_groups.append(param_group)
