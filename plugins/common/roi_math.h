// The arithmetic of torchvision's operators (docs/kernels.md, "torchvision operators") that the
// CPU and CUDA plugins share: nms's overlap test, roi_align's sampling grid and bilinear taps
// (ps_roi_align's too), roi_pool's and ps_roi_pool's bins, the position-sensitive channel
// mapping, deform_conv2d's sample positions, bilinear values and their gradients, and the checks
// of the values read from rois. The CPU plugin (plugins/cpu/src/vision.cpp) and the CUDA plugin
// (plugins/cuda/src/vision.cu) add the loops;
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

// The parameters of a roi_align-family call (host side): the (N, C, H, W) input sizes and the
// op's attributes, read through the kernel context. ps_roi_align passes aligned = true (its
// geometry is always roi_align's aligned one).
template <typename Context, typename Sizes>
RoiAlignParams roi_align_params(const Context& ctx, const Sizes& input_size, bool aligned) {
  return {input_size[1],
          input_size[2],
          input_size[3],
          ctx.template attr<int64_t>("pooled_height"),
          ctx.template attr<int64_t>("pooled_width"),
          ctx.template attr<int64_t>("sampling_ratio"),
          ctx.template attr<double>("spatial_scale"),
          aligned};
}

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
// kernels do (ps_roi_pool's backward rounds in float: roundf).
template <typename T>
PF_HOST_DEVICE_INLINE T rounded_coordinate(T v, T scale, bool in_float) {
  return in_float ? static_cast<T>(round_(static_cast<float>(v * scale))) : round_(v * scale);
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

// ---- ps_roi_align / ps_roi_pool ----------------------------------------------------------------------

// The bin (ph, pw) input channel c feeds in a position-sensitive op: output channel c_out's bin
// (ph, pw) pools input channel (c_out * PH + ph) * PW + pw, so output element n * C + c (C input
// channels, output (K, C / (PH * PW), PH, PW)) reads input channel c of roi n.
struct PsBin {
  int64_t ph, pw;
};
PF_HOST_DEVICE_INLINE PsBin ps_bin(int64_t c, int64_t pooled_height, int64_t pooled_width) {
  const int64_t bin = c % (pooled_height * pooled_width);
  return {bin / pooled_width, bin % pooled_width};
}

// The divisor of ps_roi_align's bin means: the grid's size, without roi_align's floor at 1, so
// an empty adaptive grid gives 0 / 0 = NaN, as torchvision.
template <typename T>
PF_HOST_DEVICE_INLINE T ps_align_count(const RoiAlignBox<T>& box) {
  return static_cast<T>(box.grid_h * box.grid_w);
}

// One bin of a ps_roi_pool roi: [h0, h1) x [w0, w1) after clipping.
struct PsPoolBin {
  int64_t h0, h1, w0, w1;
  PF_HOST_DEVICE_INLINE bool empty() const { return h1 <= h0 || w1 <= w0; }
  PF_HOST_DEVICE_INLINE int64_t area() const { return (h1 - h0) * (w1 - w0); }
};

// A ps_roi_pool roi quantized to the feature map (roi size at least 1 x 1, no +1 unlike
// roi_pool), and its bins. torchvision's forward clips bins to [0, H - 1) x [0, W - 1), so the
// last row and column are never pooled, while its backward clips to [0, H) x [0, W) and rounds
// in float: both kept (the callers pass the clip and the rounding).
template <typename T>
struct PsPoolRoi {
  int64_t start_h, start_w;
  T bin_h, bin_w;

  PF_HOST_DEVICE_INLINE PsPoolRoi(const T* roi, T scale, int64_t pooled_height, int64_t pooled_width,
                                  bool round_in_float) {
    start_w = static_cast<int64_t>(rounded_coordinate(roi[1], scale, round_in_float));
    start_h = static_cast<int64_t>(rounded_coordinate(roi[2], scale, round_in_float));
    const int64_t end_w = static_cast<int64_t>(rounded_coordinate(roi[3], scale, round_in_float));
    const int64_t end_h = static_cast<int64_t>(rounded_coordinate(roi[4], scale, round_in_float));
    bin_h = static_cast<T>(max_<int64_t>(end_h - start_h, 1)) / static_cast<T>(pooled_height);
    bin_w = static_cast<T>(max_<int64_t>(end_w - start_w, 1)) / static_cast<T>(pooled_width);
  }
  PF_HOST_DEVICE_INLINE static int64_t edge(T v, int64_t start, int64_t clip) {
    return min_(max_<int64_t>(static_cast<int64_t>(v) + start, 0), clip);
  }
  PF_HOST_DEVICE_INLINE PsPoolBin bin(int64_t ph, int64_t pw, int64_t clip_h, int64_t clip_w) const {
    return {edge(floor_(static_cast<T>(ph) * bin_h), start_h, clip_h),
            edge(ceil_(static_cast<T>(ph + 1) * bin_h), start_h, clip_h),
            edge(floor_(static_cast<T>(pw) * bin_w), start_w, clip_w),
            edge(ceil_(static_cast<T>(pw + 1) * bin_w), start_w, clip_w)};
  }
};

// ps_roi_pool's forward value of bin r of `plane` (row length `width`): the mean, 0 when empty.
template <typename T>
PF_HOST_DEVICE_INLINE T ps_pool_mean(const T* plane, int64_t width, const PsPoolBin& r) {
  T sum = 0;
  for (int64_t h = r.h0; h < r.h1; ++h)
    for (int64_t w = r.w0; w < r.w1; ++w) sum += plane[h * width + w];
  return r.empty() ? T(0) : sum / static_cast<T>(r.area());
}

// ---- deform_conv2d -----------------------------------------------------------------------------------

// The sizes of a deformable convolution: input (N, C, H, W), weight (O, C / groups, kh, kw),
// output (N, O, OH, OW). Its im2col matrix has K = C / groups * kh * kw rows per group and
// P = OH * OW columns; offset (N, 2 * offset_groups * taps, OH, OW) holds (dy, dx) row pairs per
// tap, group-major, mask (N, offset_groups * taps, OH, OW) one row per (offset group, tap).
struct DeformGeometry {
  int64_t C, H, W, O, kh, kw, OH, OW, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, offset_groups;
  bool has_mask;
  PF_HOST_DEVICE_INLINE int64_t taps() const { return kh * kw; }
  PF_HOST_DEVICE_INLINE int64_t P() const { return OH * OW; }
  PF_HOST_DEVICE_INLINE int64_t K() const { return C / groups * taps(); }
  PF_HOST_DEVICE_INLINE int64_t Og() const { return O / groups; }
  PF_HOST_DEVICE_INLINE int64_t channels_per_offset_group() const { return C / offset_groups; }
  // Mask row r = (offset group, tap) of channel c's tap t.
  PF_HOST_DEVICE_INLINE int64_t mask_row(int64_t c, int64_t t) const {
    return c / channels_per_offset_group() * taps() + t;
  }
  // The offset row of dy for mask row r (dx is the next row).
  PF_HOST_DEVICE_INLINE int64_t dy_row(int64_t r) const { return r / taps() * 2 * taps() + 2 * (r % taps()); }
  // Where tap t of output position p samples, displaced by (dy, dx).
  template <typename T>
  PF_HOST_DEVICE_INLINE void position(int64_t t, int64_t p, T dy, T dx, T& y, T& x) const {
    const int64_t i = t / kw, j = t % kw, oh = p / OW, ow = p % OW;
    y = static_cast<T>(oh * stride_h - pad_h + i * dil_h) + dy;
    x = static_cast<T>(ow * stride_w - pad_w + j * dil_w) + dx;
  }
};

// Where one tap of one output position samples (torchvision's bilinear_interpolate and
// get_coordinate_weight): the corner (y_low, x_low), the fractional parts, and which of the four
// corners (y_low x_low, y_low x_high, y_high x_low, y_high x_high: bits 0-3) lie in the image.
// Outside [-1, H) x [-1, W) (NaN included) no corner does. The value itself is interpolated
// only strictly inside (-1, H) x (-1, W), as torchvision's; on the -1 edge the position still
// has a coordinate gradient from the corners inside.
template <typename T>
struct DeformSample {
  int64_t base = 0;  // y_low * W + x_low
  T ly = 0, lx = 0;
  uint8_t corners = 0;
  bool sampled = false;

  DeformSample() = default;
  PF_HOST_DEVICE_INLINE DeformSample(T y, T x, int64_t H, int64_t W) {
    if (!(y >= -1 && y < static_cast<T>(H) && x >= -1 && x < static_cast<T>(W))) return;
    const int64_t yl = static_cast<int64_t>(floor_(y)), xl = static_cast<int64_t>(floor_(x));
    base = yl * W + xl;
    ly = y - static_cast<T>(yl);
    lx = x - static_cast<T>(xl);
    const bool top = yl >= 0, bottom = yl + 1 <= H - 1, left = xl >= 0, right = xl + 1 <= W - 1;
    corners = static_cast<uint8_t>((top && left) | (top && right) << 1 | (bottom && left) << 2 |
                                   (bottom && right) << 3);
    sampled = y > -1 && x > -1;
  }
  // The four corner values of `plane` (row length W; 0 outside the image).
  PF_HOST_DEVICE_INLINE void corner_values(const T* plane, int64_t W, T v[4]) const {
    const int64_t pos[4] = {base, base + 1, base + W, base + W + 1};
    for (int q = 0; q < 4; ++q) v[q] = corners >> q & 1 ? plane[pos[q]] : T(0);
  }
  PF_HOST_DEVICE_INLINE T value(const T* plane, int64_t W) const {
    if (!sampled) return 0;
    T v[4];
    corner_values(plane, W, v);
    const T hy = 1 - ly, hx = 1 - lx;
    return hy * hx * v[0] + hy * lx * v[1] + ly * hx * v[2] + ly * lx * v[3];
  }
  // One channel's share of the offset and mask gradients of this sample, for the column
  // gradient g and the mask value m (1 without a mask): the slopes of the value in y and x times
  // m * g into gy and gx, and (with a mask) g times the value into gm.
  PF_HOST_DEVICE_INLINE void add_coordinate_grads(const T* plane, int64_t W, T m, T g, bool has_mask, T& gy, T& gx,
                                                  T& gm) const {
    if (!corners) return;
    T v[4];
    corner_values(plane, W, v);
    const T dy_weight = lx * (v[3] - v[1]) + (1 - lx) * (v[2] - v[0]);
    const T dx_weight = ly * (v[3] - v[2]) + (1 - ly) * (v[1] - v[0]);
    gy += m * dy_weight * g;
    gx += m * dx_weight * g;
    if (has_mask) gm += g * value(plane, W);
  }
  // The adjoint of value() times m: adds m * weight * g to each corner inside the image through
  // add(pointer, value).
  template <typename Add>
  PF_HOST_DEVICE_INLINE void scatter(T* plane, int64_t W, T m, T g, Add add) const {
    if (!sampled) return;
    const T hy = 1 - ly, hx = 1 - lx;
    const T w[4] = {hy * hx, hy * lx, ly * hx, ly * lx};
    const int64_t pos[4] = {base, base + 1, base + W, base + W + 1};
    for (int q = 0; q < 4; ++q)
      if (corners >> q & 1) add(plane + pos[q], m * w[q] * g);
  }
};

// Tap t of output position p of one image: its sample, from the image's offset (2 * mask rows
// x P values).
template <typename T>
PF_HOST_DEVICE_INLINE DeformSample<T> deform_sample(const DeformGeometry& g, const T* offset, int64_t r, int64_t p) {
  const T* dy = offset + g.dy_row(r) * g.P();
  T y, x;
  g.position(r % g.taps(), p, dy[p], dy[g.P() + p], y, x);
  return DeformSample<T>(y, x, g.H, g.W);
}

}  // namespace plugflow::roi_math
