// Scalar math that the CPU and CUDA kernels share, written once so that both devices give the
// same bits: two's-complement wrapping integer arithmetic, PyTorch's integer and floating
// division and modulo (truncating and flooring), the float-to-integer conversion with x86's
// results for NaN and out-of-range values, and bit copies between types of one size.
//
// Every function is __host__ __device__ under nvcc and plain inline under g++; the CPU
// plugin, the CUDA plugin's .cu files and tests/cpp/common/test_scalar_math.cpp include it.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define PF_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define PF_HOST_DEVICE_INLINE inline
#endif

namespace plugflow::scalar_math {

// ---- wrapping integer arithmetic (signed overflow is undefined in C++; tensors wrap) --------

template <typename T>
PF_HOST_DEVICE_INLINE T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T>
PF_HOST_DEVICE_INLINE T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <typename T>
PF_HOST_DEVICE_INLINE T wrap_mul(T a, T b) {
  // Small types promote to unsigned int: uint16 * uint16 would promote to int and overflow.
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

// ---- integer division and modulo (b != 0; the callers check or, on CUDA, leave it unspecified)

// Quotient truncated toward zero. b == -1 is answered by negation: INT_MIN / -1 traps on x86
// (SIGFPE) although the wrapped result is well defined.
template <typename T>
PF_HOST_DEVICE_INLINE T int_div_trunc(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return wrap_sub(T(0), a);
  }
  return static_cast<T>(a / b);
}
// Remainder with the sign of a (C++'s %, fmod's convention).
template <typename T>
PF_HOST_DEVICE_INLINE T int_mod_trunc(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return T(0);
  }
  return static_cast<T>(a % b);
}
// Python's //.
template <typename T>
PF_HOST_DEVICE_INLINE T int_div_floor(T a, T b) {
  const T q = int_div_trunc(a, b);
  if constexpr (std::is_signed_v<T>) {
    if (int_mod_trunc(a, b) != 0 && ((a < 0) != (b < 0))) return wrap_sub(q, T(1));
  }
  return q;
}
// Python's %: the sign of b.
template <typename T>
PF_HOST_DEVICE_INLINE T int_mod_floor(T a, T b) {
  const T r = int_mod_trunc(a, b);
  if constexpr (std::is_signed_v<T>) {
    if (r != 0 && ((r < 0) != (b < 0))) return wrap_add(r, b);
  }
  return r;
}

// ---- floating division and modulo (C: float or double) ---------------------------------------

// The libm functions for float and double, on the host and in device code.
PF_HOST_DEVICE_INLINE float fmod(float a, float b) {
#ifdef __CUDA_ARCH__
  return ::fmodf(a, b);
#else
  return std::fmod(a, b);
#endif
}
PF_HOST_DEVICE_INLINE double fmod(double a, double b) {
#ifdef __CUDA_ARCH__
  return ::fmod(a, b);
#else
  return std::fmod(a, b);
#endif
}
PF_HOST_DEVICE_INLINE float floor(float x) {
#ifdef __CUDA_ARCH__
  return ::floorf(x);
#else
  return std::floor(x);
#endif
}
PF_HOST_DEVICE_INLINE double floor(double x) {
#ifdef __CUDA_ARCH__
  return ::floor(x);
#else
  return std::floor(x);
#endif
}
PF_HOST_DEVICE_INLINE float copysign(float a, float b) {
#ifdef __CUDA_ARCH__
  return ::copysignf(a, b);
#else
  return std::copysign(a, b);
#endif
}
PF_HOST_DEVICE_INLINE double copysign(double a, double b) {
#ifdef __CUDA_ARCH__
  return ::copysign(a, b);
#else
  return std::copysign(a, b);
#endif
}

// PyTorch's div_floor_floating: the floor of the true quotient computed from fmod, exact where
// a / b rounds across an integer, and consistent with float_mod_floor.
template <typename C>
PF_HOST_DEVICE_INLINE C float_div_floor(C a, C b) {
  if (b == C(0)) return a / b;  // IEEE: +-inf or nan
  const C mod = scalar_math::fmod(a, b);
  C div = (a - mod) / b;
  if (mod != C(0) && (b < C(0)) != (mod < C(0))) div -= C(1);
  if (div == C(0)) return scalar_math::copysign(C(0), a / b);
  C floordiv = scalar_math::floor(div);
  if (div - floordiv > C(0.5)) floordiv += C(1);
  return floordiv;
}
// Python's % for floats (torch.remainder): the sign of b.
template <typename C>
PF_HOST_DEVICE_INLINE C float_mod_floor(C a, C b) {
  C mod = scalar_math::fmod(a, b);
  if (mod != C(0) && (b < C(0)) != (mod < C(0))) mod += b;
  return mod;
}

// One rounding of a * b + c (the fused multiply-add PyTorch's CPU kernels use for the ops below).
PF_HOST_DEVICE_INLINE float fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return ::fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
PF_HOST_DEVICE_INLINE double fma(double a, double b, double c) {
#ifdef __CUDA_ARCH__
  return ::fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// PyTorch 1.13's lerp: two formulas so that weight 0 and 1 give the end points exactly, the
// first for every weight below 0.5 (negative ones included: lerp(1, -inf, -4.68) = inf), each a
// fused multiply-add as PyTorch's vectorized CPU kernel computes it: one rounding, so float32
// and float64 results are PyTorch's bit for bit, and a product that would overflow on its own
// (bfloat16 ends near its largest value, weight 3.25) still gives the finite result.
// a - end is -(end - a) exactly (rounding to nearest is symmetric).
template <typename C>
PF_HOST_DEVICE_INLINE C lerp(C a, C end, C w) {
  return w < C(0.5) ? scalar_math::fma(w, end - a, a) : scalar_math::fma(a - end, C(1) - w, end);
}

// add / sub with alpha, a + alpha * b, as PyTorch's CPU kernel rounds it: one fused multiply-add
// (sub passes -alpha).
template <typename C>
PF_HOST_DEVICE_INLINE C add_scaled(C a, C alpha, C b) {
  return scalar_math::fma(alpha, b, a);
}

// addcmul's floating formula, self + value * t1 * t2, as PyTorch's CPU kernel rounds it: value *
// t1, then one fused multiply-add (float32 and float64 bit-identical to PyTorch's).
template <typename C>
PF_HOST_DEVICE_INLINE C addcmul(C self, C value, C t1, C t2) {
  return scalar_math::fma(value * t1, t2, self);
}

// ---- conversions ---------------------------------------------------------------------------------

// A floating value (as double) to an integer type with PyTorch's x86 results and no undefined
// behaviour: truncation toward zero; NaN and values outside the range give the "integer
// indefinite" value INT_MIN (int64's for int64; int32's, then wrapped, for the narrower signed
// types; through int64 for uint8, as c10 casts).
template <typename To>
PF_HOST_DEVICE_INLINE To float_to_int(double d) {
  static_assert(std::is_integral_v<To> && !std::is_same_v<To, bool>);
  if constexpr (std::is_same_v<To, int64_t>) {
    return (d >= -9223372036854775808.0 && d < 9223372036854775808.0) ? static_cast<int64_t>(d)
                                                                       : static_cast<int64_t>(INT64_MIN);
  } else if constexpr (std::is_same_v<To, uint8_t>) {
    return static_cast<uint8_t>(float_to_int<int64_t>(d));  // -1.5 -> 255
  } else {
    const int32_t i = (d > -2147483649.0 && d < 2147483648.0) ? static_cast<int32_t>(d) : static_cast<int32_t>(INT32_MIN);
    return static_cast<To>(i);  // C++20 narrowing is modular
  }
}

// The bits of `v` as a To of the same size (a float's pattern as an integer, a fill value as
// raw bits).
template <typename To, typename From>
PF_HOST_DEVICE_INLINE To bit_copy(const From& v) {
  static_assert(sizeof(To) == sizeof(From) && std::is_trivially_copyable_v<From>);
  To out;
#ifdef __CUDA_ARCH__
  ::memcpy(&out, &v, sizeof(To));
#else
  std::memcpy(&out, &v, sizeof(To));
#endif
  return out;
}

}  // namespace plugflow::scalar_math
