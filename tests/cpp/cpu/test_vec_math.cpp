// The CPU plugin's branch-free float32 exp/log/tanh/sigmoid (plugins/cpu/src/vec_math.h)
// against libm in double precision rounded to float: a sweep over float bit patterns (every
// 131st, so all exponents and signs are covered) plus the special values, with the ulp bounds
// the header promises; then the float32 exp/log/tanh/sigmoid kernels with the same bounds.
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
                  20.0f, -20.0f, 1.0f, -1.0f, 0.5f})
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
  };
  const Case cases[] = {{"exp", [](double x) { return std::exp(x); }, 1},
                        {"log", [](double x) { return std::log(x); }, 1},
                        {"tanh", [](double x) { return std::tanh(x); }, 1},
                        {"sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, 2}};
  // A strided view of the same values (every other element of a twice-as-long buffer).
  Tensor gapped_base = Tensor::empty({2 * n}, DType::Float32, cpu());
  Tensor gapped = Tensor::view_of(gapped_base.storage(), {n}, {2}, 0, DType::Float32);
  for (int64_t i = 0; i < n; ++i) gapped.data<float>()[2 * i] = p[i];
  for (const Case& c : cases) {
    for (const Tensor& x : {in, gapped}) {
      Tensor out = run(c.op, {x})[0];
      int64_t worst = 0;
      float worst_x = 0;
      for (int64_t i = 0; i < n; ++i) {
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
