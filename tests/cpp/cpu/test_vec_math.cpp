// The CPU plugin's branch-free float32 exp/log/tanh/sigmoid/erf and the activations on them
// (plugins/cpu/src/vec_math.h) against libm in double precision rounded to float: a sweep over
// float bit patterns (every 131st, so all exponents and signs are covered) plus the special
// values, with the ulp bounds the header promises; then the float32 kernels with the same bounds.
#include <cmath>
#include <cstring>
#include <limits>

#include "../../../plugins/cpu/src/vec_math.h"
#include "cpu_test_util.h"

namespace cpu_test {
namespace {

namespace vec = plugflow::cpu::vec;

int64_t ordered(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : i;
}

// Distance in units in the last place; NaN matches only NaN.
int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<int32_t>::max();
  if (a == b) return 0;  // also +0 == -0
  return std::llabs(ordered(a) - ordered(b));
}

template <typename F, typename R>
void expect_within(const char* name, F f, R ref, int64_t max_ulp) {
  int64_t worst = 0;
  float worst_x = 0;
  auto check = [&](float x) {
    const int64_t d = ulp_distance(f(x), ref(x));
    if (d > worst) {
      worst = d;
      worst_x = x;
    }
  };
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 131) {
    const uint32_t bits = static_cast<uint32_t>(u);
    float x;
    std::memcpy(&x, &bits, 4);
    check(x);
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e-45f, -1e-45f,
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  88.72283f, 88.7228394f, 88.72284f, 89.0f, -87.33655f, -103.97208f, -104.0f, -120.0f, 0.625f, -0.625f,
                  20.0f, -20.0f, 1.0f, -1.0f, 0.5f, -0.5f, 0.99999994f, -0.99999994f, 1.41421354f, -1.41421354f,
                  0.70710677f, -0.70710677f, 3.9192059f, 10.25f, -14.5f, -14.6f})
    check(x);
  EXPECT_LE(worst, max_ulp) << name << ": " << worst << " ulp at x = " << worst_x << " (got " << f(worst_x)
                            << ", expected " << ref(worst_x) << ")";
}

TEST(VecMath, ExpWithinOneUlp) {
  expect_within("exp", [](float x) { return vec::exp(x); },
                [](float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }, 1);
}

TEST(VecMath, LogWithinOneUlp) {
  expect_within("log", [](float x) { return vec::log(x); },
                [](float x) { return static_cast<float>(std::log(static_cast<double>(x))); }, 1);
}

TEST(VecMath, TanhWithinOneUlp) {
  expect_within("tanh", [](float x) { return vec::tanh(x); },
                [](float x) { return static_cast<float>(std::tanh(static_cast<double>(x))); }, 1);
}

TEST(VecMath, SigmoidWithinTwoUlp) {
  expect_within("sigmoid", [](float x) { return vec::sigmoid(x); },
                [](float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }, 2);
}

TEST(VecMath, ErfWithinTwoUlp) {
  expect_within("erf", [](float x) { return vec::erf(x); },
                [](float x) { return static_cast<float>(std::erf(static_cast<double>(x))); }, 2);
}

double gelu_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

// gelu: a few ulp where it is not tiny; below -3 (|gelu| < 0.007) the rounding of x^2/2 before
// exp grows with x^2, to 4e-6 relative at -13 (where gelu turns subnormal); the textbook
// 1 + erf(x / sqrt 2) would have no correct bits left below -5.5.
TEST(VecMath, GeluWithinBounds) {
  expect_within("gelu above -3", [](float x) { return vec::gelu(x); },
                [](float x) { return x < -3.0f ? vec::gelu(x) : static_cast<float>(gelu_ref(x)); }, 8);
  for (float x = -3.0f; x > -13.0f; x -= 1.2345e-4f) {
    const double ref = gelu_ref(x);
    ASSERT_NEAR(vec::gelu(x), ref, 5e-6 * std::abs(ref)) << "x = " << x;
  }
}

TEST(VecMath, SiluAndGeluTanhFollowTheirFormulas) {
  // Below -88 exp(-x) overflows and silu is -0 (PyTorch's formula does the same).
  expect_within("silu", [](float x) { return x < -88.0f ? 0.0f : vec::silu(x); },
                [](float x) {
                  const double d = x;
                  return x < -88.0f ? 0.0f : static_cast<float>(d / (1.0 + std::exp(-d)));
                },
                3);
  // gelu's tanh form cancels in 1 + tanh below zero exactly as PyTorch's does: compared where
  // it does not (x >= -1).
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  expect_within("gelu_tanh", [](float x) { return x < -1.0f ? 0.0f : vec::gelu_tanh(x); },
                [&](float x) {
                  const double d = x;
                  return x < -1.0f ? 0.0f : static_cast<float>(0.5 * d * (1.0 + std::tanh(k * (d + 0.044715 * d * d * d))));
                },
                4);
}

TEST(VecMath, SpecialValuesAsLibm) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(vec::exp(inf), inf);
  EXPECT_EQ(vec::exp(-inf), 0.0f);
  EXPECT_EQ(vec::exp(100.0f), inf);
  EXPECT_EQ(vec::exp(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(vec::exp(NAN)));
  EXPECT_EQ(vec::log(0.0f), -inf);
  EXPECT_EQ(vec::log(-0.0f), -inf);
  EXPECT_EQ(vec::log(inf), inf);
  EXPECT_TRUE(std::isnan(vec::log(-1.0f)));
  EXPECT_TRUE(std::isnan(vec::log(-inf)));
  EXPECT_TRUE(std::isnan(vec::log(NAN)));
  EXPECT_EQ(vec::log(1.0f), 0.0f);
  EXPECT_EQ(vec::tanh(inf), 1.0f);
  EXPECT_EQ(vec::tanh(-inf), -1.0f);
  EXPECT_TRUE(std::signbit(vec::tanh(-0.0f)));
  EXPECT_TRUE(std::isnan(vec::tanh(NAN)));
  EXPECT_EQ(vec::sigmoid(inf), 1.0f);
  EXPECT_EQ(vec::sigmoid(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(vec::sigmoid(NAN)));
  EXPECT_EQ(vec::erf(inf), 1.0f);
  EXPECT_EQ(vec::erf(-inf), -1.0f);
  EXPECT_TRUE(std::signbit(vec::erf(-0.0f)));
  EXPECT_EQ(vec::erf(0.0f), 0.0f);
  EXPECT_FALSE(std::signbit(vec::erf(0.0f)));
  EXPECT_TRUE(std::isnan(vec::erf(NAN)));
  // PyTorch: gelu(+inf) = inf, gelu(-inf) = nan (-inf * 0), silu(-inf) = nan (-inf / inf).
  EXPECT_EQ(vec::gelu(inf), inf);
  EXPECT_TRUE(std::isnan(vec::gelu(-inf)));
  EXPECT_TRUE(std::isnan(vec::gelu(NAN)));
  EXPECT_EQ(vec::gelu(-20.0f), 0.0f);
  EXPECT_EQ(vec::gelu_tanh(inf), inf);
  EXPECT_TRUE(std::isnan(vec::gelu_tanh(-inf)));
  EXPECT_TRUE(std::isnan(vec::gelu_tanh(NAN)));
  EXPECT_EQ(vec::silu(inf), inf);
  EXPECT_TRUE(std::isnan(vec::silu(-inf)));
  EXPECT_TRUE(std::isnan(vec::silu(NAN)));
}

// The kernels themselves (the clone this machine runs: AVX2 + FMA or baseline), on every
// 1031st float bit pattern, dense and strided.
TEST_F(CpuTest, VecMathKernelsStayWithinBounds) {
  const int64_t n = static_cast<int64_t>((uint64_t{1} << 32) / 1031) + 1;
  Tensor in = Tensor::empty({n}, DType::Float32, cpu());
  float* p = in.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(static_cast<uint64_t>(i) * 1031);
    std::memcpy(&p[i], &bits, 4);
  }
  struct Case {
    const char* op;
    double (*ref)(double);
    int64_t max_ulp;
    Attrs attrs = {};
    float min_x = -std::numeric_limits<float>::infinity();  // checked from here up
  };
  const Case cases[] = {{"exp", [](double x) { return std::exp(x); }, 1},
                        {"log", [](double x) { return std::log(x); }, 1},
                        {"tanh", [](double x) { return std::tanh(x); }, 1},
                        {"sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, 2},
                        {"erf", [](double x) { return std::erf(x); }, 2},
                        {"silu", [](double x) { return x / (1.0 + std::exp(-x)); }, 3, {}, -88.0f},
                        {"gelu", gelu_ref, 8, Attrs{{"approximate", std::string("none")}}, -3.0f},
                        {"gelu",
                         [](double x) {
                           return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
                         },
                         4, Attrs{{"approximate", std::string("tanh")}}, -1.0f}};
  // A strided view of the same values (every other element of a twice-as-long buffer).
  Tensor gapped_base = Tensor::empty({2 * n}, DType::Float32, cpu());
  Tensor gapped = Tensor::view_of(gapped_base.storage(), {n}, {2}, 0, DType::Float32);
  for (int64_t i = 0; i < n; ++i) gapped.data<float>()[2 * i] = p[i];
  for (const Case& c : cases) {
    for (const Tensor& x : {in, gapped}) {
      Tensor out = run(c.op, {x}, c.attrs)[0];
      int64_t worst = 0;
      float worst_x = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (p[i] < c.min_x) continue;
        const float expected = static_cast<float>(c.ref(static_cast<double>(p[i])));
        const int64_t d = ulp_distance(out.data<float>()[i], expected);
        if (d > worst) {
          worst = d;
          worst_x = p[i];
        }
      }
      EXPECT_LE(worst, c.max_ulp) << c.op << (x.is_contiguous() ? " dense" : " strided") << ": " << worst
                                  << " ulp at x = " << worst_x;
    }
  }
}

}  // namespace
}  // namespace cpu_test
