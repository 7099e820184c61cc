// The functional API of torchvision's C++ operators (torch.ops.torchvision.*) with torchvision
// 0.14's semantics: non-maximum suppression and region-of-interest pooling. Included from
// plugflow/ops.h.
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

}  // namespace plugflow::ops
