// Binary elementwise kernels: arithmetic, bitwise, logical and comparison ops.
//
// Each op is a functor template on the storage type T with
//   supported  - whether the op is defined for T (drives registration, PyTorch's dtype sets),
//   out_t      - the output storage type (T, or bool for logical/compare ops),
//   C          - the compute type (float for float16/bfloat16),
//   zero_check - whether an integer zero divisor must raise (division-like ops),
//   C-or-bool operator()(C a, C b) const.
// binary_kernel<Op> turns any of them into a kernel through the generic elementwise loop.
#include <cmath>
#include <string>

#include "kernels.h"
#include "loops.h"
#include "opdefs.h"

namespace plugflow::cpu {
namespace {

template <typename T, typename Out = T>
struct OpBase {
  using out_t = Out;
  using C = opmath_t<T>;
  static constexpr bool zero_check = false;
  explicit OpBase(const KernelContext&) {}
};

// An optional Scalar attribute (alpha of add/sub) in compute type C.
template <typename C>
C scalar_attr(const KernelContext& ctx, const char* name, C fallback) {
  return ctx.attrs.has(name) ? scalar_to<C>(ctx.attr<Scalar>(name)) : fallback;
}

// float16 arithmetic on PyTorch's CPU rounds every operation to float16 (its Half type has no
// vector kernels): add/sub's alpha * b is rounded before the sum.
inline float half_rounded(float v) { return static_cast<float>(convert<Half>(v)); }

// add/sub's alpha in compute type C: float16/bfloat16 round it to the dtype first, as PyTorch's
// CPU kernel does (alpha 0.7 is 0.69921875 in bfloat16).
template <typename T, typename C = opmath_t<T>>
C alpha_attr(const KernelContext& ctx) {
  const C alpha = scalar_attr<C>(ctx, "alpha", C(1));
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return static_cast<C>(convert<T>(alpha));
  else return alpha;
}

// ---- arithmetic ------------------------------------------------------------------------------

template <typename T>
struct AddOp : OpBase<T> {
  using C = opmath_t<T>;
  static constexpr bool supported = true;
  static constexpr bool fused_multiply_add = true;  // a + alpha * b rounds once, as PyTorch's
  C alpha;
  explicit AddOp(const KernelContext& ctx) : OpBase<T>(ctx), alpha(alpha_attr<T>(ctx)) {}
  C operator()(C a, C b) const {
    if constexpr (std::is_same_v<T, bool>) return a || (alpha && b);
    else if constexpr (is_int_v<T>) return wrap_add(a, wrap_mul(alpha, b));
    else if constexpr (std::is_same_v<T, Half>) return a + half_rounded(alpha * b);
    else return scalar_math::add_scaled(a, alpha, b);
  }
};

template <typename T>
struct SubOp : OpBase<T> {
  using C = opmath_t<T>;
  static constexpr bool supported = !std::is_same_v<T, bool>;  // PyTorch: use logical_xor
  static constexpr bool fused_multiply_add = true;  // a - alpha * b rounds once, as PyTorch's
  C alpha;
  explicit SubOp(const KernelContext& ctx) : OpBase<T>(ctx), alpha(alpha_attr<T>(ctx)) {}
  C operator()(C a, C b) const {
    if constexpr (is_int_v<T>) return wrap_sub(a, wrap_mul(alpha, b));
    else if constexpr (std::is_same_v<T, Half>) return a - half_rounded(alpha * b);
    else return scalar_math::add_scaled(a, -alpha, b);
  }
};

template <typename T>
struct MulOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = true;
  C operator()(C a, C b) const {
    if constexpr (std::is_same_v<T, bool>) return a && b;
    else if constexpr (is_int_v<T>) return wrap_mul(a, b);
    else return a * b;
  }
};

// Division and modulo as PyTorch defines them, shared with the CUDA plugin.
using scalar_math::float_div_floor;
using scalar_math::float_mod_floor;
using scalar_math::int_div_floor;
using scalar_math::int_div_trunc;
using scalar_math::int_mod_floor;
using scalar_math::int_mod_trunc;

template <typename T>
struct DivTrueOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;  // integers are promoted before the kernel
  C operator()(C a, C b) const { return a / b; }
};

template <typename T>
struct DivTruncOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = !std::is_same_v<T, bool>;
  static constexpr bool zero_check = is_int_v<T>;
  C operator()(C a, C b) const {
    if constexpr (is_int_v<T>) return int_div_trunc(a, b);
    else return std::trunc(a / b);
  }
};

template <typename T>
struct DivFloorOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = !std::is_same_v<T, bool>;
  static constexpr bool zero_check = is_int_v<T>;
  C operator()(C a, C b) const {
    if constexpr (is_int_v<T>) return int_div_floor(a, b);
    else return float_div_floor(a, b);
  }
};

template <typename T>
using FloorDivideOp = DivFloorOp<T>;

template <typename T>
struct RemainderOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = !std::is_same_v<T, bool>;
  static constexpr bool zero_check = is_int_v<T>;
  C operator()(C a, C b) const {
    if constexpr (is_int_v<T>) return int_mod_floor(a, b);
    else return float_mod_floor(a, b);
  }
};

template <typename T>
struct FmodOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = !std::is_same_v<T, bool>;
  static constexpr bool zero_check = is_int_v<T>;
  C operator()(C a, C b) const {
    if constexpr (is_int_v<T>) return int_mod_trunc(a, b);
    else return std::fmod(a, b);
  }
};

template <typename T>
struct PowOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = !std::is_same_v<T, bool>;
  C operator()(C a, C b) const {
    if constexpr (is_int_v<T>) {
      if constexpr (std::is_signed_v<T>) {
        // PyTorch: a negative integer exponent gives 1/a**|b| truncated toward zero.
        if (b < 0) {
          if (a == 1) return C(1);
          if (a == -1) return (b % 2 == 0) ? C(1) : C(-1);
          return C(0);
        }
      }
      C result = 1, base = a;
      for (auto e = b; e != 0; e /= 2) {  // square-and-multiply, wrapping like the tensors
        if (e & 1) result = wrap_mul(result, base);
        base = wrap_mul(base, base);
      }
      return result;
    } else {
      return std::pow(a, b);
    }
  }
};

template <typename T>
struct MaximumOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = true;
  C operator()(C a, C b) const {
    if constexpr (is_float_v<T>) return (a != a) ? a : (b != b) ? b : (a > b ? a : b);  // NaN propagates
    else return a > b ? a : b;
  }
};

template <typename T>
struct ReluBackwardOp : OpBase<T> {  // (grad, result): PyTorch's threshold_backward at 0
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = !std::is_same_v<T, bool>;
  C operator()(C g, C result) const { return result <= C(0) ? C(0) : g; }
};

template <typename T>
struct MinimumOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = true;
  C operator()(C a, C b) const {
    if constexpr (is_float_v<T>) return (a != a) ? a : (b != b) ? b : (a < b ? a : b);
    else return a < b ? a : b;
  }
};

template <typename T>
struct Atan2Op : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;
  C operator()(C a, C b) const { return std::atan2(a, b); }
};

template <typename T>
struct CopysignOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;
  C operator()(C a, C b) const { return std::copysign(a, b); }
};

template <typename T>
struct HypotOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;
  C operator()(C a, C b) const { return std::hypot(a, b); }
};

// x * log(y) and x * log1p(y) with PyTorch's convention: 0 where x is 0, unless y is NaN.
template <typename T>
struct XlogyOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;
  C operator()(C x, C y) const {
    if (std::isnan(y)) return y;
    return x == C(0) ? C(0) : x * std::log(y);
  }
};

template <typename T>
struct Xlog1pyOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;
  C operator()(C x, C y) const {
    if (std::isnan(y)) return y;
    return x == C(0) ? C(0) : x * std::log1p(y);
  }
};

// ---- bitwise (integral and bool) -------------------------------------------------------------

template <typename T>
struct BitwiseAndOp : OpBase<T> {
  using OpBase<T>::OpBase;
  static constexpr bool supported = std::is_integral_v<T>;
  T operator()(T a, T b) const { return static_cast<T>(a & b); }
};
template <typename T>
struct BitwiseOrOp : OpBase<T> {
  using OpBase<T>::OpBase;
  static constexpr bool supported = std::is_integral_v<T>;
  T operator()(T a, T b) const { return static_cast<T>(a | b); }
};
template <typename T>
struct BitwiseXorOp : OpBase<T> {
  using OpBase<T>::OpBase;
  static constexpr bool supported = std::is_integral_v<T>;
  T operator()(T a, T b) const { return static_cast<T>(a ^ b); }
};

// ---- logical and comparison (bool output, every dtype) ------------------------------------

#define PF_BOOL_BINARY_OP(Name, expr)                          \
  template <typename T>                                        \
  struct Name : OpBase<T, bool> {                              \
    using OpBase<T, bool>::OpBase;                             \
    using C = opmath_t<T>;                                     \
    static constexpr bool supported = true;                    \
    bool operator()(C a, C b) const { return (expr); }         \
  };

PF_BOOL_BINARY_OP(LogicalAndOp, (a != C(0)) && (b != C(0)))
PF_BOOL_BINARY_OP(LogicalOrOp, (a != C(0)) || (b != C(0)))
PF_BOOL_BINARY_OP(LogicalXorOp, (a != C(0)) != (b != C(0)))
PF_BOOL_BINARY_OP(EqOp, a == b)
PF_BOOL_BINARY_OP(NeOp, a != b)
PF_BOOL_BINARY_OP(LtOp, a < b)
PF_BOOL_BINARY_OP(LeOp, a <= b)
PF_BOOL_BINARY_OP(GtOp, a > b)
PF_BOOL_BINARY_OP(GeOp, a >= b)
#undef PF_BOOL_BINARY_OP

// ---- the generic kernel ----------------------------------------------------------------------

// True when any element of t is zero (the divisor check of integer division-like ops).
template <typename T>
bool any_zero(const Tensor& t) {
  const StridedLayout L = make_layout({&t});
  bool found = false;
  for_each_piece(L, 0, L.numel, [&](char* const* p, int64_t n) {
    const int64_t s = L.ndim == 0 ? 0 : L.byte_strides[0][L.ndim - 1];
    bool z = false;
    for (int64_t i = 0; i < n; ++i) z |= *reinterpret_cast<const T*>(p[0] + i * s) == T(0);
    found |= z;
  });
  return found;
}

// True when t holds one value broadcast over its shape (a Python number arrives as an expanded 0-d
// tensor).
bool is_broadcast_scalar(const Tensor& t) {
  for (size_t d = 0; d < t.sizes().size(); ++d)
    if (t.sizes()[d] != 1 && t.strides()[d] != 0) return false;
  return t.numel() > 0;
}

template <template <typename> class OpT, typename T>
void run_binary(KernelContext& ctx) {
  using Op = OpT<T>;
  using Out = typename Op::out_t;
  using C = opmath_t<T>;
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  const Tensor& out = ctx.output(0);
  PF_CHECK(b.dtype() == a.dtype() && out.dtype() == cpp_dtype<Out>::value, "cpu '", ctx.op.name,
           "' kernel expects inputs of one dtype and a ", dtype_name(cpp_dtype<Out>::value), " output, got ",
           dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " -> ", dtype_name(out.dtype()));
  if constexpr (Op::zero_check) {
    // Checked up front so that an in-place call leaves its operand untouched on error.
    if (out.numel() != 0 && any_zero<T>(b))
      PF_THROW(Error, "ZeroDivisionError: integer division or modulo by zero in '", ctx.op.name, "' (",
               dtype_name(a.dtype()), "). Divide floating-point tensors to get inf/nan instead.");
  }
  const Op op(ctx);
  const auto apply = [op](T x, T y) { return convert<Out>(op(static_cast<C>(x), static_cast<C>(y))); };
  if constexpr (std::is_floating_point_v<T>) {
    // float32/float64 with a Python number: the number hoisted out of the loop, where the
    // elementwise driver would stage it through a buffer (~1.2x the time on cached data).
    if (is_broadcast_scalar(b))
      return elementwise<Out, T>(out, {&a}, [apply, y = *b.data<T>()](T x) { return apply(x, y); },
                                 fused_multiply_add_of<Op>);
    if (is_broadcast_scalar(a))
      return elementwise<Out, T>(out, {&b}, [apply, x = *a.data<T>()](T y) { return apply(x, y); },
                                 fused_multiply_add_of<Op>);
  }
  elementwise<Out, T, T>(out, {&a, &b}, apply, fused_multiply_add_of<Op>);
}

// pow with a broadcast scalar exponent, PyTorch's pow_tensor_scalar: 2, 3, -2 as products
// (x * x * x rounds twice, exactly as PyTorch does), 0.5 and -0.5 as sqrt (so pow(-0., 0.5) is
// -0. and pow(-inf, 0.5) NaN there, unlike std::pow), -1 as a reciprocal, others std::pow with
// the exponent hoisted. A 0-d tensor exponent looks the same here and gets these results too
// (PyTorch sends it through std::pow: the two differ only at -0. and -inf for +-0.5).
// Integers keep the generic square-and-multiply loop. False when the exponent is not a scalar.
template <typename T>
bool run_pow_scalar(const Tensor& a, const Tensor& b, const Tensor& out) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b.dtype() != a.dtype() || out.dtype() != a.dtype() || !is_broadcast_scalar(b)) return false;
    const T e = *b.data<T>();
    auto run = [&](auto f) { elementwise<T, T>(out, {&a}, f); };
    if (e == T(2)) run([](T x) { return x * x; });
    else if (e == T(3)) run([](T x) { return x * x * x; });
    else if (e == T(0.5)) run([](T x) { return std::sqrt(x); });
    else if (e == T(-0.5)) run([](T x) { return T(1) / std::sqrt(x); });
    else if (e == T(-1)) run([](T x) { return T(1) / x; });
    else if (e == T(-2)) run([](T x) { return T(1) / (x * x); });
    else run([e](T x) { return std::pow(x, e); });
    return true;
  }
  return false;
}

void pow_kernel(KernelContext& ctx) {
  dispatch_supported<PowOp>(ctx, ctx.input(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (!run_pow_scalar<T>(ctx.input(0), ctx.input(1), ctx.output(0))) run_binary<PowOp, T>(ctx);
  });
}

template <template <typename> class OpT>
void binary_kernel(KernelContext& ctx) {
  dispatch_supported<OpT>(ctx, ctx.input(0).dtype(), [&](auto tag) { run_binary<OpT, typename decltype(tag)::type>(ctx); });
}

// div picks its functor by rounding mode: true division, or trunc/floor (integers too).
template <typename T>
struct DivSupported {
  static constexpr bool supported = !std::is_same_v<T, bool>;
};

void div_kernel(KernelContext& ctx) {
  const std::string mode = ctx.attrs.has("rounding_mode") ? ctx.attr<std::string>("rounding_mode") : "";
  if (mode == "trunc") return binary_kernel<DivTruncOp>(ctx);
  if (mode == "floor") return binary_kernel<DivFloorOp>(ctx);
  PF_CHECK_T(mode.empty(), ValueError, "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
             mode, "'");
  PF_CHECK_T(is_floating(ctx.input(0).dtype()), TypeError, "cpu 'div' kernel: true division needs floating inputs, got ",
             dtype_name(ctx.input(0).dtype()), " (integers are promoted to float before the kernel)");
  binary_kernel<DivTrueOp>(ctx);
}

}  // namespace

void register_binary_kernels(Registrar& reg) {
  register_supported<AddOp>(reg, "add", binary_kernel<AddOp>);
  register_supported<SubOp>(reg, "sub", binary_kernel<SubOp>);
  register_supported<DivSupported>(reg, "div", div_kernel);
  register_supported<PowOp>(reg, "pow", pow_kernel);
  // Every other binary op of the definitions (core/opdefs/elementwise.yaml): its functor
  // is named after it (atan2 -> Atan2Op).
#define PF_X(name, Camel, dtypes, bool_out) register_supported<Camel##Op>(reg, name, binary_kernel<Camel##Op>);
  PF_OPDEFS_BINARY_KERNELS(PF_X)
#undef PF_X
}

}  // namespace plugflow::cpu
