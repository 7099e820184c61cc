// The functional API of grid sampling: grid_sample (torch.grid_sampler) over 2-d and 3-d inputs
// and affine_grid (torch.affine_grid_generator), PyTorch 1.13's semantics. Included from
// plugflow/ops.h.
#pragma once
#include <string>

#include "plugflow/export.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// Samples input (N, C, H, W) at grid (N, OH, OW, 2) -> (N, C, OH, OW), or input (N, C, D, H, W)
// at grid (N, OD, OH, OW, 3) -> (N, C, OD, OH, OW). grid[..., 0] is x (along W), [..., 1] y,
// [..., 2] z, in [-1, 1] across the input (outside: padding_mode). mode: "bilinear", "nearest"
// or "bicubic" (4-d only); padding_mode: "zeros", "border" or "reflection". Differentiable in
// input and grid (once: the backward op has no derivative, as in PyTorch). float32 and float64.
PF_API Tensor grid_sample(const Tensor& input, const Tensor& grid, const std::string& mode,
                          const std::string& padding_mode, bool align_corners);

// The sampling grid (N, H, W, 2) of the 2-d affine maps theta (N, 2, 3) for an output of size
// (N, C, H, W), or (N, D, H, W, 3) of theta (N, 3, 4) for size (N, C, D, H, W): each output
// position's normalized coordinates (x, y[, z], 1) times theta^T. Composed of linspace and bmm
// as PyTorch's, so it runs on every device and differentiates in theta.
PF_API Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners);

}  // namespace plugflow::ops
