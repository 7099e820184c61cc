// torchvision's operators (docs/kernels.md, "torchvision operators"): nms, roi_align,
// roi_pool and their backwards, float32/float64, contiguous inputs and outputs.
//
// The arithmetic is torchvision 0.14's CPU kernels' (csrc/ops/cpu/*_kernel.cpp), expression
// for expression and in the same accumulation order, so results agree bit for bit. Unlike them,
// every value read from rois is checked before it is used as an index: a batch index outside
// the input raises IndexError and a non-finite coordinate (or an adaptive sampling grid too
// large for an int) raises RuntimeError, where torchvision reads out of bounds.
//
// Threads: the forwards run rois in parallel (each writes its own outputs); the backwards run
// channels in parallel, each thread visiting rois and bins in torchvision's order, so every
// gradient element sums its contributions in the same order as torchvision's serial loop.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels.h"
#include "loops.h"

namespace plugflow::cpu {
namespace {

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
  std::vector<T> x1(n), y1(n), x2(n), y2(n), areas(n);
  for (int64_t i = 0; i < n; ++i) {
    x1[i] = dets[4 * i];
    y1[i] = dets[4 * i + 1];
    x2[i] = dets[4 * i + 2];
    y2[i] = dets[4 * i + 3];
    areas[i] = (x2[i] - x1[i]) * (y2[i] - y1[i]);
  }
  // scores.sort(stable=true, descending=true): NaN counts as the largest, ties keep index order
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [scores](int64_t a, int64_t b) {
    const T sa = scores[a], sb = scores[b];
    return (std::isnan(sa) && !std::isnan(sb)) || sa > sb;
  });
  std::vector<uint8_t> suppressed(n, 0);
  int64_t* keep = ctx.output(0).data<int64_t>();
  int64_t num_to_keep = 0;
  for (int64_t oi = 0; oi < n; ++oi) {
    const int64_t i = order[oi];
    if (suppressed[i]) continue;
    keep[num_to_keep++] = i;
    const T ix1 = x1[i], iy1 = y1[i], ix2 = x2[i], iy2 = y2[i], iarea = areas[i];
    for (int64_t oj = oi + 1; oj < n; ++oj) {
      const int64_t j = order[oj];
      if (suppressed[j]) continue;
      const T xx1 = std::max(ix1, x1[j]), yy1 = std::max(iy1, y1[j]);
      const T xx2 = std::min(ix2, x2[j]), yy2 = std::min(iy2, y2[j]);
      const T w = std::max(static_cast<T>(0), xx2 - xx1), h = std::max(static_cast<T>(0), yy2 - yy1);
      const T inter = w * h;
      const T ovr = inter / (iarea + areas[j] - inter);
      if (ovr > iou_threshold) suppressed[j] = 1;
    }
  }
  std::fill(keep + num_to_keep, keep + n, int64_t{-1});
  ctx.output(1).data<int64_t>()[0] = num_to_keep;
}

// ---- rois ------------------------------------------------------------------------------------------

// Roi k's batch index as torchvision reads it (truncated to int), checked against the batch.
template <typename T>
int64_t roi_batch_index(const T* roi, int64_t k, int64_t batch, const char* op) {
  const T b = roi[0];
  PF_CHECK_T(b > T(-1) && b < static_cast<T>(batch), IndexError, op, ": rois[", k, ", 0] = ", b,
             " is not a batch index of an input with ", batch, " images");
  for (int q = 1; q < 5; ++q)
    PF_CHECK(std::isfinite(roi[q]), op, ": rois[", k, ", ", q, "] = ", roi[q], " is not a finite coordinate");
  return static_cast<int64_t>(b);
}

// Checks every roi before a kernel starts (so no thread throws halfway through).
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

RoiAlignParams roi_align_params(const KernelContext& ctx, const Shape& input_size) {
  return {input_size[1],
          input_size[2],
          input_size[3],
          ctx.attr<int64_t>("pooled_height"),
          ctx.attr<int64_t>("pooled_width"),
          ctx.attr<int64_t>("sampling_ratio"),
          ctx.attr<double>("spatial_scale"),
          ctx.attr<bool>("aligned")};
}

// One roi's geometry in torchvision's arithmetic (spatial_scale is rounded to T first, as the
// kernels take it as `const T&`).
template <typename T>
struct RoiAlignBox {
  T start_w, start_h, bin_w, bin_h;
  int64_t grid_h, grid_w;

  RoiAlignBox(const T* roi, const RoiAlignParams& p) {
    const T scale = static_cast<T>(p.spatial_scale);
    const T offset = p.aligned ? T(0.5) : T(0.0);
    start_w = roi[1] * scale - offset;
    start_h = roi[2] * scale - offset;
    const T end_w = roi[3] * scale - offset, end_h = roi[4] * scale - offset;
    T roi_width = end_w - start_w, roi_height = end_h - start_h;
    if (!p.aligned) {  // malformed rois count as 1 x 1
      roi_width = std::max(roi_width, T(1));
      roi_height = std::max(roi_height, T(1));
    }
    bin_h = roi_height / static_cast<T>(p.pooled_height);
    bin_w = roi_width / static_cast<T>(p.pooled_width);
    grid_h = p.sampling_ratio > 0 ? p.sampling_ratio : grid_size(roi_height / p.pooled_height);
    grid_w = p.sampling_ratio > 0 ? p.sampling_ratio : grid_size(roi_width / p.pooled_width);
  }
  // ceil(v) as the int torchvision stores it; a grid of more than INT_MAX samples is refused.
  static int64_t grid_size(T v) {
    const T c = std::ceil(v);
    PF_CHECK(c <= static_cast<T>(INT_MAX), "roi_align: a roi spans ", c,
             " samples per bin (sampling_ratio <= 0 samples ceil(roi size / output size)); too large");
    return static_cast<int64_t>(c);
  }
  T y(int64_t ph, int64_t iy) const {
    return start_h + static_cast<T>(ph) * bin_h +
           static_cast<T>(static_cast<float>(iy) + .5f) * bin_h / static_cast<T>(grid_h);
  }
  T x(int64_t pw, int64_t ix) const {
    return start_w + static_cast<T>(pw) * bin_w +
           static_cast<T>(static_cast<float>(ix) + .5f) * bin_w / static_cast<T>(grid_w);
  }
};

// The four taps of a bilinear sample at (y, x) (torchvision's pre_calc / bilinear_interpolate_
// gradient): offsets into an H * W plane and weights; all weights 0 outside [-1, H] x [-1, W]
// (where a sample lands when a roi's extent overflows to infinity).
template <typename T>
struct Taps {
  int64_t pos[4] = {0, 0, 0, 0};
  T w[4] = {0, 0, 0, 0};
  bool inside = false;

  Taps(T y, T x, int64_t height, int64_t width) {
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
};

template <typename T>
void roi_align_forward(const KernelContext& ctx) {
  const Tensor& input_t = ctx.input(0);
  const RoiAlignParams p = roi_align_params(ctx, input_t.sizes());
  const T* input = input_t.data<T>();
  const T* rois = ctx.input(1).data<T>();
  T* output = ctx.output(0).data<T>();
  const int64_t num_rois = ctx.input(1).sizes()[0], batch = input_t.sizes()[0];
  const int64_t plane = p.height * p.width, bins = p.pooled_height * p.pooled_width;
  check_rois(rois, num_rois, batch, "roi_align");
  parallel_for(num_rois, 1, [&](int64_t begin, int64_t end) {
    std::vector<Taps<T>> taps;
    for (int64_t n = begin; n < end; ++n) {
      const T* roi = rois + 5 * n;
      const int64_t b = static_cast<int64_t>(roi[0]);
      const RoiAlignBox<T> box(roi, p);
      const int64_t samples = std::max<int64_t>(box.grid_h, 0) * std::max<int64_t>(box.grid_w, 0);
      // the taps are shared by all channels (torchvision's pre_calc)
      taps.clear();
      taps.reserve(static_cast<size_t>(bins * samples));
      for (int64_t ph = 0; ph < p.pooled_height; ++ph)
        for (int64_t pw = 0; pw < p.pooled_width; ++pw)
          for (int64_t iy = 0; iy < box.grid_h; ++iy) {
            const T y = box.y(ph, iy);
            for (int64_t ix = 0; ix < box.grid_w; ++ix) taps.emplace_back(y, box.x(pw, ix), p.height, p.width);
          }
      const T count = static_cast<T>(std::max<int64_t>(box.grid_h * box.grid_w, 1));
      for (int64_t c = 0; c < p.channels; ++c) {
        const T* in = input + (b * p.channels + c) * plane;
        T* out = output + (n * p.channels + c) * bins;
        const Taps<T>* tap = taps.data();
        for (int64_t bin = 0; bin < bins; ++bin) {
          T val = 0.;
          for (int64_t s = 0; s < samples; ++s, ++tap)
            val += tap->w[0] * in[tap->pos[0]] + tap->w[1] * in[tap->pos[1]] + tap->w[2] * in[tap->pos[2]] +
                   tap->w[3] * in[tap->pos[3]];
          out[bin] = val / count;
        }
      }
    }
  });
}

template <typename T>
void roi_align_backward(const KernelContext& ctx) {
  const Shape& input_size = ctx.attr<Shape>("input_size");
  const RoiAlignParams p = roi_align_params(ctx, input_size);
  const T* grad = ctx.input(0).data<T>();
  const T* rois = ctx.input(1).data<T>();
  T* grad_input = ctx.output(0).data<T>();
  const int64_t num_rois = ctx.input(1).sizes()[0];
  const int64_t plane = p.height * p.width, bins = p.pooled_height * p.pooled_width;
  std::fill(grad_input, grad_input + ctx.output(0).numel(), T(0));
  check_rois(rois, num_rois, input_size[0], "roi_align_backward");
  std::vector<RoiAlignBox<T>> boxes;
  boxes.reserve(static_cast<size_t>(num_rois));
  for (int64_t n = 0; n < num_rois; ++n) boxes.emplace_back(rois + 5 * n, p);
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
              for (int64_t ix = 0; ix < box.grid_w; ++ix) {
                const Taps<T> t(y, box.x(pw, ix), p.height, p.width);
                if (!t.inside) continue;
                for (int q = 0; q < 4; ++q) gi[t.pos[q]] += g_bin * t.w[q] / count;
              }
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
  // round(coordinate * scale) must fit the int torchvision keeps it in
  for (int64_t n = 0; n < num_rois; ++n)
    for (int q = 1; q < 5; ++q) {
      const T v = std::round(rois[5 * n + q] * scale);
      PF_CHECK(std::abs(v) < static_cast<T>(INT_MAX / 4), "roi_pool: rois[", n, ", ", q, "] * spatial_scale = ", v,
               " is too large a coordinate");
    }
  parallel_for(num_rois, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const T* roi = rois + 5 * n;
      const int64_t b = static_cast<int64_t>(roi[0]);
      const int start_w = static_cast<int>(std::round(roi[1] * scale));
      const int start_h = static_cast<int>(std::round(roi[2] * scale));
      const int end_w = static_cast<int>(std::round(roi[3] * scale));
      const int end_h = static_cast<int>(std::round(roi[4] * scale));
      const int roi_width = std::max(end_w - start_w + 1, 1), roi_height = std::max(end_h - start_h + 1, 1);
      const T bin_h = static_cast<T>(roi_height) / static_cast<T>(pooled_height);
      const T bin_w = static_cast<T>(roi_width) / static_cast<T>(pooled_width);
      for (int64_t ph = 0; ph < pooled_height; ++ph)
        for (int64_t pw = 0; pw < pooled_width; ++pw) {
          const int64_t h0 = static_cast<int64_t>(std::floor(static_cast<T>(ph) * bin_h)) + start_h;
          const int64_t w0 = static_cast<int64_t>(std::floor(static_cast<T>(pw) * bin_w)) + start_w;
          const int64_t h1 = static_cast<int64_t>(std::ceil(static_cast<T>(ph + 1) * bin_h)) + start_h;
          const int64_t w1 = static_cast<int64_t>(std::ceil(static_cast<T>(pw + 1) * bin_w)) + start_w;
          const int64_t hstart = std::clamp<int64_t>(h0, 0, height), hend = std::clamp<int64_t>(h1, 0, height);
          const int64_t wstart = std::clamp<int64_t>(w0, 0, width), wend = std::clamp<int64_t>(w1, 0, width);
          const bool is_empty = hend <= hstart || wend <= wstart;
          for (int64_t c = 0; c < channels; ++c) {
            T maxval = is_empty ? T(0) : static_cast<T>(-FLT_MAX);
            int32_t maxidx = -1;  // nothing pooled: no gradient
            const T* in = input + (b * channels + c) * height * width;
            for (int64_t h = hstart; h < hend; ++h)
              for (int64_t w = wstart; w < wend; ++w) {
                const int64_t idx = h * width + w;
                if (in[idx] > maxval) {
                  maxval = in[idx];
                  maxidx = static_cast<int32_t>(idx);
                }
              }
            const int64_t index = ((n * channels + c) * pooled_height + ph) * pooled_width + pw;
            output[index] = maxval;
            argmax[index] = maxidx;
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

template <void (*F32)(const KernelContext&), void (*F64)(const KernelContext&)>
void dispatch(KernelContext& ctx) {
  check_contiguous(ctx);
  dispatch_float32_64<F32, F64>(ctx);
}

}  // namespace

void register_vision_kernels(Registrar& reg) {
  const auto floats = {DType::Float32, DType::Float64};
  reg.kernel("nms", DeviceType::CPU, floats, dispatch<nms_kernel<float>, nms_kernel<double>>);
  reg.kernel("roi_align", DeviceType::CPU, floats, dispatch<roi_align_forward<float>, roi_align_forward<double>>);
  reg.kernel("roi_align_backward", DeviceType::CPU, floats,
             dispatch<roi_align_backward<float>, roi_align_backward<double>>);
  reg.kernel("roi_pool", DeviceType::CPU, floats, dispatch<roi_pool_forward<float>, roi_pool_forward<double>>);
  reg.kernel("roi_pool_backward", DeviceType::CPU, floats,
             dispatch<roi_pool_backward<float>, roi_pool_backward<double>>);
}

}  // namespace plugflow::cpu
