// The norm family (docs/kernels.md, "Norm family"): fused batch/layer/group normalization
// forward and backward, embedding gather and its dense backward, and dropout.
//
//   * Statistics accumulate in double: sums of x - shift and (x - shift)^2 in one vectorized
//     pass, shift = the first element of the slice (the "assumed mean" method: with the shift a
//     sample of the data, the subtraction in var = (s2 - s1^2 / n) / n loses nothing that
//     matters, unlike plain sums of squares).
//   * Outputs are computed from x - mean, never x * scale + (shift - mean * scale): with the
//     mean large against the spread, x * scale loses the digits that matter (PyTorch's CPU
//     kernels do that). The mean is split into its T value and the rounding remainder
//     (mean_hi + mean_lo), so (x - mean_hi) is exact for x near the mean and the result is
//     accurate to T's precision.
//   * Backward kernels take the saved mean and 1/std, so each needs one pass for the reductions
//     (sum of g and of g * (x - mean)) and one that writes grad_input, with the weight and bias
//     gradients from the same reductions.
//   * batch_norm works channel by channel on row-major (N, C, *) inputs (threads split the
//     channels, and each channel is normalized right after its statistics, while it is still in
//     cache); channels-last inputs and (N, C) ones (L == 1) are rows of C channels instead,
//     which threads split (partial sums per thread, vectorized across channels).
//     layer_norm splits rows; group_norm splits (sample, group) slices.
//   * embedding copies rows; its backward accumulates gradient rows into the destination rows
//     each thread owns (a range of the vocabulary), so it is deterministic without atomics.
//   * dropout draws element i from Philox counter offset + i / 4, word i % 4 (one 128-bit draw
//     serves four elements), so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels.h"
#include "loops.h"
#include "nn_math.h"
#include "opdefs.h"
#include "philox_block.h"
#include "plugflow/philox.h"

namespace plugflow::cpu {
namespace {

// ---- shared helpers -------------------------------------------------------------------------------

// A 1-d tensor read element by element with any stride (per-channel parameters; never hot).
template <typename T>
struct VecView {
  const T* p = nullptr;
  int64_t stride = 1;
  VecView() = default;
  explicit VecView(const Tensor& t) : p(t.data<T>()), stride(t.dim() == 1 ? t.strides()[0] : 1) {}
  T operator[](int64_t i) const { return p[i * stride]; }
};

// s1 = sum(x - shift), s2 = sum((x - shift)^2) over n contiguous elements, in double.
template <typename T>
[[gnu::always_inline]] inline void shifted_sums_impl(const T* x, int64_t n, double shift, double& s1, double& s2) {
  double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - shift;
    a += d;
    b += d * d;
  }
  s1 += a;
  s2 += b;
}

using nn_math::assumed_mean;
using nn_math::moments;
using nn_math::SplitMean;

// y = (x - mean) * scale + shift over n contiguous elements, in T's arithmetic type.
template <typename T>
[[gnu::always_inline]] inline void affine_run_impl(const T* x, T* y, int64_t n, SplitMean<T> mean, T scale, T shift) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = ((x[i] - mean.hi) - mean.lo) * scale + shift;
}

// batch_norm_fused's epilogue: y = act((x - mean) * scale + shift + z), z optional, act none or
// relu, each step rounded to T as the separate batch_norm, add and relu kernels round.
template <typename T>
[[gnu::always_inline]] inline void affine_act_run_impl(const T* x, const T* z, T* y, int64_t n, SplitMean<T> mean,
                                                       T scale, T shift, bool relu) {
  if (z && relu) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const T v = (((x[i] - mean.hi) - mean.lo) * scale + shift) + z[i];
      y[i] = v < T(0) ? T(0) : v;
    }
  } else if (z) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = (((x[i] - mean.hi) - mean.lo) * scale + shift) + z[i];
  } else if (relu) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const T v = ((x[i] - mean.hi) - mean.lo) * scale + shift;
      y[i] = v < T(0) ? T(0) : v;
    }
  } else {
    affine_run_impl(x, y, n, mean, scale, shift);
  }
}

// sum(g) and sum(g * (x - mean)) over n contiguous elements, in double.
template <typename T>
[[gnu::always_inline]] inline void grad_sums_impl(const T* g, const T* x, int64_t n, double mean, double& sum_g, double& dot) {
  double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]);
    a += gi;
    b += gi * (static_cast<double>(x[i]) - mean);
  }
  sum_g += a;
  dot += b;
}

// grad_sums of the relu's input gradient g' = (out <= 0 ? 0 : g) (relu_backward(g, out): a NaN
// output passes the gradient, as PyTorch's threshold_backward),
// storing g' into gp when given.
template <typename T>
[[gnu::always_inline]] inline void masked_grad_sums_impl(const T* g, const T* out, const T* x, T* gp, int64_t n,
                                                         double mean, double& sum_g, double& dot) {
  double a = 0, b = 0;
  if (gp) {
#pragma omp simd reduction(+ : a, b)
    for (int64_t i = 0; i < n; ++i) {
      const T gm = out[i] <= T(0) ? T(0) : g[i];
      gp[i] = gm;
      a += static_cast<double>(gm);
      b += static_cast<double>(gm) * (static_cast<double>(x[i]) - mean);
    }
  } else {
#pragma omp simd reduction(+ : a, b)
    for (int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(out[i] <= T(0) ? T(0) : g[i]);
      a += gi;
      b += gi * (static_cast<double>(x[i]) - mean);
    }
  }
  sum_g += a;
  dot += b;
}

// grad_affine_run of g' = (out <= 0 ? 0 : g).
template <typename T>
[[gnu::always_inline]] inline void masked_grad_affine_run_impl(const T* g, const T* out, const T* x, T* gx, int64_t n,
                                                               SplitMean<T> mean, T a, T b, T c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) gx[i] = (out[i] <= T(0) ? T(0) : g[i]) * a + ((x[i] - mean.hi) - mean.lo) * b + c;
}

// gx = g * a + (x - mean) * b + c over n contiguous elements.
template <typename T>
[[gnu::always_inline]] inline void grad_affine_run_impl(const T* g, const T* x, T* gx, int64_t n, SplitMean<T> mean, T a, T b, T c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) gx[i] = g[i] * a + ((x[i] - mean.hi) - mean.lo) * b + c;
}

// One layer_norm row: y = (x - mean) * rstd * w + b (w, b optional).
template <typename T>
[[gnu::always_inline]] inline void layer_norm_row_impl(const T* row, T* out, int64_t n, SplitMean<T> mu, T scale,
                                                       const T* wp, const T* bp) {
  if (wp && bp) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) out[j] = ((row[j] - mu.hi) - mu.lo) * scale * wp[j] + bp[j];
  } else if (wp) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) out[j] = ((row[j] - mu.hi) - mu.lo) * scale * wp[j];
  } else if (bp) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) out[j] = ((row[j] - mu.hi) - mu.lo) * scale + bp[j];
  } else {
    affine_run_impl(row, out, n, mu, scale, T(0));
  }
}

// One layer_norm_backward row: accumulates g * xhat and g into gw/gb, writes grad_x.
template <typename T>
[[gnu::always_inline]] inline void layer_norm_backward_row_impl(const T* g, const T* xr, T* out, int64_t n,
                                                                const T* wp, double mean, double rstd, double* gw,
                                                                double* gb) {
  double sum_gw = 0, sum_gw_xhat = 0;
  if (wp) {
#pragma omp simd reduction(+ : sum_gw, sum_gw_xhat)
    for (int64_t j = 0; j < n; ++j) {
      const double gj = static_cast<double>(g[j]);
      const double xhat = (static_cast<double>(xr[j]) - mean) * rstd;
      const double gwj = gj * static_cast<double>(wp[j]);
      sum_gw += gwj;
      sum_gw_xhat += gwj * xhat;
      gw[j] += gj * xhat;
      gb[j] += gj;
    }
  } else {
#pragma omp simd reduction(+ : sum_gw, sum_gw_xhat)
    for (int64_t j = 0; j < n; ++j) {
      const double gj = static_cast<double>(g[j]);
      const double xhat = (static_cast<double>(xr[j]) - mean) * rstd;
      sum_gw += gj;
      sum_gw_xhat += gj * xhat;
      gw[j] += gj * xhat;
      gb[j] += gj;
    }
  }
  // gx = g * (w * rstd) + (x - mean) * b + c with b = -rstd^2 * mean(g*w*xhat), c = -rstd * mean(g*w).
  const double b = -rstd * rstd * sum_gw_xhat / static_cast<double>(n);
  const double c = -rstd * sum_gw / static_cast<double>(n);
  const T tr = static_cast<T>(rstd), tb = static_cast<T>(b), tc = static_cast<T>(c);
  const SplitMean<T> mu(mean);
  if (wp) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) out[j] = g[j] * (wp[j] * tr) + ((xr[j] - mu.hi) - mu.lo) * tb + tc;
  } else {
    grad_affine_run_impl(g, xr, out, n, mu, tr, tb, tc);
  }
}

// The inner loops above, compiled for AVX2 + FMA (x86-64-v3) and for the baseline, picked at
// load time (as unary.cpp's float32 math): these loops are the kernels' whole cost.
#define PF_NORM_LOOPS(T)                                                                                           \
  __attribute__((target_clones("arch=x86-64-v3", "default"))) void shifted_sums(const T* x, int64_t n,           \
                                                                                double shift, double& s1,        \
                                                                                double& s2) {                    \
    shifted_sums_impl(x, n, shift, s1, s2);                                                                        \
  }                                                                                                                \
  __attribute__((target_clones("arch=x86-64-v3", "default"))) void affine_run(const T* x, T* y, int64_t n,       \
                                                                              SplitMean<T> mean, T scale,        \
                                                                              T shift) {                          \
    affine_run_impl(x, y, n, mean, scale, shift);                                                                  \
  }                                                                                                                \
  __attribute__((target_clones("arch=x86-64-v3", "default"))) void affine_act_run(                               \
      const T* x, const T* z, T* y, int64_t n, SplitMean<T> mean, T scale, T shift, bool relu) {                   \
    affine_act_run_impl(x, z, y, n, mean, scale, shift, relu);                                                     \
  }                                                                                                                \
  __attribute__((target_clones("arch=x86-64-v3", "default"))) void masked_grad_sums(                             \
      const T* g, const T* out, const T* x, T* gp, int64_t n, double mean, double& sum_g, double& dot) {           \
    masked_grad_sums_impl(g, out, x, gp, n, mean, sum_g, dot);                                                     \
  }                                                                                                                \
  __attribute__((target_clones("arch=x86-64-v3", "default"))) void masked_grad_affine_run(                       \
      const T* g, const T* out, const T* x, T* gx, int64_t n, SplitMean<T> mean, T a, T b, T c) {                  \
    masked_grad_affine_run_impl(g, out, x, gx, n, mean, a, b, c);                                                  \
  }                                                                                                                \
  __attribute__((target_clones("arch=x86-64-v3", "default"))) void grad_sums(const T* g, const T* x, int64_t n,  \
                                                                             double mean, double& sum_g,         \
                                                                             double& dot) {                       \
    grad_sums_impl(g, x, n, mean, sum_g, dot);                                                                     \
  }                                                                                                                \
  __attribute__((target_clones("arch=x86-64-v3", "default"))) void grad_affine_run(                              \
      const T* g, const T* x, T* gx, int64_t n, SplitMean<T> mean, T a, T b, T c) {                                \
    grad_affine_run_impl(g, x, gx, n, mean, a, b, c);                                                              \
  }                                                                                                                \
  __attribute__((target_clones("arch=x86-64-v3", "default"))) void layer_norm_row(                               \
      const T* row, T* out, int64_t n, SplitMean<T> mu, T scale, const T* wp, const T* bp) {                       \
    layer_norm_row_impl(row, out, n, mu, scale, wp, bp);                                                           \
  }                                                                                                                \
  __attribute__((target_clones("arch=x86-64-v3", "default"))) void layer_norm_backward_row(                      \
      const T* g, const T* xr, T* out, int64_t n, const T* wp, double mean, double rstd, double* gw, double* gb) { \
    layer_norm_backward_row_impl(g, xr, out, n, wp, mean, rstd, gw, gb);                                           \
  }
PF_NORM_LOOPS(float)
PF_NORM_LOOPS(double)
#undef PF_NORM_LOOPS

// The bfloat16 batch norm loops: sums in double, the affine maps in float with each result
// rounded to bfloat16 where the separate ops round it (batch_norm's output; then the add's; the
// relu and its backward's mask are exact), so the fused kernels equal the op chains bit for bit.
// Compiled per ISA as the loops above. They work on the bits (loads widen by a shift, stores
// round with integer adds): a BFloat16 temporary inside an `omp simd` loop keeps GCC from
// vectorizing it.
using bf16 = BFloat16;
inline float load(const bf16* p, int64_t j) { return BFloat16::to_float(p[j].bits); }
inline void store(bf16* p, int64_t j, float v) { p[j].bits = BFloat16::from_float(v); }
inline float round_bf16(float v) { return BFloat16::to_float(BFloat16::from_float(v)); }

__attribute__((target_clones("arch=x86-64-v3", "default"))) void bf16_shifted_sums(const bf16* x, int64_t n,
                                                                                    double shift, double& s1,
                                                                                    double& s2) {
  double a = 0, q = 0;
#pragma omp simd reduction(+ : a, q)
  for (int64_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(load(x, j)) - shift;
    a += d;
    q += d * d;
  }
  s1 += a;
  s2 += q;
}

// y = act(round((x - m) * scale + shift) + z), z optional, act none or relu.
__attribute__((target_clones("arch=x86-64-v3", "default"))) void bf16_affine_act(const bf16* x, const bf16* z, bf16* y,
                                                                                  int64_t n, float m, float scale,
                                                                                  float shift, bool relu) {
  const float floor = relu ? 0.0f : -std::numeric_limits<float>::infinity();
  if (z) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float v = round_bf16(round_bf16((load(x, j) - m) * scale + shift) + load(z, j));
      store(y, j, v < floor ? 0.0f : v);
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float v = round_bf16((load(x, j) - m) * scale + shift);
      store(y, j, v < floor ? 0.0f : v);
    }
  }
}

// sum(g') and sum(g' * (x - mean)) with g' = g, or with `out` (a relu's output) the masked
// g' = (out <= 0 ? 0 : g), stored into gp when given.
__attribute__((target_clones("arch=x86-64-v3", "default"))) void bf16_grad_sums(const bf16* g, const bf16* out,
                                                                                 const bf16* x, bf16* gp, int64_t n,
                                                                                 double mean, double& sum_g,
                                                                                 double& dot) {
  double a = 0, d = 0;
  if (out && gp) {
#pragma omp simd reduction(+ : a, d)
    for (int64_t j = 0; j < n; ++j) {
      const float gj = load(out, j) <= 0.0f ? 0.0f : load(g, j);
      store(gp, j, gj);
      a += static_cast<double>(gj);
      d += static_cast<double>(gj) * (static_cast<double>(load(x, j)) - mean);
    }
  } else if (out) {
#pragma omp simd reduction(+ : a, d)
    for (int64_t j = 0; j < n; ++j) {
      const float gj = load(out, j) <= 0.0f ? 0.0f : load(g, j);
      a += static_cast<double>(gj);
      d += static_cast<double>(gj) * (static_cast<double>(load(x, j)) - mean);
    }
  } else {
#pragma omp simd reduction(+ : a, d)
    for (int64_t j = 0; j < n; ++j) {
      const float gj = load(g, j);
      a += static_cast<double>(gj);
      d += static_cast<double>(gj) * (static_cast<double>(load(x, j)) - mean);
    }
  }
  sum_g += a;
  dot += d;
}

// gx = g' * a + (x - m) * b + c, g' masked by `out` as in bf16_grad_sums.
__attribute__((target_clones("arch=x86-64-v3", "default"))) void bf16_grad_affine(const bf16* g, const bf16* out,
                                                                                   const bf16* x, bf16* gx, int64_t n,
                                                                                   float m, float a, float b,
                                                                                   float c) {
  if (out) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float gv = load(g, j);  // loaded unconditionally: a conditional load does not vectorize
      store(gx, j, (load(out, j) <= 0.0f ? 0.0f : gv) * a + (load(x, j) - m) * b + c);
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) store(gx, j, load(g, j) * a + (load(x, j) - m) * b + c);
  }
}

void check_contiguous(const KernelContext& ctx, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    PF_CHECK(t->is_contiguous(), "cpu '", ctx.op.name, "' kernel needs contiguous inputs (the functional layer makes them)");
}

// The batch norm kernels' layouts: (N, C, L), each channel's L elements of a sample contiguous
// (row-major), or rows of C channels (channels last, or L == 1: batch_norm_rows).
int64_t spatial_size(const Tensor& x) { return x.numel() / (x.sizes()[0] * x.sizes()[1]); }
bool channels_in_rows(const Tensor& x) {
  return x.suggest_memory_format() == MemoryFormat::ChannelsLast || spatial_size(x) == 1;
}

// The gradient, relu output, addend and outputs of a batch norm kernel share x's layout (the
// functional layer and the graph pass make them so).
void check_layout(const KernelContext& ctx, const Tensor& x, std::initializer_list<const Tensor*> ts) {
  const MemoryFormat format = x.suggest_memory_format();
  for (const Tensor* t : ts)
    PF_CHECK(t->is_contiguous(format), "cpu '", ctx.op.name,
             "' kernel needs its tensors dense in the input's memory format (the functional layer makes them)");
}

template <typename F>
void dispatch_float(const KernelContext& ctx, DType dt, F&& f) {
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      f(tag);
    } else {
      PF_THROW(NotImplementedError, "cpu '", ctx.op.name, "' kernel supports float32 and float64, got ",
               dtype_name(dt));
    }
  });
}

// ---- batch_norm --------------------------------------------------------------------------------------
// batch_norm and batch_norm_backward have no oneDNN kernels: measured, oneDNN 2.6 is slower than
// these on every shape tried, so float32 stays here too.
//
// The functional layer hands the kernels a row-major (N, C, *), seen as (N, C, L), or a
// channels-last one (batch_norm_rows). oneDNN 2.6 runs the row-major layout,
// described as (N, C, L, 1) nchw, with ncsp_bnorm, a plain C++ implementation (3-d ncw gets
// bnorm_ref; (N, C) gets ncsp_bnorm too); its jit kernels need the blocked nChw16c layout, i.e. a
// reorder of x (and grad) in and of the result out. Medians in ms, AVX-512, float32, weight and
// bias, the best of 3 alternating runs under load (2 threads; 1 thread for the C++ probe of
// the blocked path, against native at 1 thread in brackets):
//
//   shape (N, C, L)    native fwd train/eval, bwd  oneDNN ncsp fwd train/eval, bwd  blocked+reorders fwd, bwd
//   16, 64, 32*32      0.30 / 0.18, 0.40           1.20 / 0.68, 4.2                 1.74, 2.31  [0.54, 0.74]
//   16, 128, 16*16     0.11 / 0.06, 0.16           3.28 / 1.30, 2.8                 0.64, 0.95  [0.30, 0.44]
//   8, 64, 112*112     5.1 / 2.6, 9.2              20.1 / 12.6, 33.7                14.1, 22.3  [6.2, 10.0]
//   8, 256, 56*56      1.4 / 0.97, 1.8             20.1 / 12.4, 26.7                15.0, 26.0  [7.3, 9.5]
//   8, 2048, 7*7       0.27 / 0.14, 0.44           1.28 / 0.71, 1.54                1.13, 1.48  [0.54, 0.76]
//   64, 256, 1         0.019 / 0.008, 0.021        0.096 / 0.048, 0.098             0.024, 0.034 [0.018, 0.022]
//
// Even the jit kernel alone on data already blocked (no reorders) only matches the native
// kernels (1 thread, forward training: 0.60 vs 0.54 at 16x64x1024, 7.6 vs 6.2 at 8x64x112*112).
// Revisit with a oneDNN whose plain-layout batch normalization is vectorized.

// batch_norm_fused's epilogue, y = act(batch_norm(x) + addend) with act none or relu (the plain
// batch_norm has neither attribute).
bool fused_relu(const KernelContext& ctx) {
  return ctx.attrs.has("activation") && ctx.attr<std::string>("activation") == "relu";
}
const Tensor* fused_addend(const KernelContext& ctx) {
  return ctx.attrs.has("has_addend") && ctx.attr<bool>("has_addend") ? &ctx.input(5) : nullptr;
}

template <typename T>
void batch_norm_typed(const KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t n = x.sizes()[0], c = x.sizes()[1], l = spatial_size(x);
  const bool training = ctx.attr<bool>("training"), has_weight = ctx.attr<bool>("has_weight");
  const bool has_bias = ctx.attr<bool>("has_bias"), has_running = ctx.attr<bool>("has_running");
  const double momentum = ctx.attr<double>("momentum"), eps = ctx.attr<double>("eps");
  const VecView<T> w = has_weight ? VecView<T>(ctx.input(1)) : VecView<T>();
  const VecView<T> b = has_bias ? VecView<T>(ctx.input(2)) : VecView<T>();
  // Running statistics: read in eval mode, updated in place in training mode.
  T* rm = has_running || !training ? ctx.input(3).data<T>() : nullptr;
  T* rv = has_running || !training ? ctx.input(4).data<T>() : nullptr;
  const int64_t rm_s = rm ? ctx.input(3).strides()[0] : 0, rv_s = rv ? ctx.input(4).strides()[0] : 0;
  const T* xp = x.data<T>();
  T* yp = ctx.output(0).data<T>();
  T* save_mean = ctx.output(1).data<T>();
  T* save_invstd = ctx.output(2).data<T>();
  const int64_t count = n * l;
  const bool relu = fused_relu(ctx);
  const Tensor* addend = fused_addend(ctx);
  const T* zp = addend ? addend->data<T>() : nullptr;

  // The channel's statistics -> save_mean/save_invstd, running update; y = (x - mean) * scale + shift.
  auto finish_channel = [&](int64_t ch, double mean, double var, SplitMean<T>& mean_out, T& scale, T& shift) {
    double invstd;
    if (training) {
      invstd = 1.0 / std::sqrt(var + eps);
      if (has_running) {  // unbiased variance for the running estimate, as PyTorch
        rm[ch * rm_s] = static_cast<T>(nn_math::running_mean_update(static_cast<double>(rm[ch * rm_s]), mean, momentum));
        rv[ch * rv_s] = static_cast<T>(nn_math::running_var_update(static_cast<double>(rv[ch * rv_s]), var, count, momentum));
      }
    } else {
      mean = static_cast<double>(rm[ch * rm_s]);
      invstd = 1.0 / std::sqrt(static_cast<double>(rv[ch * rv_s]) + eps);
    }
    save_mean[ch] = static_cast<T>(mean);
    save_invstd[ch] = static_cast<T>(invstd);
    mean_out = SplitMean<T>(mean);
    scale = static_cast<T>(invstd) * (has_weight ? w[ch] : T(1));
    shift = has_bias ? b[ch] : T(0);
  };

  // (N, C, L): channel by channel; statistics, then the channel's rows are written while hot.
  parallel_for(c, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, count)), [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      double mean = 0, var = 0;
      if (training) {
        const double shift0 = assumed_mean(xp[ch * l]);
        double s1 = 0, s2 = 0;
        for (int64_t i = 0; i < n; ++i) shifted_sums(xp + (i * c + ch) * l, l, shift0, s1, s2);
        moments(s1, s2, shift0, count, mean, var);
      }
      SplitMean<T> split(0.0);
      T scale, shift;
      finish_channel(ch, mean, var, split, scale, shift);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t off = (i * c + ch) * l;
        if (zp || relu) affine_act_run(xp + off, zp ? zp + off : nullptr, yp + off, l, split, scale, shift, relu);
        else affine_run(xp + off, yp + off, l, split, scale, shift);
      }
    }
  });
}

// ---- batch_norm on bfloat16 inputs ---------------------------------------------------------------
// x bfloat16 with bfloat16 or float32 ("mixed", as autocast leaves a convolution's output and
// the module's parameters) parameters: statistics in double, the affine map in float with one
// rounding per element, saved statistics and parameter gradients float32 (the op's meta).
// Channel by channel like the float kernels' (N, C, L) path.

// A per-channel vector of any floating dtype, as doubles (0 elements when undefined).
std::vector<double> channel_values(const Tensor& v, bool defined, int64_t c) {
  std::vector<double> out(defined ? static_cast<size_t>(c) : 0);
  if (!defined) return out;
  visit_dtype(v.dtype(), [&](auto tag) {
    using P = typename decltype(tag)::type;
    if constexpr (is_float_v<P>) {
      const VecView<P> view(v);
      for (int64_t i = 0; i < c; ++i) out[i] = static_cast<double>(static_cast<opmath_t<P>>(view[i]));
    }
  });
  return out;
}

// batch_norm's (and batch_norm_fused's) attributes and per-channel operands, as doubles; the
// running statistics are read when they are updated or used (eval).
struct BatchNormArgs {
  bool training, has_running;
  double momentum, eps;
  std::vector<double> weight, bias, running_mean, running_var;  // empty when not given / not read
  BatchNormArgs(const KernelContext& ctx, int64_t c)
      : training(ctx.attr<bool>("training")),
        has_running(ctx.attr<bool>("has_running")),
        momentum(ctx.attr<double>("momentum")),
        eps(ctx.attr<double>("eps")),
        weight(channel_values(ctx.input(1), ctx.attr<bool>("has_weight"), c)),
        bias(channel_values(ctx.input(2), ctx.attr<bool>("has_bias"), c)),
        running_mean(channel_values(ctx.input(3), has_running || !training, c)),
        running_var(channel_values(ctx.input(4), has_running || !training, c)) {}
};

// The running statistics' update, in their own dtype.
void store_channel(const Tensor& v, int64_t i, double value) {
  visit_dtype(v.dtype(), [&](auto tag) {
    using P = typename decltype(tag)::type;
    if constexpr (is_float_v<P>) v.data<P>()[i * (v.dim() == 1 ? v.strides()[0] : 1)] = static_cast<P>(value);
  });
}

template <typename T>
void batch_norm_reduced(const KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t n = x.sizes()[0], c = x.sizes()[1], l = spatial_size(x), count = n * l;
  const BatchNormArgs args(ctx, c);
  const bool training = args.training, has_running = args.has_running;
  const double momentum = args.momentum, eps = args.eps;
  const auto &w = args.weight, &b = args.bias, &rm = args.running_mean, &rv = args.running_var;
  const T* xp = x.data<T>();
  T* yp = ctx.output(0).data<T>();
  float* save_mean = ctx.output(1).data<float>();
  float* save_invstd = ctx.output(2).data<float>();
  const bool relu = fused_relu(ctx);
  const Tensor* addend = fused_addend(ctx);
  const T* zp = addend ? addend->data<T>() : nullptr;
  parallel_for(c, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, count)), [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      double mean, invstd;
      if (training) {
        const double shift0 = count > 0 ? assumed_mean(static_cast<float>(xp[ch * l])) : 0.0;
        double s1 = 0, s2 = 0, var;
        for (int64_t i = 0; i < n; ++i) bf16_shifted_sums(xp + (i * c + ch) * l, l, shift0, s1, s2);
        moments(s1, s2, shift0, count, mean, var);
        invstd = 1.0 / std::sqrt(var + eps);
        if (has_running) {  // unbiased variance for the running estimate, as PyTorch
          store_channel(ctx.input(3), ch, nn_math::running_mean_update(rm[ch], mean, momentum));
          store_channel(ctx.input(4), ch, nn_math::running_var_update(rv[ch], var, count, momentum));
        }
      } else {
        mean = rm[ch];
        invstd = 1.0 / std::sqrt(rv[ch] + eps);
      }
      save_mean[ch] = static_cast<float>(mean);
      save_invstd[ch] = static_cast<float>(invstd);
      const float m = static_cast<float>(mean), scale = static_cast<float>(invstd * (w.empty() ? 1.0 : w[ch]));
      const float shift = static_cast<float>(b.empty() ? 0.0 : b[ch]);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t off = (i * c + ch) * l;
        bf16_affine_act(xp + off, zp ? zp + off : nullptr, yp + off, l, m, scale, shift, relu);
      }
    }
  });
}

// ---- batch_norm over rows of channels: channels-last inputs and (N, C) -----------------------------
// A channels-last (N, C, *) input is (N * L, C) rows with the channels contiguous, as a (N, C)
// input (L == 1) is N rows. Threads split the rows: each sums every channel of its rows into its
// own partial sums (vectorized across channels), the partial sums are merged per channel, and a
// second pass over the rows normalizes them. The arithmetic is the channel kernels' (shifted
// sums in double with the first row as the shift, x - mean with the split mean, the same
// roundings for bfloat16), so both layouts give the same results up to the order of the sums.
//
// Two passes over the rows read x (and grad) twice where the channel kernels read each channel
// again from cache, so at large images channels last costs more than the row-major kernels;
// normalizing each slice last rows first (ChannelRows::for_each_backwards) recovers most of it.
// Minimum of 120 runs in ms, 2 threads, float32, weight and bias, the machine under load
// (forward training / eval, backward through autograd), against PyTorch 1.13's channels_last:
//
//   (N, C, H, W)       row-major kernels        channels last            PyTorch channels last
//   16, 64, 32, 32     0.188 / 0.147, 0.247     0.205 / 0.151, 0.319     0.376 / 0.153, 0.584
//   16, 128, 16, 16    0.083 / 0.041, 0.123     0.079 / 0.045, 0.129     0.154 / 0.063, 0.250
//   16, 256, 8, 8      0.056 / 0.023, 0.079     0.041 / 0.021, 0.052     0.067 / 0.031, 0.109
//   16, 512, 4, 4      0.055 / 0.023, 0.065     0.032 / 0.016, 0.034     0.045 / 0.018, 0.057
//
// (N, C) inputs, which ran channel blocks across threads before: 256 x 1024 forward 0.39 ->
// 0.063 ms, backward 0.57 -> 0.088 ms.

// The affine maps' type, which is also that of the saved statistics and parameter gradients.
template <typename T>
using arith_t = std::conditional_t<std::is_same_v<T, bf16>, float, T>;

inline float load(const float* p, int64_t j) { return p[j]; }
inline double load(const double* p, int64_t j) { return p[j]; }
inline void store(float* p, int64_t j, float v) { p[j] = v; }
inline void store(double* p, int64_t j, double v) { p[j] = v; }
// A result rounded to T where the separate ops round it (a no-op unless T is bfloat16).
template <typename T>
inline arith_t<T> rounded(arith_t<T> v) {
  if constexpr (std::is_same_v<T, bf16>) return round_bf16(v);
  else return v;
}

// The statistics passes sweep four rows at a time: each channel's running sums are then read
// and written once per four rows (they live in L1, not in registers).
constexpr int64_t kSweepRows = 4;

// s1[j] += sum(x[., j] - shift[j]), s2[j] += sum((x[., j] - shift[j])^2) over `rows` rows of c.
template <typename T>
[[gnu::always_inline]] inline void rows_shifted_sums_impl(const T* x, int64_t rows, int64_t c, const double* shift,
                                                          double* s1, double* s2) {
  int64_t r = 0;
  for (; r + kSweepRows <= rows; r += kSweepRows) {
    const T *x0 = x + r * c, *x1 = x0 + c, *x2 = x1 + c, *x3 = x2 + c;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      const double d0 = static_cast<double>(load(x0, j)) - shift[j], d1 = static_cast<double>(load(x1, j)) - shift[j];
      const double d2 = static_cast<double>(load(x2, j)) - shift[j], d3 = static_cast<double>(load(x3, j)) - shift[j];
      s1[j] += (d0 + d1) + (d2 + d3);
      s2[j] += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
    }
  }
  for (; r < rows; ++r) {
    const T* row = x + r * c;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      const double d = static_cast<double>(load(row, j)) - shift[j];
      s1[j] += d;
      s2[j] += d * d;
    }
  }
}

// y = act(round((x - mean) * scale + shift) + z) per row, z optional, act none or relu; mean
// split into hi + lo (lo 0 for bfloat16, whose kernels subtract the float mean).
template <typename T>
[[gnu::always_inline]] inline void rows_affine_impl(const T* x, const T* z, T* y, int64_t rows, int64_t c,
                                                    const arith_t<T>* hi, const arith_t<T>* lo,
                                                    const arith_t<T>* scale, const arith_t<T>* shift, bool relu) {
  using A = arith_t<T>;
  const A floor = relu ? A(0) : -std::numeric_limits<A>::infinity();  // v < floor: NaN passes, as relu
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * c;
    T* yr = y + r * c;
    if (z) {
      const T* zr = z + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) {
        const A v = rounded<T>(rounded<T>(((load(xr, j) - hi[j]) - lo[j]) * scale[j] + shift[j]) + load(zr, j));
        store(yr, j, v < floor ? A(0) : v);
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) {
        const A v = rounded<T>(((load(xr, j) - hi[j]) - lo[j]) * scale[j] + shift[j]);
        store(yr, j, v < floor ? A(0) : v);
      }
    }
  }
}

// sg[j] += sum(g'), dot[j] += sum(g' * (x - mean[j])) with g' = g, or with `out` (a relu's
// output) the masked g' = (out <= 0 ? 0 : g), stored into gp when given.
template <typename T>
[[gnu::always_inline]] inline void rows_grad_sums_impl(const T* g, const T* out, const T* x, T* gp, int64_t rows,
                                                       int64_t c, const double* mean, double* sg, double* dot) {
  using A = arith_t<T>;
  if (out) {  // masked: one row at a time
    for (int64_t r = 0; r < rows; ++r) {
      const T *gr = g + r * c, *orow = out + r * c, *xr = x + r * c;
      T* gpr = gp ? gp + r * c : nullptr;
      if (gpr) {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) {
          const A gv = load(gr, j);  // loaded unconditionally: a conditional load does not vectorize
          const A gj = load(orow, j) <= A(0) ? A(0) : gv;
          store(gpr, j, gj);
          sg[j] += static_cast<double>(gj);
          dot[j] += static_cast<double>(gj) * (static_cast<double>(load(xr, j)) - mean[j]);
        }
      } else {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) {
          const A gv = load(gr, j);
          const double gj = static_cast<double>(load(orow, j) <= A(0) ? A(0) : gv);
          sg[j] += gj;
          dot[j] += gj * (static_cast<double>(load(xr, j)) - mean[j]);
        }
      }
    }
    return;
  }
  int64_t r = 0;
  for (; r + kSweepRows <= rows; r += kSweepRows) {
    const T *g0 = g + r * c, *g1 = g0 + c, *g2 = g1 + c, *g3 = g2 + c;
    const T *x0 = x + r * c, *x1 = x0 + c, *x2 = x1 + c, *x3 = x2 + c;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      const double a0 = static_cast<double>(load(g0, j)), a1 = static_cast<double>(load(g1, j));
      const double a2 = static_cast<double>(load(g2, j)), a3 = static_cast<double>(load(g3, j));
      sg[j] += (a0 + a1) + (a2 + a3);
      const double d0 = static_cast<double>(load(x0, j)) - mean[j], d1 = static_cast<double>(load(x1, j)) - mean[j];
      const double d2 = static_cast<double>(load(x2, j)) - mean[j], d3 = static_cast<double>(load(x3, j)) - mean[j];
      dot[j] += (a0 * d0 + a1 * d1) + (a2 * d2 + a3 * d3);
    }
  }
  for (; r < rows; ++r) {
    const T *gr = g + r * c, *xr = x + r * c;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      const double gj = static_cast<double>(load(gr, j));
      sg[j] += gj;
      dot[j] += gj * (static_cast<double>(load(xr, j)) - mean[j]);
    }
  }
}

// gx = g' * a + (x - mean) * b + cc per row (training), gx = g' * a (eval: the input does not
// enter, so an infinite one gives no NaN, as PyTorch); g' masked by `out` as above.
template <typename T>
[[gnu::always_inline]] inline void rows_grad_affine_impl(const T* g, const T* out, const T* x, T* gx, int64_t rows,
                                                         int64_t c, const arith_t<T>* hi, const arith_t<T>* lo,
                                                         const arith_t<T>* a, const arith_t<T>* b,
                                                         const arith_t<T>* cc, bool training) {
  using A = arith_t<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T *gr = g + r * c, *orow = out ? out + r * c : nullptr, *xr = x + r * c;
    T* gxr = gx + r * c;
    if (orow && training) {
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) {
        const A gv = load(gr, j);
        store(gxr, j, (load(orow, j) <= A(0) ? A(0) : gv) * a[j] + ((load(xr, j) - hi[j]) - lo[j]) * b[j] + cc[j]);
      }
    } else if (training) {
#pragma omp simd
      for (int64_t j = 0; j < c; ++j)
        store(gxr, j, load(gr, j) * a[j] + ((load(xr, j) - hi[j]) - lo[j]) * b[j] + cc[j]);
    } else if (orow) {
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) {
        const A gv = load(gr, j);
        store(gxr, j, (load(orow, j) <= A(0) ? A(0) : gv) * a[j]);
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) store(gxr, j, load(gr, j) * a[j]);
    }
  }
}

// Compiled for AVX-512, AVX2 and the baseline, picked at load time (as reduce.cpp's dense loops).
#define PF_ROWS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define PF_ROWS_LOOPS(T)                                                                                             \
  PF_ROWS_CLONES void rows_shifted_sums(const T* x, int64_t rows, int64_t c, const double* shift, double* s1,        \
                                        double* s2) {                                                                \
    rows_shifted_sums_impl(x, rows, c, shift, s1, s2);                                                               \
  }                                                                                                                  \
  PF_ROWS_CLONES void rows_affine(const T* x, const T* z, T* y, int64_t rows, int64_t c, const arith_t<T>* hi,       \
                                  const arith_t<T>* lo, const arith_t<T>* scale, const arith_t<T>* shift,            \
                                  bool relu) {                                                                       \
    rows_affine_impl(x, z, y, rows, c, hi, lo, scale, shift, relu);                                                  \
  }                                                                                                                  \
  PF_ROWS_CLONES void rows_grad_sums(const T* g, const T* out, const T* x, T* gp, int64_t rows, int64_t c,           \
                                     const double* mean, double* sg, double* dot) {                                  \
    rows_grad_sums_impl(g, out, x, gp, rows, c, mean, sg, dot);                                                      \
  }                                                                                                                  \
  PF_ROWS_CLONES void rows_grad_affine(const T* g, const T* out, const T* x, T* gx, int64_t rows, int64_t c,         \
                                       const arith_t<T>* hi, const arith_t<T>* lo, const arith_t<T>* a,              \
                                       const arith_t<T>* b, const arith_t<T>* cc, bool training) {                   \
    rows_grad_affine_impl(g, out, x, gx, rows, c, hi, lo, a, b, cc, training);                                       \
  }
PF_ROWS_LOOPS(float)
PF_ROWS_LOOPS(double)
PF_ROWS_LOOPS(bf16)
#undef PF_ROWS_LOOPS
#undef PF_ROWS_CLONES

// The mean as the affine maps subtract it: split (float, double), or the float mean (bfloat16).
template <typename T>
SplitMean<arith_t<T>> rows_mean(double mean) {
  if constexpr (std::is_same_v<T, bf16>) {
    SplitMean<float> m;
    m.hi = static_cast<float>(mean);
    m.lo = 0.0f;
    return m;
  } else {
    return SplitMean<T>(mean);
  }
}

// The rows of `rows` split into `slices` near-equal ranges, one per thread's partial sums.
struct RowSlices {
  int64_t rows;
  int slices;
  RowSlices(int64_t rows, int64_t c)
      : rows(rows), slices(std::max(1, parallel_slices(rows, std::max<int64_t>(1, kGrainSize / c)))) {}
  int64_t begin(int64_t s) const { return rows * s / slices; }
  int64_t end(int64_t s) const { return rows * (s + 1) / slices; }
};

// Where a rows kernel's rows of channels lie. Channels-last and (N, C) inputs are one run of
// N * L rows of all C channels, split into RowSlices. nn.Graph's channel-blocked activations
// (KernelContext::blocked_input) are N * C/16 runs of L rows of 16 channels, run r holding
// channels (r % (C/16)) * 16 onwards; each run is one item. Every item sums into its own
// partial sums, merged in item order, so results do not depend on the thread count.
struct ChannelRows {
  struct Item {
    int64_t run, r0, r1;
  };
  int64_t channels, width, rows;  // rows per run, each of `width` channels
  std::vector<Item> items;

  ChannelRows(const Tensor& x, bool blocked) : channels(x.sizes()[1]) {
    if (blocked) {
      width = KernelContext::kChannelBlock;
      rows = spatial_size(x);
      const int64_t runs = x.sizes()[0] * (channels / width);
      for (int64_t r = 0; r < runs; ++r) items.push_back({r, 0, rows});
    } else {
      width = channels;
      rows = x.numel() / channels;
      const RowSlices part(rows, channels);
      for (int s = 0; s < part.slices; ++s) items.push_back({0, part.begin(s), part.end(s)});
    }
  }
  int64_t size() const { return static_cast<int64_t>(items.size()); }
  // Element offset of item i's first row, and the first channel its rows hold.
  int64_t offset(int64_t i) const { return (items[i].run * rows + items[i].r0) * width; }
  int64_t first_channel(int64_t i) const { return (items[i].run % (channels / width)) * width; }
  int64_t item_rows(int64_t i) const { return items[i].r1 - items[i].r0; }
  // The element index of channel ch's first element (sample 0, position 0).
  int64_t first_element(int64_t ch) const { return (ch / width) * rows * width + ch % width; }

  // Merges the items' partial sums (per item: a[width], b[width]) into per-channel a, b.
  void merge(const std::vector<double>& partial, std::vector<double>& a, std::vector<double>& b) const {
    a.assign(channels, 0.0);
    b.assign(channels, 0.0);
    for (int64_t i = 0; i < size(); ++i) {
      const double* p = partial.data() + i * 2 * width;
      const int64_t c0 = first_channel(i);
      for (int64_t j = 0; j < width; ++j) {
        a[c0 + j] += p[j];
        b[c0 + j] += p[width + j];
      }
    }
  }

  // f(i, r0, r1) over blocks of rows of every item (r relative to the item's first row), each
  // thread's items and each item's blocks last to first: the thread that summed an item
  // (parallel_for gives item i to the same thread each time) finds the rows it read last still
  // in its cache.
  template <typename F>
  void for_each_backwards(const F& f) const {
    const int64_t block = std::max<int64_t>(kSweepRows, 4096 / width);
    parallel_for(size(), 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i1; i-- > i0;)
        for (int64_t r1 = item_rows(i); r1 > 0; r1 -= block) f(i, std::max<int64_t>(0, r1 - block), r1);
    });
  }
};

bool blocked_batch_norm(const KernelContext& ctx, const Tensor& x, int x_input) {
  if (!ctx.blocked_input(x_input)) return false;
  PF_CHECK(x.dim() == 4 && x.sizes()[1] % KernelContext::kChannelBlock == 0 && x.is_contiguous(), "cpu '",
           ctx.op.name, "': a channel-blocked input must be a dense (N, C, H, W) tensor with C a multiple of 16");
  return true;
}

template <typename T>
void batch_norm_rows(const KernelContext& ctx, bool blocked) {
  using A = arith_t<T>;
  const Tensor& x = ctx.input(0);
  const int64_t c = x.sizes()[1], count = x.numel() / c;
  const BatchNormArgs args(ctx, c);
  const bool training = args.training, has_running = args.has_running;
  const double momentum = args.momentum, eps = args.eps;
  const auto &w = args.weight, &b = args.bias, &rm = args.running_mean, &rv = args.running_var;
  const T* xp = x.data<T>();
  T* yp = ctx.output(0).data<T>();
  A* save_mean = ctx.output(1).data<A>();
  A* save_invstd = ctx.output(2).data<A>();
  const bool relu = fused_relu(ctx);
  const Tensor* addend = fused_addend(ctx);
  const T* zp = addend ? addend->data<T>() : nullptr;

  const ChannelRows part(x, blocked);
  const int64_t width = part.width;
  std::vector<double> shift0(training ? c : 0), s1, s2;
  if (training) {
    for (int64_t j = 0; j < c; ++j) shift0[j] = assumed_mean(static_cast<double>(load(xp, part.first_element(j))));
    std::vector<double> sums(static_cast<size_t>(part.size()) * 2 * width, 0.0);  // per item: s1, s2
    parallel_for(part.size(), 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        rows_shifted_sums(xp + part.offset(i), part.item_rows(i), width, shift0.data() + part.first_channel(i),
                          sums.data() + i * 2 * width, sums.data() + i * 2 * width + width);
    });
    part.merge(sums, s1, s2);
  }
  std::vector<A> hi(c), lo(c), scale(c), shift(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean, invstd;
    if (training) {
      double var;
      moments(s1[ch], s2[ch], shift0[ch], count, mean, var);
      invstd = 1.0 / std::sqrt(var + eps);
      if (has_running) {  // unbiased variance for the running estimate, as PyTorch
        store_channel(ctx.input(3), ch, nn_math::running_mean_update(rm[ch], mean, momentum));
        store_channel(ctx.input(4), ch, nn_math::running_var_update(rv[ch], var, count, momentum));
      }
    } else {
      mean = rm[ch];
      invstd = 1.0 / std::sqrt(rv[ch] + eps);
    }
    save_mean[ch] = static_cast<A>(mean);
    save_invstd[ch] = static_cast<A>(invstd);
    const SplitMean<A> m = rows_mean<T>(mean);
    hi[ch] = m.hi;
    lo[ch] = m.lo;
    // As the channel kernels: float/double scale invstd in T times w; bfloat16 in double.
    if constexpr (std::is_same_v<T, bf16>) scale[ch] = static_cast<float>(invstd * (w.empty() ? 1.0 : w[ch]));
    else scale[ch] = static_cast<T>(invstd) * (w.empty() ? T(1) : static_cast<T>(w[ch]));
    shift[ch] = static_cast<A>(b.empty() ? 0.0 : b[ch]);
  }
  part.for_each_backwards([&](int64_t i, int64_t r0, int64_t r1) {
    const int64_t off = part.offset(i) + r0 * width, c0 = part.first_channel(i);
    rows_affine(xp + off, zp ? zp + off : nullptr, yp + off, r1 - r0, width, hi.data() + c0, lo.data() + c0,
                scale.data() + c0, shift.data() + c0, relu);
  });
}

void batch_norm_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  check_layout(ctx, x, {&x, &ctx.output(0)});
  if (const Tensor* addend = fused_addend(ctx)) check_layout(ctx, x, {addend});
  const bool blocked = blocked_batch_norm(ctx, x, 0);
  const bool rows = blocked || channels_in_rows(x);
  if (x.dtype() == DType::BFloat16)
    return rows ? batch_norm_rows<BFloat16>(ctx, blocked) : batch_norm_reduced<BFloat16>(ctx);
  dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    rows ? batch_norm_rows<T>(ctx, blocked) : batch_norm_typed<T>(ctx);
  });
}

// grad_x for training: w * invstd * (g - mean(g) - xhat * mean(g * xhat)), which per channel is
// g * a + (x - mean) * b + c (nn_math::batch_norm_grad_coefs) with the coefficients rounded to T;
// for eval: g * w * invstd. grad_weight = sum(g * xhat), grad_bias = sum(g).
template <typename T>
struct BatchNormGradCoefs {
  T a, b, c;
};

template <typename T>
BatchNormGradCoefs<T> batch_norm_grad_coefs(bool training, double w, double invstd, double sum_g, double dot,
                                            int64_t count) {
  const nn_math::BatchNormGradCoefs k = nn_math::batch_norm_grad_coefs(training, w, invstd, sum_g, dot, count);
  return {static_cast<T>(k.a), static_cast<T>(k.b), static_cast<T>(k.c)};
}

// batch_norm_backward, and batch_norm_relu_backward: the same with the gradient masked by the
// relu's output on the fly, g' = (out <= 0 ? 0 : g) (stored as grad_pre when asked for).
template <typename T>
void batch_norm_backward_typed(const KernelContext& ctx) {
  const bool masked = ctx.op.name == "batch_norm_relu_backward";
  const int xi = masked ? 2 : 1;  // the operands after grad (and the relu output)
  const Tensor& x = ctx.input(xi);
  const int64_t n = x.sizes()[0], c = x.sizes()[1], l = spatial_size(x);
  const bool training = ctx.attr<bool>("training"), has_weight = ctx.attr<bool>("has_weight");
  const T* gp = ctx.input(0).data<T>();
  const T* xp = x.data<T>();
  const VecView<T> w = has_weight ? VecView<T>(ctx.input(xi + 1)) : VecView<T>();
  const VecView<T> mean_v(ctx.input(xi + 2)), invstd_v(ctx.input(xi + 3));
  const T* op = masked ? ctx.input(1).data<T>() : nullptr;
  T* gpp = masked && ctx.attr<bool>("has_grad_pre") ? ctx.output(3).data<T>() : nullptr;
  T* gxp = ctx.output(0).data<T>();
  T* gwp = ctx.output(1).data<T>();
  T* gbp = ctx.output(2).data<T>();
  const int64_t count = n * l;
  auto weight_of = [&](int64_t ch) { return has_weight ? static_cast<double>(w[ch]) : 1.0; };

  parallel_for(c, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, count)), [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      const double mean = static_cast<double>(mean_v[ch]), invstd = static_cast<double>(invstd_v[ch]);
      double sum_g = 0, dot = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t off = (i * c + ch) * l;
        if (op) masked_grad_sums(gp + off, op + off, xp + off, gpp ? gpp + off : nullptr, l, mean, sum_g, dot);
        else grad_sums(gp + off, xp + off, l, mean, sum_g, dot);
      }
      gwp[ch] = static_cast<T>(dot * invstd);
      gbp[ch] = static_cast<T>(sum_g);
      const auto k = batch_norm_grad_coefs<T>(training, weight_of(ch), invstd, sum_g, dot, count);
      const SplitMean<T> split(mean);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t off = (i * c + ch) * l;
        if (training) {
          if (gpp) grad_affine_run(gpp + off, xp + off, gxp + off, l, split, k.a, k.b, k.c);
          else if (op) masked_grad_affine_run(gp + off, op + off, xp + off, gxp + off, l, split, k.a, k.b, k.c);
          else grad_affine_run(gp + off, xp + off, gxp + off, l, split, k.a, k.b, k.c);
        } else {  // gx = g * w * invstd: the input does not enter (an infinite one gives no NaN)
          const T* g = gpp ? gpp + off : gp + off;
          if (op && !gpp) {
            for (int64_t e = 0; e < l; ++e) gxp[off + e] = (op[off + e] <= T(0) ? T(0) : g[e]) * k.a;
          } else {
            for (int64_t e = 0; e < l; ++e) gxp[off + e] = g[e] * k.a;
          }
        }
      }
    }
  });
}

// The backward of batch_norm_reduced: sums in double, grad_x in float with one rounding.
// batch_norm_relu_backward likewise, with the gradient masked by the relu's output on the fly.
template <typename T>
void batch_norm_backward_reduced(const KernelContext& ctx) {
  const bool masked = ctx.op.name == "batch_norm_relu_backward";
  const int xi = masked ? 2 : 1;  // the operands after grad (and the relu output)
  const Tensor& x = ctx.input(xi);
  const int64_t n = x.sizes()[0], c = x.sizes()[1], l = spatial_size(x), count = n * l;
  const bool training = ctx.attr<bool>("training");
  const std::vector<double> w = channel_values(ctx.input(xi + 1), ctx.attr<bool>("has_weight"), c);
  const std::vector<double> mean_v = channel_values(ctx.input(xi + 2), true, c),
                            invstd_v = channel_values(ctx.input(xi + 3), true, c);
  const T* gp = ctx.input(0).data<T>();
  const T* op = masked ? ctx.input(1).data<T>() : nullptr;
  T* gpp = masked && ctx.attr<bool>("has_grad_pre") ? ctx.output(3).data<T>() : nullptr;
  const T* xp = x.data<T>();
  T* gxp = ctx.output(0).data<T>();
  float* gwp = ctx.output(1).data<float>();
  float* gbp = ctx.output(2).data<float>();
  parallel_for(c, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, count)), [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      const double mean = mean_v[ch], invstd = invstd_v[ch];
      double sum_g = 0, dot = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t off = (i * c + ch) * l;
        bf16_grad_sums(gp + off, op ? op + off : nullptr, xp + off, gpp ? gpp + off : nullptr, l, mean, sum_g, dot);
      }
      gwp[ch] = static_cast<float>(dot * invstd);
      gbp[ch] = static_cast<float>(sum_g);
      const auto k = batch_norm_grad_coefs<float>(training, w.empty() ? 1.0 : w[ch], invstd, sum_g, dot, count);
      const float m = static_cast<float>(mean);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t off = (i * c + ch) * l;
        bf16_grad_affine(gp + off, op ? op + off : nullptr, xp + off, gxp + off, l, m, k.a, k.b, k.c);
      }
    }
  });
}

// batch_norm_backward and batch_norm_relu_backward over rows of channels (see batch_norm_rows).
template <typename T>
void batch_norm_backward_rows(const KernelContext& ctx, bool blocked) {
  using A = arith_t<T>;
  const bool masked = ctx.op.name == "batch_norm_relu_backward";
  const int xi = masked ? 2 : 1;  // the operands after grad (and the relu output)
  const Tensor& x = ctx.input(xi);
  const int64_t c = x.sizes()[1], count = x.numel() / c;
  const bool training = ctx.attr<bool>("training");
  const std::vector<double> w = channel_values(ctx.input(xi + 1), ctx.attr<bool>("has_weight"), c);
  const std::vector<double> mean = channel_values(ctx.input(xi + 2), true, c),
                            invstd = channel_values(ctx.input(xi + 3), true, c);
  const T* gp = ctx.input(0).data<T>();
  const T* op = masked ? ctx.input(1).data<T>() : nullptr;
  T* gpp = masked && ctx.attr<bool>("has_grad_pre") ? ctx.output(3).data<T>() : nullptr;
  const T* xp = x.data<T>();
  T* gxp = ctx.output(0).data<T>();
  A* gwp = ctx.output(1).data<A>();
  A* gbp = ctx.output(2).data<A>();
  const ChannelRows part(x, blocked);
  const int64_t width = part.width;
  std::vector<double> sums(static_cast<size_t>(part.size()) * 2 * width, 0.0);  // per item: sum g, dot
  parallel_for(part.size(), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t off = part.offset(i);
      rows_grad_sums(gp + off, op ? op + off : nullptr, xp + off, gpp ? gpp + off : nullptr, part.item_rows(i), width,
                     mean.data() + part.first_channel(i), sums.data() + i * 2 * width,
                     sums.data() + i * 2 * width + width);
    }
  });
  std::vector<double> sum_g, dot;
  part.merge(sums, sum_g, dot);
  std::vector<A> hi(c), lo(c), ka(c), kb(c), kc(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    gwp[ch] = static_cast<A>(dot[ch] * invstd[ch]);
    gbp[ch] = static_cast<A>(sum_g[ch]);
    const auto k = batch_norm_grad_coefs<A>(training, w.empty() ? 1.0 : w[ch], invstd[ch], sum_g[ch], dot[ch], count);
    const SplitMean<A> m = rows_mean<T>(mean[ch]);
    hi[ch] = m.hi;
    lo[ch] = m.lo;
    ka[ch] = k.a;
    kb[ch] = k.b;
    kc[ch] = k.c;
  }
  part.for_each_backwards([&](int64_t i, int64_t r0, int64_t r1) {
    const int64_t off = part.offset(i) + r0 * width, c0 = part.first_channel(i);
    rows_grad_affine(gp + off, op ? op + off : nullptr, xp + off, gxp + off, r1 - r0, width, hi.data() + c0,
                     lo.data() + c0, ka.data() + c0, kb.data() + c0, kc.data() + c0, training);
  });
}

// batch_norm_backward (grad, x, ...) and batch_norm_relu_backward (grad, out, x, ...).
void batch_norm_backward_kernel(KernelContext& ctx) {
  const bool masked = ctx.op.name == "batch_norm_relu_backward";
  const Tensor& x = ctx.input(masked ? 2 : 1);
  check_layout(ctx, x, {&ctx.input(0), &x, &ctx.output(0)});
  if (masked) check_layout(ctx, x, {&ctx.input(1)});
  if (masked && ctx.attr<bool>("has_grad_pre")) check_layout(ctx, x, {&ctx.output(3)});
  const bool blocked = blocked_batch_norm(ctx, x, masked ? 2 : 1);
  const bool rows = blocked || channels_in_rows(x);
  if (x.dtype() == DType::BFloat16)
    return rows ? batch_norm_backward_rows<BFloat16>(ctx, blocked) : batch_norm_backward_reduced<BFloat16>(ctx);
  dispatch_float(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    rows ? batch_norm_backward_rows<T>(ctx, blocked) : batch_norm_backward_typed<T>(ctx);
  });
}

// ---- layer_norm --------------------------------------------------------------------------------------

template <typename T>
void layer_norm_typed(const KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t m = x.sizes()[0], n = x.sizes()[1];
  const bool has_weight = ctx.attr<bool>("has_weight"), has_bias = ctx.attr<bool>("has_bias");
  const double eps = ctx.attr<double>("eps");
  const T* xp = x.data<T>();
  const T* wp = has_weight ? ctx.input(1).data<T>() : nullptr;  // contiguous (functional layer)
  const T* bp = has_bias ? ctx.input(2).data<T>() : nullptr;
  T* yp = ctx.output(0).data<T>();
  T* meanp = ctx.output(1).data<T>();
  T* rstdp = ctx.output(2).data<T>();
  parallel_for(m, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, n)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = xp + r * n;
      T* out = yp + r * n;
      const double shift0 = assumed_mean(row[0]);
      double s1 = 0, s2 = 0, mean, var;
      shifted_sums(row, n, shift0, s1, s2);
      moments(s1, s2, shift0, n, mean, var);
      const double rstd = 1.0 / std::sqrt(var + eps);
      meanp[r] = static_cast<T>(mean);
      rstdp[r] = static_cast<T>(rstd);
      layer_norm_row(row, out, n, SplitMean<T>(mean), static_cast<T>(rstd), wp, bp);
    }
  });
}

void layer_norm_kernel(KernelContext& ctx) {
  check_contiguous(ctx, {&ctx.input(0), &ctx.input(1), &ctx.input(2)});
  dispatch_float(ctx, ctx.input(0).dtype(), [&](auto tag) { layer_norm_typed<typename decltype(tag)::type>(ctx); });
}

// Per row: gx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)). grad_weight/grad_bias are
// column sums over the rows: each slice of rows sums into its own buffer, merged at the end.
template <typename T>
void layer_norm_backward_typed(const KernelContext& ctx) {
  const Tensor& x = ctx.input(1);
  const int64_t m = x.sizes()[0], n = x.sizes()[1];
  const bool has_weight = ctx.attr<bool>("has_weight");
  const T* gp = ctx.input(0).data<T>();
  const T* xp = x.data<T>();
  const T* wp = has_weight ? ctx.input(2).data<T>() : nullptr;
  const T* meanp = ctx.input(3).data<T>();
  const T* rstdp = ctx.input(4).data<T>();
  T* gxp = ctx.output(0).data<T>();
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, n));
  const int slices = std::max(1, parallel_slices(m, grain));
  std::vector<double> gw_part(static_cast<size_t>(slices) * n, 0.0), gb_part(static_cast<size_t>(slices) * n, 0.0);
  parallel_for(slices, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      double* gw = gw_part.data() + s * n;
      double* gb = gb_part.data() + s * n;
      for (int64_t r = m * s / slices; r < m * (s + 1) / slices; ++r) {
        const T* g = gp + r * n;
        const T* xr = xp + r * n;
        T* out = gxp + r * n;
        layer_norm_backward_row(g, xr, out, n, wp, static_cast<double>(meanp[r]), static_cast<double>(rstdp[r]), gw,
                                gb);
      }
    }
  });
  T* gwp = ctx.output(1).data<T>();
  T* gbp = ctx.output(2).data<T>();
  for (int64_t j = 0; j < n; ++j) {
    double sw = 0, sb = 0;
    for (int s = 0; s < slices; ++s) {
      sw += gw_part[s * n + j];
      sb += gb_part[s * n + j];
    }
    gwp[j] = static_cast<T>(sw);
    gbp[j] = static_cast<T>(sb);
  }
}

void layer_norm_backward_kernel(KernelContext& ctx) {
  check_contiguous(ctx, {&ctx.input(0), &ctx.input(1), &ctx.input(2)});
  dispatch_float(ctx, ctx.input(1).dtype(),
                 [&](auto tag) { layer_norm_backward_typed<typename decltype(tag)::type>(ctx); });
}

// ---- group_norm --------------------------------------------------------------------------------------

template <typename T>
void group_norm_typed(const KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t n = x.sizes()[0], c = x.sizes()[1], l = x.sizes()[2];
  const int64_t groups = ctx.attr<int64_t>("groups"), d = c / groups, k = d * l;
  const bool has_weight = ctx.attr<bool>("has_weight"), has_bias = ctx.attr<bool>("has_bias");
  const double eps = ctx.attr<double>("eps");
  const T* xp = x.data<T>();
  const T* wp = has_weight ? ctx.input(1).data<T>() : nullptr;
  const T* bp = has_bias ? ctx.input(2).data<T>() : nullptr;
  T* yp = ctx.output(0).data<T>();
  T* meanp = ctx.output(1).data<T>();
  T* rstdp = ctx.output(2).data<T>();
  // Slice (i, g) is k contiguous elements starting at ((i * groups) + g) * k.
  parallel_for(n * groups, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, k)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* slice = xp + r * k;
      T* out = yp + r * k;
      const double shift0 = assumed_mean(slice[0]);
      double s1 = 0, s2 = 0, mean, var;
      shifted_sums(slice, k, shift0, s1, s2);
      moments(s1, s2, shift0, k, mean, var);
      const double rstd = 1.0 / std::sqrt(var + eps);
      meanp[r] = static_cast<T>(mean);
      rstdp[r] = static_cast<T>(rstd);
      const int64_t c_first = (r % groups) * d;
      const SplitMean<T> mu(mean);
      for (int64_t j = 0; j < d; ++j) {
        const int64_t ch = c_first + j;
        const T scale = static_cast<T>(rstd) * (wp ? wp[ch] : T(1));
        affine_run(slice + j * l, out + j * l, l, mu, scale, bp ? bp[ch] : T(0));
      }
    }
  });
}

void group_norm_kernel(KernelContext& ctx) {
  check_contiguous(ctx, {&ctx.input(0), &ctx.input(1), &ctx.input(2)});
  dispatch_float(ctx, ctx.input(0).dtype(), [&](auto tag) { group_norm_typed<typename decltype(tag)::type>(ctx); });
}

// Per (sample, channel): sum_g and dot = sum(g * (x - mean)); then per (sample, group):
// gx = g * (w_c * rstd) + (x - mean) * b + c, b = -rstd^3 * sum_c(w_c * dot) / K,
// c = -rstd * sum_c(w_c * sum_g) / K (K elements per group), as for layer_norm with the weight
// varying by channel. grad_weight[c] = sum_i dot * rstd, grad_bias[c] = sum_i sum_g.
template <typename T>
void group_norm_backward_typed(const KernelContext& ctx) {
  const Tensor& x = ctx.input(1);
  const int64_t n = x.sizes()[0], c = x.sizes()[1], l = x.sizes()[2];
  const int64_t groups = ctx.attr<int64_t>("groups"), d = c / groups, k = d * l;
  const bool has_weight = ctx.attr<bool>("has_weight");
  const T* gp = ctx.input(0).data<T>();
  const T* xp = x.data<T>();
  const T* wp = has_weight ? ctx.input(2).data<T>() : nullptr;
  const T* meanp = ctx.input(3).data<T>();
  const T* rstdp = ctx.input(4).data<T>();
  T* gxp = ctx.output(0).data<T>();
  std::vector<double> sum_g(static_cast<size_t>(n * c)), dot(static_cast<size_t>(n * c));
  parallel_for(n * groups, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, 2 * k)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const double mean = static_cast<double>(meanp[r]), rstd = static_cast<double>(rstdp[r]);
      const int64_t row0 = r * d;  // the group's first (sample, channel) row
      double sum_wg = 0, sum_wdot = 0;
      for (int64_t j = 0; j < d; ++j) {
        double sg = 0, dt = 0;
        grad_sums(gp + (row0 + j) * l, xp + (row0 + j) * l, l, mean, sg, dt);
        sum_g[row0 + j] = sg;
        dot[row0 + j] = dt;
        const double wc = wp ? static_cast<double>(wp[(r % groups) * d + j]) : 1.0;
        sum_wg += wc * sg;
        sum_wdot += wc * dt;
      }
      const double b = -rstd * rstd * rstd * sum_wdot / static_cast<double>(k);
      const double cst = -rstd * sum_wg / static_cast<double>(k);
      const SplitMean<T> mu(mean);
      for (int64_t j = 0; j < d; ++j) {
        const double wc = wp ? static_cast<double>(wp[(r % groups) * d + j]) : 1.0;
        const int64_t off = (row0 + j) * l;
        grad_affine_run(gp + off, xp + off, gxp + off, l, mu, static_cast<T>(wc * rstd), static_cast<T>(b),
                        static_cast<T>(cst));
      }
    }
  });
  T* gwp = ctx.output(1).data<T>();
  T* gbp = ctx.output(2).data<T>();
  for (int64_t ch = 0; ch < c; ++ch) {
    double sw = 0, sb = 0;
    for (int64_t i = 0; i < n; ++i) {
      sw += dot[i * c + ch] * static_cast<double>(rstdp[i * groups + ch / d]);
      sb += sum_g[i * c + ch];
    }
    gwp[ch] = static_cast<T>(sw);
    gbp[ch] = static_cast<T>(sb);
  }
}

void group_norm_backward_kernel(KernelContext& ctx) {
  check_contiguous(ctx, {&ctx.input(0), &ctx.input(1), &ctx.input(2)});
  dispatch_float(ctx, ctx.input(1).dtype(),
                 [&](auto tag) { group_norm_backward_typed<typename decltype(tag)::type>(ctx); });
}

// ---- embedding ---------------------------------------------------------------------------------------

[[noreturn]] void embedding_index_error(int64_t index, int64_t size) {
  PF_THROW(IndexError, "index out of range in self (index ", index, " is out of bounds for an embedding of size ",
           size, ")");
}

// out[i, :] = weight[indices[i], :]; weight may have any strides. Only the element size
// matters (a byte copy).
void embedding_kernel(KernelContext& ctx) {
  const Tensor& w = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const Tensor& out = ctx.output(0);
  check_contiguous(ctx, {&idx});
  const int64_t v = w.sizes()[0], d = w.sizes()[1], m = idx.sizes()[0];
  const auto isz = static_cast<int64_t>(w.itemsize());
  const int64_t row_stride = w.strides()[0] * isz, col_stride = w.strides()[1] * isz;
  const int64_t* ip = idx.data<int64_t>();
  const char* wp = static_cast<const char*>(w.data_ptr());
  char* op = static_cast<char*>(out.data_ptr());
  parallel_for(m, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, d)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = ip[i];
      if (row < 0 || row >= v) embedding_index_error(row, v);
      const char* src = wp + row * row_stride;
      char* dst = op + i * d * isz;
      if (col_stride == isz) {
        std::memcpy(dst, src, static_cast<size_t>(d * isz));
      } else {
        for (int64_t j = 0; j < d; ++j) std::memcpy(dst + j * isz, src + j * col_stride, static_cast<size_t>(isz));
      }
    }
  });
}

template <typename T>
void embedding_backward_typed(const KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const int64_t m = g.sizes()[0], d = g.sizes()[1];
  const int64_t v = ctx.attr<int64_t>("num_weights"), padding = ctx.attr<int64_t>("padding_idx");
  const bool by_freq = ctx.attr<bool>("scale_grad_by_freq");
  const T* gp = g.data<T>();
  const int64_t* ip = idx.data<int64_t>();
  T* out = ctx.output(0).data<T>();
  std::memset(out, 0, static_cast<size_t>(v * d) * sizeof(T));
  for (int64_t i = 0; i < m; ++i)
    if (ip[i] < 0 || ip[i] >= v) embedding_index_error(ip[i], v);
  std::vector<int64_t> counts;
  if (by_freq) {
    counts.assign(static_cast<size_t>(v), 0);
    for (int64_t i = 0; i < m; ++i) ++counts[ip[i]];
  }
  // Each thread owns a range of destination rows and scans every index: no two threads write
  // the same row, and each row sums its contributions in index order (deterministic).
  const int64_t work = std::max<int64_t>(1, m * d);
  parallel_for(v, std::max<int64_t>(1, v * kGrainSize / work), [&](int64_t v0, int64_t v1) {
    for (int64_t i = 0; i < m; ++i) {
      const int64_t row = ip[i];
      if (row < v0 || row >= v1 || row == padding) continue;
      const T* src = gp + i * d;
      T* dst = out + row * d;
      if (by_freq) {
        const T scale = T(1) / static_cast<T>(counts[row]);
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) dst[j] += src[j] * scale;
      } else {
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) dst[j] += src[j];
      }
    }
  });
}

void embedding_backward_kernel(KernelContext& ctx) {
  check_contiguous(ctx, {&ctx.input(0), &ctx.input(1)});
  dispatch_float(ctx, ctx.input(0).dtype(),
                 [&](auto tag) { embedding_backward_typed<typename decltype(tag)::type>(ctx); });
}

// ---- dropout -----------------------------------------------------------------------------------------

// Philox costs ~40 integer ops per four elements: parallelize earlier than plain arithmetic.
constexpr int64_t kDropoutGrain = kGrainSize / 4;

// mask = keep ? scale : 0 and y = x * mask over one block: a select, not a branch (a random
// mask mispredicts), vectorized per ISA for float and double.
template <typename T>
[[gnu::always_inline]] inline void dropout_apply_impl(const uint32_t* words, uint32_t threshold, T scale, const T* x,
                                                      T* y, T* mask, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const T m = nn_math::dropout_keeps(words[j], threshold) ? scale : T(0);
    mask[j] = m;
    y[j] = x[j] * m;
  }
}
#define PF_DROPOUT_APPLY(T)                                                                                 \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void dropout_apply(         \
      const uint32_t* words, uint32_t threshold, T scale, const T* x, T* y, T* mask, int64_t n) {           \
    dropout_apply_impl(words, threshold, scale, x, y, mask, n);                                             \
  }
PF_DROPOUT_APPLY(float)
PF_DROPOUT_APPLY(double)
#undef PF_DROPOUT_APPLY
// bfloat16: the product in float, rounded once (the bit-level load/store above vectorize).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void dropout_apply(
    const uint32_t* words, uint32_t threshold, bf16 scale, const bf16* x, bf16* y, bf16* mask, int64_t n) {
  const float s = BFloat16::to_float(scale.bits);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const float m = nn_math::dropout_keeps(words[j], threshold) ? s : 0.0f;
    store(mask, j, m);
    store(y, j, load(x, j) * m);
  }
}
template <typename T>  // float16: each product rounded once, as PyTorch
void dropout_apply(const uint32_t* words, uint32_t threshold, T scale, const T* x, T* y, T* mask, int64_t n) {
  dropout_apply_impl(words, threshold, scale, x, y, mask, n);
}

template <typename T>
void dropout_typed(const KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t numel = x.numel();
  const double p = ctx.attr<double>("p");
  const T scale = static_cast<T>(ctx.attr<double>("scale"));
  const auto seed = static_cast<uint64_t>(ctx.attr<int64_t>("seed"));
  const auto offset = static_cast<uint64_t>(ctx.attr<int64_t>("offset"));
  const uint32_t threshold = nn_math::dropout_threshold(p);
  const T* xp = x.data<T>();
  T* yp = ctx.output(0).data<T>();
  T* mp = ctx.output(1).data<T>();
  constexpr int64_t kBlock = 4 * kPhiloxLanes;  // elements per philox_block
  const int64_t blocks = (numel + kBlock - 1) / kBlock;
  parallel_for(blocks, std::max<int64_t>(1, kDropoutGrain / kBlock), [&](int64_t b0, int64_t b1) {
    uint32_t words[kBlock];
    for (int64_t b = b0; b < b1; ++b) {
      philox_block(seed, offset + static_cast<uint64_t>(b * kPhiloxLanes), words);
      const int64_t base = b * kBlock, end = std::min<int64_t>(kBlock, numel - base);
      dropout_apply(words, threshold, scale, xp + base, yp + base, mp + base, end);
    }
  });
}

void dropout_kernel(KernelContext& ctx) {
  check_contiguous(ctx, {&ctx.input(0)});
  for (int o = 0; o < 2; ++o)
    PF_CHECK(ctx.output(o).is_contiguous(), "cpu 'dropout' kernel writes contiguous outputs");
  // 16-bit floats as PyTorch: the scale rounded to the dtype, each product rounded once.
  visit_dtype(ctx.input(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) dropout_typed<T>(ctx);
    else PF_THROW(NotImplementedError, "cpu 'dropout' kernel: floating inputs only");
  });
}

// The 16-bit dtypes of kernels that accumulate in T: through float32 copies (run_widened).
template <KernelFn Kernel>
void widened_kernel(KernelContext& ctx) {
  run_widened(ctx, Kernel);
}

}  // namespace

void layer_norm_native(KernelContext& ctx) { layer_norm_kernel(ctx); }

void register_norm_kernels(Registrar& reg) {
  const auto floats = {DType::Float32, DType::Float64};
  const auto halves = {DType::Float16, DType::BFloat16};
  reg.kernel("batch_norm", DeviceType::CPU, {DType::BFloat16, DType::Float32, DType::Float64}, batch_norm_kernel);
  reg.kernel("batch_norm_backward", DeviceType::CPU, {DType::BFloat16, DType::Float32, DType::Float64},
             batch_norm_backward_kernel);
  reg.kernel("batch_norm_fused", DeviceType::CPU, {DType::BFloat16, DType::Float32, DType::Float64}, batch_norm_kernel);
  reg.kernel("batch_norm_relu_backward", DeviceType::CPU, {DType::BFloat16, DType::Float32, DType::Float64},
             batch_norm_backward_kernel);
  reg.kernel("layer_norm", DeviceType::CPU, floats, layer_norm_native);
  reg.kernel("layer_norm_backward", DeviceType::CPU, floats, layer_norm_backward_kernel);
  reg.kernel("group_norm", DeviceType::CPU, floats, group_norm_kernel);
  reg.kernel("group_norm_backward", DeviceType::CPU, floats, group_norm_backward_kernel);
  reg.kernel("layer_norm", DeviceType::CPU, halves, widened_kernel<layer_norm_native>);
  reg.kernel("layer_norm_backward", DeviceType::CPU, halves, widened_kernel<layer_norm_backward_kernel>);
  reg.kernel("group_norm", DeviceType::CPU, halves, widened_kernel<group_norm_kernel>);
  reg.kernel("group_norm_backward", DeviceType::CPU, halves, widened_kernel<group_norm_backward_kernel>);
  reg.kernel("embedding_backward", DeviceType::CPU, halves, widened_kernel<embedding_backward_kernel>);
  reg.kernel("embedding_backward", DeviceType::CPU, floats, embedding_backward_kernel);
  // core/opdefs/norm.yaml names the kernel function and dtypes of the ops with one function for
  // every dtype (embedding, dropout); the others are registered above (`kernel: custom` there).
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) reg.kernel(name, DeviceType::CPU, {PF_OPDEFS_UNPAREN cpu_dtypes}, fn);
  PF_OPDEFS_NORM_KERNELS(PF_X)
#undef PF_X
}

}  // namespace plugflow::cpu
