// uniform, normal, randint: element i follows docs/kernels.md's Philox formula exactly (so CPU
// and CUDA agree), streams depend on seed and offset only, strided outputs get the logical
// element's number, and the distributions look right.
#include <limits>

#include "cpu_test_util.h"
#include "plugflow/philox.h"

namespace cpu_test {
namespace {

using plugflow::Philox4x32;

constexpr int64_t kSeed = 1234567, kOffset = 40;

Attrs uniform_attrs(double lo, double hi, int64_t seed = kSeed, int64_t offset = kOffset) {
  return Attrs{{"low", lo}, {"high", hi}, {"seed", seed}, {"offset", offset}};
}

TEST_F(CpuTest, UniformFollowsPhilox) {
  const int64_t n = 100003;  // several threads
  for (DType dt : kFloatDTypes) {
    SCOPED_TRACE(dtype_str(dt));
    Tensor t = Tensor::empty({n}, dt, cpu());
    run_out("uniform", {}, uniform_attrs(-2, 3), {t});
    const std::vector<double> v = values(t);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double u = dt == DType::Float64 ? Philox4x32::uniform_double(kSeed, kOffset, i)
                                            : static_cast<double>(Philox4x32::uniform_float(kSeed, kOffset, i));
      ASSERT_EQ(v[i], representable(dt, -2 + 5 * u)) << "element " << i;
      ASSERT_GE(v[i], -2.0);
      ASSERT_LE(v[i], 3.0);
      sum += v[i];
    }
    EXPECT_NEAR(sum / n, 0.5, 0.02);  // mean of U(-2, 3); sd of the estimate ~0.005
  }
}

TEST_F(CpuTest, NormalFollowsPhilox) {
  const int64_t n = 200000;
  for (DType dt : kFloatDTypes) {
    SCOPED_TRACE(dtype_str(dt));
    Tensor t = Tensor::empty({n}, dt, cpu());
    run_out("normal", {}, Attrs{{"mean", 1.5}, {"std", 2.0}, {"seed", kSeed}, {"offset", kOffset}}, {t});
    const std::vector<double> v = values(t);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(v[i], representable(dt, 1.5 + 2.0 * Philox4x32::normal(kSeed, kOffset, i))) << "element " << i;
      sum += v[i];
      sq += v[i] * v[i];
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    EXPECT_NEAR(mean, 1.5, 0.03);
    EXPECT_NEAR(std::sqrt(var), 2.0, 0.03);
  }
}

TEST_F(CpuTest, RandintFollowsPhiloxForEveryDtype) {
  for (DType dt : kAllDTypes) {
    if (dt == DType::Bool) continue;
    SCOPED_TRACE(dtype_str(dt));
    const int64_t low = dt == DType::UInt8 ? 3 : -5, high = 17;
    Tensor t = Tensor::empty({3, 40001}, dt, cpu());
    run_out("randint", {}, Attrs{{"low", low}, {"high", high}, {"seed", kSeed}, {"offset", kOffset}}, {t});
    const std::vector<double> v = values(t);
    std::vector<int64_t> hist(high - low, 0);
    for (int64_t i = 0; i < t.numel(); ++i) {
      uint32_t w[4];
      Philox4x32::generate(kSeed, kOffset + i, w);
      const uint64_t bits = (static_cast<uint64_t>(w[0]) << 32) | w[1];
      ASSERT_EQ(v[i], static_cast<double>(low + static_cast<int64_t>(bits % static_cast<uint64_t>(high - low))))
          << "element " << i;
      ++hist[static_cast<int64_t>(v[i]) - low];
    }
    const double expected = static_cast<double>(t.numel()) / (high - low);
    for (int64_t c : hist) EXPECT_NEAR(c, expected, 6 * std::sqrt(expected));  // every value drawn evenly
  }
}

TEST_F(CpuTest, RandintFullInt64Range) {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  Tensor t = Tensor::empty({1000}, DType::Int64, cpu());
  run_out("randint", {}, Attrs{{"low", lo}, {"high", hi}, {"seed", int64_t{9}}, {"offset", int64_t{0}}}, {t});
  int negative = 0;
  for (int64_t x : int_values(t)) {
    EXPECT_LT(x, hi);
    negative += x < 0;
  }
  EXPECT_GT(negative, 400);
  EXPECT_LT(negative, 600);
  Tensor bad = Tensor::empty({3}, DType::Int64, cpu());
  EXPECT_THROW(run_out("randint", {}, Attrs{{"low", int64_t{5}}, {"high", int64_t{5}}, {"seed", int64_t{1}}, {"offset", int64_t{0}}}, {bad}),
               plugflow::ValueError);
}

TEST_F(CpuTest, RandomStreamsDependOnSeedAndOffsetOnly) {
  auto draw = [](int64_t seed, int64_t offset, Layout layout) {
    Tensor t = empty_with_layout({37, 29}, DType::Float32, layout);
    run_out("uniform", {}, uniform_attrs(0, 1, seed, offset), {t});
    return values(t);
  };
  const auto a = draw(1, 0, Layout::Contiguous);
  EXPECT_EQ(a, draw(1, 0, Layout::Contiguous));
  // A strided output gets the numbers of its logical elements.
  EXPECT_EQ(a, draw(1, 0, Layout::Transposed));
  EXPECT_EQ(a, draw(1, 0, Layout::Gapped));
  EXPECT_NE(a, draw(2, 0, Layout::Contiguous));
  // Offset k shifts the stream by k elements.
  const auto shifted = draw(1, 5, Layout::Contiguous);
  EXPECT_TRUE(std::equal(shifted.begin(), shifted.end() - 5, a.begin() + 5));
  // Thread count does not change the numbers.
  const int old = plugflow::get_num_threads();
  plugflow::set_num_threads(1);
  Tensor big1 = Tensor::empty({100003}, DType::Float64, cpu());
  run_out("normal", {}, Attrs{{"mean", 0.0}, {"std", 1.0}, {"seed", int64_t{3}}, {"offset", int64_t{0}}}, {big1});
  plugflow::set_num_threads(2);
  Tensor big2 = Tensor::empty({100003}, DType::Float64, cpu());
  run_out("normal", {}, Attrs{{"mean", 0.0}, {"std", 1.0}, {"seed", int64_t{3}}, {"offset", int64_t{0}}}, {big2});
  plugflow::set_num_threads(old);
  EXPECT_EQ(values(big1), values(big2));
}

}  // namespace
}  // namespace cpu_test
