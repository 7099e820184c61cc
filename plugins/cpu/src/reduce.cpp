// Reductions: those over any set of dims (core/opdefs/reductions.yaml), and the indexed ones
// (core/opdefs/indexed.yaml: max_dim, min_dim, argmax, argmin) over one dim; any input and
// output strides.
//
// The loops themselves (plan, inner and outer mode) live in reduce_loops.h.
//
// A reduction op is a functor template on the storage type T with
//   acc_t, identity(), step(acc, x, index), merge(left, right), write(outs, acc, count).
// merge must be associative and, for the indexed ops, prefer `left` on ties so that the first
// index wins when partial results are merged in order.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kernels.h"
#include "loops.h"
#include "opdefs.h"
#include "reduce_loops.h"

namespace plugflow::cpu {
namespace {

// ---- dense float32/float64 kernels ------------------------------------------------------------
// The dense hooks of reduce_loops.h for sum, mean, amax/amin and the indexed max/min/argmax/
// argmin. Each loop keeps kDenseLanes independent accumulators (elementwise over fixed-size
// arrays, so the vectorizer needs no reassociation and no -ffast-math) and is compiled for
// AVX-512 (x86-64-v4: measured ~1.4x faster than AVX2 on 512K float32), AVX2 and the
// baseline; the loader picks the clone for the CPU.

#define PF_DENSE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define PF_DENSE_INLINE inline __attribute__((always_inline))

// Long runs take 64 lanes (8 AVX2 registers of float32 per pass); runs shorter than
// kShortRun take 16, whose setup and final fold cost less (rows of 64 floats: ~2x faster).
inline constexpr int kDenseLanes = 64, kShortLanes = 16;
inline constexpr int64_t kShortRun = 1024;
// Sums add chunks of kDenseLanes * kFlushRounds elements in T, each lane a sum of 4-element
// pairwise trees, then each lane's chunk total into a double. The adds in T are the fast part;
// the trees and double totals keep long float32 sums accurate (1M float32 0.1s sum to the
// correctly rounded result; PyTorch's cascade is off by ~1.5e-7 there).
inline constexpr int64_t kFlushRounds = 16;

template <int L, typename T>
PF_DENSE_INLINE double dense_sum_lanes(const T* x, int64_t n) {
  double wide[L] = {};
  int64_t i = 0;
  while (i + L <= n) {
    T lanes[L] = {};
    const int64_t end = i + std::min(L * kFlushRounds, (n - i) / L * L);
    for (; i + 4 * L <= end; i += 4 * L)
      for (int j = 0; j < L; ++j) lanes[j] += (x[i + j] + x[i + L + j]) + (x[i + 2 * L + j] + x[i + 3 * L + j]);
    for (; i < end; i += L)
      for (int j = 0; j < L; ++j) lanes[j] += x[i + j];
    for (int j = 0; j < L; ++j) wide[j] += lanes[j];
  }
  for (int width = L / 2; width > 0; width /= 2)  // pairwise fold
    for (int j = 0; j < width; ++j) wide[j] += wide[j + width];
  double acc = wide[0];
  for (; i < n; ++i) acc += x[i];
  return acc;
}
template <typename T>
PF_DENSE_INLINE double dense_sum_body(const T* x, int64_t n) {
  return n < kShortRun ? dense_sum_lanes<kShortLanes>(x, n) : dense_sum_lanes<kDenseLanes>(x, n);
}

// acc[j] += the kRowGroup rows' j-th elements, summed pairwise in T.
template <typename T>
PF_DENSE_INLINE void dense_sum_rows_body(const T* const* rows, int64_t nt, double* __restrict acc) {
  const T *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3], *r4 = rows[4], *r5 = rows[5], *r6 = rows[6],
          *r7 = rows[7];
  static_assert(kRowGroup == 8);
  for (int64_t j = 0; j < nt; ++j)
    acc[j] += static_cast<double>(((r0[j] + r1[j]) + (r2[j] + r3[j])) + ((r4[j] + r5[j]) + (r6[j] + r7[j])));
}

template <typename T, bool IsMax>
PF_DENSE_INLINE bool beats(T x, T a) {
  return IsMax ? x > a : x < a;
}

// The integer as wide as T; NaN tested on its bits, which GCC vectorizes also in the fully
// unrolled 16-lane loops (a float x != x there becomes scalar compares and flag reads).
template <typename T>
using BitsOf = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
template <typename T>
PF_DENSE_INLINE BitsOf<T> nan_bit(T x) {
  constexpr BitsOf<T> abs_mask = std::numeric_limits<BitsOf<T>>::max();
  constexpr BitsOf<T> inf = std::bit_cast<BitsOf<T>>(std::numeric_limits<T>::infinity());
  return (std::bit_cast<BitsOf<T>>(x) & abs_mask) > inf;
}

// Max/min ignoring NaN lane by lane (x > m ? x : m is one vmaxps), with a NaN flag per lane
// beside it; a NaN anywhere makes the result the first NaN, as the sequential step() gives.
template <int L, typename T, bool IsMax>
PF_DENSE_INLINE T dense_extreme_lanes(const T* x, int64_t n) {
  using I = BitsOf<T>;
  T m[L];
  I nan[L] = {};
  for (int j = 0; j < L; ++j)
    m[j] = IsMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) {
      const T v = x[i + j];
      m[j] = beats<T, IsMax>(v, m[j]) ? v : m[j];
      nan[j] |= nan_bit(v);
    }
  for (int width = L / 2; width > 0; width /= 2)  // pairwise fold (vectorizes)
    for (int j = 0; j < width; ++j) {
      m[j] = beats<T, IsMax>(m[j + width], m[j]) ? m[j + width] : m[j];
      nan[j] |= nan[j + width];
    }
  I any_nan = nan[0];
  T r = m[0];
  for (; i < n; ++i) {
    any_nan |= x[i] != x[i];
    r = beats<T, IsMax>(x[i], r) ? x[i] : r;
  }
  if (any_nan)
    for (i = 0;; ++i)
      if (x[i] != x[i]) return x[i];
  return r;
}

template <typename T, bool IsMax>
PF_DENSE_INLINE T dense_extreme_body(const T* x, int64_t n) {
  return n < kShortRun ? dense_extreme_lanes<kShortLanes, T, IsMax>(x, n)
                       : dense_extreme_lanes<kDenseLanes, T, IsMax>(x, n);
}

// The index of the first extreme (of the first NaN if there is one): the extreme, then a scan
// for it that tests kShortLanes elements at a time (an OR over the lanes, which vectorizes).
template <typename T, bool IsMax>
PF_DENSE_INLINE int64_t dense_arg_extreme_body(const T* x, int64_t n) {
  const T v = dense_extreme_body<T, IsMax>(x, n);
  int64_t i = 0;
  if (v != v) {
    while (x[i] == x[i]) ++i;
    return i;
  }
  for (; i + kShortLanes <= n; i += kShortLanes) {
    int hit = 0;
#pragma GCC unroll 1  // unrolled, the float compares stay scalar; as a loop they vectorize
    for (int j = 0; j < kShortLanes; ++j) hit |= x[i + j] == v;
    if (hit) break;
  }
  while (x[i] != v) ++i;
  return i;
}

// Extremes: NaN propagates (a NaN accumulator stays, a NaN input takes over).
template <typename C>
PF_DENSE_INLINE C nan_max(C a, C x) {
  // Bitwise |, not ||: no branch, so the comparison vectorizes into a blend.
  if constexpr (std::is_floating_point_v<C>) return ((x > a) | (x != x)) ? x : a;
  else return x > a ? x : a;
}
template <typename C>
PF_DENSE_INLINE C nan_min(C a, C x) {
  if constexpr (std::is_floating_point_v<C>) return ((x < a) | (x != x)) ? x : a;
  else return x < a ? x : a;
}

template <typename T, bool IsMax>
PF_DENSE_INLINE void dense_extreme_rows_body(const T* const* rows, int64_t nt, T* __restrict acc) {
  const T *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3], *r4 = rows[4], *r5 = rows[5], *r6 = rows[6],
          *r7 = rows[7];
  static_assert(kRowGroup == 8);
  constexpr auto f = IsMax ? nan_max<T> : nan_min<T>;
  for (int64_t j = 0; j < nt; ++j)
    acc[j] = f(f(f(f(f(f(f(f(acc[j], r0[j]), r1[j]), r2[j]), r3[j]), r4[j]), r5[j]), r6[j]), r7[j]);
}

PF_DENSE_CLONES double dense_sum(const float* x, int64_t n) { return dense_sum_body(x, n); }
PF_DENSE_CLONES double dense_sum(const double* x, int64_t n) { return dense_sum_body(x, n); }
PF_DENSE_CLONES void dense_sum_rows(const float* const* rows, int64_t nt, double* acc) { dense_sum_rows_body(rows, nt, acc); }
PF_DENSE_CLONES void dense_sum_rows(const double* const* rows, int64_t nt, double* acc) { dense_sum_rows_body(rows, nt, acc); }
PF_DENSE_CLONES float dense_max(const float* x, int64_t n) { return dense_extreme_body<float, true>(x, n); }
PF_DENSE_CLONES double dense_max(const double* x, int64_t n) { return dense_extreme_body<double, true>(x, n); }
PF_DENSE_CLONES float dense_min(const float* x, int64_t n) { return dense_extreme_body<float, false>(x, n); }
PF_DENSE_CLONES double dense_min(const double* x, int64_t n) { return dense_extreme_body<double, false>(x, n); }
PF_DENSE_CLONES void dense_max_rows(const float* const* rows, int64_t nt, float* acc) { dense_extreme_rows_body<float, true>(rows, nt, acc); }
PF_DENSE_CLONES void dense_max_rows(const double* const* rows, int64_t nt, double* acc) { dense_extreme_rows_body<double, true>(rows, nt, acc); }
PF_DENSE_CLONES void dense_min_rows(const float* const* rows, int64_t nt, float* acc) { dense_extreme_rows_body<float, false>(rows, nt, acc); }
PF_DENSE_CLONES void dense_min_rows(const double* const* rows, int64_t nt, double* acc) { dense_extreme_rows_body<double, false>(rows, nt, acc); }
PF_DENSE_CLONES int64_t dense_argmax(const float* x, int64_t n) { return dense_arg_extreme_body<float, true>(x, n); }
PF_DENSE_CLONES int64_t dense_argmax(const double* x, int64_t n) { return dense_arg_extreme_body<double, true>(x, n); }
PF_DENSE_CLONES int64_t dense_argmin(const float* x, int64_t n) { return dense_arg_extreme_body<float, false>(x, n); }
PF_DENSE_CLONES int64_t dense_argmin(const double* x, int64_t n) { return dense_arg_extreme_body<double, false>(x, n); }
#undef PF_DENSE_CLONES
#undef PF_DENSE_INLINE

template <typename T>
inline constexpr bool kDenseType = std::is_same_v<T, float> || std::is_same_v<T, double>;

// ---- ops -------------------------------------------------------------------------------------

// sum, and mean (`mean` set: the sum divided by the count when written), which so share
// their loops.
template <typename T>
struct SumOp {
  static constexpr bool supported = true;
  static constexpr bool indexed = false;
  using acc_t = sum_acc_t<T>;
  bool mean = false;
  acc_t identity() const { return acc_t(0); }
  acc_t step(acc_t a, T x, int64_t) const { return a + to_acc<T, acc_t>(x); }
  acc_t merge(acc_t a, acc_t b) const { return a + b; }
  void write(char* const* outs, acc_t a, int64_t count) const {
    if constexpr (!std::is_integral_v<acc_t>) {
      // count == 0 gives 0/0 = nan, as PyTorch's mean of an empty tensor.
      if (mean) a /= static_cast<acc_t>(count);
    }
    *reinterpret_cast<T*>(outs[0]) = from_acc<T>(a);
  }
  acc_t dense(const T* x, int64_t n, int64_t) const requires kDenseType<T> { return dense_sum(x, n); }
  void dense_rows(const T* const* rows, int64_t nt, acc_t* acc) const requires kDenseType<T> {
    dense_sum_rows(rows, nt, acc);
  }
};

// nansum: sum's accumulation with NaN counted as zero.
template <typename T>
struct NansumOp {
  static constexpr bool supported = true;
  static constexpr bool indexed = false;
  using acc_t = sum_acc_t<T>;
  acc_t identity() const { return acc_t(0); }
  acc_t step(acc_t a, T x, int64_t) const {
    const acc_t v = to_acc<T, acc_t>(x);
    if constexpr (std::is_floating_point_v<acc_t>)
      if (std::isnan(v)) return a;
    return a + v;
  }
  acc_t merge(acc_t a, acc_t b) const { return a + b; }
  void write(char* const* outs, acc_t a, int64_t) const { *reinterpret_cast<T*>(outs[0]) = from_acc<T>(a); }
};

// Integer products wrap (as PyTorch's); floating ones keep an exact zero sticky: the partial
// products of the reordered (vectorized, parallel) reduction can overflow to inf where the
// sequential product would not, and inf * 0 = NaN, while the exact product of finite numbers
// with a zero is a zero, signed by the parity of the negative factors. NaN inputs, and an
// infinite input times a zero, still give NaN.
template <typename T>
struct ProdOp {
  static constexpr bool supported = true;
  static constexpr bool indexed = false;
  using product_t = sum_acc_t<T>;
  struct FloatAcc {
    product_t p;
    bool zero, nonfinite, negative;
  };
  using acc_t = std::conditional_t<is_float_v<T>, FloatAcc, product_t>;
  acc_t identity() const {
    if constexpr (is_float_v<T>) return {1, false, false, false};
    else return 1;
  }
  acc_t step(acc_t a, T x, int64_t) const {
    const product_t v = to_acc<T, product_t>(x);
    if constexpr (is_float_v<T>)
      return {a.p * v, a.zero || v == 0, a.nonfinite || !std::isfinite(v), a.negative != std::signbit(v)};
    else return a * v;
  }
  acc_t merge(acc_t a, acc_t b) const {
    if constexpr (is_float_v<T>)
      return {a.p * b.p, a.zero || b.zero, a.nonfinite || b.nonfinite, a.negative != b.negative};
    else return a * b;
  }
  void write(char* const* outs, acc_t a, int64_t) const {
    product_t p;
    if constexpr (is_float_v<T>) p = a.zero && !a.nonfinite ? (a.negative ? -product_t(0) : product_t(0)) : a.p;
    else p = a;
    *reinterpret_cast<T*>(outs[0]) = from_acc<T>(p);
  }
};

// mean runs SumOp's loops (mean_kernel); MeanOp only says for which dtypes.
template <typename T>
struct MeanOp {
  static constexpr bool supported = is_float_v<T>;
};

template <typename T, bool IsMax>
struct ExtremeOp {
  static constexpr bool supported = true;
  static constexpr bool indexed = false;
  using acc_t = opmath_t<T>;
  acc_t identity() const {
    if constexpr (std::is_floating_point_v<acc_t>)
      return IsMax ? -std::numeric_limits<acc_t>::infinity() : std::numeric_limits<acc_t>::infinity();
    else
      return IsMax ? std::numeric_limits<acc_t>::lowest() : std::numeric_limits<acc_t>::max();
  }
  acc_t step(acc_t a, T x, int64_t) const { return merge(a, static_cast<acc_t>(x)); }
  acc_t merge(acc_t a, acc_t b) const { return IsMax ? nan_max(a, b) : nan_min(a, b); }
  void write(char* const* outs, acc_t a, int64_t) const { *reinterpret_cast<T*>(outs[0]) = convert<T>(a); }
  acc_t dense(const T* x, int64_t n, int64_t) const requires kDenseType<T> {
    return IsMax ? dense_max(x, n) : dense_min(x, n);
  }
  void dense_rows(const T* const* rows, int64_t nt, acc_t* acc) const requires kDenseType<T> {
    IsMax ? dense_max_rows(rows, nt, acc) : dense_min_rows(rows, nt, acc);
  }
};
template <typename T>
using AmaxOp = ExtremeOp<T, true>;
template <typename T>
using AminOp = ExtremeOp<T, false>;

// all / any: true where every / some element is non-zero (NaN counts as non-zero). The output
// is bool, or uint8 for a uint8 input (`bool_out`); both hold 0 or 1 in one byte.
template <typename T, bool IsAll>
struct LogicalOp {
  static constexpr bool supported = true;
  static constexpr bool indexed = false;
  static constexpr bool bool_out = true;
  using acc_t = bool;
  acc_t identity() const { return IsAll; }
  acc_t step(acc_t a, T x, int64_t) const {
    const bool nz = static_cast<opmath_t<T>>(x) != opmath_t<T>(0);
    return IsAll ? (a & nz) : (a | nz);
  }
  acc_t merge(acc_t a, acc_t b) const { return IsAll ? (a & b) : (a | b); }
  void write(char* const* outs, acc_t a, int64_t) const { *reinterpret_cast<uint8_t*>(outs[0]) = a ? 1 : 0; }
};
template <typename T>
using AllOp = LogicalOp<T, true>;
template <typename T>
using AnyOp = LogicalOp<T, false>;

// Value and index of the extreme; the first index on ties, the first NaN if there is one.
// max_dim/min_dim write both, argmax/argmin (`write_values` false) the index only: one set of
// loops for the two.
template <typename T, bool IsMax>
struct IndexedOp {
  static constexpr bool supported = true;
  static constexpr bool indexed = true;
  using C = opmath_t<T>;
  bool write_values = true;
  struct acc_t {
    C v;
    int64_t i;  // -1: nothing seen yet
  };
  acc_t identity() const { return {C(0), -1}; }
  acc_t step(acc_t a, T x, int64_t i) const { return merge(a, {static_cast<C>(x), i}); }
  acc_t merge(acc_t a, acc_t b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    if constexpr (is_float_v<T>) {
      if (a.v != a.v) return a;
      if (b.v != b.v) return b;
    }
    return (IsMax ? b.v > a.v : b.v < a.v) ? b : a;
  }
  acc_t dense(const T* x, int64_t n, int64_t first) const requires kDenseType<T> {
    const int64_t i = IsMax ? dense_argmax(x, n) : dense_argmin(x, n);
    return {x[i], first + i};
  }
  void write(char* const* outs, acc_t a, int64_t) const {
    if (write_values) {
      *reinterpret_cast<T*>(outs[0]) = convert<T>(a.v);
      *reinterpret_cast<int64_t*>(outs[1]) = a.i;
    } else {
      *reinterpret_cast<int64_t*>(outs[0]) = a.i;
    }
  }
};
template <typename T>
using MaxDimOp = IndexedOp<T, true>;
template <typename T>
using MinDimOp = IndexedOp<T, false>;
template <typename T>
using ArgmaxOp = IndexedOp<T, true>;
template <typename T>
using ArgminOp = IndexedOp<T, false>;


// ---- kernels ---------------------------------------------------------------------------------

// Runs OpT over the `dims` attribute, for the dtypes Supported has; configure(op) sets the op's
// runtime settings (mean's) first. The output has the input's dtype, or bool / uint8 for an op
// with `bool_out` (all, any).
template <template <typename> class OpT, template <typename> class Supported = OpT, typename Configure>
void reduce_dims(KernelContext& ctx, const Configure& configure) {
  const Tensor& a = ctx.input(0);
  const Shape& dims = ctx.attr<Shape>("dims");
  const bool keepdim = ctx.attr<bool>("keepdim");
  const DType out = ctx.output(0).dtype();
  if constexpr (requires { OpT<float>::bool_out; })
    PF_CHECK(out == DType::Bool || out == DType::UInt8, "cpu '", ctx.op.name, "' kernel writes bool or uint8, got ",
             dtype_name(out));
  else
    PF_CHECK(out == a.dtype(), "cpu '", ctx.op.name, "' kernel writes its input's dtype (", dtype_name(a.dtype()),
             "), the output is ", dtype_name(out));
  std::vector<bool> reduced(a.dim(), false);
  for (int64_t d : dims) {
    PF_CHECK_T(a.dim() == 0 ? (d == 0 || d == -1) : (d >= 0 && d < a.dim()), IndexError, "'", ctx.op.name,
               "': dim ", d, " out of range for a tensor of dimension ", a.dim());
    if (a.dim() > 0) reduced[d] = true;
  }
  dispatch_supported<Supported>(ctx, a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    OpT<T> op;
    configure(op);
    run_reduce<OpT<T>, T>(op, make_plan(a, reduced, keepdim, ctx.outputs));
  });
}

template <template <typename> class OpT>
void reduce_dims_kernel(KernelContext& ctx) {
  reduce_dims<OpT>(ctx, [](auto&) {});
}

void mean_kernel(KernelContext& ctx) {
  reduce_dims<SumOp, MeanOp>(ctx, [](auto& op) { op.mean = true; });
}

// A reduction's kernel: the generic one over its dims, or mean's.
template <template <typename> class OpT>
constexpr KernelFn kKernelOf = &reduce_dims_kernel<OpT>;
template <>
constexpr KernelFn kKernelOf<MeanOp> = &mean_kernel;

// max_dim/min_dim (values and indices) and argmax/argmin (indices only: one output).
template <template <typename> class OpT>
void reduce_one_dim_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  int64_t dim = ctx.attr<int64_t>("dim");
  const bool keepdim = ctx.attr<bool>("keepdim");
  const int64_t ndim = std::max<int64_t>(a.dim(), 1);
  PF_CHECK_T(dim >= -ndim && dim < ndim, IndexError, "'", ctx.op.name, "': dim ", dim, " out of range [", -ndim, ", ",
             ndim - 1, "]");
  if (dim < 0) dim += ndim;
  std::vector<bool> reduced(a.dim(), false);
  if (a.dim() > 0) {
    PF_CHECK_T(a.sizes()[dim] > 0, IndexError, "'", ctx.op.name,
               "': cannot reduce over a zero-size dimension (dim ", dim, " of ", shape_str(a.sizes()), ")");
    reduced[dim] = true;
  }
  const size_t nouts = ctx.outputs.size();
  PF_CHECK(ctx.output(nouts - 1).dtype() == DType::Int64, "cpu '", ctx.op.name, "' kernel writes int64 indices");
  dispatch_supported<OpT>(ctx, a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    OpT<T> op;
    op.write_values = nouts == 2;
    run_reduce<OpT<T>, T>(op, make_plan(a, reduced, keepdim, ctx.outputs));
  });
}

}  // namespace

void register_reduce_kernels(Registrar& reg) {
  // The reductions over dims of the definitions (core/opdefs/reductions.yaml): each functor is
  // named after its op (amax -> AmaxOp), its `supported` trait picks the dtypes.
#define PF_X(name, Camel, dtypes, rule, identity, sig) register_supported<Camel##Op>(reg, name, kKernelOf<Camel##Op>);
  PF_OPDEFS_REDUCTION(PF_X)
#undef PF_X
  // The reductions to the extreme's index (core/opdefs/indexed.yaml): values and indices, or the
  // indices alone, as the op's outputs say (max_dim -> MaxDimOp, argmax -> ArgmaxOp).
#define PF_X(name, Camel, dtypes, n_outputs, torch_name, dim_optional, sig) \
  register_supported<Camel##Op>(reg, name, reduce_one_dim_kernel<Camel##Op>);
  PF_OPDEFS_INDEXED(PF_X)
#undef PF_X
}

}  // namespace plugflow::cpu
