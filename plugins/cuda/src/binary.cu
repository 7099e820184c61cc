// Binary elementwise ops: arithmetic, bitwise, logical and comparisons (docs/kernels.md).
// Both inputs arrive with the output's shape (broadcast inputs as stride-0 views) and one
// dtype; one generic entry point per family, one functor per op.
#include <string>

#include "dmath.cuh"
#include "elementwise.cuh"
#include "launchers.h"
#include "opdefs.h"

namespace plugflow::cuda {
namespace {

// ---- functors (C: opmath type; float for f16/bf16) -------------------------------------
// Integer semantics match the CPU plugin (the division and modulo are the same functions,
// plugins/common/scalar_math.h): wrapping arithmetic, and INT_MIN / -1 answered by
// negation (wraps) rather than left to the hardware. One difference remains: integer
// division by zero cannot raise from a kernel (the CPU raises ZeroDivisionError); like
// PyTorch on CUDA the result is unspecified.

using scalar_math::float_div_floor;
using scalar_math::float_mod_floor;
using scalar_math::int_div_floor;
using scalar_math::int_div_trunc;
using scalar_math::int_mod_floor;
using scalar_math::int_mod_trunc;

template <typename C>
struct AddFn {
  C alpha;
  PF_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) return a || (alpha && b);
    else if constexpr (std::is_integral_v<C>) return wrap_add(a, wrap_mul(alpha, b));
    else return scalar_math::add_scaled(a, alpha, b);  // one rounding, as PyTorch's kernels
  }
};
template <typename C>
struct SubFn {
  C alpha;
  PF_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return wrap_sub(a, wrap_mul(alpha, b));
    else return scalar_math::add_scaled(a, -alpha, b);
  }
};
struct MulFn {
  template <typename C> PF_DEVICE C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) return a && b;
    else if constexpr (std::is_integral_v<C>) return wrap_mul(a, b);
    else return a * b;
  }
};

enum class DivMode { True, Trunc, Floor };
template <typename C>
struct DivFn {
  DivMode mode;
  PF_DEVICE C operator()(C a, C b) const {
    if constexpr (is_float_v<C>) {
      if (mode == DivMode::Trunc) return dm::trunc(a / b);
      if (mode == DivMode::Floor) return float_div_floor(a, b);
      return a / b;
    } else {  // DivMode::True is rejected on the host for integers
      return mode == DivMode::Floor ? int_div_floor(a, b) : int_div_trunc(a, b);
    }
  }
};

struct PowFn {
  template <typename C> PF_DEVICE C operator()(C a, C b) const {
    if constexpr (is_float_v<C>) {
      return dm::pow(a, b);
    } else {
      if constexpr (std::is_signed_v<C>) {
        // PyTorch: a negative integer exponent gives 1 / a**|b| truncated toward zero.
        if (b < 0) {
          if (a == 1) return C(1);
          if (a == -1) return (b % 2 == 0) ? C(1) : C(-1);
          return C(0);
        }
      }
      C result = 1, base = a;
      for (C e = b; e != 0; e = static_cast<C>(e / 2)) {  // square-and-multiply, wrapping
        if (e & 1) result = wrap_mul(result, base);
        base = wrap_mul(base, base);
      }
      return result;
    }
  }
};

struct MaximumFn {  // NaN propagates
  template <typename C> PF_DEVICE C operator()(C a, C b) const {
    if (dm::isnan(a)) return a;
    if (dm::isnan(b)) return b;
    return a > b ? a : b;
  }
};
struct ReluBackwardFn {  // (grad, result): PyTorch's threshold_backward at 0
  template <typename C> PF_DEVICE C operator()(C g, C result) const { return result <= C(0) ? C(0) : g; }
};
struct MinimumFn {
  template <typename C> PF_DEVICE C operator()(C a, C b) const {
    if (dm::isnan(a)) return a;
    if (dm::isnan(b)) return b;
    return a < b ? a : b;
  }
};

struct RemainderFn {  // sign of b, like Python's %
  template <typename C> PF_DEVICE C operator()(C a, C b) const {
    if constexpr (is_float_v<C>) return float_mod_floor(a, b);
    else return int_mod_floor(a, b);
  }
};
struct FmodFn {  // sign of a, like C's fmod
  template <typename C> PF_DEVICE C operator()(C a, C b) const {
    if constexpr (is_float_v<C>) return dm::fmod(a, b);
    else return int_mod_trunc(a, b);
  }
};
struct FloorDivideFn {
  template <typename C> PF_DEVICE C operator()(C a, C b) const {
    if constexpr (is_float_v<C>) return float_div_floor(a, b);
    else return int_div_floor(a, b);
  }
};
struct Atan2Fn {
  template <typename C> PF_DEVICE C operator()(C a, C b) const { return dm::atan2(a, b); }
};
struct CopysignFn {
  template <typename C> PF_DEVICE C operator()(C a, C b) const { return dm::copysign(a, b); }
};
struct HypotFn {
  template <typename C> PF_DEVICE C operator()(C a, C b) const { return dm::hypot(a, b); }
};
// x * log(y), x * log1p(y): 0 where x is 0 unless y is NaN (PyTorch's convention).
struct XlogyFn {
  template <typename C> PF_DEVICE C operator()(C x, C y) const {
    if (dm::isnan(y)) return y;
    return x == C(0) ? C(0) : x * dm::log(y);
  }
};
struct Xlog1pyFn {
  template <typename C> PF_DEVICE C operator()(C x, C y) const {
    if (dm::isnan(y)) return y;
    return x == C(0) ? C(0) : x * dm::log1p(y);
  }
};
struct BitwiseAndFn {
  template <typename C> PF_DEVICE C operator()(C a, C b) const { return static_cast<C>(a & b); }
};
struct BitwiseOrFn {
  template <typename C> PF_DEVICE C operator()(C a, C b) const { return static_cast<C>(a | b); }
};
struct BitwiseXorFn {
  template <typename C> PF_DEVICE C operator()(C a, C b) const { return static_cast<C>(a ^ b); }
};

struct LogicalAndFn {
  template <typename C> PF_DEVICE bool operator()(C a, C b) const { return a != C(0) && b != C(0); }
};
struct LogicalOrFn {
  template <typename C> PF_DEVICE bool operator()(C a, C b) const { return a != C(0) || b != C(0); }
};
struct LogicalXorFn {
  template <typename C> PF_DEVICE bool operator()(C a, C b) const { return (a != C(0)) != (b != C(0)); }
};
struct EqFn {
  template <typename C> PF_DEVICE bool operator()(C a, C b) const { return a == b; }
};
struct NeFn {
  template <typename C> PF_DEVICE bool operator()(C a, C b) const { return a != b; }
};
struct LtFn {
  template <typename C> PF_DEVICE bool operator()(C a, C b) const { return a < b; }
};
struct LeFn {
  template <typename C> PF_DEVICE bool operator()(C a, C b) const { return a <= b; }
};
struct GtFn {
  template <typename C> PF_DEVICE bool operator()(C a, C b) const { return a > b; }
};
struct GeFn {
  template <typename C> PF_DEVICE bool operator()(C a, C b) const { return a >= b; }
};

// ---- descriptors with attributes ----------------------------------------------------------

struct AddDesc : AllTypes {
  static constexpr bool bool_out = false;
  template <typename C> static AddFn<C> make(const Attrs& at) { return {scalar_to<C>(attr_or(at, "alpha", Scalar(1)))}; }
};
struct SubDesc : NumericTypes {  // bool subtraction is an error in PyTorch
  static constexpr bool bool_out = false;
  template <typename C> static SubFn<C> make(const Attrs& at) { return {scalar_to<C>(attr_or(at, "alpha", Scalar(1)))}; }
};
struct DivDesc : NumericTypes {
  static constexpr bool bool_out = false;
  template <typename C> static DivFn<C> make(const Attrs& at) {
    const std::string mode = attr_or<std::string>(at, "rounding_mode", "");
    DivFn<C> fn{DivMode::True};
    if (mode == "trunc") fn.mode = DivMode::Trunc;
    else if (mode == "floor") fn.mode = DivMode::Floor;
    else PF_CHECK_T(mode.empty(), ValueError, "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", mode, "'");
    if constexpr (!is_float_v<C>)
      PF_CHECK(fn.mode != DivMode::True, "div: true division of integer tensors reached the CUDA kernel; "
                                         "the inputs must be cast to a floating dtype first");
    return fn;
  }
};

// ---- the generic entry point ------------------------------------------------------------

template <typename Desc>
void binary_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& out = ctx.output(0);
  PF_CHECK(a.dtype() == b.dtype(), "op '", ctx.op.name, "' got inputs of dtypes ", dtype_name(a.dtype()), " and ",
           dtype_name(b.dtype()), "; the functional layer promotes them to one dtype first");
  dispatch_supported<Desc>(ctx, a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    using Out = std::conditional_t<Desc::bool_out, bool, D>;
    PF_CHECK(out.dtype() == (Desc::bool_out ? DType::Bool : a.dtype()), "op '", ctx.op.name,
             "': unexpected output dtype ", dtype_name(out.dtype()));
    launch_elementwise<Out, D, D>(make_layout({&out, &a, &b}), scope, Desc::template make<opmath_t<D>>(ctx.attrs));
  });
}

template <typename Desc>
KernelDef def(const char* name) {
  return {name, supported_dtypes<Desc>(), &binary_kernel<Desc>};
}

}  // namespace

std::vector<KernelDef> binary_kernels() {
  return {
      def<AddDesc>("add"),
      def<SubDesc>("sub"),
      def<DivDesc>("div"),
      def<Stateless<PowFn, NumericTypes>>("pow"),
  // Every other binary op of the definitions (core/opdefs/elementwise.yaml): its functor is
  // named after it (atan2 -> Atan2Fn).
#define PF_X(name, Camel, dtypes, bool_out) def<Stateless<Camel##Fn, dtypes##Types, bool_out>>(name),
      PF_OPDEFS_BINARY_KERNELS(PF_X)
#undef PF_X
  };
}

}  // namespace plugflow::cuda
