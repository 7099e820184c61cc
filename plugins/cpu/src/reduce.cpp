// Reductions: sum, prod, mean, amax, amin over any set of dims, and the indexed ones
// (max_dim, min_dim, argmax, argmin) over one dim; any input and output strides.
//
// The loops themselves (plan, inner and outer mode) live in reduce_loops.h.
//
// A reduction op is a functor template on the storage type T with
//   acc_t, identity(), step(acc, x, index), merge(left, right), write(outs, acc, count).
// merge must be associative and, for the indexed ops, prefer `left` on ties so that the first
// index wins when partial results are merged in order.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kernels.h"
#include "loops.h"
#include "reduce_loops.h"

namespace plugflow::cpu {
namespace {

// ---- ops -------------------------------------------------------------------------------------

template <typename T>
struct SumOp {
  static constexpr bool supported = true;
  static constexpr bool indexed = false;
  using acc_t = sum_acc_t<T>;
  acc_t identity() const { return acc_t(0); }
  acc_t step(acc_t a, T x, int64_t) const { return a + to_acc<T, acc_t>(x); }
  acc_t merge(acc_t a, acc_t b) const { return a + b; }
  void write(char* const* outs, acc_t a, int64_t) const { *reinterpret_cast<T*>(outs[0]) = from_acc<T>(a); }
};

template <typename T>
struct ProdOp {
  static constexpr bool supported = true;
  static constexpr bool indexed = false;
  using acc_t = sum_acc_t<T>;
  acc_t identity() const { return acc_t(1); }
  acc_t step(acc_t a, T x, int64_t) const { return a * to_acc<T, acc_t>(x); }
  acc_t merge(acc_t a, acc_t b) const { return a * b; }
  void write(char* const* outs, acc_t a, int64_t) const { *reinterpret_cast<T*>(outs[0]) = from_acc<T>(a); }
};

template <typename T>
struct MeanOp : SumOp<T> {
  static constexpr bool supported = is_float_v<T>;
  using acc_t = sum_acc_t<T>;
  void write(char* const* outs, acc_t a, int64_t count) const {
    // count == 0 gives 0/0 = nan, as PyTorch's mean of an empty tensor.
    *reinterpret_cast<T*>(outs[0]) = from_acc<T>(a / static_cast<acc_t>(count));
  }
};

// Extremes: NaN propagates (a NaN accumulator stays, a NaN input takes over).
template <typename C>
inline C nan_max(C a, C x) {
  // Bitwise |, not ||: no branch, so the comparison vectorizes into a blend.
  if constexpr (std::is_floating_point_v<C>) return ((x > a) | (x != x)) ? x : a;
  else return x > a ? x : a;
}
template <typename C>
inline C nan_min(C a, C x) {
  if constexpr (std::is_floating_point_v<C>) return ((x < a) | (x != x)) ? x : a;
  else return x < a ? x : a;
}

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
};
template <typename T>
using AmaxOp = ExtremeOp<T, true>;
template <typename T>
using AminOp = ExtremeOp<T, false>;

// Value and index of the extreme; the first index on ties, the first NaN if there is one.
template <typename T, bool IsMax, bool WriteValues>
struct IndexedOp {
  static constexpr bool supported = true;
  static constexpr bool indexed = true;
  using C = opmath_t<T>;
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
  void write(char* const* outs, acc_t a, int64_t) const {
    if constexpr (WriteValues) {
      *reinterpret_cast<T*>(outs[0]) = convert<T>(a.v);
      *reinterpret_cast<int64_t*>(outs[1]) = a.i;
    } else {
      *reinterpret_cast<int64_t*>(outs[0]) = a.i;
    }
  }
};
template <typename T>
using MaxDimOp = IndexedOp<T, true, true>;
template <typename T>
using MinDimOp = IndexedOp<T, false, true>;
template <typename T>
using ArgmaxOp = IndexedOp<T, true, false>;
template <typename T>
using ArgminOp = IndexedOp<T, false, false>;


// ---- kernels ---------------------------------------------------------------------------------

template <template <typename> class OpT>
void reduce_dims_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Shape& dims = ctx.attr<Shape>("dims");
  const bool keepdim = ctx.attr<bool>("keepdim");
  PF_CHECK(ctx.output(0).dtype() == a.dtype(), "cpu '", ctx.op.name, "' kernel writes its input's dtype (",
           dtype_name(a.dtype()), "), the output is ", dtype_name(ctx.output(0).dtype()));
  std::vector<bool> reduced(a.dim(), false);
  for (int64_t d : dims) {
    PF_CHECK_T(a.dim() == 0 ? (d == 0 || d == -1) : (d >= 0 && d < a.dim()), IndexError, "'", ctx.op.name,
               "': dim ", d, " out of range for a tensor of dimension ", a.dim());
    if (a.dim() > 0) reduced[d] = true;
  }
  dispatch_supported<OpT>(ctx, a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce<OpT<T>, T>(OpT<T>{}, make_plan(a, reduced, keepdim, ctx.outputs));
  });
}

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
    run_reduce<OpT<T>, T>(OpT<T>{}, make_plan(a, reduced, keepdim, ctx.outputs));
  });
}

}  // namespace

void register_reduce_kernels(Registrar& reg) {
  register_supported<SumOp>(reg, "sum", reduce_dims_kernel<SumOp>);
  register_supported<ProdOp>(reg, "prod", reduce_dims_kernel<ProdOp>);
  register_supported<MeanOp>(reg, "mean", reduce_dims_kernel<MeanOp>);
  register_supported<AmaxOp>(reg, "amax", reduce_dims_kernel<AmaxOp>);
  register_supported<AminOp>(reg, "amin", reduce_dims_kernel<AminOp>);
  register_supported<MaxDimOp>(reg, "max_dim", reduce_one_dim_kernel<MaxDimOp>);
  register_supported<MinDimOp>(reg, "min_dim", reduce_one_dim_kernel<MinDimOp>);
  register_supported<ArgmaxOp>(reg, "argmax", reduce_one_dim_kernel<ArgmaxOp>);
  register_supported<ArgminOp>(reg, "argmin", reduce_one_dim_kernel<ArgminOp>);
}

}  // namespace plugflow::cpu
