// Binary kernels against reference loops: every op, every dtype it supports, strided and
// broadcast inputs, strided outputs, sizes that split across threads, and PyTorch's edge
// cases (NaN, signed division and modulo, integer division by zero).
#include <limits>
#include <optional>

#include "cpu_test_util.h"
#include "plugflow/error.h"
#include "plugflow/kernel.h"

namespace cpu_test {
namespace {

using plugflow::Scalar;

struct BinaryCase {
  std::string op;
  Attrs attrs;
  std::function<double(double, double)> fref;     // floating dtypes, in double
  std::function<int64_t(int64_t, int64_t)> iref;  // integer and bool dtypes, in int64 (wrapped to the dtype after)
  bool bool_out = false;
  bool nonzero_b = false;  // integer divisor must not be 0
  double lo = -100, hi = 100;  // float input range
  double ilo = -100, ihi = 100;  // integer input range
};

int64_t py_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t py_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
int64_t int_pow(int64_t a, int64_t b) {
  int64_t r = 1;
  for (int64_t i = 0; i < b; ++i) r *= a;
  return r;
}
double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }

std::vector<BinaryCase> cases() {
  std::vector<BinaryCase> c;
  c.push_back({"add", {}, [](double a, double b) { return a + b; }, [](int64_t a, int64_t b) { return a + b; }});
  c.push_back({"add", Attrs{{"alpha", Scalar(int64_t{3})}}, [](double a, double b) { return a + 3 * b; },
               [](int64_t a, int64_t b) { return a + 3 * b; }});
  c.push_back({"sub", {}, [](double a, double b) { return a - b; }, [](int64_t a, int64_t b) { return a - b; }});
  c.push_back({"sub", Attrs{{"alpha", Scalar(int64_t{2})}}, [](double a, double b) { return a - 2 * b; },
               [](int64_t a, int64_t b) { return a - 2 * b; }});
  c.push_back({"mul", {}, [](double a, double b) { return a * b; }, [](int64_t a, int64_t b) { return a * b; }});
  c.push_back({"div", {}, [](double a, double b) { return a / b; }, nullptr});
  c.push_back({"div", Attrs{{"rounding_mode", std::string("trunc")}}, [](double a, double b) { return std::trunc(a / b); },
               [](int64_t a, int64_t b) { return a / b; }, false, true});
  c.push_back({"div", Attrs{{"rounding_mode", std::string("floor")}}, [](double a, double b) { return std::floor(a / b); },
               py_floordiv, false, true});
  c.push_back({"floor_divide", {}, [](double a, double b) { return std::floor(a / b); }, py_floordiv, false, true});
  c.push_back({"remainder", {}, [](double a, double b) { return a - std::floor(a / b) * b; }, py_mod, false, true});
  c.push_back({"fmod", {}, [](double a, double b) { return std::fmod(a, b); },
               [](int64_t a, int64_t b) { return a % b; }, false, true});
  {
    BinaryCase p{"pow", {}, [](double a, double b) { return std::pow(a, b); }, int_pow};
    p.lo = 0.25, p.hi = 4, p.ilo = 0, p.ihi = 5;  // both operands positive and small: no overflow of int64
    c.push_back(p);
  }
  c.push_back({"maximum", {}, nan_max, [](int64_t a, int64_t b) { return std::max(a, b); }});
  c.push_back({"minimum", {}, nan_min, [](int64_t a, int64_t b) { return std::min(a, b); }});
  c.push_back({"atan2", {}, [](double a, double b) { return std::atan2(a, b); }, nullptr});
  c.push_back({"bitwise_and", {}, nullptr, [](int64_t a, int64_t b) { return a & b; }});
  c.push_back({"bitwise_or", {}, nullptr, [](int64_t a, int64_t b) { return a | b; }});
  c.push_back({"bitwise_xor", {}, nullptr, [](int64_t a, int64_t b) { return a ^ b; }});
  c.push_back({"logical_and", {}, [](double a, double b) -> double { return a != 0 && b != 0; },
               [](int64_t a, int64_t b) -> int64_t { return a != 0 && b != 0; }, true});
  c.push_back({"logical_or", {}, [](double a, double b) -> double { return a != 0 || b != 0; },
               [](int64_t a, int64_t b) -> int64_t { return a != 0 || b != 0; }, true});
  c.push_back({"logical_xor", {}, [](double a, double b) -> double { return (a != 0) != (b != 0); },
               [](int64_t a, int64_t b) -> int64_t { return (a != 0) != (b != 0); }, true});
  c.push_back({"eq", {}, [](double a, double b) -> double { return a == b; }, [](int64_t a, int64_t b) -> int64_t { return a == b; }, true});
  c.push_back({"ne", {}, [](double a, double b) -> double { return a != b; }, [](int64_t a, int64_t b) -> int64_t { return a != b; }, true});
  c.push_back({"lt", {}, [](double a, double b) -> double { return a < b; }, [](int64_t a, int64_t b) -> int64_t { return a < b; }, true});
  c.push_back({"le", {}, [](double a, double b) -> double { return a <= b; }, [](int64_t a, int64_t b) -> int64_t { return a <= b; }, true});
  c.push_back({"gt", {}, [](double a, double b) -> double { return a > b; }, [](int64_t a, int64_t b) -> int64_t { return a > b; }, true});
  c.push_back({"ge", {}, [](double a, double b) -> double { return a >= b; }, [](int64_t a, int64_t b) -> int64_t { return a >= b; }, true});
  return c;
}

bool has_cpu_kernel(const std::string& op, DType dt) {
  for (const auto& k : plugflow::registered_kernels())
    if (k.op == op && k.provider == "cpu" && k.dtype == dt) return true;
  return false;
}

// Which dtypes each op must have a kernel for (PyTorch 1.13's CPU coverage, float16 included).
bool should_register(const std::string& op, DType dt) {
  const bool fl = plugflow::is_floating(dt), bl = dt == DType::Bool;
  if (op == "atan2") return fl;  // integers are promoted before the kernel
  if (op.rfind("bitwise_", 0) == 0) return !fl;
  if (op == "sub" || op == "pow" || op == "remainder" || op == "fmod" || op == "floor_divide" || op == "div") return !bl;
  return true;
}
// Whether a case applies to dt: true division only reaches the kernel with floats.
bool should_support(const BinaryCase& c, DType dt) {
  if (c.op == "div" && !c.attrs.has("rounding_mode")) return plugflow::is_floating(dt);
  return should_register(c.op, dt);
}
// Input values for dt: small integers, or eighths for floats (exact in every float type of
// the range), never 0 as an integer divisor.
std::vector<double> inputs_for(const BinaryCase& c, DType dt, int64_t n, uint32_t seed, bool divisor) {
  std::vector<double> v;
  if (dt == DType::Bool) v = random_values(n, 0, 1, seed);
  else if (plugflow::is_floating(dt)) v = random_values(n, c.lo, c.hi, seed, true);
  else if (dt == DType::UInt8) v = random_values(n, std::max(0.0, c.ilo), std::min(250.0, c.ihi), seed);
  else v = random_values(n, c.ilo, c.ihi, seed);
  for (auto& x : v) {
    x = representable(dt, x);
    if (divisor && c.nonzero_b && x == 0) x = 1;
    if (divisor && plugflow::is_floating(dt) && c.op == "div" && x == 0) x = 0.5;  // keep the quotient finite
  }
  return v;
}

void check_case(const BinaryCase& c, DType dt, const Shape& shape, Tensor a, Tensor b, const Tensor* out_view) {
  const DType out_dt = c.bool_out ? DType::Bool : dt;
  Tensor out;
  if (out_view) {
    out = *out_view;
    run_out(c.op, {a, b}, c.attrs, {out});
  } else {
    out = run(c.op, {a, b}, c.attrs).at(0);
  }
  ASSERT_EQ(out.dtype(), out_dt);
  ASSERT_EQ(out.sizes(), shape);
  const std::vector<double> av = values(a), bv = values(b);
  const int64_t n = numel(shape);
  std::vector<double> expected(n);
  for (int64_t i = 0; i < n; ++i) {
    double e;
    if (plugflow::is_floating(dt)) e = c.fref(av[i], bv[i]);
    else e = static_cast<double>(c.iref(static_cast<int64_t>(av[i]), static_cast<int64_t>(bv[i])));
    expected[i] = representable(out_dt, e);
  }
  const double rtol = c.bool_out ? 0.0 : rel_tol(dt);
  EXPECT_TRUE(all_close(values(out), expected, rtol, rtol * 1e-2));
}

class BinaryTest : public CpuTest {};

TEST_F(BinaryTest, EveryOpEveryDtypeEveryLayout) {
  uint32_t seed = 1;
  const Shape shape{7, 33};
  for (const BinaryCase& c : cases()) {
    for (DType dt : kAllDTypes) {
      const std::string what = c.op + (c.attrs.items().empty() ? "" : "(attrs)") + " " + dtype_str(dt);
      SCOPED_TRACE(what);
      EXPECT_EQ(has_cpu_kernel(c.op, dt), should_register(c.op, dt));
      if (!should_support(c, dt)) continue;
      // (a layout, b layout, out layout or none for a core-allocated contiguous output)
      struct Combo {
        Layout a, b;
        std::optional<Layout> out;
      };
      for (const Combo& combo : {Combo{Layout::Contiguous, Layout::Contiguous, std::nullopt},
                                 Combo{Layout::Transposed, Layout::Gapped, std::nullopt},
                                 Combo{Layout::Contiguous, Layout::Contiguous, Layout::Gapped},
                                 Combo{Layout::Gapped, Layout::Transposed, Layout::Transposed}}) {
        SCOPED_TRACE(std::string(layout_name(combo.a)) + "/" + layout_name(combo.b) + " -> " +
                     (combo.out ? layout_name(*combo.out) : "new"));
        Tensor a = make(shape, dt, inputs_for(c, dt, numel(shape), seed++, false), combo.a);
        Tensor b = make(shape, dt, inputs_for(c, dt, numel(shape), seed++, true), combo.b);
        if (combo.out) {
          Tensor out = empty_with_layout(shape, c.bool_out ? DType::Bool : dt, *combo.out);
          check_case(c, dt, shape, a, b, &out);
        } else {
          check_case(c, dt, shape, a, b, nullptr);
        }
      }
    }
  }
}

TEST_F(BinaryTest, BroadcastOperands) {
  uint32_t seed = 500;
  for (const BinaryCase& c : cases())
    for (DType dt : {DType::Float32, DType::Int32, DType::Float16, DType::Bool}) {
      if (!should_support(c, dt)) continue;
      SCOPED_TRACE(c.op + " " + dtype_str(dt));
      const Shape shape{5, 40};
      // b a broadcast scalar, then a a broadcast row (stride 0 in dim 0).
      const double scalar = inputs_for(c, dt, 1, seed++, true)[0];
      Tensor a = make(shape, dt, inputs_for(c, dt, 200, seed++, false));
      check_case(c, dt, shape, a, broadcast_scalar(shape, dt, scalar), nullptr);
      Tensor row = make({1, 40}, dt, inputs_for(c, dt, 40, seed++, false));
      Tensor a_row = Tensor::view_of(row.storage(), shape, {0, 1}, 0, dt);
      Tensor b = make(shape, dt, inputs_for(c, dt, 200, seed++, true), Layout::Transposed);
      check_case(c, dt, shape, a_row, b, nullptr);
      check_case(c, dt, shape, broadcast_scalar(shape, dt, scalar), b, nullptr);
    }
}

TEST_F(BinaryTest, LargeAndOddSizes) {
  uint32_t seed = 900;
  for (const BinaryCase& c : cases()) {
    if (c.op != "add" && c.op != "mul" && c.op != "maximum" && c.op != "lt" && c.op != "remainder") continue;
    for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64, DType::UInt8})
      for (const Shape& shape : {Shape{1}, Shape{7}, Shape{33}, Shape{1000}, Shape{100003}, Shape{3, 40001}, Shape{}}) {
        SCOPED_TRACE(c.op + " " + dtype_str(dt) + " " + plugflow::shape_str(shape));
        const int64_t n = numel(shape);
        for (Layout l : {Layout::Contiguous, Layout::Gapped}) {
          Tensor a = make(shape, dt, inputs_for(c, dt, n, seed++, false), l);
          Tensor b = make(shape, dt, inputs_for(c, dt, n, seed++, true));
          check_case(c, dt, shape, a, b, nullptr);
        }
      }
  }
}

// Runs the elementwise driver stages through its buffers (broadcast or strided operands, a
// strided output) and that are several of its 256-element chunks long, in every item size.
TEST_F(BinaryTest, StagedRunsSpanSeveralChunks) {
  uint32_t seed = 1300;
  const Shape shape{3, 1000};
  for (const BinaryCase& c : cases()) {
    if (c.op != "add" && c.op != "lt" && c.op != "remainder") continue;
    for (DType dt : {DType::UInt8, DType::Float16, DType::Int32, DType::Float64}) {
      SCOPED_TRACE(c.op + " " + dtype_str(dt));
      Tensor a = make(shape, dt, inputs_for(c, dt, 3000, seed++, false), Layout::Gapped);
      // A column broadcast along the runs (stride 0 in the inner dim only) and a scalar.
      Tensor col = make({3, 1}, dt, inputs_for(c, dt, 3, seed++, true));
      Tensor b_col = Tensor::view_of(col.storage(), shape, {1, 0}, 0, dt);
      Tensor scalar = broadcast_scalar(shape, dt, inputs_for(c, dt, 1, seed++, true)[0]);
      Tensor out = empty_with_layout(shape, c.bool_out ? DType::Bool : dt, Layout::Gapped);
      check_case(c, dt, shape, a, b_col, &out);
      check_case(c, dt, shape, scalar, make(shape, dt, inputs_for(c, dt, 3000, seed++, true)), &out);
      check_case(c, dt, shape, make(shape, dt, inputs_for(c, dt, 3000, seed++, false)), scalar, nullptr);
    }
  }
}

TEST_F(BinaryTest, InPlaceOutputAliasingAnInput) {
  Tensor a = make({100003}, DType::Float32, random_values(100003, -50, 50, 3, true));
  Tensor b = make({100003}, DType::Float32, random_values(100003, -50, 50, 4, true));
  const std::vector<double> av = values(a), bv = values(b);
  run_out("mul", {a, b}, {}, {a});
  std::vector<double> expected(av.size());
  for (size_t i = 0; i < av.size(); ++i) expected[i] = representable(DType::Float32, av[i] * bv[i]);
  EXPECT_TRUE(all_close(values(a), expected, 0.0));
}

// Values checked with PyTorch 1.13.
TEST_F(BinaryTest, PyTorchEdgeCases) {
  const double nan = NAN, inf = INFINITY;
  auto f32 = [](const std::string& op, std::vector<double> a, std::vector<double> b, Attrs attrs = {}) {
    const int64_t n = static_cast<int64_t>(a.size());
    return values(run(op, {make({n}, DType::Float32, a), make({n}, DType::Float32, b)}, attrs).at(0));
  };
  auto i64 = [](const std::string& op, std::vector<double> a, std::vector<double> b, Attrs attrs = {}) {
    const int64_t n = static_cast<int64_t>(a.size());
    return int_values(run(op, {make({n}, DType::Int64, a), make({n}, DType::Int64, b)}, attrs).at(0));
  };
  EXPECT_TRUE(all_close(f32("remainder", {5, -5, 5, -5, 0, 3}, {3, 3, -3, -3, 2, 0}), {2, 1, -1, -2, 0, nan}, 0));
  EXPECT_TRUE(all_close(f32("div", {5, -5, 1, -1, 0}, {0, 0, 0, 0, 0}, Attrs{{"rounding_mode", std::string("floor")}}),
                        {inf, -inf, inf, -inf, nan}, 0));
  EXPECT_TRUE(all_close(f32("div", {7, -7}, {2, 2}, Attrs{{"rounding_mode", std::string("floor")}}), {3, -4}, 0));
  EXPECT_TRUE(all_equal(i64("div", {-7, 7}, {2, -2}, Attrs{{"rounding_mode", std::string("floor")}}), {-4, -4}));
  EXPECT_TRUE(all_equal(i64("div", {-7, 7}, {2, -2}, Attrs{{"rounding_mode", std::string("trunc")}}), {-3, -3}));
  EXPECT_TRUE(all_equal(i64("fmod", {-5, 5}, {3, -3}), {-2, 2}));
  EXPECT_TRUE(all_equal(i64("remainder", {-5, 5}, {3, -3}), {1, -1}));
  EXPECT_TRUE(all_equal(i64("pow", {2, -1, 1, 3, 0, -1}, {-1, -3, -2, 2, 0, 4}), {0, -1, 1, 9, 1, 1}));
  EXPECT_TRUE(all_close(f32("maximum", {nan, 1, 2}, {1, nan, -inf}), {nan, nan, 2}, 0));
  EXPECT_TRUE(all_close(f32("minimum", {nan, 1, 2}, {1, nan, -inf}), {nan, nan, -inf}, 0));
  EXPECT_TRUE(all_close(f32("eq", {nan, 1}, {nan, 1}), {0, 1}, 0));
  EXPECT_TRUE(all_close(f32("ne", {nan, 1}, {nan, 1}), {1, 0}, 0));
  EXPECT_TRUE(all_close(f32("logical_and", {nan, 0}, {1, 1}), {1, 0}, 0));
  // Wrapping instead of undefined behaviour (or SIGFPE) at the edges of int64.
  const int64_t min64 = std::numeric_limits<int64_t>::min(), max64 = std::numeric_limits<int64_t>::max();
  auto exact64 = [](std::vector<int64_t> v) {
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::Int64, cpu());
    std::copy(v.begin(), v.end(), t.data<int64_t>());
    return t;
  };
  auto r64 = [&](const std::string& op, std::vector<int64_t> a, std::vector<int64_t> b, Attrs attrs = {}) {
    return int_values(run(op, {exact64(a), exact64(b)}, attrs).at(0));
  };
  EXPECT_TRUE(all_equal(r64("div", {min64}, {-1}, Attrs{{"rounding_mode", std::string("trunc")}}), {min64}));
  EXPECT_TRUE(all_equal(r64("floor_divide", {min64}, {-1}), {min64}));
  EXPECT_TRUE(all_equal(r64("remainder", {min64}, {-1}), {0}));
  EXPECT_TRUE(all_equal(r64("fmod", {min64}, {-1}), {0}));
  EXPECT_TRUE(all_equal(r64("add", {max64}, {1}), {min64}));
  EXPECT_TRUE(all_equal(r64("mul", {max64}, {2}), {-2}));
  Tensor i32a = make({1}, DType::Int32, {double(INT32_MIN)}), i32b = make({1}, DType::Int32, {-1});
  EXPECT_TRUE(all_equal(int_values(run("floor_divide", {i32a, i32b}).at(0)), {INT32_MIN}));
  // Bool arithmetic is logical.
  Tensor t = make({4}, DType::Bool, {0, 0, 1, 1}), u = make({4}, DType::Bool, {0, 1, 0, 1});
  EXPECT_TRUE(all_equal(int_values(run("add", {t, u}).at(0)), {0, 1, 1, 1}));
  EXPECT_TRUE(all_equal(int_values(run("mul", {t, u}).at(0)), {0, 0, 0, 1}));
}

TEST_F(BinaryTest, IntegerDivisionByZeroRaises) {
  for (DType dt : kIntDTypes)
    for (const char* op : {"floor_divide", "remainder", "fmod"}) {
      SCOPED_TRACE(std::string(op) + " " + dtype_str(dt));
      Tensor a = make({100003}, dt, std::vector<double>(100003, 7));
      std::vector<double> bv(100003, 2);
      bv[77777] = 0;  // one zero deep inside a multi-threaded range
      Tensor b = make({100003}, dt, bv);
      try {
        run_out(op, {a, b}, {}, {a});  // in place: must leave a untouched
        ADD_FAILURE() << "expected ZeroDivisionError";
      } catch (const plugflow::Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("ZeroDivisionError", 0), 0u) << e.what();
      }
      EXPECT_TRUE(all_close(values(a), std::vector<double>(100003, 7), 0));
    }
  Tensor a = make({2}, DType::Int32, {1, 2}), z = make({2}, DType::Int32, {1, 0});
  EXPECT_THROW(run("div", {a, z}, Attrs{{"rounding_mode", std::string("trunc")}}), plugflow::Error);
  EXPECT_THROW(run("div", {a, z}, Attrs{{"rounding_mode", std::string("floor")}}), plugflow::Error);
  // Floats divide by zero into inf/nan, as IEEE says.
  Tensor f = make({3}, DType::Float32, {1, -1, 0}), fz = make({3}, DType::Float32, {0, 0, 0});
  EXPECT_TRUE(all_close(values(run("div", {f, fz}).at(0)), {INFINITY, -INFINITY, NAN}, 0));
}

TEST_F(BinaryTest, BadRoundingModeIsAValueError) {
  Tensor a = make({2}, DType::Float32, {1, 2});
  EXPECT_THROW(run("div", {a, a}, Attrs{{"rounding_mode", std::string("ceil")}}), plugflow::ValueError);
}

}  // namespace
}  // namespace cpu_test
