// torchvision's operators (docs/kernels.md, "torchvision operators"): nms, roi_align,
// roi_pool, ps_roi_align, ps_roi_pool, deform_conv2d and their backwards, float32/float64,
// contiguous inputs and outputs.
//
// The roi arithmetic is torchvision 0.14's CPU kernels' (csrc/ops/cpu/*_kernel.cpp), expression
// for expression and in the same accumulation order, so results agree bit for bit; the
// per-element arithmetic the CUDA plugin shares (overlap test, sampling grids and bilinear taps,
// bins, the position-sensitive channel mapping, deform_conv2d's samples and their gradients, the
// roi checks) lives in plugins/common/roi_math.h. Unlike torchvision's kernels, every value read
// from rois is checked before it is used as an index: a batch index outside the input raises
// IndexError and a non-finite coordinate (or an adaptive sampling grid too large for an int)
// raises RuntimeError, where torchvision reads out of bounds.
//
// Threads: the roi forwards run rois in parallel (each writes its own outputs); the backwards
// run input channels in parallel, each thread visiting rois and bins in torchvision's order, so
// every gradient element sums its contributions in the same order as torchvision's serial loop.
//
// deform_conv2d is im2col with displaced bilinear samples (a "deformable column" matrix) and
// GEMM (blas.h), image by image; see its section.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "blas.h"
#include "kernels.h"
#include "loops.h"
#include "opdefs.h"
#include "roi_math.h"

namespace plugflow::cpu {
namespace {

using namespace roi_math;

void check_contiguous(const KernelContext& ctx) {
  for (const Tensor& t : ctx.inputs)
    PF_CHECK_T(t.is_contiguous(), ValueError, "cpu '", ctx.op.name, "' reads contiguous inputs");
  for (const Tensor& t : ctx.outputs)
    PF_CHECK_T(t.is_contiguous(), ValueError, "cpu '", ctx.op.name, "' writes contiguous outputs");
}

// ---- nms ------------------------------------------------------------------------------------------

template <typename T>
void nms_kernel(const KernelContext& ctx) {
  const Tensor& boxes = ctx.input(0);
  const T* dets = boxes.data<T>();
  const T* scores = ctx.input(1).data<T>();
  const int64_t n = boxes.sizes()[0];
  const double iou_threshold = ctx.attr<double>("iou_threshold");
  std::vector<T> areas(n);
  for (int64_t i = 0; i < n; ++i) areas[i] = box_area(dets + 4 * i);
  const std::vector<int64_t> order = nms_order(scores, n);
  std::vector<uint8_t> suppressed(n, 0);
  int64_t* keep = ctx.output(0).data<int64_t>();
  int64_t num_to_keep = 0;
  for (int64_t oi = 0; oi < n; ++oi) {
    const int64_t i = order[oi];
    if (suppressed[i]) continue;
    keep[num_to_keep++] = i;
    for (int64_t oj = oi + 1; oj < n; ++oj) {
      const int64_t j = order[oj];
      if (!suppressed[j] && suppresses(dets + 4 * i, areas[i], dets + 4 * j, areas[j], iou_threshold))
        suppressed[j] = 1;
    }
  }
  std::fill(keep + num_to_keep, keep + n, int64_t{-1});
  ctx.output(1).data<int64_t>()[0] = num_to_keep;
}

// ---- roi_align -------------------------------------------------------------------------------------

template <typename T>
void accumulate(T* where, T v) {
  *where += v;
}

// The taps of each bin's samples, bin after bin (torchvision's pre_calc, shared by all
// channels); returns the samples per bin. An image of no pixels has none (every sample reads 0).
template <typename T>
int64_t bin_taps(const RoiAlignBox<T>& box, const RoiAlignParams& p, std::vector<Taps<T>>& taps) {
  taps.clear();
  if (p.height == 0 || p.width == 0) return 0;
  const int64_t samples = std::max<int64_t>(box.grid_h, 0) * std::max<int64_t>(box.grid_w, 0);
  taps.reserve(static_cast<size_t>(p.pooled_height * p.pooled_width * samples));
  for (int64_t ph = 0; ph < p.pooled_height; ++ph)
    for (int64_t pw = 0; pw < p.pooled_width; ++pw)
      for (int64_t iy = 0; iy < box.grid_h; ++iy) {
        const T y = box.y(ph, iy);
        for (int64_t ix = 0; ix < box.grid_w; ++ix) taps.emplace_back(y, box.x(pw, ix), p.height, p.width);
      }
  return samples;
}

template <typename T>
void roi_align_forward(const KernelContext& ctx) {
  const Tensor& input_t = ctx.input(0);
  const RoiAlignParams p = roi_align_params(ctx, input_t.sizes(), ctx.attr<bool>("aligned"));
  const T* input = input_t.data<T>();
  const T* rois = ctx.input(1).data<T>();
  T* output = ctx.output(0).data<T>();
  const int64_t num_rois = ctx.input(1).sizes()[0], batch = input_t.sizes()[0];
  const int64_t plane = p.height * p.width, bins = p.pooled_height * p.pooled_width;
  check_rois(rois, num_rois, batch, "roi_align");
  check_roi_align_grids(rois, num_rois, p);
  parallel_for(num_rois, 1, [&](int64_t begin, int64_t end) {
    std::vector<Taps<T>> taps;
    for (int64_t n = begin; n < end; ++n) {
      const T* roi = rois + 5 * n;
      const int64_t b = static_cast<int64_t>(roi[0]);
      const RoiAlignBox<T> box(roi, p);
      const int64_t samples = bin_taps(box, p, taps);
      const T count = static_cast<T>(std::max<int64_t>(box.grid_h * box.grid_w, 1));
      for (int64_t c = 0; c < p.channels; ++c) {
        const T* in = input + (b * p.channels + c) * plane;
        T* out = output + (n * p.channels + c) * bins;
        const Taps<T>* tap = taps.data();
        for (int64_t bin = 0; bin < bins; ++bin) {
          T val = 0.;
          for (int64_t s = 0; s < samples; ++s, ++tap) val += tap->value(in);
          out[bin] = val / count;
        }
      }
    }
  });
}

// The backward kernels' rois, checked as the forward checks them, as boxes.
template <typename T>
std::vector<RoiAlignBox<T>> checked_align_boxes(const T* rois, int64_t num_rois, int64_t batch,
                                                const RoiAlignParams& p, const char* op) {
  check_rois(rois, num_rois, batch, op);
  check_roi_align_grids(rois, num_rois, p);
  std::vector<RoiAlignBox<T>> boxes;
  boxes.reserve(static_cast<size_t>(num_rois));
  for (int64_t n = 0; n < num_rois; ++n) boxes.emplace_back(rois + 5 * n, p);
  return boxes;
}

template <typename T>
void roi_align_backward(const KernelContext& ctx) {
  const Shape& input_size = ctx.attr<Shape>("input_size");
  const RoiAlignParams p = roi_align_params(ctx, input_size, ctx.attr<bool>("aligned"));
  const T* grad = ctx.input(0).data<T>();
  const T* rois = ctx.input(1).data<T>();
  T* grad_input = ctx.output(0).data<T>();
  const int64_t num_rois = ctx.input(1).sizes()[0];
  const int64_t plane = p.height * p.width, bins = p.pooled_height * p.pooled_width;
  std::fill(grad_input, grad_input + ctx.output(0).numel(), T(0));
  const std::vector<RoiAlignBox<T>> boxes = checked_align_boxes(rois, num_rois, input_size[0], p, "roi_align_backward");
  parallel_for(p.channels, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t n = 0; n < num_rois; ++n) {
        const RoiAlignBox<T>& box = boxes[n];
        const int64_t b = static_cast<int64_t>(rois[5 * n]);
        T* gi = grad_input + (b * p.channels + c) * plane;
        const T* g = grad + (n * p.channels + c) * bins;
        const T count = static_cast<T>(box.grid_h * box.grid_w);
        for (int64_t ph = 0; ph < p.pooled_height; ++ph)
          for (int64_t pw = 0; pw < p.pooled_width; ++pw) {
            const T g_bin = g[ph * p.pooled_width + pw];
            for (int64_t iy = 0; iy < box.grid_h; ++iy) {
              const T y = box.y(ph, iy);
              for (int64_t ix = 0; ix < box.grid_w; ++ix)
                Taps<T>(y, box.x(pw, ix), p.height, p.width).scatter(gi, g_bin, count, accumulate<T>);
            }
          }
      }
  });
}

// ---- roi_pool --------------------------------------------------------------------------------------

template <typename T>
void roi_pool_forward(const KernelContext& ctx) {
  const Tensor& input_t = ctx.input(0);
  const int64_t channels = input_t.sizes()[1], height = input_t.sizes()[2], width = input_t.sizes()[3];
  const int64_t pooled_height = ctx.attr<int64_t>("pooled_height"), pooled_width = ctx.attr<int64_t>("pooled_width");
  const T scale = static_cast<T>(ctx.attr<double>("spatial_scale"));
  const T* input = input_t.data<T>();
  const T* rois = ctx.input(1).data<T>();
  T* output = ctx.output(0).data<T>();
  int32_t* argmax = ctx.output(1).data<int32_t>();
  const int64_t num_rois = ctx.input(1).sizes()[0];
  check_rois(rois, num_rois, input_t.sizes()[0], "roi_pool");
  check_rounded_coordinates(rois, num_rois, scale, false, "roi_pool");
  parallel_for(num_rois, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const T* roi = rois + 5 * n;
      const int64_t b = static_cast<int64_t>(roi[0]);
      const RoiPoolBox<T> box(roi, scale, pooled_height, pooled_width);
      for (int64_t ph = 0; ph < pooled_height; ++ph)
        for (int64_t pw = 0; pw < pooled_width; ++pw) {
          int64_t h0, h1, w0, w1;
          box.window(ph, pw, height, width, h0, h1, w0, w1);
          for (int64_t c = 0; c < channels; ++c) {
            const int64_t index = ((n * channels + c) * pooled_height + ph) * pooled_width + pw;
            output[index] = pool_max(input + (b * channels + c) * height * width, width, h0, h1, w0, w1, argmax[index]);
          }
        }
    }
  });
}

template <typename T>
void roi_pool_backward(const KernelContext& ctx) {
  const Shape& input_size = ctx.attr<Shape>("input_size");
  const int64_t channels = input_size[1], plane = input_size[2] * input_size[3];
  const int64_t bins = ctx.attr<int64_t>("pooled_height") * ctx.attr<int64_t>("pooled_width");
  const T* grad = ctx.input(0).data<T>();
  const T* rois = ctx.input(1).data<T>();
  const int32_t* argmax = ctx.input(2).data<int32_t>();
  T* grad_input = ctx.output(0).data<T>();
  const int64_t num_rois = ctx.input(1).sizes()[0];
  std::fill(grad_input, grad_input + ctx.output(0).numel(), T(0));
  check_rois(rois, num_rois, input_size[0], "roi_pool_backward");
  for (int64_t k = 0; k < ctx.input(2).numel(); ++k)
    PF_CHECK_T(argmax[k] >= -1 && argmax[k] < plane, IndexError, "roi_pool_backward: argmax ", argmax[k],
               " is outside the ", plane, " positions of a channel");
  parallel_for(channels, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t n = 0; n < num_rois; ++n) {
        const int64_t b = static_cast<int64_t>(rois[5 * n]);
        T* gi = grad_input + (b * channels + c) * plane;
        const int64_t base = (n * channels + c) * bins;
        for (int64_t bin = 0; bin < bins; ++bin)
          if (argmax[base + bin] != -1) gi[argmax[base + bin]] += grad[base + bin];
      }
  });
}

// ---- ps_roi_align / ps_roi_pool ----------------------------------------------------------------------
// Output channel c_out's bin (ph, pw) pools input channel c_out * PH * PW + ph * PW + pw: so
// output element n * C + c (C input channels) reads input channel c. The backwards run input
// channels in parallel: channel c gathers output elements n * C + c for n = 0, 1, ... in order.

// torchvision's ps_roi_align always shifts rois by half a pixel and never widens small ones:
// roi_align's aligned geometry.
template <typename T>
void ps_roi_align_forward(const KernelContext& ctx) {
  const Tensor& input_t = ctx.input(0);
  const RoiAlignParams p = roi_align_params(ctx, input_t.sizes(), true);
  const T* input = input_t.data<T>();
  const T* rois = ctx.input(1).data<T>();
  T* output = ctx.output(0).data<T>();
  int32_t* channel_mapping = ctx.output(1).data<int32_t>();
  const int64_t num_rois = ctx.input(1).sizes()[0];
  const int64_t plane = p.height * p.width;
  check_rois(rois, num_rois, input_t.sizes()[0], "ps_roi_align");
  check_roi_align_grids(rois, num_rois, p);
  parallel_for(num_rois, 1, [&](int64_t begin, int64_t end) {
    std::vector<Taps<T>> taps;
    for (int64_t n = begin; n < end; ++n) {
      const T* roi = rois + 5 * n;
      const int64_t b = static_cast<int64_t>(roi[0]);
      const RoiAlignBox<T> box(roi, p);
      const int64_t samples = bin_taps(box, p, taps);
      const T count = ps_align_count(box);
      for (int64_t c = 0; c < p.channels; ++c) {
        const T* in = input + (b * p.channels + c) * plane;
        const PsBin bin = ps_bin(c, p.pooled_height, p.pooled_width);
        const Taps<T>* tap = taps.data() + (bin.ph * p.pooled_width + bin.pw) * samples;
        T val = 0.;
        for (int64_t s = 0; s < samples; ++s, ++tap) val += tap->value(in);
        output[n * p.channels + c] = val / count;
        channel_mapping[n * p.channels + c] = static_cast<int32_t>(c);
      }
    }
  });
}

template <typename T>
void ps_roi_align_backward(const KernelContext& ctx) {
  const Shape& input_size = ctx.attr<Shape>("input_size");
  const RoiAlignParams p = roi_align_params(ctx, input_size, true);
  const T* grad = ctx.input(0).data<T>();
  const T* rois = ctx.input(1).data<T>();
  T* grad_input = ctx.output(0).data<T>();
  const int64_t num_rois = ctx.input(1).sizes()[0];
  const int64_t plane = p.height * p.width;
  std::fill(grad_input, grad_input + ctx.output(0).numel(), T(0));
  const std::vector<RoiAlignBox<T>> boxes = checked_align_boxes(rois, num_rois, input_size[0], p, "ps_roi_align_backward");
  parallel_for(p.channels, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const PsBin bin = ps_bin(c, p.pooled_height, p.pooled_width);
      for (int64_t n = 0; n < num_rois; ++n) {
        const RoiAlignBox<T>& box = boxes[n];
        T* gi = grad_input + (static_cast<int64_t>(rois[5 * n]) * p.channels + c) * plane;
        const T g_bin = grad[n * p.channels + c];
        const T count = ps_align_count(box);
        for (int64_t iy = 0; iy < box.grid_h; ++iy) {
          const T y = box.y(bin.ph, iy);
          for (int64_t ix = 0; ix < box.grid_w; ++ix)
            Taps<T>(y, box.x(bin.pw, ix), p.height, p.width).scatter(gi, g_bin, count, accumulate<T>);
        }
      }
    }
  });
}

template <typename T>
void ps_roi_pool_forward(const KernelContext& ctx) {
  const Tensor& input_t = ctx.input(0);
  const int64_t channels = input_t.sizes()[1], height = input_t.sizes()[2], width = input_t.sizes()[3];
  const int64_t pooled_height = ctx.attr<int64_t>("pooled_height"), pooled_width = ctx.attr<int64_t>("pooled_width");
  const T scale = static_cast<T>(ctx.attr<double>("spatial_scale"));
  const T* input = input_t.data<T>();
  const T* rois = ctx.input(1).data<T>();
  T* output = ctx.output(0).data<T>();
  int32_t* channel_mapping = ctx.output(1).data<int32_t>();
  const int64_t num_rois = ctx.input(1).sizes()[0];
  check_rois(rois, num_rois, input_t.sizes()[0], "ps_roi_pool");
  check_rounded_coordinates(rois, num_rois, scale, false, "ps_roi_pool");
  parallel_for(num_rois, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const T* roi = rois + 5 * n;
      const int64_t b = static_cast<int64_t>(roi[0]);
      const PsPoolRoi<T> box(roi, scale, pooled_height, pooled_width, false);
      for (int64_t c = 0; c < channels; ++c) {
        const PsBin bin = ps_bin(c, pooled_height, pooled_width);
        const PsPoolBin r = box.bin(bin.ph, bin.pw, height - 1, width - 1);
        output[n * channels + c] = ps_pool_mean(input + (b * channels + c) * height * width, width, r);
        channel_mapping[n * channels + c] = static_cast<int32_t>(c);
      }
    }
  });
}

template <typename T>
void ps_roi_pool_backward(const KernelContext& ctx) {
  const Shape& input_size = ctx.attr<Shape>("input_size");
  const int64_t channels = input_size[1], height = input_size[2], width = input_size[3];
  const int64_t pooled_height = ctx.attr<int64_t>("pooled_height"), pooled_width = ctx.attr<int64_t>("pooled_width");
  const T scale = static_cast<T>(ctx.attr<double>("spatial_scale"));
  const T* grad = ctx.input(0).data<T>();
  const T* rois = ctx.input(1).data<T>();
  T* grad_input = ctx.output(0).data<T>();
  const int64_t num_rois = ctx.input(1).sizes()[0];
  std::fill(grad_input, grad_input + ctx.output(0).numel(), T(0));
  check_rois(rois, num_rois, input_size[0], "ps_roi_pool_backward");
  check_rounded_coordinates(rois, num_rois, scale, true, "ps_roi_pool_backward");
  std::vector<PsPoolRoi<T>> boxes;
  boxes.reserve(static_cast<size_t>(num_rois));
  for (int64_t n = 0; n < num_rois; ++n) boxes.emplace_back(rois + 5 * n, scale, pooled_height, pooled_width, true);
  parallel_for(channels, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const PsBin bin = ps_bin(c, pooled_height, pooled_width);
      for (int64_t n = 0; n < num_rois; ++n) {
        const PsPoolBin r = boxes[n].bin(bin.ph, bin.pw, height, width);
        if (r.empty()) continue;
        T* gi = grad_input + (static_cast<int64_t>(rois[5 * n]) * channels + c) * height * width;
        const T diff = grad[n * channels + c] / static_cast<T>(r.area());
        for (int64_t h = r.h0; h < r.h1; ++h)
          for (int64_t w = r.w0; w < r.w1; ++w) gi[h * width + w] += diff;
      }
    }
  });
}

// ---- deform_conv2d -----------------------------------------------------------------------------------
// torchvision's deformable convolution as im2col + GEMM, one image at a time. With K = C/groups *
// KH * KW rows per group and P = OH * OW output positions, the column matrix holds for row
// (channel c, tap t) and column p the input value tap t of output position p reads: channel c
// sampled bilinearly at (oh * stride - pad + i * dilation + dy, ...) with (dy, dx) from the
// offset of c's offset group, times the mask when there is one (0 outside the image). Then
//   forward       out_g (O/g x P) = W_g (O/g x K) @ col_g (K x P)   (+ bias)
//   backward      colgrad_g (K x P) = W_g^T @ G_g; from it, the offset and mask gradients (per
//                 offset group, tap and position: a sum over the group's channels) and the
//                 input gradient (each column entry added back at its four bilinear corners);
//                 then dW_g += G_g @ col_g^T over the images.
// Sample positions are computed once per (offset group, tap, position) and shared by the
// group's channels. Threads: each sampling step runs in parallel over rows it alone writes
// (channels, or offset-group taps), so it does not depend on the thread count; GEMMs split
// themselves (blas.h).

// From the forward's operands input, weight and offset.
DeformGeometry deform_geometry(const KernelContext& ctx, const Tensor& x, const Tensor& w, const Tensor& offset) {
  const Shape &stride = ctx.attr<Shape>("stride"), &pad = ctx.attr<Shape>("padding"),
              &dilation = ctx.attr<Shape>("dilation");
  return {x.sizes()[1],      x.sizes()[2],      x.sizes()[3], w.sizes()[0], w.sizes()[2],
          w.sizes()[3],      offset.sizes()[2], offset.sizes()[3], stride[0], stride[1],
          pad[0],            pad[1],            dilation[0],  dilation[1], ctx.attr<int64_t>("groups"),
          ctx.attr<int64_t>("offset_groups"), ctx.attr<bool>("has_mask")};
}

// The samples of image n, (offset group, tap, position) row-major.
template <typename T>
void deform_samples(const DeformGeometry& g, const T* offset, std::vector<DeformSample<T>>& samples) {
  const int64_t P = g.P();
  samples.resize(static_cast<size_t>(g.offset_groups * g.taps() * P));
  parallel_for(g.offset_groups * g.taps(), 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t p = 0; p < P; ++p) samples[r * P + p] = deform_sample(g, offset, r, p);
  });
}

// The deformable column matrix (C * taps x P) of one image.
template <typename T>
void deform_im2col(const DeformGeometry& g, const T* image, const T* mask,
                   const std::vector<DeformSample<T>>& samples, T* col) {
  const int64_t taps = g.taps(), P = g.P();
  parallel_for(g.C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const T* in = image + c * g.H * g.W;
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t r = g.mask_row(c, t);
        const DeformSample<T>* s = samples.data() + r * P;
        T* row = col + (c * taps + t) * P;
        if (g.has_mask) {
          const T* m = mask + r * P;
          for (int64_t p = 0; p < P; ++p) row[p] = m[p] * s[p].value(in, g.W);
        } else {
          for (int64_t p = 0; p < P; ++p) row[p] = s[p].value(in, g.W);
        }
      }
    }
  });
}

template <typename T>
void deform_conv2d_forward(const KernelContext& ctx) {
  const DeformGeometry g = deform_geometry(ctx, ctx.input(0), ctx.input(1), ctx.input(2));
  const int64_t N = ctx.input(0).sizes()[0], P = g.P(), K = g.K(), Og = g.Og();
  const int64_t mask_rows = g.offset_groups * g.taps();
  const T* input = ctx.input(0).data<T>();
  const T* weight = ctx.input(1).data<T>();
  const T* offset = ctx.input(2).data<T>();
  const T* mask = g.has_mask ? ctx.input(3).data<T>() : nullptr;
  const T* bias = ctx.inputs.size() > 3u + g.has_mask ? ctx.inputs.back().data<T>() : nullptr;
  T* out = ctx.output(0).data<T>();
  std::vector<DeformSample<T>> samples;
  std::unique_ptr<T[]> col(new T[g.C * g.taps() * P]);
  for (int64_t n = 0; n < N; ++n) {
    deform_samples(g, offset + n * 2 * mask_rows * P, samples);
    deform_im2col(g, input + n * g.C * g.H * g.W, g.has_mask ? mask + n * mask_rows * P : nullptr, samples,
                  col.get());
    T* o = out + n * g.O * P;
    for (int64_t grp = 0; grp < g.groups; ++grp)
      gemm<T>(false, false, Og, P, K, weight + grp * Og * K, K, col.get() + grp * K * P, P, T(0), o + grp * Og * P, P);
    if (!bias) continue;
    for (int64_t oc = 0; oc < g.O; ++oc) {
      T* row = o + oc * P;
      for (int64_t p = 0; p < P; ++p) row[p] += bias[oc];
    }
  }
}

template <typename T>
void deform_conv2d_backward(const KernelContext& ctx) {
  // inputs: grad_output, input, weight, offset, [mask]; outputs: their gradients but grad_output's
  const Tensor& grad_output = ctx.input(0);
  const DeformGeometry g = deform_geometry(ctx, ctx.input(1), ctx.input(2), ctx.input(3));
  const int64_t N = ctx.input(1).sizes()[0], P = g.P(), K = g.K(), Og = g.Og(), taps = g.taps();
  const int64_t mask_rows = g.offset_groups * taps, plane = g.H * g.W, cpg = g.channels_per_offset_group();
  const T* go = grad_output.data<T>();
  const T* input = ctx.input(1).data<T>();
  const T* weight = ctx.input(2).data<T>();
  const T* offset = ctx.input(3).data<T>();
  const T* mask = g.has_mask ? ctx.input(4).data<T>() : nullptr;
  T* grad_input = ctx.output(0).data<T>();
  T* grad_weight = ctx.output(1).data<T>();
  T* grad_offset = ctx.output(2).data<T>();
  T* grad_mask = g.has_mask ? ctx.output(3).data<T>() : nullptr;
  std::vector<DeformSample<T>> samples;
  std::unique_ptr<T[]> col(new T[g.C * taps * P]);
  for (int64_t n = 0; n < N; ++n) {
    const T* image = input + n * g.C * plane;
    const T* m = g.has_mask ? mask + n * mask_rows * P : nullptr;
    const T* gout = go + n * g.O * P;
    deform_samples(g, offset + n * 2 * mask_rows * P, samples);
    // the column gradient
    for (int64_t grp = 0; grp < g.groups; ++grp)
      gemm<T>(true, false, K, P, Og, weight + grp * Og * K, K, gout + grp * Og * P, P, T(0), col.get() + grp * K * P, P);
    // offset and mask gradients: row (offset group, tap) sums over the group's channels in order
    T* goff = grad_offset + n * 2 * mask_rows * P;
    T* gmask = g.has_mask ? grad_mask + n * mask_rows * P : nullptr;
    parallel_for(mask_rows, 1, [&](int64_t r0, int64_t r1) {
      std::vector<T> acc(static_cast<size_t>(3 * P));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t grp = r / taps, t = r % taps;
        const DeformSample<T>* s = samples.data() + r * P;
        std::fill(acc.begin(), acc.end(), T(0));
        T *gy = acc.data(), *gx = gy + P, *gm = gx + P;
        for (int64_t c = grp * cpg; c < (grp + 1) * cpg; ++c) {
          const T* in = image + c * plane;
          const T* colg = col.get() + (c * taps + t) * P;
          for (int64_t p = 0; p < P; ++p)
            s[p].add_coordinate_grads(in, g.W, g.has_mask ? m[r * P + p] : T(1), colg[p], g.has_mask, gy[p], gx[p],
                                      gm[p]);
        }
        T* row = goff + g.dy_row(r) * P;
        std::copy(gy, gy + P, row);
        std::copy(gx, gx + P, row + P);
        if (g.has_mask) std::copy(gm, gm + P, gmask + r * P);
      }
    });
    // input gradient: each column entry back at its sample's four corners
    T* gimage = grad_input + n * g.C * plane;
    parallel_for(g.C, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        T* gi = gimage + c * plane;
        std::fill(gi, gi + plane, T(0));
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t r = g.mask_row(c, t);
          const DeformSample<T>* s = samples.data() + r * P;
          const T* colg = col.get() + (c * taps + t) * P;
          for (int64_t p = 0; p < P; ++p)
            s[p].scatter(gi, g.W, g.has_mask ? m[r * P + p] : T(1), colg[p], accumulate<T>);
        }
      }
    });
    // weight gradient: the image's columns again, into the same buffer
    deform_im2col(g, image, m, samples, col.get());
    for (int64_t grp = 0; grp < g.groups; ++grp)
      gemm<T>(false, true, Og, K, P, gout + grp * Og * P, P, col.get() + grp * K * P, P, n == 0 ? T(0) : T(1),
              grad_weight + grp * Og * K, K);
  }
}

template <void (*F32)(const KernelContext&), void (*F64)(const KernelContext&)>
void dispatch(KernelContext& ctx) {
  check_contiguous(ctx);
  dispatch_float32_64<F32, F64>(ctx);
}

// The kernel functions core/opdefs/vision.yaml names (the CUDA plugin's have the same names).
constexpr KernelFn nms_entry = dispatch<nms_kernel<float>, nms_kernel<double>>;
constexpr KernelFn roi_align_entry = dispatch<roi_align_forward<float>, roi_align_forward<double>>;
constexpr KernelFn roi_align_backward_entry = dispatch<roi_align_backward<float>, roi_align_backward<double>>;
constexpr KernelFn roi_pool_entry = dispatch<roi_pool_forward<float>, roi_pool_forward<double>>;
constexpr KernelFn roi_pool_backward_entry = dispatch<roi_pool_backward<float>, roi_pool_backward<double>>;
constexpr KernelFn ps_roi_align_entry = dispatch<ps_roi_align_forward<float>, ps_roi_align_forward<double>>;
constexpr KernelFn ps_roi_align_backward_entry =
    dispatch<ps_roi_align_backward<float>, ps_roi_align_backward<double>>;
constexpr KernelFn ps_roi_pool_entry = dispatch<ps_roi_pool_forward<float>, ps_roi_pool_forward<double>>;
constexpr KernelFn ps_roi_pool_backward_entry = dispatch<ps_roi_pool_backward<float>, ps_roi_pool_backward<double>>;
constexpr KernelFn deform_conv2d_entry = dispatch<deform_conv2d_forward<float>, deform_conv2d_forward<double>>;
constexpr KernelFn deform_conv2d_backward_entry =
    dispatch<deform_conv2d_backward<float>, deform_conv2d_backward<double>>;

}  // namespace

void register_vision_kernels(Registrar& reg) {
  // core/opdefs/vision.yaml names each op's kernel function and dtypes.
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) reg.kernel(name, DeviceType::CPU, {PF_OPDEFS_UNPAREN cpu_dtypes}, fn);
  PF_OPDEFS_VISION_KERNELS(PF_X)
#undef PF_X
}

}  // namespace plugflow::cpu
