// Element types on the device. plugflow's Half/BFloat16 have host-only conversions, so
// kernels store them as CUDA's __half/__nv_bfloat16 (same bits) and compute in float
// ("opmath", as PyTorch does); every other type computes in itself.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <climits>
#include <type_traits>

#include "plugflow/dtype.h"
#include "plugflow/scalar.h"
#include "scalar_math.h"

// Device functions of the kernel families (functors, helpers): always inlined.
#define PF_DEVICE __device__ __forceinline__

namespace plugflow::cuda {

template <typename T> struct DevTypeOf { using type = T; };
template <> struct DevTypeOf<Half> { using type = __half; };
template <> struct DevTypeOf<BFloat16> { using type = __nv_bfloat16; };
// The device storage type of plugflow's C++ element type T.
template <typename T> using dev_t = typename DevTypeOf<T>::type;

template <typename D>
inline constexpr bool is_reduced_float_v = std::is_same_v<D, __half> || std::is_same_v<D, __nv_bfloat16>;
template <typename D>
inline constexpr bool is_float_v = is_reduced_float_v<D> || std::is_floating_point_v<D>;

template <typename D> using opmath_t = std::conditional_t<is_reduced_float_v<D>, float, D>;

template <typename D>
__host__ __device__ __forceinline__ opmath_t<D> to_opmath(D v) {
  if constexpr (is_reduced_float_v<D>) return static_cast<float>(v);
  else return v;
}

// Value conversion, identical to the CPU plugin's (so both devices give the same bits):
// to bool is `!= 0`; to f16/bf16 rounds from float (a double goes through float first, as
// c10::Half does); floating to integer truncates toward zero, where NaN and values outside
// the range give the x86 "integer indefinite" value INT_MIN (int64 for int64, int32 then
// wrapped for the narrower types, through int64 for uint8 like c10) instead of C++'s
// undefined behaviour, which differs between GPU (saturating) and CPU.
template <typename To, typename From>
__host__ __device__ __forceinline__ To cast_to(From v) {
  if constexpr (is_reduced_float_v<From>) {
    return cast_to<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return scalar_math::float_to_int<To>(static_cast<double>(v));
  } else {
    return static_cast<To>(v);
  }
}

// A Scalar attribute as device type D, with the same conversions as a tensor cast (and as
// the CPU plugin's scalar_to). Host only.
template <typename D>
D scalar_to(const Scalar& v) {
  if (v.is_floating()) return cast_to<D>(v.to_double());
  if (v.is_bool()) return cast_to<D>(v.to_bool());
  return cast_to<D>(v.to_int());
}

// Two's-complement wrapping integer arithmetic (plugins/common/scalar_math.h, shared with the
// CPU plugin).
using scalar_math::wrap_add;
using scalar_math::wrap_mul;
using scalar_math::wrap_sub;

// Type families, on plugflow's C++ element types (bool, int8_t, ..., Half, float, ...).
template <typename T> inline constexpr bool is_bool_v = std::is_same_v<T, bool>;
template <typename T> inline constexpr bool is_floating_v =
    std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || std::is_floating_point_v<T>;
template <typename T> inline constexpr bool is_int_v = std::is_integral_v<T> && !is_bool_v<T>;
template <typename T> inline constexpr bool is_numeric_v = !is_bool_v<T>;

}  // namespace plugflow::cuda
