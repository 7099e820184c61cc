"""torch.backends.cudnn's flags: enabled, benchmark, deterministic, allow_tf32, plus plugflow's
workspace_limit_mb.

allow_tf32 (default True, as PyTorch) lets float32 convolutions on CUDA use TF32 tensor math;
workspace_limit_mb (default 4096) caps the scratch memory one convolution algorithm may take.
Both act on the next convolution call. enabled, benchmark and deterministic are stored only:
the conv algorithm search is chosen by the config's optimizations.conv_algo_search."""

import sys
import types

from .. import _C


def is_available():
    """True when a CUDA device is usable (plugflow's CUDA plugin brings its convolution library)."""
    return _C.device_count("cuda") > 0


def version():
    """None: plugflow does not report a cuDNN version."""
    return None


class _CudnnModule(types.ModuleType):
    """The module's class: allow_tf32 and workspace_limit_mb read and write the runtime's
    convolution settings, so `plugflow.backends.cudnn.allow_tf32 = False` works as in PyTorch."""

    @property
    def allow_tf32(self):
        return _C.conv_settings()["allow_tf32"]

    @allow_tf32.setter
    def allow_tf32(self, value):
        s = _C.conv_settings()
        _C.set_conv_settings(allow_tf32=bool(value), workspace_limit_bytes=s["workspace_limit_bytes"])

    @property
    def workspace_limit_mb(self):
        return _C.conv_settings()["workspace_limit_bytes"] // (1 << 20)

    @workspace_limit_mb.setter
    def workspace_limit_mb(self, value):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"workspace_limit_mb: expected a non-negative integer, got {value!r}")
        s = _C.conv_settings()
        _C.set_conv_settings(allow_tf32=s["allow_tf32"], workspace_limit_bytes=value << 20)


enabled = True
benchmark = False
deterministic = False
benchmark_limit = 10

sys.modules[__name__].__class__ = _CudnnModule
