// Pooling and upsampling (docs/kernels.md, "Conv family") for float32/float64: max_pool2d,
// adaptive_max_pool2d, avg_pool2d(+_backward), adaptive_avg_pool2d(+_backward),
// upsample_nearest2d(+_backward), upsample_bilinear2d(+_backward). The forward poolings also
// take float16/bfloat16 (sums and comparisons in float, one rounding); the other ops run those
// on float32 copies (run_widened), so their accumulations do not round at every add.
//
// Every op maps each (n, c) plane on its own, so planes run in parallel; inputs are read with
// their strides, outputs are contiguous. Backward kernels zero their plane and add into it,
// so overlapping windows accumulate. Index and weight formulas are PyTorch 1.13's (ATen's
// Pool.h, AdaptivePooling.h and UpSample.h), including its float rounding of scales, so
// sample positions agree exactly.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels.h"
#include "loops.h"

namespace plugflow::cpu {
namespace {

// One image plane: its data pointer and strides (elements).
template <typename T>
struct Plane {
  T* data;
  int64_t sh, sw;
  T& at(int64_t h, int64_t w) const { return data[h * sh + w * sw]; }
};

// Calls f(in_plane, out_plane_index) for every (n, c) plane of `in`, planes in parallel;
// `work` is the cost of one plane in elements (for the grain).
template <typename T, typename F>
void for_each_plane(const Tensor& in, int64_t work, const F& f) {
  const int64_t C = in.sizes()[1], sn = in.strides()[0], sc = in.strides()[1];
  T* base = in.data<T>();
  parallel_for(in.sizes()[0] * C, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, work)),
               [&](int64_t b, int64_t e) {
                 for (int64_t k = b; k < e; ++k)
                   f(Plane<T>{base + (k / C) * sn + (k % C) * sc, in.strides()[2], in.strides()[3]}, k);
               });
}

const Shape& pair(const KernelContext& ctx, const char* name) { return ctx.attr<Shape>(name); }

template <template <typename> class Fn>
void dispatch_float(KernelContext& ctx) {
  PF_CHECK_T(ctx.output(0).is_contiguous(), ValueError, "cpu '", ctx.op.name, "' writes a contiguous output");
  switch (ctx.input(0).dtype()) {
    case DType::Float32: Fn<float>::run(ctx); break;
    case DType::Float64: Fn<double>::run(ctx); break;
    case DType::BFloat16: Fn<BFloat16>::run(ctx); break;
    case DType::Float16: Fn<Half>::run(ctx); break;
    default: PF_THROW(NotImplementedError, "cpu '", ctx.op.name, "' supports floating dtypes only, got ",
                      dtype_name(ctx.input(0).dtype()));
  }
}

// The 16-bit dtypes of the ops whose kernels accumulate in T: through float32 copies.
template <template <typename> class Fn>
void dispatch_widened(KernelContext& ctx) {
  const DType dt = ctx.input(0).dtype();
  if (dt == DType::BFloat16 || dt == DType::Float16) run_widened(ctx, dispatch_widened<Fn>);
  else if (dt == DType::Float32) Fn<float>::run(ctx);
  else if (dt == DType::Float64) Fn<double>::run(ctx);
  else PF_THROW(NotImplementedError, "cpu '", ctx.op.name, "' supports floating dtypes only, got ", dtype_name(dt));
}

// The max of each window and its index h * W + w in the plane; NaN wins (the last NaN seen).
// When every element is -inf the index is the window's first valid element, as PyTorch.
template <typename T, typename Window>
void max_pool_planes(const KernelContext& ctx, const Window& window) {
  const Tensor& x = ctx.input(0);
  const int64_t H = x.sizes()[2], W = x.sizes()[3];
  const int64_t OH = ctx.output(0).sizes()[2], OW = ctx.output(0).sizes()[3];
  T* out = ctx.output(0).data<T>();
  int64_t* idx = ctx.output(1).data<int64_t>();
  using A = opmath_t<T>;
  for_each_plane<T>(x, OH * OW * 4, [&](const Plane<T>& in, int64_t k) {
    T* o = out + k * OH * OW;
    int64_t* id = idx + k * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        A best = -std::numeric_limits<A>::infinity();
        int64_t best_i = -1;
        window(oh, ow, H, W, [&](int64_t ih, int64_t iw) {
          const A v = static_cast<A>(in.at(ih, iw));
          if (best_i < 0) best_i = ih * W + iw;
          if (v > best || std::isnan(v)) {
            best = v;
            best_i = ih * W + iw;
          }
        });
        o[oh * OW + ow] = best;
        id[oh * OW + ow] = best_i;
      }
  });
}

// PyTorch's adaptive window of output o: [floor(o * in / out), ceil((o + 1) * in / out)).
inline int64_t adaptive_start(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
inline int64_t adaptive_end(int64_t o, int64_t out, int64_t in) { return ((o + 1) * in + out - 1) / out; }

template <typename T>
struct MaxPool {
  static void run(const KernelContext& ctx) {
    const Shape &k = pair(ctx, "kernel_size"), &s = pair(ctx, "stride"), &p = pair(ctx, "padding"),
                &d = pair(ctx, "dilation");
    max_pool_planes<T>(ctx, [&](int64_t oh, int64_t ow, int64_t H, int64_t W, const auto& visit) {
      const int64_t h0 = oh * s[0] - p[0], w0 = ow * s[1] - p[1];
      for (int64_t i = 0; i < k[0]; ++i) {
        const int64_t ih = h0 + i * d[0];
        if (ih < 0 || ih >= H) continue;
        for (int64_t j = 0; j < k[1]; ++j) {
          const int64_t iw = w0 + j * d[1];
          if (iw >= 0 && iw < W) visit(ih, iw);
        }
      }
    });
  }
};

template <typename T>
struct AdaptiveMaxPool {
  static void run(const KernelContext& ctx) {
    const int64_t OH = ctx.output(0).sizes()[2], OW = ctx.output(0).sizes()[3];
    max_pool_planes<T>(ctx, [&](int64_t oh, int64_t ow, int64_t H, int64_t W, const auto& visit) {
      for (int64_t ih = adaptive_start(oh, OH, H); ih < adaptive_end(oh, OH, H); ++ih)
        for (int64_t iw = adaptive_start(ow, OW, W); iw < adaptive_end(ow, OW, W); ++iw) visit(ih, iw);
    });
  }
};

// ---- average pooling ----------------------------------------------------------------------------

// The clipped window of output (oh, ow) and its divisor (PyTorch's avg_pool2d rules).
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};

struct AvgPoolGeometry {
  int64_t kh, kw, sh, sw, ph, pw, divisor_override;
  bool count_include_pad;
  explicit AvgPoolGeometry(const KernelContext& ctx)
      : kh(pair(ctx, "kernel_size")[0]), kw(pair(ctx, "kernel_size")[1]), sh(pair(ctx, "stride")[0]),
        sw(pair(ctx, "stride")[1]), ph(pair(ctx, "padding")[0]), pw(pair(ctx, "padding")[1]),
        divisor_override(ctx.attr<int64_t>("divisor")), count_include_pad(ctx.attr<bool>("count_include_pad")) {}
  AvgWindow window(int64_t oh, int64_t ow, int64_t H, int64_t W) const {
    int64_t h0 = oh * sh - ph, w0 = ow * sw - pw;
    int64_t h1 = std::min(h0 + kh, H + ph), w1 = std::min(w0 + kw, W + pw);
    const int64_t padded_size = (h1 - h0) * (w1 - w0);
    h0 = std::max<int64_t>(h0, 0);
    w0 = std::max<int64_t>(w0, 0);
    h1 = std::min(h1, H);
    w1 = std::min(w1, W);
    const int64_t divisor =
        divisor_override ? divisor_override : (count_include_pad ? padded_size : (h1 - h0) * (w1 - w0));
    return {h0, h1, w0, w1, divisor};
  }
};

template <typename T>
struct AvgPool {
  static void run(const KernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    const AvgPoolGeometry geo(ctx);
    const int64_t H = x.sizes()[2], W = x.sizes()[3];
    const int64_t OH = ctx.output(0).sizes()[2], OW = ctx.output(0).sizes()[3];
    T* out = ctx.output(0).data<T>();
    for_each_plane<T>(x, OH * OW * geo.kh * geo.kw, [&](const Plane<T>& in, int64_t k) {
      T* o = out + k * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const AvgWindow win = geo.window(oh, ow, H, W);
          if (win.h0 >= win.h1 || win.w0 >= win.w1) {  // a window entirely in the padding
            o[oh * OW + ow] = T(0.0f);
            continue;
          }
          opmath_t<T> sum = 0;
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += static_cast<opmath_t<T>>(in.at(ih, iw));
          o[oh * OW + ow] = static_cast<T>(sum / static_cast<opmath_t<T>>(win.divisor));
        }
    });
  }
};

template <typename T>
struct AvgPoolBackward {
  static void run(const KernelContext& ctx) {
    const Tensor& g = ctx.input(0);
    const AvgPoolGeometry geo(ctx);
    const int64_t H = ctx.output(0).sizes()[2], W = ctx.output(0).sizes()[3];
    const int64_t OH = g.sizes()[2], OW = g.sizes()[3];
    T* out = ctx.output(0).data<T>();
    for_each_plane<T>(g, H * W + OH * OW * geo.kh * geo.kw, [&](const Plane<T>& go, int64_t k) {
      T* gi = out + k * H * W;
      std::fill(gi, gi + H * W, T(0));
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const AvgWindow win = geo.window(oh, ow, H, W);
          const T share = go.at(oh, ow) / static_cast<T>(win.divisor);
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw) gi[ih * W + iw] += share;
        }
    });
  }
};

template <typename T>
struct AdaptiveAvgPool {
  static void run(const KernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    const int64_t H = x.sizes()[2], W = x.sizes()[3];
    const int64_t OH = ctx.output(0).sizes()[2], OW = ctx.output(0).sizes()[3];
    T* out = ctx.output(0).data<T>();
    for_each_plane<T>(x, H * W + OH * OW, [&](const Plane<T>& in, int64_t k) {
      T* o = out + k * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h0 = adaptive_start(oh, OH, H), h1 = adaptive_end(oh, OH, H);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t w0 = adaptive_start(ow, OW, W), w1 = adaptive_end(ow, OW, W);
          opmath_t<T> sum = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) sum += static_cast<opmath_t<T>>(in.at(ih, iw));
          o[oh * OW + ow] = static_cast<T>(sum / static_cast<opmath_t<T>>((h1 - h0) * (w1 - w0)));
        }
      }
    });
  }
};

template <typename T>
struct AdaptiveAvgPoolBackward {
  static void run(const KernelContext& ctx) {
    const Tensor& g = ctx.input(0);
    const int64_t H = ctx.output(0).sizes()[2], W = ctx.output(0).sizes()[3];
    const int64_t OH = g.sizes()[2], OW = g.sizes()[3];
    T* out = ctx.output(0).data<T>();
    for_each_plane<T>(g, H * W + OH * OW, [&](const Plane<T>& go, int64_t k) {
      T* gi = out + k * H * W;
      std::fill(gi, gi + H * W, T(0));
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h0 = adaptive_start(oh, OH, H), h1 = adaptive_end(oh, OH, H);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t w0 = adaptive_start(ow, OW, W), w1 = adaptive_end(ow, OW, W);
          const T share = go.at(oh, ow) / static_cast<T>((h1 - h0) * (w1 - w0));
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) gi[ih * W + iw] += share;
        }
      }
    });
  }
};

// ---- upsampling ---------------------------------------------------------------------------------------

// PyTorch's compute_scales_value: 1/scale when the user gave a scale (> 0), else in/out.
template <typename A>
A source_scale(double user_scale, int64_t in, int64_t out) {
  return user_scale > 0 ? static_cast<A>(1.0 / user_scale) : static_cast<A>(in) / static_cast<A>(out);
}

// PyTorch's nearest source index, min(floor(o * scale), in - 1), computed in float as ATen
// does so that indices match exactly. ATen's channels-last kernel and its backward also
// special-case out == in (identity) and out == 2 in (o / 2), which differs from this only when
// a scale factor that does not produce those sizes was given; plugflow follows the formula
// (PyTorch's NCHW forward) in both directions, so forward and backward stay adjoint.
inline int64_t nearest_index(int64_t o, int64_t in, int64_t out, double user_scale) {
  const float scale = source_scale<float>(user_scale, in, out);
  return std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * scale)), in - 1);
}

// Source rows (or columns) of each output for nearest upsampling.
std::vector<int64_t> nearest_indices(int64_t in, int64_t out, double user_scale) {
  std::vector<int64_t> r(out);
  for (int64_t o = 0; o < out; ++o) r[o] = nearest_index(o, in, out, user_scale);
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
  const T scale = align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                                : source_scale<T>(user_scale, in, out);
  LinearTaps<T> t{std::vector<int64_t>(out), std::vector<int64_t>(out), std::vector<T>(out), std::vector<T>(out)};
  for (int64_t o = 0; o < out; ++o) {
    T src = align_corners ? scale * static_cast<T>(o) : scale * (static_cast<T>(o) + T(0.5)) - T(0.5);
    if (src < 0) src = 0;
    const int64_t i = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    const T lambda = std::clamp(src - static_cast<T>(i), T(0), T(1));
    t.i0[o] = i;
    t.i1[o] = i + (i < in - 1 ? 1 : 0);
    t.w0[o] = T(1) - lambda;
    t.w1[o] = lambda;
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
    for_each_plane<T>(ctx.input(0), s.OH * s.OW, [&](const Plane<T>& in, int64_t k) {
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
    for_each_plane<T>(ctx.input(0), s.H * s.W + s.OH * s.OW, [&](const Plane<T>& go, int64_t k) {
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
    for_each_plane<T>(ctx.input(0), s.OH * s.OW * 4, [&](const Plane<T>& in, int64_t k) {
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

template <typename T>
struct UpsampleBilinearBackward {
  static void run(const KernelContext& ctx) {
    const UpsampleSizes s = upsample_sizes(ctx, true);
    const bool ac = ctx.attr<bool>("align_corners");
    const auto th = linear_taps<T>(s.H, s.OH, ac, s.scale_h), tw = linear_taps<T>(s.W, s.OW, ac, s.scale_w);
    T* out = ctx.output(0).data<T>();
    for_each_plane<T>(ctx.input(0), s.H * s.W + s.OH * s.OW * 4, [&](const Plane<T>& go, int64_t k) {
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

}  // namespace

void max_pool2d_native(KernelContext& ctx) { dispatch_float<MaxPool>(ctx); }
void avg_pool2d_native(KernelContext& ctx) { dispatch_float<AvgPool>(ctx); }
void avg_pool2d_backward_native(KernelContext& ctx) { dispatch_widened<AvgPoolBackward>(ctx); }

void register_pool_kernels(Registrar& reg) {
  const auto floats = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
  reg.kernel("max_pool2d", DeviceType::CPU, floats, max_pool2d_native);
  reg.kernel("adaptive_max_pool2d", DeviceType::CPU, floats, dispatch_float<AdaptiveMaxPool>);
  reg.kernel("avg_pool2d", DeviceType::CPU, floats, avg_pool2d_native);
  reg.kernel("avg_pool2d_backward", DeviceType::CPU, floats, avg_pool2d_backward_native);
  reg.kernel("adaptive_avg_pool2d", DeviceType::CPU, floats, dispatch_float<AdaptiveAvgPool>);
  reg.kernel("adaptive_avg_pool2d_backward", DeviceType::CPU, floats, dispatch_widened<AdaptiveAvgPoolBackward>);
  reg.kernel("upsample_nearest2d", DeviceType::CPU, floats, dispatch_widened<UpsampleNearest>);
  reg.kernel("upsample_nearest2d_backward", DeviceType::CPU, floats, dispatch_widened<UpsampleNearestBackward>);
  reg.kernel("upsample_bilinear2d", DeviceType::CPU, floats, dispatch_widened<UpsampleBilinear>);
  reg.kernel("upsample_bilinear2d_backward", DeviceType::CPU, floats, dispatch_widened<UpsampleBilinearBackward>);
}

}  // namespace plugflow::cpu
