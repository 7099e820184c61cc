// The arithmetic of grid_sampler_2d/3d and their backwards (docs/kernels.md, "Grid sampling")
// that the CPU and CUDA plugins share: coordinate unnormalizing, padding (border clipping,
// reflection), the bilinear / nearest / bicubic taps and the per-position forward and backward
// of one output position over all channels. The CPU plugin (plugins/cpu/src/grid_sample.cpp)
// and the CUDA plugin (plugins/cuda/src/grid_sample.cu) only add the loops, the threads and the
// memory layout; the CUDA plugin accumulates the input gradient with atomicAdd through the
// `Add` parameter of the backward functions.
//
// The arithmetic is PyTorch 1.13's CPU kernels', step for step:
//   * 2-d follows ATen's vectorized kernel (GridSamplerKernel.cpp): unnormalize as
//     (g + 1) * scale (- 0.5), clip with max(x, 0) taking NaN to 0, reflection by trunc, and
//     float -> integer conversion as the vector instruction does it (NaN and out-of-range values
//     give the integer's minimum: an index no bounds test accepts). Masked-out taps read 0 but
//     their weights still multiply, so a NaN or infinite coordinate makes a bilinear or bicubic
//     output NaN under zeros padding, as in PyTorch.
//   * 3-d follows ATen's scalar kernel (GridSampler.cpp/.h): unnormalize as ((g + 1) / 2) *
//     (size - 1) or ((g + 1) * size - 1) / 2, std::min/std::max clipping (a NaN coordinate goes
//     to the last index), reflection by fmod, nearest by round half away from zero (2-d rounds
//     half to even), and out-of-bounds taps skipped.
//   PyTorch's AVX2 build fuses multiply-adds; where that decides a pixel (unnormalizing,
//   reflecting) this code fuses them too (an explicit fma), elsewhere not: the CUDA file is
//   compiled without FMA contraction so that its products and sums round as the CPU's.
//   PyTorch's 2-d backward with a NaN (or, for reflection, infinite) coordinate under border or
//   reflection padding reads and writes out of bounds; here it uses the forward's clipped
//   coordinate (0) with a zero gradient for that coordinate instead.
//
// Every function is __host__ __device__ under nvcc and plain inline under g++ (as
// scalar_math.h); tests/cpp/common/test_grid_sample_math.cpp tests them on the CPU.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "nn_math.h"
#include "scalar_math.h"

namespace plugflow::grid_sample_math {

enum class Mode { Bilinear, Nearest, Bicubic };
enum class Padding { Zeros, Border, Reflection };

// ---- libm on the host and in device code (float and double) ----------------------------------

#ifdef __CUDA_ARCH__
#define PF_GS_LIBM(name) ::name
#else
#define PF_GS_LIBM(name) std::name
#endif
template <typename T>
PF_HOST_DEVICE_INLINE T floor_(T x) { return PF_GS_LIBM(floor)(x); }
template <typename T>
PF_HOST_DEVICE_INLINE T trunc_(T x) { return PF_GS_LIBM(trunc)(x); }
template <typename T>
PF_HOST_DEVICE_INLINE T fabs_(T x) { return PF_GS_LIBM(fabs)(x); }
template <typename T>
PF_HOST_DEVICE_INLINE T fma_(T a, T b, T c) { return PF_GS_LIBM(fma)(a, b, c); }
template <typename T>
PF_HOST_DEVICE_INLINE T fmod_(T a, T b) { return PF_GS_LIBM(fmod)(a, b); }
template <typename T>
PF_HOST_DEVICE_INLINE T round_(T x) { return PF_GS_LIBM(round)(x); }  // half away from zero
template <typename T>
PF_HOST_DEVICE_INLINE T nearbyint_(T x) { return PF_GS_LIBM(nearbyint)(x); }  // half to even
#undef PF_GS_LIBM

// v converted to the integer type I as x86's truncating conversion does it: NaN and values
// outside I's range give I's minimum.
template <typename I, typename T>
PF_HOST_DEVICE_INLINE I to_index(T v) {
  constexpr T limit = static_cast<T>(std::numeric_limits<I>::max()) + T(1);  // 2^31 or 2^63, exact
  return v >= -limit && v < limit ? static_cast<I>(v) : std::numeric_limits<I>::min();
}

// NaN-propagating minimum (ATen's vector minimum).
template <typename T>
PF_HOST_DEVICE_INLINE T nan_min(T a, T b) {
  if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();
  return b < a ? b : a;  // std::min's choice between +0 and -0
}

// ---- 2-d: one spatial dim as ATen's vectorized kernel treats it ------------------------------

template <typename T>
struct VecAxis {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;  // ATen's int_same_size_t
  int64_t size;
  bool align;
  T max_val, scale, low, twice_span;
  bool empty;

  PF_HOST_DEVICE_INLINE VecAxis(int64_t n, bool align_corners)
      : size(n), align(align_corners), max_val(static_cast<T>(n - 1)),
        scale(align_corners ? static_cast<T>(n - 1) / 2 : static_cast<T>(n) / 2),
        low(align_corners ? T(0) : T(-0.5)),
        twice_span(align_corners ? static_cast<T>(n - 1) * 2 : static_cast<T>(n) * 2),
        empty(align_corners ? n <= 1 : n <= 0) {}

  // PyTorch's AVX2 build contracts `(in + 1) * scale - 0.5` into one FMA; the same rounding keeps
  // nearest sampling on the same pixel at half-pixel boundaries.
  PF_HOST_DEVICE_INLINE T unnormalize(T in) const {
    return align ? (in + T(1)) * scale : fma_(in + T(1), scale, T(-0.5));
  }
  // clamp to [0, max_val]; the first step (max(in, 0) with the operands as ATen orders them)
  // takes NaN to 0
  PF_HOST_DEVICE_INLINE T clip(T in) const {
    const T lo = in > T(0) ? in : T(0);
    return lo < max_val ? lo : max_val;
  }
  PF_HOST_DEVICE_INLINE T reflect(T in) const {
    if (align && empty) return T(0);
    const T abs_in = fabs_(in - low);
    const T flips = trunc_(abs_in / twice_span);
    const T extra = fma_(-flips, twice_span, abs_in);  // contracted in PyTorch's build too
    return nan_min(extra, twice_span - extra) + low;
  }
  // A tap position (bicubic) mapped into the input by the padding mode.
  PF_HOST_DEVICE_INLINE T compute_coordinate(T in, Padding p) const {
    if (p == Padding::Border) return clip(in);
    if (p == Padding::Reflection) return clip(reflect(in));
    return in;
  }
  PF_HOST_DEVICE_INLINE T location(T grid, Padding p) const { return compute_coordinate(unnormalize(grid), p); }
  // location() and its derivative in the grid value.
  PF_HOST_DEVICE_INLINE T location_grad(T grid, Padding p, T& grad) const {
    const T u = unnormalize(grid);
    grad = scale;
    if (p == Padding::Zeros) return u;
    T x = u;
    if (p == Padding::Reflection) {
      if (align && empty) {
        grad = T(0);
        return T(0);
      }
      const T in = u - low;
      const bool neg = in < T(0);
      const T abs_in = fabs_(in);
      const T flips = trunc_(abs_in / twice_span);
      const T extra = fma_(-flips, twice_span, abs_in);
      const T reflected = twice_span - extra;
      const bool flip = extra > reflected;
      x = (flip ? reflected : extra) + low;
      if (flip != neg) grad = -grad;
    }
    // inside (0, max_val) the clip passes the gradient; at or beyond a border it is 0
    if (x != x) {  // PyTorch reads out of bounds here; keep the forward's coordinate
      grad = T(0);
      return clip(x);
    }
    if (!(x > T(0) && x < max_val)) grad = T(0);
    return clip(x);
  }
};

// ---- 3-d: one spatial dim as ATen's scalar kernel treats it --------------------------------------

template <typename T>
struct ScalarAxis {
  int64_t size;
  bool align;

  PF_HOST_DEVICE_INLINE T unnormalize(T in, T& grad) const {
    if (align) {
      grad = static_cast<T>(size - 1) / 2;
      return ((in + 1) / 2) * static_cast<T>(size - 1);
    }
    grad = static_cast<T>(size) / 2;
    return ((in + 1) * static_cast<T>(size) - 1) / 2;
  }
  // std::min(size - 1, std::max(in, 0)): a NaN passes std::max and std::min returns the bound.
  PF_HOST_DEVICE_INLINE T clip(T in) const {
    const T max = static_cast<T>(size - 1);
    const T lo = in < T(0) ? T(0) : in;
    return lo < max ? lo : max;
  }
  // The backward's clip keeps a NaN (PyTorch's clip_coordinates_set_grad).
  PF_HOST_DEVICE_INLINE T clip_backward(T in, T& grad) const {
    const T max = static_cast<T>(size - 1);
    if (in <= T(0)) {
      grad = T(0);
      return T(0);
    }
    if (in >= max) {
      grad = T(0);
      return max;
    }
    grad = T(1);
    return in;
  }
  PF_HOST_DEVICE_INLINE T reflect(T in, T& grad) const {
    const int64_t twice_low = align ? 0 : -1, twice_high = align ? 2 * (size - 1) : 2 * size - 1;
    if (twice_low == twice_high) {
      grad = T(0);
      return T(0);
    }
    const T min = static_cast<T>(twice_low) / 2;
    const T span = static_cast<T>(twice_high - twice_low) / 2;
    in = in - min;
    int mult = 1;
    if (in < T(0)) {
      mult = -1;
      in = -in;
    }
    const T extra = fmod_(in, span);
    const int flips = to_index<int32_t>(floor_(in / span));
    if (flips % 2 == 0) {
      grad = static_cast<T>(mult);
      return extra + min;
    }
    grad = static_cast<T>(-mult);
    return span - extra + min;
  }
  // grid_sampler_compute_source_index(_set_grad): the coordinate and its derivative.
  PF_HOST_DEVICE_INLINE T source_index(T grid, Padding p, bool backward, T& grad) const {
    T x = unnormalize(grid, grad), g_clip = T(1), g_refl = T(1);
    if (p == Padding::Border) {
      x = backward ? clip_backward(x, g_clip) : clip(x);
    } else if (p == Padding::Reflection) {
      x = reflect(x, g_refl);
      x = backward ? clip_backward(x, g_clip) : clip(x);
    }
    grad = p == Padding::Zeros ? grad : p == Padding::Border ? grad * g_clip : grad * g_refl * g_clip;
    return x;
  }
};

// ---- 2-d taps ---------------------------------------------------------------------------------------

// The 2-d taps of one output position: offsets into an input plane (strided) and into a dense
// (H, W) gradient plane, the weights, and which taps are valid.
template <typename T>
struct Taps2d {
  static constexpr int kMax = 16;
  int count = 0;
  int64_t offset[kMax], dense[kMax];
  T weight[kMax];
  bool valid[kMax];
};

// PyTorch's cubic convolution coefficients (A = -0.75) and their derivatives in t. The last
// tap's distance is 2 - t here, as in ATen's grid sampler (upsampling's is (1 - t) + 1).
template <typename T>
PF_HOST_DEVICE_INLINE void cubic_coefficients(T (&c)[4], T t) {
  c[0] = nn_math::cubic_far(t + T(1));
  c[1] = nn_math::cubic_near(t);
  c[2] = nn_math::cubic_near(T(1) - t);
  c[3] = nn_math::cubic_far(T(2) - t);
}
template <typename T>
PF_HOST_DEVICE_INLINE void cubic_coefficients_grad(T (&c)[4], T t) {
  const T A = T(-0.75);
  T x = T(-1) - t;
  c[0] = (T(-3) * A * x - T(10) * A) * x - T(8) * A;
  x = T(0) - t;
  c[1] = (T(-3) * (A + T(2)) * x - T(2) * (A + T(3))) * x;
  x = T(1) - t;
  c[2] = (T(3) * (A + T(2)) * x - T(2) * (A + T(3))) * x;
  x = T(2) - t;
  c[3] = (T(3) * A * x - T(10) * A) * x + T(8) * A;
}

// One 2-d call's geometry: the input's height and width, its plane strides, mode and padding.
template <typename T>
struct Sampler2d {
  using I = typename VecAxis<T>::I;
  int64_t H, W;
  VecAxis<T> ax, ay;
  Mode mode;
  Padding padding;
  int64_t sH, sW;  // input strides

  PF_HOST_DEVICE_INLINE Sampler2d(int64_t height, int64_t width, int64_t stride_h, int64_t stride_w, Mode m,
                                  Padding p, bool align)
      : H(height), W(width), ax(width, align), ay(height, align), mode(m), padding(p), sH(stride_h), sW(stride_w) {}

  PF_HOST_DEVICE_INLINE bool must_in_bound() const { return padding != Padding::Zeros; }
  PF_HOST_DEVICE_INLINE void add_tap(Taps2d<T>& t, I ix, I iy, bool valid, T w) const {
    const int k = t.count++;
    t.valid[k] = valid;
    t.offset[k] = valid ? static_cast<int64_t>(iy) * sH + static_cast<int64_t>(ix) * sW : 0;
    t.dense[k] = valid ? static_cast<int64_t>(iy) * W + static_cast<int64_t>(ix) : 0;
    t.weight[k] = w;
  }
  PF_HOST_DEVICE_INLINE bool in_x(I i) const { return i > I(-1) && i < static_cast<I>(W); }
  PF_HOST_DEVICE_INLINE bool in_y(I i) const { return i > I(-1) && i < static_cast<I>(H); }

  // Bilinear: corners nw, ne, sw, se. Also returns the distances (n, s, w, e) the grid
  // gradient needs.
  PF_HOST_DEVICE_INLINE void bilinear(T x, T y, Taps2d<T>& t, T (&dist)[4]) const {
    const T x_w = floor_(x), y_n = floor_(y);
    const T w = x - x_w, e = T(1) - w, n = y - y_n, so = T(1) - n;
    const I ix_w = to_index<I>(x_w), iy_n = to_index<I>(y_n);
    const I ix_e = ix_w + 1, iy_s = iy_n + 1;
    const bool in_bound = must_in_bound();
    const bool w_ok = in_bound || in_x(ix_w), n_ok = in_bound || in_y(iy_n);
    const bool e_ok = in_bound ? ix_e < static_cast<I>(W) : in_x(ix_e);
    const bool s_ok = in_bound ? iy_s < static_cast<I>(H) : in_y(iy_s);
    add_tap(t, ix_w, iy_n, in_bound || (w_ok && n_ok), so * e);
    add_tap(t, ix_e, iy_n, e_ok && n_ok, so * w);
    add_tap(t, ix_w, iy_s, w_ok && s_ok, n * e);
    add_tap(t, ix_e, iy_s, e_ok && s_ok, n * w);
    dist[0] = n;
    dist[1] = so;
    dist[2] = w;
    dist[3] = e;
  }
  PF_HOST_DEVICE_INLINE void nearest(T x, T y, Taps2d<T>& t) const {
    const I ix = to_index<I>(nearbyint_(x)), iy = to_index<I>(nearbyint_(y));
    add_tap(t, ix, iy, must_in_bound() || (in_x(ix) && in_y(iy)), T(1));
  }
  // Bicubic: the tap (xf, yf) mapped by the padding.
  PF_HOST_DEVICE_INLINE void bicubic_tap(Taps2d<T>& t, T xf, T yf) const {
    const I ix = to_index<I>(ax.compute_coordinate(xf, padding)), iy = to_index<I>(ay.compute_coordinate(yf, padding));
    add_tap(t, ix, iy, must_in_bound() || (in_x(ix) && in_y(iy)), T(0));
  }
};

// The forward of one output position: grid values (gx, gy); `img` the image's first channel
// (channel stride sC); writes C values to out[c * oC].
template <typename T>
PF_HOST_DEVICE_INLINE void forward_2d_point(const Sampler2d<T>& sm, T gx, T gy, const T* img, int64_t sC, int64_t C,
                                            T* out, int64_t oC) {
  Taps2d<T> t;
  if (sm.mode == Mode::Bicubic) {
    const T x = sm.ax.unnormalize(gx), y = sm.ay.unnormalize(gy);
    const T x0 = floor_(x), y0 = floor_(y);
    T cx[4], cy[4];
    cubic_coefficients(cx, x - x0);
    cubic_coefficients(cy, y - y0);
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) sm.bicubic_tap(t, x0 + T(-1 + i), y0 + T(-1 + j));
    for (int64_t c = 0; c < C; ++c) {
      const T* plane = img + c * sC;
      T rows[4];
      for (int j = 0; j < 4; ++j) {
        T v[4];
        for (int i = 0; i < 4; ++i) v[i] = t.valid[4 * j + i] ? plane[t.offset[4 * j + i]] : T(0);
        rows[j] = cx[0] * v[0] + cx[1] * v[1] + cx[2] * v[2] + cx[3] * v[3];
      }
      out[c * oC] = cy[0] * rows[0] + cy[1] * rows[1] + cy[2] * rows[2] + cy[3] * rows[3];
    }
    return;
  }
  const T x = sm.ax.location(gx, sm.padding), y = sm.ay.location(gy, sm.padding);
  if (sm.mode == Mode::Nearest) {
    sm.nearest(x, y, t);
    for (int64_t c = 0; c < C; ++c) out[c * oC] = t.valid[0] ? img[c * sC + t.offset[0]] : T(0);
    return;
  }
  T dist[4];
  sm.bilinear(x, y, t, dist);
  for (int64_t c = 0; c < C; ++c) {
    const T* plane = img + c * sC;
    T v[4];
    for (int q = 0; q < 4; ++q) v[q] = t.valid[q] ? plane[t.offset[q]] : T(0);
    out[c * oC] = v[0] * t.weight[0] + v[1] * t.weight[1] + v[2] * t.weight[2] + v[3] * t.weight[3];
  }
}

// The backward of one output position: `go` the grad_output of its first channel (channel
// stride goC), `img` as in the forward; adds the input gradient into gi (a dense (C, H, W)
// block of the image, or null when not wanted) through add(pointer, value), and writes the two
// grid gradients to gg.
template <typename T, typename Add>
PF_HOST_DEVICE_INLINE void backward_2d_point(const Sampler2d<T>& sm, T g0, T g1, const T* go, int64_t goC,
                                             const T* img, int64_t sC, int64_t C, T* gi, T* gg, Add add) {
  const int64_t plane = sm.H * sm.W;
  T gx = T(0), gy = T(0), gx_mult, gy_mult;
  Taps2d<T> t;
  if (sm.mode == Mode::Bicubic) {
    const T x = sm.ax.unnormalize(g0), y = sm.ay.unnormalize(g1);
    gx_mult = sm.ax.scale;
    gy_mult = sm.ay.scale;
    const T x0 = floor_(x), y0 = floor_(y);
    T cx[4], cy[4], dcx[4], dcy[4];
    cubic_coefficients(cx, x - x0);
    cubic_coefficients(cy, y - y0);
    cubic_coefficients_grad(dcx, x - x0);
    cubic_coefficients_grad(dcy, y - y0);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) sm.bicubic_tap(t, x0 + T(-1 + i), y0 + T(-1 + j));
    for (int64_t c = 0; c < C; ++c) {
      const T g = go[c * goC];
      const T* pl = img + c * sC;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const int q = 4 * i + j;
          if (gi && t.valid[q]) add(gi + c * plane + t.dense[q], g * cx[i] * cy[j]);
          const T val = t.valid[q] ? pl[t.offset[q]] : T(0);
          gx = gx - val * g * dcx[i] * cy[j];
          gy = gy - val * g * dcy[j] * cx[i];
        }
    }
  } else {
    const T x = sm.ax.location_grad(g0, sm.padding, gx_mult), y = sm.ay.location_grad(g1, sm.padding, gy_mult);
    if (sm.mode == Mode::Nearest) {
      sm.nearest(x, y, t);
      if (gi && t.valid[0])
        for (int64_t c = 0; c < C; ++c) add(gi + c * plane + t.dense[0], go[c * goC]);
      gg[0] = T(0);
      gg[1] = T(0);
      return;
    }
    T dist[4];  // n, s, w, e
    sm.bilinear(x, y, t, dist);
    for (int64_t c = 0; c < C; ++c) {
      const T g = go[c * goC];
      const T* pl = img + c * sC;
      T v[4];
      for (int q = 0; q < 4; ++q) {
        if (gi && t.valid[q]) add(gi + c * plane + t.dense[q], t.weight[q] * g);
        v[q] = t.valid[q] ? pl[t.offset[q]] : T(0);
      }
      gx = gx + ((v[1] - v[0]) * dist[1] + (v[3] - v[2]) * dist[0]) * g;
      gy = gy + ((v[2] - v[0]) * dist[3] + (v[3] - v[1]) * dist[2]) * g;
    }
  }
  gg[0] = gx * gx_mult;
  gg[1] = gy * gy_mult;
}

// ---- 3-d ------------------------------------------------------------------------------------------

// One 3-d call's geometry: the input's depth, height, width and volume strides, mode, padding.
template <typename T>
struct Sampler3d {
  int64_t D, H, W;
  ScalarAxis<T> ax, ay, az;
  Mode mode;
  Padding padding;
  int64_t sD, sH, sW;

  PF_HOST_DEVICE_INLINE bool within(int64_t d, int64_t h, int64_t w) const {
    return d >= 0 && d < D && h >= 0 && h < H && w >= 0 && w < W;
  }
};

template <typename T>
PF_HOST_DEVICE_INLINE Sampler3d<T> make_sampler_3d(int64_t depth, int64_t height, int64_t width, int64_t stride_d,
                                                   int64_t stride_h, int64_t stride_w, Mode m, Padding p, bool align) {
  return Sampler3d<T>{depth,  height, width, {width, align}, {height, align}, {depth, align}, m, p, stride_d,
                      stride_h, stride_w};
}

// The eight corners of a trilinear sample in PyTorch's order (tnw, tne, tsw, tse, bnw, bne,
// bsw, bse: t/b the lower/upper depth, n/s the lower/upper row, w/e the lower/upper column).
// Each corner's weight is the product of its distances fx, fy, fz to the opposite corner; the
// derivative of the weight in x is -fy * fz for a west corner and +fy * fz for an east one.
template <typename T>
struct Corners3d {
  int64_t d[8], h[8], w[8];
  T fx[8], fy[8], fz[8], weight[8];
  PF_HOST_DEVICE_INLINE static bool east(int k) { return k & 1; }
  PF_HOST_DEVICE_INLINE static bool south(int k) { return k & 2; }
  PF_HOST_DEVICE_INLINE static bool bottom(int k) { return k & 4; }
};

template <typename T>
PF_HOST_DEVICE_INLINE Corners3d<T> corners(T ix, T iy, T iz) {
  Corners3d<T> c;
  const int64_t x0 = to_index<int64_t>(floor_(ix)), y0 = to_index<int64_t>(floor_(iy)),
                z0 = to_index<int64_t>(floor_(iz));
  const T x1 = static_cast<T>(x0 + 1), y1 = static_cast<T>(y0 + 1), z1 = static_cast<T>(z0 + 1);
  const T xw = static_cast<T>(x0), yn = static_cast<T>(y0), zt = static_cast<T>(z0);
  for (int k = 0; k < 8; ++k) {
    const bool e = Corners3d<T>::east(k), so = Corners3d<T>::south(k), b = Corners3d<T>::bottom(k);
    c.w[k] = x0 + e;
    c.h[k] = y0 + so;
    c.d[k] = z0 + b;
    c.fx[k] = e ? ix - xw : x1 - ix;
    c.fy[k] = so ? iy - yn : y1 - iy;
    c.fz[k] = b ? iz - zt : z1 - iz;
    c.weight[k] = c.fx[k] * c.fy[k] * c.fz[k];
  }
  return c;
}

// The forward of one 3-d output position (arguments as forward_2d_point's).
template <typename T>
PF_HOST_DEVICE_INLINE void forward_3d_point(const Sampler3d<T>& sm, const T (&g)[3], const T* img, int64_t sC,
                                            int64_t C, T* out, int64_t oC) {
  T unused;
  const T ix = sm.ax.source_index(g[0], sm.padding, false, unused);
  const T iy = sm.ay.source_index(g[1], sm.padding, false, unused);
  const T iz = sm.az.source_index(g[2], sm.padding, false, unused);
  if (sm.mode == Mode::Nearest) {
    const int64_t x = to_index<int64_t>(round_(ix)), y = to_index<int64_t>(round_(iy)),
                  z = to_index<int64_t>(round_(iz));
    const bool ok = sm.within(z, y, x);
    for (int64_t c = 0; c < C; ++c) out[c * oC] = ok ? img[c * sC + z * sm.sD + y * sm.sH + x * sm.sW] : T(0);
    return;
  }
  const Corners3d<T> cr = corners(ix, iy, iz);
  bool ok[8];
  int64_t off[8];
  for (int q = 0; q < 8; ++q) {
    ok[q] = sm.within(cr.d[q], cr.h[q], cr.w[q]);
    off[q] = ok[q] ? cr.d[q] * sm.sD + cr.h[q] * sm.sH + cr.w[q] * sm.sW : 0;
  }
  for (int64_t c = 0; c < C; ++c) {
    const T* vol = img + c * sC;
    T acc = T(0);
    for (int q = 0; q < 8; ++q)
      if (ok[q]) acc += vol[off[q]] * cr.weight[q];
    out[c * oC] = acc;
  }
}

// The backward of one 3-d output position (arguments as backward_2d_point's; gi a dense
// (C, D, H, W) block, gg three values).
template <typename T, typename Add>
PF_HOST_DEVICE_INLINE void backward_3d_point(const Sampler3d<T>& sm, const T (&g)[3], const T* go, int64_t goC,
                                             const T* img, int64_t sC, int64_t C, T* gi, T* gg, Add add) {
  const int64_t volume = sm.D * sm.H * sm.W;
  T mx, my, mz;
  const T ix = sm.ax.source_index(g[0], sm.padding, true, mx);
  const T iy = sm.ay.source_index(g[1], sm.padding, true, my);
  const T iz = sm.az.source_index(g[2], sm.padding, true, mz);
  if (sm.mode == Mode::Nearest) {
    const int64_t x = to_index<int64_t>(round_(ix)), y = to_index<int64_t>(round_(iy)),
                  z = to_index<int64_t>(round_(iz));
    if (gi && sm.within(z, y, x))
      for (int64_t c = 0; c < C; ++c) add(gi + c * volume + (z * sm.H + y) * sm.W + x, go[c * goC]);
    gg[0] = gg[1] = gg[2] = T(0);
    return;
  }
  const Corners3d<T> cr = corners(ix, iy, iz);
  bool ok[8];
  int64_t off[8], dense[8];
  for (int q = 0; q < 8; ++q) {
    ok[q] = sm.within(cr.d[q], cr.h[q], cr.w[q]);
    off[q] = ok[q] ? cr.d[q] * sm.sD + cr.h[q] * sm.sH + cr.w[q] * sm.sW : 0;
    dense[q] = ok[q] ? (cr.d[q] * sm.H + cr.h[q]) * sm.W + cr.w[q] : 0;
  }
  T gx = T(0), gy = T(0), gz = T(0);
  for (int64_t c = 0; c < C; ++c) {
    const T gc = go[c * goC];
    const T* vol = img + c * sC;
    for (int q = 0; q < 8; ++q) {
      if (!ok[q]) continue;
      if (gi) add(gi + c * volume + dense[q], cr.weight[q] * gc);
      const T v = vol[off[q]];
      const T tx = v * cr.fy[q] * cr.fz[q] * gc, ty = v * cr.fx[q] * cr.fz[q] * gc, tz = v * cr.fx[q] * cr.fy[q] * gc;
      gx = Corners3d<T>::east(q) ? gx + tx : gx - tx;
      gy = Corners3d<T>::south(q) ? gy + ty : gy - ty;
      gz = Corners3d<T>::bottom(q) ? gz + tz : gz - tz;
    }
  }
  gg[0] = mx * gx;
  gg[1] = my * gy;
  gg[2] = mz * gz;
}

}  // namespace plugflow::grid_sample_math
