// The functional API of the `conv` family: 2-d and 3-d convolution and their transposes, max /
// average / adaptive pooling in 2-d and 3-d, and nearest / bilinear upsampling, each with its
// gradient. Included from plugflow/ops.h.
//
// Every function follows PyTorch 1.13 (argument rules, output sizes, error messages). Spatial
// arguments (stride, padding, ...) take exactly two values (height, width) for the 2-d ops and
// three (depth, height, width) for the 3-d ones: Python expands a single int. Inputs are
// (N, C, H, W) or unbatched (C, H, W), respectively (N, C, D, H, W) or (C, D, H, W); a batch of
// 0 gives an empty result. float32 and float64 only.
//
// Gradients are recorded with backward formulas written in these same functions (the
// convolution's input and weight gradients and the pooling backwards are each other's
// adjoints), so double backward works to any order.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plugflow/export.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// ---- convolution ----------------------------------------------------------------------------
// Cross-correlation of input (N, C, H, W) with weight (O, C/groups, kH, kW) plus bias (O) when
// defined: out (N, O, OH, OW), OH = (H + 2 pad - dilation (kH - 1) - 1) / stride + 1.
PF_API Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                     const Shape& padding, const Shape& dilation, int64_t groups);
// padding "valid" (none) or "same" (the output has the input's size; stride 1 only; an odd
// total padding puts the extra row/column at the bottom/right, as PyTorch).
PF_API Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                     const std::string& padding, const Shape& dilation, int64_t groups);

// The same over (N, C, D, H, W) with weight (O, C/groups, kD, kH, kW).
PF_API Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                     const Shape& padding, const Shape& dilation, int64_t groups);
PF_API Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                     const std::string& padding, const Shape& dilation, int64_t groups);

// The transposed convolution: input (N, C_in, H, W), weight (C_in, C_out/groups, kH, kW),
// out (N, C_out, (H-1) stride - 2 pad + dilation (kH-1) + output_padding + 1, ...).
PF_API Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                               const Shape& padding, const Shape& output_padding, int64_t groups,
                               const Shape& dilation);
PF_API Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                               const Shape& padding, const Shape& output_padding, int64_t groups,
                               const Shape& dilation);

// The gradients of conv2d (also usable directly): the input gradient (N, C, input_hw) of a
// grad_output (N, O, OH, OW) — this is conv_transpose2d — and the weight gradient
// (O, C/groups, kernel_hw).
PF_API Tensor conv2d_grad_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_hw,
                                const Shape& stride, const Shape& padding, const Shape& dilation, int64_t groups);
PF_API Tensor conv2d_grad_weight(const Tensor& grad_output, const Tensor& input, const Shape& kernel_hw,
                                 const Shape& stride, const Shape& padding, const Shape& dilation, int64_t groups);

// ---- pooling ---------------------------------------------------------------------------------
// (values, int64 indices): each index is the position h * W + w of the maximum in its input
// plane. An empty stride means stride = kernel_size. NaN wins.
PF_API std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const Shape& kernel_size,
                                                         const Shape& stride, const Shape& padding,
                                                         const Shape& dilation, bool ceil_mode);
PF_API Tensor max_pool2d(const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding,
                         const Shape& dilation, bool ceil_mode);
PF_API Tensor avg_pool2d(const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding,
                         bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override);
// output_size: two values, -1 keeps the input's size in that dim (PyTorch's None).
PF_API Tensor adaptive_avg_pool2d(const Tensor& input, const Shape& output_size);
PF_API std::pair<Tensor, Tensor> adaptive_max_pool2d(const Tensor& input, const Shape& output_size);

// The 3-d forms: indices are positions d * H * W + h * W + w in each input volume.
PF_API std::pair<Tensor, Tensor> max_pool3d_with_indices(const Tensor& input, const Shape& kernel_size,
                                                         const Shape& stride, const Shape& padding,
                                                         const Shape& dilation, bool ceil_mode);
PF_API Tensor avg_pool3d(const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding,
                         bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override);
PF_API Tensor adaptive_avg_pool3d(const Tensor& input, const Shape& output_size);
PF_API std::pair<Tensor, Tensor> adaptive_max_pool3d(const Tensor& input, const Shape& output_size);

// ---- upsampling --------------------------------------------------------------------------------
// To output_size (two values). scales: the user's scale factors (h, w), which PyTorch uses
// instead of in/out to place samples when given; empty for none.
PF_API Tensor upsample_nearest2d(const Tensor& input, const Shape& output_size, const std::vector<double>& scales);
PF_API Tensor upsample_bilinear2d(const Tensor& input, const Shape& output_size, bool align_corners,
                                  const std::vector<double>& scales);
// Cubic convolution (A = -0.75) over the 4 x 4 nearest inputs, clamped at the borders.
PF_API Tensor upsample_bicubic2d(const Tensor& input, const Shape& output_size, bool align_corners,
                                 const std::vector<double>& scales);

}  // namespace plugflow::ops
