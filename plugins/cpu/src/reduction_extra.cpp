// The reduction family beyond sum/prod/mean (docs/kernels.md, "Reduction family"):
//   * var_mean (Welford; the functor VarMeanOp of core/opdefs/moments.yaml), norm (p = 0, 1,
//     2, +-inf, any p): through the shared reduction driver (reduce_loops.h), so any
//     dims and strides, threads and vectorized inner loops come for free; Welford partials
//     merge with Chan's formula.
//   * the scans of core/opdefs/along_dim.yaml (cumsum, cumprod): along one dim, optionally from
//     the end (`reverse`, used by the backward of cumsum), each op's step a functor XOp. Lines
//     along the dim run in parallel; when the dim is not the innermost one and the next dim is
//     contiguous, a tile of neighbouring lines advances together, which vectorizes.
//   * softmax, log_softmax: per contiguous line one pass computes the running max and the sum
//     of exp(x - max) together (block by block, the sum rescaled when the max grows), a second
//     pass writes; a tile of neighbouring lines takes a max pass, a sum pass and a write pass.
//     Sums total in double (log_softmax's log(s) needs them exact when s is near 1); float math
//     uses a vectorizable exp (exp_nonpos); dense float32 loops are compiled per ISA.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "kernels.h"
#include "loops.h"
#include "opdefs.h"
#include "reduce_loops.h"

namespace plugflow::cpu {
namespace {

// c ? a : b for floats without a branch. GCC (with its default -ftrapping-math) keeps
// float-compare ternaries as jumps, which stops the vectorizer; selecting bit patterns
// through an integer mask does not.
template <typename C>
[[gnu::always_inline]] inline C blend(bool c, C a, C b) {
  using I = std::conditional_t<sizeof(C) == 4, int32_t, int64_t>;
  const I mask = -static_cast<I>(c);
  I ai, bi;
  std::memcpy(&ai, &a, sizeof a);
  std::memcpy(&bi, &b, sizeof b);
  const I r = (ai & mask) | (bi & ~mask);
  C out;
  std::memcpy(&out, &r, sizeof out);
  return out;
}

// Max/min that propagate NaN (a NaN accumulator stays, a NaN input takes over).
template <typename C>
[[gnu::always_inline]] inline C max_nan(C a, C x) {
  return blend((x > a) | (x != x), x, a);
}
template <typename C>
inline C min_nan(C a, C x) {
  return ((x < a) | (x != x)) ? x : a;
}

std::vector<bool> reduced_dims(const KernelContext& ctx, const Tensor& a) {
  std::vector<bool> reduced(a.dim(), false);
  for (int64_t d : ctx.attr<Shape>("dims")) {
    PF_CHECK_T(d >= 0 && d < a.dim(), IndexError, "'", ctx.op.name, "': dim ", d, " out of range for a ", a.dim(),
               "-d input");
    reduced[d] = true;
  }
  return reduced;
}

// ---- var_mean ------------------------------------------------------------------------------------

// Welford in double; var (or its sqrt, take_sqrt) and the mean.
template <typename T>
struct VarMeanOp {
  static constexpr bool supported = is_float_v<T>;
  static constexpr bool indexed = false;
  struct acc_t {
    double mean, m2, n;
  };
  double correction;
  bool take_sqrt;
  explicit VarMeanOp(const KernelContext& ctx)
      : correction(ctx.attr<double>("correction")), take_sqrt(ctx.attr<bool>("take_sqrt")) {}
  acc_t identity() const { return {0.0, 0.0, 0.0}; }
  acc_t step(acc_t a, T x, int64_t) const {
    const double v = static_cast<double>(static_cast<opmath_t<T>>(x));
    a.n += 1;
    const double d = v - a.mean;
    a.mean += d / a.n;
    a.m2 += d * (v - a.mean);
    return a;
  }
  acc_t merge(acc_t a, acc_t b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const double n = a.n + b.n, d = b.mean - a.mean;
    return {a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * b.n / n), n};
  }
  void write(char* const* outs, acc_t a, int64_t) const {
    double v = a.m2 / std::max(0.0, a.n - correction);
    if (take_sqrt) v = std::sqrt(v);
    *reinterpret_cast<T*>(outs[0]) = convert<T>(v);
    *reinterpret_cast<T*>(outs[1]) = convert<T>(a.mean);
  }
};

// The moments of core/opdefs/moments.yaml: OpT<T> built from the kernel's attributes writes
// every output of a slice.
template <template <typename> class OpT>
void moments_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const std::vector<bool> reduced = reduced_dims(ctx, a);
  const bool keepdim = ctx.attr<bool>("keepdim");
  dispatch_supported<OpT>(ctx, a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce<OpT<T>, T>(OpT<T>(ctx), make_plan(a, reduced, keepdim, ctx.outputs));
  });
}

// ---- norm ------------------------------------------------------------------------------------------

enum class NormKind { Zero, One, Two, Inf, NegInf, P };

template <typename T, NormKind K>
struct NormOp {
  static constexpr bool indexed = false;
  using acc_t = sum_acc_t<T>;  // double for float32/64, float for the 16-bit floats
  acc_t p = 2;
  acc_t identity() const { return K == NormKind::NegInf ? std::numeric_limits<acc_t>::infinity() : acc_t(0); }
  acc_t step(acc_t a, T x, int64_t) const {
    const acc_t v = std::abs(static_cast<acc_t>(static_cast<opmath_t<T>>(x)));
    if constexpr (K == NormKind::Zero) return a + static_cast<acc_t>(v != acc_t(0));
    else if constexpr (K == NormKind::One) return a + v;
    else if constexpr (K == NormKind::Two) return a + v * v;
    else if constexpr (K == NormKind::Inf) return max_nan(a, v);
    else if constexpr (K == NormKind::NegInf) return min_nan(a, v);
    else return a + std::pow(v, p);
  }
  acc_t merge(acc_t a, acc_t b) const {
    if constexpr (K == NormKind::Inf) return max_nan(a, b);
    else if constexpr (K == NormKind::NegInf) return min_nan(a, b);
    else return a + b;
  }
  void write(char* const* outs, acc_t a, int64_t) const {
    acc_t r = a;
    if constexpr (K == NormKind::Two) r = std::sqrt(a);
    else if constexpr (K == NormKind::P) r = std::pow(a, acc_t(1) / p);
    *reinterpret_cast<T*>(outs[0]) = convert<T>(r);
  }
};

template <typename T, NormKind K>
void run_norm(const KernelContext& ctx, const Tensor& a, const std::vector<bool>& reduced, double p) {
  NormOp<T, K> op;
  op.p = static_cast<typename NormOp<T, K>::acc_t>(p);
  run_reduce<NormOp<T, K>, T>(op, make_plan(a, reduced, ctx.attr<bool>("keepdim"), ctx.outputs));
}

void norm_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const std::vector<bool> reduced = reduced_dims(ctx, a);
  const double p = ctx.attr<double>("p");
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) {
      if (p == 0) run_norm<T, NormKind::Zero>(ctx, a, reduced, p);
      else if (p == 1) run_norm<T, NormKind::One>(ctx, a, reduced, p);
      else if (p == 2) run_norm<T, NormKind::Two>(ctx, a, reduced, p);
      else if (std::isinf(p) && p > 0) run_norm<T, NormKind::Inf>(ctx, a, reduced, p);
      else if (std::isinf(p)) run_norm<T, NormKind::NegInf>(ctx, a, reduced, p);
      else run_norm<T, NormKind::P>(ctx, a, reduced, p);
    } else {
      PF_THROW(NotImplementedError, "cpu 'norm' kernel needs a floating input, got ", dtype_name(a.dtype()));
    }
  });
}

// ---- lines along one dim (scans, softmax) ----------------------------------------------------------

// The geometry of "lines along dim": the other dims (row-major) with their byte strides in
// the input and the output. Tile mode: the innermost other dim is contiguous in both, so
// neighbouring lines sit next to each other in memory.
struct Lines {
  int64_t n = 0;         // elements per line
  int64_t sa = 0, so = 0;  // byte stride along the line in input / output
  std::vector<int64_t> size, a, o;  // other dims
  int64_t count = 1;     // number of lines
  bool tile = false;
  int64_t inner = 1;     // tile mode: size of the contiguous innermost other dim
  std::vector<int64_t> osize, oa, oo;  // tile mode: the other dims without the innermost one
};

Lines make_lines(const Tensor& in, const Tensor& out, int64_t dim) {
  Lines L;
  const auto isz = static_cast<int64_t>(in.itemsize());
  L.n = in.sizes()[dim];
  L.sa = in.strides()[dim] * isz;
  L.so = out.strides()[dim] * static_cast<int64_t>(out.itemsize());
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (d == dim || in.sizes()[d] == 1) continue;
    L.size.push_back(in.sizes()[d]);
    L.a.push_back(in.strides()[d] * isz);
    L.o.push_back(out.strides()[d] * static_cast<int64_t>(out.itemsize()));
    L.count *= in.sizes()[d];
  }
  PF_CHECK(L.size.size() <= static_cast<size_t>(kMaxLayoutDims), "line op over a ", in.dim(),
           "-d tensor: too many dims");
  if (!L.size.empty() && L.a.back() == isz && L.o.back() == static_cast<int64_t>(out.itemsize()) && L.n > 1) {
    L.tile = true;  // e.g. a scan over dim 0 of a row-major matrix: rows advance together
    L.inner = L.size.back();
    L.osize.assign(L.size.begin(), L.size.end() - 1);
    L.oa.assign(L.a.begin(), L.a.end() - 1);
    L.oo.assign(L.o.begin(), L.o.end() - 1);
  }
  return L;
}

constexpr int64_t kLineTile = 512;

// f_line(in_ptr, out_ptr) for every line, or f_tile(in_ptr, out_ptr, nt) for tiles of nt
// neighbouring (contiguous) lines.
template <typename FLine, typename FTile>
void for_each_line(const Lines& L, const char* in, char* out, const FLine& f_line, const FTile& f_tile) {
  if (L.count == 0 || L.n == 0) return;
  if (L.tile) {
    const int64_t tile = std::min(kLineTile, L.inner);
    const int64_t per_row = (L.inner + tile - 1) / tile;
    const int64_t items = (L.count / L.inner) * per_row;
    const int64_t isz_in = L.a.back(), isz_out = L.o.back();
    parallel_for(items, std::max<int64_t>(1, kGrainSize / (tile * L.n)), [&](int64_t i0, int64_t i1) {
      Cursor c(L.osize, {&L.oa, &L.oo});
      for (int64_t it = i0; it < i1; ++it) {
        c.seek(it / per_row);
        const int64_t j0 = (it % per_row) * tile;
        f_tile(in + c.off[0] + j0 * isz_in, out + c.off[1] + j0 * isz_out, std::min(tile, L.inner - j0));
      }
    });
    return;
  }
  parallel_for(L.count, std::max<int64_t>(1, kGrainSize / L.n), [&](int64_t l0, int64_t l1) {
    Cursor c(L.size, {&L.a, &L.o});
    c.seek(l0);
    for (int64_t l = l0; l < l1; ++l, c.next()) f_line(in + c.off[0], out + c.off[1]);
  });
}

// ---- scans --------------------------------------------------------------------------------------------

// A scan's step, named after its op (core/opdefs/along_dim.yaml): the running value combined
// with the next element, in sum's accumulation type (double for float32/64, float for f16/bf16,
// wrapping int64 for integers and bool); `supported` picks the dtypes.
template <typename T>
struct CumsumOp {
  static constexpr bool supported = true;
  using acc_t = sum_acc_t<T>;
  static constexpr acc_t identity = acc_t(0);
  static acc_t combine(acc_t acc, acc_t v) { return acc + v; }
};
template <typename T>
struct CumprodOp {
  static constexpr bool supported = true;
  using acc_t = sum_acc_t<T>;
  static constexpr acc_t identity = acc_t(1);
  static acc_t combine(acc_t acc, acc_t v) { return acc * v; }
};

template <typename T, template <typename> class OpT>
void scan_typed(const Tensor& a, const Tensor& out, int64_t dim, bool reverse) {
  using Op = OpT<T>;
  using acc_t = typename Op::acc_t;
  const Lines L = make_lines(a, out, dim);
  const int64_t n = L.n;
  const acc_t identity = Op::identity;
  auto pos = [n, reverse](int64_t s) { return reverse ? n - 1 - s : s; };
  auto line = [&](const char* x, char* y) {
    acc_t acc = identity;
    for (int64_t s = 0; s < n; ++s) {
      const int64_t j = pos(s);
      const acc_t v = to_acc<T, acc_t>(*reinterpret_cast<const T*>(x + j * L.sa));
      acc = Op::combine(acc, v);
      *reinterpret_cast<T*>(y + j * L.so) = from_acc<T>(acc);
    }
  };
  auto tile = [&](const char* x, char* y, int64_t nt) {
    acc_t acc[kLineTile];
    for (int64_t k = 0; k < nt; ++k) acc[k] = identity;
    for (int64_t s = 0; s < n; ++s) {
      const int64_t j = pos(s);
      const T* xr = reinterpret_cast<const T*>(x + j * L.sa);
      T* yr = reinterpret_cast<T*>(y + j * L.so);
#pragma omp simd
      for (int64_t k = 0; k < nt; ++k) {
        const acc_t v = to_acc<T, acc_t>(xr[k]);
        acc[k] = Op::combine(acc[k], v);
        yr[k] = from_acc<T>(acc[k]);
      }
    }
  };
  for_each_line(L, static_cast<const char*>(a.data_ptr()), static_cast<char*>(out.data_ptr()), line, tile);
}

// The `dim` of a kernel that maps each line along dim to a line of the same shape and dtype
// (scans, softmax), checked.
int64_t checked_line_dim(const KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  const int64_t dim = ctx.attr<int64_t>("dim");
  PF_CHECK_T(dim >= 0 && dim < a.dim(), IndexError, "'", ctx.op.name, "': dim ", dim, " out of range for a ", a.dim(),
             "-d input");
  PF_CHECK(out.dtype() == a.dtype() && out.sizes() == a.sizes(), "cpu '", ctx.op.name,
           "' kernel writes its input's shape and dtype");
  return dim;
}

template <template <typename> class OpT>
void scan_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  const int64_t dim = checked_line_dim(ctx);
  const bool reverse = ctx.attr<bool>("reverse");
  dispatch_supported<OpT>(ctx, a.dtype(), [&](auto tag) {
    scan_typed<typename decltype(tag)::type, OpT>(a, out, dim, reverse);
  });
}

// ---- softmax / log_softmax ------------------------------------------------------------------------------

// exp(x) for x <= 0 (softmax only ever needs exp(x - max)), written so that GCC vectorizes it
// with plain SSE2: Cephes' expf polynomial on r = x - n ln2 (|r| <= ln2/2), times 2^n built in
// the exponent bits. Relative error ~1e-7; x < -87.3 (and -inf) give 0, NaN stays NaN.
// always_inline: a call in the loop would stop the vectorizer.
[[gnu::always_inline]] inline float exp_nonpos(float x) {
  // Clamped into [-87.34, 0] (NaN too, so the float -> int conversion below is always defined).
  const float xc = blend(x <= 0.0f, blend(x >= -87.3365448f, x, -87.3365448f), 0.0f);
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return blend(x != x, x, blend(x >= -87.3365448f, y * scale, 0.0f));
}
[[gnu::always_inline]] inline double exp_nonpos(double x) { return std::exp(x); }

template <typename C>
constexpr C kInf = std::numeric_limits<C>::infinity();

// The end of a softmax line: softmax exp(x - m) / s, log_softmax (x - m) - log(s). A +inf
// max makes the line NaN (exp(inf - inf) in PyTorch's formula); a line of -inf gives NaN.
template <typename C, bool Log, typename S>
inline C softmax_scale(C m, S s) {
  if (m == kInf<C>) s = std::numeric_limits<S>::quiet_NaN();
  if constexpr (Log) return static_cast<C>(std::log(s));
  else return static_cast<C>(S(1) / s);
}
template <typename C, bool Log>
[[gnu::always_inline]] inline C softmax_finish(C x, C m, C scale) {
  if constexpr (Log) return (x - m) - scale;
  else return exp_nonpos(x - m) * scale;
}

// A contiguous line: the max and the sum of exp(x - max) in one read, block by block (the
// block's max first, the running sum rescaled when it grows), then one pass that writes.
// Blocks sum in C, the line's total in double: log_softmax subtracts log(s), and when one
// element dominates s is 1 + a little, whose log keeps only the digits s kept (a float total
// cost up to 1e-5 relative on such outputs).
// Lanes: the loops' vector length (16: AVX-512 registers; 8 for lines under 64 elements, which
// then run vectorized too, and fold 8 partial results instead of 16).
template <typename T, bool Log, int Lanes>
[[gnu::always_inline]] inline void softmax_row_body(const T* x, T* y, int64_t n) {
  using C = opmath_t<T>;
  constexpr int64_t kBlock = 256;
  using Bits = std::conditional_t<sizeof(C) == 4, int32_t, int64_t>;
  constexpr Bits kAbs = std::numeric_limits<Bits>::max(), kInfBits = std::bit_cast<Bits>(kInf<C>);
  C m = -kInf<C>;
  double s = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    // The block's max ignoring NaN (v > bm ? v : bm is one vmaxps) and a NaN flag on the bits
    // beside it: both vectorize, where a NaN-propagating select did not.
    C bm = -kInf<C>;
    Bits any_nan = 0;
#pragma omp simd simdlen(Lanes) reduction(max : bm) reduction(| : any_nan)
    for (int64_t k = b; k < e; ++k) {
      const C v = static_cast<C>(x[k]);
      bm = v > bm ? v : bm;
      any_nan |= (std::bit_cast<Bits>(v) & kAbs) > kInfBits;
    }
    if (any_nan) {  // NaN: the whole line is NaN
      m = std::numeric_limits<C>::quiet_NaN();
      s = m;
      break;
    }
    if (bm > m) {
      if (s != 0) s *= std::exp(static_cast<double>(m) - static_cast<double>(bm));
      m = bm;
    }
    if (m == -kInf<C>) continue;  // only -inf so far: adds nothing
    C acc = 0;
#pragma omp simd simdlen(Lanes) reduction(+ : acc)
    for (int64_t k = b; k < e; ++k) acc += exp_nonpos(static_cast<C>(x[k]) - m);
    s += acc;
  }
  const C scale = softmax_scale<C, Log>(m, s);
#pragma omp simd simdlen(Lanes)
  for (int64_t k = 0; k < n; ++k) y[k] = convert<T>(softmax_finish<C, Log>(static_cast<C>(x[k]), m, scale));
}

// nt neighbouring lines side by side (element j of line k at x + j * sa + k * sizeof(T)),
// vectorized across the tile: the max, then the sum of exp(x - max) (in double, as for a
// contiguous line), then the writes; one exp per element (an online update needs two).
template <typename T, bool Log>
[[gnu::always_inline]] inline void softmax_tile_body(const char* x, char* y, int64_t nt, int64_t n, int64_t sa,
                                                     int64_t so) {
  using C = opmath_t<T>;
  C m[kLineTile];
  double s[kLineTile];
  for (int64_t k = 0; k < nt; ++k) {
    m[k] = -kInf<C>;
    s[k] = 0;
  }
  for (int64_t j = 0; j < n; ++j) {
    const T* xr = reinterpret_cast<const T*>(x + j * sa);
#pragma omp simd
    for (int64_t k = 0; k < nt; ++k) m[k] = max_nan(m[k], static_cast<C>(xr[k]));
  }
  // A line of -inf gives -inf - -inf = NaN here, and NaN is its result.
  for (int64_t j = 0; j < n; ++j) {
    const T* xr = reinterpret_cast<const T*>(x + j * sa);
#pragma omp simd
    for (int64_t k = 0; k < nt; ++k) s[k] += exp_nonpos(static_cast<C>(xr[k]) - m[k]);
  }
  C scale[kLineTile];
  for (int64_t k = 0; k < nt; ++k) scale[k] = softmax_scale<C, Log>(m[k], s[k]);
  for (int64_t j = 0; j < n; ++j) {
    const T* xr = reinterpret_cast<const T*>(x + j * sa);
    T* yr = reinterpret_cast<T*>(y + j * so);
#pragma omp simd
    for (int64_t k = 0; k < nt; ++k) yr[k] = convert<T>(softmax_finish<C, Log>(static_cast<C>(xr[k]), m[k], scale[k]));
  }
}

// Dense float32 lines and tiles, compiled for AVX-512, AVX2 + FMA and the baseline (the loader picks
// the CPU's): 16 lanes make the native kernel as fast as oneDNN's jit softmax (onednn/softmax.cpp).
#define PF_SOFTMAX_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
template <bool Log>
[[gnu::always_inline]] inline void softmax_row_lanes(const float* x, float* y, int64_t n) {
  n < 64 ? softmax_row_body<float, Log, 8>(x, y, n) : softmax_row_body<float, Log, 16>(x, y, n);
}
PF_SOFTMAX_CLONES void softmax_row_f32(const float* x, float* y, int64_t n) { softmax_row_lanes<false>(x, y, n); }
PF_SOFTMAX_CLONES void log_softmax_row_f32(const float* x, float* y, int64_t n) { softmax_row_lanes<true>(x, y, n); }
PF_SOFTMAX_CLONES void softmax_tile_f32(const char* x, char* y, int64_t nt, int64_t n, int64_t sa, int64_t so) {
  softmax_tile_body<float, false>(x, y, nt, n, sa, so);
}
PF_SOFTMAX_CLONES void log_softmax_tile_f32(const char* x, char* y, int64_t nt, int64_t n, int64_t sa, int64_t so) {
  softmax_tile_body<float, true>(x, y, nt, n, sa, so);
}
#undef PF_SOFTMAX_CLONES

template <typename T, bool Log>
void softmax_row(const T* x, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    Log ? log_softmax_row_f32(x, y, n) : softmax_row_f32(x, y, n);
  } else if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    // The line widened to float32 and run through its kernel (the same float math; the 16-bit
    // loop itself does not vectorize: 4x slower).
    thread_local std::vector<float> line;
    line.resize(static_cast<size_t>(n));
    widen_16bit<T>(reinterpret_cast<const uint16_t*>(x), line.data(), n);
    softmax_row<float, Log>(line.data(), line.data(), n);
    narrow_16bit<T>(line.data(), reinterpret_cast<uint16_t*>(y), n);
  } else {
    softmax_row_body<T, Log, 8>(x, y, n);
  }
}
template <typename T, bool Log>
void softmax_tile(const char* x, char* y, int64_t nt, int64_t n, int64_t sa, int64_t so) {
  if constexpr (std::is_same_v<T, float>) {
    Log ? log_softmax_tile_f32(x, y, nt, n, sa, so) : softmax_tile_f32(x, y, nt, n, sa, so);
  } else {
    softmax_tile_body<T, Log>(x, y, nt, n, sa, so);
  }
}

template <typename T, bool Log>
void softmax_typed(const Tensor& a, const Tensor& out, int64_t dim) {
  using C = opmath_t<T>;  // float for the 16-bit floats and float32, double for float64
  const Lines L = make_lines(a, out, dim);
  const int64_t n = L.n;
  constexpr auto isz = static_cast<int64_t>(sizeof(T));
  auto line = [&](const char* x, char* y) {
    if (L.sa == isz && L.so == isz) return softmax_row<T, Log>(reinterpret_cast<const T*>(x), reinterpret_cast<T*>(y), n);
    // Strided: the same per element, online (the running sum rescaled whenever the max grows).
    C m = -kInf<C>, s = 0;
    for (int64_t j = 0; j < n; ++j) {
      const C v = static_cast<C>(*reinterpret_cast<const T*>(x + j * L.sa));
      const C nm = max_nan(m, v);
      s = s * blend(nm == m, C(1), exp_nonpos(m - nm)) + blend(v == -kInf<C>, C(0), exp_nonpos(v - nm));
      m = nm;
    }
    const C scale = softmax_scale<C, Log>(m, s);
    for (int64_t j = 0; j < n; ++j)
      *reinterpret_cast<T*>(y + j * L.so) =
          convert<T>(softmax_finish<C, Log>(static_cast<C>(*reinterpret_cast<const T*>(x + j * L.sa)), m, scale));
  };
  auto tile = [&](const char* x, char* y, int64_t nt) { softmax_tile<T, Log>(x, y, nt, n, L.sa, L.so); };
  for_each_line(L, static_cast<const char*>(a.data_ptr()), static_cast<char*>(out.data_ptr()), line, tile);
}

template <bool Log>
void softmax_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  const int64_t dim = checked_line_dim(ctx);
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) {
      softmax_typed<T, Log>(a, out, dim);
    } else {
      PF_THROW(NotImplementedError, "cpu '", ctx.op.name, "' kernel needs a floating input, got ",
               dtype_name(a.dtype()));
    }
  });
}

// The softmax family's ops (core/opdefs/along_dim.yaml), named after them: `supported` picks
// the dtypes, `log` the formula (softmax_finish).
template <typename T>
struct SoftmaxOp {
  static constexpr bool supported = is_float_v<T>;
  static constexpr bool log = false;
};
template <typename T>
struct LogSoftmaxOp {
  static constexpr bool supported = is_float_v<T>;
  static constexpr bool log = true;
};

}  // namespace

void softmax_native(KernelContext& ctx) { softmax_kernel<false>(ctx); }

void register_reduction_kernels(Registrar& reg) {
  // core/opdefs/linalg.yaml names norm's kernel function and dtypes (its other ops' kernels are
  // registered by hand, in matmul.cpp, onednn/matmul.cpp and lstsq.cpp).
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) reg.kernel(name, DeviceType::CPU, {PF_OPDEFS_UNPAREN cpu_dtypes}, fn);
  PF_OPDEFS_LINALG_KERNELS(PF_X)
#undef PF_X
  // The reductions with several outputs (core/opdefs/moments.yaml): functor VarMeanOp for var_mean.
#define PF_X(name, Camel, dtypes, n_outputs, sig) register_supported<Camel##Op>(reg, name, moments_kernel<Camel##Op>);
  PF_OPDEFS_MOMENTS(PF_X)
#undef PF_X
  // The ops along one dim of the definitions (core/opdefs/along_dim.yaml): each functor is named
  // after its op (cumsum -> CumsumOp), its `supported` trait picks the dtypes.
#define PF_X(name, Camel, dtypes, sig) register_supported<Camel##Op>(reg, name, scan_kernel<Camel##Op>);
  PF_OPDEFS_SCAN(PF_X)
#undef PF_X
#define PF_X(name, Camel, dtypes, sig) register_supported<Camel##Op>(reg, name, softmax_kernel<Camel##Op<float>::log>);
  PF_OPDEFS_SOFTMAX(PF_X)
#undef PF_X
}

}  // namespace plugflow::cpu
