// The reduction family beyond sum/prod/mean (docs/kernels.md, "Reduction family"):
//   * var_mean (Welford), norm (p = 0, 1, 2, +-inf, any p), all, any: through the shared
//     reduction driver (reduce_loops.h), so any dims and strides, threads and vectorized
//     inner loops come for free; Welford partials merge with Chan's formula.
//   * cumsum, cumprod: scans along one dim, optionally from the end (`reverse`, used by the
//     backward of cumsum). Lines along the dim run in parallel; when the dim is not the
//     innermost one and the next dim is contiguous, a tile of neighbouring lines advances
//     together, which vectorizes.
//   * softmax, log_softmax: per line one pass computes the running max and the sum of
//     exp(x - max) together (online rescaling), a second pass writes; same line/tile split.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kernels.h"
#include "loops.h"
#include "reduce_loops.h"

namespace plugflow::cpu {
namespace {

// Max/min that propagate NaN (a NaN accumulator stays, a NaN input takes over).
template <typename C>
inline C max_nan(C a, C x) {
  return ((x > a) | (x != x)) ? x : a;
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

template <typename T>
struct WelfordOp {
  static constexpr bool indexed = false;
  struct acc_t {
    double mean, m2, n;
  };
  double correction = 1;
  bool take_sqrt = false;
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

void var_mean_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const std::vector<bool> reduced = reduced_dims(ctx, a);
  const bool keepdim = ctx.attr<bool>("keepdim");
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) {
      WelfordOp<T> op;
      op.correction = ctx.attr<double>("correction");
      op.take_sqrt = ctx.attr<bool>("take_sqrt");
      run_reduce<WelfordOp<T>, T>(op, make_plan(a, reduced, keepdim, ctx.outputs));
    } else {
      PF_THROW(NotImplementedError, "cpu 'var_mean' kernel needs a floating input, got ", dtype_name(a.dtype()));
    }
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

// ---- all / any ---------------------------------------------------------------------------------------

template <typename T, bool IsAll>
struct LogicalOp {
  static constexpr bool indexed = false;
  using acc_t = bool;
  acc_t identity() const { return IsAll; }
  acc_t step(acc_t a, T x, int64_t) const {
    const bool nz = static_cast<opmath_t<T>>(x) != opmath_t<T>(0);  // NaN counts as non-zero
    return IsAll ? (a & nz) : (a | nz);
  }
  acc_t merge(acc_t a, acc_t b) const { return IsAll ? (a & b) : (a | b); }
  // Bool and uint8 outputs alike hold 0 or 1 in one byte.
  void write(char* const* outs, acc_t a, int64_t) const { *reinterpret_cast<uint8_t*>(outs[0]) = a ? 1 : 0; }
};

template <bool IsAll>
void logical_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const DType od = ctx.output(0).dtype();
  PF_CHECK(od == DType::Bool || od == DType::UInt8, "cpu '", ctx.op.name, "' kernel writes bool or uint8, got ",
           dtype_name(od));
  const std::vector<bool> reduced = reduced_dims(ctx, a);
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce<LogicalOp<T, IsAll>, T>(LogicalOp<T, IsAll>{},
                                       make_plan(a, reduced, ctx.attr<bool>("keepdim"), ctx.outputs));
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

// ---- cumsum / cumprod ----------------------------------------------------------------------------------

template <typename T, bool Prod>
void scan_typed(const Tensor& a, const Tensor& out, int64_t dim, bool reverse) {
  using acc_t = sum_acc_t<T>;
  const Lines L = make_lines(a, out, dim);
  const int64_t n = L.n;
  const acc_t identity = Prod ? acc_t(1) : acc_t(0);
  auto pos = [n, reverse](int64_t s) { return reverse ? n - 1 - s : s; };
  auto line = [&](const char* x, char* y) {
    acc_t acc = identity;
    for (int64_t s = 0; s < n; ++s) {
      const int64_t j = pos(s);
      const acc_t v = to_acc<T, acc_t>(*reinterpret_cast<const T*>(x + j * L.sa));
      acc = Prod ? acc * v : acc + v;
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
        acc[k] = Prod ? acc[k] * v : acc[k] + v;
        yr[k] = from_acc<T>(acc[k]);
      }
    }
  };
  for_each_line(L, static_cast<const char*>(a.data_ptr()), static_cast<char*>(out.data_ptr()), line, tile);
}

template <bool Prod>
void scan_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  const int64_t dim = ctx.attr<int64_t>("dim");
  PF_CHECK_T(dim >= 0 && dim < a.dim(), IndexError, "'", ctx.op.name, "': dim ", dim, " out of range for a ", a.dim(),
             "-d input");
  PF_CHECK(out.dtype() == a.dtype() && out.sizes() == a.sizes(), "cpu '", ctx.op.name,
           "' kernel writes its input's shape and dtype");
  const bool reverse = ctx.attr<bool>("reverse");
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    scan_typed<T, Prod>(a, out, dim, reverse);
  });
}

// ---- softmax / log_softmax ------------------------------------------------------------------------------

// Online max and sum of exp(x - max): one read of the line. An element equal to -inf adds
// nothing (also when the max so far is -inf, where x - max would be NaN).
template <typename C>
inline void online_update(C& m, C& s, C x) {
  if (x > m) {
    s = s * std::exp(m - x) + C(1);
    m = x;
  } else if (x != -std::numeric_limits<C>::infinity()) {
    s += std::exp(x - m);  // NaN inputs make s NaN, so the whole line is NaN, as in PyTorch
  }
}

template <typename T, bool Log>
void softmax_typed(const Tensor& a, const Tensor& out, int64_t dim) {
  using C = opmath_t<T>;  // float for the 16-bit floats and float32, double for float64
  const Lines L = make_lines(a, out, dim);
  const int64_t n = L.n;
  constexpr C kNegInf = -std::numeric_limits<C>::infinity();
  auto finish = [](C x, C m, C scale) -> C {
    if constexpr (Log) return (x - m) - scale;  // scale = log(sum)
    else return std::exp(x - m) * scale;        // scale = 1 / sum
  };
  // A +inf max makes the line NaN, as exp(inf - inf) does in PyTorch's two-pass formula.
  auto scale_of = [](C m, C s) -> C {
    if (m == std::numeric_limits<C>::infinity()) s = std::numeric_limits<C>::quiet_NaN();
    if constexpr (Log) return std::log(s);
    else return C(1) / s;
  };
  auto line = [&](const char* x, char* y) {
    C m = kNegInf, s = 0;
    for (int64_t j = 0; j < n; ++j) online_update(m, s, static_cast<C>(*reinterpret_cast<const T*>(x + j * L.sa)));
    const C scale = scale_of(m, s);
    for (int64_t j = 0; j < n; ++j)
      *reinterpret_cast<T*>(y + j * L.so) = convert<T>(finish(static_cast<C>(*reinterpret_cast<const T*>(x + j * L.sa)), m, scale));
  };
  auto tile = [&](const char* x, char* y, int64_t nt) {
    C m[kLineTile], s[kLineTile];
    for (int64_t k = 0; k < nt; ++k) {
      m[k] = kNegInf;
      s[k] = 0;
    }
    for (int64_t j = 0; j < n; ++j) {
      const T* xr = reinterpret_cast<const T*>(x + j * L.sa);
      for (int64_t k = 0; k < nt; ++k) online_update(m[k], s[k], static_cast<C>(xr[k]));
    }
    for (int64_t k = 0; k < nt; ++k) s[k] = scale_of(m[k], s[k]);
    for (int64_t j = 0; j < n; ++j) {
      const T* xr = reinterpret_cast<const T*>(x + j * L.sa);
      T* yr = reinterpret_cast<T*>(y + j * L.so);
      for (int64_t k = 0; k < nt; ++k) yr[k] = convert<T>(finish(static_cast<C>(xr[k]), m[k], s[k]));
    }
  };
  for_each_line(L, static_cast<const char*>(a.data_ptr()), static_cast<char*>(out.data_ptr()), line, tile);
}

template <bool Log>
void softmax_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  const int64_t dim = ctx.attr<int64_t>("dim");
  PF_CHECK_T(dim >= 0 && dim < a.dim(), IndexError, "'", ctx.op.name, "': dim ", dim, " out of range for a ", a.dim(),
             "-d input");
  PF_CHECK(out.dtype() == a.dtype() && out.sizes() == a.sizes(), "cpu '", ctx.op.name,
           "' kernel writes its input's shape and dtype");
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

}  // namespace

void register_reduction_kernels(Registrar& reg) {
  const auto floats = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
  const auto all = {DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int16,   DType::Int32,
                    DType::Int64,   DType::Float16,  DType::BFloat16, DType::Float32, DType::Float64};
  reg.kernel("var_mean", DeviceType::CPU, floats, var_mean_kernel);
  reg.kernel("norm", DeviceType::CPU, floats, norm_kernel);
  reg.kernel("all", DeviceType::CPU, all, logical_kernel<true>);
  reg.kernel("any", DeviceType::CPU, all, logical_kernel<false>);
  reg.kernel("cumsum", DeviceType::CPU, all, scan_kernel<false>);
  reg.kernel("cumprod", DeviceType::CPU, all, scan_kernel<true>);
  reg.kernel("softmax", DeviceType::CPU, floats, softmax_kernel<false>);
  reg.kernel("log_softmax", DeviceType::CPU, floats, softmax_kernel<true>);
}

}  // namespace plugflow::cpu
