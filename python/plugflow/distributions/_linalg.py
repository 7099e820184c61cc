"""The small dense linear algebra MultivariateNormal needs (Cholesky factorization, triangular
solves), composed from plugflow's elementwise ops and reductions one column / row at a time, so that
autograd differentiates them on every device: plugflow.linalg's LAPACK kernels are the CPU
plugin's only, and it has no triangular solve. The loops cost O(n) Python steps for n x n
matrices, which suits the event sizes distributions see."""

import plugflow


def _batch_message(info, fn):
    """The LinAlgError message for a failed factorization, as torch.linalg's."""
    failed = (info != 0).reshape(-1).nonzero().reshape(-1)
    first = int(failed[0])
    order = int(info.reshape(-1)[first])
    where = f"(Batch element {first}): " if info.dim() > 0 else ""
    return (f"{fn}: {where}The factorization could not be completed because the input is not positive-definite "
            f"(the leading minor of order {order} is not positive-definite).")


def cholesky_ex(A):
    """(L, info) for symmetric A (..., n, n): L lower-triangular with L L^T = A, and info (int32,
    A's batch shape) 0 where the factorization succeeded, else the order of the first leading
    minor that is not positive-definite (that element's L is then undefined), as
    torch.linalg.cholesky_ex. A's lower triangle is read through (A + A^T) / 2, so that the
    gradient is symmetric as PyTorch's."""
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.cholesky: A must be batches of square matrices, but they are "
                           f"{A.shape[-2] if A.dim() >= 2 else 1} by {A.shape[-1]} matrices")
    n = A.shape[-1]
    A = (A + A.transpose(-2, -1)) / 2
    info = plugflow.zeros(A.shape[:-2], dtype=plugflow.int32, device=A.device)
    columns = []  # the columns of L found so far, each (..., n)
    for j in range(n):
        s = A[..., j:, j]
        if columns:
            done = plugflow.stack(columns, -1)  # (..., n, j)
            s = s - (done[..., j:, :] * done[..., j:j + 1, :]).sum(-1)
        pivot = s[..., 0]
        bad = ~(pivot > 0)
        info = plugflow.where(bad & (info == 0), plugflow.full_like(info, j + 1), info)
        below = s / pivot.sqrt().unsqueeze(-1)  # rows j.. of column j (the first is sqrt(pivot))
        columns.append(plugflow.cat([plugflow.zeros_like(A[..., :j, j]), below], -1))
    return plugflow.stack(columns, -1), info


def cholesky(A):
    """torch.linalg.cholesky for symmetric positive-definite A; LinAlgError otherwise."""
    L, info = cholesky_ex(A)
    if (info != 0).any():
        raise plugflow.linalg.LinAlgError(_batch_message(info, "linalg.cholesky"))
    return L


def solve_lower_triangular(L, B):
    """X with L X = B, L (..., n, n) lower-triangular with a non-zero diagonal and B (..., n, k)
    (batch dims broadcast), by forward substitution."""
    n = L.shape[-1]
    if B.shape[-2] != n:  # e.g. a MultivariateNormal whose loc and scale_tril disagree
        raise RuntimeError(f"triangular solve: the matrices are {n} by {n} but the right-hand side has "
                           f"{B.shape[-2]} rows")
    rows = []  # the rows of X found so far, each (..., k)
    for i in range(n):
        rhs = B[..., i, :]
        if rows:
            done = plugflow.stack(rows, -2)  # (..., i, k)
            rhs = rhs - (L[..., i, :i].unsqueeze(-1) * done).sum(-2)
        rows.append(rhs / L[..., i, i].unsqueeze(-1))
    return plugflow.stack(rows, -2)
