// Unary kernels against reference functions evaluated in double: float math on its domain,
// activations with attributes, any-dtype ops on every dtype, predicates, bitwise_not, and
// the special values (NaN, inf, -0.0, halves for round).
#include <limits>

#include "cpu_test_util.h"
#include "plugflow/kernel.h"

namespace cpu_test {
namespace {

// erfinv by bisection on std::erf: slow, but independent of the kernel's rational guess.
double erfinv_ref(double y) {
  if (y <= -1) return y == -1 ? -INFINITY : NAN;
  if (y >= 1) return y == 1 ? INFINITY : NAN;
  double lo = -7, hi = 7;
  for (int i = 0; i < 64; ++i) {  // 14 / 2^64: far below double resolution
    const double mid = 0.5 * (lo + hi);
    (std::erf(mid) < y ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

struct FloatCase {
  std::string op;
  std::function<double(double)> ref;
  double lo, hi;
  Attrs attrs = {};
  double tol_scale = 1;  // extra tolerance for functions whose float evaluation loses digits
};

std::vector<FloatCase> float_cases() {
  const double pi = 3.141592653589793;
  return {
      {"exp", [](double x) { return std::exp(x); }, -10, 10},
      {"exp2", [](double x) { return std::exp2(x); }, -10, 10},
      {"expm1", [](double x) { return std::expm1(x); }, -5, 5},
      {"log", [](double x) { return std::log(x); }, 0.01, 100},
      {"log2", [](double x) { return std::log2(x); }, 0.01, 100},
      {"log10", [](double x) { return std::log10(x); }, 0.01, 100},
      {"log1p", [](double x) { return std::log1p(x); }, -0.9, 100},
      {"sqrt", [](double x) { return std::sqrt(x); }, 0, 100},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }, 0.01, 100},
      {"sin", [](double x) { return std::sin(x); }, -3, 3},
      {"cos", [](double x) { return std::cos(x); }, -1.5, 1.5},
      {"tan", [](double x) { return std::tan(x); }, -1.4, 1.4},
      {"asin", [](double x) { return std::asin(x); }, -1, 1},
      {"acos", [](double x) { return std::acos(x); }, -1, 1},
      {"atan", [](double x) { return std::atan(x); }, -10, 10},
      {"sinh", [](double x) { return std::sinh(x); }, -5, 5},
      {"cosh", [](double x) { return std::cosh(x); }, -5, 5},
      {"tanh", [](double x) { return std::tanh(x); }, -5, 5},
      {"asinh", [](double x) { return std::asinh(x); }, -10, 10},
      {"acosh", [](double x) { return std::acosh(x); }, 1, 10},
      {"atanh", [](double x) { return std::atanh(x); }, -0.99, 0.99},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -10, 10},
      {"erf", [](double x) { return std::erf(x); }, -3, 3},
      {"erfc", [](double x) { return std::erfc(x); }, -3, 3},
      {"erfinv", erfinv_ref, -0.99, 0.99, {}, 4},
      {"reciprocal", [](double x) { return 1 / x; }, 0.1, 10},
      {"silu", [](double x) { return x / (1 + std::exp(-x)); }, -10, 10},
      {"mish", [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }, -10, 10},
      {"hardswish", [](double x) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; }, -5, 5},
      {"hardsigmoid", [](double x) { return std::min(std::max(x + 3, 0.0), 6.0) / 6; }, -5, 5},
      {"frac", [](double x) { return x - std::trunc(x); }, -10, 10},
      {"gelu", [](double x) { return x * 0.5 * (1 + std::erf(x / std::sqrt(2.0))); }, -5, 5,
       Attrs{{"approximate", std::string("none")}}},
      {"gelu",
       [pi](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x))); }, -5, 5,
       Attrs{{"approximate", std::string("tanh")}}},
      {"softplus", [](double x) { return 2 * x > 5 ? x : std::log1p(std::exp(2 * x)) / 2; }, -5, 5,
       Attrs{{"beta", 2.0}, {"threshold", 5.0}}},
      {"leaky_relu", [](double x) { return x > 0 ? x : 0.1 * x; }, -5, 5, Attrs{{"negative_slope", 0.1}}},
      {"elu", [](double x) { return x <= 0 ? 1.5 * 1.2 * (std::exp(0.8 * x) - 1) : 1.2 * x; }, -5, 5,
       Attrs{{"alpha", 1.5}, {"scale", 1.2}, {"input_scale", 0.8}}},
  };
}

bool has_cpu_kernel(const std::string& op, DType dt) {
  for (const auto& k : plugflow::registered_kernels())
    if (k.op == op && k.provider == "cpu" && k.dtype == dt) return true;
  return false;
}

TEST_F(CpuTest, FloatMathMatchesDoubleReference) {
  uint32_t seed = 1;
  for (const FloatCase& c : float_cases())
    for (DType dt : kFloatDTypes)
      for (Layout l : kLayouts)
        for (const Shape& shape : {Shape{7, 33}, Shape{3, 33335}}) {
          SCOPED_TRACE(c.op + " " + dtype_str(dt) + " " + layout_name(l) + " " + plugflow::shape_str(shape));
          if (l != Layout::Contiguous && shape[1] > 100 && dt != DType::Float32) continue;  // keep it quick
          std::mt19937 gen(seed++);
          std::uniform_real_distribution<double> dist(c.lo, c.hi);
          std::vector<double> v(numel(shape));
          for (auto& x : v) x = dist(gen);
          Tensor a = make(shape, dt, v, l);
          Tensor out = run(c.op, {a}, c.attrs).at(0);
          ASSERT_EQ(out.dtype(), dt);
          const std::vector<double> in = values(a);  // the inputs as rounded to dt
          std::vector<double> expected(in.size());
          for (size_t i = 0; i < in.size(); ++i) expected[i] = c.ref(in[i]);
          // Results are rounded to dt once (float16/bfloat16 compute in float); erf-based
          // functions near their flat tails lose absolute digits in float: atol covers that.
          const double rtol = rel_tol(dt) * c.tol_scale;
          EXPECT_TRUE(all_close(values(out), expected, rtol, dt == DType::Float64 ? 1e-13 : rtol));
        }
  for (DType dt : kIntDTypes) EXPECT_FALSE(has_cpu_kernel("exp", dt)) << "integers are promoted before the kernel";
}

TEST_F(CpuTest, FloatMathSpecialValues) {
  const double nan = NAN, inf = INFINITY;
  auto f = [](const std::string& op, std::vector<double> x, DType dt = DType::Float32) {
    return values(run(op, {make({static_cast<int64_t>(x.size())}, dt, x)}).at(0));
  };
  EXPECT_TRUE(all_close(f("log", {0, -1, inf, nan}), {-inf, nan, inf, nan}, 0));
  EXPECT_TRUE(all_close(f("sqrt", {-1, 0, inf}), {nan, 0, inf}, 0));
  EXPECT_TRUE(all_close(f("exp", {-inf, inf, 1000, nan}, DType::Float16), {0, inf, inf, nan}, 0));
  EXPECT_TRUE(all_close(f("sigmoid", {-inf, inf, -1000, 1000}), {0, 1, 0, 1}, 0));
  EXPECT_TRUE(all_close(f("erfinv", {-1, 1, 2, 0}), {-inf, inf, nan, 0}, 0));
  EXPECT_TRUE(all_close(f("reciprocal", {0, -inf}), {inf, -0.0}, 0));
  EXPECT_TRUE(all_close(f("hardswish", {-3, -1, 1, 3, 4}), {-0.0, -1.0 / 3, 2.0 / 3, 3, 4}, 1e-6));
}

// Any-dtype ops against int64/double references, on every dtype PyTorch supports them for.
struct AnyCase {
  std::string op;
  std::function<double(double)> fref;
  std::function<int64_t(int64_t)> iref;
  bool bool_ok;
};

std::vector<AnyCase> any_cases() {
  return {
      {"neg", [](double x) { return -x; }, [](int64_t x) { return -x; }, false},
      {"abs", [](double x) { return std::abs(x); }, [](int64_t x) { return x < 0 ? -x : x; }, false},
      {"square", [](double x) { return x * x; }, [](int64_t x) { return x * x; }, true},
      {"sign", [](double x) -> double { return (x > 0) - (x < 0); }, [](int64_t x) -> int64_t { return (x > 0) - (x < 0); },
       true},
      {"relu", [](double x) { return x < 0 ? 0.0 : x; }, [](int64_t x) { return x < 0 ? int64_t{0} : x; }, false},
      {"floor", [](double x) { return std::floor(x); }, [](int64_t x) { return x; }, false},
      {"ceil", [](double x) { return std::ceil(x); }, [](int64_t x) { return x; }, false},
      {"round", [](double x) { return std::nearbyint(x); }, [](int64_t x) { return x; }, false},
      {"trunc", [](double x) { return std::trunc(x); }, [](int64_t x) { return x; }, false},
      {"bitwise_not", nullptr, [](int64_t x) { return ~x; }, true},
  };
}

TEST_F(CpuTest, AnyDtypeOpsEveryDtype) {
  uint32_t seed = 77;
  for (const AnyCase& c : any_cases())
    for (DType dt : kAllDTypes) {
      const bool fl = plugflow::is_floating(dt);
      const bool expected_kernel = dt == DType::Bool ? c.bool_ok : (fl ? c.fref != nullptr : c.iref != nullptr);
      SCOPED_TRACE(c.op + " " + dtype_str(dt));
      EXPECT_EQ(has_cpu_kernel(c.op, dt), expected_kernel);
      if (!expected_kernel) continue;
      for (Layout l : kLayouts) {
        const Shape shape{5, 20011};
        std::vector<double> v = dt == DType::Bool    ? random_values(numel(shape), 0, 1, seed++)
                                : dt == DType::UInt8 ? random_values(numel(shape), 0, 255, seed++)
                                                     : random_values(numel(shape), -120, 120, seed++, fl);
        // Exact halves for round's ties-to-even, and the int8 minimum (neg/abs wrap).
        v[0] = fl ? 2.5 : v[0];
        v[1] = fl ? -0.5 : v[1];
        v[2] = fl ? 3.5 : (dt == DType::Int8 ? -128 : v[2]);
        Tensor a = make(shape, dt, v, l);
        Tensor out = run(c.op, {a}).at(0);
        const std::vector<double> in = values(a);
        std::vector<double> expected(in.size());
        for (size_t i = 0; i < in.size(); ++i) {
          if (dt == DType::Bool && c.op == "bitwise_not") expected[i] = in[i] == 0;  // ~ on bool is logical
          else expected[i] = representable(dt, fl ? c.fref(in[i]) : static_cast<double>(c.iref(static_cast<int64_t>(in[i]))));
        }
        EXPECT_TRUE(all_close(values(out), expected, rel_tol(dt)));
      }
    }
  // frac is floating only.
  EXPECT_TRUE(has_cpu_kernel("frac", DType::BFloat16));
  EXPECT_FALSE(has_cpu_kernel("frac", DType::Int32));
}

TEST_F(CpuTest, AnyDtypeSpecialValues) {
  const double nan = NAN, inf = INFINITY;
  auto f = [](const std::string& op, std::vector<double> x) {
    return values(run(op, {make({static_cast<int64_t>(x.size())}, DType::Float32, x)}).at(0));
  };
  EXPECT_TRUE(all_close(f("round", {0.5, 1.5, 2.5, -0.5, -1.5}), {0, 2, 2, -0.0, -2}, 0));
  EXPECT_TRUE(all_close(f("sign", {nan, -0.0, 0.0, -2, inf}), {0, 0, 0, -1, 1}, 0));
  EXPECT_TRUE(all_close(f("relu", {nan, -inf, inf}), {nan, 0, inf}, 0));
  EXPECT_TRUE(std::signbit(f("relu", {-0.0})[0])) << "relu keeps -0.0 like clamp_min";
  EXPECT_TRUE(all_close(f("abs", {-inf, nan, -0.0}), {inf, nan, 0}, 0));
  EXPECT_TRUE(all_close(f("frac", {-2.25, inf}), {-0.25, nan}, 0));
  // int64 edges wrap like PyTorch.
  Tensor m = Tensor::empty({1}, DType::Int64, cpu());
  m.data<int64_t>()[0] = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(run("neg", {m}).at(0).data<int64_t>()[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(run("abs", {m}).at(0).data<int64_t>()[0], std::numeric_limits<int64_t>::min());
}

TEST_F(CpuTest, PredicatesEveryDtype) {
  const double nan = NAN, inf = INFINITY;
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_str(dt));
    const bool fl = plugflow::is_floating(dt);
    const std::vector<double> v = fl ? std::vector<double>{0, -1.5, nan, inf, -inf, 3} : std::vector<double>{0, 1, 0, 1, 1, 0};
    for (Layout l : kLayouts) {
      Tensor a = make({2, 3}, dt, v, l);
      auto bools = [&](const char* op) {
        Tensor out = run(op, {a}).at(0);
        EXPECT_EQ(out.dtype(), DType::Bool);
        return int_values(out);
      };
      if (fl) {
        EXPECT_TRUE(all_equal(bools("isnan"), {0, 0, 1, 0, 0, 0}));
        EXPECT_TRUE(all_equal(bools("isinf"), {0, 0, 0, 1, 1, 0}));
        EXPECT_TRUE(all_equal(bools("isfinite"), {1, 1, 0, 0, 0, 1}));
        EXPECT_TRUE(all_equal(bools("logical_not"), {1, 0, 0, 0, 0, 0}));
      } else {
        EXPECT_TRUE(all_equal(bools("isnan"), {0, 0, 0, 0, 0, 0}));
        EXPECT_TRUE(all_equal(bools("isinf"), {0, 0, 0, 0, 0, 0}));
        EXPECT_TRUE(all_equal(bools("isfinite"), {1, 1, 1, 1, 1, 1}));
        EXPECT_TRUE(all_equal(bools("logical_not"), {1, 0, 1, 0, 0, 1}));
      }
    }
  }
}

TEST_F(CpuTest, UnaryInPlaceAndStridedOutput) {
  const Shape shape{33, 1001};
  Tensor a = make(shape, DType::Float32, random_values(numel(shape), -5, 5, 9, true), Layout::Transposed);
  const std::vector<double> in = values(a);
  // Output with its own strides (a gapped view), then in place on a transposed tensor.
  Tensor out = empty_with_layout(shape, DType::Float32, Layout::Gapped);
  run_out("tanh", {a}, {}, {out});
  std::vector<double> expected(in.size());
  for (size_t i = 0; i < in.size(); ++i) expected[i] = std::tanh(in[i]);
  EXPECT_TRUE(all_close(values(out), expected, 2e-6, 1e-7));
  run_out("neg", {a}, {}, {a});
  for (size_t i = 0; i < in.size(); ++i) expected[i] = -in[i];
  EXPECT_TRUE(all_close(values(a), expected, 0));
}

}  // namespace
}  // namespace cpu_test
