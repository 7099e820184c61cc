// Unary floating-point math and activations (docs/kernels.md: "unary float math" and
// "parametrized activations"). f16/bf16 compute in float. Formulas follow PyTorch's.
#include <string>

#include "dmath.cuh"
#include "opdefs.h"
#include "unary.cuh"

namespace plugflow::cuda {
namespace {

// Functors over the opmath type C (float or double).
#define PF_MATH_FUNCTOR(Name, expr)                              \
  struct Name {                                                  \
    template <typename C> PF_DEVICE C operator()(C x) const { return expr; } \
  };

PF_MATH_FUNCTOR(ExpFn, dm::exp(x))
PF_MATH_FUNCTOR(Exp2Fn, dm::exp2(x))
PF_MATH_FUNCTOR(Expm1Fn, dm::expm1(x))
PF_MATH_FUNCTOR(LogFn, dm::log(x))
PF_MATH_FUNCTOR(Log2Fn, dm::log2(x))
PF_MATH_FUNCTOR(Log10Fn, dm::log10(x))
PF_MATH_FUNCTOR(Log1pFn, dm::log1p(x))
PF_MATH_FUNCTOR(SqrtFn, dm::sqrt(x))
PF_MATH_FUNCTOR(RsqrtFn, C(1) / dm::sqrt(x))
PF_MATH_FUNCTOR(SinFn, dm::sin(x))
PF_MATH_FUNCTOR(CosFn, dm::cos(x))
PF_MATH_FUNCTOR(TanFn, dm::tan(x))
PF_MATH_FUNCTOR(AsinFn, dm::asin(x))
PF_MATH_FUNCTOR(AcosFn, dm::acos(x))
PF_MATH_FUNCTOR(AtanFn, dm::atan(x))
PF_MATH_FUNCTOR(SinhFn, dm::sinh(x))
PF_MATH_FUNCTOR(CoshFn, dm::cosh(x))
PF_MATH_FUNCTOR(TanhFn, dm::tanh(x))
PF_MATH_FUNCTOR(AsinhFn, dm::asinh(x))
PF_MATH_FUNCTOR(AcoshFn, dm::acosh(x))
PF_MATH_FUNCTOR(AtanhFn, dm::atanh(x))
PF_MATH_FUNCTOR(SigmoidFn, C(1) / (C(1) + dm::exp(-x)))
PF_MATH_FUNCTOR(ErfFn, dm::erf(x))
PF_MATH_FUNCTOR(ErfcFn, dm::erfc(x))
PF_MATH_FUNCTOR(ErfinvFn, dm::erfinv(x))
PF_MATH_FUNCTOR(ReciprocalFn, C(1) / x)
PF_MATH_FUNCTOR(SiluFn, x / (C(1) + dm::exp(-x)))
PF_MATH_FUNCTOR(MishFn, x * dm::tanh(dm::log1p(dm::exp(x))))
PF_MATH_FUNCTOR(HardswishFn, x * (x + C(3) < C(0) ? C(0) : (x + C(3) > C(6) ? C(6) : x + C(3))) / C(6))
PF_MATH_FUNCTOR(HardsigmoidFn, (x + C(3) < C(0) ? C(0) : (x + C(3) > C(6) ? C(6) : x + C(3))) / C(6))
PF_MATH_FUNCTOR(FracFn, x - dm::trunc(x))
#undef PF_MATH_FUNCTOR

template <typename C>
struct GeluFn {
  bool tanh_approx;
  PF_DEVICE C operator()(C x) const {
    if (tanh_approx) {
      const C k_beta = C(0.7978845608028654);  // sqrt(2 / pi)
      const C inner = k_beta * (x + C(0.044715) * x * x * x);
      return C(0.5) * x * (C(1) + dm::tanh(inner));
    }
    return x * C(0.5) * (C(1) + dm::erf(x * C(0.7071067811865476)));  // x * Phi(x)
  }
};
struct GeluDesc : FloatTypes {
  static constexpr bool bool_out = false;
  template <typename C> static GeluFn<C> make(const Attrs& at) {
    const std::string mode = attr_or<std::string>(at, "approximate", "none");
    PF_CHECK_T(mode == "none" || mode == "tanh", ValueError, "gelu: approximate must be 'none' or 'tanh', got '",
               mode, "'");
    return {mode == "tanh"};
  }
};

template <typename C>
struct SoftplusFn {
  C beta, threshold;
  PF_DEVICE C operator()(C x) const {
    // Above the threshold softplus is x to within rounding; log1p(exp) would overflow.
    return x * beta > threshold ? x : dm::log1p(dm::exp(x * beta)) / beta;
  }
};
struct SoftplusDesc : FloatTypes {
  static constexpr bool bool_out = false;
  template <typename C> static SoftplusFn<C> make(const Attrs& at) {
    return {static_cast<C>(attr_or(at, "beta", 1.0)), static_cast<C>(attr_or(at, "threshold", 20.0))};
  }
};

template <typename C>
struct LeakyReluFn {
  C slope;
  PF_DEVICE C operator()(C x) const { return x > C(0) ? x : x * slope; }
};
struct LeakyReluDesc : FloatTypes {
  static constexpr bool bool_out = false;
  template <typename C> static LeakyReluFn<C> make(const Attrs& at) {
    return {static_cast<C>(attr_or(at, "negative_slope", 0.01))};
  }
};

template <typename C>
struct EluFn {
  C neg_coef, pos_coef, input_scale;  // alpha * scale, scale, input_scale
  PF_DEVICE C operator()(C x) const { return x <= C(0) ? dm::expm1(x * input_scale) * neg_coef : x * pos_coef; }
};
struct EluDesc : FloatTypes {
  static constexpr bool bool_out = false;
  template <typename C> static EluFn<C> make(const Attrs& at) {
    const double alpha = attr_or(at, "alpha", 1.0), scale = attr_or(at, "scale", 1.0);
    return {static_cast<C>(alpha * scale), static_cast<C>(scale), static_cast<C>(attr_or(at, "input_scale", 1.0))};
  }
};

template <typename F>
using Math = Stateless<F, FloatTypes>;

}  // namespace

std::vector<KernelDef> unary_math_kernels() {
  return {
  // The floating unary ops of the definitions (core/opdefs/elementwise.yaml): each functor is
  // named after its op (erfinv -> ErfinvFn).
#define PF_X(name, Camel, dtypes, bool_out) unary_def<Math<Camel##Fn>>(name),
      PF_OPDEFS_UNARY_FLOAT_KERNELS(PF_X)
#undef PF_X
      unary_def<GeluDesc>("gelu"),
      unary_def<SoftplusDesc>("softplus"),
      unary_def<LeakyReluDesc>("leaky_relu"),
      unary_def<EluDesc>("elu"),
  };
}

}  // namespace plugflow::cuda
