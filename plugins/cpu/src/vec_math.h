// Branch-free float32 exp, log, tanh, sigmoid, erf and the activations built on them (silu,
// gelu) that the compiler vectorizes inside the elementwise loops' `omp simd` (libm's scalar
// calls would stop the vectorizer).
//
// Every function is straight-line code on float/int32 values (bitwise selects instead of
// branches, bit casts instead of frexp/ldexp), after Cephes' single-precision algorithms: range
// reduction, a short minimax polynomial, and an exact power-of-two scaling. Accuracy against
// the correctly rounded result (libm in double; tests/cpp/cpu/test_vec_math.cpp sweeps float
// bit patterns across all exponents, with and without FMA): exp, log and tanh within 1 ulp,
// sigmoid and erf within 2, gelu within 8 down to -3 and 5e-6 relative below (see gelu);
// NaN, +-inf, +-0, subnormals, overflow and underflow as libm.
#pragma once
#include <bit>
#include <cstdint>
#include <limits>

// Always inlined: a call inside a loop body is an opaque statement to the vectorizer, and
// GCC's inliner gives up on these in large translation units.
#define PF_VEC_INLINE inline __attribute__((always_inline))

namespace plugflow::cpu::vec {

PF_VEC_INLINE float as_float(int32_t i) { return std::bit_cast<float>(i); }
PF_VEC_INLINE int32_t as_int(float f) { return std::bit_cast<int32_t>(f); }

// NaN test on the bits: an integer compare, which the vectorizer if-converts (GCC does not
// if-convert the unordered float compare behind x != x).
PF_VEC_INLINE bool is_nan(float x) { return (as_int(x) & 0x7fffffff) > 0x7f800000; }

// c ? a : b, as bit operations. A float `?:` whose arms do arithmetic is a branch to GCC
// (under the default -ftrapping-math it will not evaluate both arms), which stops the
// vectorizer; this form has no branch.
PF_VEC_INLINE float select(bool c, float a, float b) {
  const int32_t m = -static_cast<int32_t>(c);
  return as_float((as_int(a) & m) | (as_int(b) & ~m));
}
PF_VEC_INLINE int32_t select(bool c, int32_t a, int32_t b) {
  const int32_t m = -static_cast<int32_t>(c);
  return (a & m) | (b & ~m);
}

// 2^k for integer-valued k in [-126, 127] (exponent bits).
PF_VEC_INLINE float pow2i(int32_t k) { return as_float((k + 127) << 23); }

// exp(x): x = k ln2 + r with |r| <= ln2/2 (Cody-Waite: ln2 split so k * kLn2Hi is exact),
// exp(r) by Cephes' degree-6 polynomial, then scaled by 2^k in two exact steps so results in
// the subnormal range round once, like libm.
PF_VEC_INLINE float exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const bool nan = is_nan(x);
  const float xc = select(nan, 0.0f, select(x < -104.0f, -104.0f, select(x > 89.0f, 89.0f, x)));
  const float kf = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - kf * kLn2Hi) - kf * kLn2Lo;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r2 + r) + 1.0f;
  const int32_t k = static_cast<int32_t>(kf);
  const int32_t k1 = k >> 1, k2 = k - k1;  // each in [-75, 64]
  const float y = (p * pow2i(k1)) * pow2i(k2);
  return select(nan, x, y);
}

// log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = log1p(m - 1) by Cephes' degree-9
// polynomial, plus e ln2 in two parts. Subnormals are scaled up first.
PF_VEC_INLINE float log(float x) {
  constexpr float kSqrtHalf = 0.707106781186547524f;
  const bool sub = x < std::numeric_limits<float>::min();
  const float xs = select(sub, x * 8388608.0f, x);  // 2^23
  const int32_t bits = as_int(xs);
  int32_t e = ((bits >> 23) & 0xff) - 126 - select(sub, 23, 0);
  float m = as_float((bits & 0x007fffff) | 0x3f000000);  // in [0.5, 1)
  const bool low = m < kSqrtHalf;
  e = e - select(low, 1, 0);
  m = select(low, m + m - 1.0f, m - 1.0f);
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = p * m - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  const float ef = static_cast<float>(e);
  float y = p * m * z;
  y = y + ef * -2.12194440e-4f;
  y = y - 0.5f * z;
  float r = m + y;
  r = r + ef * 0.693359375f;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  r = select(x == kInf, kInf, r);
  r = select(x == 0.0f, -kInf, r);
  r = select(x < 0.0f, kNaN, r);
  return select(is_nan(x), x, r);
}

// tanh(x): an odd polynomial for |x| < 0.625 (Cephes), else 1 - 2 / (exp(2|x|) + 1), which
// saturates to 1 by itself; the sign is x's.
PF_VEC_INLINE float tanh(float x) {
  const float a = as_float(as_int(x) & 0x7fffffff);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float e = exp(2.0f * select(a < 20.0f, a, 20.0f));
  const float big = 1.0f - 2.0f / (e + 1.0f);
  const float y = select(a < 0.625f, small, big);
  // tanh is odd: x's sign on the magnitude (this also keeps tanh(-0) = -0).
  const float signed_y = as_float((as_int(y) & 0x7fffffff) | (as_int(x) & int32_t(0x80000000u)));
  return select(is_nan(x), x, signed_y);
}

// sigmoid(x) = 1 / (1 + exp(-x)) for x >= 0 and exp(x) / (1 + exp(x)) below, so exp never
// overflows and the tail keeps full relative precision (the naive form loses up to 4 ulp where
// exp(-x) is large, and flushes to 0 below -88).
PF_VEC_INLINE float sigmoid(float x) {
  const float e = exp(-as_float(as_int(x) & 0x7fffffff));
  return select(x < 0.0f, e, 1.0f) / (1.0f + e);
}

// silu(x) = x / (1 + exp(-x)), PyTorch's formula (so silu(-inf) is NaN there too).
PF_VEC_INLINE float silu(float x) { return x / (1.0f + exp(-x)); }

// erf(a) for 0 <= a < 1: a + a * P(a^2), P a minimax fit of erf(a)/a - 1 (relative error
// 2.4e-9 with these float coefficients); the leading a is added last, so P's rounding costs a
// fraction of an ulp.
PF_VEC_INLINE float erf_small(float a) {
  const float z = a * a;
  float p = 7.853861461626366e-05f;
  p = p * z - 8.010193705558777e-04f;
  p = p * z + 5.188327748328447e-03f;
  p = p * z - 2.6853812858462334e-02f;
  p = p * z + 1.128358542919159e-01f;
  p = p * z - 3.761262595653534e-01f;
  p = p * z + 1.2837916612625122e-01f;
  return a + a * p;
}

// erfc(a) for a >= 1/2, given z = a^2 (gelu passes x^2/2, one rounding instead of two):
// exp(-z) * Q(t) with t = 2 / (2 + a), Q a minimax fit of erfcx(a) = exp(a^2) erfc(a) on
// [1/2, 10.25] (relative error 2.7e-9). Past 10.25 exp(-z) is 0, so no clamp is needed; +inf
// gives 0.
PF_VEC_INLINE float erfc_tail(float a, float z) {
  const float t = 2.0f / (2.0f + a);
  float q = -7.415631413459778e-02f;
  q = q * t + 3.5016879439353943e-01f;
  q = q * t - 6.090419292449951e-01f;
  q = q * t + 4.0445518493652344e-01f;
  q = q * t - 1.0695520788431168e-01f;
  q = q * t + 2.3498310148715973e-01f;
  q = q * t + 2.3492559790611267e-01f;
  q = q * t + 2.836281955242157e-01f;
  q = q * t + 2.8198137879371643e-01f;
  q = q * t + 3.662733661258244e-06f;
  return exp(-z) * q;
}

// erf(x): erf_small below 1, 1 - erfc(|x|) above (rounds to 1 past 3.92); odd in x, which keeps
// erf(-0) = -0. A NaN comes back as it is, sign included, as libm's erf (the tail's exp(-z)
// may flip a NaN's sign, depending on how the compiler evaluates it).
PF_VEC_INLINE float erf(float x) {
  const float a = as_float(as_int(x) & 0x7fffffff);
  const float y = select(a < 1.0f, erf_small(a), 1.0f - erfc_tail(a, a * a));
  return select(a == a, as_float(as_int(y) | (as_int(x) & int32_t(0x80000000u))), x);
}

// gelu(x) = x/2 (1 + erf(x / sqrt 2)). Below zero 1 + erf is formed as erfc(|x| / sqrt 2)
// directly rather than as 1 - (1 - erfc), so the negative tail keeps its relative precision
// (the textbook form cancels to 0 below about -5.5; what is left is the rounding of x^2/2,
// which exp turns into up to 5e-6 relative by -13); gelu(-inf) is NaN, as in PyTorch.
PF_VEC_INLINE float gelu(float x) {
  const float a = as_float(as_int(x) & 0x7fffffff) * 0.707106781186547524f;
  const float s = erf_small(a);
  const float tail = erfc_tail(a, 0.5f * x * x);
  // Below zero the tail takes over from 1/2 (1 - erf_small would cancel up to 3 bits by 1).
  const bool neg = x < 0.0f;
  const float c = select(neg, select(a < 0.5f, 1.0f - s, tail), select(a < 1.0f, 1.0f + s, 2.0f - tail));
  return (x * 0.5f) * c;
}

// gelu with approximate='tanh': PyTorch's formula and operation order.
PF_VEC_INLINE float gelu_tanh(float x) {
  constexpr float kBeta = 0.797884560802865355f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  return 0.5f * x * (1.0f + tanh(kBeta * (x + kKappa * (x * x * x))));
}

}  // namespace plugflow::cpu::vec
