// The functional API of torch.linalg's solvers. Included from plugflow/ops.h.
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

}  // namespace plugflow::ops
