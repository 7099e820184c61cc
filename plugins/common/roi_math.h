// The arithmetic of torchvision's operators (docs/kernels.md, "torchvision operators") that the
// CPU and CUDA plugins share: nms's overlap test, roi_align's sampling grid and bilinear taps,
// roi_pool's bins, and the checks of the values read from rois. The CPU plugin
// (plugins/cpu/src/vision.cpp) and the CUDA plugin (plugins/cuda/src/vision.cu) add the loops;
// both follow torchvision 0.14's CPU kernels (csrc/ops/cpu/*_kernel.cpp) expression for
// expression, so the forwards agree bit for bit (the CUDA file is compiled without FMA
// contraction; its backwards add with atomics, in another order).
//
// The geometry functions are __host__ __device__ under nvcc and plain inline under g++ (as
// scalar_math.h); the checks are host code that raises plugflow's errors.
// tests/cpp/common/test_roi_math.cpp tests them on the CPU.
#pragma once
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <numeric>
#include <vector>

#include "plugflow/error.h"
#include "scalar_math.h"

namespace plugflow::roi_math {

#ifdef __CUDA_ARCH__
#define PF_ROI_LIBM(name) ::name
#else
#define PF_ROI_LIBM(name) std::name
#endif
template <typename T>
PF_HOST_DEVICE_INLINE T ceil_(T x) { return PF_ROI_LIBM(ceil)(x); }
template <typename T>
PF_HOST_DEVICE_INLINE T floor_(T x) { return PF_ROI_LIBM(floor)(x); }
template <typename T>
PF_HOST_DEVICE_INLINE T round_(T x) { return PF_ROI_LIBM(round)(x); }
#undef PF_ROI_LIBM

// std::max / std::min with their choice for unordered operands (the first).
template <typename T>
PF_HOST_DEVICE_INLINE T max_(T a, T b) { return a < b ? b : a; }
template <typename T>
PF_HOST_DEVICE_INLINE T min_(T a, T b) { return b < a ? b : a; }

// ---- nms ------------------------------------------------------------------------------------------

// Box a (x1, y1, x2, y2) overlaps the later box b by more than `threshold` (intersection over
// union, in torchvision's order of operations: a is the box kept first).
template <typename T>
PF_HOST_DEVICE_INLINE T box_area(const T* box) {
  return (box[2] - box[0]) * (box[3] - box[1]);
}
template <typename T>
PF_HOST_DEVICE_INLINE bool suppresses(const T* a, T area_a, const T* b, T area_b, double threshold) {
  const T xx1 = max_(a[0], b[0]), yy1 = max_(a[1], b[1]);
  const T xx2 = min_(a[2], b[2]), yy2 = min_(a[3], b[3]);
  const T w = max_(static_cast<T>(0), xx2 - xx1), h = max_(static_cast<T>(0), yy2 - yy1);
  const T inter = w * h;
  const T ovr = inter / (area_a + area_b - inter);
  return ovr > threshold;
}

// Host: the order nms visits boxes in: scores.sort(stable=true, descending=true), NaN counting as
// the largest and ties keeping index order.
template <typename T>
std::vector<int64_t> nms_order(const T* scores, int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [scores](int64_t a, int64_t b) {
    const T sa = scores[a], sb = scores[b];
    return (std::isnan(sa) && !std::isnan(sb)) || sa > sb;
  });
  return order;
}

// ---- rois -------------------------------------------------------------------------------------------

// Roi k's batch index as torchvision reads it (truncated to int), checked against the batch, and
// its coordinates checked finite. Host.
template <typename T>
int64_t roi_batch_index(const T* roi, int64_t k, int64_t batch, const char* op) {
  const T b = roi[0];
  PF_CHECK_T(b > T(-1) && b < static_cast<T>(batch), IndexError, op, ": rois[", k, ", 0] = ", b,
             " is not a batch index of an input with ", batch, " images");
  for (int q = 1; q < 5; ++q)
    PF_CHECK(std::isfinite(roi[q]), op, ": rois[", k, ", ", q, "] = ", roi[q], " is not a finite coordinate");
  return static_cast<int64_t>(b);
}

// Checks every roi before a kernel starts (so no thread throws halfway through). Host.
template <typename T>
void check_rois(const T* rois, int64_t num_rois, int64_t batch, const char* op) {
  for (int64_t k = 0; k < num_rois; ++k) roi_batch_index(rois + 5 * k, k, batch, op);
}

// ---- roi_align -------------------------------------------------------------------------------------

struct RoiAlignParams {
  int64_t channels, height, width, pooled_height, pooled_width, sampling_ratio;
  double spatial_scale;
  bool aligned;
};

// One roi's geometry in torchvision's arithmetic (spatial_scale is rounded to T first, as the
// kernels take it as `const T&`).
template <typename T>
struct RoiAlignBox {
  T start_w, start_h, bin_w, bin_h;
  // ceil(roi size / output size): the samples per bin when sampling_ratio <= 0
  T span_h, span_w;
  int64_t grid_h, grid_w;

  PF_HOST_DEVICE_INLINE RoiAlignBox(const T* roi, const RoiAlignParams& p) {
    const T scale = static_cast<T>(p.spatial_scale);
    const T offset = p.aligned ? T(0.5) : T(0.0);
    start_w = roi[1] * scale - offset;
    start_h = roi[2] * scale - offset;
    const T end_w = roi[3] * scale - offset, end_h = roi[4] * scale - offset;
    T roi_width = end_w - start_w, roi_height = end_h - start_h;
    if (!p.aligned) {  // malformed rois count as 1 x 1
      roi_width = max_(roi_width, T(1));
      roi_height = max_(roi_height, T(1));
    }
    bin_h = roi_height / static_cast<T>(p.pooled_height);
    bin_w = roi_width / static_cast<T>(p.pooled_width);
    span_h = ceil_(roi_height / p.pooled_height);
    span_w = ceil_(roi_width / p.pooled_width);
    grid_h = p.sampling_ratio > 0 ? p.sampling_ratio : grid_size(span_h);
    grid_w = p.sampling_ratio > 0 ? p.sampling_ratio : grid_size(span_w);
  }
  // Whether the adaptive grid fits the int torchvision stores it in (else check_grid raises).
  PF_HOST_DEVICE_INLINE static bool fits(T span) { return span <= static_cast<T>(INT_MAX); }
  PF_HOST_DEVICE_INLINE static int64_t grid_size(T span) { return fits(span) ? static_cast<int64_t>(span) : 0; }
  // Host: raises for a roi whose adaptive grid would overflow.
  void check_grid(const RoiAlignParams& p) const {
    if (p.sampling_ratio > 0) return;
    for (T span : {span_h, span_w})
      PF_CHECK(fits(span), "roi_align: a roi spans ", span,
               " samples per bin (sampling_ratio <= 0 samples ceil(roi size / output size)); too large");
  }
  PF_HOST_DEVICE_INLINE int64_t samples() const {
    return (grid_h > 0 ? grid_h : 0) * (grid_w > 0 ? grid_w : 0);
  }
  PF_HOST_DEVICE_INLINE T y(int64_t ph, int64_t iy) const {
    return start_h + static_cast<T>(ph) * bin_h +
           static_cast<T>(static_cast<float>(iy) + .5f) * bin_h / static_cast<T>(grid_h);
  }
  PF_HOST_DEVICE_INLINE T x(int64_t pw, int64_t ix) const {
    return start_w + static_cast<T>(pw) * bin_w +
           static_cast<T>(static_cast<float>(ix) + .5f) * bin_w / static_cast<T>(grid_w);
  }
};

// Host: checks every roi's adaptive grid (after check_rois).
template <typename T>
void check_roi_align_grids(const T* rois, int64_t num_rois, const RoiAlignParams& p) {
  for (int64_t k = 0; k < num_rois; ++k) RoiAlignBox<T>(rois + 5 * k, p).check_grid(p);
}

// The four taps of a bilinear sample at (y, x) (torchvision's pre_calc / bilinear_interpolate_
// gradient): offsets into an H * W plane and weights; all weights 0 outside [-1, H] x [-1, W]
// (where a sample lands when a roi's extent overflows to infinity).
template <typename T>
struct Taps {
  int64_t pos[4] = {0, 0, 0, 0};
  T w[4] = {0, 0, 0, 0};
  bool inside = false;

  PF_HOST_DEVICE_INLINE Taps(T y, T x, int64_t height, int64_t width) {
    // torchvision's `y < -1.0 || y > height || ...` test, written so that NaN is outside too
    if (!(y >= -1.0 && y <= static_cast<T>(height) && x >= -1.0 && x <= static_cast<T>(width))) return;
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int64_t y_low = static_cast<int>(y), x_low = static_cast<int>(x), y_high, x_high;
    if (y_low >= height - 1) {
      y_high = y_low = height - 1;
      y = static_cast<T>(y_low);
    } else {
      y_high = y_low + 1;
    }
    if (x_low >= width - 1) {
      x_high = x_low = width - 1;
      x = static_cast<T>(x_low);
    } else {
      x_high = x_low + 1;
    }
    const T ly = y - static_cast<T>(y_low), lx = x - static_cast<T>(x_low);
    const T hy = T(1.) - ly, hx = T(1.) - lx;
    w[0] = hy * hx;
    w[1] = hy * lx;
    w[2] = ly * hx;
    w[3] = ly * lx;
    pos[0] = y_low * width + x_low;
    pos[1] = y_low * width + x_high;
    pos[2] = y_high * width + x_low;
    pos[3] = y_high * width + x_high;
    inside = true;
  }
  // roi_align's backward: adds g_bin * weight / count to each tap of `plane` through
  // add(pointer, value) (nothing outside).
  template <typename Add>
  PF_HOST_DEVICE_INLINE void scatter(T* plane, T g_bin, T count, Add add) const {
    if (!inside) return;
    for (int q = 0; q < 4; ++q) add(plane + pos[q], g_bin * w[q] / count);
  }
  // The sample's value in `plane` (0 outside).
  PF_HOST_DEVICE_INLINE T value(const T* plane) const {
    return w[0] * plane[pos[0]] + w[1] * plane[pos[1]] + w[2] * plane[pos[2]] + w[3] * plane[pos[3]];
  }
};

// ---- roi_pool --------------------------------------------------------------------------------------

// One roi's bins: torchvision's rounded roi corners and bin sizes.
template <typename T>
struct RoiPoolBox {
  int start_w, start_h;
  T bin_h, bin_w;

  PF_HOST_DEVICE_INLINE RoiPoolBox(const T* roi, T scale, int64_t pooled_height, int64_t pooled_width) {
    start_w = static_cast<int>(round_(roi[1] * scale));
    start_h = static_cast<int>(round_(roi[2] * scale));
    const int end_w = static_cast<int>(round_(roi[3] * scale));
    const int end_h = static_cast<int>(round_(roi[4] * scale));
    const int roi_width = end_w - start_w + 1 > 1 ? end_w - start_w + 1 : 1;
    const int roi_height = end_h - start_h + 1 > 1 ? end_h - start_h + 1 : 1;
    bin_h = static_cast<T>(roi_height) / static_cast<T>(pooled_height);
    bin_w = static_cast<T>(roi_width) / static_cast<T>(pooled_width);
  }
  // Bin (ph, pw)'s window [h0, h1) x [w0, w1), clipped to the input.
  PF_HOST_DEVICE_INLINE void window(int64_t ph, int64_t pw, int64_t height, int64_t width, int64_t& h0, int64_t& h1,
                                    int64_t& w0, int64_t& w1) const {
    h0 = clamp(static_cast<int64_t>(floor_(static_cast<T>(ph) * bin_h)) + start_h, height);
    w0 = clamp(static_cast<int64_t>(floor_(static_cast<T>(pw) * bin_w)) + start_w, width);
    h1 = clamp(static_cast<int64_t>(ceil_(static_cast<T>(ph + 1) * bin_h)) + start_h, height);
    w1 = clamp(static_cast<int64_t>(ceil_(static_cast<T>(pw + 1) * bin_w)) + start_w, width);
  }
  PF_HOST_DEVICE_INLINE static int64_t clamp(int64_t v, int64_t hi) { return v < 0 ? 0 : v > hi ? hi : v; }
};

// A roi coordinate times spatial_scale, rounded half away from zero, as torchvision's quantizing
// kernels do (ps_roi_pool's backward rounds in float: roundf). Host.
template <typename T>
T rounded_coordinate(T v, T scale, bool in_float) {
  return in_float ? static_cast<T>(std::round(static_cast<float>(v * scale))) : std::round(v * scale);
}

// Host: every rounded coordinate must fit the int torchvision keeps it in, with room for the bin
// arithmetic after it (after check_rois).
template <typename T>
void check_rounded_coordinates(const T* rois, int64_t num_rois, T scale, bool in_float, const char* op) {
  for (int64_t n = 0; n < num_rois; ++n)
    for (int q = 1; q < 5; ++q) {
      const T v = rounded_coordinate(rois[5 * n + q], scale, in_float);
      PF_CHECK(std::abs(v) < static_cast<T>(INT_MAX / 4), op, ": rois[", n, ", ", q, "] * spatial_scale = ", v,
               " is too large a coordinate");
    }
}

// The max of bin [h0, h1) x [w0, w1) of `plane` and its position h * width + w; an empty bin
// pools 0 with position -1 (no gradient), a bin of values at or below -FLT_MAX too.
template <typename T>
PF_HOST_DEVICE_INLINE T pool_max(const T* plane, int64_t width, int64_t h0, int64_t h1, int64_t w0, int64_t w1,
                                 int32_t& argmax) {
  const bool is_empty = h1 <= h0 || w1 <= w0;
  T maxval = is_empty ? T(0) : static_cast<T>(-FLT_MAX);
  argmax = -1;
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t idx = h * width + w;
      if (plane[idx] > maxval) {
        maxval = plane[idx];
        argmax = static_cast<int32_t>(idx);
      }
    }
  return maxval;
}

}  // namespace plugflow::roi_math
