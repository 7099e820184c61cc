// grid_sampler_2d/3d and their backward ops (docs/kernels.md, "Grid sampling") for
// float32/float64.
//
// The arithmetic is PyTorch 1.13's CPU kernels', step for step, so results agree to the last
// bit in the usual case and in its special cases too:
//   * 2-d follows ATen's vectorized kernel (GridSamplerKernel.cpp): unnormalize as
//     (g + 1) * scale (- 0.5), clip with max(x, 0) taking NaN to 0, reflection by trunc, and
//     float -> integer conversion as the vector instruction does it (NaN and out-of-range values
//     give the integer's minimum: an index no bounds test accepts). Masked-out taps read 0 but
//     their weights still multiply, so a NaN or infinite coordinate makes a bilinear or bicubic
//     output NaN under zeros padding, as in PyTorch.
//   * 3-d follows ATen's scalar kernel (GridSampler.cpp/.h): unnormalize as ((g + 1) / 2) *
//     (size - 1) or ((g + 1) * size - 1) / 2, std::min/std::max clipping (a NaN coordinate goes
//     to the last index), reflection by fmod, nearest by std::round (2-d rounds half to even),
//     and out-of-bounds taps skipped.
//   PyTorch's AVX2 build fuses multiply-adds; where that decides a pixel (unnormalizing,
//   reflecting) this code fuses them too, elsewhere results differ from PyTorch's by rounding.
//   PyTorch's 2-d backward with a NaN (or, for reflection, infinite) coordinate under border or
//   reflection padding reads and writes out of bounds; here it uses the forward's clipped
//   coordinate (0) with a zero gradient for that coordinate instead.
//
// Threads: the forward runs output positions of all images in parallel; the backward runs
// images in parallel when it computes the input gradient (each image's gradient is written by
// one thread), else output positions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels.h"
#include "loops.h"
#include "nn_math.h"

namespace plugflow::cpu {
namespace {

enum class Mode { Bilinear, Nearest, Bicubic };
enum class Padding { Zeros, Border, Reflection };

Mode mode_of(const KernelContext& ctx) {
  const std::string& m = ctx.attr<std::string>("mode");
  return m == "nearest" ? Mode::Nearest : m == "bicubic" ? Mode::Bicubic : Mode::Bilinear;
}
Padding padding_of(const KernelContext& ctx) {
  const std::string& p = ctx.attr<std::string>("padding_mode");
  return p == "border" ? Padding::Border : p == "reflection" ? Padding::Reflection : Padding::Zeros;
}

// v converted to the integer type I as x86's truncating conversion does it: NaN and values
// outside I's range give I's minimum.
template <typename I, typename T>
inline I to_index(T v) {
  constexpr T limit = static_cast<T>(std::numeric_limits<I>::max()) + T(1);  // 2^31 or 2^63, exact
  return v >= -limit && v < limit ? static_cast<I>(v) : std::numeric_limits<I>::min();
}

// NaN-propagating minimum (ATen's vector minimum).
template <typename T>
inline T nan_min(T a, T b) {
  return a != a || b != b ? std::numeric_limits<T>::quiet_NaN() : std::min(a, b);
}

// ---- 2-d: one spatial dim as ATen's vectorized kernel treats it ------------------------------

template <typename T>
struct VecAxis {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;  // ATen's int_same_size_t
  int64_t size;
  bool align;
  T max_val, scale, low, twice_span;
  bool empty;

  VecAxis(int64_t n, bool align_corners)
      : size(n), align(align_corners), max_val(static_cast<T>(n - 1)),
        scale(align_corners ? static_cast<T>(n - 1) / 2 : static_cast<T>(n) / 2),
        low(align_corners ? T(0) : T(-0.5)),
        twice_span(align_corners ? static_cast<T>(n - 1) * 2 : static_cast<T>(n) * 2),
        empty(align_corners ? n <= 1 : n <= 0) {}

  // PyTorch's AVX2 build contracts `(in + 1) * scale - 0.5` into one FMA; the same rounding keeps
  // nearest sampling on the same pixel at half-pixel boundaries.
  T unnormalize(T in) const { return align ? (in + T(1)) * scale : std::fma(in + T(1), scale, T(-0.5)); }
  // clamp to [0, max_val]; the first step (max(in, 0) with the operands as ATen orders them)
  // takes NaN to 0
  T clip(T in) const {
    const T lo = in > T(0) ? in : T(0);
    return lo < max_val ? lo : max_val;
  }
  T reflect(T in) const {
    if (align && empty) return T(0);
    const T abs_in = std::abs(in - low);
    const T flips = std::trunc(abs_in / twice_span);
    const T extra = std::fma(-flips, twice_span, abs_in);  // contracted in PyTorch's build too
    return nan_min(extra, twice_span - extra) + low;
  }
  // A tap position (bicubic) mapped into the input by the padding mode.
  T compute_coordinate(T in, Padding p) const {
    if (p == Padding::Border) return clip(in);
    if (p == Padding::Reflection) return clip(reflect(in));
    return in;
  }
  T location(T grid, Padding p) const { return compute_coordinate(unnormalize(grid), p); }
  // location() and its derivative in the grid value.
  T location_grad(T grid, Padding p, T& grad) const {
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
      const T abs_in = std::abs(in);
      const T flips = std::trunc(abs_in / twice_span);
      const T extra = std::fma(-flips, twice_span, abs_in);
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

  T unnormalize(T in, T& grad) const {
    if (align) {
      grad = static_cast<T>(size - 1) / 2;
      return ((in + 1) / 2) * static_cast<T>(size - 1);
    }
    grad = static_cast<T>(size) / 2;
    return ((in + 1) * static_cast<T>(size) - 1) / 2;
  }
  // std::min(size - 1, std::max(in, 0)): a NaN passes std::max and std::min returns the bound.
  T clip(T in) const {
    const T max = static_cast<T>(size - 1);
    const T lo = in < T(0) ? T(0) : in;
    return lo < max ? lo : max;
  }
  // The backward's clip keeps a NaN (PyTorch's clip_coordinates_set_grad).
  T clip_backward(T in, T& grad) const {
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
  T reflect(T in, T& grad) const {
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
    const T extra = std::fmod(in, span);
    const int flips = to_index<int32_t>(std::floor(in / span));
    if (flips % 2 == 0) {
      grad = static_cast<T>(mult);
      return extra + min;
    }
    grad = static_cast<T>(-mult);
    return span - extra + min;
  }
  // grid_sampler_compute_source_index(_set_grad): the coordinate and its derivative.
  T source_index(T grid, Padding p, bool backward, T& grad) const {
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

// ---- operands ----------------------------------------------------------------------------------------

// A tensor's data and element strides, for the layouts below.
template <typename T>
struct View {
  T* data;
  const int64_t* stride;
  explicit View(const Tensor& t) : data(t.data<T>()), stride(t.strides().data()) {}
};

// Sizes of one call: N, C, input spatial (D = 1 in 2-d) and output positions P.
struct Sizes {
  int64_t N, C, D, H, W, OD, OH, OW;
  int64_t P() const { return OD * OH * OW; }
};

Sizes sizes_of(const Tensor& input, const Tensor& grid) {
  const bool three = input.dim() == 5;
  const Shape& in = input.sizes();
  const Shape& g = grid.sizes();
  return three ? Sizes{in[0], in[1], in[2], in[3], in[4], g[1], g[2], g[3]}
               : Sizes{in[0], in[1], 1, in[2], in[3], 1, g[1], g[2]};
}

// The grid coordinates of output position p (row-major over the output dims) of image n.
template <typename T, int S>
inline void grid_at(const View<T>& grid, const Sizes& s, int64_t n, int64_t p, T (&xyz)[S]) {
  const int64_t ow = p % s.OW, oh = (p / s.OW) % s.OH, od = p / (s.OW * s.OH);
  const T* g = grid.data + n * grid.stride[0];
  if constexpr (S == 2) {
    g += oh * grid.stride[1] + ow * grid.stride[2];
    xyz[0] = g[0];
    xyz[1] = g[grid.stride[3]];
  } else {
    g += od * grid.stride[1] + oh * grid.stride[2] + ow * grid.stride[3];
    xyz[0] = g[0];
    xyz[1] = g[grid.stride[4]];
    xyz[2] = g[2 * grid.stride[4]];
  }
}

// Offset (elements) of output position p in channel c of image n of a strided (N, C, spatial)
// tensor such as grad_output.
template <typename T, int S>
inline int64_t spatial_offset(const View<T>& t, const Sizes& s, int64_t n, int64_t c, int64_t p) {
  const int64_t ow = p % s.OW, oh = (p / s.OW) % s.OH, od = p / (s.OW * s.OH);
  int64_t off = n * t.stride[0] + c * t.stride[1];
  if constexpr (S == 2) off += oh * t.stride[2] + ow * t.stride[3];
  else off += od * t.stride[2] + oh * t.stride[3] + ow * t.stride[4];
  return off;
}

// ---- 2-d interpolation ------------------------------------------------------------------------------

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

template <typename T>
struct Sampler2d {
  using I = typename VecAxis<T>::I;
  const Sizes& s;
  VecAxis<T> ax, ay;
  Mode mode;
  Padding padding;
  int64_t sH, sW;  // input strides

  Sampler2d(const Sizes& sizes, const Tensor& input, Mode m, Padding p, bool align)
      : s(sizes), ax(sizes.W, align), ay(sizes.H, align), mode(m), padding(p), sH(input.strides()[2]),
        sW(input.strides()[3]) {}

  bool must_in_bound() const { return padding != Padding::Zeros; }
  void add_tap(Taps2d<T>& t, I ix, I iy, bool valid, T w) const {
    const int k = t.count++;
    t.valid[k] = valid;
    t.offset[k] = valid ? static_cast<int64_t>(iy) * sH + static_cast<int64_t>(ix) * sW : 0;
    t.dense[k] = valid ? static_cast<int64_t>(iy) * s.W + static_cast<int64_t>(ix) : 0;
    t.weight[k] = w;
  }
  bool in_x(I i) const { return i > I(-1) && i < static_cast<I>(s.W); }
  bool in_y(I i) const { return i > I(-1) && i < static_cast<I>(s.H); }

  // Bilinear: corners nw, ne, sw, se. Also returns the distances (n, s, w, e) the grid
  // gradient needs.
  void bilinear(T x, T y, Taps2d<T>& t, T (&dist)[4]) const {
    const T x_w = std::floor(x), y_n = std::floor(y);
    const T w = x - x_w, e = T(1) - w, n = y - y_n, so = T(1) - n;
    const I ix_w = to_index<I>(x_w), iy_n = to_index<I>(y_n);
    const I ix_e = ix_w + 1, iy_s = iy_n + 1;
    const bool in_bound = must_in_bound();
    const bool w_ok = in_bound || in_x(ix_w), n_ok = in_bound || in_y(iy_n);
    const bool e_ok = in_bound ? ix_e < static_cast<I>(s.W) : in_x(ix_e);
    const bool s_ok = in_bound ? iy_s < static_cast<I>(s.H) : in_y(iy_s);
    add_tap(t, ix_w, iy_n, in_bound || (w_ok && n_ok), so * e);
    add_tap(t, ix_e, iy_n, e_ok && n_ok, so * w);
    add_tap(t, ix_w, iy_s, w_ok && s_ok, n * e);
    add_tap(t, ix_e, iy_s, e_ok && s_ok, n * w);
    dist[0] = n;
    dist[1] = so;
    dist[2] = w;
    dist[3] = e;
  }
  void nearest(T x, T y, Taps2d<T>& t) const {
    const I ix = to_index<I>(std::nearbyint(x)), iy = to_index<I>(std::nearbyint(y));
    add_tap(t, ix, iy, must_in_bound() || (in_x(ix) && in_y(iy)), T(1));
  }
  // Bicubic: taps (x0 - 1 + i, y0 - 1 + j) for j outer, i inner, each mapped by the padding.
  void bicubic_tap(Taps2d<T>& t, T xf, T yf, T w) const {
    const I ix = to_index<I>(ax.compute_coordinate(xf, padding)), iy = to_index<I>(ay.compute_coordinate(yf, padding));
    add_tap(t, ix, iy, must_in_bound() || (in_x(ix) && in_y(iy)), w);
  }
};

// PyTorch's cubic convolution coefficients (A = -0.75) and their derivatives in t. The last
// tap's distance is 2 - t here, as in ATen's grid sampler (upsampling's is (1 - t) + 1).
template <typename T>
inline void cubic_coefficients(T (&c)[4], T t) {
  c[0] = nn_math::cubic_far(t + T(1));
  c[1] = nn_math::cubic_near(t);
  c[2] = nn_math::cubic_near(T(1) - t);
  c[3] = nn_math::cubic_far(T(2) - t);
}
template <typename T>
inline void cubic_coefficients_grad(T (&c)[4], T t) {
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

template <typename T>
void forward_2d(const KernelContext& ctx) {
  const Tensor &input = ctx.input(0), &grid_t = ctx.input(1);
  const Sizes s = sizes_of(input, grid_t);
  const Sampler2d<T> sm(s, input, mode_of(ctx), padding_of(ctx), ctx.attr<bool>("align_corners"));
  const View<T> in(input), grid(grid_t);
  T* out = ctx.output(0).data<T>();
  const int64_t P = s.P();
  parallel_for(s.N * P, std::max<int64_t>(1, kGrainSize / (16 * s.C)), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t n = k / P, p = k % P;
      T g[2];
      grid_at<T, 2>(grid, s, n, p, g);
      const T* img = in.data + n * in.stride[0];
      T* o = out + n * s.C * P + p;
      Taps2d<T> t;
      if (sm.mode == Mode::Bicubic) {
        const T x = sm.ax.unnormalize(g[0]), y = sm.ay.unnormalize(g[1]);
        const T x0 = std::floor(x), y0 = std::floor(y);
        T cx[4], cy[4];
        cubic_coefficients(cx, x - x0);
        cubic_coefficients(cy, y - y0);
        for (int j = 0; j < 4; ++j)
          for (int i = 0; i < 4; ++i) sm.bicubic_tap(t, x0 + T(-1 + i), y0 + T(-1 + j), T(0));
        for (int64_t c = 0; c < s.C; ++c) {
          const T* plane = img + c * in.stride[1];
          T rows[4];
          for (int j = 0; j < 4; ++j) {
            T v[4];
            for (int i = 0; i < 4; ++i) v[i] = t.valid[4 * j + i] ? plane[t.offset[4 * j + i]] : T(0);
            rows[j] = cx[0] * v[0] + cx[1] * v[1] + cx[2] * v[2] + cx[3] * v[3];
          }
          o[c * P] = cy[0] * rows[0] + cy[1] * rows[1] + cy[2] * rows[2] + cy[3] * rows[3];
        }
        continue;
      }
      const T x = sm.ax.location(g[0], sm.padding), y = sm.ay.location(g[1], sm.padding);
      if (sm.mode == Mode::Nearest) {
        sm.nearest(x, y, t);
        for (int64_t c = 0; c < s.C; ++c) o[c * P] = t.valid[0] ? img[c * in.stride[1] + t.offset[0]] : T(0);
        continue;
      }
      T dist[4];
      sm.bilinear(x, y, t, dist);
      for (int64_t c = 0; c < s.C; ++c) {
        const T* plane = img + c * in.stride[1];
        T v[4];
        for (int q = 0; q < 4; ++q) v[q] = t.valid[q] ? plane[t.offset[q]] : T(0);
        o[c * P] = v[0] * t.weight[0] + v[1] * t.weight[1] + v[2] * t.weight[2] + v[3] * t.weight[3];
      }
    }
  });
}

// The backward of image n's output positions [p0, p1): grad_grid always, grad_input (a dense
// (C, H, W) block for image n) when gi is set.
template <typename T>
void backward_2d_range(const Sampler2d<T>& sm, const View<T>& g_out, const View<T>& in, const View<T>& grid, T* gi,
                       T* gg, int64_t n, int64_t p0, int64_t p1) {
  const Sizes& s = sm.s;
  const int64_t plane = s.H * s.W;
  const T* img = in.data + n * in.stride[0];
  for (int64_t p = p0; p < p1; ++p) {
    T g[2];
    grid_at<T, 2>(grid, s, n, p, g);
    T gx = T(0), gy = T(0), gx_mult, gy_mult;
    Taps2d<T> t;
    if (sm.mode == Mode::Bicubic) {
      const T x = sm.ax.unnormalize(g[0]), y = sm.ay.unnormalize(g[1]);
      gx_mult = sm.ax.scale;
      gy_mult = sm.ay.scale;
      const T x0 = std::floor(x), y0 = std::floor(y);
      T cx[4], cy[4], dcx[4], dcy[4];
      cubic_coefficients(cx, x - x0);
      cubic_coefficients(cy, y - y0);
      cubic_coefficients_grad(dcx, x - x0);
      cubic_coefficients_grad(dcy, y - y0);
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) sm.bicubic_tap(t, x0 + T(-1 + i), y0 + T(-1 + j), T(0));
      for (int64_t c = 0; c < s.C; ++c) {
        const T go = g_out.data[spatial_offset<T, 2>(g_out, s, n, c, p)];
        const T* pl = img + c * in.stride[1];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) {
            const int q = 4 * i + j;
            if (gi && t.valid[q]) gi[c * plane + t.dense[q]] += go * cx[i] * cy[j];
            const T val = t.valid[q] ? pl[t.offset[q]] : T(0);
            gx = gx - val * go * dcx[i] * cy[j];
            gy = gy - val * go * dcy[j] * cx[i];
          }
      }
    } else {
      const T x = sm.ax.location_grad(g[0], sm.padding, gx_mult), y = sm.ay.location_grad(g[1], sm.padding, gy_mult);
      if (sm.mode == Mode::Nearest) {
        sm.nearest(x, y, t);
        if (gi && t.valid[0])
          for (int64_t c = 0; c < s.C; ++c)
            gi[c * plane + t.dense[0]] += g_out.data[spatial_offset<T, 2>(g_out, s, n, c, p)];
        gg[2 * (n * s.P() + p)] = T(0);
        gg[2 * (n * s.P() + p) + 1] = T(0);
        continue;
      }
      T dist[4];  // n, s, w, e
      sm.bilinear(x, y, t, dist);
      for (int64_t c = 0; c < s.C; ++c) {
        const T go = g_out.data[spatial_offset<T, 2>(g_out, s, n, c, p)];
        const T* pl = img + c * in.stride[1];
        T v[4];
        for (int q = 0; q < 4; ++q) {
          if (gi && t.valid[q]) gi[c * plane + t.dense[q]] += t.weight[q] * go;
          v[q] = t.valid[q] ? pl[t.offset[q]] : T(0);
        }
        gx = gx + ((v[1] - v[0]) * dist[1] + (v[3] - v[2]) * dist[0]) * go;
        gy = gy + ((v[2] - v[0]) * dist[3] + (v[3] - v[1]) * dist[2]) * go;
      }
    }
    gg[2 * (n * s.P() + p)] = gx * gx_mult;
    gg[2 * (n * s.P() + p) + 1] = gy * gy_mult;
  }
}

// ---- 3-d (scalar semantics) -----------------------------------------------------------------------------

template <typename T>
struct Sampler3d {
  const Sizes& s;
  ScalarAxis<T> ax, ay, az;
  Mode mode;
  Padding padding;
  int64_t sD, sH, sW;

  Sampler3d(const Sizes& sizes, const Tensor& input, Mode m, Padding p, bool align)
      : s(sizes), ax{sizes.W, align}, ay{sizes.H, align}, az{sizes.D, align}, mode(m), padding(p),
        sD(input.strides()[2]), sH(input.strides()[3]), sW(input.strides()[4]) {}

  bool within(int64_t d, int64_t h, int64_t w) const {
    return d >= 0 && d < s.D && h >= 0 && h < s.H && w >= 0 && w < s.W;
  }
};

// The eight corners of a trilinear sample in PyTorch's order (tnw, tne, tsw, tse, bnw, bne,
// bsw, bse: t/b the lower/upper depth, n/s the lower/upper row, w/e the lower/upper column).
// Each corner's weight is the product of its distances fx, fy, fz to the opposite corner; the
// derivative of the weight in x is -fy * fz for a west corner and +fy * fz for an east one.
template <typename T>
struct Corners3d {
  int64_t d[8], h[8], w[8];
  T fx[8], fy[8], fz[8], weight[8];
  static bool east(int k) { return k & 1; }
  static bool south(int k) { return k & 2; }
  static bool bottom(int k) { return k & 4; }
};

template <typename T>
Corners3d<T> corners(T ix, T iy, T iz) {
  Corners3d<T> c;
  const int64_t x0 = to_index<int64_t>(std::floor(ix)), y0 = to_index<int64_t>(std::floor(iy)),
                z0 = to_index<int64_t>(std::floor(iz));
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

template <typename T>
void forward_3d(const KernelContext& ctx) {
  const Tensor &input = ctx.input(0), &grid_t = ctx.input(1);
  const Sizes s = sizes_of(input, grid_t);
  const Sampler3d<T> sm(s, input, mode_of(ctx), padding_of(ctx), ctx.attr<bool>("align_corners"));
  const View<T> in(input), grid(grid_t);
  T* out = ctx.output(0).data<T>();
  const int64_t P = s.P();
  parallel_for(s.N * P, std::max<int64_t>(1, kGrainSize / (16 * s.C)), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t n = k / P, p = k % P;
      T g[3], unused;
      grid_at<T, 3>(grid, s, n, p, g);
      const T ix = sm.ax.source_index(g[0], sm.padding, false, unused);
      const T iy = sm.ay.source_index(g[1], sm.padding, false, unused);
      const T iz = sm.az.source_index(g[2], sm.padding, false, unused);
      const T* img = in.data + n * in.stride[0];
      T* o = out + n * s.C * P + p;
      if (sm.mode == Mode::Nearest) {
        const int64_t x = to_index<int64_t>(std::round(ix)), y = to_index<int64_t>(std::round(iy)),
                      z = to_index<int64_t>(std::round(iz));
        const bool ok = sm.within(z, y, x);
        for (int64_t c = 0; c < s.C; ++c)
          o[c * P] = ok ? img[c * in.stride[1] + z * sm.sD + y * sm.sH + x * sm.sW] : T(0);
        continue;
      }
      const Corners3d<T> cr = corners(ix, iy, iz);
      bool ok[8];
      int64_t off[8];
      for (int q = 0; q < 8; ++q) {
        ok[q] = sm.within(cr.d[q], cr.h[q], cr.w[q]);
        off[q] = ok[q] ? cr.d[q] * sm.sD + cr.h[q] * sm.sH + cr.w[q] * sm.sW : 0;
      }
      for (int64_t c = 0; c < s.C; ++c) {
        const T* vol = img + c * in.stride[1];
        T acc = T(0);
        for (int q = 0; q < 8; ++q)
          if (ok[q]) acc += vol[off[q]] * cr.weight[q];
        o[c * P] = acc;
      }
    }
  });
}

template <typename T>
void backward_3d_range(const Sampler3d<T>& sm, const View<T>& g_out, const View<T>& in, const View<T>& grid, T* gi,
                       T* gg, int64_t n, int64_t p0, int64_t p1) {
  const Sizes& s = sm.s;
  const int64_t volume = s.D * s.H * s.W;
  const T* img = in.data + n * in.stride[0];
  for (int64_t p = p0; p < p1; ++p) {
    T g[3], mx, my, mz;
    grid_at<T, 3>(grid, s, n, p, g);
    const T ix = sm.ax.source_index(g[0], sm.padding, true, mx);
    const T iy = sm.ay.source_index(g[1], sm.padding, true, my);
    const T iz = sm.az.source_index(g[2], sm.padding, true, mz);
    T* gg_p = gg + 3 * (n * s.P() + p);
    if (sm.mode == Mode::Nearest) {
      const int64_t x = to_index<int64_t>(std::round(ix)), y = to_index<int64_t>(std::round(iy)),
                    z = to_index<int64_t>(std::round(iz));
      if (gi && sm.within(z, y, x))
        for (int64_t c = 0; c < s.C; ++c)
          gi[c * volume + (z * s.H + y) * s.W + x] += g_out.data[spatial_offset<T, 3>(g_out, s, n, c, p)];
      gg_p[0] = gg_p[1] = gg_p[2] = T(0);
      continue;
    }
    const Corners3d<T> cr = corners(ix, iy, iz);
    bool ok[8];
    int64_t off[8], dense[8];
    for (int q = 0; q < 8; ++q) {
      ok[q] = sm.within(cr.d[q], cr.h[q], cr.w[q]);
      off[q] = ok[q] ? cr.d[q] * sm.sD + cr.h[q] * sm.sH + cr.w[q] * sm.sW : 0;
      dense[q] = ok[q] ? (cr.d[q] * s.H + cr.h[q]) * s.W + cr.w[q] : 0;
    }
    T gx = T(0), gy = T(0), gz = T(0);
    for (int64_t c = 0; c < s.C; ++c) {
      const T go = g_out.data[spatial_offset<T, 3>(g_out, s, n, c, p)];
      const T* vol = img + c * in.stride[1];
      for (int q = 0; q < 8; ++q) {
        if (!ok[q]) continue;
        if (gi) gi[c * volume + dense[q]] += cr.weight[q] * go;
        const T v = vol[off[q]];
        const T tx = v * cr.fy[q] * cr.fz[q] * go, ty = v * cr.fx[q] * cr.fz[q] * go,
                tz = v * cr.fx[q] * cr.fy[q] * go;
        gx = Corners3d<T>::east(q) ? gx + tx : gx - tx;
        gy = Corners3d<T>::south(q) ? gy + ty : gy - ty;
        gz = Corners3d<T>::bottom(q) ? gz + tz : gz - tz;
      }
    }
    gg_p[0] = mx * gx;
    gg_p[1] = my * gy;
    gg_p[2] = mz * gz;
  }
}

// ---- kernels ------------------------------------------------------------------------------------------

template <typename T, typename Range>
void run_backward(const KernelContext& ctx, const Sizes& s, const Range& range) {
  const bool input_grad = ctx.attr<bool>("input_grad");
  T* gi = input_grad ? ctx.output(0).data<T>() : nullptr;
  const int64_t P = s.P(), image = s.C * s.D * s.H * s.W;
  if (input_grad) {
    // Each image's input gradient is written by one thread.
    parallel_for(s.N, 1, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        std::fill(gi + n * image, gi + (n + 1) * image, T(0));
        range(gi + n * image, n, 0, P);
      }
    });
    return;
  }
  parallel_for(s.N * P, std::max<int64_t>(1, kGrainSize / (16 * s.C)), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e;) {
      const int64_t n = k / P, p = k % P, end = std::min(e - n * P, P);
      range(nullptr, n, p, end);
      k = n * P + end;
    }
  });
}

template <typename T>
void backward_2d(const KernelContext& ctx) {
  const Tensor &g_out = ctx.input(0), &input = ctx.input(1), &grid_t = ctx.input(2);
  const Sizes s = sizes_of(input, grid_t);
  const Sampler2d<T> sm(s, input, mode_of(ctx), padding_of(ctx), ctx.attr<bool>("align_corners"));
  const View<T> go(g_out), in(input), grid(grid_t);
  T* gg = ctx.output(1).data<T>();
  run_backward<T>(ctx, s, [&](T* gi, int64_t n, int64_t p0, int64_t p1) {
    backward_2d_range(sm, go, in, grid, gi, gg, n, p0, p1);
  });
}

template <typename T>
void backward_3d(const KernelContext& ctx) {
  const Tensor &g_out = ctx.input(0), &input = ctx.input(1), &grid_t = ctx.input(2);
  const Sizes s = sizes_of(input, grid_t);
  const Sampler3d<T> sm(s, input, mode_of(ctx), padding_of(ctx), ctx.attr<bool>("align_corners"));
  const View<T> go(g_out), in(input), grid(grid_t);
  T* gg = ctx.output(1).data<T>();
  run_backward<T>(ctx, s, [&](T* gi, int64_t n, int64_t p0, int64_t p1) {
    backward_3d_range(sm, go, in, grid, gi, gg, n, p0, p1);
  });
}

template <void (*F32)(const KernelContext&), void (*F64)(const KernelContext&)>
void dispatch(KernelContext& ctx) {
  for (const Tensor& t : ctx.outputs)
    PF_CHECK_T(t.is_contiguous(), ValueError, "cpu '", ctx.op.name, "' writes contiguous outputs");
  dispatch_float32_64<F32, F64>(ctx);
}

}  // namespace

void register_grid_sample_kernels(Registrar& reg) {
  const auto floats = {DType::Float32, DType::Float64};
  reg.kernel("grid_sampler_2d", DeviceType::CPU, floats, dispatch<forward_2d<float>, forward_2d<double>>);
  reg.kernel("grid_sampler_2d_backward", DeviceType::CPU, floats, dispatch<backward_2d<float>, backward_2d<double>>);
  reg.kernel("grid_sampler_3d", DeviceType::CPU, floats, dispatch<forward_3d<float>, forward_3d<double>>);
  reg.kernel("grid_sampler_3d_backward", DeviceType::CPU, floats, dispatch<backward_3d<float>, backward_3d<double>>);
}

}  // namespace plugflow::cpu
