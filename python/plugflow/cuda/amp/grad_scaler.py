"""GradScaler (torch.cuda.amp.GradScaler): dynamic loss scaling for float16 training."""

import enum
import warnings

from ... import _C, _creation
from ..._C import Tensor
from ...autograd.grad_mode import no_grad
from ... import cuda

__all__ = ["GradScaler"]


class _OptState(enum.Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


class GradScaler:
    """Multiplies the loss by a scale before backward so float16 gradients do not underflow, and
    for each optimizer step: divides the gradients by it (unscale_), skips the step when any of
    them is inf or NaN, and adjusts the scale (update: times backoff_factor after a skipped step,
    times growth_factor after growth_interval steps in a row without one).

    enabled=True without a usable CUDA device warns and disables the scaler, as PyTorch does:
    scale() then returns its argument, step() calls optimizer.step(), and get_scale() is 1.0.
    """

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        if enabled and not cuda.is_available():
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.")
            enabled = False
        self._enabled = enabled
        if enabled:
            if growth_factor <= 1.0:
                raise ValueError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise ValueError("The backoff factor must be < 1.0.")
            self._scale = float(init_scale)
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._growth_tracker = 0
            self._per_optimizer_states = {}  # id(optimizer) -> {"stage": _OptState, "found_inf": bool}

    def _state(self, optimizer):
        return self._per_optimizer_states.setdefault(id(optimizer), {"stage": _OptState.READY, "found_inf": None})

    def scale(self, outputs):
        """outputs (a tensor or nested lists/tuples of them) times the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            # A 1-element float32 tensor, as PyTorch's scale: a float16 loss is scaled in float32
            # (and a 0-d loss becomes shape (1,)).
            return outputs * _creation.full((1,), self._scale, dtype=_C.float32, device=outputs.device)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(v) for v in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer):
        """Divides the gradients of optimizer's parameters by the scale, in place, and records
        whether any is inf or NaN. step() calls it unless you did (e.g. to clip gradients)."""
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] is _OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is _OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = 1.0 / self._scale
        found_inf = False
        with no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    if param.grad.dtype == _C.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    param.grad.mul_(inv_scale)
                    found_inf = found_inf or not bool(param.grad.isfinite().all().item())
        state["found_inf"] = found_inf
        state["stage"] = _OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(*args, **kwargs) unless the unscaled gradients hold inf or NaN (then
        None, and the step is skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        state = self._state(optimizer)
        if state["stage"] is _OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is _OptState.READY:
            self.unscale_(optimizer)
        result = None if state["found_inf"] else optimizer.step(*args, **kwargs)
        state["stage"] = _OptState.STEPPED
        return result

    def update(self, new_scale=None):
        """Adjusts the scale after this iteration's steps (or sets it to new_scale)."""
        if not self._enabled:
            return
        if new_scale is not None:
            if isinstance(new_scale, Tensor):
                if new_scale.numel() != 1 or not new_scale.is_floating_point():
                    raise ValueError("new_scale should be a float or a 1-element floating-point tensor.")
                new_scale = new_scale.item()
            self._scale = float(new_scale)
        else:
            found = [s["found_inf"] for s in self._per_optimizer_states.values() if s["found_inf"] is not None]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(found):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
        self._per_optimizer_states = {}

    def get_scale(self):
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = new_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = new_factor

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = new_interval

    def is_enabled(self):
        return self._enabled

    def state_dict(self):
        """PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker
        (empty when disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled instance "
                               "of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._growth_tracker = state_dict["_growth_tracker"]
