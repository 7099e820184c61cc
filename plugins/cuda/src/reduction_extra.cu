// The reduction family beyond sum/prod/mean (docs/kernels.md, "Reduction family") on CUDA:
//   * var_mean (Welford, partials merged with Chan's formula; the functor VarMeanRed of
//     core/opdefs/moments.yaml), norm: reducers for
//     the shared driver of reduce.cuh, so any dims and strides and the chunked two-pass path
//     for long reductions come with it.
//   * the scans of core/opdefs/along_dim.yaml (cumsum, cumprod; each op's step a functor
//     XScan) along one dim. Lines whose elements are closer in memory than neighbouring lines
//     (e.g. along the last dim) get a block each, scanned tile by tile with cub::BlockScan and
//     a running carry; other lines (e.g. along dim 0 of a matrix) get a thread each, so a warp
//     reads 32 neighbouring lines' elements at once.
//   * softmax, log_softmax (the definitions' softmax family): the same split. A line's max and
//     sum of exp(x - max) come from one online pass (the sum rescaled whenever the max grows;
//     block partials merge the same way), then a second pass writes.
#include <cub/block/block_scan.cuh>

#include <cmath>
#include <limits>

#include "dmath.cuh"
#include "lines.cuh"
#include "opdefs.h"
#include "reduce.cuh"

namespace plugflow::cuda {
namespace {

// Max/min that propagate NaN (a NaN accumulator stays, a NaN input takes over).
template <typename C>
PF_DEVICE C max_nan(C a, C x) {
  return (x > a || x != x) ? x : a;
}
template <typename C>
PF_DEVICE C min_nan(C a, C x) {
  return (x < a || x != x) ? x : a;
}

// ---- var_mean --------------------------------------------------------------------------------

// Welford in double for every floating dtype, as the CPU kernel.
template <typename D>
struct VarMeanRed {
  struct acc_t {
    double mean, m2, n;
  };
  double correction;
  bool take_sqrt;
  explicit VarMeanRed(const KernelContext& ctx)
      : correction(ctx.attr<double>("correction")), take_sqrt(ctx.attr<bool>("take_sqrt")) {}
  PF_DEVICE acc_t identity() const { return {0.0, 0.0, 0.0}; }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t) const {
    const double v = static_cast<double>(to_opmath(x));
    a.n += 1;
    const double d = v - a.mean;
    a.mean += d / a.n;
    a.m2 += d * (v - a.mean);
    return a;
  }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const double n = a.n + b.n, d = b.mean - a.mean;
    return {a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * b.n / n), n};
  }
  // Divisor max(0, N - correction): N <= correction gives inf (or nan for a constant slice).
  PF_DEVICE void write(char* var_out, char* mean_out, acc_t a, int64_t) const {
    double v = a.m2 / fmax(0.0, a.n - correction);
    if (take_sqrt) v = sqrt(v);
    *reinterpret_cast<D*>(var_out) = cast_to<D>(v);
    *reinterpret_cast<D*>(mean_out) = cast_to<D>(a.mean);
  }
};

// The two-output moments of core/opdefs/moments.yaml: Red<D> built from the kernel's attributes
// writes both outputs of a slice.
template <template <typename> class Red, typename Types>
void moments_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor &first = ctx.output(0), &second = ctx.output(1);
  PF_CHECK(first.dtype() == a.dtype() && second.dtype() == a.dtype(), "cuda '", ctx.op.name,
           "' kernel writes its input's dtype (", dtype_name(a.dtype()), ")");
  const ReduceIndexing ix =
      make_reduce_indexing(a, ctx.attr<Shape>("dims"), ctx.attr<bool>("keepdim"), first, &second);
  dispatch_supported<Types>(ctx, a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    run_reduce<Red<D>, D>(ix, a, static_cast<char*>(first.data_ptr()), static_cast<char*>(second.data_ptr()),
                          Red<D>(ctx), scope);
  });
}

// ---- norm ------------------------------------------------------------------------------------

enum class NormKind { Zero, One, Two, Inf, NegInf, P };

// Accumulates in double (float32/64) or float (f16/bf16), as the CPU kernel.
template <typename D, NormKind K>
struct NormRed {
  using acc_t = sum_acc_t<D>;
  acc_t p;
  PF_DEVICE acc_t identity() const { return K == NormKind::NegInf ? dm::inf<acc_t>() : acc_t(0); }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t) const {
    const acc_t v = dm::fabs(static_cast<acc_t>(to_opmath(x)));
    if constexpr (K == NormKind::Zero) return a + static_cast<acc_t>(v != acc_t(0));  // NaN counts
    else if constexpr (K == NormKind::One) return a + v;
    else if constexpr (K == NormKind::Two) return a + v * v;
    else if constexpr (K == NormKind::Inf) return max_nan(a, v);
    else if constexpr (K == NormKind::NegInf) return min_nan(a, v);
    else return a + dm::pow(v, p);
  }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const {
    if constexpr (K == NormKind::Inf) return max_nan(a, b);
    else if constexpr (K == NormKind::NegInf) return min_nan(a, b);
    else return a + b;
  }
  PF_DEVICE void write(char* out0, char*, acc_t a, int64_t) const {
    acc_t r = a;
    if constexpr (K == NormKind::Two) r = dm::sqrt(a);
    else if constexpr (K == NormKind::P) r = dm::pow(a, acc_t(1) / p);
    *reinterpret_cast<D*>(out0) = cast_to<D>(r);
  }
};

template <typename D, NormKind K>
void run_norm(const ReduceIndexing& ix, const Tensor& a, const Tensor& out, double p, const KernelScope& scope) {
  using acc_t = typename NormRed<D, K>::acc_t;
  run_reduce<NormRed<D, K>, D>(ix, a, static_cast<char*>(out.data_ptr()), nullptr,
                               NormRed<D, K>{static_cast<acc_t>(p)}, scope);
}

void norm_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  PF_CHECK(out.dtype() == a.dtype(), "cuda 'norm' kernel writes its input's dtype (", dtype_name(a.dtype()),
           "), the output is ", dtype_name(out.dtype()));
  const ReduceIndexing ix = make_reduce_indexing(a, ctx.attr<Shape>("dims"), ctx.attr<bool>("keepdim"), out, nullptr);
  const double p = ctx.attr<double>("p");
  dispatch_supported<FloatTypes>(ctx, a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    if (p == 0) run_norm<D, NormKind::Zero>(ix, a, out, p, scope);
    else if (p == 1) run_norm<D, NormKind::One>(ix, a, out, p, scope);
    else if (p == 2) run_norm<D, NormKind::Two>(ix, a, out, p, scope);
    else if (std::isinf(p) && p > 0) run_norm<D, NormKind::Inf>(ix, a, out, p, scope);
    else if (std::isinf(p)) run_norm<D, NormKind::NegInf>(ix, a, out, p, scope);
    else run_norm<D, NormKind::P>(ix, a, out, p, scope);
  });
}

// ---- lines: launch shapes ------------------------------------------------------------------------

// Lines at least this long that are inner get a block each; shorter or outer ones a thread.
constexpr int64_t kBlockLineMin = 32;

bool block_per_line(const Lines& L) { return L.inner && L.n >= kBlockLineMin; }

// Blocks for a grid-stride loop of one block per line.
unsigned line_blocks(const Lines& L, const KernelScope& scope) {
  const int64_t cap = static_cast<int64_t>(backend().multiprocessor_count(scope.device)) * (2048 / kBlockThreads);
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(L.num_lines, cap)));
}

// ---- scans ----------------------------------------------------------------------------------------

// A scan's step, named after its op (core/opdefs/along_dim.yaml), accumulating like sum/prod:
// double (float32/64), float (f16/bf16), wrapping 64-bit integers.
template <typename D>
struct CumsumScan {
  using acc_t = sum_acc_t<D>;
  PF_DEVICE acc_t identity() const { return acc_t(0); }
  PF_DEVICE acc_t operator()(acc_t a, acc_t b) const { return a + b; }
};
template <typename D>
struct CumprodScan {
  using acc_t = sum_acc_t<D>;
  PF_DEVICE acc_t identity() const { return acc_t(1); }
  PF_DEVICE acc_t operator()(acc_t a, acc_t b) const { return a * b; }
};

template <typename D, template <typename> class ScanT>
__global__ void scan_thread_per_line_kernel(Lines L, const char* in, char* out, bool reverse) {
  using acc_t = typename ScanT<D>::acc_t;
  const ScanT<D> op;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t line = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; line < L.num_lines; line += step) {
    int64_t in_off, out_off, unused;
    L.ix.output_offsets(line, in_off, out_off, unused);
    acc_t acc = op.identity();
    for (int64_t s = 0; s < L.n; ++s) {
      const int64_t j = reverse ? L.n - 1 - s : s;
      acc = op(acc, to_acc<D, acc_t>(*reinterpret_cast<const D*>(in + in_off + j * L.in_step)));
      *reinterpret_cast<D*>(out + out_off + j * L.out0_step) = from_acc<D>(acc);
    }
  }
}

// One block per line (grid-stride over lines; every thread of a block runs the same
// iterations, so the barriers inside are uniform).
template <typename D, template <typename> class ScanT>
__global__ void scan_block_per_line_kernel(Lines L, const char* in, char* out, bool reverse) {
  using acc_t = typename ScanT<D>::acc_t;
  using BlockScan = cub::BlockScan<acc_t, kBlockThreads>;
  __shared__ typename BlockScan::TempStorage temp;
  const ScanT<D> op;
  for (int64_t line = blockIdx.x; line < L.num_lines; line += gridDim.x) {
    int64_t in_off, out_off, unused;
    L.ix.output_offsets(line, in_off, out_off, unused);
    acc_t carry = op.identity();
    for (int64_t tile = 0; tile < L.n; tile += kBlockThreads) {
      const int64_t s = tile + threadIdx.x;
      const int64_t j = reverse ? L.n - 1 - s : s;  // only used when s < n
      const acc_t x = s < L.n ? to_acc<D, acc_t>(*reinterpret_cast<const D*>(in + in_off + j * L.in_step))
                              : op.identity();
      acc_t y, tile_total;
      BlockScan(temp).InclusiveScan(x, y, op, tile_total);
      __syncthreads();  // temp is reused by the next tile
      if (s < L.n) *reinterpret_cast<D*>(out + out_off + j * L.out0_step) = from_acc<D>(op(carry, y));
      carry = op(carry, tile_total);
    }
  }
}

template <template <typename> class ScanT, typename Types>
void scan_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  PF_CHECK(out.dtype() == a.dtype() && out.sizes() == a.sizes(), "cuda '", ctx.op.name,
           "' kernel writes its input's shape and dtype");
  const Lines L = make_lines(a, ctx.attr<int64_t>("dim"), out, nullptr);
  const bool reverse = ctx.attr<bool>("reverse");
  if (L.num_lines == 0 || L.n == 0) return;
  const char* in = static_cast<const char*>(a.data_ptr());
  char* o = static_cast<char*>(out.data_ptr());
  dispatch_supported<Types>(ctx, a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    if (block_per_line(L)) {
      scan_block_per_line_kernel<D, ScanT><<<line_blocks(L, scope), kBlockThreads, 0, scope.stream>>>(L, in, o, reverse);
    } else {
      scan_thread_per_line_kernel<D, ScanT>
          <<<scope.blocks_for(L.num_lines), kBlockThreads, 0, scope.stream>>>(L, in, o, reverse);
    }
    PF_CUDA_CHECK_LAUNCH();
  });
}

// ---- softmax / log_softmax -------------------------------------------------------------------------

// Adds element v to a line's running (max m, sum s of exp(x - m)). -inf adds nothing; NaN
// and +inf make the line NaN (through exp(nan) / exp(inf - inf)), as PyTorch's formula.
template <typename C>
PF_DEVICE void online_add(C& m, C& s, C v) {
  const C nm = max_nan(m, v);
  s = s * (nm == m ? C(1) : dm::exp(m - nm)) + (v == -dm::inf<C>() ? C(0) : dm::exp(v - nm));
  m = nm;
}

// Merges the partial (m2, s2) into (m, s). An empty partial (s == 0, m == -inf) adds nothing;
// the test on s avoids exp(-inf - -inf).
template <typename C>
PF_DEVICE void online_merge(C& m, C& s, C m2, C s2) {
  const C nm = max_nan(m, m2);
  const C a = s == C(0) ? C(0) : s * dm::exp(m - nm);
  const C b = s2 == C(0) ? C(0) : s2 * dm::exp(m2 - nm);
  m = nm;
  s = a + b;
}

// softmax: exp(x - m) * (1 / s); log_softmax: (x - m) - log(s). A +inf max makes the line NaN;
// a line of -inf gives NaN through exp(-inf - -inf).
template <typename C, bool Log>
PF_DEVICE C softmax_scale(C m, C s) {
  if (m == dm::inf<C>()) s = std::numeric_limits<C>::quiet_NaN();
  if constexpr (Log) return dm::log(s);
  else return C(1) / s;
}
template <typename C, bool Log>
PF_DEVICE C softmax_finish(C x, C m, C scale) {
  if constexpr (Log) return (x - m) - scale;
  else return dm::exp(x - m) * scale;
}

template <typename D, bool Log>
__global__ void softmax_thread_per_line_kernel(Lines L, const char* in, char* out) {
  using C = opmath_t<D>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t line = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; line < L.num_lines; line += step) {
    int64_t in_off, out_off, unused;
    L.ix.output_offsets(line, in_off, out_off, unused);
    const char* x = in + in_off;
    char* y = out + out_off;
    C m = -dm::inf<C>(), s = C(0);
    for (int64_t j = 0; j < L.n; ++j) online_add(m, s, to_opmath(*reinterpret_cast<const D*>(x + j * L.in_step)));
    const C scale = softmax_scale<C, Log>(m, s);
    for (int64_t j = 0; j < L.n; ++j)
      *reinterpret_cast<D*>(y + j * L.out0_step) =
          cast_to<D>(softmax_finish<C, Log>(to_opmath(*reinterpret_cast<const D*>(x + j * L.in_step)), m, scale));
  }
}

template <typename D, bool Log>
__global__ void softmax_block_per_line_kernel(Lines L, const char* in, char* out) {
  using C = opmath_t<D>;
  __shared__ C part_m[kBlockThreads], part_s[kBlockThreads];
  const unsigned t = threadIdx.x;
  for (int64_t line = blockIdx.x; line < L.num_lines; line += gridDim.x) {
    int64_t in_off, out_off, unused;
    L.ix.output_offsets(line, in_off, out_off, unused);
    const char* x = in + in_off;
    char* y = out + out_off;
    C m = -dm::inf<C>(), s = C(0);
    for (int64_t j = t; j < L.n; j += kBlockThreads)
      online_add(m, s, to_opmath(*reinterpret_cast<const D*>(x + j * L.in_step)));
    part_m[t] = m;
    part_s[t] = s;
    __syncthreads();
    for (unsigned w = kBlockThreads / 2; w > 0; w >>= 1) {
      if (t < w) {
        C pm = part_m[t], ps = part_s[t];
        online_merge(pm, ps, part_m[t + w], part_s[t + w]);
        part_m[t] = pm;
        part_s[t] = ps;
      }
      __syncthreads();
    }
    m = part_m[0];
    s = part_s[0];
    __syncthreads();  // everyone has read the line's result before the next line reuses the slots
    const C scale = softmax_scale<C, Log>(m, s);
    for (int64_t j = t; j < L.n; j += kBlockThreads)
      *reinterpret_cast<D*>(y + j * L.out0_step) =
          cast_to<D>(softmax_finish<C, Log>(to_opmath(*reinterpret_cast<const D*>(x + j * L.in_step)), m, scale));
  }
}

template <bool Log, typename Types>
void softmax_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  PF_CHECK(out.dtype() == a.dtype() && out.sizes() == a.sizes(), "cuda '", ctx.op.name,
           "' kernel writes its input's shape and dtype");
  const Lines L = make_lines(a, ctx.attr<int64_t>("dim"), out, nullptr);
  if (L.num_lines == 0 || L.n == 0) return;
  const char* in = static_cast<const char*>(a.data_ptr());
  char* o = static_cast<char*>(out.data_ptr());
  dispatch_supported<Types>(ctx, a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    if (block_per_line(L)) {
      softmax_block_per_line_kernel<D, Log><<<line_blocks(L, scope), kBlockThreads, 0, scope.stream>>>(L, in, o);
    } else {
      softmax_thread_per_line_kernel<D, Log><<<scope.blocks_for(L.num_lines), kBlockThreads, 0, scope.stream>>>(L, in, o);
    }
    PF_CUDA_CHECK_LAUNCH();
  });
}

// The softmax family's ops (core/opdefs/along_dim.yaml), named after them: `log` picks the
// formula (softmax_finish).
struct SoftmaxFn {
  static constexpr bool log = false;
};
struct LogSoftmaxFn {
  static constexpr bool log = true;
};

}  // namespace

std::vector<KernelDef> reduction_extra_kernels() {
  return {
  // The reductions with several outputs (core/opdefs/moments.yaml): VarMeanRed for var_mean.
#define PF_X(name, Camel, dtypes, n_outputs, sig) \
  {name, supported_dtypes<dtypes##Types>(), &moments_kernel<Camel##Red, dtypes##Types>},
      PF_OPDEFS_MOMENTS(PF_X)
#undef PF_X
  // core/opdefs/linalg.yaml names norm's kernel function and dtypes (its other ops' kernels are
  // registered by hand, in matmul.cpp and lstsq.cpp).
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) {name, {PF_OPDEFS_UNPAREN cuda_dtypes}, fn},
      PF_OPDEFS_LINALG_KERNELS(PF_X)
#undef PF_X
  // The ops along one dim of the definitions (core/opdefs/along_dim.yaml): each functor is named
  // after its op (cumsum -> CumsumScan, log_softmax -> LogSoftmaxFn), registered for the
  // definition's `kernels` dtypes.
#define PF_X(name, Camel, dtypes, sig) \
  {name, supported_dtypes<dtypes##Types>(), &scan_kernel<Camel##Scan, dtypes##Types>},
      PF_OPDEFS_SCAN(PF_X)
#undef PF_X
#define PF_X(name, Camel, dtypes, sig) \
  {name, supported_dtypes<dtypes##Types>(), &softmax_kernel<Camel##Fn::log, dtypes##Types>},
      PF_OPDEFS_SOFTMAX(PF_X)
#undef PF_X
  };
}

}  // namespace plugflow::cuda
