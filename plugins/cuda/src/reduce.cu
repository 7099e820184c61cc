// Reductions: those over any set of dims (core/opdefs/reductions.yaml), and the indexed ones
// (core/opdefs/indexed.yaml: max_dim, min_dim, argmax, argmin) over one dim; any input and
// output strides, through the shared driver of reduce.cuh.
#include <limits>

#include "opdefs.h"
#include "reduce.cuh"

namespace plugflow::cuda {
namespace {

// ---- reducers ------------------------------------------------------------------------------

template <typename D>
struct SumRed {
  using acc_t = sum_acc_t<D>;
  PF_DEVICE acc_t identity() const { return acc_t(0); }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t) const { return a + to_acc<D, acc_t>(x); }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const { return a + b; }
  PF_DEVICE void write(char* out0, char*, acc_t a, int64_t) const { *reinterpret_cast<D*>(out0) = from_acc<D>(a); }
};

// nansum: sum's accumulation with NaN counted as zero.
template <typename D>
struct NansumRed {
  using acc_t = sum_acc_t<D>;
  PF_DEVICE acc_t identity() const { return acc_t(0); }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t) const {
    const acc_t v = to_acc<D, acc_t>(x);
    return v != v ? a : a + v;  // (false for integers)
  }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const { return a + b; }
  PF_DEVICE void write(char* out0, char*, acc_t a, int64_t) const { *reinterpret_cast<D*>(out0) = from_acc<D>(a); }
};

// Integer products wrap; floating ones keep an exact zero sticky, as the CPU plugin's ProdOp
// (a reordered product can overflow to inf, and inf * 0 = NaN, where the exact product of
// finite factors with a zero is a zero signed by the parity of negative factors).
template <typename D>
struct ProdRed {
  using product_t = sum_acc_t<D>;
  static constexpr bool kFloat = !std::is_same_v<product_t, uint64_t>;
  struct FloatAcc {
    product_t p;
    bool zero, nonfinite, negative;
  };
  using acc_t = std::conditional_t<kFloat, FloatAcc, product_t>;
  PF_DEVICE acc_t identity() const {
    if constexpr (kFloat) return {1, false, false, false};
    else return 1;
  }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t) const {
    const product_t v = to_acc<D, product_t>(x);
    if constexpr (kFloat) return {a.p * v, a.zero || v == 0, a.nonfinite || !isfinite(v), a.negative != signbit(v)};
    else return a * v;
  }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const {
    if constexpr (kFloat) return {a.p * b.p, a.zero || b.zero, a.nonfinite || b.nonfinite, a.negative != b.negative};
    else return a * b;
  }
  PF_DEVICE void write(char* out0, char*, acc_t a, int64_t) const {
    product_t p;
    if constexpr (kFloat) p = a.zero && !a.nonfinite ? (a.negative ? -product_t(0) : product_t(0)) : a.p;
    else p = a;
    *reinterpret_cast<D*>(out0) = from_acc<D>(p);
  }
};

template <typename D>
struct MeanRed : SumRed<D> {
  using acc_t = sum_acc_t<D>;
  PF_DEVICE void write(char* out0, char*, acc_t a, int64_t count) const {
    // count == 0 gives 0 / 0 = nan, as PyTorch's mean of an empty tensor.
    *reinterpret_cast<D*>(out0) = from_acc<D>(a / static_cast<acc_t>(count));
  }
};

// amax / amin: NaN propagates (a NaN accumulator stays, a NaN input takes over).
template <typename D, bool IsMax>
struct ExtremeRed {
  using acc_t = opmath_t<D>;
  acc_t init;  // -inf / +inf, or the type's lowest / highest value (set on the host)
  PF_DEVICE acc_t identity() const { return init; }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t) const { return merge(a, to_opmath(x)); }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const {
    if constexpr (is_float_v<acc_t>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return (IsMax ? b > a : b < a) ? b : a;
  }
  PF_DEVICE void write(char* out0, char*, acc_t a, int64_t) const { *reinterpret_cast<D*>(out0) = cast_to<D>(a); }
};
template <typename D> using AmaxRed = ExtremeRed<D, true>;
template <typename D> using AminRed = ExtremeRed<D, false>;

// A reducer whose output is bool or uint8 whatever its input's dtype (a tag base: nvcc warns
// about a static member that only a requires-expression reads).
struct BoolOutput {};

// all / any: true where every / some element is non-zero (NaN counts as non-zero). The output
// is bool, or uint8 for a uint8 input; both hold 0 or 1 in one byte.
template <typename D, bool IsAll>
struct LogicalRed : BoolOutput {
  using acc_t = bool;
  PF_DEVICE acc_t identity() const { return IsAll; }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t) const {
    const bool nz = to_opmath(x) != opmath_t<D>(0);
    return IsAll ? (a && nz) : (a || nz);
  }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const { return IsAll ? (a && b) : (a || b); }
  PF_DEVICE void write(char* out0, char*, acc_t a, int64_t) const { *reinterpret_cast<uint8_t*>(out0) = a ? 1 : 0; }
};
template <typename D> using AllRed = LogicalRed<D, true>;
template <typename D> using AnyRed = LogicalRed<D, false>;

// Value and index of the extreme: the first index on ties, the first NaN if there is one.
template <typename D, bool IsMax, bool WriteValues>
struct IndexedRed {
  using C = opmath_t<D>;
  struct acc_t {
    C v;
    int64_t i;  // -1: nothing seen yet
  };
  PF_DEVICE acc_t identity() const { return {C(0), -1}; }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t r) const { return merge(a, {to_opmath(x), r}); }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool a_nan = a.v != a.v, b_nan = b.v != b.v;  // always false for integers
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return a.i < b.i ? a : b;
      return a_nan ? a : b;
    }
    if (IsMax ? b.v > a.v : b.v < a.v) return b;
    if (IsMax ? a.v > b.v : a.v < b.v) return a;
    return a.i < b.i ? a : b;
  }
  PF_DEVICE void write(char* out0, char* out1, acc_t a, int64_t) const {
    if constexpr (WriteValues) {
      *reinterpret_cast<D*>(out0) = cast_to<D>(a.v);
      *reinterpret_cast<int64_t*>(out1) = a.i;
    } else {
      *reinterpret_cast<int64_t*>(out0) = a.i;
    }
  }
};
template <typename D> using MaxDimRed = IndexedRed<D, true, true>;
template <typename D> using MinDimRed = IndexedRed<D, false, true>;
template <typename D> using ArgmaxRed = IndexedRed<D, true, false>;
template <typename D> using ArgminRed = IndexedRed<D, false, false>;

template <typename D, bool IsMax>
ExtremeRed<D, IsMax> make_extreme() {
  using A = opmath_t<D>;
  if constexpr (is_float_v<A>) {
    return {IsMax ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity()};
  } else {
    return {IsMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max()};
  }
}
// Reducers are aggregates; amax/amin carry their identity, computed here on the host.
template <typename D>
struct ReducerFactory {
  template <template <typename> class RedT>
  static RedT<D> make() {
    if constexpr (std::is_same_v<RedT<D>, AmaxRed<D>>) return make_extreme<D, true>();
    else if constexpr (std::is_same_v<RedT<D>, AminRed<D>>) return make_extreme<D, false>();
    else return RedT<D>{};
  }
};


// The reductions over dims (sum ... amin, all, any): attrs dims (sorted, unique) and keepdim. The
// output has the input's dtype, or bool / uint8 for a BoolOutput reducer (all, any).
template <template <typename> class RedT, typename Family>
void reduce_dims_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  if constexpr (std::is_base_of_v<BoolOutput, RedT<float>>)
    PF_CHECK(out.dtype() == DType::Bool || out.dtype() == DType::UInt8, "cuda '", ctx.op.name,
             "' kernel writes bool or uint8, got ", dtype_name(out.dtype()));
  else
    PF_CHECK(out.dtype() == a.dtype(), "cuda '", ctx.op.name, "' kernel writes its input's dtype (",
             dtype_name(a.dtype()), "), the output is ", dtype_name(out.dtype()));
  const Shape& dims = ctx.attr<Shape>("dims");
  const ReduceIndexing ix = make_reduce_indexing(a, dims, ctx.attr<bool>("keepdim"), out, nullptr);
  dispatch_supported<Family>(ctx, a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    run_reduce<RedT<D>, D>(ix, a, static_cast<char*>(out.data_ptr()), nullptr,
                           ReducerFactory<D>::template make<RedT>(), scope);
  });
}

// max_dim min_dim (values + indices) and argmax argmin (indices): attrs dim and keepdim.
template <template <typename> class RedT, typename Family>
void reduce_one_dim_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const int64_t dim = ctx.attr<int64_t>("dim");
  const bool keepdim = ctx.attr<bool>("keepdim");
  const Tensor& out0 = ctx.output(0);
  const Tensor* indices = ctx.outputs.size() > 1 ? &ctx.output(1) : nullptr;
  const int64_t wrapped = a.dim() == 0 ? 0 : (dim < 0 ? dim + a.dim() : dim);
  const ReduceIndexing ix = make_reduce_indexing(a, {wrapped}, keepdim, out0, indices);
  dispatch_supported<Family>(ctx, a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    run_reduce<RedT<D>, D>(ix, a, static_cast<char*>(out0.data_ptr()),
                           indices ? static_cast<char*>(indices->data_ptr()) : nullptr, RedT<D>{}, scope);
  });
}

}  // namespace

std::vector<KernelDef> reduce_kernels() {
  return {
  // The reductions over dims of the definitions (core/opdefs/reductions.yaml): each functor is
  // named after its op (amax -> AmaxRed), registered for the definition's `kernels` dtypes.
#define PF_X(name, Camel, dtypes, rule, identity, sig) \
  {name, supported_dtypes<dtypes##Types>(), &reduce_dims_kernel<Camel##Red, dtypes##Types>},
      PF_OPDEFS_REDUCTION(PF_X)
#undef PF_X
  // The reductions to the extreme's index (core/opdefs/indexed.yaml): max_dim -> MaxDimRed,
  // argmax -> ArgmaxRed.
#define PF_X(name, Camel, dtypes, n_outputs, torch_name, dim_optional, sig) \
  {name, supported_dtypes<dtypes##Types>(), &reduce_one_dim_kernel<Camel##Red, dtypes##Types>},
      PF_OPDEFS_INDEXED(PF_X)
#undef PF_X
  };
}

}  // namespace plugflow::cuda
