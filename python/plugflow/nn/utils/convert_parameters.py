"""Flattening parameters to one vector and back (torch.nn.utils.convert_parameters)."""

from ... import _C
from ..._C import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters):
    """All parameters flattened and concatenated into one 1-d tensor (a copy, differentiable)."""
    param_device = None
    vec = []
    for param in parameters:
        param_device = _check_param_device(param, param_device)
        vec.append(param.reshape(-1))
    return _C.cat(vec)


def vector_to_parameters(vec, parameters):
    """Points each parameter's data at its consecutive slice of vec (no copy), in order."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    param_device = None
    pointer = 0
    for param in parameters:
        param_device = _check_param_device(param, param_device)
        num_param = param.numel()
        param.data = vec[pointer:pointer + num_param].view_as(param).data
        pointer += num_param


def _check_param_device(param, old_param_device):
    """The device index all parameters share (-1 for CPU); TypeError on a mix."""
    if old_param_device is None:
        return param.get_device() if param.is_cuda else -1
    mismatch = param.get_device() != old_param_device if param.is_cuda else old_param_device != -1
    if mismatch:
        raise TypeError("Found two parameters on different devices, this is currently not supported.")
    return old_param_device
