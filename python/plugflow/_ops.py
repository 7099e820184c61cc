"""plugflow.ops (torch.ops): PyTorch's registry of C++ operators.

Libraries such as torchvision register C++ kernels through torch.ops.load_library and call them as
torch.ops.<namespace>.<op>. Those libraries are compiled against PyTorch's C++ ABI, so plugflow
cannot load them. One is recognized instead: torchvision's own operator library (`torchvision/_C.*`)
"loads" by registering plugflow's implementations of its operators as torch.ops.torchvision: nms,
roi_align, roi_pool, ps_roi_align, ps_roi_pool and deform_conv2d, with torchvision 0.14's
signatures, run plugflow's kernels (differentiable as torchvision's; their backward operators are
not exposed). Any other library raises OSError (what torchvision catches for its image and video
extensions). Looking up an operator that is not registered raises
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

    def ps_roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio):
        return _C._ps_roi_align(input, rois, float(spatial_scale), int(pooled_height), int(pooled_width),
                                int(sampling_ratio))

    def ps_roi_pool(input, rois, spatial_scale, pooled_height, pooled_width):
        return _C._ps_roi_pool(input, rois, float(spatial_scale), int(pooled_height), int(pooled_width))

    def deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                      groups, offset_groups, use_mask):
        # torchvision passes a placeholder mask (and a zero bias) when there is none
        return _C._deform_conv2d(input, weight, offset, mask if use_mask else None, bias,
                                 [int(stride_h), int(stride_w)], [int(pad_h), int(pad_w)],
                                 [int(dilation_h), int(dilation_w)], int(groups), int(offset_groups))

    def _cuda_version():
        return -1  # what torchvision's library reports when built without CUDA

    for fn in (nms, roi_align, roi_pool, ps_roi_align, ps_roi_pool, deform_conv2d, _cuda_version):
        setattr(ns, fn.__name__, fn)
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
