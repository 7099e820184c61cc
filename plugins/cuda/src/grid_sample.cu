// grid_sampler_2d/3d and their backward ops (docs/kernels.md, "Grid sampling") on CUDA for
// float32 and float64, as the CPU plugin.
//
// One thread per output position (image n, position p) runs the position's arithmetic over all
// channels through plugins/common/grid_sample_math.h, the code the CPU kernel runs too; this
// file is compiled without FMA contraction, so forward values and grid gradients round as the
// CPU's. The input gradient is accumulated with atomicAdd into a zeroed, dense output, so its
// sums run in a schedule-dependent order (the CPU adds them in position order): equal to the
// CPU's within rounding, not bit for bit. Inputs are read with their strides; outputs are
// contiguous, as on the CPU.
#include <string>

#include "grid_sample_math.h"
#include "kernel_common.h"
#include "launchers.h"
#include "types.cuh"

namespace plugflow::cuda {
namespace {

namespace gs = grid_sample_math;

// An (N, C, spatial...) or (N, spatial..., k) tensor's data and its strides (elements).
template <typename T>
struct Strided {
  const T* data;
  int64_t stride[5];
};
template <typename T>
Strided<T> strided(const Tensor& t) {
  Strided<T> s{static_cast<const T*>(t.data_ptr()), {0, 0, 0, 0, 0}};
  for (int64_t i = 0; i < t.dim(); ++i) s.stride[i] = t.strides()[i];
  return s;
}

// Output positions per image, row-major over (OD, OH, OW) (OD = 1 in 2-d).
struct OutExtent {
  int64_t OD, OH, OW;
  __device__ int64_t count() const { return OD * OH * OW; }
};

// The base offset (channel 0) of output position p of image n in an (N, C, spatial) tensor, and
// the grid values of that position.
template <typename T, int S>
__device__ int64_t position_offset(const Strided<T>& t, const OutExtent& e, int64_t n, int64_t p) {
  const int64_t ow = p % e.OW, oh = (p / e.OW) % e.OH, od = p / (e.OW * e.OH);
  int64_t off = n * t.stride[0];
  if constexpr (S == 2) off += oh * t.stride[2] + ow * t.stride[3];
  else off += od * t.stride[2] + oh * t.stride[3] + ow * t.stride[4];
  return off;
}
template <typename T, int S>
__device__ void grid_at(const Strided<T>& g, const OutExtent& e, int64_t n, int64_t p, T (&v)[S]) {
  const int64_t ow = p % e.OW, oh = (p / e.OW) % e.OH, od = p / (e.OW * e.OH);
  const T* at = g.data + n * g.stride[0];
  at += S == 2 ? oh * g.stride[1] + ow * g.stride[2] : od * g.stride[1] + oh * g.stride[2] + ow * g.stride[3];
  for (int k = 0; k < S; ++k) v[k] = at[k * g.stride[S + 1]];
}

// The input gradient's accumulation: positions of one image may share taps.
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

#define PF_FOR_EACH(i, n)                                                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                    \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void forward_2d_kernel(int64_t total, gs::Sampler2d<T> sm, Strided<T> in, Strided<T> grid, OutExtent e,
                                  int64_t C, T* out) {
  const int64_t P = e.count();
  PF_FOR_EACH(k, total) {
    const int64_t n = k / P, p = k % P;
    T g[2];
    grid_at<T, 2>(grid, e, n, p, g);
    gs::forward_2d_point(sm, g[0], g[1], in.data + n * in.stride[0], in.stride[1], C, out + n * C * P + p, P);
  }
}

template <typename T>
__global__ void forward_3d_kernel(int64_t total, gs::Sampler3d<T> sm, Strided<T> in, Strided<T> grid, OutExtent e,
                                  int64_t C, T* out) {
  const int64_t P = e.count();
  PF_FOR_EACH(k, total) {
    const int64_t n = k / P, p = k % P;
    T g[3];
    grid_at<T, 3>(grid, e, n, p, g);
    gs::forward_3d_point(sm, g, in.data + n * in.stride[0], in.stride[1], C, out + n * C * P + p, P);
  }
}

// gi: the dense (N, C, spatial) input gradient, or null; gg: the (N, positions, S) grid gradient.
template <typename T>
__global__ void backward_2d_kernel(int64_t total, gs::Sampler2d<T> sm, Strided<T> g_out, Strided<T> in,
                                   Strided<T> grid, OutExtent e, int64_t C, T* gi, T* gg) {
  const int64_t P = e.count(), image = C * sm.H * sm.W;
  PF_FOR_EACH(k, total) {
    const int64_t n = k / P, p = k % P;
    T g[2];
    grid_at<T, 2>(grid, e, n, p, g);
    gs::backward_2d_point(sm, g[0], g[1], g_out.data + position_offset<T, 2>(g_out, e, n, p), g_out.stride[1],
                          in.data + n * in.stride[0], in.stride[1], C, gi ? gi + n * image : nullptr, gg + 2 * k,
                          AtomicAdd{});
  }
}

template <typename T>
__global__ void backward_3d_kernel(int64_t total, gs::Sampler3d<T> sm, Strided<T> g_out, Strided<T> in,
                                   Strided<T> grid, OutExtent e, int64_t C, T* gi, T* gg) {
  const int64_t P = e.count(), image = C * sm.D * sm.H * sm.W;
  PF_FOR_EACH(k, total) {
    const int64_t n = k / P, p = k % P;
    T g[3];
    grid_at<T, 3>(grid, e, n, p, g);
    gs::backward_3d_point(sm, g, g_out.data + position_offset<T, 3>(g_out, e, n, p), g_out.stride[1],
                          in.data + n * in.stride[0], in.stride[1], C, gi ? gi + n * image : nullptr, gg + 3 * k,
                          AtomicAdd{});
  }
}

// ---- entry points ------------------------------------------------------------------------------

gs::Mode mode_of(const KernelContext& ctx) {
  const std::string& m = ctx.attr<std::string>("mode");
  return m == "nearest" ? gs::Mode::Nearest : m == "bicubic" ? gs::Mode::Bicubic : gs::Mode::Bilinear;
}
gs::Padding padding_of(const KernelContext& ctx) {
  const std::string& p = ctx.attr<std::string>("padding_mode");
  return p == "border" ? gs::Padding::Border : p == "reflection" ? gs::Padding::Reflection : gs::Padding::Zeros;
}

OutExtent out_extent(const Tensor& grid) {
  const Shape& g = grid.sizes();
  return grid.dim() == 5 ? OutExtent{g[1], g[2], g[3]} : OutExtent{1, g[1], g[2]};
}

// The geometry of a call on `input` (rank 4: 2-d, rank 5: 3-d).
template <typename T>
gs::Sampler2d<T> sampler_2d(const KernelContext& ctx, const Tensor& input) {
  const Shape &s = input.sizes(), &st = input.strides();
  return gs::Sampler2d<T>(s[2], s[3], st[2], st[3], mode_of(ctx), padding_of(ctx), ctx.attr<bool>("align_corners"));
}
template <typename T>
gs::Sampler3d<T> sampler_3d(const KernelContext& ctx, const Tensor& input) {
  const Shape &s = input.sizes(), &st = input.strides();
  return gs::make_sampler_3d<T>(s[2], s[3], s[4], st[2], st[3], st[4], mode_of(ctx), padding_of(ctx),
                                ctx.attr<bool>("align_corners"));
}

template <typename Kernel, typename... Args>
void launch(const KernelScope& scope, int64_t n, Kernel kernel, Args... args) {
  if (n == 0) return;
  kernel<<<scope.blocks_for(n), kBlockThreads, 0, scope.stream>>>(n, args...);
  PF_CUDA_CHECK_LAUNCH();
}

// Runs f(T{}) for the call's dtype (float32 or float64); outputs must be contiguous.
template <typename F>
void dispatch(KernelContext& ctx, F&& f) {
  for (const Tensor& t : ctx.outputs)
    PF_CHECK_T(t.is_contiguous(), ValueError, "cuda '", ctx.op.name, "' writes contiguous outputs");
  const DType t = ctx.outputs.back().dtype();
  if (t == DType::Float32) f(float{});
  else if (t == DType::Float64) f(double{});
  else throw_unsupported_dtype(ctx, t);
}

template <int S>
void forward_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero) {
    using T = decltype(zero);
    const Tensor &input = ctx.input(0), &grid = ctx.input(1);
    const OutExtent e = out_extent(grid);
    const int64_t total = input.sizes()[0] * e.OD * e.OH * e.OW, C = input.sizes()[1];
    T* out = static_cast<T*>(ctx.output(0).data_ptr());
    if constexpr (S == 2)
      launch(scope, total, forward_2d_kernel<T>, sampler_2d<T>(ctx, input), strided<T>(input), strided<T>(grid), e, C,
             out);
    else
      launch(scope, total, forward_3d_kernel<T>, sampler_3d<T>(ctx, input), strided<T>(input), strided<T>(grid), e, C,
             out);
  });
}

// Inputs (grad_output, input, grid); outputs (grad_input, grad_grid); grad_input is written
// only when the `input_grad` attribute is set.
template <int S>
void backward_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  dispatch(ctx, [&](auto zero) {
    using T = decltype(zero);
    const Tensor &g_out = ctx.input(0), &input = ctx.input(1), &grid = ctx.input(2);
    const OutExtent e = out_extent(grid);
    const int64_t total = input.sizes()[0] * e.OD * e.OH * e.OW, C = input.sizes()[1];
    T* gi = nullptr;
    if (ctx.attr<bool>("input_grad")) {
      const Tensor& grad_input = ctx.output(0);
      gi = static_cast<T*>(grad_input.data_ptr());
      if (grad_input.numel() > 0)
        PF_CUDA_CHECK(cudaMemsetAsync(gi, 0, static_cast<size_t>(grad_input.numel()) * sizeof(T), scope.stream));
    }
    T* gg = static_cast<T*>(ctx.output(1).data_ptr());
    if constexpr (S == 2)
      launch(scope, total, backward_2d_kernel<T>, sampler_2d<T>(ctx, input), strided<T>(g_out), strided<T>(input),
             strided<T>(grid), e, C, gi, gg);
    else
      launch(scope, total, backward_3d_kernel<T>, sampler_3d<T>(ctx, input), strided<T>(g_out), strided<T>(input),
             strided<T>(grid), e, C, gi, gg);
  });
}

}  // namespace

std::vector<KernelDef> grid_sample_kernels() {
  const std::vector<DType> floats{DType::Float32, DType::Float64};
  return {{"grid_sampler_2d", floats, &forward_entry<2>},
          {"grid_sampler_2d_backward", floats, &backward_entry<2>},
          {"grid_sampler_3d", floats, &forward_entry<3>},
          {"grid_sampler_3d_backward", floats, &backward_entry<3>}};
}

}  // namespace plugflow::cuda
