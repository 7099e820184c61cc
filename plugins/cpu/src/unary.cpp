// Unary elementwise kernels: float math, activations (with and without attributes),
// any-dtype ops, predicates and bitwise_not. Same functor scheme as binary.cpp: a template
// on the storage type T with `supported`, `out_t` and `operator()(C) const` on the compute
// type C (float for float16/bfloat16); unary_kernel<Op> runs it through the elementwise loop.
#include <cmath>
#include <limits>
#include <string>

#include "kernels.h"
#include "loops.h"
#include "opdefs.h"
#include "vec_math.h"

namespace plugflow::cpu {
namespace {

template <typename T, typename Out = T>
struct OpBase {
  using out_t = Out;
  using C = opmath_t<T>;
  explicit OpBase(const KernelContext&) {}
};

// PyTorch's calc_erfinv: a rational first guess (Pavlis' erfinv.m), refined by two Newton
// steps on erf, which brings it to full precision.
template <typename C>
inline C erfinv(C y) {
  const C y_abs = std::abs(y);
  if (y_abs > C(1)) return std::numeric_limits<C>::quiet_NaN();
  if (y_abs == C(1)) return std::copysign(std::numeric_limits<C>::infinity(), y);
  constexpr C a[4] = {C(0.886226899), C(-1.645349621), C(0.914624893), C(-0.140543331)};
  constexpr C b[4] = {C(-2.118377725), C(1.442710462), C(-0.329097515), C(0.012229801)};
  constexpr C c[4] = {C(-1.970840454), C(-1.624906493), C(3.429567803), C(1.641345311)};
  constexpr C d[2] = {C(3.543889200), C(1.637067800)};
  C x;
  if (y_abs <= C(0.7)) {
    const C z = y * y;
    const C num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
    const C den = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + C(1);
    x = y * num / den;
  } else {
    const C z = std::sqrt(-std::log((C(1) - y_abs) / C(2)));
    const C num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    const C den = (d[1] * z + d[0]) * z + C(1);
    x = std::copysign(num, y) / den;
  }
  const C two_over_sqrt_pi = C(1.12837916709551257390);
  x = x - (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
  x = x - (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
  return x;
}

// ---- float math (floating dtypes only; integers are promoted before the kernel) ------------

// exp, log, tanh, sigmoid and erf in float (float32, and float16/bfloat16 which compute in float)
// use the branch-free versions of vec_math.h, which the elementwise loop vectorizes; double
// keeps libm.
template <typename C>
inline C fast_exp(C x) {
  if constexpr (std::is_same_v<C, float>) return vec::exp(x);
  else return std::exp(x);
}
template <typename C>
inline C fast_log(C x) {
  if constexpr (std::is_same_v<C, float>) return vec::log(x);
  else return std::log(x);
}
template <typename C>
inline C fast_tanh(C x) {
  if constexpr (std::is_same_v<C, float>) return vec::tanh(x);
  else return std::tanh(x);
}
template <typename C>
inline C fast_erf(C x) {
  if constexpr (std::is_same_v<C, float>) return vec::erf(x);
  else return std::erf(x);
}
template <typename C>
inline C fast_sigmoid(C x) {
  if constexpr (std::is_same_v<C, float>) return vec::sigmoid(x);
  else return C(1) / (C(1) + std::exp(-x));
}

#define PF_FLOAT_UNARY_OP(Name, expr)                   \
  template <typename T>                                 \
  struct Name : OpBase<T> {                             \
    using OpBase<T>::OpBase;                            \
    using C = opmath_t<T>;                              \
    static constexpr bool supported = is_float_v<T>;    \
    C operator()(C x) const { return (expr); }          \
  };

PF_FLOAT_UNARY_OP(ExpOp, fast_exp(x))
PF_FLOAT_UNARY_OP(Exp2Op, std::exp2(x))
PF_FLOAT_UNARY_OP(Expm1Op, std::expm1(x))
PF_FLOAT_UNARY_OP(LogOp, fast_log(x))
PF_FLOAT_UNARY_OP(Log2Op, std::log2(x))
PF_FLOAT_UNARY_OP(Log10Op, std::log10(x))
PF_FLOAT_UNARY_OP(Log1pOp, std::log1p(x))
PF_FLOAT_UNARY_OP(SqrtOp, std::sqrt(x))
PF_FLOAT_UNARY_OP(RsqrtOp, C(1) / std::sqrt(x))
PF_FLOAT_UNARY_OP(SinOp, std::sin(x))
PF_FLOAT_UNARY_OP(CosOp, std::cos(x))
PF_FLOAT_UNARY_OP(TanOp, std::tan(x))
PF_FLOAT_UNARY_OP(AsinOp, std::asin(x))
PF_FLOAT_UNARY_OP(AcosOp, std::acos(x))
PF_FLOAT_UNARY_OP(AtanOp, std::atan(x))
PF_FLOAT_UNARY_OP(SinhOp, std::sinh(x))
PF_FLOAT_UNARY_OP(CoshOp, std::cosh(x))
PF_FLOAT_UNARY_OP(TanhOp, fast_tanh(x))
PF_FLOAT_UNARY_OP(AsinhOp, std::asinh(x))
PF_FLOAT_UNARY_OP(AcoshOp, std::acosh(x))
PF_FLOAT_UNARY_OP(AtanhOp, std::atanh(x))
PF_FLOAT_UNARY_OP(SigmoidOp, fast_sigmoid(x))
PF_FLOAT_UNARY_OP(ErfOp, fast_erf(x))
PF_FLOAT_UNARY_OP(ErfcOp, std::erfc(x))
PF_FLOAT_UNARY_OP(ErfinvOp, erfinv(x))
PF_FLOAT_UNARY_OP(ReciprocalOp, C(1) / x)
PF_FLOAT_UNARY_OP(SiluOp, x / (C(1) + fast_exp(-x)))
PF_FLOAT_UNARY_OP(MishOp, x * std::tanh(std::log1p(std::exp(x))))
PF_FLOAT_UNARY_OP(HardswishOp, x * std::min(std::max(x + C(3), C(0)), C(6)) / C(6))
PF_FLOAT_UNARY_OP(HardsigmoidOp, std::min(std::max(x + C(3), C(0)), C(6)) / C(6))
PF_FLOAT_UNARY_OP(FracOp, x - std::trunc(x))
#undef PF_FLOAT_UNARY_OP

// ---- activations with attributes -------------------------------------------------------------

template <typename T>
struct GeluOp : OpBase<T> {
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;
  bool tanh_approx;
  explicit GeluOp(const KernelContext& ctx) : OpBase<T>(ctx) {
    const std::string approx = ctx.attrs.has("approximate") ? ctx.attr<std::string>("approximate") : "none";
    PF_CHECK_T(approx == "none" || approx == "tanh", ValueError, "gelu: approximate must be 'none' or 'tanh', got '",
               approx, "'");
    tanh_approx = approx == "tanh";
  }
  C operator()(C x) const {
    if constexpr (std::is_same_v<C, float>) {
      return tanh_approx ? vec::gelu_tanh(x) : vec::gelu(x);
    } else {
      if (tanh_approx) {
        const C beta = C(0.7978845608028654);  // sqrt(2/pi)
        const C kappa = C(0.044715);
        return C(0.5) * x * (C(1) + std::tanh(beta * (x + kappa * (x * x * x))));
      }
      return x * C(0.5) * (C(1) + std::erf(x * C(0.7071067811865476)));  // x * Phi(x)
    }
  }
};

template <typename T>
struct SoftplusOp : OpBase<T> {
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;
  C beta, threshold;
  explicit SoftplusOp(const KernelContext& ctx)
      : OpBase<T>(ctx), beta(static_cast<C>(ctx.attr<double>("beta"))), threshold(static_cast<C>(ctx.attr<double>("threshold"))) {}
  // Above the threshold softplus is x to within rounding; PyTorch returns x there.
  C operator()(C x) const { return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta; }
};

template <typename T>
struct LeakyReluOp : OpBase<T> {
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;
  C slope;
  explicit LeakyReluOp(const KernelContext& ctx) : OpBase<T>(ctx), slope(static_cast<C>(ctx.attr<double>("negative_slope"))) {}
  C operator()(C x) const { return x > C(0) ? x : x * slope; }
};

template <typename T>
struct EluOp : OpBase<T> {
  using C = opmath_t<T>;
  static constexpr bool supported = is_float_v<T>;
  C neg_coef, pos_coef, input_scale;
  explicit EluOp(const KernelContext& ctx)
      : OpBase<T>(ctx),
        neg_coef(static_cast<C>(ctx.attr<double>("alpha") * ctx.attr<double>("scale"))),
        pos_coef(static_cast<C>(ctx.attr<double>("scale"))),
        input_scale(static_cast<C>(ctx.attr<double>("input_scale"))) {}
  C operator()(C x) const { return x <= C(0) ? std::expm1(x * input_scale) * neg_coef : x * pos_coef; }
};

// ---- any dtype ---------------------------------------------------------------------------------

template <typename T>
struct NegOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = !std::is_same_v<T, bool>;
  C operator()(C x) const {
    if constexpr (is_int_v<T>) return wrap_sub(C(0), x);
    else return -x;
  }
};

template <typename T>
struct AbsOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = !std::is_same_v<T, bool>;
  C operator()(C x) const {
    if constexpr (is_float_v<T>) return std::abs(x);
    else if constexpr (std::is_signed_v<T>) return x < 0 ? wrap_sub(C(0), x) : x;  // abs(INT_MIN) wraps
    else return x;
  }
};

template <typename T>
struct SquareOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = true;
  C operator()(C x) const {
    if constexpr (std::is_same_v<T, bool>) return x;
    else if constexpr (is_int_v<T>) return wrap_mul(x, x);
    else return x * x;
  }
};

template <typename T>
struct SignOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = true;
  C operator()(C x) const {
    if constexpr (std::is_same_v<T, bool>) return x;
    else return static_cast<C>((C(0) < x) - (x < C(0)));  // NaN -> 0, as PyTorch
  }
};

template <typename T>
struct ReluOp : OpBase<T> {
  using OpBase<T>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = !std::is_same_v<T, bool>;
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < C(0) ? C(0) : x;  // keeps NaN and -0.0, as clamp_min does
  }
};

// floor/ceil/round/trunc: identity on integers.
#define PF_ROUNDING_OP(Name, fn)                                     \
  template <typename T>                                              \
  struct Name : OpBase<T> {                                          \
    using OpBase<T>::OpBase;                                         \
    using C = opmath_t<T>;                                           \
    static constexpr bool supported = !std::is_same_v<T, bool>;      \
    C operator()(C x) const {                                        \
      if constexpr (is_float_v<T>) return fn(x);                     \
      else return x;                                                 \
    }                                                                \
  };
PF_ROUNDING_OP(FloorOp, std::floor)
PF_ROUNDING_OP(CeilOp, std::ceil)
PF_ROUNDING_OP(RoundOp, std::nearbyint)  // half to even under the default rounding mode
PF_ROUNDING_OP(TruncOp, std::trunc)
#undef PF_ROUNDING_OP

// ---- predicates (bool output) and bitwise_not ---------------------------------------------

template <typename T>
struct LogicalNotOp : OpBase<T, bool> {
  using OpBase<T, bool>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = true;
  bool operator()(C x) const { return x == C(0); }
};

template <typename T>
struct IsnanOp : OpBase<T, bool> {
  using OpBase<T, bool>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = true;
  bool operator()(C x) const {
    if constexpr (is_float_v<T>) return x != x;
    else return false;
  }
};

template <typename T>
struct IsinfOp : OpBase<T, bool> {
  using OpBase<T, bool>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = true;
  bool operator()(C x) const {
    if constexpr (is_float_v<T>) return std::abs(x) == std::numeric_limits<C>::infinity();
    else return false;
  }
};

template <typename T>
struct IsfiniteOp : OpBase<T, bool> {
  using OpBase<T, bool>::OpBase;
  using C = opmath_t<T>;
  static constexpr bool supported = true;
  bool operator()(C x) const {
    if constexpr (is_float_v<T>) return std::abs(x) < std::numeric_limits<C>::infinity();  // false for NaN
    else return true;
  }
};

template <typename T>
struct BitwiseNotOp : OpBase<T> {
  using OpBase<T>::OpBase;
  static constexpr bool supported = std::is_integral_v<T>;
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) return !x;
    else return static_cast<T>(~x);
  }
};

// ---- float32 fast paths -----------------------------------------------------------------------

// Dense float32 kernels of the vec_math.h functions: the loop compiled for AVX-512 (x86-64-v4:
// 16 lanes; 1.5-1.8x the AVX2 clone's speed here), AVX2 + FMA (x86-64-v3: 8 lanes, and the
// polynomial steps fuse) and the baseline (SSE2: 4 lanes); the loader picks the clone for the
// CPU it runs on. All stay within vec_math.h's ulp bounds (tests/cpp/cpu/test_vec_math.cpp
// checks the kernel on whatever the test machine runs).
using DenseF32Fn = void (*)(const float*, float*, int64_t);
#define PF_DENSE_F32(name, fn)                                                                \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void name( \
      const float* in, float* out, int64_t n) {                                               \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) out[i] = fn(in[i]);                   \
  }
PF_DENSE_F32(dense_exp_f32, vec::exp)
PF_DENSE_F32(dense_log_f32, vec::log)
PF_DENSE_F32(dense_tanh_f32, vec::tanh)
PF_DENSE_F32(dense_sigmoid_f32, vec::sigmoid)
PF_DENSE_F32(dense_silu_f32, vec::silu)
PF_DENSE_F32(dense_erf_f32, vec::erf)
PF_DENSE_F32(dense_gelu_f32, vec::gelu)
PF_DENSE_F32(dense_gelu_tanh_f32, vec::gelu_tanh)
#undef PF_DENSE_F32

// The dense float32 kernel for a call of OpT, or nullptr (gelu's depends on its attribute).
template <template <typename> class OpT>
DenseF32Fn dense_f32(const KernelContext&) { return nullptr; }
template <> DenseF32Fn dense_f32<ExpOp>(const KernelContext&) { return dense_exp_f32; }
template <> DenseF32Fn dense_f32<LogOp>(const KernelContext&) { return dense_log_f32; }
template <> DenseF32Fn dense_f32<TanhOp>(const KernelContext&) { return dense_tanh_f32; }
template <> DenseF32Fn dense_f32<SigmoidOp>(const KernelContext&) { return dense_sigmoid_f32; }
template <> DenseF32Fn dense_f32<SiluOp>(const KernelContext&) { return dense_silu_f32; }
template <> DenseF32Fn dense_f32<ErfOp>(const KernelContext&) { return dense_erf_f32; }
template <> DenseF32Fn dense_f32<GeluOp>(const KernelContext& ctx) {
  return GeluOp<float>(ctx).tanh_approx ? dense_gelu_tanh_f32 : dense_gelu_f32;
}

// Runs fn over a and out when both are dense with the same layout (element i of one is element
// i of the other in memory order); false otherwise. float16/bfloat16 run through float32 blocks
// (what their functors compute in; the generic loop's struct stores kept the larger functions
// scalar, 8x slower than float32).
bool run_dense_f32(DenseF32Fn fn, const Tensor& a, const Tensor& out) {
  const DType dt = a.dtype();
  if (out.dtype() != dt || a.strides() != out.strides() || !a.is_non_overlapping_and_dense() ||
      !out.is_non_overlapping_and_dense())
    return false;
  if (dt == DType::Float32) {
    const float* in = a.data<float>();
    float* o = out.data<float>();
    parallel_for(a.numel(), kGrainSize, [&](int64_t b, int64_t e) { fn(in + b, o + b, e - b); });
    return true;
  }
  if (dt != DType::BFloat16 && dt != DType::Float16) return false;
  const auto* in = static_cast<const uint16_t*>(a.data_ptr());
  auto* o = static_cast<uint16_t*>(out.data_ptr());
  const bool bf16 = dt == DType::BFloat16;
  parallel_for(a.numel(), kGrainSize, [&](int64_t b, int64_t e) {
    constexpr int64_t kBlock = 1024;
    alignas(64) float buf[kBlock];
    for (int64_t i = b; i < e; i += kBlock) {
      const int64_t m = std::min(kBlock, e - i);
      bf16 ? widen_16bit<BFloat16>(in + i, buf, m) : widen_16bit<Half>(in + i, buf, m);
      fn(buf, buf, m);
      bf16 ? narrow_16bit<BFloat16>(buf, o + i, m) : narrow_16bit<Half>(buf, o + i, m);
    }
  });
  return true;
}

// ---- the generic kernel ----------------------------------------------------------------------

template <template <typename> class OpT>
void unary_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  if (const DenseF32Fn fn = dense_f32<OpT>(ctx); fn != nullptr && run_dense_f32(fn, a, out)) return;
  dispatch_supported<OpT>(ctx, a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Op = OpT<T>;
    using Out = typename Op::out_t;
    using C = opmath_t<T>;
    PF_CHECK(out.dtype() == cpp_dtype<Out>::value, "cpu '", ctx.op.name, "' kernel writes ",
             dtype_name(cpp_dtype<Out>::value), " but the output is ", dtype_name(out.dtype()));
    const Op op(ctx);
    elementwise<Out, T>(out, {&a}, [op](T x) { return convert<Out>(op(static_cast<C>(x))); });
  });
}

#define PF_REGISTER_UNARY(name, Op) register_supported<Op>(reg, name, unary_kernel<Op>)

}  // namespace

void register_unary_kernels(Registrar& reg) {
  PF_REGISTER_UNARY("gelu", GeluOp);
  PF_REGISTER_UNARY("softplus", SoftplusOp);
  PF_REGISTER_UNARY("leaky_relu", LeakyReluOp);
  PF_REGISTER_UNARY("elu", EluOp);
  // Every other unary op of the definitions (core/opdefs/elementwise.yaml): its functor is
  // named after it (erfinv -> ErfinvOp).
#define PF_X(name, Camel, dtypes, bool_out) PF_REGISTER_UNARY(name, Camel##Op);
  PF_OPDEFS_UNARY_FLOAT_KERNELS(PF_X)
  PF_OPDEFS_UNARY_OTHER_KERNELS(PF_X)
#undef PF_X
}

}  // namespace plugflow::cpu
