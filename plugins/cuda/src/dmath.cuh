// Device math overloaded on float and double, so a functor written once for opmath type C
// calls expf for float and exp for double (never silently promoting float to double).
#pragma once
#include <cuda_runtime.h>

#include <limits>

namespace plugflow::cuda::dm {

#define PF_DM_UNARY(name, fname)                                                       \
  __device__ __forceinline__ float name(float x) { return ::fname(x); }                \
  __device__ __forceinline__ double name(double x) { return ::name(x); }

PF_DM_UNARY(exp, expf)
PF_DM_UNARY(exp2, exp2f)
PF_DM_UNARY(expm1, expm1f)
PF_DM_UNARY(log, logf)
PF_DM_UNARY(log2, log2f)
PF_DM_UNARY(log10, log10f)
PF_DM_UNARY(log1p, log1pf)
PF_DM_UNARY(sqrt, sqrtf)
PF_DM_UNARY(sin, sinf)
PF_DM_UNARY(cos, cosf)
PF_DM_UNARY(tan, tanf)
PF_DM_UNARY(asin, asinf)
PF_DM_UNARY(acos, acosf)
PF_DM_UNARY(atan, atanf)
PF_DM_UNARY(sinh, sinhf)
PF_DM_UNARY(cosh, coshf)
PF_DM_UNARY(tanh, tanhf)
PF_DM_UNARY(asinh, asinhf)
PF_DM_UNARY(acosh, acoshf)
PF_DM_UNARY(atanh, atanhf)
PF_DM_UNARY(erf, erff)
PF_DM_UNARY(erfc, erfcf)
PF_DM_UNARY(erfinv, erfinvf)
PF_DM_UNARY(floor, floorf)
PF_DM_UNARY(ceil, ceilf)
PF_DM_UNARY(trunc, truncf)
PF_DM_UNARY(nearbyint, nearbyintf)  // round half to even, like std::nearbyint
PF_DM_UNARY(fabs, fabsf)
#undef PF_DM_UNARY

#define PF_DM_BINARY(name, fname)                                                      \
  __device__ __forceinline__ float name(float a, float b) { return ::fname(a, b); }     \
  __device__ __forceinline__ double name(double a, double b) { return ::name(a, b); }

PF_DM_BINARY(pow, powf)
PF_DM_BINARY(fmod, fmodf)
PF_DM_BINARY(atan2, atan2f)
PF_DM_BINARY(copysign, copysignf)
PF_DM_BINARY(hypot, hypotf)
#undef PF_DM_BINARY

// Multiply and add rounded separately (never fused into an FMA), for generators whose
// values must match the CPU plugin bit for bit (arange, linspace, random).
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }

template <typename C>
__device__ __forceinline__ bool isnan(C x) {
  return x != x;  // false for integers
}
template <typename C>
__device__ __forceinline__ C inf() {
  return std::numeric_limits<C>::infinity();
}

}  // namespace plugflow::cuda::dm
