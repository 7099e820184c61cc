// Kernels of the `math` family (docs/kernels.md): the fused ternary pointwise ops clamp,
// lerp, addcmul and addcdiv. Same functor scheme as binary.cpp/unary.cpp: a template on the
// storage type T with `supported` and `operator()` on the compute type C (float for
// float16/bfloat16), run through the generic strided elementwise loop (loops.h).
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels.h"
#include "loops.h"
#include "opdefs.h"

namespace plugflow::cpu {
namespace {

// min(max(a, lo), hi) for the bounds that are present; NaN in any operand gives NaN.
template <typename T>
struct ClampOp {
  using C = opmath_t<T>;
  static constexpr bool supported = true;
  bool has_min, has_max;
  explicit ClampOp(const KernelContext& ctx)
      : has_min(ctx.attr<bool>("has_min")), has_max(ctx.attr<bool>("has_max")) {}
  C operator()(C a, C lo, C hi) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(a) || (has_min && std::isnan(lo)) || (has_max && std::isnan(hi)))
        return std::numeric_limits<C>::quiet_NaN();
    }
    C r = a;
    if (has_min && r < lo) r = lo;
    if (has_max && r > hi) r = hi;
    return r;
  }
};

// lerp: scalar_math::lerp, shared with the CUDA kernel.
template <typename T>
struct LerpOp {
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;
  static constexpr bool fused_multiply_add = true;  // its loops are compiled for FMA
  explicit LerpOp(const KernelContext&) {}
  C operator()(C a, C end, C w) const { return scalar_math::lerp(a, end, w); }
};

template <typename T>
struct AddcmulOp {
  using C = opmath_t<T>;
  static constexpr bool supported = !std::is_same_v<T, bool>;
  static constexpr bool fused_multiply_add = true;  // its loops are compiled for FMA
  C value;
  explicit AddcmulOp(const KernelContext& ctx) : value(scalar_to<C>(ctx.attr<Scalar>("value"))) {}
  C operator()(C s, C a, C b) const {
    if constexpr (is_int_v<T>) return wrap_add(s, wrap_mul(value, wrap_mul(a, b)));
    else return scalar_math::addcmul(s, value, a, b);
  }
};

template <typename T>
struct AddcdivOp {
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;  // integer division is refused by the core
  C value;
  explicit AddcdivOp(const KernelContext& ctx) : value(scalar_to<C>(ctx.attr<Scalar>("value"))) {}
  C operator()(C s, C a, C b) const { return s + value * a / b; }
};

// A broadcast number: every stride 0 (a 0-d value expanded to the output's shape).
bool is_broadcast_scalar(const Tensor& t) {
  for (int64_t s : t.strides())
    if (s != 0) return false;
  return true;
}

template <typename T>
T first_value(const Tensor& t) {
  T v;
  std::memcpy(&v, t.data_ptr(), sizeof(T));
  return v;
}

// A broadcast-number last operand (lerp's scalar weight, ...) is read once and the loop runs
// as a binary one, which the vectorizer handles.
template <template <typename> class OpT>
void ternary_kernel(KernelContext& ctx) {
  const Tensor& out = ctx.output(0);
  dispatch_supported<OpT>(ctx, ctx.input(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = opmath_t<T>;
    const OpT<T> op(ctx);
    constexpr auto fma = fused_multiply_add_of<OpT<T>>;
    if (is_broadcast_scalar(ctx.input(2))) {
      const C c = static_cast<C>(first_value<T>(ctx.input(2)));
      elementwise<T, T, T>(out, {&ctx.input(0), &ctx.input(1)}, [op, c](T a, T b) {
        return convert<T>(op(static_cast<C>(a), static_cast<C>(b), c));
      }, fma);
      return;
    }
    elementwise<T, T, T, T>(out, {&ctx.input(0), &ctx.input(1), &ctx.input(2)}, [op](T a, T b, T c) {
      return convert<T>(op(static_cast<C>(a), static_cast<C>(b), static_cast<C>(c)));
    }, fma);
  });
}

template <typename C>
constexpr C lowest_value() {
  if constexpr (std::is_floating_point_v<C>) return -std::numeric_limits<C>::infinity();
  else return std::numeric_limits<C>::lowest();
}
template <typename C>
constexpr C highest_value() {
  if constexpr (std::is_floating_point_v<C>) return std::numeric_limits<C>::infinity();
  else return std::numeric_limits<C>::max();
}

// clamp with number bounds (the common case) is a unary loop with the bounds hoisted; an
// absent bound becomes -inf/+inf (the type's limits for integers).
void clamp_kernel(KernelContext& ctx) {
  const bool has_min = ctx.attr<bool>("has_min"), has_max = ctx.attr<bool>("has_max");
  const Tensor &a = ctx.input(0), &lo = ctx.input(1), &hi = ctx.input(2);
  if ((has_min && !is_broadcast_scalar(lo)) || (has_max && !is_broadcast_scalar(hi))) {
    ternary_kernel<ClampOp>(ctx);
    return;
  }
  const Tensor& out = ctx.output(0);
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = opmath_t<T>;
    const C l = has_min ? static_cast<C>(first_value<T>(lo)) : lowest_value<C>();
    const C h = has_max ? static_cast<C>(first_value<T>(hi)) : highest_value<C>();
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(l) || std::isnan(h)) {
        elementwise<T, T>(out, {&a}, [](T) { return convert<T>(std::numeric_limits<C>::quiet_NaN()); });
        return;
      }
    }
    // NaN inputs fail both comparisons and pass through.
    elementwise<T, T>(out, {&a}, [l, h](T x) {
      C v = static_cast<C>(x);
      v = v < l ? l : v;
      v = v > h ? h : v;
      return convert<T>(v);
    });
  });
}

// A functor's kernel: the generic ternary loop, or clamp's own.
template <template <typename> class OpT>
constexpr KernelFn kKernelOf = &ternary_kernel<OpT>;
template <>
constexpr KernelFn kKernelOf<ClampOp> = &clamp_kernel;

}  // namespace

void register_math_kernels(Registrar& reg) {
  // The ops of the definitions (core/opdefs/math.yaml): each functor is named after its op
  // (lerp -> LerpOp), its `supported` trait picks the dtypes.
#define PF_X(name, Camel, dtypes, sig) register_supported<Camel##Op>(reg, name, kKernelOf<Camel##Op>);
  PF_OPDEFS_TERNARY(PF_X)
#undef PF_X
}

}  // namespace plugflow::cpu
