"""plugflow.nn.functional: torch.nn.functional's functions.

Activations run the core's fused kernels (gelu, softplus, leaky_relu, elu, silu, ...) through
_C; the few PyTorch defines as compositions (relu6, selu, celu, logsigmoid, softsign,
tanhshrink) are composed the same way here. `inplace=True` modifies and returns the input.
"""

from .. import _C
from ._functional_loss import _require_float


# ---- activations ---------------------------------------------------------------------------

def relu(input, inplace=False):
    return _C._activation(input, "relu", inplace)


def relu_(input):
    return _C._activation(input, "relu", True)


def sigmoid(input):
    return _C._activation(input, "sigmoid", False)


def tanh(input):
    return _C._activation(input, "tanh", False)


def silu(input, inplace=False):
    return _C._activation(input, "silu", inplace)


def mish(input, inplace=False):
    return _C._activation(input, "mish", inplace)


def hardswish(input, inplace=False):
    return _C._activation(input, "hardswish", inplace)


def hardsigmoid(input, inplace=False):
    return _C._activation(input, "hardsigmoid", inplace)


def gelu(input, *, approximate="none"):
    return _C._gelu(input, approximate)


def softplus(input, beta=1, threshold=20):
    return _C._softplus(input, float(beta), float(threshold))


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _C._leaky_relu(input, float(negative_slope), inplace)


def leaky_relu_(input, negative_slope=0.01):
    return _C._leaky_relu(input, float(negative_slope), True)


def elu(input, alpha=1.0, inplace=False):
    return _C._elu(input, float(alpha), 1.0, 1.0, inplace)


def elu_(input, alpha=1.0):
    return _C._elu(input, float(alpha), 1.0, 1.0, True)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    return _C._elu(input, _SELU_ALPHA, _SELU_SCALE, 1.0, inplace)


def selu_(input):
    return selu(input, True)


def celu(input, alpha=1.0, inplace=False):
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _C._elu(input, float(alpha), 1.0, 1.0 / float(alpha), inplace)


def celu_(input, alpha=1.0):
    return celu(input, alpha, True)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _C._hardtanh(input, min_val, max_val, inplace)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return _C._hardtanh(input, min_val, max_val, True)


def relu6(input, inplace=False):
    return _C._hardtanh(input, 0.0, 6.0, inplace)


def logsigmoid(input):
    _require_float(input.dtype, "log_sigmoid_cpu")
    return -_C._softplus(-input, 1.0, 20.0)


def softsign(input):
    return input / (input.abs() + 1)


def tanhshrink(input):
    return input - input.tanh()


def threshold(input, threshold, value, inplace=False):
    """input where input > threshold, else value (in input's dtype); NaN stays NaN."""
    from .. import _creation, where
    _C._check_scalar_fits(threshold, input.dtype)
    _C._check_scalar_fits(value, input.dtype)
    fill = _creation.full((), value, dtype=input.dtype, device=input.device)
    result = where(input <= threshold, fill, input)
    if inplace:
        return input.copy_(result)
    return result


def threshold_(input, threshold, value):
    return globals()["threshold"](input, threshold, value, True)


# ---- padding and encodings (the shape family's ops in C++) ------------------------------------

def pad(input, pad, mode="constant", value=None):
    """Pads the last len(pad) // 2 dims: "constant" (negative pads crop), "reflect",
    "replicate" or "circular", as torch.nn.functional.pad."""
    return _C.pad(input, pad, mode, value)


def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding along a new last dim; num_classes=-1 infers max + 1."""
    return _C.one_hot(tensor, num_classes)


# ---- softmax family (the reduction family's fused kernels) -------------------------------------

def _get_softmax_dim(name, ndim, stacklevel):
    import warnings

    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                  "as an argument.", stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """exp(x) / sum(exp(x)) along dim, computed stably in one fused kernel; dtype casts first."""
    if dim is None:
        dim = _get_softmax_dim("softmax", input.dim(), _stacklevel)
    return _C.softmax(input, dim, dtype)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """softmax(-x) along dim."""
    if dim is None:
        dim = _get_softmax_dim("softmin", input.dim(), _stacklevel)
    return _C.softmax(-input if dtype is None else -input.to(dtype), dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """log(softmax(x)) along dim, computed stably in one fused kernel; dtype casts first."""
    if dim is None:
        dim = _get_softmax_dim("log_softmax", input.dim(), _stacklevel)
    return _C.log_softmax(input, dim, dtype)

from ._functional_norm import *  # noqa: F401,F403
from ._functional_loss import *  # noqa: F401,F403,E402
from ._functional_layers import *  # noqa: F401,F403,E402
from ._functional_conv import *  # noqa: F401,F403
from ._functional_loss_more import *  # noqa: F401,F403,E402
from ._functional_more import *  # noqa: F401,F403,E402
