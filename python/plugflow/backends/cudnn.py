"""torch.backends.cudnn's flags: enabled, benchmark, deterministic, allow_tf32 (stored only;
benchmark=True means nothing yet beyond being stored: the conv algorithm search is chosen by
the config's optimizations.conv_algo_search)."""

from .. import _C

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True
benchmark_limit = 10


def is_available():
    """True when a CUDA device is usable (plugflow's CUDA plugin brings its convolution library)."""
    return _C.device_count("cuda") > 0


def version():
    """None: plugflow does not report a cuDNN version."""
    return None
