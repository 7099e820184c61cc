// Unary elementwise ops on any dtype (docs/kernels.md: neg abs square sign relu floor ceil
// round trunc, logical_not, bitwise_not, isnan isinf isfinite; frac is in unary_math.cu).
#include "dmath.cuh"
#include "opdefs.h"
#include "unary.cuh"

namespace plugflow::cuda {
namespace {

// Integer results wrap like the CPU plugin's (abs(INT_MIN) == INT_MIN).
struct NegFn {
  template <typename C> PF_DEVICE C operator()(C x) const {
    if constexpr (std::is_integral_v<C>) return wrap_sub(C(0), x);
    else return -x;
  }
};
struct AbsFn {
  template <typename C> PF_DEVICE C operator()(C x) const {
    if constexpr (is_float_v<C>) return dm::fabs(x);
    else if constexpr (std::is_signed_v<C>) return x < 0 ? wrap_sub(C(0), x) : x;
    else return x;
  }
};
struct SquareFn {
  template <typename C> PF_DEVICE C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool>) return x;
    else if constexpr (std::is_integral_v<C>) return wrap_mul(x, x);
    else return x * x;
  }
};
struct SignFn {
  template <typename C> PF_DEVICE C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool>) return x;
    else if constexpr (std::is_unsigned_v<C>) return C(x != C(0));
    else return C((C(0) < x) - (x < C(0)));  // NaN gives 0, as in PyTorch
  }
};
struct ReluFn {
  template <typename C> PF_DEVICE C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) return x;
    else return x < C(0) ? C(0) : x;  // keeps NaN and -0.0, as clamp_min does
  }
};
// Rounding is the identity on integers.
struct FloorFn {
  template <typename C> PF_DEVICE C operator()(C x) const {
    if constexpr (is_float_v<C>) return dm::floor(x);
    else return x;
  }
};
struct CeilFn {
  template <typename C> PF_DEVICE C operator()(C x) const {
    if constexpr (is_float_v<C>) return dm::ceil(x);
    else return x;
  }
};
struct RoundFn {  // half to even
  template <typename C> PF_DEVICE C operator()(C x) const {
    if constexpr (is_float_v<C>) return dm::nearbyint(x);
    else return x;
  }
};
struct TruncFn {
  template <typename C> PF_DEVICE C operator()(C x) const {
    if constexpr (is_float_v<C>) return dm::trunc(x);
    else return x;
  }
};
struct LogicalNotFn {
  template <typename C> PF_DEVICE bool operator()(C x) const { return x == C(0); }
};
struct BitwiseNotFn {
  template <typename C> PF_DEVICE C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool>) return !x;
    else return C(~x);
  }
};
struct IsnanFn {
  template <typename C> PF_DEVICE bool operator()(C x) const { return dm::isnan(x); }
};
struct IsinfFn {
  template <typename C> PF_DEVICE bool operator()(C x) const {
    if constexpr (is_float_v<C>) return x == dm::inf<C>() || x == -dm::inf<C>();
    else return false;
  }
};
struct IsfiniteFn {
  template <typename C> PF_DEVICE bool operator()(C x) const {
    if constexpr (is_float_v<C>) return !dm::isnan(x) && x != dm::inf<C>() && x != -dm::inf<C>();
    else return true;
  }
};

}  // namespace

std::vector<KernelDef> unary_kernels() {
  std::vector<KernelDef> defs = {
  // The other unary ops of the definitions (core/opdefs/elementwise.yaml): each functor is
  // named after its op (bitwise_not -> BitwiseNotFn).
#define PF_X(name, Camel, dtypes, bool_out) unary_def<Stateless<Camel##Fn, dtypes##Types, bool_out>>(name),
      PF_OPDEFS_UNARY_OTHER_KERNELS(PF_X)
#undef PF_X
  };
  for (auto& d : unary_math_kernels()) defs.push_back(std::move(d));
  return defs;
}

}  // namespace plugflow::cuda
