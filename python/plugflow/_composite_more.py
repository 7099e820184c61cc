"""More PyTorch functions composed from plugflow's ops: aliases (arccos, greater, fix, torch.abs_,
...), special functions (lgamma, digamma, polygamma, i0), scans (cummax, logcumsumexp), statistics
(cov, corrcoef, nanmean), window functions, scatter forms (index_copy, masked_scatter,
scatter_reduce, *_scatter), the in-place random fills (random_, exponential_, ...) and the legacy
Tensor.new. Gradients flow through the composing ops; where their derivative is not PyTorch's (a
special function, a reduction's tie rule) an autograd Function gives PyTorch's. Importing this
module installs the matching Tensor methods."""

import builtins
import itertools
import math

from . import _C, _creation
from ._C import Tensor
from . import return_types as _return_types
from ._composite import (_check_tensor, _wrap_dim, _with_out, _FLOATS, _INTS, broadcast_shapes, diag, diagonal,
                         logaddexp, searchsorted)
from .nn._functional_loss import _type_name
from .autograd import no_grad
from .autograd.function import Function as _Function

__all__ = [
    "arccos", "arccos_", "arcsin", "arcsin_", "arctan", "arctan_", "arctan2", "arccosh", "arccosh_", "arcsinh",
    "arcsinh_", "arctanh", "arctanh_", "greater", "greater_equal", "less", "less_equal", "not_equal", "positive",
    "fix", "fix_", "ravel", "is_nonzero", "is_complex", "is_signed", "is_same_size", "resolve_conj", "resolve_neg",
    "conj", "conj_physical", "conj_physical_", "is_conj", "is_neg", "adjoint", "unsafe_chunk", "unsafe_split",
    "narrow_copy", "hsplit", "vsplit", "dsplit",
    "deg2rad", "deg2rad_", "rad2deg", "rad2deg_", "sgn", "signbit", "sinc", "sinc_", "logit", "logit_", "lgamma",
    "digamma", "polygamma", "mvlgamma", "i0", "i0_", "fmax", "fmin", "gcd", "gcd_", "lcm", "lcm_", "ldexp", "ldexp_",
    "frexp", "logaddexp2", "nanmean", "logcumsumexp", "cummax", "cummin", "isin", "isneginf", "isposinf", "isreal",
    "renorm", "dist", "inner", "kron", "cov", "corrcoef", "vander", "trapezoid", "trapz", "diagflat", "block_diag",
    "cartesian_prod", "combinations", "logspace", "hann_window", "hamming_window", "bartlett_window",
    "blackman_window", "kaiser_window", "index_copy", "masked_scatter", "scatter_reduce", "select_scatter",
    "slice_scatter", "diagonal_scatter", "put", "index_reduce", "addr", "rsub", "nextafter", "angle", "real", "imag",
    "range", "bitwise_left_shift", "bitwise_right_shift", "asarray", "fill", "get_device", "is_distributed",
    "set_flush_denormal", "typename", "is_storage", "cumulative_trapezoid",
    "unsafe_split_with_sizes", "histogram", "gradient",
    # torch's functional forms of Tensor's in-place methods (torch.abs_(t) is t.abs_())
    "abs_", "acos_", "acosh_", "asin_", "asinh_", "atan_", "atanh_", "ceil_", "cos_", "cosh_", "erf_", "erfc_",
    "exp_", "exp2_", "expm1_", "fill_", "floor_", "frac_", "log_", "log10_", "log1p_", "log2_", "neg_", "negative_",
    "reciprocal_", "round_", "rsqrt_", "sin_", "sinh_", "sqrt_", "square_", "tan_", "trunc_", "xlogy_", "zero_",
    "index_put_", "resize_as_", "detach", "detach_",
]

for _name, _fields in (("cummax", ("values", "indices")), ("cummin", ("values", "indices")),
                       ("frexp", ("mantissa", "exponent")), ("histogram", ("hist", "bin_edges"))):
    if not hasattr(_return_types, _name):
        setattr(_return_types, _name, _return_types._structseq(_name, _fields))
        _return_types.__all__.append(_name)


def _floating(x):
    """x as a floating tensor: integers and bools in the default dtype, as PyTorch's unary float
    ops promote them."""
    return x if x.dtype in _FLOATS else x.to(_creation.get_default_dtype())


def _refuse_cpu_half(x, kernel):
    """PyTorch's CPU kernels of the special functions and scans have no float16 form: refuse it
    as they do (CUDA's have one)."""
    if x.dtype == _C.float16 and x.device.type == "cpu":
        raise RuntimeError(f"\"{kernel}\" not implemented for 'Half'")


def _write_inplace(self, result):
    """self with result written into it, with PyTorch's in-place rules: result's dtype must cast
    to self's and its shape must be self's (no broadcasting self up)."""
    if not _C.can_cast(result.dtype, self.dtype):
        raise RuntimeError(f"result type {_type_name(result.dtype)} can't be cast to the desired output type "
                           f"{_type_name(self.dtype)}")
    if tuple(result.shape) != tuple(self.shape):
        raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                           f"{list(result.shape)}")
    return self.copy_(result)


def _inplace(fn, name):
    """The in-place form of fn: computed from a clone of self (so that the ops' saved inputs are
    not the tensor overwritten) and written back with _write_inplace."""
    def method(self, *args, **kwargs):
        _check_tensor(self, name)
        return _write_inplace(self, fn(self.clone(), *args, **kwargs))
    method.__name__ = name
    method.__doc__ = f"{fn.__name__} in place."
    return method


# ---------------------------------------------------------------- aliases and trivial ones

arccos, arcsin, arctan, arctan2 = _C.acos, _C.asin, _C.atan, _C.atan2
arccosh, arcsinh, arctanh = _C.acosh, _C.asinh, _C.atanh
arccos_, arcsin_, arctan_ = Tensor.acos_, Tensor.asin_, Tensor.atan_
arccosh_, arcsinh_, arctanh_ = Tensor.acosh_, Tensor.asinh_, Tensor.atanh_
greater, greater_equal, less, less_equal, not_equal = _C.gt, _C.ge, _C.lt, _C.le, _C.ne
fix, fix_ = _C.trunc, Tensor.trunc_
unsafe_chunk, unsafe_split = _C.chunk, _C.split


def positive(input):
    """input itself (unary plus); refused for bool tensors, as PyTorch's."""
    _check_tensor(input, "positive")
    if input.dtype == _C.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


def ravel(input):
    """input flattened (a view when its elements are contiguous, else a copy)."""
    _check_tensor(input, "ravel")
    return input.reshape(-1)


def is_nonzero(input):
    """The truth of a one-element tensor (RuntimeError for any other number of elements)."""
    _check_tensor(input, "is_nonzero")
    if input.numel() == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if input.numel() > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return builtins.bool(input.item())


def is_complex(input):
    """False: plugflow has no complex dtypes."""
    _check_tensor(input, "is_complex")
    return False


def is_signed(input):
    """Whether input's dtype holds negative values (all but uint8 and bool)."""
    _check_tensor(input, "is_signed")
    return input.dtype not in (_C.uint8, _C.bool)


def is_same_size(input, other):
    """Whether both tensors have the same shape."""
    _check_tensor(input, "is_same_size")
    _check_tensor(other, "is_same_size", "other")
    return tuple(input.shape) == tuple(other.shape)


def _real_identity(name):
    def fn(input):
        _check_tensor(input, name)
        return input
    fn.__name__ = name
    fn.__doc__ = "input itself: a real tensor is its own conjugate (PyTorch returns it too)."
    return fn


resolve_conj = _real_identity("resolve_conj")
resolve_neg = _real_identity("resolve_neg")
conj = _real_identity("conj")
conj_physical = _real_identity("conj_physical")
conj_physical_ = _real_identity("conj_physical_")


def is_conj(input):
    """False: a real tensor has no lazy conjugation."""
    _check_tensor(input, "is_conj")
    return False


def is_neg(input):
    """False: a real tensor has no lazy negation."""
    _check_tensor(input, "is_neg")
    return False


def _matrix_transpose(input, name):
    if input.dim() == 0:  # (PyTorch's too: a number is its own transpose)
        return input
    if input.dim() == 1:
        raise RuntimeError(f"tensor.{name} is only supported on matrices or batches of matrices. "
                           f"Got {input.dim()}-D tensor.")
    return input.transpose(-2, -1)


def adjoint(input):
    """The conjugate transpose of the last two dims (a view; the transpose for real tensors)."""
    _check_tensor(input, "adjoint")
    return _matrix_transpose(input, "adjoint()")


def _H(self):
    if self.dim() == 0:
        return self
    if self.dim() != 2:
        extra = " For batches of matrices, consider using tensor.mH" if self.dim() > 2 else ""
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got {self.dim()}-D tensor.{extra}")
    return self.transpose(0, 1)


def narrow_copy(input, dim, start, length):
    """A copy of input.narrow(dim, start, length)."""
    _check_tensor(input, "narrow_copy")
    if not -input.dim() <= dim < input.dim():  # (a RuntimeError in PyTorch, not narrow's IndexError)
        raise RuntimeError(f"narrow_copy(): dim {dim} is out of range for a tensor with {input.dim()} dimensions")
    return input.narrow(dim, start, length).clone()


def _split_along(input, sections, fn, dim, min_dims):
    _check_tensor(input, fn)
    if input.dim() < min_dims:
        raise RuntimeError(f"torch.{fn} requires a tensor with at least {min_dims} dimension, but got a tensor "
                           f"with {input.dim()} dimensions!")
    if isinstance(sections, int) and not isinstance(sections, builtins.bool):
        size = input.shape[dim]
        if sections == 0 or size % sections:
            raise RuntimeError(f"torch.{fn} attempted to split along dimension {dim}, but the size of the dimension "
                               f"{size} is not divisible by the split_size {sections}!")
    elif not isinstance(sections, (list, tuple)):
        raise TypeError(f"{fn}(): argument 'indices' must be tuple of ints, not {type(sections).__name__}")
    return _C.tensor_split(input, sections if isinstance(sections, int) else list(sections), dim)


def hsplit(input, indices_or_sections):
    """tensor_split along dim 1 (dim 0 of a 1-D tensor); an int count must divide it."""
    _check_tensor(input, "hsplit")
    if input.dim() == 0:
        raise RuntimeError("torch.hsplit requires a tensor with at least 1 dimension, but got a tensor with 0 "
                           "dimensions!")
    return _split_along(input, indices_or_sections, "hsplit", 1 if input.dim() > 1 else 0, 1)


def vsplit(input, indices_or_sections):
    """tensor_split along dim 0 of a tensor with 2+ dims; an int count must divide it."""
    return _split_along(input, indices_or_sections, "vsplit", 0, 2)


def dsplit(input, indices_or_sections):
    """tensor_split along dim 2 of a tensor with 3+ dims; an int count must divide it."""
    return _split_along(input, indices_or_sections, "dsplit", 2, 3)


# ---------------------------------------------------------------- elementwise math

def deg2rad(input):
    """Degrees to radians (integers and bools in the default float dtype)."""
    _check_tensor(input, "deg2rad")
    return _floating(input) * (math.pi / 180)


def rad2deg(input):
    """Radians to degrees (integers and bools in the default float dtype)."""
    _check_tensor(input, "rad2deg")
    return _floating(input) * (180 / math.pi)


def sgn(input):
    """sign(input): for real tensors PyTorch's sgn is sign."""
    _check_tensor(input, "sgn")
    return input.sign()


def signbit(input):
    """Whether the sign bit is set: True for -0.0 and negative NaN too (bool)."""
    _check_tensor(input, "signbit")
    if input.dtype in _FLOATS:
        x = input.detach()
        return _C.copysign(_creation.ones((), dtype=x.dtype, device=x.device), x) < 0
    return input.detach() < 0


class _Sinc(_Function):
    """sin(pi x) / (pi x), 1 at 0, with PyTorch's gradient: (cos(pi x) - sinc(x)) / x, 0 at 0."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _sinc_values(x)

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        zero = x == 0
        safe = _C.where(zero, _creation.ones((), dtype=x.dtype, device=x.device), x)
        d = ((safe * math.pi).cos() - _sinc_values(safe)) / safe
        return grad * _C.where(zero, _creation.zeros((), dtype=x.dtype, device=x.device), d)


def _sinc_values(x):
    zero = x == 0
    px = _C.where(zero, _creation.ones((), dtype=x.dtype, device=x.device), x) * math.pi
    return _C.where(zero, _creation.ones((), dtype=x.dtype, device=x.device), px.sin() / px)


def sinc(input):
    """The normalized sinc, sin(pi x) / (pi x) (1 at 0)."""
    return _Sinc.apply(_special_input(input, "sinc", "sinc_cpu"))


def logit(input, eps=None):
    """log(p / (1 - p)), with p clamped to [eps, 1 - eps] when eps is given (the gradient is then 0
    outside that range, as PyTorch's)."""
    x = _special_input(input, "logit", "logit_cpu")
    if eps is not None:
        x = x.clamp(eps, 1 - eps)
    return (x / (1 - x)).log()


# Special functions, evaluated in float64 (the result is cast to the input's float dtype): lgamma
# by Stirling's series after the recurrence up to >= 10 (and the reflection formula below 0.5),
# digamma and the Hurwitz zeta behind polygamma as Cephes (the algorithms PyTorch's CPU kernels
# use), i0 and i1 by Cephes' Chebyshev expansions.

# Stirling's series for lgamma: B_2k / (2k (2k - 1)), k = 1..8 (the next term is < 1e-17 at 10).
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156, -3617 / 122400)


def _full_like(x, value):
    return _creation.full((), value, dtype=x.dtype, device=x.device)


def _lgamma64(x):
    """log|Gamma(x)| of a float64 tensor."""
    reflect = x < 0.5
    z = _C.where(reflect, 1 - x, x)
    small = z < 10
    # lgamma(z) = lgamma(z + 10) - log(z (z + 1) ... (z + 9)) for z < 10
    product = _creation.ones_like(z)
    for k in builtins.range(10):
        product = product * (z + k)
    w = _C.where(small, z + 10, z)
    w2 = 1 / (w * w)
    series = _full_like(w2, _STIRLING[-1])
    for c in reversed(_STIRLING[:-1]):
        series = series * w2 + c
    lg = (w - 0.5) * w.log() - w + 0.5 * math.log(2 * math.pi) + series / w
    lg = _C.where(small, lg - _C.where(small, product, _creation.ones_like(z)).log(), lg)
    # |sin(pi x)| from x's distance to the nearest integer (pi * x loses digits for large x)
    frac = x - x.round()
    refl = math.log(math.pi) - (frac * math.pi).sin().abs().log() - lg
    result = _C.where(reflect, refl, lg)
    pole = (x <= 0) & (x == x.floor())
    return _C.where(x.isinf() | pole, _full_like(x, math.inf), result)


_PSI_ASYMPTOTIC = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
                   -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
                   8.33333333333333333333E-2)


def _digamma64(x):
    """digamma of a float64 tensor (Cephes: reflection below 0, the recurrence up to >= 10, then
    the asymptotic series)."""
    neg = x < 0
    z = _C.where(neg, 1 - x, x)
    result = _creation.zeros_like(z)
    for k in builtins.range(10):
        result = result - 1 / (z + k)
    w = z + 10
    w2 = 1 / (w * w)
    poly = _full_like(w2, _PSI_ASYMPTOTIC[0])
    for c in _PSI_ASYMPTOTIC[1:]:
        poly = poly * w2 + c
    result = result + w.log() - 0.5 / w - w2 * poly
    frac = x - x.trunc()
    result = _C.where(neg, result - math.pi / (frac * math.pi).tan(), result)
    nan = _full_like(x, math.nan)
    result = _C.where(neg & (x == x.trunc()), nan, result)
    return _C.where(x == 0, _C.copysign(_full_like(x, math.inf), -x), result)


_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)
_MACHEP = 1.11022302462515654042E-16


def _hurwitz_zeta64(s, q):
    """The Hurwitz zeta function zeta(s, q) = sum_k (q + k)^-s for an integer s >= 2 and a float64
    tensor q, as Cephes: the first terms summed until q + k > 9 (the same count for every
    element), then the Euler-Maclaurin tail."""
    flat = q.reshape(-1)
    finite = flat.masked_select(flat.isfinite())
    lowest = builtins.min(finite.amin().item(), 9.0) if finite.numel() else 9.0
    terms = builtins.max(9, math.floor(9 - lowest) + 1)
    # q^-s + (q+1)^-s + ... + (q+terms)^-s, in chunks of columns that bound the memory used
    chunk = builtins.max(1, builtins.min(1024, (1 << 20) // builtins.max(flat.numel(), 1)))
    total = _creation.zeros_like(flat)
    for start in builtins.range(0, terms + 1, chunk):
        ks = _creation.arange(start, builtins.min(start + chunk, terms + 1), dtype=_C.float64, device=q.device)
        total = total + (flat.unsqueeze(-1) + ks).pow(-float(s)).sum(-1)
    w = flat + terms
    b = w.pow(-float(s))
    total = total + b * w / (s - 1) - 0.5 * b
    a, k = 1.0, 0.0
    done = _creation.zeros(flat.shape, dtype=_C.bool, device=q.device)
    for coef in _ZETA_A:
        a *= s + k
        b = b / w
        t = a * b / coef
        total = _C.where(done, total, total + t)
        done = done | ((t / total).abs() < _MACHEP)
        k += 1
        a *= s + k
        b = b / w
        k += 1
    total = total.reshape(q.shape)
    pole = (q <= 0) & (q == q.floor())
    return _C.where(pole, _full_like(q, math.inf), total)


def _polygamma64(n, x):
    if n == 0:
        return _digamma64(x)
    return ((1 if n % 2 else -1) * math.factorial(n)) * _hurwitz_zeta64(n + 1, x)


def _special_input(input, fn, kernel):
    _check_tensor(input, fn)
    x = _floating(input)
    _refuse_cpu_half(x, kernel)
    return x


class _Polygamma(_Function):
    """polygamma(n, x) (lgamma for n = -1) computed in float64; the gradient is polygamma(n + 1, x)."""

    @staticmethod
    def forward(ctx, x, n):
        ctx.save_for_backward(x)
        ctx.n = n
        with no_grad():
            x64 = x.detach().to(_C.float64)
            values = _lgamma64(x64) if n < 0 else _polygamma64(n, x64)
        return values.to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return grad * _Polygamma.apply(x, ctx.n + 1), None


def lgamma(input):
    """log|Gamma(input)| (inf at the poles 0, -1, -2, ...); its gradient is digamma."""
    return _Polygamma.apply(_special_input(input, "lgamma", "lgamma_vml_cpu"), -1)


def digamma(input):
    """The logarithmic derivative of Gamma; its gradient is polygamma(1, input)."""
    return _Polygamma.apply(_special_input(input, "digamma", "digamma"), 0)


def polygamma(n, input):
    """The n-th derivative of digamma (n >= 0)."""
    if not isinstance(n, int) or isinstance(n, builtins.bool):
        raise TypeError(f"polygamma(): argument 'n' (position 1) must be int, not {type(n).__name__}")
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    x = _special_input(input, "polygamma", ("digamma", "trigamma")[n] if n < 2 else "polygamma")
    return _Polygamma.apply(x, n)


def mvlgamma(input, p):
    """The multivariate log-gamma of dimension p: sum_j lgamma(input - j / 2) + p (p - 1) / 4 log(pi)."""
    _check_tensor(input, "mvlgamma")
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    x = _special_input(input, "mvlgamma", "lgamma_vml_cpu")
    offsets = _creation.arange(p, dtype=x.dtype, device=x.device) * -0.5
    return lgamma(x.unsqueeze(-1) + offsets).sum(-1) + p * (p - 1) / 4 * math.log(math.pi)


_I0_A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
         1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
         -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
         9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
         -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
         1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
         -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
         1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
         -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
         1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0_B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
         3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
         1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
         -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
         7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
         -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
         3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
         2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
         8.04490411014108831608E-1)
_I1_A = (2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16,
         -1.10559694773538630805E-15, 7.60068429473540693410E-15, -5.04218550472791168711E-14,
         3.22379336594557470981E-13, -1.98397439776494371520E-12, 1.17361862988909016308E-11,
         -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
         9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
         -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
         4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
         -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
         2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
         -1.76416518357834055153E-1, 2.52587186443633654823E-1)
_I1_B = (7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17,
         -3.20952592199342395980E-17, 2.96262899764595013876E-16, 3.30820231092092828324E-16,
         -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
         4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
         -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11,
         3.25260358301548823856E-11, -1.89749581235054123450E-11, -5.58974346219658380687E-10,
         -3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
         -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
         7.78576235018280120474E-1)


def _chbevl(y, coefficients):
    """Cephes' sum of Chebyshev polynomials at y / 2 (coefficients highest order first)."""
    b0, b1 = _full_like(y, coefficients[0]), _creation.zeros_like(y)
    b2 = b1
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = y * b1 - b2 + c
    return 0.5 * (b0 - b2)


def _bessel64(x, small, large, order):
    """I0 (order 0) or I1 (order 1) of a float64 tensor: Chebyshev expansions on [0, 8] and (8, inf)."""
    a = x.abs()
    near = a <= 8
    safe_far = _C.where(near, _full_like(a, 9.0), a)
    low = a.exp() * _chbevl(a / 2 - 2, small) * (a if order else 1)
    high = a.exp() * _chbevl(32 / safe_far - 2, large) / safe_far.sqrt()
    result = _C.where(near, low, high)
    return result * x.sign() if order else result


class _I0(_Function):
    """i0 in float64; the gradient is i1."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        with no_grad():
            return _bessel64(x.detach().to(_C.float64), _I0_A, _I0_B, 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return grad * _I1.apply(x)


class _I1(_Function):
    """i1 in float64 (i0's derivative); its gradient is i0 - i1 / x (1/2 at 0)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        with no_grad():
            return _bessel64(x.detach().to(_C.float64), _I1_A, _I1_B, 1).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        zero = x == 0
        safe = _C.where(zero, _creation.ones((), dtype=x.dtype, device=x.device), x)
        slope = _I0.apply(x) - _I1.apply(x) / safe
        return grad * _C.where(zero, _creation.full((), 0.5, dtype=x.dtype, device=x.device), slope)


def i0(input):
    """The modified Bessel function of the first kind of order 0."""
    x = _special_input(input, "i0", "i0_vml_cpu")
    return _I0.apply(x)


def _binary_tensors(input, other, fn):
    _check_tensor(input, fn)
    if not isinstance(other, Tensor):
        raise TypeError(f"{fn}(): argument 'other' (position 2) must be Tensor, not {type(other).__name__}")
    common = _C.result_type(input, other)
    return input.to(common), other.to(common), common


def fmax(input, other):
    """Elementwise maximum where NaN loses to a number (NaN only where both are NaN)."""
    a, b, _ = _binary_tensors(input, other, "fmax")
    return _C.where((a >= b) | b.isnan(), a, b)


def fmin(input, other):
    """Elementwise minimum where NaN loses to a number (NaN only where both are NaN)."""
    a, b, _ = _binary_tensors(input, other, "fmin")
    return _C.where((a <= b) | b.isnan(), a, b)


def gcd(input, other):
    """The greatest common divisor of integers (non-negative; gcd(0, 0) is 0)."""
    a, b, common = _binary_tensors(input, other, "gcd")
    if common not in _INTS:
        raise RuntimeError(f"\"gcd_cpu\" not implemented for '{_type_name(common)}'")
    shape = broadcast_shapes(tuple(a.shape), tuple(b.shape))
    a, b = a.detach().expand(shape), b.detach().expand(shape)
    one = _creation.ones((), dtype=common, device=a.device)
    while builtins.bool((b != 0).any().item()):  # Euclid's, at most ~90 rounds for int64
        nonzero = b != 0
        a, b = _C.where(nonzero, b, a), _C.where(nonzero, _C.fmod(a, _C.where(nonzero, b, one)), b)
    return a.abs()


def lcm(input, other):
    """The least common multiple of integers (0 when either is 0)."""
    a, b, common = _binary_tensors(input, other, "lcm")
    if common not in _INTS:
        raise RuntimeError(f"\"lcm_cpu\" not implemented for '{_type_name(common)}'")
    g = gcd(a, b)
    safe = _C.where(g == 0, _creation.ones((), dtype=common, device=g.device), g)
    return _C.where(g == 0, _creation.zeros((), dtype=common, device=g.device), (a.detach() // safe * b.detach()).abs())


def ldexp(input, other):
    """input * 2 ** other (PyTorch's: other's powers of two in the default float dtype or better)."""
    _check_tensor(input, "ldexp")
    if not isinstance(other, Tensor):
        raise TypeError(f"ldexp(): argument 'other' (position 2) must be Tensor, not {type(other).__name__}")
    return input * _C.pow(2.0, other)


def ldexp_(input, other):
    """ldexp in place."""
    _check_tensor(input, "ldexp_")
    if not isinstance(other, Tensor):
        raise TypeError(f"ldexp_(): argument 'other' (position 1) must be Tensor, not {type(other).__name__}")
    return input.mul_(_C.pow(2.0, other))


def frexp(input):
    """(mantissa, exponent) with input = mantissa * 2 ** exponent, 0.5 <= |mantissa| < 1 (mantissa
    0 and exponent 0 for 0, inf and NaN); exponent is int32. The gradient flows to the mantissa."""
    _check_tensor(input, "frexp")
    if input.dtype not in _FLOATS:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    with no_grad():
        x = input.detach().to(_C.float64)
        special = (x == 0) | ~x.isfinite()
        a = _C.where(special, _creation.ones((), dtype=_C.float64, device=x.device), x.abs())
        e = a.log2().floor() + 1
        # two power-of-two scalings, each exact (2 ** -e alone overflows for subnormal x)
        half = (e / 2).floor()
        m = a * _C.exp2(-half) * _C.exp2(-(e - half))
        too_big, too_small = m >= 1, m < 0.5         # log2's rounding, one step either way
        m = _C.where(too_big, m / 2, _C.where(too_small, m * 2, m))
        e = _C.where(too_big, e + 1, _C.where(too_small, e - 1, e))
        e = _C.where(special, _creation.zeros_like(e), e)
        scale_high, scale_low = _C.exp2(-(e / 2).floor()), _C.exp2(-(e - (e / 2).floor()))
    mantissa = (input.to(_C.float64) * scale_high * scale_low).to(input.dtype)
    return _return_types.frexp((mantissa, e.to(_C.int32)))


def logaddexp2(input, other):
    """log2(2 ** input + 2 ** other) without overflow."""
    _check_tensor(input, "logaddexp2")
    _check_tensor(other, "logaddexp2", "other")
    common = _C.result_type(input, other)
    if common not in _FLOATS:
        raise RuntimeError(f"\"logaddexp2_cpu\" not implemented for '{_type_name(common)}'")
    _refuse_cpu_half(input.to(common), "logaddexp2_cpu")
    ln2 = math.log(2)
    return logaddexp(input.to(common) * ln2, other.to(common) * ln2) / ln2


def isneginf(input):
    """Whether each element is -inf (bool)."""
    _check_tensor(input, "isneginf")
    return (input.detach() == -math.inf) if input.dtype in _FLOATS else _creation.zeros_like(input, dtype=_C.bool)


def isposinf(input):
    """Whether each element is +inf (bool)."""
    _check_tensor(input, "isposinf")
    return (input.detach() == math.inf) if input.dtype in _FLOATS else _creation.zeros_like(input, dtype=_C.bool)


def isreal(input):
    """True everywhere: plugflow's tensors are real."""
    _check_tensor(input, "isreal")
    return _creation.ones_like(input, dtype=_C.bool)


# ---------------------------------------------------------------- reductions and scans

def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """The mean of the non-NaN elements (NaN where there are none)."""
    _check_tensor(input, "nanmean")
    if input.dtype not in _FLOATS:
        raise RuntimeError(f"nanmean(): expected input to have floating point dtype but got {_type_name(input.dtype)}")
    count = (~input.isnan()).sum(dim, keepdim=keepdim) if dim is not None else (~input.isnan()).sum()
    total = _C.nansum(input, dim, keepdim, dtype=dtype) if dim is not None else _C.nansum(input, dtype=dtype)
    return total / count


def _scan(x, dim, combine):
    """Inclusive scan of x along dim with an associative combine(earlier, later), in log2(n)
    steps (Hillis-Steele); x may be a tuple of tensors scanned together."""
    parts = x if isinstance(x, tuple) else (x,)
    n = parts[0].shape[dim]
    shift = 1
    while shift < n:
        earlier = tuple(p.narrow(dim, 0, n - shift) for p in parts)
        later = tuple(p.narrow(dim, shift, n - shift) for p in parts)
        merged = combine(earlier, later)
        parts = tuple(_C.cat([p.narrow(dim, 0, shift), m], dim) for p, m in zip(parts, merged))
        shift *= 2
    return parts if isinstance(x, tuple) else parts[0]


def logcumsumexp(input, dim):
    """log(cumsum(exp(input))) along dim, without overflow or underflow (a scan of logaddexp)."""
    _check_tensor(input, "logcumsumexp")
    if input.dtype not in _FLOATS:
        raise RuntimeError(f"\"logcumsumexp_out_cpu\" not implemented for '{_type_name(input.dtype)}'")
    _refuse_cpu_half(input, "logcumsumexp_out_cpu")
    d = _wrap_dim(dim, input.dim())
    if input.dim() == 0:
        return input.clone()
    return _scan(input, d, lambda earlier, later: (logaddexp(earlier[0], later[0]),))


def _cumulative_extreme(input, dim, fn, later_wins):
    _check_tensor(input, fn)
    _refuse_cpu_half(input, fn + "_cpu")
    d = _wrap_dim(dim, input.dim())
    if input.dim() == 0:
        return getattr(_return_types, fn)((input.clone(), _creation.zeros((), dtype=_C.int64, device=input.device)))
    floating = input.dtype in _FLOATS

    def combine(earlier, later):
        (ev, ei), (lv, li) = earlier, later
        take = later_wins(lv, ev)  # a later equal value wins: the last index, as PyTorch's
        if floating:  # NaN propagates, and a later NaN takes the index
            take = lv.isnan() | (~ev.isnan() & take)
        return _C.where(take, lv, ev), _C.where(take, li, ei)

    with no_grad():
        shape = [1] * input.dim()
        shape[d] = input.shape[d]
        positions = _creation.arange(input.shape[d], dtype=_C.int64, device=input.device).reshape(shape)
        _, indices = _scan((input.detach(), positions.expand(tuple(input.shape)).contiguous()), d, combine)
    return getattr(_return_types, fn)((input.gather(d, indices), indices))


def cummax(input, dim):
    """The running maximum along dim and the index where it was reached (the last among equals;
    NaN propagates). The gradient flows to those elements."""
    return _cumulative_extreme(input, dim, "cummax", lambda later, earlier: later >= earlier)


def cummin(input, dim):
    """The running minimum along dim and the index where it was reached (the last among equals;
    NaN propagates). The gradient flows to those elements."""
    return _cumulative_extreme(input, dim, "cummin", lambda later, earlier: later <= earlier)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each of elements occurs in test_elements (either may be a number)."""
    e_tensor, t_tensor = isinstance(elements, Tensor), isinstance(test_elements, Tensor)
    if not e_tensor and not t_tensor:
        raise TypeError(f"isin() received an invalid combination of arguments - got ({type(elements).__name__}, "
                        f"{type(test_elements).__name__}), but expected one of: (Tensor elements, Tensor "
                        "test_elements), "
                        "(Number element, Tensor test_elements), (Tensor elements, Number test_element)")
    device = (elements if e_tensor else test_elements).device
    e = elements.detach() if e_tensor else _creation.tensor(elements, device=device)
    t = test_elements.detach() if t_tensor else _creation.tensor(test_elements, device=device)
    for x in (e, t):
        if x.dtype in (_C.bool, _C.bfloat16):
            raise RuntimeError(f"Unsupported input type encountered for isin(): {_type_name(x.dtype)}")
    common = _C.result_type(e, t)
    _refuse_cpu_half(e.to(common), "isin_default_cpu")
    e, t = e.to(common), t.to(common).reshape(-1)
    if t.numel() == 0:
        found = _creation.zeros(tuple(e.shape), dtype=_C.bool, device=device)
    elif e.numel() * t.numel() <= 1 << 22:
        found = (e.unsqueeze(-1) == t).any(-1)
    else:  # a binary search of the sorted test elements
        ordered = _C.sort(t)[0].contiguous()
        pos = searchsorted(ordered, e.reshape(-1).contiguous()).clamp_max(t.numel() - 1)
        found = (ordered.gather(0, pos) == e.reshape(-1)).reshape(tuple(e.shape))
    return ~found if invert else found


# ---------------------------------------------------------------- norms and products

def renorm(input, p, dim, maxnorm):
    """input with each slice along dim whose p-norm exceeds maxnorm scaled down to norm maxnorm."""
    _check_tensor(input, "renorm")
    if input.dim() < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input.dim()} dimensions")
    if p <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    if input.dtype not in _FLOATS:
        raise RuntimeError(f"\"renorm_cpu\" not implemented for '{_type_name(input.dtype)}'")
    d = _wrap_dim(dim, input.dim())
    others = tuple(i for i in builtins.range(input.dim()) if i != d)
    norm = input.norm(p, others, keepdim=True)
    factor = _C.where(norm > maxnorm, maxnorm / (norm + 1e-7), _creation.ones((), dtype=norm.dtype, device=norm.device))
    return input * factor


def dist(input, other, p=2):
    """The p-norm of input - other (broadcast)."""
    _check_tensor(input, "dist")
    _check_tensor(other, "dist", "other")
    return (input - other).norm(p)


def inner(input, other):
    """The dot products along the last dims (a product when either is 0-d)."""
    _check_tensor(input, "inner")
    _check_tensor(other, "inner", "other")
    if input.dim() == 0 or other.dim() == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{list(input.shape)} and {list(other.shape)}")
    if input.dtype != other.dtype:
        raise RuntimeError(f"expected scalar type {_type_name(input.dtype)} but found {_type_name(other.dtype)}")
    return _C.tensordot(input, other, ([-1], [-1]))


def kron(input, other):
    """The Kronecker product: every element of input times a copy of other."""
    _check_tensor(input, "kron")
    _check_tensor(other, "kron", "other")
    nd = builtins.max(input.dim(), other.dim())
    sa = [1] * (nd - input.dim()) + list(input.shape)
    sb = [1] * (nd - other.dim()) + list(other.shape)
    a = input.reshape([v for s in sa for v in (s, 1)])
    b = other.reshape([v for s in sb for v in (1, s)])
    return (a * b).reshape([x * y for x, y in zip(sa, sb)])


# ---------------------------------------------------------------- statistics

def _cov_weights(weights, name, n, dtypes, kind):
    """cov()'s fweights / aweights, checked as PyTorch checks them: one dim at most, of `kind`,
    one per observation, none negative."""
    if weights.dim() > 1:
        raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got {name} with "
                           f"{weights.dim()} dimensions")
    if weights.dtype not in dtypes:
        raise RuntimeError(f"cov(): expected {name} to have {kind} dtype but got {name} with "
                           f"{_type_name(weights.dtype)} dtype")
    if weights.numel() != n:
        raise RuntimeError(f"cov(): expected {name} to have the same numel as there are observations in the "
                           f"input but got {weights.numel()} != {n}")
    if n and not builtins.bool((weights.min() >= 0).item()):
        raise RuntimeError(f"cov(): {name} cannot be negative")
    return weights


def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance of the rows of input (variables) over its columns (observations), with
    optional integer frequency and float observation weights (PyTorch's formula)."""
    _check_tensor(input, "cov")
    if input.dim() > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an input with "
                           f"{input.dim()} dimensions")
    if input.dtype == _C.bool:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    x = input.reshape(1, -1) if input.dim() < 2 else input
    n = x.shape[1]
    w = None
    if fweights is not None:
        w = _cov_weights(fweights, "fweights", n, _INTS, "integral")
    if aweights is not None:
        aweights = _cov_weights(aweights, "aweights", n, _FLOATS, "floating point")
        w = aweights if w is None else w * aweights
    if w is None:
        w_sum = _creation.full((), n, dtype=_C.int64, device=x.device)
    else:
        w_sum = w.sum()
        if not builtins.bool((w_sum != 0).item()):
            raise RuntimeError("cov(): weights sum to zero, can't be normalized")
    avg = (x if w is None else x * w).sum(1) / w_sum
    if w is not None and aweights is not None and correction != 0:
        norm_factor = w_sum - correction * (w * aweights).sum() / w_sum
    else:
        norm_factor = w_sum - correction
    if builtins.bool((norm_factor <= 0).item()):
        import warnings
        warnings.warn("cov(): degrees of freedom is <= 0")
        norm_factor = norm_factor * 0
    centered = x - avg.unsqueeze(1)
    c = centered.mm((centered if w is None else centered * w).t())
    return _C.true_divide(c, norm_factor).squeeze()


def corrcoef(input):
    """Pearson correlation coefficients of the rows of input, clipped to [-1, 1]."""
    _check_tensor(input, "corrcoef")
    if input.dim() > 2:
        raise RuntimeError(f"corrcoef(): expected input to have two or fewer dimensions but got an input with "
                           f"{input.dim()} dimensions")
    c = cov(input)
    if c.dim() == 0:
        return c / c
    stddev = diag(c).sqrt()
    c = c / stddev.reshape(-1, 1)
    c = c / stddev.reshape(1, -1)
    return c.clip(-1, 1)


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of the 1-D x: columns x ** (N - 1), ..., x ** 0 (reversed when
    increasing); integers and bools in int64."""
    _check_tensor(x, "vander", "x")
    if x.dim() != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x.shape[0] if N is None else N
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    dtype = _C.promote_types(x.dtype, _C.int64)
    xs = x.to(dtype)
    if n == 0:
        result = _creation.empty(x.shape[0], 0, dtype=dtype, device=x.device)
    else:
        ones = _creation.ones(x.shape[0], 1, dtype=dtype, device=x.device)
        powers = [ones] if n == 1 else [ones, xs.unsqueeze(1).expand(x.shape[0], n - 1).cumprod(1)]
        result = _C.cat(powers, 1)
    return result if increasing else result.flip([1])


def _check_spacing(fn, x, dx):
    """PyTorch's overloads: (y, Tensor x) or (y, *, dx); a number as x, or both, is refused."""
    if x is not None and (dx is not None or not isinstance(x, Tensor)):
        got = "x and dx" if dx is not None else f"x of type {type(x).__name__}"
        raise TypeError(f"{fn}() received an invalid combination of arguments - got {got}, but expected one of: "
                        "(Tensor y, Tensor x, *, int dim), (Tensor y, *, Number dx, int dim)")


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoidal rule along dim, with sample points x (a tensor) or spacing dx (default 1)."""
    _check_tensor(y, "trapezoid", "y")
    _check_spacing("trapezoid", x, dx)
    if y.dtype == _C.bool:
        raise RuntimeError("trapezoid: received a bool input for `y`, but bool is not supported")
    if isinstance(x, Tensor) and x.dtype == _C.bool:
        raise RuntimeError("trapezoid: received a bool input for `x`, but bool is not supported")
    if y.dim() == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    d = _wrap_dim(dim, y.dim())
    n = y.shape[d]
    if n == 0:  # (numpy's answer, in y's dtype as PyTorch's)
        return _creation.zeros(tuple(y.shape[:d]) + tuple(y.shape[d + 1:]), dtype=y.dtype, device=y.device)
    if isinstance(x, Tensor):
        if x.dim() == 1:
            if x.shape[0] != n:
                raise RuntimeError("trapezoid: There must be one `x` value for each sample point")
            shape = [1] * y.dim()
            shape[d] = n
            x = x.reshape(shape)
        elif x.dim() < y.dim():
            x = x.reshape([1] * (y.dim() - x.dim()) + list(x.shape))
        m = x.shape[d]
        spacing = x.narrow(d, 1, m - 1) - x.narrow(d, 0, m - 1)
        pairs = y.narrow(d, 0, n - 1) + y.narrow(d, 1, n - 1)
        return _C.true_divide((spacing * pairs).sum(d), 2)
    step = 1 if dx is None else dx
    ends = y.select(d, 0) + y.select(d, -1)
    return (y.sum(d) - ends * 0.5) * step


def trapz(y, x=None, *, dx=None, dim=-1):
    """trapezoid's older name."""
    return trapezoid(y, x, dx=dx, dim=dim)


# ---------------------------------------------------------------- construction

def diagflat(input, offset=0):
    """The flattened input on the offset diagonal of a square matrix."""
    _check_tensor(input, "diagflat")
    return diag(input.reshape(-1), offset)


def block_diag(*tensors):
    """The tensors (0-, 1- or 2-d) as the blocks of a block-diagonal matrix (dtypes promoted)."""
    if not tensors:
        return _creation.empty(1, 0)
    blocks = []
    for i, t in enumerate(tensors):
        _check_tensor(t, "block_diag", "tensors")
        if t.dim() > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has "
                               f"{t.dim()} dimensions")
        blocks.append(t.reshape(1, -1) if t.dim() < 2 else t)
    dtype = blocks[0].dtype
    for b in blocks[1:]:
        dtype = _C.promote_types(dtype, b.dtype)
    width = builtins.sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        r, c = b.shape
        pad_left = _creation.zeros(r, left, dtype=dtype, device=b.device)
        pad_right = _creation.zeros(r, width - left - c, dtype=dtype, device=b.device)
        rows.append(_C.cat([pad_left, b.to(dtype), pad_right], 1))
        left += c
    return _C.cat(rows, 0)


def cartesian_prod(*tensors):
    """All combinations of one element of each 1-D tensor, one per row (the tensor itself for one)."""
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for t in tensors:
        _check_tensor(t, "cartesian_prod", "tensors")
        if t.dim() != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")
    if len(tensors) == 1:
        return tensors[0]
    if builtins.any(t.dtype != tensors[0].dtype for t in tensors):
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    grids = _C.meshgrid(*tensors, indexing="ij")
    return _C.stack([g.reshape(-1) for g in grids], 1)


def combinations(input, r=2, with_replacement=False):
    """The r-element combinations of the 1-D input's elements (itertools' order), one per row."""
    _check_tensor(input, "combinations")
    if input.dim() != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return _creation.empty(0, dtype=input.dtype, device=input.device)
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    index = list(pick(builtins.range(input.shape[0]), r))
    if not index:
        return _creation.empty(0, r, dtype=input.dtype, device=input.device)
    flat = _creation.tensor([i for row in index for i in row], dtype=_C.int64, device=input.device)
    return input.index_select(0, flat).reshape(len(index), r)


def logspace(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, requires_grad=False):
    """steps points base ** e for e evenly spaced from start to end."""
    _creation._check_layout(layout)
    dtype = dtype or _creation.get_default_dtype()
    if dtype == _C.bool:
        raise RuntimeError("\"logspace_cpu\" not implemented for 'Bool'")
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    if dtype not in _FLOATS:  # PyTorch casts the ends to the integer dtype first
        start, end = int(start), int(end)
    exponents = _creation.linspace(start, end, steps, dtype=dtype if dtype in _FLOATS else _C.float64,
                                   device=device)
    result = _C.pow(float(base), exponents.to(_C.float64)).to(dtype)
    return _creation._finish(result, requires_grad)


def _window(fn, window_length, periodic, dtype, layout, device, requires_grad, values):
    """A window of window_length points from values(positions, n) in float64 (n the length of the
    symmetric window; periodic windows are the symmetric one of length + 1 less its last point)."""
    _creation._check_layout(layout)
    dtype = dtype or _creation.get_default_dtype()
    if dtype not in _FLOATS:
        raise RuntimeError(f"{fn} expects floating point dtypes, got: {_type_name(dtype)}")
    if window_length < 0:
        raise RuntimeError(f"{fn} requires non-negative window_length, got window_length={window_length}")
    if window_length <= 1:
        result = _creation.ones(window_length, dtype=dtype, device=device)
    else:
        n = window_length + 1 if periodic else window_length
        positions = _creation.arange(n, dtype=_C.float64, device=device)
        result = values(positions, n).narrow(0, 0, window_length).to(dtype)
    return _creation._finish(result, requires_grad)


def _window_overload(fn, given):
    """PyTorch's window overloads take their float arguments only after all the earlier ones:
    (n), (n, periodic), (n, periodic, alpha), ... ; a later one without an earlier one is refused."""
    names = [name for name, value in given]
    present = [value is not None for name, value in given]
    if any(present[i] and not present[i - 1] for i in builtins.range(1, len(present))):
        got = ", ".join(f"{name}=..." for name, value in given if value is not None)
        raise TypeError(f"{fn}() received an invalid combination of arguments - got (int, {got}): each of "
                        f"{', '.join(names)} needs the ones before it")


def hamming_window(window_length, periodic=None, alpha=None, beta=None, *, dtype=None, layout=None, device=None,
                   requires_grad=False):
    """alpha - beta cos(2 pi k / (n - 1)) (alpha 0.54, beta 0.46 by default)."""
    _window_overload("hamming_window", [("periodic", periodic), ("alpha", alpha), ("beta", beta)])
    alpha = 0.54 if alpha is None else alpha
    beta = 0.46 if beta is None else beta
    return _window("hamming_window", window_length, periodic is not False, dtype, layout, device, requires_grad,
                   lambda k, n: alpha - beta * (k * (2 * math.pi / (n - 1))).cos())


def hann_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """0.5 - 0.5 cos(2 pi k / (n - 1))."""
    return _window("hann_window", window_length, periodic, dtype, layout, device, requires_grad,
                   lambda k, n: 0.5 - 0.5 * (k * (2 * math.pi / (n - 1))).cos())


def bartlett_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """The triangular window 1 - |2k / (n - 1) - 1|."""
    return _window("bartlett_window", window_length, periodic, dtype, layout, device, requires_grad,
                   lambda k, n: 1 - (k * (2 / (n - 1)) - 1).abs())


def blackman_window(window_length, periodic=True, *, dtype=None, layout=None, device=None, requires_grad=False):
    """0.42 - 0.5 cos(2 pi k / (n - 1)) + 0.08 cos(4 pi k / (n - 1))."""
    return _window("blackman_window", window_length, periodic, dtype, layout, device, requires_grad,
                   lambda k, n: 0.42 - 0.5 * (k * (2 * math.pi / (n - 1))).cos()
                   + 0.08 * (k * (4 * math.pi / (n - 1))).cos())


def kaiser_window(window_length, periodic=None, beta=None, *, dtype=None, layout=None, device=None,
                  requires_grad=False):
    """i0(beta sqrt(1 - ((k - a) / a) ** 2)) / i0(beta), a = (n - 1) / 2 (beta 12 by default)."""
    _window_overload("kaiser_window", [("periodic", periodic), ("beta", beta)])
    beta = 12.0 if beta is None else beta
    periodic = periodic is not False

    def values(k, n):
        a = (n - 1) / 2
        arg = (1 - ((k - a) / a) ** 2).clamp_min(0).sqrt() * beta
        return _bessel64(arg, _I0_A, _I0_B, 0) / _bessel64(_full_like(k, beta), _I0_A, _I0_B, 0)
    return _window("kaiser_window", window_length, periodic, dtype, layout, device, requires_grad, values)


# ---------------------------------------------------------------- indexing and scatter forms

def _slice_index(d, index):
    """The indexing tuple that applies index (a tensor or a slice) along dim d."""
    return (slice(None),) * d + (index,)


def index_copy_(input, dim, index, source):
    """Copies source's slices along dim into input at the positions index (1-D or 0-d int64), in place."""
    _check_tensor(input, "index_copy_")
    _check_tensor(index, "index_copy_", "index")
    _check_tensor(source, "index_copy_", "source")
    d = _wrap_dim(dim, input.dim())
    if index.dim() > 1:
        raise IndexError(f"index_copy_(): Index should have dimension 1 or 0 (got {index.dim()})")
    if index.dtype != _C.int64:
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got {_type_name(index.dtype)}")
    count = index.numel()
    if source.dim() > 0 and source.dim() > d and count != source.shape[d]:
        raise IndexError(f"index_copy_(): Number of indices ({count}) should be equal to source.size(dim) "
                         f"({source.shape[d]})")
    src = source.unsqueeze(d) if source.dim() == input.dim() - 1 or (source.dim() == 0 and input.dim() <= 1) else source
    expected = list(input.shape) if input.dim() else [1]
    expected[d] = count
    if list(src.shape) != expected and not (input.dim() == 0 and src.numel() == count):
        raise RuntimeError(f"index_copy_(): Source/destination tensor must have same slice shapes. Destination slice "
                           f"shape: {list(input.shape)} at dimension {d} and source slice shape: {list(source.shape)}")
    if source.dtype != input.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, but got (self) "
                           f"{_type_name(input.dtype)} and (source) {_type_name(source.dtype)}")
    n = input.shape[d] if input.dim() else 1
    flat = index.reshape(-1)
    bad = (flat < 0) | (flat >= n)
    if builtins.bool(bad.any().item()):
        raise IndexError(f"index_copy_(): index {flat[bad.nonzero()[0, 0]].item()} is out of bounds for dimension "
                         f"{d} with size {n}")
    if count == 0:
        return input
    if input.dim() == 0:
        return input.copy_(src.reshape(-1)[-1])
    input[_slice_index(d, flat)] = src
    return input


def index_copy(input, dim, index, source):
    """A copy of input with index_copy_ applied (gradients flow to both)."""
    _check_tensor(input, "index_copy")
    return index_copy_(input.clone(), dim, index, source)


def _masked_scatter_values(input, mask, source, shape):
    _check_tensor(mask, "masked_scatter", "mask")
    _check_tensor(source, "masked_scatter", "source")
    if mask.dtype == _C.uint8:
        import warnings
        warnings.warn("masked_scatter_ received a mask with dtype torch.uint8, this behavior is now deprecated,"
                      "please use a mask with dtype torch.bool instead.")
        mask = mask.to(_C.bool)
    elif mask.dtype != _C.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{_type_name(mask.dtype)}")
    if source.dtype != input.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got"
                           f"{_type_name(input.dtype)} and {_type_name(source.dtype)}")
    mask = mask.expand(shape)
    picks = mask.reshape(-1).to(_C.int64)
    if builtins.bool((picks.sum() > source.numel()).item()):
        raise RuntimeError("Number of elements of source < number of ones in mask")
    target = input.expand(shape)
    if source.numel() == 0:
        return target.clone()
    # the k-th masked position (in row-major order) takes source's k-th element
    position = (picks.cumsum(0) - 1).clamp_min(0)
    taken = source.reshape(-1).gather(0, position).reshape(shape)
    return _C.where(mask, taken, target)


def masked_scatter(input, mask, source):
    """input (broadcast with mask) with its masked positions, in row-major order, taken from
    source's first elements."""
    _check_tensor(input, "masked_scatter")
    _check_tensor(mask, "masked_scatter", "mask")
    shape = broadcast_shapes(tuple(input.shape), tuple(mask.shape))
    return _masked_scatter_values(input, mask, source, shape)


def _masked_scatter_(self, mask, source):
    """masked_scatter in place (mask must broadcast to self's shape)."""
    _check_tensor(mask, "masked_scatter_", "mask")
    if mask.dim() > self.dim() or broadcast_shapes(tuple(self.shape), tuple(mask.shape)) != tuple(self.shape):
        raise RuntimeError(f"masked_scatter_: the mask of shape {list(mask.shape)} does not broadcast to the "
                           f"tensor's shape {list(self.shape)}")
    return self.copy_(_masked_scatter_values(self.clone(), mask, source, tuple(self.shape)))


_SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _segments(input, dim, index):
    """For each element of index: the row-major position in input it scatters to, and a mask of the
    positions of input that receive at least one element."""
    shape, strides = list(input.shape), [1] * input.dim()
    for i in builtins.range(input.dim() - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    target = index * strides[dim]
    for i in builtins.range(index.dim()):
        if i != dim:
            view = [1] * index.dim()
            view[i] = index.shape[i]
            target = target + _creation.arange(index.shape[i], device=index.device).reshape(view) * strides[i]
    flat = target.reshape(-1)
    touched = _creation.zeros(input.numel(), dtype=_C.int64, device=input.device)
    touched = touched.scatter_add(0, flat, _creation.ones_like(flat)) > 0
    return flat, touched.reshape(tuple(input.shape))


def _segment_reduce(values, segments, size, reduce):
    """The product, max or min of values (1-D) per segment id (0..size-1): a segmented scan of the
    values ordered by segment. Segments without values get 0 (masked out by the caller)."""
    order = _C.sort(segments, stable=True)[1]
    seg, v = segments.gather(0, order), values.gather(0, order)
    n = seg.numel()
    starts = _C.cat([_creation.ones(1, dtype=_C.bool, device=seg.device), seg[1:] != seg[:-1]])
    floating = v.dtype in _FLOATS

    def combine(earlier, later):
        (ev, ef), (lv, lf) = earlier, later
        if reduce == "prod":
            merged = ev * lv
        else:
            merged = _C.maximum(ev, lv) if reduce == "amax" else _C.minimum(ev, lv)
            if floating:  # (maximum propagates NaN; kept explicit for bool and integer values)
                merged = _C.where(ev.isnan() | lv.isnan(), ev + lv, merged)
        return _C.where(lf, lv, merged), ef | lf

    scanned, _ = _scan((v, starts), 0, combine)
    ends = _C.cat([seg[1:] != seg[:-1], _creation.ones(1, dtype=_C.bool, device=seg.device)]) if n else starts
    out = _creation.zeros(size, dtype=v.dtype, device=v.device)
    return out.index_put((seg.masked_select(ends),), scanned.masked_select(ends))


def _scatter_reduce_values(input, dim, index, src, reduce, include_self):
    """scatter_reduce's result, without autograd."""
    if reduce == "sum":
        return input.masked_fill(_segments(input, dim, index)[1], 0).scatter_add(dim, index, src) if not include_self \
            else input.scatter_add(dim, index, src)
    targets, touched = _segments(input, dim, index)
    if reduce == "mean":
        base = input if include_self else input.masked_fill(touched, 0)
        total = base.scatter_add(dim, index, src)
        count = _creation.zeros_like(input).scatter_add(dim, index, _creation.ones_like(src))
        count = count + 1 if include_self else count
        count = count.masked_fill(count == 0, 1)
        return total.div(count, rounding_mode="floor") if input.dtype not in _FLOATS else total / count
    src_box = src.narrow(0, 0, index.shape[0]) if src.dim() else src
    for i in builtins.range(1, index.dim()):
        src_box = src_box.narrow(i, 0, index.shape[i])
    reduced = _segment_reduce(src_box.reshape(-1), targets, input.numel(), reduce).reshape(tuple(input.shape))
    if include_self:
        if reduce == "prod":
            reduced = reduced * input
        else:
            both = _C.maximum(reduced, input) if reduce == "amax" else _C.minimum(reduced, input)
            if input.dtype in _FLOATS:
                both = _C.where(reduced.isnan() | input.isnan(), reduced + input, both)
            reduced = both
    return _C.where(touched, reduced, input)


class _ScatterReduce(_Function):
    """scatter_reduce for prod, amax and amin, with PyTorch's gradients: for prod the product of
    the others (zeros handled), for amax/amin the gradient split evenly among the elements equal
    to the result."""

    @staticmethod
    def forward(ctx, input, src, dim, index, reduce, include_self):
        with no_grad():
            result = _scatter_reduce_values(input.detach(), dim, index, src.detach(), reduce, include_self)
        ctx.save_for_backward(input, src, result)
        ctx.args = (dim, index, reduce, include_self)
        return result

    @staticmethod
    def backward(ctx, grad):
        input, src, result = ctx.saved_tensors
        dim, index, reduce, include_self = ctx.args
        with no_grad():
            if reduce == "prod":
                masked_self = input.masked_fill(input == 0, 1)
                others = _scatter_reduce_values(masked_self, dim, index, src, reduce, include_self)
                grad_self = grad * others / masked_self
                src_zero = src == 0
                zeros_per_target = _creation.zeros_like(input).scatter_add(dim, index, src_zero.to(input.dtype))
                single_zero = src_zero & (zeros_per_target.gather(dim, index) == 1)
                masked_src_result = _scatter_reduce_values(input, dim, index, src.masked_fill(single_zero, 1), reduce,
                                                           include_self)
                grad_src = _C.where(single_zero, (grad * masked_src_result).gather(dim, index),
                                    (grad * result).gather(dim, index) / src.masked_fill(src_zero, 1))
            else:
                value = result.gather(dim, index)
                self_is_result = (input == result).to(grad.dtype)
                src_is_result = (src == value).to(grad.dtype)
                distributed = grad / self_is_result.scatter_add(dim, index, src_is_result)
                grad_self = self_is_result * distributed
                grad_src = src_is_result * distributed.gather(dim, index)
            if not include_self:
                grad_self = grad_self.masked_fill(_segments(input, dim, index)[1], 0)
        return grad_self, grad_src, None, None, None, None


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """Reduces src's elements into input at the positions index gives along dim (as scatter_add):
    "sum", "prod", "mean" (floor division for integers), "amax" or "amin"; include_self=False
    leaves out the original values of the positions that receive elements."""
    _check_tensor(input, "scatter_reduce")
    _check_tensor(index, "scatter_reduce", "index")
    _check_tensor(src, "scatter_reduce", "src")
    if reduce not in _SCATTER_REDUCTIONS:
        raise RuntimeError("reduce argument must be either sum, prod, mean, amax or amin.")
    d = _wrap_dim(dim, input.dim())
    with no_grad():  # scatter_add checks the dtypes, shapes and index bounds as PyTorch's scatter does
        input.detach().scatter_add(d, index, src.detach())
    if index.numel() == 0:
        return input.clone()
    if reduce in ("sum", "mean"):
        if reduce == "mean" and input.dtype == _C.bool:
            raise RuntimeError("\"scatter_reduce\" not implemented for 'Bool'")
        return _scatter_reduce_values(input, d, index, src, reduce, include_self)
    box = src
    for i in builtins.range(index.dim()):
        box = box.narrow(i, 0, index.shape[i])
    return _ScatterReduce.apply(input, box, d, index, reduce, include_self)


def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """Reduces source's slices along dim into input's slices at index (1-D, int32 or int64):
    "prod", "mean", "amax" or "amin", as scatter_reduce with the index repeated across the other
    dims."""
    _check_tensor(input, "index_reduce")
    _check_tensor(index, "index_reduce", "index")
    _check_tensor(source, "index_reduce", "source")
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    if index.dtype not in (_C.int32, _C.int64):
        raise RuntimeError(f"index_reduce_(): Expected dtype int32/int64 for index but got: {_type_name(index.dtype)}")
    if source.dtype != input.dtype:
        raise RuntimeError(f"index_reduce_(): self ({_type_name(input.dtype)}) and source "
                           f"({_type_name(source.dtype)}) must have the same scalar type")
    if index.dim() > 1:
        raise IndexError(f"index_reduce_(): Index is supposed to be a vector, but got dim: {index.dim()} with type: "
                         f"{_type_name(index.dtype)} and size: {list(index.shape)}")
    d = _wrap_dim(dim, input.dim())
    flat = index.reshape(-1).to(_C.int64)
    src = source.reshape([1] * builtins.max(input.dim(), 1)) if source.dim() == 0 else source
    if src.dim() != builtins.max(input.dim(), 1) or src.shape[d] != flat.numel():
        raise RuntimeError(f"index_reduce_(): Number of indices ({flat.numel()}) should be equal to "
                           f"source.size(dim): ({src.shape[d] if src.dim() > d else 1}), for dim: {d}")
    for i in builtins.range(src.dim()):
        if i != d and src.shape[i] != input.shape[i]:
            raise RuntimeError(f"The size of tensor a ({input.shape[i]}) must match the size of tensor b "
                               f"({src.shape[i]}) at non-singleton dimension {i}")
    n = input.shape[d] if input.dim() else 1
    if flat.numel() and builtins.bool(((flat < 0) | (flat >= n)).any().item()):
        raise IndexError("index out of range in self")
    view = [1] * src.dim()
    view[d] = flat.numel()
    target = input if input.dim() else input.reshape(1)
    result = scatter_reduce(target, d, flat.reshape(view).expand(tuple(src.shape)), src, reduce,
                            include_self=include_self)
    return result if input.dim() else result.reshape(())


def _scatter_into_view(fn, input, src, view_of):
    """A copy of input whose view view_of(copy) holds src (which must have the view's shape; its
    dtype is cast). Gradients flow to input outside the view and to src."""
    _check_tensor(input, fn)
    _check_tensor(src, fn, "src")
    result = input.clone()
    view = view_of(result)
    if tuple(view.shape) != tuple(src.shape):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
                           f"slice size = {list(view.shape)}")
    view.copy_(src)
    return result


def select_scatter(input, src, dim, index):
    """input with input.select(dim, index) replaced by src."""
    return _scatter_into_view("select_scatter", input, src, lambda t: t.select(dim, index))


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """input with the slice start:end:step along dim replaced by src."""
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    _check_tensor(input, "slice_scatter")
    d = _wrap_dim(dim, input.dim())
    return _scatter_into_view("slice_scatter", input, src, lambda t: t[_slice_index(d, slice(start, end, step))])


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """input with its diagonal (offset, dim1, dim2 as diagonal()) replaced by src."""
    return _scatter_into_view("diagonal_scatter", input, src, lambda t: diagonal(t, offset, dim1, dim2))


def put(input, index, source, accumulate=False):
    """input, read as 1-D, with the positions index (negative from the end) set to, or with
    accumulate incremented by, source's values."""
    _check_tensor(input, "put")
    _check_tensor(index, "put", "index")
    _check_tensor(source, "put", "source")
    if index.dtype != _C.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got {_type_name(index.dtype)}")
    if source.dtype != input.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got self.dtype = "
                           f"{_type_name(input.dtype)} and source.dtype = {_type_name(source.dtype)}")
    if index.numel() != source.numel():
        raise IndexError(f"put_(): Expected source and index to have the same number of elements, but got "
                         f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    n = input.numel()
    flat = index.reshape(-1)
    bad = (flat < -n) | (flat >= n)
    if builtins.bool(bad.any().item()):
        raise IndexError(f"out of range: tried to access index {flat[bad.nonzero()[0, 0]].item()} on a tensor of "
                         f"{n} elements.")
    if flat.numel() == 0:
        return input.clone()
    flat = _C.where(flat < 0, flat + n, flat)
    return input.reshape(-1).index_put((flat,), source.reshape(-1), accumulate).reshape(tuple(input.shape))


def _fill_diagonal_(self, fill_value, wrap=False):
    """Fills the main diagonal (self[i, i, ..., i]) with fill_value, in place; with wrap, a tall
    matrix's diagonal restarts every width + 1 rows (numpy's fill_diagonal)."""
    nd = self.dim()
    if nd < 2:
        raise RuntimeError("dimensions must larger than 1")
    height, width = self.shape[0], self.shape[1]
    if nd > 2 and builtins.any(s != height for s in self.shape):
        raise RuntimeError("all dimensions of input must be of equal length")
    size = builtins.min(height, width)
    stride = builtins.sum(self.stride())
    self.as_strided([size], [stride], self.storage_offset()).fill_(fill_value)
    if wrap and nd == 2 and height > width + 1:
        step = width + 1
        extra = (self.numel() + step - 1) // step - size
        self.as_strided([extra], [stride], self.storage_offset() + self.stride()[0] * step).fill_(fill_value)
    return self


# ---------------------------------------------------------------- in-place random fills

# The largest integer each float dtype holds exactly (random_() draws from [0, 2 ** digits]).
_FLOAT_DIGITS = {_C.float16: 11, _C.bfloat16: 8, _C.float32: 24, _C.float64: 53}


def _uniform64(self, generator):
    return _C._rand(tuple(self.shape), _C.float64, self.device, generator)


def _random_bits63(self, generator):
    """Uniform int64 values in [0, 2 ** 63), from two 53-bit draws (31 + 32 bits)."""
    high = (_uniform64(self, generator) * 2.0 ** 31).floor().to(_C.int64)
    low = (_uniform64(self, generator) * 2.0 ** 32).floor().to(_C.int64)
    return high * (1 << 32) + low


def _dtype_bounds(dtype):
    if dtype == _C.bool:
        return 0, 1
    if dtype in _FLOATS:
        return -(1 << _FLOAT_DIGITS[dtype]), 1 << _FLOAT_DIGITS[dtype]
    from ._composite import iinfo
    info = iinfo(dtype)
    return info.min, info.max


def _random_(self, *args, generator=None, **kwargs):
    """Fills self with integers drawn uniformly from [from, to): random_() the dtype's range
    ([0, 2 ** mantissa digits] for floats), random_(to), random_(from, to) (to=None: up to the
    dtype's largest value)."""
    names = ("from", "to")
    if len(args) > 2 or builtins.any(k not in names for k in kwargs):
        raise TypeError("random_() received an invalid combination of arguments - expected (), (int to) or "
                        "(int from, int to)")
    given = dict(zip(("to",) if len(args) == 1 and "to" not in kwargs else names, args), **kwargs)
    if "from" in given and "to" not in given:
        raise TypeError("random_() received an invalid combination of arguments - got from= without to")
    for name, value in given.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, builtins.bool)):
            raise TypeError(f"random_(): argument '{name}' must be int, not {type(value).__name__}")
    low, high = _dtype_bounds(self.dtype)
    if not given:
        start, stop = 0, high + 1
    else:
        start = given.get("from", 0)
        stop = given.get("to")
        if stop is None:
            stop = high + 1
        if start >= stop:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={start} >= to={stop}")
        name = _type_name(self.dtype)
        if self.dtype not in _FLOATS and not low <= start <= high:
            raise RuntimeError(f"from is out of bounds for {name}")
        if self.dtype not in _FLOATS and not low <= stop - 1 <= high:
            raise RuntimeError(f"to - 1 is out of bounds for {name}")
    span = stop - start
    with no_grad():  # (the samples are constants; the copy_ below is recorded, as PyTorch's fill is)
        if self.dtype in _FLOATS:
            values = (_uniform64(self, generator) * span).floor() + start
        elif span < 1 << 63:
            values = _random_bits63(self, generator) % span + start
        elif span == 1 << 63:
            values = _random_bits63(self, generator) + start
        else:  # wider than int64's positive half: [start, start + 2 ** 63) or the rest, by their sizes
            first = _random_bits63(self, generator) + start
            rest = _random_bits63(self, generator) % (span - (1 << 63)) + (start + (1 << 63))
            values = _C.where(_uniform64(self, generator) < 2.0 ** 63 / span, first, rest)
    return self.copy_(values.to(self.dtype))


def _float_fill(self, name):
    if self.dtype not in _FLOATS:
        raise RuntimeError(f"\"{name}_cpu\" not implemented for '{_type_name(self.dtype)}'")


def _exponential_(self, lambd=1.0, *, generator=None):
    """Fills self with exponential samples of rate lambd."""
    _float_fill(self, "exponential")
    if lambd < 0:
        raise RuntimeError(f"exponential_ expects lambda >= 0.0, but found lambda={lambd}")
    if lambd == 0:
        return self.fill_(math.inf)
    with no_grad():
        values = -(1 - _uniform64(self, generator)).log() / lambd
    return self.copy_(values.to(self.dtype))


def _cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """Fills self with Cauchy samples: median + sigma tan(pi (u - 1/2))."""
    _float_fill(self, "cauchy")
    with no_grad():
        values = median + sigma * ((_uniform64(self, generator) - 0.5) * math.pi).tan()
    return self.copy_(values.to(self.dtype))


def _log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """Fills self with exp(N(mean, std)) samples."""
    _float_fill(self, "log_normal")
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    with no_grad():
        values = (_C._randn(tuple(self.shape), _C.float64, self.device, generator) * std + mean).exp()
    return self.copy_(values.to(self.dtype))


def _geometric_(self, p, *, generator=None):
    """Fills self with the number of Bernoulli(p) trials up to the first success (>= 1)."""
    if self.dtype == _C.bool:
        raise RuntimeError("\"geometric_cpu\" not implemented for 'Bool'")
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    with no_grad():
        u = 1 - _uniform64(self, generator)                       # (0, 1]
        values = (u.log() / math.log1p(-p)).ceil().clamp_min(1)
    return self.copy_(values.to(self.dtype))


def _new(self, *args, device=None):
    """The legacy constructor self.new(...) with self's dtype: new() is empty, new(2, 3) or
    new(Size) uninitialized of that shape, new(sequence) the data, new(tensor) that tensor (of
    self's dtype)."""
    device = device or self.device
    if not args:
        return _creation.empty(0, dtype=self.dtype, device=device)
    from ._size import Size
    if len(args) == 1 and isinstance(args[0], Tensor):
        other = args[0]
        if other.dtype != self.dtype:
            raise TypeError(f"expected {_type_name(self.dtype)} tensor (got {_type_name(other.dtype)} tensor)")
        return other[...]
    if len(args) == 1 and isinstance(args[0], Size):
        return _creation.empty(tuple(args[0]), dtype=self.dtype, device=device)
    if builtins.all(isinstance(a, int) and not isinstance(a, builtins.bool) for a in args):
        return _creation.empty(args, dtype=self.dtype, device=device)
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return _creation.tensor(args[0], dtype=self.dtype, device=device)
    if len(args) == 1:
        raise TypeError(f"new(): data must be a sequence (got {type(args[0]).__name__})")
    raise TypeError(f"new() received an invalid combination of arguments - got "
                    f"({', '.join(type(a).__name__ for a in args)})")


def _new_empty_strided(self, size, stride, *, dtype=None, layout=None, device=None, requires_grad=False,
                       pin_memory=False):
    """An uninitialized tensor of size and stride, with self's dtype and device unless given."""
    from ._memory_format import empty_strided
    _creation._check_layout(layout)
    return empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device,
                         requires_grad=requires_grad)


# ---------------------------------------------------------------- more everyday forms

def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """beta * input + alpha * outer(vec1, vec2), input broadcast (and ignored when beta is 0, NaN
    included); logical and/or for bool tensors."""
    _check_tensor(input, "addr")
    for name, v in (("vec1", vec1), ("vec2", vec2)):
        _check_tensor(v, "addr", name)
        if v.dim() != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {name}, but got {v.dim()}-D")
    common = _C.promote_types(input.dtype, _C.promote_types(vec1.dtype, vec2.dtype))
    if common in _INTS and (isinstance(alpha, float) or isinstance(beta, float)):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    shape = (vec1.shape[0], vec2.shape[0])
    base = input.expand(shape).to(common)
    product = _C.outer(vec1.to(common), vec2.to(common))
    if common == _C.bool:
        return (base & builtins.bool(beta)) | (product & builtins.bool(alpha))
    scaled = product if alpha == 1 else product * alpha
    if beta == 0:
        return scaled
    return (base if beta == 1 else base * beta) + scaled


def rsub(input, other, alpha=1):
    """other - alpha * input."""
    _check_tensor(input, "rsub")
    return _C.sub(other, input, alpha=alpha) if isinstance(other, Tensor) else _C.sub(
        _creation.scalar_tensor(other, dtype=_C.result_type(input, other), device=input.device), input, alpha=alpha)


_FLOAT_BITS = {_C.float32: _C.int32, _C.float64: _C.int64, _C.bfloat16: _C.int16}


def _shift(input, other, left):
    """input shifted by other bits as PyTorch's CPU kernels shift: in the promoted integer dtype,
    computed at C's width (64 bits for int64, 32 for the narrower types) with the count taken
    modulo that width (x86's rule), then wrapped to the dtype; right shifts are arithmetic."""
    fn = "bitwise_left_shift" if left else "bitwise_right_shift"
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        raise TypeError(f"{fn}() received an invalid combination of arguments - got ({type(input).__name__}, "
                        f"{type(other).__name__}), but expected a Tensor for input or other")
    device = (input if isinstance(input, Tensor) else other).device
    common = _C.result_type(input, other)
    if common not in _INTS:
        raise RuntimeError(f"\"{'lshift' if left else 'rshift'}_cpu\" not implemented for '{_type_name(common)}'")

    def as_int64(x):
        x = x.detach() if isinstance(x, Tensor) else _creation.tensor(x, device=device)
        return x.to(common).to(_C.int64)

    a, b = as_int64(input), as_int64(other)
    width = 64 if common == _C.int64 else 32
    count = (b & (width - 1)).to(_C.float64)
    # 2 ** count as two factors, each exact in int64 (2 ** 63 itself is not)
    low = _C.exp2((count / 2).floor()).to(_C.int64)
    high = _C.exp2(count - (count / 2).floor()).to(_C.int64)
    if left:
        shifted = a * low * high                           # int64 multiplication wraps, as the shift does
        if width == 32:
            shifted = shifted.to(_C.int32)
    else:
        shifted = a.div(low, rounding_mode="floor").div(high, rounding_mode="floor")
    return shifted.to(common)


def bitwise_left_shift(input, other):
    """input << other (integers; see _shift for counts outside the width)."""
    return _shift(input, other, True)


def bitwise_right_shift(input, other):
    """input >> other, arithmetic (integers; see _shift for counts outside the width)."""
    return _shift(input, other, False)


def nextafter(input, other):
    """The next representable value after input towards other (other itself where they are equal)."""
    _check_tensor(input, "nextafter")
    _check_tensor(other, "nextafter", "other")
    common = _C.result_type(input, other)
    if common not in _FLOAT_BITS:
        raise RuntimeError(f"\"nextafter_cpu\" not implemented for '{_type_name(common)}'")
    shape = broadcast_shapes(tuple(input.shape), tuple(other.shape))
    x = input.detach().to(common).expand(shape).contiguous()
    y = other.detach().to(common).expand(shape)
    bits = _FLOAT_BITS[common]
    # the bit pattern (sign and magnitude) moves one step away from zero or towards it
    away = (y > x) == (x > 0)
    one = _creation.ones((), dtype=bits, device=x.device)
    stepped = (x.view(bits) + _C.where(away, one, -one)).view(common)
    smallest = _creation.ones(1, dtype=bits, device=x.device).view(common).reshape(())
    result = _C.where(x == 0, _C.copysign(smallest.expand(shape), y), stepped)
    result = _C.where(x == y, y, result)
    return _C.where(x.isnan() | y.isnan(), x + y, result)


def angle(input):
    """The argument of a real number: pi for negative values, 0 otherwise (NaN stays NaN)."""
    _check_tensor(input, "angle")
    x = _floating(input)
    return _C.where(x < 0, _full_like(x, math.pi), x * 0)


def real(input):
    """input itself: the real part of a real tensor."""
    _check_tensor(input, "real")
    return input


def imag(input):
    """Refused, as PyTorch refuses it for real tensors."""
    _check_tensor(input, "imag")
    raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")


def range(start, end, step=1, *, dtype=None, layout=None, device=None, requires_grad=False):  # noqa: A001
    """Deprecated in PyTorch: the points start, start + step, ... up to end included."""
    import warnings
    warnings.warn("torch.range is deprecated and will be removed in a future release because its behavior is "
                  "inconsistent with Python's range builtin. Instead, use torch.arange, which produces values in "
                  "[start, end).")
    _creation._check_layout(layout)
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (step > 0 and start > end) or (step < 0 and start < end):
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    count = builtins.int(math.floor((end - start) / step)) + 1
    dtype = dtype or _creation.get_default_dtype()
    values = _creation.arange(count, dtype=_C.float64, device=device) * step + start
    return _creation._finish(values.to(dtype), requires_grad)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """obj as a tensor, sharing its memory where it can: a tensor itself, a numpy array's memory,
    an object with the buffer protocol read as dtype (the default float dtype unless given);
    otherwise (numbers, sequences) a new tensor. copy=True always copies, copy=False refuses what
    needs a copy (ValueError)."""
    import numpy as np

    device = _creation._device(device)
    if isinstance(obj, (Tensor, np.ndarray)):
        source = obj if isinstance(obj, Tensor) else None
        if source is None:
            try:
                source = _C.from_numpy(obj)
            except (TypeError, ValueError):  # a dtype or layout from_numpy cannot share
                if copy is False:
                    raise ValueError("can't alias this numpy array into a tensor") from None
                source = _creation.tensor(obj, dtype=dtype, device=device)
        converts = (dtype is not None and dtype != source.dtype) or (device is not None and device != source.device)
        if converts and copy is False:
            what = (f"dtype '{_type_name(source.dtype)}' into dtype '{_type_name(dtype)}'"
                    if dtype is not None and dtype != source.dtype else f"device '{source.device}' into '{device}'")
            raise ValueError(f"can't alias tensor with {what}.")
        result = source.to(dtype=dtype or source.dtype, device=device or source.device)
        if copy and result is source:
            result = source.clone()
    elif isinstance(obj, (bytes, bytearray, memoryview, np.generic)):
        result = _creation.frombuffer(obj, dtype=dtype or _creation.get_default_dtype())
        if copy:
            result = result.clone()
        if device is not None:
            result = result.to(device)
    else:
        if copy is False:
            raise ValueError("can't alias arbitrary sequence into a tensor.")
        result = _creation.tensor(obj, dtype=dtype, device=device)
    return result.requires_grad_() if requires_grad else result


def fill(input, value):
    """A new tensor of input's shape and dtype holding value."""
    _check_tensor(input, "fill")
    return _creation.full_like(input, value.item() if isinstance(value, Tensor) else value)


def get_device(input):
    """The CUDA index of input's device, -1 for the CPU."""
    _check_tensor(input, "get_device")
    return input.get_device()


def is_distributed(input):
    """False: plugflow has no distributed tensors."""
    _check_tensor(input, "is_distributed")
    return False


def set_flush_denormal(mode):
    """Whether the requested denormal mode holds: plugflow never flushes denormals to zero, so
    mode=True is unsupported (False) and mode=False holds (True)."""
    return not mode


def typename(obj):
    """PyTorch's type name: "torch.FloatTensor" for a tensor, the qualified class name otherwise."""
    if isinstance(obj, Tensor):
        return obj.type()
    module = getattr(type(obj), "__module__", "")
    qualname = type(obj).__qualname__
    return qualname if module in ("builtins", "", None) else f"{module}.{qualname}"


def is_storage(obj):
    """False: plugflow exposes no storage objects."""
    return False


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running trapezoidal rule along dim (one value fewer than y has along it)."""
    _check_tensor(y, "cumulative_trapezoid", "y")
    _check_spacing("cumulative_trapezoid", x, dx)
    if y.dtype == _C.bool:
        raise RuntimeError("cumulative_trapezoid: received a bool input for `y`, but bool is not supported")
    if isinstance(x, Tensor) and x.dtype == _C.bool:
        raise RuntimeError("cumulative_trapezoid: received a bool input for `x`, but bool is not supported")
    if y.dim() == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    d = _wrap_dim(dim, y.dim())
    n = y.shape[d]
    if n == 0:
        return _floating(y) if y.dtype in _INTS else y.clone()
    pairs = y.narrow(d, 0, n - 1) + y.narrow(d, 1, n - 1)
    if isinstance(x, Tensor):
        if x.dim() == 1:
            if x.shape[0] != n:
                raise RuntimeError("cumulative_trapezoid: There must be one `x` value for each sample point")
            shape = [1] * y.dim()
            shape[d] = n
            x = x.reshape(shape)
        elif x.dim() < y.dim():
            x = x.reshape([1] * (y.dim() - x.dim()) + list(x.shape))
        m = x.shape[d]
        areas = _C.true_divide((x.narrow(d, 1, m - 1) - x.narrow(d, 0, m - 1)) * pairs, 2)
    else:
        areas = pairs * (0.5 * (1 if dx is None else dx))
    return areas.cumsum(d)


def histogram(input, bins, *, range=None, weight=None, density=False):  # noqa: A002
    """(hist, bin_edges): the (weighted) counts of input's elements in bins equal-width bins over
    range (the data's; widened by 1/2 each way for constant data) or between the given edges; the
    last bin includes its right edge. density divides by the total and the bin widths."""
    _check_tensor(input, "histogram")
    if input.dtype not in _FLOATS:
        raise RuntimeError(f"\"histogramdd\" not implemented for '{_type_name(input.dtype)}'")
    x = input.detach().reshape(-1)
    if isinstance(bins, Tensor):
        if bins.dim() != 1 or bins.numel() < 2:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {builtins.max(bins.numel() - 1, 0)} for "
                               "dimension 0")
        if bins.dtype != input.dtype:
            raise RuntimeError(f"torch.histogramdd: input tensor and bins tensors should have the same dtype, but got "
                               f"input {_type_name(input.dtype)} and bins {_type_name(bins.dtype)}")
        edges = bins.detach().contiguous()
    else:
        if bins <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
        if range is not None:
            low, high = float(range[0]), float(range[1])
        elif x.numel():
            low, high = x.amin().item(), x.amax().item()
        else:
            low, high = 0.0, 1.0
        if low > high:
            raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {low:g} max {high:g} for "
                               "dimension 0")
        if low == high:
            low, high = low - 0.5, high + 0.5
        edges = _creation.linspace(low, high, bins + 1, dtype=input.dtype, device=input.device)
    count = edges.numel() - 1
    if weight is not None:
        _check_tensor(weight, "histogram", "weight")
        if tuple(weight.shape) != tuple(input.shape):
            raise RuntimeError("torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                               "input tensor excluding its innermost dimension")
        w = weight.detach().reshape(-1).to(_C.float64)
    else:
        w = _creation.ones(x.shape, dtype=_C.float64, device=x.device)
    inside = (x >= edges[0]) & (x <= edges[-1])
    position = searchsorted(edges, x.contiguous(), right=True) - 1
    position = _C.where(x == edges[-1], _creation.full((), count - 1, dtype=_C.int64, device=x.device), position)
    hist = _creation.zeros(count, dtype=_C.float64, device=x.device)
    hist = hist.scatter_add(0, position.clamp(0, count - 1), _C.where(inside, w, w * 0))
    if density:
        hist = hist / (hist.sum() * (edges[1:] - edges[:-1]).to(_C.float64))
    return _return_types.histogram((hist.to(input.dtype), edges))


def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """The derivative of input along each dim (all by default) by second-order central differences
    inside and first- or second-order one-sided ones at the ends; spacing is one number, a number
    per dim, or a tensor of coordinates per dim. A tuple, one tensor per dim."""
    _check_tensor(input, "gradient")
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    if dim is None:
        dims = list(builtins.range(input.dim()))
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        dims = [_wrap_dim(d, input.dim()) for d in dims]
    if isinstance(spacing, (list, tuple)):
        if len(spacing) != len(dims):
            raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar or it's spacing and dim "
                               f"arguments to have the same length, but got a spacing argument of length "
                               f"{len(spacing)} and a dim argument of length {len(dims)}.")
        steps = list(spacing)
    else:
        steps = [spacing] * len(dims)
    for d in dims:
        if input.shape[d] < edge_order + 1:
            raise RuntimeError("torch.gradient expected each dimension size to be at least edge_order+1")
    f = _floating(input)
    results = []
    for d, step in zip(dims, steps):
        n = f.shape[d]
        prior, middle, after = f.narrow(d, 0, n - 2), f.narrow(d, 1, n - 2), f.narrow(d, 2, n - 2)
        first, second, third = f.narrow(d, 0, 1), f.narrow(d, 1, 1), f.narrow(d, 2, 1) if n > 2 else None
        last, before_last = f.narrow(d, n - 1, 1), f.narrow(d, n - 2, 1)
        third_last = f.narrow(d, n - 3, 1) if n > 2 else None
        if isinstance(step, Tensor):
            if step.dim() != 1 or step.shape[0] != n:
                raise RuntimeError(f"torch.gradient expected each tensor to be on the same device and the coordinates "
                                   f"of dimension {d} to have {n} elements, but got shape {list(step.shape)}")
            shape = [1] * f.dim()
            shape[d] = n - 1
            dx = (step[1:] - step[:-1]).to(f.dtype).reshape(shape)
            h1, h2 = dx.narrow(d, 0, n - 2), dx.narrow(d, 1, n - 2)
            inner = ((-h2 / (h1 * (h1 + h2))) * prior + ((h2 - h1) / (h1 * h2)) * middle
                     + (h1 / (h2 * (h1 + h2))) * after)
            d0, d1 = dx.narrow(d, 0, 1), dx.narrow(d, 1, 1) if n > 2 else None
            dl, dm = dx.narrow(d, n - 2, 1), dx.narrow(d, n - 3, 1) if n > 2 else None
        else:
            inner = (after - prior) / (2.0 * step)
            d0 = d1 = dl = dm = step
        if edge_order == 1:
            start = (second - first) / d0
            end = (last - before_last) / dl
        else:
            start = (-(2.0 * d0 + d1) / (d0 * (d0 + d1))) * first + ((d0 + d1) / (d0 * d1)) * second \
                + (-d0 / (d1 * (d0 + d1))) * third
            end = (dl / (dm * (dm + dl))) * third_last + (-(dl + dm) / (dm * dl)) * before_last \
                + ((2.0 * dl + dm) / (dl * (dm + dl))) * last
        results.append(_C.cat([start, inner, end], d))
    return tuple(results)


def _apply_(self, callable):
    """Replaces each element by callable(element) (CPU tensors that do not require grad; slow)."""
    if self.requires_grad:
        raise RuntimeError("Can't call apply_() on Variable that requires grad. Use var.detach().apply_() instead.")
    if self.device.type != "cpu":
        raise TypeError("apply_ is only implemented on CPU tensors")
    values = [callable(v) for v in self.reshape(-1).tolist()]
    return self.copy_(_creation.tensor(values, dtype=self.dtype).reshape(tuple(self.shape)))


def _map_(self, tensor, callable):
    """Replaces each element by callable(element, tensor's element) (tensor broadcast to self)."""
    if self.requires_grad:
        raise RuntimeError("Can't call map_() on Variable that requires grad. Use var.detach().map_() instead.")
    if self.device.type != "cpu":
        raise TypeError("map_ is only implemented on CPU tensors")
    other = tensor.expand(tuple(self.shape)).reshape(-1).tolist()
    values = [callable(a, b) for a, b in zip(self.reshape(-1).tolist(), other)]
    return self.copy_(_creation.tensor(values, dtype=self.dtype).reshape(tuple(self.shape)))


def unsafe_split_with_sizes(input, split_sizes, dim=0):
    """split_with_sizes (plugflow's split views are always safe)."""
    return _C.split_with_sizes(input, split_sizes, dim)


# ---------------------------------------------------------------- out= and in-place forms

for _name in ("abs_", "acos_", "acosh_", "asin_", "asinh_", "atan_", "atanh_", "ceil_", "cos_", "cosh_", "erf_",
              "erfc_", "exp_", "exp2_", "expm1_", "fill_", "floor_", "frac_", "log_", "log10_", "log1p_", "log2_",
              "neg_", "negative_", "reciprocal_", "round_", "rsqrt_", "sin_", "sinh_", "sqrt_", "square_", "tan_",
              "trunc_", "xlogy_", "zero_", "index_put_", "resize_as_", "detach", "detach_"):
    globals()[_name] = getattr(Tensor, _name)

for _name in ("lgamma", "digamma", "polygamma", "mvlgamma", "i0", "fmax", "fmin", "gcd", "lcm", "ldexp", "frexp",
              "logaddexp2", "isneginf", "isposinf", "nanmean", "logcumsumexp", "cummax", "cummin", "isin",
              "renorm", "inner", "kron", "logspace", "deg2rad", "rad2deg", "sgn", "signbit", "sinc", "logit",
              "narrow_copy", "index_copy", "scatter_reduce", "addr", "nextafter", "angle", "cumulative_trapezoid",
              "histogram", "bitwise_left_shift", "bitwise_right_shift"):
    globals()[_name] = _with_out(globals()[_name])

deg2rad_ = _inplace(deg2rad, "deg2rad_")
rad2deg_ = _inplace(rad2deg, "rad2deg_")
sinc_ = _inplace(sinc, "sinc_")
logit_ = _inplace(logit, "logit_")
i0_ = _inplace(i0, "i0_")
gcd_ = _inplace(gcd, "gcd_")
lcm_ = _inplace(lcm, "lcm_")


# ---------------------------------------------------------------- Tensor methods

def _install():
    def polygamma_method(self, n):
        return polygamma(n, self)

    def polygamma_inplace(self, n):
        return _write_inplace(self, polygamma(n, self.clone()))

    methods = {
        "arccos": Tensor.acos, "arccos_": Tensor.acos_, "arcsin": Tensor.asin, "arcsin_": Tensor.asin_,
        "arctan": Tensor.atan, "arctan_": Tensor.atan_, "arctan2": Tensor.atan2, "arctan2_": Tensor.atan2_,
        "arccosh": Tensor.acosh, "arccosh_": Tensor.acosh_, "arcsinh": Tensor.asinh, "arcsinh_": Tensor.asinh_,
        "arctanh": Tensor.atanh, "arctanh_": Tensor.atanh_,
        "greater": Tensor.gt, "greater_": Tensor.gt_, "greater_equal": Tensor.ge, "greater_equal_": Tensor.ge_,
        "less": Tensor.lt, "less_": Tensor.lt_, "less_equal": Tensor.le, "less_equal_": Tensor.le_,
        "not_equal": Tensor.ne, "not_equal_": Tensor.ne_, "positive": positive, "fix": Tensor.trunc,
        "fix_": Tensor.trunc_, "ravel": ravel, "is_nonzero": is_nonzero, "is_signed": is_signed,
        "is_same_size": is_same_size, "resolve_conj": resolve_conj, "resolve_neg": resolve_neg, "conj": conj,
        "conj_physical": conj_physical, "conj_physical_": conj_physical_, "is_conj": is_conj, "is_neg": is_neg,
        "adjoint": adjoint, "swapaxes_": Tensor.transpose_, "swapdims_": Tensor.transpose_,
        "unsafe_chunk": Tensor.chunk, "unsafe_split": Tensor.split, "narrow_copy": narrow_copy,
        "hsplit": hsplit, "vsplit": vsplit, "dsplit": dsplit,
        "deg2rad": deg2rad, "deg2rad_": deg2rad_, "rad2deg": rad2deg, "rad2deg_": rad2deg_, "sgn": sgn,
        "sgn_": Tensor.sign_, "signbit": signbit, "sinc": sinc, "sinc_": sinc_, "logit": logit, "logit_": logit_,
        "lgamma": lgamma, "lgamma_": _inplace(lgamma, "lgamma_"), "digamma": digamma,
        "digamma_": _inplace(digamma, "digamma_"), "polygamma": polygamma_method, "polygamma_": polygamma_inplace,
        "mvlgamma": mvlgamma, "mvlgamma_": _inplace(mvlgamma, "mvlgamma_"), "i0": i0, "i0_": i0_,
        "fmax": fmax, "fmin": fmin, "gcd": gcd, "gcd_": gcd_, "lcm": lcm, "lcm_": lcm_, "ldexp": ldexp,
        "ldexp_": ldexp_, "frexp": frexp, "logaddexp2": logaddexp2, "nanmean": nanmean,
        "logcumsumexp": logcumsumexp, "cummax": cummax, "cummin": cummin, "isneginf": isneginf,
        "isposinf": isposinf, "isreal": isreal, "renorm": renorm, "renorm_": _inplace(renorm, "renorm_"),
        "dist": dist, "inner": inner, "kron": kron, "cov": cov, "corrcoef": corrcoef, "diagflat": diagflat,
        "index_copy": index_copy, "index_copy_": index_copy_, "masked_scatter": masked_scatter,
        "masked_scatter_": _masked_scatter_, "scatter_reduce": scatter_reduce,
        "scatter_reduce_": _inplace(scatter_reduce, "scatter_reduce_"), "select_scatter": select_scatter,
        "slice_scatter": slice_scatter, "diagonal_scatter": diagonal_scatter, "put": put,
        "put_": _inplace(put, "put_"), "index_reduce": index_reduce,
        "index_reduce_": _inplace(index_reduce, "index_reduce_"), "fill_diagonal_": _fill_diagonal_,
        "random_": _random_, "exponential_": _exponential_, "cauchy_": _cauchy_, "log_normal_": _log_normal_,
        "geometric_": _geometric_,
        "new": _new, "new_empty_strided": _new_empty_strided, "addr": addr,
        "addr_": _inplace(addr, "addr_"), "nextafter": nextafter, "nextafter_": _inplace(nextafter, "nextafter_"),
        "angle": angle, "histogram": histogram, "apply_": _apply_, "map_": _map_,
        "unsafe_split_with_sizes": unsafe_split_with_sizes, "is_distributed": is_distributed,
        "bitwise_left_shift": bitwise_left_shift,
        "bitwise_left_shift_": _inplace(bitwise_left_shift, "bitwise_left_shift_"),
        "bitwise_right_shift": bitwise_right_shift,
        "bitwise_right_shift_": _inplace(bitwise_right_shift, "bitwise_right_shift_"),
        "__lshift__": bitwise_left_shift, "__rlshift__": lambda self, other: bitwise_left_shift(other, self),
        "__rshift__": bitwise_right_shift, "__rrshift__": lambda self, other: bitwise_right_shift(other, self),
        "__ilshift__": _inplace(bitwise_left_shift, "__ilshift__"),
        "__irshift__": _inplace(bitwise_right_shift, "__irshift__"),
    }
    for name, fn in methods.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, fn)
    properties = {"mT": lambda self: _matrix_transpose(self, "mT"), "mH": lambda self: _matrix_transpose(self, "mH"),
                  "H": _H, "real": real, "imag": imag, "layout": lambda self: _creation.strided}
    for name, getter in properties.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, property(getter))


_install()
