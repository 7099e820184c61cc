"""plugflow: a deep-learning training runtime with a PyTorch-compatible API.

    import plugflow as torch

Importing plugflow starts the runtime once: it applies the config named by PLUGFLOW_CONFIG, or
the built-in default (configs/cpu.yaml), which loads the device and collective plugins.
`plugflow.init(path)` replaces it with another config (keys the file leaves out keep the
default's values; plugins it does not list are no longer used); `python -m plugflow.info` shows
what is loaded.
"""

import importlib as _importlib
import os as _os
from math import e, inf, nan, pi  # noqa: F401  (torch.pi, torch.e, torch.inf, torch.nan)


def _select_openblas_kernels():
    """OpenBLAS 0.3.21 (Debian 12) does not know recent Xeons' CPUID models and falls back to its
    slowest (Prescott) kernels: GEMM, and so matmul and conv, run 3-5x slower. Unless the user
    chose a core, name one from the CPU's features. It must be set before the CPU plugin loads
    OpenBLAS (it changes nothing when another library in the process loaded OpenBLAS first)."""
    if "OPENBLAS_CORETYPE" in _os.environ:
        return
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"} <= set(flags):
        _os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif {"avx2", "fma"} <= set(flags):
        _os.environ["OPENBLAS_CORETYPE"] = "Haswell"


def _limit_openmp_spinning():
    """libgomp's default keeps idle workers spinning for ~300000 iterations after each parallel
    region. plugflow's loops, oneDNN and its GEMMs share that one pool, but on a machine shared
    with other processes (or other thread pools: numpy's OpenBLAS, a DataLoader) the spinning
    workers take the cores from whoever has work: a BERT-tiny training step on a busy 2-core
    machine ran up to 6x slower with the default. A short spin keeps back-to-back regions cheap
    and lets idle workers sleep soon. Set before libgomp loads."""
    if "GOMP_SPINCOUNT" not in _os.environ and "OMP_WAIT_POLICY" not in _os.environ:
        _os.environ["GOMP_SPINCOUNT"] = "20000"


_select_openblas_kernels()
_limit_openmp_spinning()

from . import _C  # noqa: E402
from ._C import ConfigError, PluginError, Tensor, device, dtype, Generator, default_generator
from ._C import (bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64,  # noqa: A004
                 promote_types, can_cast, init, set_num_threads, get_num_threads)
from ._size import Size
from . import _tensor  # noqa: F401  (installs Tensor's Python methods)
from ._memory_format import (memory_format, contiguous_format, channels_last, channels_last_3d,  # noqa: E402,F401
                             preserve_format, empty_strided)
from ._tensor_str import set_printoptions, get_printoptions
from ._creation import (get_default_dtype, set_default_dtype, is_tensor, tensor, as_tensor, empty, zeros, ones, full, scalar_tensor, arange,
                        linspace, frombuffer, rand, randn, randint, empty_like, zeros_like, ones_like, full_like, rand_like,
                        randn_like, randint_like, randperm, layout, strided)
from . import return_types, cuda, random
from .random import seed, get_rng_state, set_rng_state
from ._memory import (memory_stats, memory_allocated, max_memory_allocated, reset_peak_memory_stats,  # noqa: E402
                      empty_cache)
from . import autograd  # noqa: E402
from .autograd import (no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled,  # noqa: E402
                       is_inference_mode_enabled)
from . import nn  # noqa: E402  (nn.functional; bindings must exist first)
from .nn.functional import pdist  # noqa: E402,F401  (torch.pdist is nn.functional.pdist)

__version__ = _C.version()

# The functional API bound in C++ (plugflow.add, plugflow.exp, plugflow.sum, plugflow.from_numpy,
# ...): _C lists the names it exports at the top level.
globals().update({name: getattr(_C, name) for name in _C._public_functions})
from ._composite import *  # noqa: F401,F403,E402  (allclose, eye, diag, nan_to_num, finfo, normal, ...)
from ._composite_more import *  # noqa: F401,F403,E402  (arccos, lgamma, cummax, cov, index_copy, ...)

# PyTorch's dtype aliases (torch.float is float32, torch.long is int64, ...).
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16

_C.ensure_initialized()

from . import futures  # noqa: E402,F401  (plugflow.futures.Future)
from . import distributed  # noqa: E402,F401  (plugflow.distributed after `import plugflow`)
from . import utils, mock_torch  # noqa: E402,F401  (plugflow.utils.data; mock_torch.enable())
from .serialization import save, load  # noqa: E402,F401
from . import optim  # noqa: E402,F401  (plugflow.optim, plugflow.optim.lr_scheduler)
from . import backends  # noqa: E402,F401  (plugflow.backends.cudnn, .mkldnn, .cuda flags)
from . import amp, cpu  # noqa: E402,F401  (plugflow.amp, plugflow.cpu.amp; plugflow.cuda.amp loads on first use)
from .amp import autocast  # noqa: E402,F401
from ._ops import ops  # noqa: E402,F401  (torch.ops: C++ operator namespaces, torchvision's on plugflow's kernels)
from . import linalg, special, version  # noqa: E402,F401  (torch.linalg, torch.special.xlog1py, torch.version.cuda)
from .linalg import (inverse, det, logdet, cholesky_solve, cholesky_inverse, pinverse,  # noqa: E402,F401
                     matrix_power, _slogdet_function as slogdet, triangular_solve, matrix_exp,
                     _svd_function as svd, _qr_function as qr, symeig, orgqr)
from . import testing  # noqa: E402,F401  (torch.testing.assert_close after `import torch`)
from . import distributions  # noqa: E402,F401  (torch.distributions)
from ._namespace_more import *  # noqa: F401,F403,E402  (F's top-level aliases, chain_matmul, poisson, settings, ...)
from ._tensortype import legacy_types as _legacy_types  # noqa: E402

globals().update(_legacy_types("cpu"))  # FloatTensor, LongTensor, ... (constructors and isinstance tests)


def _assert(condition, message):
    """torch._assert: `assert condition, message` as a function call (PyTorch's form for code
    that tracers must see)."""
    assert condition, message


# Submodules that `import torch` loads and plugflow loads on first use, so that code reaching
# them through the package (torch.jit.is_scripting(), torch.hub.load_state_dict_from_url) works
# without importing them itself.
_LAZY_SUBMODULES = ("hub", "jit", "onnx", "fx", "multiprocessing", "ao", "_six", "profiler")


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        return _importlib.import_module("." + name, __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
