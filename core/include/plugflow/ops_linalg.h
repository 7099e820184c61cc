// The functional API of torch.linalg's solvers and decompositions. Included from plugflow/ops.h.
#pragma once
#include <optional>
#include <string>

#include "plugflow/export.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// torch.linalg.lstsq's result. Which fields are filled depends on the driver, as in PyTorch:
// residuals (*, k) (squared column norms of A X - B) only for m > n, drivers gels/gelsd/gelss,
// and (gelsd/gelss) every matrix of full rank; rank (*) for gelsy/gelsd/gelss; singular_values
// (*, min(m, n)) for gelsd/gelss; the others are empty (shape (0,)). rank and singular_values have
// A's batch shape, the solution and residuals the broadcast one.
struct LstsqResult {
  Tensor solution, residuals, rank, singular_values;
};

// Least squares min ||A X - B|| for A (*, m, n) and B (*, m, k) or (*, m) (then X is (*, n)),
// batch dims broadcast. driver: "gelsy" (default, column-pivoted QR: rank-revealing), "gelsd"
// and "gelss" (SVD), "gels" (QR; A must have full rank). On CUDA only "gels", the default there
// (as PyTorch). rcond: singular values below rcond * the largest count as zero; default
// eps(dtype) * max(m, n). float32 and float64. The solution is differentiable in A and B
// (through the pseudo-inverse; exact where A has full rank).
PF_API LstsqResult linalg_lstsq(const Tensor& a, const Tensor& b, std::optional<double> rcond,
                                const std::optional<std::string>& driver);

// The LAPACK-backed solvers and decompositions (core/src/ops/linalg_decompositions.cpp), PyTorch
// 1.13's torch.linalg functions for real float32 / float64 inputs (*, m, n) with any batch dims:
// CPU kernels only (on CUDA the dispatcher's "no kernel" error). Singular or non-positive-definite
// inputs raise LinAlgError with PyTorch's message (naming the batch element of a batched input)
// unless check_errors is false (the _ex functions: info holds LAPACK's code per matrix, 0 for
// success). Every result is differentiable with PyTorch's formulas, which differentiate again.
struct SolveResult {
  Tensor result, info;
};
struct InvResult {
  Tensor inverse, info;
};
struct CholeskyResult {
  Tensor L, info;
};
struct SlogdetResult {
  Tensor sign, logabsdet;
};
struct QrResult {
  Tensor Q, R;
};
struct SvdResult {
  Tensor U, S, Vh;
};
struct EighResult {
  Tensor eigenvalues, eigenvectors;
};

// X with A X = B (left) or X A = B; B (*, n, k) or a vector (*, n) (B 1-D, or A's shape without
// its last dim); batch dims broadcast.
PF_API SolveResult linalg_solve_ex(const Tensor& a, const Tensor& b, bool left = true, bool check_errors = false);
PF_API Tensor linalg_solve(const Tensor& a, const Tensor& b, bool left = true);
// X with A X = B (left) or X A = B for A (*, n, n) triangular (its upper or lower triangle read;
// the diagonal taken as ones when unitriangular) and B (*, n, k) or (*, k, n); batch dims
// broadcast, dtypes promote. No singularity check (a zero diagonal gives inf / NaN, as PyTorch's).
PF_API Tensor linalg_solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool left = true,
                                      bool unitriangular = false);
PF_API InvResult linalg_inv_ex(const Tensor& a, bool check_errors = false);
PF_API Tensor linalg_inv(const Tensor& a);
// L (lower, A = L L^T) read from A's lower triangle, or U (upper, A = U^T U) from its upper one.
PF_API CholeskyResult linalg_cholesky_ex(const Tensor& a, bool upper = false, bool check_errors = false);
// sign(det A) (0 when singular) and log|det A| (-inf when singular).
PF_API SlogdetResult linalg_slogdet(const Tensor& a);
// mode: "reduced" (Q (*, m, k), R (*, k, n), k = min(m, n)), "complete" (Q (*, m, m), R (*, m, n))
// or "r" (R only; Q is empty).
PF_API QrResult linalg_qr(const Tensor& a, const std::string& mode = "reduced");
// A = U diag(S) Vh, S descending; full_matrices: U (*, m, m), Vh (*, n, n), else k = min(m, n)
// columns / rows. Without compute_uv U and Vh are empty (svdvals).
PF_API SvdResult linalg_svd(const Tensor& a, bool full_matrices = true, bool compute_uv = true);
// A = V diag(L) V^T of a symmetric A read from its lower ("L") or upper ("U") triangle;
// eigenvalues ascending. Without compute_v the eigenvectors are empty (eigvalsh).
PF_API EighResult linalg_eigh(const Tensor& a, const std::string& uplo = "L", bool compute_v = true);

}  // namespace plugflow::ops
