"""plugflow.onnx (torch.onnx): PyTorch's ONNX exporter's names, without the exporter.

Exporting to ONNX needs PyTorch's TorchScript tracer, which plugflow does not have: export() and
export_to_pretty_string() raise NotImplementedError. Libraries register symbolic functions for
their custom operators at import time (torchvision does); register_custom_op_symbolic() checks
and records them, so those libraries load. The symbolic functions in symbolic_helper and
symbolic_opset* exist for those registrations and raise NotImplementedError when called.
operators.shape_as_tensor works (it is plain tensor code).
"""

import re

from . import operators, symbolic_helper, symbolic_opset9, symbolic_opset11  # noqa: F401
from ._refused import refused

__all__ = ["export", "export_to_pretty_string", "is_in_onnx_export", "register_custom_op_symbolic",
           "unregister_custom_op_symbolic", "symbolic_helper", "symbolic_opset9", "symbolic_opset11", "operators"]

# "namespace::op" -> {opset version: symbolic function}, as registered.
_custom_op_symbolics = {}


def export(model, args, f, *pos, **kwargs):
    """Raises NotImplementedError: plugflow cannot export to ONNX."""
    raise refused("torch.onnx.export")


def export_to_pretty_string(model, args, *pos, **kwargs):
    """Raises NotImplementedError: plugflow cannot export to ONNX."""
    raise refused("torch.onnx.export_to_pretty_string")


def is_in_onnx_export():
    """False: no export ever runs."""
    return False


def _check_symbolic_name(symbolic_name):
    if not re.match(r"^[a-zA-Z0-9-_]+::[a-zA-Z-_]+[a-zA-Z0-9-_]*$", symbolic_name):
        raise ValueError(f"Failed to register operator {symbolic_name}. The symbolic name must match the format "
                         "domain::name, and should start with a letter and contain only alphanumerical characters")


def register_custom_op_symbolic(symbolic_name, symbolic_fn, opset_version):
    """Records symbolic_fn as the ONNX translation of the custom operator symbolic_name
    ("namespace::op") from opset_version on."""
    _check_symbolic_name(symbolic_name)
    _custom_op_symbolics.setdefault(symbolic_name, {})[int(opset_version)] = symbolic_fn


def unregister_custom_op_symbolic(symbolic_name, opset_version):
    """Forgets what register_custom_op_symbolic recorded for symbolic_name at opset_version."""
    _check_symbolic_name(symbolic_name)
    _custom_op_symbolics.get(symbolic_name, {}).pop(int(opset_version), None)
