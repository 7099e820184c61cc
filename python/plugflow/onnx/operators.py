"""plugflow.onnx.operators (torch.onnx.operators): shape helpers written to trace well."""

from .. import _creation
from .._C import int64


def shape_as_tensor(x):
    """x's shape as a 1-d int64 tensor."""
    return _creation.tensor(list(x.shape), dtype=int64)


def reshape_from_tensor_shape(x, shape):
    """x reshaped to the shape held in the 1-d tensor shape."""
    return x.reshape(shape.tolist())
