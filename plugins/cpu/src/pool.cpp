// Pooling and upsampling (docs/kernels.md, "Conv family") for float32/float64: max_pool2d/3d,
// adaptive_max_pool2d/3d, avg_pool2d/3d(+_backward), adaptive_avg_pool2d/3d(+_backward),
// upsample_nearest2d(+_backward), upsample_bilinear2d(+_backward), upsample_bicubic2d(+_backward).
//
// Every op maps each (n, c) plane (volume, in 3-d) on its own, so they run in parallel; inputs
// are read with their strides, outputs are written contiguous (channels-last outputs through
// contiguous temporaries: row_major_outputs.h), except where max pooling, adaptive average
// pooling and the nearest / bilinear upsamplings run their channels-last loops (dense
// channels-last calls: ResNet's stem and global pool). A 2-d op is the 3-d one with a depth of 1,
// so pooling is written once. Backward kernels zero their volume and add into it, so overlapping
// windows accumulate. Index and weight formulas are PyTorch 1.13's (ATen's Pool.h,
// AdaptivePooling.h and UpSample.h), including its float rounding of scales, so sample
// positions agree exactly.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels.h"
#include "loops.h"
#include "nn_math.h"
#include "row_major_outputs.h"

namespace plugflow::cpu {
namespace {

using nn_math::adaptive_end;
using nn_math::adaptive_start;
using nn_math::AvgPoolGeometry;
using nn_math::AvgWindow;

// The spatial sizes of an (N, C, [D,] H, W) tensor, D = 1 for a 4-d one.
struct Extent {
  int64_t D, H, W;
  explicit Extent(const Tensor& t)
      : D(t.dim() == 5 ? t.sizes()[2] : 1), H(t.sizes()[t.dim() - 2]), W(t.sizes()[t.dim() - 1]) {}
  int64_t volume() const { return D * H * W; }
};

// One image volume (a plane when D = 1): its data pointer and strides (elements).
template <typename T>
struct Volume {
  T* data;
  int64_t sd, sh, sw;
  T& at(int64_t d, int64_t h, int64_t w) const { return data[d * sd + h * sh + w * sw]; }
  T& at(int64_t h, int64_t w) const { return data[h * sh + w * sw]; }
};

// Calls f(in_volume, out_volume_index) for every (n, c) volume of `in`, in parallel; `work` is
// the cost of one volume in elements (for the grain).
template <typename T, typename F>
void for_each_volume(const Tensor& in, int64_t work, const F& f) {
  const int64_t r = in.dim();
  const int64_t C = in.sizes()[1], sn = in.strides()[0], sc = in.strides()[1];
  const int64_t sd = r == 5 ? in.strides()[2] : 0, sh = in.strides()[r - 2], sw = in.strides()[r - 1];
  T* base = in.data<T>();
  parallel_for(in.sizes()[0] * C, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, work)),
               [&](int64_t b, int64_t e) {
                 for (int64_t k = b; k < e; ++k) f(Volume<T>{base + (k / C) * sn + (k % C) * sc, sd, sh, sw}, k);
               });
}

// Attribute `name` as (depth, height, width), depth `fill` for a 2-d attribute.
std::array<int64_t, 3> spatial3(const KernelContext& ctx, const char* name, int64_t fill) {
  const Shape& v = ctx.attr<Shape>(name);
  return v.size() == 3 ? std::array<int64_t, 3>{v[0], v[1], v[2]} : std::array<int64_t, 3>{fill, v[0], v[1]};
}

template <template <typename> class Fn>
void dispatch_float(KernelContext& ctx) {
  switch (ctx.input(0).dtype()) {
    case DType::Float32: Fn<float>::run(ctx); break;
    case DType::Float64: Fn<double>::run(ctx); break;
    default: PF_THROW(NotImplementedError, "cpu '", ctx.op.name, "' supports float32 and float64, got ",
                      dtype_name(ctx.input(0).dtype()));
  }
}

// The max of each window and its index (d * H + h) * W + w in the volume; NaN wins (the last NaN
// seen). window(od, oh, ow, in, visit) calls visit(d, h, w) for the window's positions in the
// input and returns the index reported when no element beats -inf: PyTorch's, the window's
// first non-negative tap in each dim (the first valid element, or for a window that lies in the
// padding along some dim, a position past the input there).
template <typename T, typename Window>
void max_pool_volumes(const KernelContext& ctx, const Window& window) {
  const Tensor& x = ctx.input(0);
  const Extent in(x), out(ctx.output(0));
  const int64_t out_volume = out.volume();
  T* values = ctx.output(0).data<T>();
  int64_t* idx = ctx.output(1).data<int64_t>();
  for_each_volume<T>(x, out_volume * 4, [&](const Volume<T>& v, int64_t k) {
    T* o = values + k * out_volume;
    int64_t* id = idx + k * out_volume;
    for (int64_t od = 0; od < out.D; ++od)
      for (int64_t oh = 0; oh < out.H; ++oh)
        for (int64_t ow = 0; ow < out.W; ++ow) {
          T best = -std::numeric_limits<T>::infinity();
          int64_t best_i = -1;
          const int64_t first = window(od, oh, ow, in, [&](int64_t d, int64_t h, int64_t w) {
            const T e = v.at(d, h, w);
            const int64_t i = (d * in.H + h) * in.W + w;
            if (e > best || std::isnan(e)) {
              best = e;
              best_i = i;
            }
          });
          const int64_t o_i = (od * out.H + oh) * out.W + ow;
          o[o_i] = best;
          id[o_i] = best_i < 0 ? first : best_i;
        }
  });
}

using Shape3 = std::array<int64_t, 3>;

// Calls visit(id, ih, iw) for each tap of a max-pool window (kernel k, dilation dil, its first
// tap at `origin`, padding included) that lies inside the input.
template <typename F>
void for_each_window_tap(const Shape3& origin, const Shape3& k, const Shape3& dil, const Extent& in, F&& visit) {
  for (int64_t t = 0; t < k[0]; ++t) {
    const int64_t id = origin[0] + t * dil[0];
    if (id < 0 || id >= in.D) continue;
    for (int64_t i = 0; i < k[1]; ++i) {
      const int64_t ih = origin[1] + i * dil[1];
      if (ih < 0 || ih >= in.H) continue;
      for (int64_t j = 0; j < k[2]; ++j) {
        const int64_t iw = origin[2] + j * dil[2];
        if (iw >= 0 && iw < in.W) visit(id, ih, iw);
      }
    }
  }
}

// The flat index a window without a finite maximum reports: its first tap inside the input.
inline int64_t first_window_tap(const Shape3& origin, const Shape3& dil, const Extent& in) {
  using nn_math::max_pool_first_tap;
  return (max_pool_first_tap(origin[0], dil[0]) * in.H + max_pool_first_tap(origin[1], dil[1])) * in.W +
         max_pool_first_tap(origin[2], dil[2]);
}

template <typename T>
struct MaxPool {
  static void run(const KernelContext& ctx) {
    const auto k = spatial3(ctx, "kernel_size", 1), s = spatial3(ctx, "stride", 1), p = spatial3(ctx, "padding", 0),
               dil = spatial3(ctx, "dilation", 1);
    max_pool_volumes<T>(ctx, [&](int64_t od, int64_t oh, int64_t ow, const Extent& in, const auto& visit) {
      const Shape3 origin{od * s[0] - p[0], oh * s[1] - p[1], ow * s[2] - p[2]};
      for_each_window_tap(origin, k, dil, in, visit);
      return first_window_tap(origin, dil, in);
    });
  }
};

// Folds one input position's C channels (at flat position `pos` of its volume) into the running
// maxima and their indices; NaN wins. The channels-last kernel's whole cost, so compiled for
// AVX-512, AVX2 and the baseline, picked at load time (the blends need more than SSE2).
template <typename T>
inline void max_into_impl(const T* row, T* best, int64_t* best_i, int64_t pos, int64_t C) {
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    const T v = row[c];
    const bool take = v > best[c] || v != v;
    best[c] = take ? v : best[c];
    best_i[c] = take ? pos : best_i[c];
  }
}
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void max_into(
    const float* row, float* best, int64_t* best_i, int64_t pos, int64_t C) {
  max_into_impl(row, best, best_i, pos, C);
}
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void max_into(
    const double* row, double* best, int64_t* best_i, int64_t pos, int64_t C) {
  max_into_impl(row, best, best_i, pos, C);
}

// Max pooling of a dense channels-last input into channels-last values and indices: each output
// position scans its window's rows of C contiguous channels (vectorized over C), with
// max_pool_volumes' rules (NaN wins; a window of -inf reports its first tap).
template <typename T>
struct MaxPoolChannelsLast {
  static void run(const KernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    const Extent in(x), out(ctx.output(0));
    const auto k = spatial3(ctx, "kernel_size", 1), s = spatial3(ctx, "stride", 1), p = spatial3(ctx, "padding", 0),
               dil = spatial3(ctx, "dilation", 1);
    const int64_t C = x.sizes()[1], positions = out.volume();
    const T* src = x.data<T>();
    T* values = ctx.output(0).data<T>();
    int64_t* indices = ctx.output(1).data<int64_t>();
    const int64_t work = C * k[0] * k[1] * k[2];
    parallel_for(x.sizes()[0] * positions, std::max<int64_t>(1, kGrainSize / work), [&](int64_t b, int64_t e) {
      for (int64_t q = b; q < e; ++q) {
        const int64_t n = q / positions, ow = q % out.W, oh = q / out.W % out.H, od = q / (out.W * out.H) % out.D;
        const Shape3 origin{od * s[0] - p[0], oh * s[1] - p[1], ow * s[2] - p[2]};
        T* best = values + q * C;
        int64_t* best_i = indices + q * C;
        std::fill(best, best + C, -std::numeric_limits<T>::infinity());
        std::fill(best_i, best_i + C, first_window_tap(origin, dil, in));
        for_each_window_tap(origin, k, dil, in, [&](int64_t id, int64_t ih, int64_t iw) {
          const int64_t pos = (id * in.H + ih) * in.W + iw;
          max_into(src + (n * in.volume() + pos) * C, best, best_i, pos, C);
        });
      }
    });
  }
};

template <typename T>
struct AdaptiveMaxPool {
  static void run(const KernelContext& ctx) {
    const Extent out(ctx.output(0));
    max_pool_volumes<T>(ctx, [&](int64_t od, int64_t oh, int64_t ow, const Extent& in, const auto& visit) {
      const int64_t d0 = adaptive_start(od, out.D, in.D), h0 = adaptive_start(oh, out.H, in.H),
                    w0 = adaptive_start(ow, out.W, in.W);
      for (int64_t id = d0; id < adaptive_end(od, out.D, in.D); ++id)
        for (int64_t ih = h0; ih < adaptive_end(oh, out.H, in.H); ++ih)
          for (int64_t iw = w0; iw < adaptive_end(ow, out.W, in.W); ++iw) visit(id, ih, iw);
      return (d0 * in.H + h0) * in.W + w0;
    });
  }
};

// ---- average pooling ----------------------------------------------------------------------------

// avg_pool2d/3d's attributes as the shared geometry (nn_math.h), a 2-d op's depth 1.
AvgPoolGeometry avg_pool_geometry(const KernelContext& ctx) {
  const auto k = spatial3(ctx, "kernel_size", 1), s = spatial3(ctx, "stride", 1), p = spatial3(ctx, "padding", 0);
  return {{k[0], k[1], k[2]}, {s[0], s[1], s[2]}, {p[0], p[1], p[2]}, ctx.attr<int64_t>("divisor"),
          ctx.attr<bool>("count_include_pad")};
}
int64_t window_size(const AvgPoolGeometry& geo) { return geo.k[0] * geo.k[1] * geo.k[2]; }

// Calls f(output index, window) for every output of a volume of `out` extent.
template <typename F>
void for_each_window(const AvgPoolGeometry& geo, const Extent& in, const Extent& out, const F& f) {
  int64_t i = 0;
  for (int64_t od = 0; od < out.D; ++od)
    for (int64_t oh = 0; oh < out.H; ++oh)
      for (int64_t ow = 0; ow < out.W; ++ow, ++i) f(i, geo.window(od, oh, ow, in.D, in.H, in.W));
}

template <typename T>
struct AvgPool {
  static void run(const KernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    const AvgPoolGeometry geo = avg_pool_geometry(ctx);
    const Extent in(x), out(ctx.output(0));
    T* values = ctx.output(0).data<T>();
    for_each_volume<T>(x, out.volume() * window_size(geo), [&](const Volume<T>& v, int64_t k) {
      T* o = values + k * out.volume();
      for_each_window(geo, in, out, [&](int64_t i, const AvgWindow& win) {
        if (win.empty()) {  // a window entirely in the padding
          o[i] = T(0);
          return;
        }
        T sum = 0;
        for (int64_t d = win.lo[0]; d < win.hi[0]; ++d)
          for (int64_t h = win.lo[1]; h < win.hi[1]; ++h)
            for (int64_t w = win.lo[2]; w < win.hi[2]; ++w) sum += v.at(d, h, w);
        o[i] = sum / static_cast<T>(win.divisor);
      });
    });
  }
};

template <typename T>
struct AvgPoolBackward {
  static void run(const KernelContext& ctx) {
    const Tensor& g = ctx.input(0);
    const AvgPoolGeometry geo = avg_pool_geometry(ctx);
    const Extent in(ctx.output(0)), out(g);
    T* grad_in = ctx.output(0).data<T>();
    for_each_volume<T>(g, in.volume() + out.volume() * window_size(geo), [&](const Volume<T>& go, int64_t k) {
      T* gi = grad_in + k * in.volume();
      std::fill(gi, gi + in.volume(), T(0));
      int64_t i = 0;
      for (int64_t od = 0; od < out.D; ++od)
        for (int64_t oh = 0; oh < out.H; ++oh)
          for (int64_t ow = 0; ow < out.W; ++ow, ++i) {
            const AvgWindow win = geo.window(od, oh, ow, in.D, in.H, in.W);
            const T share = go.at(od, oh, ow) / static_cast<T>(win.divisor);
            for (int64_t d = win.lo[0]; d < win.hi[0]; ++d)
              for (int64_t h = win.lo[1]; h < win.hi[1]; ++h)
                for (int64_t w = win.lo[2]; w < win.hi[2]; ++w) gi[(d * in.H + h) * in.W + w] += share;
          }
    });
  }
};

// The adaptive window of each output along the three dims.
struct AdaptiveWindows {
  std::vector<int64_t> lo[3], hi[3];
  AdaptiveWindows(const Extent& in, const Extent& out) {
    const int64_t i[3] = {in.D, in.H, in.W}, o[3] = {out.D, out.H, out.W};
    for (int d = 0; d < 3; ++d)
      for (int64_t k = 0; k < o[d]; ++k) {
        lo[d].push_back(adaptive_start(k, o[d], i[d]));
        hi[d].push_back(adaptive_end(k, o[d], i[d]));
      }
  }
  int64_t size(int64_t od, int64_t oh, int64_t ow) const {
    return (hi[0][od] - lo[0][od]) * (hi[1][oh] - lo[1][oh]) * (hi[2][ow] - lo[2][ow]);
  }
};

template <typename T>
struct AdaptiveAvgPool {
  static void run(const KernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    const Extent in(x), out(ctx.output(0));
    const AdaptiveWindows win(in, out);
    T* values = ctx.output(0).data<T>();
    for_each_volume<T>(x, in.volume() + out.volume(), [&](const Volume<T>& v, int64_t k) {
      T* o = values + k * out.volume();
      for (int64_t od = 0; od < out.D; ++od)
        for (int64_t oh = 0; oh < out.H; ++oh)
          for (int64_t ow = 0; ow < out.W; ++ow) {
            T sum = 0;
            for (int64_t d = win.lo[0][od]; d < win.hi[0][od]; ++d)
              for (int64_t h = win.lo[1][oh]; h < win.hi[1][oh]; ++h)
                for (int64_t w = win.lo[2][ow]; w < win.hi[2][ow]; ++w) sum += v.at(d, h, w);
            *o++ = sum / static_cast<T>(win.size(od, oh, ow));
          }
    });
  }
};

// Adaptive average pooling of a dense channels-last input into a channels-last output: each
// output position averages its window's rows of C contiguous channels (vectorized over C, where
// the plane-by-plane loop reads with a stride of C).
template <typename T>
struct AdaptiveAvgPoolChannelsLast {
  static void run(const KernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    const Tensor& y = ctx.output(0);
    const Extent in(x), out(y);
    const AdaptiveWindows win(in, out);
    const int64_t C = x.sizes()[1], positions = out.volume();
    const int64_t window = std::max<int64_t>(1, in.volume() / positions);
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    parallel_for(x.sizes()[0] * positions, std::max<int64_t>(1, kGrainSize / (C * window)), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const int64_t n = p / positions, ow = p % out.W, oh = p / out.W % out.H, od = p / (out.W * out.H) % out.D;
        T* o = dst + p * C;
        std::fill(o, o + C, T(0));
        for (int64_t d = win.lo[0][od]; d < win.hi[0][od]; ++d)
          for (int64_t h = win.lo[1][oh]; h < win.hi[1][oh]; ++h)
            for (int64_t w = win.lo[2][ow]; w < win.hi[2][ow]; ++w) {
              const T* row = src + (((n * in.D + d) * in.H + h) * in.W + w) * C;
#pragma omp simd
              for (int64_t c = 0; c < C; ++c) o[c] += row[c];
            }
        const T size = static_cast<T>(win.size(od, oh, ow));
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) o[c] /= size;
      }
    });
  }
};

template <typename T>
struct AdaptiveAvgPoolBackward {
  static void run(const KernelContext& ctx) {
    const Tensor& g = ctx.input(0);
    const Extent in(ctx.output(0)), out(g);
    const AdaptiveWindows win(in, out);
    T* grad_in = ctx.output(0).data<T>();
    for_each_volume<T>(g, in.volume() + out.volume(), [&](const Volume<T>& go, int64_t k) {
      T* gi = grad_in + k * in.volume();
      std::fill(gi, gi + in.volume(), T(0));
      for (int64_t od = 0; od < out.D; ++od)
        for (int64_t oh = 0; oh < out.H; ++oh)
          for (int64_t ow = 0; ow < out.W; ++ow) {
            const T share = go.at(od, oh, ow) / static_cast<T>(win.size(od, oh, ow));
            for (int64_t d = win.lo[0][od]; d < win.hi[0][od]; ++d)
              for (int64_t h = win.lo[1][oh]; h < win.hi[1][oh]; ++h)
                for (int64_t w = win.lo[2][ow]; w < win.hi[2][ow]; ++w) gi[(d * in.H + h) * in.W + w] += share;
          }
    });
  }
};

// ---- upsampling ---------------------------------------------------------------------------------------

// Source rows (or columns) of each output for nearest upsampling.
std::vector<int64_t> nearest_indices(int64_t in, int64_t out, double user_scale) {
  std::vector<int64_t> r(out);
  for (int64_t o = 0; o < out; ++o) r[o] = nn_math::nearest_index(o, in, out, user_scale);
  return r;
}

// Linear interpolation taps per output: out[o] = w0 * in[i0] + w1 * in[i1].
template <typename T>
struct LinearTaps {
  std::vector<int64_t> i0, i1;
  std::vector<T> w0, w1;
};

template <typename T>
LinearTaps<T> linear_taps(int64_t in, int64_t out, bool align_corners, double user_scale) {
  LinearTaps<T> t{std::vector<int64_t>(out), std::vector<int64_t>(out), std::vector<T>(out), std::vector<T>(out)};
  for (int64_t o = 0; o < out; ++o) {
    const auto tap = nn_math::linear_tap<T>(o, in, out, align_corners, user_scale);
    t.i0[o] = tap.i0;
    t.i1[o] = tap.i1;
    t.w0[o] = tap.w0;
    t.w1[o] = tap.w1;
  }
  return t;
}

// Input size (from the input, or for backward ops the attr) and output size of an upsampling.
struct UpsampleSizes {
  int64_t H, W, OH, OW;
  double scale_h, scale_w;
};

UpsampleSizes upsample_sizes(const KernelContext& ctx, bool backward) {
  const Tensor& small = backward ? ctx.output(0) : ctx.input(0);
  const Tensor& large = backward ? ctx.input(0) : ctx.output(0);
  return {small.sizes()[2], small.sizes()[3], large.sizes()[2], large.sizes()[3], ctx.attr<double>("scale_h"),
          ctx.attr<double>("scale_w")};
}

template <typename T>
struct UpsampleNearest {
  static void run(const KernelContext& ctx) {
    const UpsampleSizes s = upsample_sizes(ctx, false);
    const auto ih = nearest_indices(s.H, s.OH, s.scale_h), iw = nearest_indices(s.W, s.OW, s.scale_w);
    T* out = ctx.output(0).data<T>();
    for_each_volume<T>(ctx.input(0), s.OH * s.OW, [&](const Volume<T>& in, int64_t k) {
      T* o = out + k * s.OH * s.OW;
      for (int64_t oh = 0; oh < s.OH; ++oh)
        for (int64_t ow = 0; ow < s.OW; ++ow) o[oh * s.OW + ow] = in.at(ih[oh], iw[ow]);
    });
  }
};

template <typename T>
struct UpsampleNearestBackward {
  static void run(const KernelContext& ctx) {
    const UpsampleSizes s = upsample_sizes(ctx, true);
    const auto ih = nearest_indices(s.H, s.OH, s.scale_h), iw = nearest_indices(s.W, s.OW, s.scale_w);
    T* out = ctx.output(0).data<T>();
    for_each_volume<T>(ctx.input(0), s.H * s.W + s.OH * s.OW, [&](const Volume<T>& go, int64_t k) {
      T* gi = out + k * s.H * s.W;
      std::fill(gi, gi + s.H * s.W, T(0));
      for (int64_t oh = 0; oh < s.OH; ++oh)
        for (int64_t ow = 0; ow < s.OW; ++ow) gi[ih[oh] * s.W + iw[ow]] += go.at(oh, ow);
    });
  }
};

template <typename T>
struct UpsampleBilinear {
  static void run(const KernelContext& ctx) {
    const UpsampleSizes s = upsample_sizes(ctx, false);
    const bool ac = ctx.attr<bool>("align_corners");
    const auto th = linear_taps<T>(s.H, s.OH, ac, s.scale_h), tw = linear_taps<T>(s.W, s.OW, ac, s.scale_w);
    T* out = ctx.output(0).data<T>();
    for_each_volume<T>(ctx.input(0), s.OH * s.OW * 4, [&](const Volume<T>& in, int64_t k) {
      T* o = out + k * s.OH * s.OW;
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        const int64_t h0 = th.i0[oh], h1 = th.i1[oh];
        const T a0 = th.w0[oh], a1 = th.w1[oh];
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const int64_t w0 = tw.i0[ow], w1 = tw.i1[ow];
          o[oh * s.OW + ow] = a0 * (tw.w0[ow] * in.at(h0, w0) + tw.w1[ow] * in.at(h0, w1)) +
                              a1 * (tw.w0[ow] * in.at(h1, w0) + tw.w1[ow] * in.at(h1, w1));
        }
      }
    });
  }
};

// Channels-last forms of the two forwards above (dense channels-last input and output): each
// output position combines its taps' rows of C contiguous channels, with the same sums.
template <typename T>
struct UpsampleNearestChannelsLast {
  static void run(const KernelContext& ctx) {
    const UpsampleSizes s = upsample_sizes(ctx, false);
    const auto ih = nearest_indices(s.H, s.OH, s.scale_h), iw = nearest_indices(s.W, s.OW, s.scale_w);
    const int64_t C = ctx.input(0).sizes()[1];
    const T* in = ctx.input(0).data<T>();
    T* out = ctx.output(0).data<T>();
    const int64_t positions = ctx.input(0).sizes()[0] * s.OH * s.OW;
    parallel_for(positions, std::max<int64_t>(1, kGrainSize / C), [&](int64_t b, int64_t e) {
      for (int64_t q = b; q < e; ++q) {
        const int64_t n = q / (s.OH * s.OW), oh = q / s.OW % s.OH, ow = q % s.OW;
        const T* row = in + ((n * s.H + ih[oh]) * s.W + iw[ow]) * C;
        std::copy(row, row + C, out + q * C);
      }
    });
  }
};

template <typename T>
struct UpsampleBilinearChannelsLast {
  static void run(const KernelContext& ctx) {
    const UpsampleSizes s = upsample_sizes(ctx, false);
    const bool ac = ctx.attr<bool>("align_corners");
    const auto th = linear_taps<T>(s.H, s.OH, ac, s.scale_h), tw = linear_taps<T>(s.W, s.OW, ac, s.scale_w);
    const int64_t C = ctx.input(0).sizes()[1];
    const T* in = ctx.input(0).data<T>();
    T* out = ctx.output(0).data<T>();
    parallel_for(ctx.input(0).sizes()[0] * s.OH * s.OW, std::max<int64_t>(1, kGrainSize / (4 * C)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t q = b; q < e; ++q) {
                     const int64_t n = q / (s.OH * s.OW), oh = q / s.OW % s.OH, ow = q % s.OW;
                     const T a0 = th.w0[oh], a1 = th.w1[oh], b0 = tw.w0[ow], b1 = tw.w1[ow];
                     const T* r0 = in + (n * s.H + th.i0[oh]) * s.W * C;
                     const T* r1 = in + (n * s.H + th.i1[oh]) * s.W * C;
                     const T *p00 = r0 + tw.i0[ow] * C, *p01 = r0 + tw.i1[ow] * C, *p10 = r1 + tw.i0[ow] * C,
                             *p11 = r1 + tw.i1[ow] * C;
                     T* o = out + q * C;
#pragma omp simd
                     for (int64_t c = 0; c < C; ++c)
                       o[c] = a0 * (b0 * p00[c] + b1 * p01[c]) + a1 * (b0 * p10[c] + b1 * p11[c]);
                   }
                 });
  }
};

template <typename T>
struct UpsampleBilinearBackward {
  static void run(const KernelContext& ctx) {
    const UpsampleSizes s = upsample_sizes(ctx, true);
    const bool ac = ctx.attr<bool>("align_corners");
    const auto th = linear_taps<T>(s.H, s.OH, ac, s.scale_h), tw = linear_taps<T>(s.W, s.OW, ac, s.scale_w);
    T* out = ctx.output(0).data<T>();
    for_each_volume<T>(ctx.input(0), s.H * s.W + s.OH * s.OW * 4, [&](const Volume<T>& go, int64_t k) {
      T* gi = out + k * s.H * s.W;
      std::fill(gi, gi + s.H * s.W, T(0));
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        T* r0 = gi + th.i0[oh] * s.W;
        T* r1 = gi + th.i1[oh] * s.W;
        const T a0 = th.w0[oh], a1 = th.w1[oh];
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const T v = go.at(oh, ow);
          const int64_t w0 = tw.i0[ow], w1 = tw.i1[ow];
          r0[w0] += a0 * tw.w0[ow] * v;
          r0[w1] += a0 * tw.w1[ow] * v;
          r1[w0] += a1 * tw.w0[ow] * v;
          r1[w1] += a1 * tw.w1[ow] * v;
        }
      }
    });
  }
};

template <typename T>
std::vector<nn_math::CubicTap<T>> cubic_taps(int64_t in, int64_t out, bool align_corners, double user_scale) {
  std::vector<nn_math::CubicTap<T>> taps(out);
  for (int64_t o = 0; o < out; ++o) taps[o] = nn_math::cubic_tap<T>(o, in, out, align_corners, user_scale);
  return taps;
}

// A thread's buffer of at least n elements, kept between calls (one per plane would be a large
// allocation per plane).
template <typename T>
T* row_buffer(int64_t n) {
  thread_local std::vector<T> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(n);
  return buf.data();
}

// Separable: each input row is first interpolated along W into rows (H, OW), which are then
// combined along H. The sums are PyTorch's, in its order: out = sum_j w_h[j] * (sum_i w_w[i] *
// in[h_j, w_i]) (nn_math::cubic_sum, shared with the CUDA kernel), so values agree with its
// kernel up to its compiler's fused multiply-adds.
template <typename T>
struct UpsampleBicubic {
  static void run(const KernelContext& ctx) {
    const UpsampleSizes s = upsample_sizes(ctx, false);
    const bool ac = ctx.attr<bool>("align_corners");
    const auto th = cubic_taps<T>(s.H, s.OH, ac, s.scale_h), tw = cubic_taps<T>(s.W, s.OW, ac, s.scale_w);
    T* out = ctx.output(0).data<T>();
    for_each_volume<T>(ctx.input(0), (s.H + s.OH) * s.OW * 4, [&](const Volume<T>& in, int64_t k) {
      T* rows = row_buffer<T>(s.H * s.OW);
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const auto& x = tw[ow];
          const T v[4] = {in.at(h, x.i[0]), in.at(h, x.i[1]), in.at(h, x.i[2]), in.at(h, x.i[3])};
          rows[h * s.OW + ow] = nn_math::cubic_sum(x, v);
        }
      T* o = out + k * s.OH * s.OW;
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        const auto& y = th[oh];
        const T *r0 = rows + y.i[0] * s.OW, *r1 = rows + y.i[1] * s.OW, *r2 = rows + y.i[2] * s.OW,
                *r3 = rows + y.i[3] * s.OW;
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const T v[4] = {r0[ow], r1[ow], r2[ow], r3[ow]};
          o[oh * s.OW + ow] = nn_math::cubic_sum(y, v);
        }
      }
    });
  }
};

// The adjoint, separable too: gradients are scattered along H into rows (H, OW), then each row
// along W. (PyTorch scatters each output to its 16 taps; the sums differ by rounding only.)
template <typename T>
struct UpsampleBicubicBackward {
  static void run(const KernelContext& ctx) {
    const UpsampleSizes s = upsample_sizes(ctx, true);
    const bool ac = ctx.attr<bool>("align_corners");
    const auto th = cubic_taps<T>(s.H, s.OH, ac, s.scale_h), tw = cubic_taps<T>(s.W, s.OW, ac, s.scale_w);
    T* out = ctx.output(0).data<T>();
    for_each_volume<T>(ctx.input(0), (s.H + s.OH) * s.OW * 4, [&](const Volume<T>& go, int64_t k) {
      T* rows = row_buffer<T>(s.H * s.OW);
      std::fill(rows, rows + s.H * s.OW, T(0));
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        const auto& y = th[oh];
        for (int j = 0; j < 4; ++j) {
          T* r = rows + y.i[j] * s.OW;
          const T w = y.w[j];
          for (int64_t ow = 0; ow < s.OW; ++ow) r[ow] += go.at(oh, ow) * w;
        }
      }
      T* gi = out + k * s.H * s.W;
      std::fill(gi, gi + s.H * s.W, T(0));
      for (int64_t h = 0; h < s.H; ++h) {
        T* g = gi + h * s.W;
        const T* r = rows + h * s.OW;
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const auto& x = tw[ow];
          for (int i = 0; i < 4; ++i) g[x.i[i]] += r[ow] * x.w[i];
        }
      }
    });
  }
};

}  // namespace

namespace {
// A kernel for outputs in any layout: the loops above write row-major ones.
template <template <typename> class Fn>
void any_layout(KernelContext& ctx) {
  run_with_row_major_outputs(ctx, dispatch_float<Fn>);
}

// Dense channels-last calls run the channels-last loops (vectorized over C); the others the
// plane-by-plane ones.
bool dense_channels_last(const KernelContext& ctx) {
  if (!ctx.input(0).is_contiguous(MemoryFormat::ChannelsLast)) return false;
  for (const Tensor& t : ctx.outputs)
    if (!t.is_contiguous(MemoryFormat::ChannelsLast)) return false;
  return true;
}

template <template <typename> class ChannelsLast, template <typename> class RowMajor>
void either_layout(KernelContext& ctx) {
  if (dense_channels_last(ctx)) dispatch_float<ChannelsLast>(ctx);
  else any_layout<RowMajor>(ctx);
}
}  // namespace

void max_pool_native(KernelContext& ctx) { either_layout<MaxPoolChannelsLast, MaxPool>(ctx); }
void avg_pool_native(KernelContext& ctx) { any_layout<AvgPool>(ctx); }
void avg_pool_backward_native(KernelContext& ctx) { any_layout<AvgPoolBackward>(ctx); }

namespace {
// float16/bfloat16 (autocast runs pooling in its input's type) through float32 copies: sums and
// comparisons in float32, one rounding of the result.
template <KernelFn fn>
void widened(KernelContext& ctx) {
  run_widened(ctx, fn);
}

template <KernelFn fn>
void reg_all(Registrar& reg, const std::string& op) {
  reg.kernel(op, DeviceType::CPU, {DType::Float32, DType::Float64}, fn);
  reg.kernel(op, DeviceType::CPU, {DType::Float16, DType::BFloat16}, widened<fn>);
}
}  // namespace

void register_pool_kernels(Registrar& reg) {
  for (const char* rank : {"2d", "3d"}) {
    const std::string d = rank;
    reg_all<max_pool_native>(reg, "max_pool" + d);
    reg_all<any_layout<AdaptiveMaxPool>>(reg, "adaptive_max_pool" + d);
    reg_all<avg_pool_native>(reg, "avg_pool" + d);
    reg_all<avg_pool_backward_native>(reg, "avg_pool" + d + "_backward");
    reg_all<either_layout<AdaptiveAvgPoolChannelsLast, AdaptiveAvgPool>>(reg, "adaptive_avg_pool" + d);
    reg_all<any_layout<AdaptiveAvgPoolBackward>>(reg, "adaptive_avg_pool" + d + "_backward");
  }
  reg_all<either_layout<UpsampleNearestChannelsLast, UpsampleNearest>>(reg, "upsample_nearest2d");
  reg_all<any_layout<UpsampleNearestBackward>>(reg, "upsample_nearest2d_backward");
  reg_all<either_layout<UpsampleBilinearChannelsLast, UpsampleBilinear>>(reg, "upsample_bilinear2d");
  reg_all<any_layout<UpsampleBilinearBackward>>(reg, "upsample_bilinear2d_backward");
  reg_all<any_layout<UpsampleBicubic>>(reg, "upsample_bicubic2d");
  reg_all<any_layout<UpsampleBicubicBackward>>(reg, "upsample_bicubic2d_backward");
}

}  // namespace plugflow::cpu
