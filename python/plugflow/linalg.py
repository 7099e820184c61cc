"""plugflow.linalg (torch.linalg): the solvers plugflow has so far: lstsq, and LinAlgError."""

from . import _C, return_types

__all__ = ["lstsq", "LinAlgError"]

# PyTorch's torch.linalg.LinAlgError (a RuntimeError): raised where an input matrix is singular
# or the algorithm does not converge (lstsq's 'gels' on a rank-deficient matrix, ...).
LinAlgError = _C._LinAlgError


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
