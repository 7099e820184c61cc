"""plugflow.autocast: mixed precision regions (torch.autocast, PyTorch 1.13's behaviour).

Inside `with plugflow.autocast("cpu"):` (bfloat16) or `with plugflow.autocast("cuda"):`
(float16 by default), the ops on PyTorch's autocast lists cast their floating inputs: matrix
products and convolutions to the lower-precision dtype, losses and a few others to float32,
cat/stack to the widest input type; every other op runs in the types it receives. The casting
happens in the core's functional layer (plugflow/autocast.h), so Tensor methods, torch-style
functions and nn.functional arrive at the same policy, and autograd records the casts:
gradients reach float32 parameters in float32. The state is per thread; regions nest, and
`enabled=False` turns autocast off inside an enabled region.
"""

import functools
import warnings

from .. import _C, cuda

__all__ = ["autocast", "custom_fwd", "custom_bwd"]


class autocast:
    """Context manager and decorator: ops in the region run in mixed precision.

    device_type: 'cuda' or 'cpu'. dtype: the lower-precision type (CPU: bfloat16 only, as in
    PyTorch 1.13; CUDA: float16 or bfloat16), default get_autocast_cpu_dtype() /
    get_autocast_gpu_dtype(). cache_enabled: cast each float32 parameter once per region
    (default: the current is_autocast_cache_enabled())."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        self.device = device_type
        if device_type == "cuda":
            self.fast_dtype = _C.get_autocast_gpu_dtype()
        elif device_type == "cpu":
            self.fast_dtype = _C.get_autocast_cpu_dtype()
        else:
            raise RuntimeError("User specified autocast device_type must be 'cuda' or 'cpu'")
        self._cache_enabled = _C.is_autocast_cache_enabled()
        if enabled and device_type == "cuda" and not cuda.is_available():
            warnings.warn("User provided device_type of 'cuda', but CUDA is not available. Disabling")
            enabled = False
        if dtype is not None:
            self.fast_dtype = dtype
        if cache_enabled is not None:
            self._cache_enabled = cache_enabled
        if device_type == "cpu" and self.fast_dtype is not _C.bfloat16:
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
                          "CPU Autocast only supports dtype of torch.bfloat16 currently.")
            enabled = False
        self._enabled = enabled

    def __enter__(self):
        self.prev_cache_enabled = _C.is_autocast_cache_enabled()
        if self.device == "cpu":
            self.prev = _C.is_autocast_cpu_enabled()
            self.prev_fastdtype = _C.get_autocast_cpu_dtype()
            _C.set_autocast_cpu_enabled(self._enabled)
            _C.set_autocast_cpu_dtype(self.fast_dtype)
        else:
            self.prev = _C.is_autocast_enabled()
            self.prev_fastdtype = _C.get_autocast_gpu_dtype()
            _C.set_autocast_gpu_dtype(self.fast_dtype)
            _C.set_autocast_enabled(self._enabled)
        _C.autocast_increment_nesting()
        _C.set_autocast_cache_enabled(self._cache_enabled)
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        # The cached casts live until the outermost region exits.
        if _C.autocast_decrement_nesting() == 0:
            _C.clear_autocast_cache()
        if self.device == "cpu":
            _C.set_autocast_cpu_enabled(self.prev)
            _C.set_autocast_cpu_dtype(self.prev_fastdtype)
        else:
            _C.set_autocast_enabled(self.prev)
            _C.set_autocast_gpu_dtype(self.prev_fastdtype)
        _C.set_autocast_cache_enabled(self.prev_cache_enabled)
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return decorate_autocast


def _autocast_op(name):
    """Decorates a Python-composed op on the autocast lists (losses, conv1d, cdist, ...): in an
    autocast region its tensor arguments get op `name`'s cast (the core's policy table) and its
    body runs with autocast off for that device type, as PyTorch runs a listed op's kernel."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if _C._autocast_active():
                return _C._autocast_call(name, fn, args, kwargs)
            return fn(*args, **kwargs)
        return wrapper
    return decorate


def _is_enabled(device_type):
    return _C.is_autocast_cpu_enabled() if device_type == "cpu" else _C.is_autocast_enabled()


def _lower_dtype(device_type):
    return _C.get_autocast_cpu_dtype() if device_type == "cpu" else _C.get_autocast_gpu_dtype()


def _cast(value, device_type, dtype):
    """Floating tensors of `device_type` (not float64) in nested containers, cast to dtype."""
    if isinstance(value, _C.Tensor):
        eligible = value.is_floating_point() and value.device.type == device_type and value.dtype is not _C.float64
        return value.to(dtype) if eligible else value
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, dict):
        return {_cast(k, device_type, dtype): _cast(v, device_type, dtype) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, device_type, dtype) for v in value)
    return value


def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
    """Decorates the forward of an autograd.Function. With cast_inputs (a dtype), inside an
    autocast region of `device_type` the floating tensor arguments are cast to it and forward
    runs with autocast off; otherwise forward runs in the current autocast state, which
    custom_bwd then restores for backward."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args, **kwargs):
        ctx = args[0]
        ctx._dtype = _lower_dtype(device_type)
        if cast_inputs is None:
            ctx._fwd_used_autocast = _is_enabled(device_type)
            return fwd(*args, **kwargs)
        autocast_context = _is_enabled(device_type)
        ctx._fwd_used_autocast = False
        if autocast_context:
            with autocast(device_type, enabled=False):
                return fwd(*_cast(args, device_type, cast_inputs), **_cast(kwargs, device_type, cast_inputs))
        return fwd(*args, **kwargs)
    return decorate_fwd


def custom_bwd(bwd=None, *, device_type):
    """Decorates the backward of an autograd.Function: it runs in the autocast state its
    forward (decorated with custom_fwd) ran in."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(*args, **kwargs):
        ctx = args[0]
        with autocast(device_type, enabled=ctx._fwd_used_autocast, dtype=ctx._dtype):
            return bwd(*args, **kwargs)
    return decorate_bwd
