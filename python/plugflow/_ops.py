"""plugflow.ops (torch.ops): PyTorch's registry of C++ operators.

Libraries such as torchvision register C++ kernels through torch.ops.load_library and call them as
torch.ops.<namespace>.<op>. Those libraries are compiled against PyTorch's C++ ABI, so plugflow
cannot load them. One is recognized instead: torchvision's own operator library (`torchvision/_C.*`)
"loads" by registering plugflow's implementations of its operators as torch.ops.torchvision (nms,
roi_align and roi_pool run plugflow's kernels; ps_roi_align, ps_roi_pool and deform_conv2d raise
NotImplementedError when called). Any other library raises OSError (what torchvision catches for
its image and video extensions). Looking up an operator that is not registered raises
AttributeError naming it (PyTorch's error type, so `getattr(torch.ops.ns, "op", None)` works).
"""

import os
import types

from . import _C

__all__ = ["ops"]

_WHY = "plugflow cannot load PyTorch C++ extensions (they are built against PyTorch's C++ ABI)"


class _OpNamespace(types.ModuleType):
    """torch.ops.<namespace>: the operators registered under it; any other lookup fails."""

    def __init__(self, name):
        super().__init__("torch.ops." + name)
        self.name = name

    def __getattr__(self, op_name):
        if op_name.startswith("__"):
            raise AttributeError(op_name)
        raise AttributeError(f"torch.ops.{self.name}.{op_name}: {self.name}::{op_name} is a PyTorch C++ operator; "
                             f"{_WHY}")


def _not_built(op, what):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"torch.ops.torchvision.{op}: plugflow has no kernel for torchvision's {what} yet")
    refuse.__name__ = op
    return refuse


def _torchvision_namespace():
    """torch.ops.torchvision with torchvision 0.14's operator signatures on plugflow's kernels."""
    ns = _OpNamespace("torchvision")

    def nms(dets, scores, iou_threshold):
        return _C._nms(dets, scores, float(iou_threshold))

    def roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
        return _C._roi_align(input, rois, float(spatial_scale), int(pooled_height), int(pooled_width),
                             int(sampling_ratio), bool(aligned))

    def roi_pool(input, rois, spatial_scale, pooled_height, pooled_width):
        return _C._roi_pool(input, rois, float(spatial_scale), int(pooled_height), int(pooled_width))

    def _cuda_version():
        return -1  # what torchvision's library reports when built without CUDA

    for fn in (nms, roi_align, roi_pool, _cuda_version):
        setattr(ns, fn.__name__, fn)
    ns.ps_roi_align = _not_built("ps_roi_align", "position-sensitive RoIAlign")
    ns.ps_roi_pool = _not_built("ps_roi_pool", "position-sensitive RoIPool")
    ns.deform_conv2d = _not_built("deform_conv2d", "deformable convolution")
    return ns


def _is_torchvision_ops_library(path):
    """torchvision's operator library: <...>/torchvision/_C.<abi tag>.so (or .pyd)."""
    path = os.path.abspath(os.fspath(path))
    name = os.path.basename(path)
    return (os.path.basename(os.path.dirname(path)) == "torchvision" and name.startswith("_C.")
            and name.endswith((".so", ".pyd")))


class _Ops(types.ModuleType):
    def __init__(self):
        super().__init__("torch.ops")
        self.loaded_libraries = set()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        namespace = _OpNamespace(name)
        setattr(self, name, namespace)
        return namespace

    def load_library(self, path):
        """Registers plugflow's torchvision operators for torchvision's `_C` library; raises OSError
        for any other library (plugflow cannot load PyTorch C++ extensions)."""
        if not _is_torchvision_ops_library(path):
            raise OSError(f"torch.ops.load_library({str(path)!r}): {_WHY}")
        self.torchvision = _torchvision_namespace()
        self.loaded_libraries.add(os.path.abspath(os.fspath(path)))


ops = _Ops()
