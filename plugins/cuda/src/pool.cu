// Pooling and upsampling (docs/kernels.md, "Conv family") on CUDA: max_pool2d/3d,
// adaptive_max_pool2d/3d, avg_pool2d/3d(+_backward), adaptive_avg_pool2d/3d(+_backward),
// upsample_nearest2d(+_backward), upsample_bilinear2d(+_backward), upsample_bicubic2d(+_backward),
// for float16, bfloat16, float32 and float64.
//
// A 2-d op is the 3-d one with a depth of 1, as on the CPU (plugins/cpu/src/pool.cpp); windows,
// sample positions and weights come from plugins/common/nn_math.h, shared with it. Inputs are
// read with their strides, outputs written contiguous (channels-last outputs through contiguous
// temporaries: row_major_outputs.h); the 16-bit types compute in float (the CPU's float32 copies)
// and round once.
//
// Every kernel runs a thread per element it writes, so nothing is accumulated with atomics: a
// backward kernel gathers, for its input element, the gradients of the outputs that read it, in
// the order the CPU's scatter adds them (outputs in row-major order; for bilinear, the four
// taps in the CPU's order; for bicubic, the CPU's two separable passes), and this file is
// compiled without FMA contraction: results are deterministic and meant to equal the CPU's bit
// for bit (tests/cpp/cuda/test_nn.cpp compares them within the usual tolerances).
#include <cmath>
#include <limits>

#include "nn_common.cuh"
#include "row_major_outputs.h"

namespace plugflow::cuda {
namespace {

// Spatial sizes (depth, height, width) of an (N, C, [D,] H, W) tensor, depth 1 for a 4-d one.
struct Extent {
  int64_t d, h, w;
};
Extent extent_of(const Tensor& t) {
  const int64_t r = t.dim();
  return {r == 5 ? t.sizes()[2] : 1, t.sizes()[r - 2], t.sizes()[r - 1]};
}

// An (N, C, D, H, W) operand read with its strides (elements); depth stride 0 for a 4-d one.
template <typename D>
struct StridedVolume {
  const D* base;
  int64_t c, sn, sc, sd, sh, sw;
  // Element (d, h, w) of volume k = n * C + c.
  PF_DEVICE opmath_t<D> at(int64_t k, int64_t d, int64_t h, int64_t w) const {
    return to_opmath(base[(k / c) * sn + (k % c) * sc + d * sd + h * sh + w * sw]);
  }
};
template <typename D>
StridedVolume<D> strided_volume(const Tensor& t) {
  const int64_t r = t.dim();
  return {static_cast<const D*>(t.data_ptr()), t.sizes()[1], t.strides()[0], t.strides()[1],
          r == 5 ? t.strides()[2] : 0, t.strides()[r - 2], t.strides()[r - 1]};
}

// Splits a flat index over (volume k, d, h, w) of extent e.
struct Position {
  int64_t k, d, h, w;
};
PF_DEVICE Position position(int64_t i, const Extent& e) {
  Position p;
  p.w = i % e.w;
  i /= e.w;
  p.h = i % e.h;
  i /= e.h;
  p.d = i % e.d;
  p.k = i / e.d;
  return p;
}

// A 3-value spatial attribute (depth, height, width), depth `fill` for a 2-d attribute.
struct Triple {
  int64_t v[3];
};
Triple spatial3(const KernelContext& ctx, const char* name, int64_t fill) {
  const Shape& s = ctx.attr<Shape>(name);
  return s.size() == 3 ? Triple{{s[0], s[1], s[2]}} : Triple{{fill, s[0], s[1]}};
}

// Runs f(type_tag<D>) for the input's floating dtype; outputs must be contiguous.
template <typename F>
void dispatch_pool(KernelContext& ctx, F&& f) {
  PF_CHECK_T(ctx.output(0).is_contiguous(), ValueError, "cuda '", ctx.op.name, "' writes a contiguous output");
  dispatch_supported<FloatTypes>(ctx, ctx.input(0).dtype(), [&](auto tag) { f(tag); });
}

template <typename Kernel, typename... Args>
void launch_over(const KernelScope& scope, int64_t n, Kernel kernel, Args... args) {
  if (n == 0) return;
  kernel<<<scope.blocks_for(n), kBlockThreads, 0, scope.stream>>>(n, args...);
  PF_CUDA_CHECK_LAUNCH();
}

#define PF_FOR_EACH(i, n)                                                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                    \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- max pooling --------------------------------------------------------------------------------

// The window's max and its index (d * H + h) * W + w; NaN wins (the last NaN seen); a window
// with nothing above -inf reports `fallback`.
template <typename C>
struct MaxTracker {
  C best = -std::numeric_limits<C>::infinity();
  int64_t index = -1;
  PF_DEVICE void visit(C e, int64_t i) {
    if (e > best || e != e) {
      best = e;
      index = i;
    }
  }
};

struct MaxPoolGeometry {
  Triple k, s, p, dil;
};

template <typename D>
__global__ void max_pool_kernel(int64_t total, StridedVolume<D> in, Extent ie, Extent oe, MaxPoolGeometry g, D* out,
                                int64_t* indices) {
  using C = opmath_t<D>;
  PF_FOR_EACH(i, total) {
    const Position o = position(i, oe);
    const int64_t d0 = o.d * g.s.v[0] - g.p.v[0], h0 = o.h * g.s.v[1] - g.p.v[1], w0 = o.w * g.s.v[2] - g.p.v[2];
    MaxTracker<C> m;
    for (int64_t t = 0; t < g.k.v[0]; ++t) {
      const int64_t id = d0 + t * g.dil.v[0];
      if (id < 0 || id >= ie.d) continue;
      for (int64_t a = 0; a < g.k.v[1]; ++a) {
        const int64_t ih = h0 + a * g.dil.v[1];
        if (ih < 0 || ih >= ie.h) continue;
        for (int64_t b = 0; b < g.k.v[2]; ++b) {
          const int64_t iw = w0 + b * g.dil.v[2];
          if (iw >= 0 && iw < ie.w) m.visit(in.at(o.k, id, ih, iw), (id * ie.h + ih) * ie.w + iw);
        }
      }
    }
    out[i] = cast_to<D>(m.best);
    indices[i] = m.index >= 0 ? m.index
                              : (nn_math::max_pool_first_tap(d0, g.dil.v[0]) * ie.h +
                                 nn_math::max_pool_first_tap(h0, g.dil.v[1])) * ie.w +
                                    nn_math::max_pool_first_tap(w0, g.dil.v[2]);
  }
}

void max_pool_kernel_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  const MaxPoolGeometry g{spatial3(ctx, "kernel_size", 1), spatial3(ctx, "stride", 1), spatial3(ctx, "padding", 0),
                          spatial3(ctx, "dilation", 1)};
  dispatch_pool(ctx, [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const Tensor& out = ctx.output(0);
    launch_over(scope, out.numel(), max_pool_kernel<D>, strided_volume<D>(ctx.input(0)), extent_of(ctx.input(0)),
                extent_of(out), g, static_cast<D*>(out.data_ptr()), static_cast<int64_t*>(ctx.output(1).data_ptr()));
  });
}

template <typename D>
__global__ void adaptive_max_pool_kernel(int64_t total, StridedVolume<D> in, Extent ie, Extent oe, D* out,
                                         int64_t* indices) {
  using C = opmath_t<D>;
  using nn_math::adaptive_end;
  using nn_math::adaptive_start;
  PF_FOR_EACH(i, total) {
    const Position o = position(i, oe);
    const int64_t d0 = adaptive_start(o.d, oe.d, ie.d), h0 = adaptive_start(o.h, oe.h, ie.h),
                  w0 = adaptive_start(o.w, oe.w, ie.w);
    const int64_t d1 = adaptive_end(o.d, oe.d, ie.d), h1 = adaptive_end(o.h, oe.h, ie.h),
                  w1 = adaptive_end(o.w, oe.w, ie.w);
    MaxTracker<C> m;
    for (int64_t d = d0; d < d1; ++d)
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) m.visit(in.at(o.k, d, h, w), (d * ie.h + h) * ie.w + w);
    out[i] = cast_to<D>(m.best);
    indices[i] = m.index >= 0 ? m.index : (d0 * ie.h + h0) * ie.w + w0;
  }
}

void adaptive_max_pool_kernel_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch_pool(ctx, [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const Tensor& out = ctx.output(0);
    launch_over(scope, out.numel(), adaptive_max_pool_kernel<D>, strided_volume<D>(ctx.input(0)),
                extent_of(ctx.input(0)), extent_of(out), static_cast<D*>(out.data_ptr()),
                static_cast<int64_t*>(ctx.output(1).data_ptr()));
  });
}

// ---- average pooling ----------------------------------------------------------------------------

nn_math::AvgPoolGeometry avg_pool_geometry(const KernelContext& ctx) {
  const Triple k = spatial3(ctx, "kernel_size", 1), s = spatial3(ctx, "stride", 1), p = spatial3(ctx, "padding", 0);
  return {{k.v[0], k.v[1], k.v[2]}, {s.v[0], s.v[1], s.v[2]}, {p.v[0], p.v[1], p.v[2]},
          ctx.attr<int64_t>("divisor"), ctx.attr<bool>("count_include_pad")};
}

template <typename D>
__global__ void avg_pool_kernel(int64_t total, StridedVolume<D> in, Extent ie, Extent oe,
                                nn_math::AvgPoolGeometry g, D* out) {
  using C = opmath_t<D>;
  PF_FOR_EACH(i, total) {
    const Position o = position(i, oe);
    const nn_math::AvgWindow win = g.window(o.d, o.h, o.w, ie.d, ie.h, ie.w);
    if (win.empty()) {  // a window entirely in the padding
      out[i] = cast_to<D>(C(0));
      continue;
    }
    C sum = 0;
    for (int64_t d = win.lo[0]; d < win.hi[0]; ++d)
      for (int64_t h = win.lo[1]; h < win.hi[1]; ++h)
        for (int64_t w = win.lo[2]; w < win.hi[2]; ++w) sum += in.at(o.k, d, h, w);
    out[i] = cast_to<D>(sum / static_cast<C>(win.divisor));
  }
}

void avg_pool_kernel_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  const nn_math::AvgPoolGeometry g = avg_pool_geometry(ctx);
  dispatch_pool(ctx, [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const Tensor& out = ctx.output(0);
    launch_over(scope, out.numel(), avg_pool_kernel<D>, strided_volume<D>(ctx.input(0)), extent_of(ctx.input(0)),
                extent_of(out), g, static_cast<D*>(out.data_ptr()));
  });
}

// The outputs o along one dim whose window [o * s - p, o * s - p + k) holds input i: from
// ceil((i + p - k + 1) / s) to floor((i + p) / s), within [0, out).
PF_DEVICE void covering_outputs(int64_t i, int64_t k, int64_t s, int64_t p, int64_t out, int64_t& first,
                                int64_t& last) {
  const int64_t lo = i + p - k + 1, hi = i + p;
  first = lo <= 0 ? 0 : (lo + s - 1) / s;
  last = hi < 0 ? -1 : hi / s;
  if (last > out - 1) last = out - 1;
}

// grad_input at (d, h, w): the sum of g / divisor over the outputs whose clipped window holds it,
// in row-major output order (the CPU's order of additions).
template <typename D>
__global__ void avg_pool_backward_kernel(int64_t total, StridedVolume<D> grad, Extent ie, Extent oe,
                                         nn_math::AvgPoolGeometry g, D* grad_in) {
  using C = opmath_t<D>;
  PF_FOR_EACH(i, total) {
    const Position x = position(i, ie);
    int64_t f[3], l[3];
    covering_outputs(x.d, g.k[0], g.s[0], g.p[0], oe.d, f[0], l[0]);
    covering_outputs(x.h, g.k[1], g.s[1], g.p[1], oe.h, f[1], l[1]);
    covering_outputs(x.w, g.k[2], g.s[2], g.p[2], oe.w, f[2], l[2]);
    C sum = 0;
    for (int64_t od = f[0]; od <= l[0]; ++od)
      for (int64_t oh = f[1]; oh <= l[1]; ++oh)
        for (int64_t ow = f[2]; ow <= l[2]; ++ow) {
          const nn_math::AvgWindow win = g.window(od, oh, ow, ie.d, ie.h, ie.w);
          if (x.d < win.lo[0] || x.d >= win.hi[0] || x.h < win.lo[1] || x.h >= win.hi[1] || x.w < win.lo[2] ||
              x.w >= win.hi[2])
            continue;
          sum += grad.at(x.k, od, oh, ow) / static_cast<C>(win.divisor);
        }
    grad_in[i] = cast_to<D>(sum);
  }
}

void avg_pool_backward_kernel_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  const nn_math::AvgPoolGeometry g = avg_pool_geometry(ctx);
  dispatch_pool(ctx, [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const Tensor& gi = ctx.output(0);
    launch_over(scope, gi.numel(), avg_pool_backward_kernel<D>, strided_volume<D>(ctx.input(0)), extent_of(gi),
                extent_of(ctx.input(0)), g, static_cast<D*>(gi.data_ptr()));
  });
}

template <typename D>
__global__ void adaptive_avg_pool_kernel(int64_t total, StridedVolume<D> in, Extent ie, Extent oe, D* out) {
  using C = opmath_t<D>;
  using nn_math::adaptive_end;
  using nn_math::adaptive_start;
  PF_FOR_EACH(i, total) {
    const Position o = position(i, oe);
    const int64_t d0 = adaptive_start(o.d, oe.d, ie.d), d1 = adaptive_end(o.d, oe.d, ie.d);
    const int64_t h0 = adaptive_start(o.h, oe.h, ie.h), h1 = adaptive_end(o.h, oe.h, ie.h);
    const int64_t w0 = adaptive_start(o.w, oe.w, ie.w), w1 = adaptive_end(o.w, oe.w, ie.w);
    C sum = 0;
    for (int64_t d = d0; d < d1; ++d)
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) sum += in.at(o.k, d, h, w);
    out[i] = cast_to<D>(sum / static_cast<C>((d1 - d0) * (h1 - h0) * (w1 - w0)));
  }
}

void adaptive_avg_pool_kernel_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch_pool(ctx, [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const Tensor& out = ctx.output(0);
    launch_over(scope, out.numel(), adaptive_avg_pool_kernel<D>, strided_volume<D>(ctx.input(0)),
                extent_of(ctx.input(0)), extent_of(out), static_cast<D*>(out.data_ptr()));
  });
}

// The adaptive outputs along one dim whose window holds input i: start(o) <= i < end(o) for o
// in [floor(i * out / in), ceil((i + 1) * out / in) - 1] (checked, so the bounds may be loose).
PF_DEVICE void adaptive_covering(int64_t i, int64_t in, int64_t out, int64_t& first, int64_t& last) {
  first = (i * out) / in;
  last = ((i + 1) * out + in - 1) / in - 1;
  if (last > out - 1) last = out - 1;
}

template <typename D>
__global__ void adaptive_avg_pool_backward_kernel(int64_t total, StridedVolume<D> grad, Extent ie, Extent oe,
                                                  D* grad_in) {
  using C = opmath_t<D>;
  using nn_math::adaptive_end;
  using nn_math::adaptive_start;
  PF_FOR_EACH(i, total) {
    const Position x = position(i, ie);
    int64_t f[3], l[3];
    adaptive_covering(x.d, ie.d, oe.d, f[0], l[0]);
    adaptive_covering(x.h, ie.h, oe.h, f[1], l[1]);
    adaptive_covering(x.w, ie.w, oe.w, f[2], l[2]);
    C sum = 0;
    for (int64_t od = f[0]; od <= l[0]; ++od) {
      const int64_t d0 = adaptive_start(od, oe.d, ie.d), d1 = adaptive_end(od, oe.d, ie.d);
      if (x.d < d0 || x.d >= d1) continue;
      for (int64_t oh = f[1]; oh <= l[1]; ++oh) {
        const int64_t h0 = adaptive_start(oh, oe.h, ie.h), h1 = adaptive_end(oh, oe.h, ie.h);
        if (x.h < h0 || x.h >= h1) continue;
        for (int64_t ow = f[2]; ow <= l[2]; ++ow) {
          const int64_t w0 = adaptive_start(ow, oe.w, ie.w), w1 = adaptive_end(ow, oe.w, ie.w);
          if (x.w < w0 || x.w >= w1) continue;
          sum += grad.at(x.k, od, oh, ow) / static_cast<C>((d1 - d0) * (h1 - h0) * (w1 - w0));
        }
      }
    }
    grad_in[i] = cast_to<D>(sum);
  }
}

void adaptive_avg_pool_backward_kernel_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch_pool(ctx, [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const Tensor& gi = ctx.output(0);
    launch_over(scope, gi.numel(), adaptive_avg_pool_backward_kernel<D>, strided_volume<D>(ctx.input(0)),
                extent_of(gi), extent_of(ctx.input(0)), static_cast<D*>(gi.data_ptr()));
  });
}

// ---- upsampling ---------------------------------------------------------------------------------

// One dim of an upsampling: input and output sizes and the user's scale (0: none).
struct Resample {
  int64_t in, out;
  double scale;
  bool align_corners;
  PF_DEVICE int64_t nearest(int64_t o) const { return nn_math::nearest_index(o, in, out, scale); }
  template <typename C>
  PF_DEVICE nn_math::LinearTap<C> tap(int64_t o) const {
    return nn_math::linear_tap<C>(o, in, out, align_corners, scale);
  }
  template <typename C>
  PF_DEVICE nn_math::CubicTap<C> cubic(int64_t o) const {
    return nn_math::cubic_tap<C>(o, in, out, align_corners, scale);
  }
};

// The first output o in [0, out) with key(o) >= v, for a non-decreasing key (binary search).
template <typename Key>
PF_DEVICE int64_t first_at_least(int64_t out, int64_t v, const Key& key) {
  int64_t lo = 0, hi = out;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (key(mid) < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Sizes of an upsampling, from its small side (input, or the backward's grad_input) and its
// large side (output, or grad_output).
struct UpsampleDims {
  Resample h, w;
};
UpsampleDims upsample_dims(const KernelContext& ctx, bool backward) {
  const Tensor& small = backward ? ctx.output(0) : ctx.input(0);
  const Tensor& large = backward ? ctx.input(0) : ctx.output(0);
  const bool ac = ctx.attrs.has("align_corners") && ctx.attr<bool>("align_corners");
  return {{small.sizes()[2], large.sizes()[2], ctx.attr<double>("scale_h"), ac},
          {small.sizes()[3], large.sizes()[3], ctx.attr<double>("scale_w"), ac}};
}

template <typename D>
__global__ void upsample_nearest_kernel(int64_t total, StridedVolume<D> in, UpsampleDims s, D* out) {
  PF_FOR_EACH(i, total) {
    const Position o = position(i, Extent{1, s.h.out, s.w.out});
    out[i] = cast_to<D>(in.at(o.k, 0, s.h.nearest(o.h), s.w.nearest(o.w)));
  }
}

// grad_input at (h, w): the sum of the outputs that copied it, in row-major output order. The
// source index is non-decreasing in the output, so those outputs are one range per dim.
template <typename D>
__global__ void upsample_nearest_backward_kernel(int64_t total, StridedVolume<D> grad, UpsampleDims s, D* grad_in) {
  using C = opmath_t<D>;
  PF_FOR_EACH(i, total) {
    const Position x = position(i, Extent{1, s.h.in, s.w.in});
    const auto key_h = [&](int64_t o) { return s.h.nearest(o); };
    const auto key_w = [&](int64_t o) { return s.w.nearest(o); };
    const int64_t h0 = first_at_least(s.h.out, x.h, key_h), h1 = first_at_least(s.h.out, x.h + 1, key_h);
    const int64_t w0 = first_at_least(s.w.out, x.w, key_w), w1 = first_at_least(s.w.out, x.w + 1, key_w);
    C sum = 0;
    for (int64_t oh = h0; oh < h1; ++oh)
      for (int64_t ow = w0; ow < w1; ++ow) sum += grad.at(x.k, 0, oh, ow);
    grad_in[i] = cast_to<D>(sum);
  }
}

// out = a0 * (b0 * in[h0, w0] + b1 * in[h0, w1]) + a1 * (b0 * in[h1, w0] + b1 * in[h1, w1]), in C.
template <typename D>
__global__ void upsample_bilinear_kernel(int64_t total, StridedVolume<D> in, UpsampleDims s, D* out) {
  using C = opmath_t<D>;
  PF_FOR_EACH(i, total) {
    const Position o = position(i, Extent{1, s.h.out, s.w.out});
    const nn_math::LinearTap<C> th = s.h.template tap<C>(o.h), tw = s.w.template tap<C>(o.w);
    out[i] = cast_to<D>(th.w0 * (tw.w0 * in.at(o.k, 0, th.i0, tw.i0) + tw.w1 * in.at(o.k, 0, th.i0, tw.i1)) +
                        th.w1 * (tw.w0 * in.at(o.k, 0, th.i1, tw.i0) + tw.w1 * in.at(o.k, 0, th.i1, tw.i1)));
  }
}

// grad_input at (h, w): for the outputs whose taps include it (i0 in {h - 1, h} per dim; i0 is
// non-decreasing in the output), in row-major order, the CPU's four additions in its order:
// (i0, i0), (i0, i1), (i1, i0), (i1, i1) of weight a * b * g each, where they land on (h, w).
template <typename D>
__global__ void upsample_bilinear_backward_kernel(int64_t total, StridedVolume<D> grad, UpsampleDims s, D* grad_in) {
  using C = opmath_t<D>;
  PF_FOR_EACH(i, total) {
    const Position x = position(i, Extent{1, s.h.in, s.w.in});
    const auto key_h = [&](int64_t o) { return s.h.template tap<C>(o).i0; };
    const auto key_w = [&](int64_t o) { return s.w.template tap<C>(o).i0; };
    const int64_t h0 = first_at_least(s.h.out, x.h - 1, key_h), h1 = first_at_least(s.h.out, x.h + 1, key_h);
    const int64_t w0 = first_at_least(s.w.out, x.w - 1, key_w), w1 = first_at_least(s.w.out, x.w + 1, key_w);
    C sum = 0;
    for (int64_t oh = h0; oh < h1; ++oh) {
      const nn_math::LinearTap<C> th = s.h.template tap<C>(oh);
      const int64_t hi[2] = {th.i0, th.i1};
      const C hw[2] = {th.w0, th.w1};
      for (int64_t ow = w0; ow < w1; ++ow) {
        const nn_math::LinearTap<C> tw = s.w.template tap<C>(ow);
        const int64_t wi[2] = {tw.i0, tw.i1};
        const C ww[2] = {tw.w0, tw.w1};
        const C g = grad.at(x.k, 0, oh, ow);
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b)
            if (hi[a] == x.h && wi[b] == x.w) sum += hw[a] * ww[b] * g;
      }
    }
    grad_in[i] = cast_to<D>(sum);
  }
}

// out = sum_j w_h[j] * (sum_i w_w[i] * in[h_j, w_i]): the CPU's separable sums in its order
// (nn_math::cubic_sum), in C.
template <typename D>
__global__ void upsample_bicubic_kernel(int64_t total, StridedVolume<D> in, UpsampleDims s, D* out) {
  using C = opmath_t<D>;
  PF_FOR_EACH(i, total) {
    const Position o = position(i, Extent{1, s.h.out, s.w.out});
    const nn_math::CubicTap<C> th = s.h.template cubic<C>(o.h), tw = s.w.template cubic<C>(o.w);
    C rows[4];
    for (int j = 0; j < 4; ++j) {
      const C v[4] = {in.at(o.k, 0, th.i[j], tw.i[0]), in.at(o.k, 0, th.i[j], tw.i[1]),
                      in.at(o.k, 0, th.i[j], tw.i[2]), in.at(o.k, 0, th.i[j], tw.i[3])};
      rows[j] = nn_math::cubic_sum(tw, v);
    }
    out[i] = cast_to<D>(nn_math::cubic_sum(th, rows));
  }
}

// grad_input at (h, w): the CPU's separable scatter (each gradient along H into rows (H, OW),
// then each row along W) gathered. For each output column ow whose taps include w, in order: its
// row sum, g * w_h[j] over the outputs oh whose taps include h (row-major) and each of their taps
// j landing on h; then that sum times each w_w[i] landing on w. Clamped taps i[0] <= ... <= i[3]
// are non-decreasing in the output, so those outputs are one range per dim.
template <typename D>
__global__ void upsample_bicubic_backward_kernel(int64_t total, StridedVolume<D> grad, UpsampleDims s, D* grad_in) {
  using C = opmath_t<D>;
  PF_FOR_EACH(i, total) {
    const Position x = position(i, Extent{1, s.h.in, s.w.in});
    const auto first_h = [&](int64_t o) { return s.h.template cubic<C>(o).i[0]; };
    const auto last_h = [&](int64_t o) { return s.h.template cubic<C>(o).i[3]; };
    const auto first_w = [&](int64_t o) { return s.w.template cubic<C>(o).i[0]; };
    const auto last_w = [&](int64_t o) { return s.w.template cubic<C>(o).i[3]; };
    const int64_t h0 = first_at_least(s.h.out, x.h, last_h), h1 = first_at_least(s.h.out, x.h + 1, first_h);
    const int64_t w0 = first_at_least(s.w.out, x.w, last_w), w1 = first_at_least(s.w.out, x.w + 1, first_w);
    C sum = 0;
    for (int64_t ow = w0; ow < w1; ++ow) {
      C row = 0;
      for (int64_t oh = h0; oh < h1; ++oh) {
        const nn_math::CubicTap<C> th = s.h.template cubic<C>(oh);
        const C g = grad.at(x.k, 0, oh, ow);
        for (int j = 0; j < 4; ++j)
          if (th.i[j] == x.h) row += g * th.w[j];
      }
      const nn_math::CubicTap<C> tw = s.w.template cubic<C>(ow);
      for (int j = 0; j < 4; ++j)
        if (tw.i[j] == x.w) sum += row * tw.w[j];
    }
    grad_in[i] = cast_to<D>(sum);
  }
}

template <bool Backward, template <typename> class Kernel>
void upsample_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  const UpsampleDims s = upsample_dims(ctx, Backward);
  dispatch_pool(ctx, [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const Tensor& out = ctx.output(0);
    launch_over(scope, out.numel(), Kernel<D>::fn, strided_volume<D>(ctx.input(0)), s, static_cast<D*>(out.data_ptr()));
  });
}

// The kernels as class templates, for upsample_entry.
template <typename D> struct NearestFwd { static constexpr auto fn = upsample_nearest_kernel<D>; };
template <typename D> struct NearestBwd { static constexpr auto fn = upsample_nearest_backward_kernel<D>; };
template <typename D> struct BilinearFwd { static constexpr auto fn = upsample_bilinear_kernel<D>; };
template <typename D> struct BilinearBwd { static constexpr auto fn = upsample_bilinear_backward_kernel<D>; };
template <typename D> struct BicubicFwd { static constexpr auto fn = upsample_bicubic_kernel<D>; };
template <typename D> struct BicubicBwd { static constexpr auto fn = upsample_bicubic_backward_kernel<D>; };

#undef PF_FOR_EACH

// The pooling ops of each rank, in the order pool_kernels registers them.
constexpr const char* kPoolOps2d[] = {"max_pool2d", "adaptive_max_pool2d", "avg_pool2d", "avg_pool2d_backward",
                                      "adaptive_avg_pool2d", "adaptive_avg_pool2d_backward"};
constexpr const char* kPoolOps3d[] = {"max_pool3d", "adaptive_max_pool3d", "avg_pool3d", "avg_pool3d_backward",
                                      "adaptive_avg_pool3d", "adaptive_avg_pool3d_backward"};

}  // namespace

std::vector<KernelDef> pool_kernels() {
  const std::vector<DType> floats = supported_dtypes<FloatTypes>();
  std::vector<KernelDef> defs;
  for (const char* const* names : {kPoolOps2d, kPoolOps3d}) {
    defs.push_back({names[0], floats, &with_row_major_outputs<max_pool_kernel_entry>});
    defs.push_back({names[1], floats, &with_row_major_outputs<adaptive_max_pool_kernel_entry>});
    defs.push_back({names[2], floats, &with_row_major_outputs<avg_pool_kernel_entry>});
    defs.push_back({names[3], floats, &with_row_major_outputs<avg_pool_backward_kernel_entry>});
    defs.push_back({names[4], floats, &with_row_major_outputs<adaptive_avg_pool_kernel_entry>});
    defs.push_back({names[5], floats, &with_row_major_outputs<adaptive_avg_pool_backward_kernel_entry>});
  }
  defs.push_back({"upsample_nearest2d", floats, &with_row_major_outputs<upsample_entry<false, NearestFwd>>});
  defs.push_back({"upsample_nearest2d_backward", floats, &with_row_major_outputs<upsample_entry<true, NearestBwd>>});
  defs.push_back({"upsample_bilinear2d", floats, &with_row_major_outputs<upsample_entry<false, BilinearFwd>>});
  defs.push_back({"upsample_bilinear2d_backward", floats, &with_row_major_outputs<upsample_entry<true, BilinearBwd>>});
  defs.push_back({"upsample_bicubic2d", floats, &with_row_major_outputs<upsample_entry<false, BicubicFwd>>});
  defs.push_back({"upsample_bicubic2d_backward", floats, &with_row_major_outputs<upsample_entry<true, BicubicBwd>>});
  return defs;
}

}  // namespace plugflow::cuda
