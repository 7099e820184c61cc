// The index and coefficient formulas of the nn kernels (norms, pooling, upsampling, cubic
// interpolation, dropout) that the CPU and CUDA plugins share, written once so that both
// devices sample the same positions, pick the same windows and keep the same dropout elements
// (docs/kernels.md, "Norm family" and "Conv family"). The formulas are PyTorch 1.13's (ATen's
// Pool.h, AdaptivePooling.h, UpSample.h, Normalization.cpp), including its float rounding of
// scales.
//
// Every function is __host__ __device__ under nvcc and plain inline under g++ (as
// scalar_math.h); tests/cpp/common/test_nn_math.cpp tests them on the CPU.
#pragma once
#include <cstdint>

#include "scalar_math.h"

namespace plugflow::nn_math {

// ---- norms ----------------------------------------------------------------------------------

// The shift for shifted sums (s1 = sum(x - shift), s2 = sum((x - shift)^2)): a slice's first
// element, unless it is infinite or NaN (then x - shift would turn an infinite mean into NaN;
// PyTorch's mean of -inf values is -inf).
PF_HOST_DEVICE_INLINE double assumed_mean(double first) {
  return first - first == 0.0 ? first : 0.0;  // x - x is 0 exactly for finite x, NaN otherwise
}

// Mean and biased variance from shifted sums over `count` elements. A NaN variance stays NaN
// (the running variance of a NaN batch is NaN in PyTorch); rounding below zero is clamped.
PF_HOST_DEVICE_INLINE void moments(double s1, double s2, double shift, int64_t count, double& mean, double& var) {
  const double m1 = s1 / static_cast<double>(count);
  mean = shift + m1;
  var = s2 / static_cast<double>(count) - m1 * m1;
  if (var < 0) var = 0;
}

// A mean as T's nearest value plus the rounding remainder: (x - hi) - lo is x - mean to T's
// precision (T float or double).
template <typename T>
struct SplitMean {
  T hi, lo;
  SplitMean() = default;
  PF_HOST_DEVICE_INLINE explicit SplitMean(double mean)
      : hi(static_cast<T>(mean)), lo(static_cast<T>(mean - static_cast<double>(hi))) {}
  PF_HOST_DEVICE_INLINE T centre(T x) const { return (x - hi) - lo; }
};

// batch_norm_backward per channel: grad_x = g * a + (x - mean) * b + c, from w, invstd, the
// channel's sum(g) and sum(g * (x - mean)) over `count` elements; in eval mode b = c = 0.
struct BatchNormGradCoefs {
  double a, b, c;
};
PF_HOST_DEVICE_INLINE BatchNormGradCoefs batch_norm_grad_coefs(bool training, double w, double invstd, double sum_g,
                                                               double dot, int64_t count) {
  const double a = w * invstd;
  if (!training) return {a, 0.0, 0.0};
  return {a, -a * invstd * invstd * dot / static_cast<double>(count), -a * sum_g / static_cast<double>(count)};
}

// The running statistics' update r = (1 - momentum) r + momentum stat, with the unbiased
// variance var * count / (count - 1), as PyTorch.
PF_HOST_DEVICE_INLINE double running_mean_update(double running, double mean, double momentum) {
  return momentum * mean + (1 - momentum) * running;
}
PF_HOST_DEVICE_INLINE double running_var_update(double running, double var, int64_t count, double momentum) {
  const double unbiased = var * static_cast<double>(count) / static_cast<double>(count - 1);
  return momentum * unbiased + (1 - momentum) * running;
}

// ---- dropout --------------------------------------------------------------------------------

// Element i is kept when the top 24 bits k of its Philox word satisfy k < ceil((1 - p) 2^24),
// i.e. u = k / 2^24 < 1 - p: p = 0 keeps everything, p = 1 nothing. Host only (the caller
// passes the threshold to the kernel).
inline uint32_t dropout_threshold(double p) {
  const double t = (1.0 - p) * 16777216.0;
  const auto whole = static_cast<uint32_t>(t);
  return static_cast<double>(whole) < t ? whole + 1 : whole;  // ceil, exact for t in [0, 2^24]
}
PF_HOST_DEVICE_INLINE bool dropout_keeps(uint32_t philox_word, uint32_t threshold) {
  return (philox_word >> 8) < threshold;
}

// ---- pooling --------------------------------------------------------------------------------

// PyTorch's adaptive window of output o along a dim: [floor(o * in / out), ceil((o + 1) * in / out)).
PF_HOST_DEVICE_INLINE int64_t adaptive_start(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
PF_HOST_DEVICE_INLINE int64_t adaptive_end(int64_t o, int64_t out, int64_t in) {
  return ((o + 1) * in + out - 1) / out;
}

// Max pooling's index for a window without an element above -inf: per dim, the window's first
// tap at or after 0 (a window starting at `start` with taps `dilation` apart).
PF_HOST_DEVICE_INLINE int64_t max_pool_first_tap(int64_t start, int64_t dilation) {
  return start >= 0 ? start : start + (-start + dilation - 1) / dilation * dilation;
}

// An average pooling window clipped to the input, per dim (depth, height, width), and its divisor.
struct AvgWindow {
  int64_t lo[3], hi[3], divisor;
  PF_HOST_DEVICE_INLINE bool empty() const { return lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2]; }
};

// PyTorch's avg_pool2d/3d rules: window [o * s - p, min(o * s - p + k, in + p)) clipped to
// [0, in); the divisor is the override (when nonzero), or the unclipped window's size
// (count_include_pad), or the clipped one's. Dims are (depth, height, width); 2-d pooling has a
// depth of 1 (k = s = 1, p = 0).
struct AvgPoolGeometry {
  int64_t k[3], s[3], p[3];
  int64_t divisor_override;
  bool count_include_pad;
  PF_HOST_DEVICE_INLINE AvgWindow window(int64_t od, int64_t oh, int64_t ow, int64_t D, int64_t H, int64_t W) const {
    const int64_t o[3] = {od, oh, ow}, size[3] = {D, H, W};
    AvgWindow w{};
    int64_t padded = 1, clipped = 1;
    for (int i = 0; i < 3; ++i) {
      w.lo[i] = o[i] * s[i] - p[i];
      w.hi[i] = w.lo[i] + k[i] < size[i] + p[i] ? w.lo[i] + k[i] : size[i] + p[i];
      padded *= w.hi[i] - w.lo[i];
      if (w.lo[i] < 0) w.lo[i] = 0;
      if (w.hi[i] > size[i]) w.hi[i] = size[i];
      clipped *= w.hi[i] - w.lo[i];
    }
    w.divisor = divisor_override ? divisor_override : (count_include_pad ? padded : clipped);
    return w;
  }
};

// ---- upsampling -----------------------------------------------------------------------------

// PyTorch's compute_scales_value: 1/scale when the user gave a scale (> 0), else in/out, in A.
template <typename A>
PF_HOST_DEVICE_INLINE A source_scale(double user_scale, int64_t in, int64_t out) {
  return user_scale > 0 ? static_cast<A>(1.0 / user_scale) : static_cast<A>(in) / static_cast<A>(out);
}

// PyTorch's nearest source index, min(floor(o * scale), in - 1), computed in float as ATen does
// so that indices match exactly. (ATen's channels-last kernel and its backward special-case
// out == in and out == 2 in, which differs only for a given scale that does not produce those
// sizes; plugflow follows the formula both ways, so forward and backward stay adjoint.)
PF_HOST_DEVICE_INLINE int64_t nearest_index(int64_t o, int64_t in, int64_t out, double user_scale) {
  const float scale = source_scale<float>(user_scale, in, out);
  const auto i = static_cast<int64_t>(scalar_math::floor(static_cast<float>(o) * scale));
  return i < in - 1 ? i : in - 1;
}

// Linear interpolation taps of output o along a dim: out[o] = w0 * in[i0] + w1 * in[i1], in T.
template <typename T>
struct LinearTap {
  int64_t i0, i1;
  T w0, w1;
};
template <typename T>
PF_HOST_DEVICE_INLINE LinearTap<T> linear_tap(int64_t o, int64_t in, int64_t out, bool align_corners,
                                              double user_scale) {
  const T scale = align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                                : source_scale<T>(user_scale, in, out);
  T src = align_corners ? scale * static_cast<T>(o) : scale * (static_cast<T>(o) + T(0.5)) - T(0.5);
  if (src < 0) src = 0;
  const auto f = static_cast<int64_t>(scalar_math::floor(src));
  const int64_t i = f < in - 1 ? f : in - 1;
  T lambda = src - static_cast<T>(i);
  lambda = lambda < T(0) ? T(0) : lambda > T(1) ? T(1) : lambda;
  return {i, i + (i < in - 1 ? 1 : 0), T(1) - lambda, lambda};
}

// ---- cubic convolution (A = -0.75) ---------------------------------------------------------------
// ATen's cubic_convolution1/2: the kernel's weight at distance x from a tap, for x <= 1 (near)
// and 1 < x < 2 (far). Shared by grid_sample's and upsample_bicubic2d's bicubic modes.
template <typename T>
PF_HOST_DEVICE_INLINE T cubic_near(T x) {
  const T A = T(-0.75);
  return ((A + T(2)) * x - (A + T(3))) * x * x + T(1);
}
template <typename T>
PF_HOST_DEVICE_INLINE T cubic_far(T x) {
  const T A = T(-0.75);
  return ((A * x - T(5) * A) * x + T(8) * A) * x - T(4) * A;
}

// Cubic interpolation taps of output o along a dim: out[o] = sum_j w[j] * in[i[j]], taps at
// floor(src) - 1 .. floor(src) + 2 clamped to [0, in - 1] (PyTorch's border-clamped access).
template <typename T>
struct CubicTap {
  int64_t i[4];
  T w[4];
};
// As upsample_bicubic2d computes them: src as for linear_tap but never clipped at 0, its floor
// taken in float (ATen's floorf, also for double), and the far weight of the last tap from
// (1 - t) + 1, as ATen's get_cubic_upsample_coefficients does (not 2 - t: it rounds apart).
template <typename T>
PF_HOST_DEVICE_INLINE CubicTap<T> cubic_tap(int64_t o, int64_t in, int64_t out, bool align_corners,
                                            double user_scale) {
  const T scale = align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                                : source_scale<T>(user_scale, in, out);
  const T src = align_corners ? scale * static_cast<T>(o) : scale * (static_cast<T>(o) + T(0.5)) - T(0.5);
  const auto f = static_cast<int64_t>(scalar_math::floor(static_cast<float>(src)));
  const T t = src - static_cast<T>(f), u = T(1) - t;
  CubicTap<T> tap{{}, {cubic_far(t + T(1)), cubic_near(t), cubic_near(u), cubic_far(u + T(1))}};
  for (int j = 0; j < 4; ++j) {
    const int64_t k = f - 1 + j;
    tap.i[j] = k < 0 ? 0 : k > in - 1 ? in - 1 : k;
  }
  return tap;
}

// sum_j v[j] * w[j] for the values v[j] at the taps i[j], added left to right: one pass of
// upsample_bicubic2d's separable sums (along W, then along H over the row sums), in the order
// both plugins add.
template <typename T>
PF_HOST_DEVICE_INLINE T cubic_sum(const CubicTap<T>& tap, const T (&v)[4]) {
  return v[0] * tap.w[0] + v[1] * tap.w[1] + v[2] * tap.w[2] + v[3] * tap.w[3];
}

}  // namespace plugflow::nn_math
