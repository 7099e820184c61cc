// The functional API of torchvision's C++ operators (torch.ops.torchvision.*) with torchvision
// 0.14's semantics: non-maximum suppression, region-of-interest pooling (plain and
// position-sensitive) and deformable convolution. Included from plugflow/ops.h.
#pragma once
#include <utility>

#include "plugflow/export.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// Indices (int64) of the boxes (N, 4) in (x1, y1, x2, y2) form kept by greedy non-maximum
// suppression, by decreasing score (N); ties keep index order, as torchvision's stable sort.
// A box is dropped when its IoU with a kept box exceeds iou_threshold. float32 and float64;
// not differentiable.
PF_API Tensor nms(const Tensor& boxes, const Tensor& scores, double iou_threshold);

// RoIAlign: input (N, C, H, W), rois (K, 5) rows (batch index, x1, y1, x2, y2) in input
// coordinates before spatial_scale -> (K, C, pooled_height, pooled_width), each bin the mean of
// bilinear samples on a sampling_ratio^2 grid (adaptive, ceil(roi size / bins), when <= 0).
// aligned shifts boxes by half a pixel. Differentiable in input, once.
PF_API Tensor roi_align(const Tensor& input, const Tensor& rois, double spatial_scale, int64_t pooled_height,
                        int64_t pooled_width, int64_t sampling_ratio, bool aligned);

// RoIPool (Fast R-CNN's max pooling over quantized bins): (output (K, C, PH, PW), argmax
// (int32, the flat H * W index of each bin's maximum, -1 for an empty bin)). Differentiable
// in input, once.
PF_API std::pair<Tensor, Tensor> roi_pool(const Tensor& input, const Tensor& rois, double spatial_scale,
                                          int64_t pooled_height, int64_t pooled_width);

// Position-sensitive RoIAlign (R-FCN / Light-Head R-CNN): input (N, C, H, W) with C a multiple
// of PH * PW -> (output (K, C / (PH * PW), PH, PW), channel_mapping (int32)). Bin (ph, pw) of
// output channel c averages bilinear samples of input channel c * PH * PW + ph * PW + pw (its
// channel_mapping entry) over the roi shifted by half a pixel, on a sampling_ratio^2 grid
// (adaptive when <= 0). Differentiable in input, once.
PF_API std::pair<Tensor, Tensor> ps_roi_align(const Tensor& input, const Tensor& rois, double spatial_scale,
                                              int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio);

// Position-sensitive RoIPool: as ps_roi_align, each bin the mean of the input channel's
// pixels in the quantized bin (0 for an empty bin). Differentiable in input, once.
PF_API std::pair<Tensor, Tensor> ps_roi_pool(const Tensor& input, const Tensor& rois, double spatial_scale,
                                             int64_t pooled_height, int64_t pooled_width);

// Deformable convolution (v1, and v2 with a mask): input (N, C, H, W), weight (O, C / groups,
// KH, KW), offset (N, 2 * offset_groups * KH * KW, OH, OW) holding (dy, dx) per kernel tap and
// output position, mask (N, offset_groups * KH * KW, OH, OW) or undefined, bias (O) or
// undefined -> (N, O, OH, OW). Each tap reads its input channel bilinearly at the displaced
// position (0 outside the image), scaled by the mask. Differentiable in every operand, once.
PF_API Tensor deform_conv2d(const Tensor& input, const Tensor& weight, const Tensor& offset, const Tensor& mask,
                            const Tensor& bias, const Shape& stride, const Shape& padding, const Shape& dilation,
                            int64_t groups, int64_t offset_groups);

}  // namespace plugflow::ops
