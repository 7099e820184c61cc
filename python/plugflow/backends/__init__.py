"""plugflow.backends: torch.backends' switches, so scripts that set them run unchanged.

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False

The flags are stored and read back; only cudnn.allow_tf32 and cudnn.workspace_limit_mb act (on
CUDA convolutions). In particular `cudnn.benchmark = True` does not start an algorithm search:
how convolution algorithms are chosen is set by the config's `optimizations.conv_algo_search`.
`cudnn.is_available()` and `mkldnn.is_available()` say whether the loaded plugins provide such a
library; `mps.is_available()` is False (no plugin provides Apple's Metal).
"""

from . import cudnn, mkldnn, cuda, mps  # noqa: F401

__all__ = ["cudnn", "mkldnn", "cuda", "mps"]
