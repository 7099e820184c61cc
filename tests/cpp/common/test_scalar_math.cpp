// The scalar math the CPU and CUDA kernels share (plugins/common/scalar_math.h), on the CPU:
// properties on random operands (the floor division and modulo rebuild the dividend, the
// remainder has the divisor's sign and is smaller than it), wrapping against wider arithmetic,
// and the float-to-integer conversion's edge values.
#include "scalar_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace {

namespace sm = plugflow::scalar_math;

template <typename T>
void check_int_division(std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> any(std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
  for (int i = 0; i < 20000; ++i) {
    const T a = static_cast<T>(any(rng));
    T b = static_cast<T>(any(rng) % 50);
    if (i % 3 == 0) b = static_cast<T>(any(rng));  // large divisors too
    if (b == 0) continue;
    // Exact references in wider arithmetic (a / b for T = int64 only overflows at MIN / -1).
    const __int128 A = a, B = b;
    const __int128 q_floor = sm::int_div_floor(a, b), r_floor = sm::int_mod_floor(a, b);
    const __int128 q_trunc = sm::int_div_trunc(a, b), r_trunc = sm::int_mod_trunc(a, b);
    SCOPED_TRACE(std::to_string(static_cast<int64_t>(a)) + " / " + std::to_string(static_cast<int64_t>(b)));
    // The remainders: |r| < |b|, floor's with b's sign, trunc's with a's.
    EXPECT_LT(r_floor < 0 ? -r_floor : r_floor, B < 0 ? -B : B);
    EXPECT_TRUE(r_floor == 0 || (r_floor < 0) == (B < 0));
    EXPECT_TRUE(r_trunc == 0 || (r_trunc < 0) == (A < 0));
    // The quotients rebuild a, wrapped to T where the true quotient does not fit (MIN / -1).
    const __int128 true_floor = (A - (A % B + B) % B) / B;  // mathematical floor(a / b)
    EXPECT_EQ(static_cast<T>(q_floor), static_cast<T>(true_floor));
    EXPECT_EQ(static_cast<T>(q_trunc), static_cast<T>(A / B));
    EXPECT_EQ(r_floor, A - true_floor * B);
    EXPECT_EQ(r_trunc, A - (A / B) * B);
  }
}

TEST(ScalarMath, IntegerFloorAndTruncDivision) {
  std::mt19937_64 rng(7);
  check_int_division<int8_t>(rng);
  check_int_division<int16_t>(rng);
  check_int_division<int32_t>(rng);
  check_int_division<int64_t>(rng);
  check_int_division<uint8_t>(rng);
  // The quotient that traps on x86 wraps instead.
  EXPECT_EQ(sm::int_div_trunc<int64_t>(INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(sm::int_div_floor<int32_t>(INT32_MIN, -1), INT32_MIN);
  EXPECT_EQ(sm::int_mod_floor<int64_t>(INT64_MIN, -1), 0);
}

TEST(ScalarMath, WrappingArithmeticMatchesModularArithmetic) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 10000; ++i) {
    const int64_t a = static_cast<int64_t>(rng()), b = static_cast<int64_t>(rng());
    const auto mod64 = [](__int128 v) { return static_cast<int64_t>(static_cast<uint64_t>(v)); };
    EXPECT_EQ(sm::wrap_add(a, b), mod64(static_cast<__int128>(a) + b));
    EXPECT_EQ(sm::wrap_sub(a, b), mod64(static_cast<__int128>(a) - b));
    EXPECT_EQ(sm::wrap_mul(a, b), mod64(static_cast<__int128>(a) * b));
    const auto a16 = static_cast<uint16_t>(a), b16 = static_cast<uint16_t>(b);
    EXPECT_EQ(sm::wrap_mul(a16, b16), static_cast<uint16_t>(static_cast<uint64_t>(a16) * b16));
    const auto a8 = static_cast<int8_t>(a), b8 = static_cast<int8_t>(b);
    EXPECT_EQ(sm::wrap_add(a8, b8), static_cast<int8_t>(static_cast<uint8_t>(a8 + b8)));
  }
}

template <typename C>
void check_float_division(std::mt19937_64& rng) {
  std::uniform_real_distribution<C> dividend(-1000, 1000), divisor(-50, 50);
  for (int i = 0; i < 20000; ++i) {
    C a = dividend(rng), b = divisor(rng);
    if (i % 4 == 0) a = std::round(a);  // exact multiples and integer quotients
    if (i % 5 == 0) b = std::round(b);
    if (b == 0) continue;
    SCOPED_TRACE(std::to_string(a) + " / " + std::to_string(b));
    const C q = sm::float_div_floor(a, b), r = sm::float_mod_floor(a, b);
    // The floor of the exact quotient: q <= a / b < q + 1, checked in long double (the product
    // of two values of C is exact there).
    const long double A = a, B = b, Q = q;
    EXPECT_EQ(q, std::floor(q));
    if (B > 0) {
      EXPECT_LE(Q * B, A);
      EXPECT_GT((Q + 1) * B, A);
    } else {
      EXPECT_GE(Q * B, A);
      EXPECT_LT((Q + 1) * B, A);
    }
    // The remainder has b's sign, is smaller than b, and is what torch.remainder defines.
    EXPECT_TRUE(r == 0 || (r < 0) == (b < 0));
    EXPECT_LT(std::abs(r), std::abs(b));
    const C trunc_mod = std::fmod(a, b);
    EXPECT_EQ(r, trunc_mod != 0 && (trunc_mod < 0) != (b < 0) ? trunc_mod + b : trunc_mod);
  }
}

TEST(ScalarMath, FloatFloorDivisionAndRemainder) {
  std::mt19937_64 rng(13);
  check_float_division<float>(rng);
  check_float_division<double>(rng);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(sm::float_div_floor(1.0, 0.0), inf);  // IEEE division by zero
  EXPECT_EQ(sm::float_div_floor(-1.0, 0.0), -inf);
  EXPECT_TRUE(std::isnan(sm::float_div_floor(0.0, 0.0)));
  EXPECT_TRUE(std::signbit(sm::float_div_floor(-0.0, 3.0)));  // a zero quotient keeps the sign
  EXPECT_TRUE(std::isnan(sm::float_mod_floor(1.0, 0.0)));
}

TEST(ScalarMath, FloatToIntegerWithX86Results) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> d(-1e6, 1e6);
  for (int i = 0; i < 10000; ++i) {
    const double v = d(rng);
    EXPECT_EQ(sm::float_to_int<int64_t>(v), static_cast<int64_t>(std::trunc(v)));
    EXPECT_EQ(sm::float_to_int<int32_t>(v), static_cast<int32_t>(std::trunc(v)));
    EXPECT_EQ(sm::float_to_int<int16_t>(v), static_cast<int16_t>(static_cast<int32_t>(std::trunc(v))));
    EXPECT_EQ(sm::float_to_int<uint8_t>(v), static_cast<uint8_t>(static_cast<int64_t>(std::trunc(v))));
  }
  const double nan = std::nan("");
  EXPECT_EQ(sm::float_to_int<int64_t>(nan), INT64_MIN);
  EXPECT_EQ(sm::float_to_int<int64_t>(9223372036854775808.0), INT64_MIN);  // 2^63: out of range
  EXPECT_EQ(sm::float_to_int<int32_t>(2147483647.9), INT32_MAX);
  EXPECT_EQ(sm::float_to_int<int32_t>(2147483648.0), INT32_MIN);
  EXPECT_EQ(sm::float_to_int<int32_t>(-2147483648.9), INT32_MIN);
  EXPECT_EQ(sm::float_to_int<int8_t>(nan), 0);  // INT32_MIN wrapped to 8 bits
  EXPECT_EQ(sm::float_to_int<uint8_t>(-1.5), 255);
}

TEST(ScalarMath, BitCopy) {
  std::mt19937_64 rng(19);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    const float f = sm::bit_copy<float>(bits);
    EXPECT_EQ(sm::bit_copy<uint32_t>(f), bits);  // every pattern, NaN payloads included
  }
  EXPECT_EQ(sm::bit_copy<uint32_t>(1.0f), 0x3f800000u);
  EXPECT_EQ(sm::bit_copy<uint64_t>(-0.0), uint64_t{1} << 63);
}

}  // namespace
