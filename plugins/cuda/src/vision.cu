// torchvision's operators (docs/kernels.md, "torchvision operators") on CUDA: nms, roi_align,
// roi_pool, ps_roi_align, ps_roi_pool, deform_conv2d and their backwards, float32/float64,
// contiguous inputs and outputs, as the CPU plugin.
//
// The arithmetic is plugins/common/roi_math.h, the CPU kernels' own (torchvision 0.14's CPU
// expressions), and this file is compiled without FMA contraction, so the forwards give the
// CPU's bits; the backwards add into a zeroed input gradient with atomicAdd, in a
// schedule-dependent order (equal to the CPU's sums within rounding).
//
// The values read from rois are checked as on the CPU, before any kernel runs: the rois (K x 5
// values) are copied to the host for that, which waits for the stream. roi_pool_backward checks
// its argmax on the device and reads back the first bad position only. deform_conv2d's operand
// shapes are checked by the core before any kernel (as for the CPU kernel); a NaN or far-away
// offset samples nothing.
//
// nms is torchvision's CUDA scheme: the order of the scores is taken on the host (the scores are
// copied there), a kernel computes the "suppresses" bit of every pair (i before j in that order)
// as 64-bit masks, and the greedy pass over the masks runs on the host.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernel_common.h"
#include "launchers.h"
#include "opdefs.h"
#include "roi_math.h"
#include "types.cuh"

namespace plugflow::cuda {
namespace {

namespace rm = roi_math;

#define PF_FOR_EACH(i, n)                                                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                    \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

struct AtomicAdd {
  template <typename T>
  __host__ __device__ void operator()(T* where, T v) const {
#ifdef __CUDA_ARCH__
    atomicAdd(where, v);
#else
    *where += v;
#endif
  }
};

template <typename Kernel, typename... Args>
void launch(const KernelScope& scope, int64_t n, Kernel kernel, Args... args) {
  if (n == 0) return;
  kernel<<<scope.blocks_for(n), kBlockThreads, 0, scope.stream>>>(n, args...);
  PF_CUDA_CHECK_LAUNCH();
}

// A device tensor's values on the host (waits for the stream).
template <typename T>
std::vector<T> to_host(const Tensor& t, cudaStream_t stream) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  if (!v.empty()) {
    PF_CUDA_CHECK(cudaMemcpyAsync(v.data(), t.data_ptr(), v.size() * sizeof(T), cudaMemcpyDeviceToHost, stream));
    PF_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return v;
}

// Host values into a device tensor (waits for the stream, so `v` may go away after).
template <typename T>
void from_host(const Tensor& t, const std::vector<T>& v, cudaStream_t stream) {
  if (v.empty()) return;
  PF_CUDA_CHECK(cudaMemcpyAsync(t.data_ptr(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  PF_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void zero(const Tensor& t, cudaStream_t stream) {
  if (t.numel() > 0)
    PF_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, static_cast<size_t>(t.numel()) * t.itemsize(), stream));
}

// Runs f(T{}) for the call's dtype (float32 or float64); inputs and outputs must be contiguous.
template <typename F>
void dispatch(KernelContext& ctx, F&& f) {
  for (const Tensor& t : ctx.inputs)
    PF_CHECK_T(t.is_contiguous(), ValueError, "cuda '", ctx.op.name, "' reads contiguous inputs");
  for (const Tensor& t : ctx.outputs)
    PF_CHECK_T(t.is_contiguous(), ValueError, "cuda '", ctx.op.name, "' writes contiguous outputs");
  const DType t = ctx.input(0).dtype();
  if (t == DType::Float32) f(float{});
  else if (t == DType::Float64) f(double{});
  else throw_unsupported_dtype(ctx, t);
}

// Splits a flat index over (roi n, channel c, bin ph, bin pw).
struct Bin {
  int64_t n, c, ph, pw;
};
__device__ Bin bin_of(int64_t i, int64_t C, int64_t PH, int64_t PW) {
  Bin b;
  b.pw = i % PW;
  i /= PW;
  b.ph = i % PH;
  i /= PH;
  b.c = i % C;
  b.n = i / C;
  return b;
}

// ---- nms ----------------------------------------------------------------------------------------

constexpr int64_t kMaskBits = 64;

// mask[oi * blocks + cb] bit k: box order[oi] suppresses box order[cb * 64 + k] (later in order).
template <typename T>
__global__ void nms_mask_kernel(int64_t total, const T* sorted, int64_t n, int64_t blocks, double threshold,
                                unsigned long long* mask) {
  PF_FOR_EACH(t, total) {
    const int64_t oi = t / blocks, cb = t % blocks;
    const T* a = sorted + 4 * oi;
    const T area_a = rm::box_area(a);
    unsigned long long bits = 0;
    for (int64_t k = 0; k < kMaskBits; ++k) {
      const int64_t oj = cb * kMaskBits + k;
      if (oj <= oi || oj >= n) continue;
      const T* b = sorted + 4 * oj;
      if (rm::suppresses(a, area_a, b, rm::box_area(b), threshold)) bits |= 1ull << k;
    }
    mask[t] = bits;
  }
}

void nms_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero_value) {
    using T = decltype(zero_value);
    const Tensor& boxes = ctx.input(0);
    const int64_t n = boxes.sizes()[0];
    const std::vector<T> dets = to_host<T>(boxes, scope.stream);
    const std::vector<T> scores = to_host<T>(ctx.input(1), scope.stream);
    const std::vector<int64_t> order = rm::nms_order(scores.data(), n);
    std::vector<T> sorted(static_cast<size_t>(4 * n));
    for (int64_t oi = 0; oi < n; ++oi) std::memcpy(&sorted[4 * oi], &dets[4 * order[oi]], 4 * sizeof(T));

    const int64_t blocks = (n + kMaskBits - 1) / kMaskBits;
    std::vector<unsigned long long> mask(static_cast<size_t>(n * blocks));
    if (n > 0) {
      Workspace sorted_dev(scope.device, sorted.size() * sizeof(T));
      Workspace mask_dev(scope.device, mask.size() * sizeof(unsigned long long));
      PF_CUDA_CHECK(cudaMemcpyAsync(sorted_dev.as<T>(), sorted.data(), sorted.size() * sizeof(T),
                                    cudaMemcpyHostToDevice, scope.stream));
      launch(scope, n * blocks, nms_mask_kernel<T>, sorted_dev.as<const T>(), n, blocks,
             ctx.attr<double>("iou_threshold"), mask_dev.as<unsigned long long>());
      PF_CUDA_CHECK(cudaMemcpyAsync(mask.data(), mask_dev.as<void>(), mask.size() * sizeof(unsigned long long),
                                    cudaMemcpyDeviceToHost, scope.stream));
      PF_CUDA_CHECK(cudaStreamSynchronize(scope.stream));
    }

    // The greedy pass: a box is kept unless a kept box before it suppresses it.
    std::vector<unsigned long long> removed(static_cast<size_t>(blocks), 0);
    std::vector<int64_t> keep(static_cast<size_t>(n), -1);
    int64_t kept = 0;
    for (int64_t oi = 0; oi < n; ++oi) {
      if (removed[oi / kMaskBits] >> (oi % kMaskBits) & 1ull) continue;
      keep[kept++] = order[oi];
      for (int64_t cb = 0; cb < blocks; ++cb) removed[cb] |= mask[oi * blocks + cb];
    }
    from_host(ctx.output(0), keep, scope.stream);
    from_host(ctx.output(1), std::vector<int64_t>{kept}, scope.stream);
  });
}

// ---- roi_align ------------------------------------------------------------------------------------

// The CPU's checks of the rois (batch indices, finite coordinates, adaptive grids).
template <typename T>
void check_roi_align_rois(const Tensor& rois, int64_t batch, const rm::RoiAlignParams& p, const char* op,
                          cudaStream_t stream) {
  const std::vector<T> host = to_host<T>(rois, stream);
  const int64_t k = rois.sizes()[0];
  rm::check_rois(host.data(), k, batch, op);
  rm::check_roi_align_grids(host.data(), k, p);
}

// One thread per output element (roi, channel, bin): the bin's samples in the CPU's order.
template <typename T>
__global__ void roi_align_forward_kernel(int64_t total, const T* input, const T* rois, rm::RoiAlignParams p, T* out) {
  PF_FOR_EACH(i, total) {
    const Bin o = bin_of(i, p.channels, p.pooled_height, p.pooled_width);
    const T* roi = rois + 5 * o.n;
    const int64_t b = static_cast<int64_t>(roi[0]);
    const rm::RoiAlignBox<T> box(roi, p);
    const T* in = input + (b * p.channels + o.c) * p.height * p.width;
    T val = 0.;
    const bool empty_image = p.height == 0 || p.width == 0;  // every sample reads 0
    for (int64_t iy = 0; iy < (empty_image ? 0 : box.grid_h); ++iy) {
      const T y = box.y(o.ph, iy);
      for (int64_t ix = 0; ix < box.grid_w; ++ix) val += rm::Taps<T>(y, box.x(o.pw, ix), p.height, p.width).value(in);
    }
    const int64_t count = box.grid_h * box.grid_w;
    out[i] = val / static_cast<T>(count > 1 ? count : 1);
  }
}

template <typename T>
__global__ void roi_align_backward_kernel(int64_t total, const T* grad, const T* rois, rm::RoiAlignParams p,
                                          T* grad_input) {
  PF_FOR_EACH(i, total) {
    const Bin o = bin_of(i, p.channels, p.pooled_height, p.pooled_width);
    const T* roi = rois + 5 * o.n;
    const int64_t b = static_cast<int64_t>(roi[0]);
    const rm::RoiAlignBox<T> box(roi, p);
    T* gi = grad_input + (b * p.channels + o.c) * p.height * p.width;
    const T g_bin = grad[i], count = static_cast<T>(box.grid_h * box.grid_w);
    for (int64_t iy = 0; iy < box.grid_h; ++iy) {
      const T y = box.y(o.ph, iy);
      for (int64_t ix = 0; ix < box.grid_w; ++ix)
        rm::Taps<T>(y, box.x(o.pw, ix), p.height, p.width).scatter(gi, g_bin, count, AtomicAdd{});
    }
  }
}

void roi_align_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero_value) {
    using T = decltype(zero_value);
    const Tensor &input = ctx.input(0), &rois = ctx.input(1);
    const rm::RoiAlignParams p = rm::roi_align_params(ctx, input.sizes(), ctx.attr<bool>("aligned"));
    check_roi_align_rois<T>(rois, input.sizes()[0], p, "roi_align", scope.stream);
    launch(scope, ctx.output(0).numel(), roi_align_forward_kernel<T>, static_cast<const T*>(input.data_ptr()),
           static_cast<const T*>(rois.data_ptr()), p, static_cast<T*>(ctx.output(0).data_ptr()));
  });
}

void roi_align_backward_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero_value) {
    using T = decltype(zero_value);
    const Tensor &grad = ctx.input(0), &rois = ctx.input(1);
    const Shape& input_size = ctx.attr<Shape>("input_size");
    const rm::RoiAlignParams p = rm::roi_align_params(ctx, input_size, ctx.attr<bool>("aligned"));
    zero(ctx.output(0), scope.stream);
    check_roi_align_rois<T>(rois, input_size[0], p, "roi_align_backward", scope.stream);
    launch(scope, grad.numel(), roi_align_backward_kernel<T>, static_cast<const T*>(grad.data_ptr()),
           static_cast<const T*>(rois.data_ptr()), p, static_cast<T*>(ctx.output(0).data_ptr()));
  });
}

// ---- roi_pool -------------------------------------------------------------------------------------

struct RoiPoolParams {
  int64_t channels, height, width, pooled_height, pooled_width;
};

template <typename T>
__global__ void roi_pool_forward_kernel(int64_t total, const T* input, const T* rois, RoiPoolParams p, T scale, T* out,
                                        int32_t* argmax) {
  PF_FOR_EACH(i, total) {
    const Bin o = bin_of(i, p.channels, p.pooled_height, p.pooled_width);
    const T* roi = rois + 5 * o.n;
    const int64_t b = static_cast<int64_t>(roi[0]);
    const rm::RoiPoolBox<T> box(roi, scale, p.pooled_height, p.pooled_width);
    int64_t h0, h1, w0, w1;
    box.window(o.ph, o.pw, p.height, p.width, h0, h1, w0, w1);
    out[i] = rm::pool_max(input + (b * p.channels + o.c) * p.height * p.width, p.width, h0, h1, w0, w1, argmax[i]);
  }
}

// The first position k whose argmax is outside [-1, plane) (first_bad starts at all ones).
__global__ void check_argmax_kernel(int64_t total, const int32_t* argmax, int64_t plane,
                                    unsigned long long* first_bad) {
  PF_FOR_EACH(k, total) {
    if (argmax[k] < -1 || argmax[k] >= plane) atomicMin(first_bad, static_cast<unsigned long long>(k));
  }
}

template <typename T>
__global__ void roi_pool_backward_kernel(int64_t total, const T* grad, const T* rois, const int32_t* argmax,
                                         int64_t channels, int64_t plane, int64_t bins, T* grad_input) {
  PF_FOR_EACH(i, total) {
    if (argmax[i] == -1) continue;
    const int64_t n = i / (channels * bins), c = (i / bins) % channels;
    const int64_t b = static_cast<int64_t>(rois[5 * n]);
    atomicAdd(grad_input + (b * channels + c) * plane + argmax[i], grad[i]);
  }
}

void roi_pool_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero_value) {
    using T = decltype(zero_value);
    const Tensor &input = ctx.input(0), &rois = ctx.input(1);
    const RoiPoolParams p{input.sizes()[1], input.sizes()[2], input.sizes()[3], ctx.attr<int64_t>("pooled_height"),
                          ctx.attr<int64_t>("pooled_width")};
    const T scale = static_cast<T>(ctx.attr<double>("spatial_scale"));
    const std::vector<T> host = to_host<T>(rois, scope.stream);
    rm::check_rois(host.data(), rois.sizes()[0], input.sizes()[0], "roi_pool");
    rm::check_rounded_coordinates(host.data(), rois.sizes()[0], scale, false, "roi_pool");
    launch(scope, ctx.output(0).numel(), roi_pool_forward_kernel<T>, static_cast<const T*>(input.data_ptr()),
           static_cast<const T*>(rois.data_ptr()), p, scale, static_cast<T*>(ctx.output(0).data_ptr()),
           static_cast<int32_t*>(ctx.output(1).data_ptr()));
  });
}

void roi_pool_backward_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero_value) {
    using T = decltype(zero_value);
    const Tensor &grad = ctx.input(0), &rois = ctx.input(1), &argmax = ctx.input(2);
    const Shape& input_size = ctx.attr<Shape>("input_size");
    const int64_t channels = input_size[1], plane = input_size[2] * input_size[3];
    const int64_t bins = ctx.attr<int64_t>("pooled_height") * ctx.attr<int64_t>("pooled_width");
    zero(ctx.output(0), scope.stream);
    const std::vector<T> host = to_host<T>(rois, scope.stream);
    rm::check_rois(host.data(), rois.sizes()[0], input_size[0], "roi_pool_backward");
    const int32_t* argmax_dev = static_cast<const int32_t*>(argmax.data_ptr());
    if (argmax.numel() > 0) {
      Workspace first_bad(scope.device, sizeof(unsigned long long));
      PF_CUDA_CHECK(cudaMemsetAsync(first_bad.as<void>(), 0xff, sizeof(unsigned long long), scope.stream));
      launch(scope, argmax.numel(), check_argmax_kernel, argmax_dev, plane, first_bad.as<unsigned long long>());
      unsigned long long k = 0;
      PF_CUDA_CHECK(cudaMemcpyAsync(&k, first_bad.as<void>(), sizeof(k), cudaMemcpyDeviceToHost, scope.stream));
      PF_CUDA_CHECK(cudaStreamSynchronize(scope.stream));
      if (k != ~0ull) {
        int32_t value = 0;
        PF_CUDA_CHECK(cudaMemcpy(&value, argmax_dev + k, sizeof(value), cudaMemcpyDeviceToHost));
        PF_THROW(IndexError, "roi_pool_backward: argmax ", value, " is outside the ", plane,
                 " positions of a channel");
      }
    }
    launch(scope, grad.numel(), roi_pool_backward_kernel<T>, static_cast<const T*>(grad.data_ptr()),
           static_cast<const T*>(rois.data_ptr()), argmax_dev, channels, plane, bins,
           static_cast<T*>(ctx.output(0).data_ptr()));
  });
}

// ---- ps_roi_align / ps_roi_pool ------------------------------------------------------------------
// One thread per output element n * C + c (C input channels): input channel c of roi n, pooled
// into bin rm::ps_bin(c) (plugins/common/roi_math.h); the backwards run a thread per gradient
// element and add into the zeroed input gradient with atomicAdd.

template <typename T>
__global__ void ps_roi_align_forward_kernel(int64_t total, const T* input, const T* rois, rm::RoiAlignParams p, T* out,
                                            int32_t* channel_mapping) {
  PF_FOR_EACH(i, total) {
    const int64_t n = i / p.channels, c = i % p.channels;
    const T* roi = rois + 5 * n;
    const int64_t b = static_cast<int64_t>(roi[0]);
    const rm::RoiAlignBox<T> box(roi, p);
    const rm::PsBin bin = rm::ps_bin(c, p.pooled_height, p.pooled_width);
    const T* in = input + (b * p.channels + c) * p.height * p.width;
    T val = 0.;
    const bool empty_image = p.height == 0 || p.width == 0;  // every sample reads 0
    for (int64_t iy = 0; iy < (empty_image ? 0 : box.grid_h); ++iy) {
      const T y = box.y(bin.ph, iy);
      for (int64_t ix = 0; ix < box.grid_w; ++ix)
        val += rm::Taps<T>(y, box.x(bin.pw, ix), p.height, p.width).value(in);
    }
    out[i] = val / rm::ps_align_count(box);
    channel_mapping[i] = static_cast<int32_t>(c);
  }
}

template <typename T>
__global__ void ps_roi_align_backward_kernel(int64_t total, const T* grad, const T* rois, rm::RoiAlignParams p,
                                             T* grad_input) {
  PF_FOR_EACH(i, total) {
    const int64_t n = i / p.channels, c = i % p.channels;
    const T* roi = rois + 5 * n;
    const int64_t b = static_cast<int64_t>(roi[0]);
    const rm::RoiAlignBox<T> box(roi, p);
    const rm::PsBin bin = rm::ps_bin(c, p.pooled_height, p.pooled_width);
    T* gi = grad_input + (b * p.channels + c) * p.height * p.width;
    const T g_bin = grad[i], count = rm::ps_align_count(box);
    for (int64_t iy = 0; iy < box.grid_h; ++iy) {
      const T y = box.y(bin.ph, iy);
      for (int64_t ix = 0; ix < box.grid_w; ++ix)
        rm::Taps<T>(y, box.x(bin.pw, ix), p.height, p.width).scatter(gi, g_bin, count, AtomicAdd{});
    }
  }
}

void ps_roi_align_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero_value) {
    using T = decltype(zero_value);
    const Tensor &input = ctx.input(0), &rois = ctx.input(1);
    const rm::RoiAlignParams p = rm::roi_align_params(ctx, input.sizes(), true);
    check_roi_align_rois<T>(rois, input.sizes()[0], p, "ps_roi_align", scope.stream);
    launch(scope, rois.sizes()[0] * p.channels, ps_roi_align_forward_kernel<T>,
           static_cast<const T*>(input.data_ptr()), static_cast<const T*>(rois.data_ptr()), p,
           static_cast<T*>(ctx.output(0).data_ptr()), static_cast<int32_t*>(ctx.output(1).data_ptr()));
  });
}

void ps_roi_align_backward_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero_value) {
    using T = decltype(zero_value);
    const Tensor &grad = ctx.input(0), &rois = ctx.input(1);
    const Shape& input_size = ctx.attr<Shape>("input_size");
    const rm::RoiAlignParams p = rm::roi_align_params(ctx, input_size, true);
    zero(ctx.output(0), scope.stream);
    check_roi_align_rois<T>(rois, input_size[0], p, "ps_roi_align_backward", scope.stream);
    launch(scope, rois.sizes()[0] * p.channels, ps_roi_align_backward_kernel<T>,
           static_cast<const T*>(grad.data_ptr()), static_cast<const T*>(rois.data_ptr()), p,
           static_cast<T*>(ctx.output(0).data_ptr()));
  });
}

template <typename T>
__global__ void ps_roi_pool_forward_kernel(int64_t total, const T* input, const T* rois, RoiPoolParams p, T scale,
                                           T* out, int32_t* channel_mapping) {
  PF_FOR_EACH(i, total) {
    const int64_t n = i / p.channels, c = i % p.channels;
    const T* roi = rois + 5 * n;
    const int64_t b = static_cast<int64_t>(roi[0]);
    const rm::PsPoolRoi<T> box(roi, scale, p.pooled_height, p.pooled_width, false);
    const rm::PsBin bin = rm::ps_bin(c, p.pooled_height, p.pooled_width);
    const rm::PsPoolBin r = box.bin(bin.ph, bin.pw, p.height - 1, p.width - 1);
    out[i] = rm::ps_pool_mean(input + (b * p.channels + c) * p.height * p.width, p.width, r);
    channel_mapping[i] = static_cast<int32_t>(c);
  }
}

template <typename T>
__global__ void ps_roi_pool_backward_kernel(int64_t total, const T* grad, const T* rois, RoiPoolParams p, T scale,
                                            T* grad_input) {
  PF_FOR_EACH(i, total) {
    const int64_t n = i / p.channels, c = i % p.channels;
    const T* roi = rois + 5 * n;
    const int64_t b = static_cast<int64_t>(roi[0]);
    const rm::PsPoolRoi<T> box(roi, scale, p.pooled_height, p.pooled_width, true);
    const rm::PsBin bin = rm::ps_bin(c, p.pooled_height, p.pooled_width);
    const rm::PsPoolBin r = box.bin(bin.ph, bin.pw, p.height, p.width);
    if (r.empty()) continue;
    T* gi = grad_input + (b * p.channels + c) * p.height * p.width;
    const T diff = grad[i] / static_cast<T>(r.area());
    for (int64_t h = r.h0; h < r.h1; ++h)
      for (int64_t w = r.w0; w < r.w1; ++w) atomicAdd(gi + h * p.width + w, diff);
  }
}

// Runs a ps_roi_pool kernel over the K x C elements after the CPU's checks of the rois (the
// backward rounds in float, as its kernel).
template <bool Backward, typename T, typename Kernel>
void ps_roi_pool_launch(const KernelContext& ctx, const KernelScope& scope, const Shape& input_size,
                        const Tensor& rois, Kernel kernel, const T* src, T* dst, int32_t* channel_mapping) {
  const RoiPoolParams p{input_size[1], input_size[2], input_size[3], ctx.attr<int64_t>("pooled_height"),
                        ctx.attr<int64_t>("pooled_width")};
  const T scale = static_cast<T>(ctx.attr<double>("spatial_scale"));
  const char* op = Backward ? "ps_roi_pool_backward" : "ps_roi_pool";
  const std::vector<T> host = to_host<T>(rois, scope.stream);
  rm::check_rois(host.data(), rois.sizes()[0], input_size[0], op);
  rm::check_rounded_coordinates(host.data(), rois.sizes()[0], scale, Backward, op);
  const T* rois_dev = static_cast<const T*>(rois.data_ptr());
  if constexpr (Backward) launch(scope, rois.sizes()[0] * p.channels, kernel, src, rois_dev, p, scale, dst);
  else launch(scope, rois.sizes()[0] * p.channels, kernel, src, rois_dev, p, scale, dst, channel_mapping);
}

void ps_roi_pool_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero_value) {
    using T = decltype(zero_value);
    const Tensor& input = ctx.input(0);
    ps_roi_pool_launch<false, T>(ctx, scope, input.sizes(), ctx.input(1), ps_roi_pool_forward_kernel<T>,
                                 static_cast<const T*>(input.data_ptr()), static_cast<T*>(ctx.output(0).data_ptr()),
                                 static_cast<int32_t*>(ctx.output(1).data_ptr()));
  });
}

void ps_roi_pool_backward_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero_value) {
    using T = decltype(zero_value);
    zero(ctx.output(0), scope.stream);
    ps_roi_pool_launch<true, T>(ctx, scope, ctx.attr<Shape>("input_size"), ctx.input(1),
                                ps_roi_pool_backward_kernel<T>, static_cast<const T*>(ctx.input(0).data_ptr()),
                                static_cast<T*>(ctx.output(0).data_ptr()), nullptr);
  });
}

// ---- deform_conv2d -----------------------------------------------------------------------------------
// The CPU's scheme (plugins/cpu/src/vision.cpp), image by image: a kernel builds the deformable
// column matrix (C * taps x P) from rm::deform_sample, and cuBLAS multiplies it per group
// (gemm, matmul.cpp). The backward computes the column gradient W_g^T @ G_g by cuBLAS; a thread
// per (offset group, tap, position) sums its offset and mask gradients over the group's channels
// in the CPU's order; a thread per column entry adds it back at its sample's corners with
// atomicAdd; the weight gradient is G_g @ col_g^T accumulated over the images by cuBLAS.

rm::DeformGeometry deform_geometry(const KernelContext& ctx, const Tensor& x, const Tensor& w, const Tensor& offset) {
  const Shape &stride = ctx.attr<Shape>("stride"), &pad = ctx.attr<Shape>("padding"),
              &dilation = ctx.attr<Shape>("dilation");
  return {x.sizes()[1],      x.sizes()[2],      x.sizes()[3], w.sizes()[0], w.sizes()[2],
          w.sizes()[3],      offset.sizes()[2], offset.sizes()[3], stride[0], stride[1],
          pad[0],            pad[1],            dilation[0],  dilation[1], ctx.attr<int64_t>("groups"),
          ctx.attr<int64_t>("offset_groups"), ctx.attr<bool>("has_mask")};
}

// Column matrix entry i = (c * taps + t) * P + p of one image: channel c sampled by tap t of
// position p, times the mask (null without one).
template <typename T>
__global__ void deform_im2col_kernel(int64_t total, rm::DeformGeometry g, const T* image, const T* offset,
                                     const T* mask, T* col) {
  PF_FOR_EACH(i, total) {
    const int64_t p = i % g.P(), t = (i / g.P()) % g.taps(), c = i / (g.P() * g.taps());
    const int64_t r = g.mask_row(c, t);
    const T v = rm::deform_sample(g, offset, r, p).value(image + c * g.H * g.W, g.W);
    col[i] = mask ? mask[r * g.P() + p] * v : v;
  }
}

// out (O x P) += bias per output channel, after the GEMM (the CPU's order).
template <typename T>
__global__ void add_bias_kernel(int64_t total, int64_t P, const T* bias, T* out) {
  PF_FOR_EACH(i, total) { out[i] += bias[i / P]; }
}

// Offset and mask gradients of mask row r = (offset group, tap) at position p: a sum over the
// group's channels in order, from the column gradient.
template <typename T>
__global__ void deform_coordinate_grad_kernel(int64_t total, rm::DeformGeometry g, const T* image, const T* offset,
                                              const T* mask, const T* col_grad, T* grad_offset, T* grad_mask) {
  PF_FOR_EACH(i, total) {
    const int64_t P = g.P(), r = i / P, p = i % P, taps = g.taps();
    const int64_t grp = r / taps, t = r % taps, cpg = g.channels_per_offset_group();
    const rm::DeformSample<T> s = rm::deform_sample(g, offset, r, p);
    const T m = mask ? mask[r * P + p] : T(1);
    T gy = 0, gx = 0, gm = 0;
    for (int64_t c = grp * cpg; c < (grp + 1) * cpg; ++c)
      s.add_coordinate_grads(image + c * g.H * g.W, g.W, m, col_grad[(c * taps + t) * P + p], mask != nullptr, gy,
                             gx, gm);
    grad_offset[g.dy_row(r) * P + p] = gy;
    grad_offset[(g.dy_row(r) + 1) * P + p] = gx;
    if (mask) grad_mask[r * P + p] = gm;
  }
}

// The input gradient of one image: column gradient entry i back at its sample's corners.
template <typename T>
__global__ void deform_col2im_kernel(int64_t total, rm::DeformGeometry g, const T* offset, const T* mask,
                                     const T* col_grad, T* grad_image) {
  PF_FOR_EACH(i, total) {
    const int64_t p = i % g.P(), t = (i / g.P()) % g.taps(), c = i / (g.P() * g.taps());
    const int64_t r = g.mask_row(c, t);
    rm::deform_sample(g, offset, r, p)
        .scatter(grad_image + c * g.H * g.W, g.W, mask ? mask[r * g.P() + p] : T(1), col_grad[i], AtomicAdd{});
  }
}

template <typename T>
const T* data_of(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}

void deform_conv2d_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero_value) {
    using T = decltype(zero_value);
    const rm::DeformGeometry g = deform_geometry(ctx, ctx.input(0), ctx.input(1), ctx.input(2));
    const int64_t N = ctx.input(0).sizes()[0], P = g.P(), K = g.K(), Og = g.Og(), rows = g.C * g.taps();
    const int64_t mask_rows = g.offset_groups * g.taps();
    const T* input = data_of<T>(ctx.input(0));
    const T* weight = data_of<T>(ctx.input(1));
    const T* offset = data_of<T>(ctx.input(2));
    const T* mask = g.has_mask ? data_of<T>(ctx.input(3)) : nullptr;
    const T* bias = ctx.inputs.size() > 3u + g.has_mask ? data_of<T>(ctx.inputs.back()) : nullptr;
    T* out = static_cast<T*>(ctx.output(0).data_ptr());
    const DType dt = ctx.input(0).dtype();
    Workspace col(scope.device, static_cast<size_t>(std::max<int64_t>(rows * P, 1)) * sizeof(T));
    for (int64_t n = 0; n < N; ++n) {
      launch(scope, rows * P, deform_im2col_kernel<T>, g, input + n * g.C * g.H * g.W, offset + n * 2 * mask_rows * P,
             mask ? mask + n * mask_rows * P : nullptr, col.as<T>());
      T* o = out + n * g.O * P;
      for (int64_t grp = 0; grp < g.groups; ++grp)
        gemm(dt, scope, false, false, Og, P, K, weight + grp * Og * K, K, col.as<T>() + grp * K * P, P, 0.0,
             o + grp * Og * P, P);
      if (bias) launch(scope, g.O * P, add_bias_kernel<T>, P, bias, o);
    }
  });
}

void deform_conv2d_backward_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero_value) {
    using T = decltype(zero_value);
    // inputs: grad_output, input, weight, offset, [mask]; outputs: their gradients but grad_output's
    const rm::DeformGeometry g = deform_geometry(ctx, ctx.input(1), ctx.input(2), ctx.input(3));
    const int64_t N = ctx.input(1).sizes()[0], P = g.P(), K = g.K(), Og = g.Og(), rows = g.C * g.taps();
    const int64_t mask_rows = g.offset_groups * g.taps(), plane = g.H * g.W;
    const T* go = data_of<T>(ctx.input(0));
    const T* input = data_of<T>(ctx.input(1));
    const T* weight = data_of<T>(ctx.input(2));
    const T* offset = data_of<T>(ctx.input(3));
    const T* mask = g.has_mask ? data_of<T>(ctx.input(4)) : nullptr;
    T* grad_input = static_cast<T*>(ctx.output(0).data_ptr());
    T* grad_weight = static_cast<T*>(ctx.output(1).data_ptr());
    T* grad_offset = static_cast<T*>(ctx.output(2).data_ptr());
    T* grad_mask = g.has_mask ? static_cast<T*>(ctx.output(3).data_ptr()) : nullptr;
    const DType dt = ctx.input(1).dtype();
    zero(ctx.output(0), scope.stream);
    Workspace col(scope.device, static_cast<size_t>(std::max<int64_t>(rows * P, 1)) * sizeof(T));
    for (int64_t n = 0; n < N; ++n) {
      const T* image = input + n * g.C * plane;
      const T* off = offset + n * 2 * mask_rows * P;
      const T* m = mask ? mask + n * mask_rows * P : nullptr;
      const T* gout = go + n * g.O * P;
      // the column gradient
      for (int64_t grp = 0; grp < g.groups; ++grp)
        gemm(dt, scope, true, false, K, P, Og, weight + grp * Og * K, K, gout + grp * Og * P, P, 0.0,
             col.as<T>() + grp * K * P, P);
      launch(scope, mask_rows * P, deform_coordinate_grad_kernel<T>, g, image, off, m, col.as<const T>(),
             grad_offset + n * 2 * mask_rows * P, grad_mask ? grad_mask + n * mask_rows * P : nullptr);
      launch(scope, rows * P, deform_col2im_kernel<T>, g, off, m, col.as<const T>(), grad_input + n * g.C * plane);
      // the weight gradient: the image's columns again, into the same buffer
      launch(scope, rows * P, deform_im2col_kernel<T>, g, image, off, m, col.as<T>());
      for (int64_t grp = 0; grp < g.groups; ++grp)
        gemm(dt, scope, false, true, Og, K, P, gout + grp * Og * P, P, col.as<T>() + grp * K * P, P, n == 0 ? 0.0 : 1.0,
             grad_weight + grp * Og * K, K);
    }
  });
}

}  // namespace

std::vector<KernelDef> vision_kernels() {
  // core/opdefs/vision.yaml names each op's kernel function and dtypes.
  return {
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) {name, {PF_OPDEFS_UNPAREN cuda_dtypes}, fn},
      PF_OPDEFS_VISION_KERNELS(PF_X)
#undef PF_X
  };
}

}  // namespace plugflow::cuda
