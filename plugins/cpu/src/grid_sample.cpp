// grid_sampler_2d/3d and their backward ops (docs/kernels.md, "Grid sampling") for
// float32/float64.
//
// The arithmetic (PyTorch 1.13's CPU kernels', step for step) lives in
// plugins/common/grid_sample_math.h, shared with the CUDA plugin; this file adds the layout
// and the threads.
//
// Threads: the forward runs output positions of all images in parallel; the backward runs
// images in parallel when it computes the input gradient (each image's gradient is written by
// one thread), else output positions.
#include <algorithm>
#include <string>

#include "grid_sample_math.h"
#include "kernels.h"
#include "loops.h"

namespace plugflow::cpu {
namespace {

using namespace grid_sample_math;

Mode mode_of(const KernelContext& ctx) {
  const std::string& m = ctx.attr<std::string>("mode");
  return m == "nearest" ? Mode::Nearest : m == "bicubic" ? Mode::Bicubic : Mode::Bilinear;
}
Padding padding_of(const KernelContext& ctx) {
  const std::string& p = ctx.attr<std::string>("padding_mode");
  return p == "border" ? Padding::Border : p == "reflection" ? Padding::Reflection : Padding::Zeros;
}

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

// ---- 2-d -----------------------------------------------------------------------------------------------

template <typename T>
Sampler2d<T> sampler_2d(const KernelContext& ctx, const Sizes& s, const Tensor& input) {
  return Sampler2d<T>(s.H, s.W, input.strides()[2], input.strides()[3], mode_of(ctx), padding_of(ctx),
                      ctx.attr<bool>("align_corners"));
}

template <typename T>
void accumulate(T* where, T v) {
  *where += v;
}

template <typename T>
void forward_2d(const KernelContext& ctx) {
  const Tensor &input = ctx.input(0), &grid_t = ctx.input(1);
  const Sizes s = sizes_of(input, grid_t);
  const Sampler2d<T> sm = sampler_2d<T>(ctx, s, input);
  const View<T> in(input), grid(grid_t);
  T* out = ctx.output(0).data<T>();
  const int64_t P = s.P();
  parallel_for(s.N * P, std::max<int64_t>(1, kGrainSize / (16 * s.C)), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t n = k / P, p = k % P;
      T g[2];
      grid_at<T, 2>(grid, s, n, p, g);
      forward_2d_point(sm, g[0], g[1], in.data + n * in.stride[0], in.stride[1], s.C, out + n * s.C * P + p, P);
    }
  });
}

// The backward of image n's output positions [p0, p1): grad_grid always, grad_input (a dense
// (C, H, W) block for image n) when gi is set.
template <typename T>
void backward_2d_range(const Sampler2d<T>& sm, const Sizes& s, const View<T>& g_out, const View<T>& in,
                       const View<T>& grid, T* gi, T* gg, int64_t n, int64_t p0, int64_t p1) {
  const T* img = in.data + n * in.stride[0];
  for (int64_t p = p0; p < p1; ++p) {
    T g[2];
    grid_at<T, 2>(grid, s, n, p, g);
    backward_2d_point(sm, g[0], g[1], g_out.data + spatial_offset<T, 2>(g_out, s, n, 0, p), g_out.stride[1], img,
                      in.stride[1], s.C, gi, gg + 2 * (n * s.P() + p), accumulate<T>);
  }
}

// ---- 3-d -----------------------------------------------------------------------------------------------

template <typename T>
Sampler3d<T> sampler_3d(const KernelContext& ctx, const Sizes& s, const Tensor& input) {
  return make_sampler_3d<T>(s.D, s.H, s.W, input.strides()[2], input.strides()[3], input.strides()[4], mode_of(ctx),
                            padding_of(ctx), ctx.attr<bool>("align_corners"));
}

template <typename T>
void forward_3d(const KernelContext& ctx) {
  const Tensor &input = ctx.input(0), &grid_t = ctx.input(1);
  const Sizes s = sizes_of(input, grid_t);
  const Sampler3d<T> sm = sampler_3d<T>(ctx, s, input);
  const View<T> in(input), grid(grid_t);
  T* out = ctx.output(0).data<T>();
  const int64_t P = s.P();
  parallel_for(s.N * P, std::max<int64_t>(1, kGrainSize / (16 * s.C)), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t n = k / P, p = k % P;
      T g[3];
      grid_at<T, 3>(grid, s, n, p, g);
      forward_3d_point(sm, g, in.data + n * in.stride[0], in.stride[1], s.C, out + n * s.C * P + p, P);
    }
  });
}

template <typename T>
void backward_3d_range(const Sampler3d<T>& sm, const Sizes& s, const View<T>& g_out, const View<T>& in,
                       const View<T>& grid, T* gi, T* gg, int64_t n, int64_t p0, int64_t p1) {
  const T* img = in.data + n * in.stride[0];
  for (int64_t p = p0; p < p1; ++p) {
    T g[3];
    grid_at<T, 3>(grid, s, n, p, g);
    backward_3d_point(sm, g, g_out.data + spatial_offset<T, 3>(g_out, s, n, 0, p), g_out.stride[1], img, in.stride[1],
                      s.C, gi, gg + 3 * (n * s.P() + p), accumulate<T>);
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
  const Sampler2d<T> sm = sampler_2d<T>(ctx, s, input);
  const View<T> go(g_out), in(input), grid(grid_t);
  T* gg = ctx.output(1).data<T>();
  run_backward<T>(ctx, s, [&](T* gi, int64_t n, int64_t p0, int64_t p1) {
    backward_2d_range(sm, s, go, in, grid, gi, gg, n, p0, p1);
  });
}

template <typename T>
void backward_3d(const KernelContext& ctx) {
  const Tensor &g_out = ctx.input(0), &input = ctx.input(1), &grid_t = ctx.input(2);
  const Sizes s = sizes_of(input, grid_t);
  const Sampler3d<T> sm = sampler_3d<T>(ctx, s, input);
  const View<T> go(g_out), in(input), grid(grid_t);
  T* gg = ctx.output(1).data<T>();
  run_backward<T>(ctx, s, [&](T* gi, int64_t n, int64_t p0, int64_t p1) {
    backward_3d_range(sm, s, go, in, grid, gi, gg, n, p0, p1);
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
