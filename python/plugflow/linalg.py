"""plugflow.linalg (torch.linalg): norms and products composed from plugflow's ops, the LAPACK
solvers and decompositions (CPU kernels), and LinAlgError."""

import builtins
import math

from . import _C, _creation, return_types
from ._C import Tensor, where as _where
from ._composite import _wrap_dim, broadcast_shapes as _broadcast_shapes, cross as _cross, diagonal as _diagonal
from ._composite import eye as _eye, finfo as _finfo
from .autograd import Function, no_grad as _no_grad
from .nn._functional_loss import _type_name

__all__ = ["lstsq", "LinAlgError", "vector_norm", "matrix_norm", "norm", "diagonal", "matmul", "multi_dot", "cross",
           "vecdot", "matrix_power", "solve", "solve_ex", "inv", "inv_ex", "cholesky", "cholesky_ex", "det", "slogdet",
           "qr", "svd", "svdvals", "eigh", "eigvalsh", "pinv", "matrix_rank", "solve_triangular", "matrix_exp", "cond",
           "tensorinv", "tensorsolve", "householder_product"]

# PyTorch's torch.linalg.LinAlgError (a RuntimeError): raised where an input matrix is singular
# or the algorithm does not converge (lstsq's 'gels' on a rank-deficient matrix, ...).
LinAlgError = _C._LinAlgError

_FLOATS = (_C.float16, _C.bfloat16, _C.float32, _C.float64)


def lstsq(A, B, rcond=None, *, driver=None):
    """Least-squares solution of A X = B, PyTorch's torch.linalg.lstsq.

    A is (*, m, n); B is (*, m, k), or (*, m) for a vector right-hand side (then X is (*, n)); batch
    dims broadcast. driver: 'gelsy' (default: QR with column pivoting, handles rank-deficient A),
    'gelsd' or 'gelss' (SVD), 'gels' (QR, A of full rank); on CUDA only 'gels', the default there
    (as PyTorch). Returns (solution, residuals, rank, singular_values), filled as PyTorch fills them
    for the driver: residuals (squared residual norms, (*, k)) only when m > n, the driver is not
    'gelsy' and (SVD drivers) every A has full rank; rank for all drivers but 'gels';
    singular_values for 'gelsd' and 'gelss'; unfilled fields are empty.
    The solution is differentiable in A and B. 'gels' on a matrix without full rank, or an SVD
    driver that does not converge, raises LinAlgError naming the failing batch element.
    """
    if rcond is not None:
        rcond = float(rcond)
    return return_types.linalg_lstsq(_C._linalg_lstsq(A, B, rcond, driver))


# ---------------------------------------------------------------- norms

def _write_out(result, out):
    """result, or out resized to it and filled with it (out= must have result's dtype, as PyTorch's)."""
    if out is None:
        return result
    if out.dtype != result.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {_c_type_name(result.dtype)}, but got "
                           f"{_c_type_name(out.dtype)} instead")
    if tuple(out.shape) != tuple(result.shape):
        out.resize_(result.shape)
    return out.copy_(result)


def _write_outs(results, out, result_type):
    """The named tuple of results, or of the tensors of out (a tuple) filled with them."""
    if out is None:
        return result_type(results)
    if len(out) != len(results):
        raise TypeError(f"{result_type.__name__}(): argument 'out' must be a tuple of {len(results)} Tensors")
    return result_type(_write_out(r, o) for r, o in zip(results, out))


def _check_floating(x, fn):
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise RuntimeError(f"{fn}: Expected a floating point or complex tensor as input. Got {_type_name(x.dtype)}")


def _norm_dtype(x, dtype, fn):
    """x cast to dtype= (floating, and not narrower than x: PyTorch's rule)."""
    if dtype is None:
        return x
    if dtype not in _FLOATS:
        raise RuntimeError(f"{fn}: dtype should be floating point or complex, but got {_type_name(dtype)}")
    if _C.promote_types(x.dtype, dtype) != dtype:
        raise RuntimeError(f"{fn}: the dtype of the input ({_type_name(x.dtype)}) should be convertible without "
                           f"narrowing to the specified dtype ({_type_name(dtype)})")
    return x.to(dtype)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """The ord-norm of x over dim (all of x flattened when None): ord = inf / -inf: max / min |x|,
    0: the count of non-zeros, other p: (sum |x|^p)^(1/p), negative p included."""
    _check_floating(x, "linalg.vector_norm")
    if isinstance(ord, (bool, str)) or not isinstance(ord, (int, float)):
        raise TypeError(f"linalg_vector_norm(): argument 'ord' (position 2) must be Number, not {type(ord).__name__}")
    x = _norm_dtype(x, dtype, "linalg.vector_norm")
    ord = float(ord)
    if dim is None:
        dims = list(range(x.dim()))
    else:
        dims = [_wrap_dim(d, x.dim()) for d in ((dim,) if isinstance(dim, int) else dim)]
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"dim {dims[0]} appears multiple times in the list of dims")
    if x.numel() == 0 and (ord < 0 or ord == math.inf):
        if not dims or builtins.any(x.shape[d] == 0 for d in dims) or x.dim() == 0:
            raise RuntimeError(f"linalg.vector_norm cannot compute the {ord:g} norm on an empty tensor because the "
                               "operation does not have an identity")
    if x.dim() == 0:  # a scalar: |x| (its one element), keepdim or not
        return _write_out(x.abs() if ord != 0 else (x != 0).to(x.dtype), out)
    return _write_out(x.norm(ord, dim=dims, keepdim=keepdim), out)


def _matrix_dims(A, dim, fn):
    if A.dim() < 2:
        raise RuntimeError(f"{fn}: The input tensor A must have at least 2 dimensions.")
    dim = tuple(dim) if not isinstance(dim, int) else (dim,)
    if len(dim) != 2:
        raise RuntimeError(f"{fn}: dim must be a 2-tuple. Got {' '.join(str(d) for d in dim)}")
    d0, d1 = _wrap_dim(dim[0], A.dim()), _wrap_dim(dim[1], A.dim())
    if d0 == d1:
        raise RuntimeError(f"{fn}: dims must be different. Got ({dim[0]}, {dim[1]})")
    return d0, d1


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    """The matrix ord-norm over the two dims: 'fro', 'nuc' (sum of singular values), inf / -inf
    (max / min absolute row sum), 1 / -1 (column sums), 2 / -2 (largest / smallest singular value)."""
    _check_floating(A, "linalg.matrix_norm")
    d0, d1 = _matrix_dims(A, dim, "linalg.matrix_norm")
    A = _norm_dtype(A, dtype, "linalg.matrix_norm")
    if isinstance(ord, str):
        if ord not in ("fro", "nuc"):
            raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    elif ord not in (1, -1, 2, -2, math.inf, -math.inf):
        raise RuntimeError(f"linalg.matrix_norm: Order {ord:g} not supported.")
    if ord == "fro":
        return _write_out(vector_norm(A, 2, (d0, d1), keepdim), out)
    if ord in ("nuc", 2, -2):  # from the singular values, the two dims moved last
        s = svdvals(A.movedim((d0, d1), (-2, -1)))
        r = s.sum(-1) if ord == "nuc" else s.amax(-1) if ord == 2 else s.amin(-1)
        if keepdim:
            r = r.unsqueeze(-1).unsqueeze(-1).movedim((-2, -1), (d0, d1))
        return _write_out(r, out)
    # inf: the largest (-inf: smallest) absolute row sum; 1 / -1: the same over columns
    summed, reduced = (d1, d0) if ord in (math.inf, -math.inf) else (d0, d1)
    sums = A.abs().sum(summed, keepdim=True)
    r = sums.amax(reduced, keepdim=True) if ord > 0 else sums.amin(reduced, keepdim=True)
    if not keepdim:
        r = r.squeeze(builtins.max(d0, d1)).squeeze(builtins.min(d0, d1))
    return _write_out(r, out)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """torch.linalg.norm: a vector norm (a 1-D input or one dim; all of A flattened when ord and dim
    are None) or a matrix norm (a 2-D input or two dims), as PyTorch dispatches them."""
    _check_floating(A, "linalg.vector_norm" if not isinstance(ord, str) else "linalg.matrix_norm")
    if dim is not None:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        if len(dims) not in (1, 2):
            raise RuntimeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(dims)}")
    if isinstance(ord, str):
        if dim is None:
            if A.dim() != 2:
                if A.dim() < 2:
                    raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
                raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 2D. "
                                   f"Got {A.dim()}D.")
            dims = (-2, -1)
        return matrix_norm(A, ord, dims, keepdim, dtype=dtype, out=out)
    if ord is None:
        return vector_norm(A, 2, dim, keepdim, dtype=dtype, out=out)
    if dim is None:
        if A.dim() not in (1, 2):
            raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                               f"Got {A.dim()}D.")
        dims = tuple(range(A.dim()))
    if len(dims) == 2:
        return matrix_norm(A, ord, dims, keepdim, dtype=dtype, out=out)
    return vector_norm(A, ord, dims, keepdim, dtype=dtype, out=out)


# ---------------------------------------------------------------- products and views

def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """torch.linalg.diagonal: torch.diagonal with the last two dims by default."""
    return _diagonal(A, offset, dim1, dim2)


def matmul(input, other, *, out=None):
    """torch.linalg.matmul: an alias of torch.matmul."""
    return _C.matmul(input, other, out=out) if out is not None else _C.matmul(input, other)


def cross(input, other, *, dim=-1, out=None):
    """torch.linalg.cross: the cross product of 3-vectors along dim (default the last); inputs of
    one rank, broadcast."""
    if input.dim() != other.dim():
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    shape = _broadcast_shapes(input.shape, other.shape)
    return _write_out(_cross(input.expand(shape), other.expand(shape), dim), out)


def vecdot(x, y, *, dim=-1, out=None):
    """The dot product of x and y along dim, broadcast (real tensors: sum(x * y, dim))."""
    if x.dtype != y.dtype:
        raise RuntimeError(f"linalg.vecdot: Expected x and y to have the same dtype, but found x of type "
                           f"{_type_name(x.dtype)} and y of type {_type_name(y.dtype)} instead")
    return _write_out((x * y).sum(dim), out)


def _c_type_name(dtype):
    """The C type name PyTorch's multi_dot message uses: float, double, long int, ..."""
    names = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
             "int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char",
             "uint8": "unsigned char", "bool": "bool"}
    return names[repr(dtype).rpartition(".")[2]]


def multi_dot(tensors, *, out=None):
    """The product of a chain of matrices; the first may be a row vector, the last a column vector
    (1-D), whose dims the result drops. Multiplied in the order with fewest flops (PyTorch's
    choice for three matrices; left to right beyond)."""
    n = len(tensors)
    if n < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {n}")
    first, last = tensors[0], tensors[-1]
    if first.dim() not in (1, 2):
        raise RuntimeError(f"multi_dot(): the first tensor must be 1D or 2D but got {first.dim()}D")
    if last.dim() not in (1, 2):
        raise RuntimeError(f"multi_dot(): the last tensor must be 1D or 2D but got {last.dim()}D")
    for i in range(1, n - 1):
        if tensors[i].dim() != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {tensors[i].dim()}D")
    for i in range(1, n):
        if tensors[i].dtype != first.dtype:
            raise RuntimeError(f"multi_dot(): all tensors must have be the same dtype but tensor 0 is "
                               f"{_c_type_name(first.dtype)} and tensor {i} {_c_type_name(tensors[i].dtype)}")
    mats = [first.unsqueeze(0) if first.dim() == 1 else first] + list(tensors[1:-1]) + \
           [last.unsqueeze(1) if last.dim() == 1 else last]
    for i in range(n - 1):
        if mats[i].shape[1] != mats[i + 1].shape[0]:
            raise RuntimeError(f"multi_dot(): tensors {i} and {i + 1} with shapes {list(mats[i].shape)} and "
                               f"{list(mats[i + 1].shape)} cannot be multiplied")
    if n == 3:
        a, b = mats[0].shape
        c, d = mats[2].shape
        # (AB)C costs a*b*c + a*c*d, A(BC) costs b*c*d + a*b*d
        result = (mats[0] @ mats[1]) @ mats[2] if a * c * (b + d) <= b * d * (a + c) else mats[0] @ (mats[1] @ mats[2])
    else:
        result = mats[0]
        for m in mats[1:]:
            result = result @ m
    if first.dim() == 1:
        result = result.squeeze(0)
    if last.dim() == 1:
        result = result.squeeze(-1)
    return _write_out(result, out)


def _check_square(A, fn):
    if A.dim() < 2:
        raise RuntimeError(f"{fn}: The input tensor A must have at least 2 dimensions.")
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{fn}: A must be batches of square matrices, but they are {A.shape[-2]} by {A.shape[-1]} "
                           "matrices")


def matrix_power(A, n, *, out=None):
    """A to the integer power n by repeated squaring (n = 0: the identity; n < 0: inv(A)^-n)."""
    _check_square(A, "linalg.matrix_power")
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"linalg_matrix_power(): argument 'n' (position 2) must be int, not {type(n).__name__}")
    if n == 0:
        eye = _eye(A.shape[-1], dtype=A.dtype, device=A.device)
        return _write_out(eye.expand(A.shape).clone(), out)
    if n < 0:
        A, n = inv(A), -n
    result, square = None, A
    while True:
        if n & 1:
            result = square if result is None else result @ square
        n >>= 1
        if not n:
            break
        square = square @ square
    return _write_out(result if result is not A else A.clone(), out)


# ---------------------------------------------------------------- LAPACK solvers and decompositions
# (CPU kernels, float32 and float64; on CUDA the dispatcher's "no kernel" error)

def solve_ex(A, B, *, left=True, check_errors=False, out=None):
    """(result, info): X with A X = B (left) or X A = B; info is LAPACK's code per matrix (0: solved)."""
    return _write_outs(_C._linalg_solve_ex(A, B, left, check_errors), out, return_types.linalg_solve_ex)


def solve(A, B, *, left=True, out=None):
    """X with A X = B (or X A = B when not left) for square A (*, n, n) and B (*, n, k) or a vector
    (*, n); batch dims broadcast. A singular A raises LinAlgError."""
    return _write_out(_C._linalg_solve_ex(A, B, left, True)[0], out)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):
    """X with A X = B (left) or X A = B for triangular A (*, n, n), its upper or lower triangle read
    (the diagonal taken as ones when unitriangular), and B (*, n, k) (left) or (*, k, n); batch
    dims broadcast, dtypes promote. BLAS's ?trsm: no singularity check (a zero diagonal entry gives
    inf / NaN, as PyTorch's)."""
    return _write_out(_C._linalg_solve_triangular(A, B, upper, left, unitriangular), out)


def inv_ex(A, *, check_errors=False, out=None):
    """(inverse, info): the inverse of each square matrix; info > 0 marks a singular one."""
    return _write_outs(_C._linalg_inv_ex(A, check_errors), out, return_types.linalg_inv_ex)


def inv(A, *, out=None):
    """The inverse of each square matrix of A (*, n, n); a singular one raises LinAlgError."""
    return _write_out(_C._linalg_inv_ex(A, True)[0], out)


def cholesky_ex(A, *, upper=False, check_errors=False, out=None):
    """(L, info): the Cholesky factor; info > 0 is the order of a leading minor that is not positive-definite."""
    return _write_outs(_C._linalg_cholesky_ex(A, upper, check_errors), out, return_types.linalg_cholesky_ex)


def cholesky(A, *, upper=False, out=None):
    """L (lower) with A = L L^T, or U (upper) with A = U^T U, of symmetric positive-definite
    matrices (read from the lower, or upper, triangle); otherwise LinAlgError."""
    return _write_out(_C._linalg_cholesky_ex(A, upper, True)[0], out)


def slogdet(A, *, out=None):
    """(sign, logabsdet): the sign of det(A) (0 when singular) and log|det(A)|, from an LU factorization."""
    return _write_outs(_C._linalg_slogdet(A), out, return_types.linalg_slogdet)


def det(A, *, out=None):
    """The determinant of each square matrix, sign * exp(log|det|) from an LU factorization (its
    gradient det(A) A^-T; at a singular A that raises LinAlgError)."""
    sign, logabsdet = _C._linalg_slogdet(A)
    return _write_out(sign * logabsdet.exp(), out)


def qr(A, mode="reduced", *, out=None):
    """(Q, R) with A = Q R: mode 'reduced' (k = min(m, n) columns of Q), 'complete' (Q square) or
    'r' (R only, Q empty)."""
    if not isinstance(mode, str):
        raise TypeError(f"linalg_qr(): argument 'mode' (position 2) must be str, not {type(mode).__name__}")
    return _write_outs(_C._linalg_qr(A, mode), out, return_types.linalg_qr)


def svd(A, full_matrices=True, *, driver=None, out=None):
    """(U, S, Vh) with A = U diag(S) Vh, S descending (LAPACK's ?gesdd); full_matrices: square U and Vh."""
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with "
                           "cuSOLVER backend.")
    return _write_outs(_C._linalg_svd(A, full_matrices, True), out, return_types.linalg_svd)


def svdvals(A, *, driver=None, out=None):
    """The singular values of A, descending."""
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with "
                           "cuSOLVER backend.")
    return _write_out(_C._linalg_svd(A, False, False)[1], out)


def eigh(A, UPLO="L", *, out=None):
    """(eigenvalues, eigenvectors) of symmetric matrices read from their lower (UPLO='L') or upper
    triangle: eigenvalues ascending, eigenvectors in the columns (LAPACK's ?syevd)."""
    return _write_outs(_C._linalg_eigh(A, UPLO, True), out, return_types.linalg_eigh)


def eigvalsh(A, UPLO="L", *, out=None):
    """The eigenvalues of symmetric matrices, ascending."""
    return _write_out(_C._linalg_eigh(A, UPLO, False)[0], out)


def _singular_value_cutoff(A, s, atol, rtol):
    """max(atol, rtol * largest singular value), per matrix (*, 1); rtol defaults to
    eps * max(m, n) when atol and rtol are both None, to 0 when only atol is given."""
    if rtol is None:
        rtol = _finfo(A.dtype).eps * builtins.max(A.shape[-2], A.shape[-1]) if atol is None or _is_zero(atol) else 0.0
    atol = 0.0 if atol is None else atol
    largest = s.amax(-1, keepdim=True) if s.shape[-1] else _creation.zeros(tuple(s.shape[:-1]) + (1,), dtype=s.dtype)
    return _maximum(atol, largest * rtol)


def _is_zero(value):
    return not isinstance(value, Tensor) and value == 0


def _maximum(a, b):
    if isinstance(a, Tensor):
        a = a.unsqueeze(-1) if a.dim() else a
        return _C.maximum(a.to(b.dtype), b)
    return b.clamp(min=float(a))


def _kept_reciprocal(values, kept):
    """1 / values where kept, else 0 (no division by the dropped, possibly zero, values)."""
    return (1 / values.masked_fill(~kept, 1.0)).masked_fill(~kept, 0.0)


def pinv(A, rcond=None, hermitian=False, *, atol=None, rtol=None, out=None):
    """The Moore-Penrose pseudo-inverse, V diag(1/s) U^T over the singular values above
    max(atol, rtol * the largest) (rtol default eps * max(m, n)); from eigh when hermitian.
    rcond is the older overload's rtol (with atol 0)."""
    if rcond is not None:
        atol, rtol = 0.0, rcond
    if not isinstance(A, Tensor):
        raise TypeError(f"linalg_pinv(): argument 'input' (position 1) must be Tensor, not {type(A).__name__}")
    if A.dim() < 2 or A.dtype not in (_C.float32, _C.float64):
        shape = list(A.shape)
        raise RuntimeError(f"linalg.pinv({_type_name(A.dtype)}{{{shape}}}): expected a tensor with 2 or more "
                           "dimensions of float, double, cfloat or cdouble types")
    if hermitian:
        L, V = eigh(A)
        cutoff = _singular_value_cutoff(A, L.abs(), atol, rtol)
        kept = L.abs() > cutoff
        inverse = _kept_reciprocal(L, kept)
        return _write_out((V * inverse.unsqueeze(-2)) @ V.transpose(-2, -1), out)
    U, S, Vh = svd(A, full_matrices=False)
    cutoff = _singular_value_cutoff(A, S, atol, rtol)
    kept = S > cutoff
    inverse = _kept_reciprocal(S, kept)
    return _write_out((Vh.transpose(-2, -1) * inverse.unsqueeze(-2)) @ U.transpose(-2, -1), out)


def matrix_rank(A, tol=None, hermitian=False, *, atol=None, rtol=None, out=None):
    """The number of singular values (absolute eigenvalues when hermitian) above
    max(atol, rtol * the largest), int64; tol is the old name of atol."""
    if A.dim() < 2:
        raise RuntimeError("torch.linalg.matrix_rank: The input tensor input must have at least 2 dimensions.")
    if tol is not None:
        atol, rtol = tol, 0.0
    s = eigvalsh(A).abs() if hermitian else svdvals(A)
    return _write_out((s > _singular_value_cutoff(A, s, atol, rtol)).sum(-1), out)


# ---------------------------------------------------------------- composites of the decompositions

# Higham's (2005) scaling and squaring with the [13/13] Padé approximant: its coefficients and the
# largest 1-norm for which it is accurate to double precision without scaling.
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0, 129060195264000.0,
           10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0, 40840800.0, 960960.0, 16380.0, 182.0, 1.0)
_THETA13 = 5.371920351148152


def matrix_exp(A):
    """The matrix exponential of each square matrix of A (*, n, n): scaling and squaring with a
    Padé approximant of degree 13 (each matrix scaled by 2^-s to a 1-norm below 5.37, then squared
    s times), composed of differentiable ops so that autograd differentiates it."""
    _check_square(A, "linalg.matrix_exp")
    if A.dtype not in _FLOATS:
        raise RuntimeError(f"matrix_exp: Expected a floating point or complex tensor as input. Got "
                           f"{_type_name(A.dtype)}")
    if A.dtype not in (_C.float32, _C.float64):
        raise RuntimeError(f"\"log2_vml_cpu\" not implemented for '{_type_name(A.dtype)}'")
    n = A.shape[-1]
    if A.numel() == 0:
        return A.clone()
    with _no_grad():
        norm1 = A.abs().sum(-2).amax(-1)
        squarings = (norm1 / _THETA13).log2().ceil().clamp(min=0).nan_to_num(0.0)
        most = int(squarings.max().item())
    A = A / (2.0 ** squarings).unsqueeze(-1).unsqueeze(-1)
    b = _PADE13
    eye = _eye(n, dtype=A.dtype, device=A.device)
    A2 = A @ A
    A4 = A2 @ A2
    A6 = A4 @ A2
    U = A @ (A6 @ (b[13] * A6 + b[11] * A4 + b[9] * A2) + b[7] * A6 + b[5] * A4 + b[3] * A2 + b[1] * eye)
    V = A6 @ (b[12] * A6 + b[10] * A4 + b[8] * A2) + b[6] * A6 + b[4] * A4 + b[2] * A2 + b[0] * eye
    result = solve(V - U, V + U)
    for i in range(most):  # each matrix squared as often as it was halved
        squared = (squarings > i).unsqueeze(-1).unsqueeze(-1)
        result = _where(squared, result @ result, result)
    return result


def cond(A, p=None, *, out=None):
    """The condition number of each matrix in the p-norm: p None / 2 / -2 from the singular values
    (largest over smallest, or the reverse; any shape), 'nuc' from them as well (square A), 'fro',
    inf, -inf, 1, -1 as norm(A) * norm(inv(A)) (square A; inf for a singular one). Empty matrices
    give 0."""
    if A.dim() < 2:
        raise RuntimeError("linalg.cond: The input tensor must have at least 2 dimensions.")
    if p is not None and p not in ("fro", "nuc", 2, -2, 1, -1, math.inf, -math.inf):
        raise RuntimeError(f"linalg.cond got an invalid norm type: {p}")
    if A.numel() == 0:
        return _write_out(_creation.zeros(tuple(A.shape[:-2]), dtype=A.dtype), out)
    if p is None or p in (2, -2):
        s = svdvals(A)
        largest, smallest = s[..., 0], s[..., -1]
        return _write_out(smallest / largest if p == -2 else largest / smallest, out)
    _check_square(A, f"linalg.cond(ord={p if isinstance(p, str) else format(p, 'g')})")
    if p == "nuc":  # from the singular values, as PyTorch's (no inverse: a singular A gives a large or NaN value)
        s = svdvals(A)
        return _write_out(s.sum(-1) * s.reciprocal().sum(-1), out)
    inverse, info = inv_ex(A)
    singular = info > 0  # inf; their inverses (NaN) replaced so that no norm sees NaN
    inverse = inverse.masked_fill(singular.unsqueeze(-1).unsqueeze(-1), 0.0)
    return _write_out((matrix_norm(A, p) * matrix_norm(inverse, p)).masked_fill(singular, math.inf), out)


def householder_product(A, tau, *, out=None):
    """The first n columns of the product H_1 ... H_k of Householder reflectors H_i = I - tau_i v_i v_i^T,
    v_i column i of A (*, m, n) below the diagonal with a 1 on it, k = tau.shape[-1] (LAPACK's
    ?orgqr layout, from geqrf). Composed: each reflector applied to the columns in turn, O(m n)
    apiece, differentiable through its ops."""
    fn = "torch.linalg.householder_product"
    if A.dim() < 2:
        raise RuntimeError(f"{fn}: input must have at least 2 dimensions.")
    m, n = A.shape[-2:]
    if m < n:
        raise RuntimeError(f"{fn}: input.shape[-2] must be greater than or equal to input.shape[-1]")
    if tau.dim() and n < tau.shape[-1]:
        raise RuntimeError(f"{fn}: input.shape[-1] must be greater than or equal to tau.shape[-1]")
    if tau.dim() != A.dim() - 1:
        raise RuntimeError(f"{fn}: Expected tau to have one dimension less than input, but got tau.ndim equal to "
                           f"{tau.dim()} and input.ndim is equal to {A.dim()}")
    if tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(f"{fn}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got "
                           f"{list(tau.shape[:-1])}")
    if tau.dtype != A.dtype:
        raise RuntimeError(f"{fn}: tau dtype {_type_name(tau.dtype)} does not match input dtype {_type_name(A.dtype)}")
    if A.dtype not in (_C.float32, _C.float64):
        raise RuntimeError(f"\"orgqr_cpu\" not implemented for '{_type_name(A.dtype)}'")
    rows = _creation.arange(m, device=A.device).unsqueeze(-1)
    result = _eye(m, n, dtype=A.dtype, device=A.device).expand(A.shape).clone()
    for i in reversed(range(tau.shape[-1])):  # H_1 (H_2 (... (H_k E)))
        v = A[..., :, i:i + 1].masked_fill(rows < i, 0.0).masked_fill(rows == i, 1.0)  # (*, m, 1)
        result = result - (tau[..., i:i + 1].unsqueeze(-1) * v) @ (v.transpose(-2, -1) @ result)
    return _write_out(result, out)


def _product(sizes):
    result = 1
    for size in sizes:
        result *= size
    return result


def tensorinv(A, ind=2, *, out=None):
    """The inverse of A under tensordot over ind dims: A reshaped to a square
    (prod(shape[:ind]), prod(shape[ind:])) matrix, inverted, reshaped to shape[ind:] + shape[:ind]."""
    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    rows, cols = tuple(A.shape[:ind]), tuple(A.shape[ind:])
    if _product(rows) != _product(cols):
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                           f"prod(self.shape[:ind]), but got {_product(cols)} != {_product(rows)}")
    try:
        inverse = inv(A.reshape(_product(rows), _product(cols)))
    except LinAlgError as e:  # PyTorch's message names inv, not linalg.inv, here
        raise LinAlgError(str(e).replace("linalg.inv", "inv", 1)) from None
    return _write_out(inverse.reshape(cols + rows), out)


def tensorsolve(A, B, dims=None, *, out=None):
    """X with tensordot(A, X, X.dim()) = B: A's dims (moved last first when given) split into B's
    shape and X's, solved as one square system."""
    if dims is not None:
        dims = [_wrap_dim(d, A.dim()) for d in dims]
        A = A.movedim(dims, list(range(A.dim() - len(dims), A.dim())))
    result_shape = tuple(A.shape[B.dim():])
    rows, cols = _product(A.shape[:B.dim()]), _product(result_shape)
    if rows != cols:
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
                           f"prod(self.shape[:other.ndim]), but got {cols} != {rows}")
    return _write_out(solve(A.reshape(rows, cols), B.reshape(-1)).reshape(result_shape), out)


# ---------------------------------------------------------------- torch.X forms and Tensor methods

def triangular_solve(input, A, upper=True, transpose=False, unitriangular=False, *, out=None):
    """torch.triangular_solve (deprecated): (solution, cloned_coefficient) with A X = input (A^T X
    = input when transpose) for triangular A; cloned_coefficient is A broadcast to the batch shape
    and copied."""
    if input.dim() < 2:
        raise RuntimeError(f"torch.triangular_solve: Expected b to have at least 2 dimensions, but it has "
                           f"{input.dim()} dimensions instead")
    if A.dim() < 2:
        raise RuntimeError(f"torch.triangular_solve: Expected A to have at least 2 dimensions, but it has "
                           f"{A.dim()} dimensions instead")
    if input.dtype != A.dtype:
        raise RuntimeError(f"Expected b and A to have the same dtype, but found b of type {_type_name(input.dtype)} "
                           f"and A of type {_type_name(A.dtype)} instead.")
    _check_square(A, "triangular_solve")
    if A.shape[-1] != input.shape[-2]:
        raise RuntimeError(f"Incompatible matrix sizes for triangular_solve: each A matrix is {A.shape[-2]} by "
                           f"{A.shape[-1]} but each b matrix is {input.shape[-2]} by {input.shape[-1]}")
    batch = tuple(_broadcast_shapes(A.shape[:-2], input.shape[:-2]))
    A = A.expand(batch + tuple(A.shape[-2:]))
    solution = solve_triangular(A.transpose(-2, -1) if transpose else A, input, upper=upper != transpose,
                                unitriangular=unitriangular)
    return _write_outs((solution, A.clone()), out, return_types.triangular_solve)


def inverse(input, *, out=None):
    """torch.inverse: linalg.inv."""
    return _write_out(_C._linalg_inv_ex(input, True)[0], out)


def _slogdet_function(input):
    """torch.slogdet: linalg.slogdet under torch.return_types.slogdet."""
    return return_types.slogdet(_C._linalg_slogdet(input))


def logdet(input):
    """log(det(A)): NaN for a negative determinant, -inf for a singular A."""
    sign, logabsdet = _C._linalg_slogdet(input)
    return logabsdet + sign.log()


def cholesky_solve(input, input2, upper=False, *, out=None):
    """X with A X = B for A = L L^T given its Cholesky factor input2 (upper: A = U^T U), B = input."""
    if input.dim() < 2 or input2.dim() < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {input.dim()} dimensions instead"
                           if input.dim() < 2 else
                           f"u should have at least 2 dimensions, but has {input2.dim()} dimensions instead")
    lower = input2.transpose(-2, -1) if upper else input2
    y = solve(lower, input)
    return _write_out(solve(lower.transpose(-2, -1), y), out)


def cholesky_inverse(input, upper=False, *, out=None):
    """inv(A) for A = L L^T given its Cholesky factor input (upper: A = U^T U)."""
    lower = input.transpose(-2, -1) if upper else input
    lower_inverse = inv(lower)
    return _write_out(lower_inverse.transpose(-2, -1) @ lower_inverse, out)


def pinverse(input, rcond=1e-15):
    """torch.pinverse: linalg.pinv with rtol = rcond."""
    return pinv(input, rcond)


def _svd_function(input, some=True, compute_uv=True, *, out=None):
    """torch.svd (deprecated): (U, S, V) with input = U diag(S) V^T, V not transposed; some: the
    reduced vectors. Without compute_uv, U and V are zeros of shapes (*, m, m) and (*, n, n)."""
    if compute_uv:
        U, S, Vh = svd(input, full_matrices=not some)
        return _write_outs((U, S, Vh.transpose(-2, -1)), out, return_types.svd)
    S = svdvals(input)
    batch, (m, n) = tuple(input.shape[:-2]), input.shape[-2:]
    U = _creation.zeros(batch + (m, m), dtype=input.dtype, device=input.device)
    V = _creation.zeros(batch + (n, n), dtype=input.dtype, device=input.device)
    return _write_outs((U, S, V), out, return_types.svd)


def _qr_function(input, some=True, *, out=None):
    """torch.qr (deprecated): linalg.qr in mode 'reduced' (some) or 'complete'."""
    return _write_outs(_C._linalg_qr(input, "reduced" if some else "complete"), out, return_types.qr)


class _EigenvaluesOnly(Function):
    """symeig's eigenvalues without eigenvectors: PyTorch does not differentiate them."""

    @staticmethod
    def forward(ctx, A, uplo):
        return eigvalsh(A, uplo)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("linalg_eig_backward: torch.symeig(A, eigenvectors=False) is not differentiable. Use "
                           "torch.linalg.eigvalsh(A) instead.")


def symeig(input, eigenvectors=False, upper=True, *, out=None):
    """torch.symeig (deprecated): (eigenvalues, eigenvectors) of symmetric matrices read from their
    upper (default) or lower triangle; without eigenvectors an empty tensor in their place (and
    the eigenvalues are not differentiable, as PyTorch's)."""
    _check_square(input, "linalg.symeig")
    uplo = "U" if upper else "L"
    if eigenvectors:
        return _write_outs(_C._linalg_eigh(input, uplo, True), out, return_types.symeig)
    values = _EigenvaluesOnly.apply(input, uplo)
    return _write_outs((values, _creation.empty(0, dtype=input.dtype, device=input.device)), out,
                       return_types.symeig)


orgqr = householder_product  # torch.orgqr


def _install():
    methods = {"inverse": inverse, "det": det, "logdet": logdet, "slogdet": _slogdet_function,
               "cholesky_solve": cholesky_solve, "cholesky_inverse": cholesky_inverse, "pinverse": pinverse,
               "matrix_power": matrix_power, "triangular_solve": triangular_solve, "matrix_exp": matrix_exp,
               "svd": _svd_function, "qr": _qr_function, "symeig": symeig, "orgqr": householder_product}
    for name, fn in methods.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, fn)


_install()
