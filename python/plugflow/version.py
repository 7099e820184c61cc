"""torch.version: what code checks before relying on a build feature.

`cuda` is the CUDA version PyTorch was compiled with. plugflow's core is built without CUDA (its CUDA
plugin is loaded at run time, see `python -m plugflow.info`), so it is None, as in a CPU-only
PyTorch; `hip` is None too.
"""

from . import _C

__all__ = ["__version__", "cuda", "hip", "debug"]

__version__ = _C.version()
cuda = None
hip = None
debug = False
