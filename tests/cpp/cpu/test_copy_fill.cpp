// copy (every dtype pair, every layout pair, broadcast sources), fill, arange, linspace.
#include <limits>

#include "cpu_test_util.h"

namespace cpu_test {
namespace {

// Source values that every dtype can hold after its own conversion rules: small integers,
// and quarter fractions (truncated by integer destinations) for floating sources.
std::vector<double> source_values(DType src, int64_t n, uint32_t seed) {
  if (src == DType::Bool) return random_values(n, 0, 1, seed);
  if (src == DType::UInt8) return random_values(n, 0, 250, seed);
  return random_values(n, -100, 100, seed, plugflow::is_floating(src));
}

void check_copy(DType src_dt, DType dst_dt, const Shape& shape, Layout src_layout, Layout dst_layout, uint32_t seed) {
  SCOPED_TRACE(dtype_str(src_dt) + " -> " + dtype_str(dst_dt) + " " + plugflow::shape_str(shape) + " " +
               layout_name(src_layout) + " -> " + layout_name(dst_layout));
  const int64_t n = numel(shape);
  const std::vector<double> raw = source_values(src_dt, n, seed);
  Tensor src = make(shape, src_dt, raw, src_layout);
  Tensor dst = empty_with_layout(shape, dst_dt, dst_layout);
  run_out("copy", {src}, {}, {dst});
  std::vector<double> expected(n);
  // The test's own conversion: truncation toward zero and wrapping for integers, != 0 for
  // bool, rounding for floats (all values are in every type's range).
  for (int64_t i = 0; i < n; ++i) expected[i] = representable(dst_dt, representable(src_dt, raw[i]));
  EXPECT_TRUE(all_close(values(dst), expected, 0.0));
}

class CopyTest : public CpuTest {};

TEST_F(CopyTest, AllDtypePairsAllLayouts) {
  uint32_t seed = 1;
  for (DType s : kAllDTypes)
    for (DType d : kAllDTypes)
      for (Layout ls : kLayouts)
        for (Layout ld : {Layout::Contiguous, Layout::Gapped}) check_copy(s, d, {7, 33}, ls, ld, seed++);
}

TEST_F(CopyTest, OddSizesAndRanks) {
  uint32_t seed = 100;
  for (const Shape& shape : {Shape{1}, Shape{7}, Shape{1000}, Shape{3, 1, 5}, Shape{2, 3, 4, 5}, Shape{}})
    for (Layout l : kLayouts) {
      check_copy(DType::Float32, DType::Float32, shape, l, Layout::Contiguous, seed++);
      check_copy(DType::Int64, DType::Float16, shape, l, Layout::Gapped, seed++);
      check_copy(DType::Float64, DType::Int8, shape, Layout::Contiguous, l, seed++);
    }
}

// Large enough for several threads: the flat range is split mid-run.
TEST_F(CopyTest, LargeTensorsAcrossThreads) {
  for (Layout l : kLayouts) {
    check_copy(DType::Float32, DType::Float32, {301, 337}, l, Layout::Contiguous, 7);
    check_copy(DType::Float32, DType::BFloat16, {301, 337}, l, Layout::Gapped, 8);
    check_copy(DType::Int16, DType::Float64, {3, 100003}, l, Layout::Contiguous, 9);
  }
}

// Swapping the two inner dims of a 3-d tensor (a batch of transposed matrices): the tiled
// transposing copy, with partial tiles at both edges.
TEST_F(CopyTest, BatchedTransposeCopy) {
  for (DType s : {DType::Float32, DType::Int64, DType::Float16})
    for (DType d : {DType::Float32, DType::BFloat16, DType::Int8}) {
      SCOPED_TRACE(dtype_str(s) + " -> " + dtype_str(d));
      const Shape shape{3, 45, 70};
      Tensor base = Tensor::empty({3, 70, 45}, s, cpu());
      Tensor src = Tensor::view_of(base.storage(), shape, {70 * 45, 1, 45}, 0, s);
      const std::vector<double> v = source_values(s, numel(shape), 11);
      set_values(src, v);
      Tensor dst = Tensor::empty(shape, d, cpu());
      run_out("copy", {src}, {}, {dst});
      std::vector<double> expected(v.size());
      for (size_t i = 0; i < v.size(); ++i) expected[i] = representable(d, representable(s, v[i]));
      EXPECT_TRUE(all_close(values(dst), expected, 0.0));
    }
}

TEST_F(CopyTest, BroadcastSource) {
  for (DType s : kAllDTypes)
    for (DType d : {DType::Float32, DType::Int32, DType::Bool, DType::Float16}) {
      SCOPED_TRACE(dtype_str(s) + " -> " + dtype_str(d));
      // A row broadcast over 40000 rows (stride 0 in dim 0) and a full scalar broadcast.
      Tensor row = make({1, 5}, s, source_values(s, 5, 3));
      Tensor src = Tensor::view_of(row.storage(), {40000, 5}, {0, 1}, 0, s);
      Tensor dst = Tensor::empty({40000, 5}, d, cpu());
      run_out("copy", {src}, {}, {dst});
      const std::vector<double> rv = values(row);
      std::vector<double> expected(200000);
      for (int64_t i = 0; i < 200000; ++i) expected[i] = representable(d, rv[i % 5]);
      EXPECT_TRUE(all_close(values(dst), expected, 0.0));

      Tensor scalar = broadcast_scalar({3, 70000}, s, 1);
      Tensor dst2 = Tensor::empty({3, 70000}, d, cpu());
      run_out("copy", {scalar}, {}, {dst2});
      EXPECT_TRUE(all_close(values(dst2), std::vector<double>(210000, 1.0), 0.0));
    }
}

// Values outside the destination's range follow PyTorch on x86 (checked with PyTorch 1.13):
// NaN/inf to integers give the "integer indefinite" value, negative floats to uint8 wrap
// through int64, narrow integers wrap through int32.
TEST_F(CopyTest, SpecialValuesMatchPyTorch) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto cast = [](const std::vector<double>& v, DType from, DType to) {
    Tensor src = make({static_cast<int64_t>(v.size())}, from, v);
    Tensor dst = Tensor::empty(src.sizes(), to, cpu());
    run_out("copy", {src}, {}, {dst});
    return int_values(dst);
  };
  const int64_t i64min = std::numeric_limits<int64_t>::min();
  EXPECT_TRUE(all_equal(cast({nan, inf, -inf}, DType::Float32, DType::Int64), {i64min, i64min, i64min}));
  EXPECT_TRUE(all_equal(cast({nan, inf}, DType::Float32, DType::Int16), {0, 0}));
  EXPECT_TRUE(all_equal(cast({nan, inf, -2.7}, DType::Float32, DType::UInt8), {0, 0, 254}));
  EXPECT_TRUE(all_equal(cast({-1.5, -0.5, 0.5, 1.5, 2.5}, DType::Float32, DType::UInt8), {255, 0, 0, 1, 2}));
  EXPECT_TRUE(all_equal(cast({300.7, -129.0}, DType::Float32, DType::Int8), {44, 127}));
  EXPECT_TRUE(all_equal(cast({3e9, nan}, DType::Float32, DType::Int32), {INT32_MIN, INT32_MIN}));
  EXPECT_TRUE(all_equal(cast({nan, 0.0, -0.0, 0.1}, DType::Float64, DType::Bool), {1, 0, 0, 1}));
  EXPECT_TRUE(all_equal(cast({70000, -1}, DType::Int64, DType::Int16), {70000 - 65536, -1}));
  EXPECT_TRUE(all_equal(cast({-1}, DType::Int32, DType::UInt8), {255}));
  // Floats overflowing float16 become inf, NaN stays NaN.
  Tensor big = make({3}, DType::Float32, {1e6, -1e6, nan});
  Tensor half = Tensor::empty({3}, DType::Float16, cpu());
  run_out("copy", {big}, {}, {half});
  EXPECT_TRUE(all_close(values(half), {inf, -inf, nan}, 0.0));
}

TEST_F(CopyTest, EmptyIsANoOp) {
  Tensor src = Tensor::empty({0, 5}, DType::Float32, cpu());
  Tensor dst = Tensor::empty({0, 5}, DType::Int32, cpu());
  run_out("copy", {src}, {}, {dst});
  run_out("fill", {}, Attrs{{"value", plugflow::Scalar(1.0)}}, {dst});
  EXPECT_EQ(dst.numel(), 0);
}

TEST_F(CpuTest, FillEveryDtypeAndLayout) {
  for (DType dt : kAllDTypes)
    for (Layout l : kLayouts)
      for (const Shape& shape : {Shape{1}, Shape{7, 33}, Shape{3, 40001}}) {
        SCOPED_TRACE(dtype_str(dt) + " " + layout_name(l) + " " + plugflow::shape_str(shape));
        Tensor t = empty_with_layout(shape, dt, l);
        const plugflow::Scalar v = dt == DType::Bool ? plugflow::Scalar(true)
                                   : plugflow::is_floating(dt) ? plugflow::Scalar(-2.5)
                                                               : plugflow::Scalar(int64_t{-3});
        run_out("fill", {}, Attrs{{"value", v}}, {t});
        const double expected = representable(dt, v.to_double());
        EXPECT_TRUE(all_close(values(t), std::vector<double>(numel(shape), expected), 0.0));
      }
}

TEST_F(CpuTest, FillLeavesGapsUntouched) {
  Tensor base = make({10}, DType::Int32, std::vector<double>(10, 7));
  Tensor every_other = Tensor::view_of(base.storage(), {5}, {2}, 0, DType::Int32);
  run_out("fill", {}, Attrs{{"value", plugflow::Scalar(int64_t{1})}}, {every_other});
  EXPECT_TRUE(all_equal(int_values(base), {1, 7, 1, 7, 1, 7, 1, 7, 1, 7}));
}

TEST_F(CpuTest, Arange) {
  {
    Tensor t = Tensor::empty({9}, DType::Int8, cpu());
    run_out("arange", {}, Attrs{{"start", plugflow::Scalar(int64_t{-5})}, {"step", plugflow::Scalar(int64_t{3})}}, {t});
    EXPECT_TRUE(all_equal(int_values(t), {-5, -2, 1, 4, 7, 10, 13, 16, 19}));
  }
  for (DType dt : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
    SCOPED_TRACE(dtype_str(dt));
    const int64_t n = 100003;
    Tensor t = Tensor::empty({n}, dt, cpu());
    const bool fl = plugflow::is_floating(dt);
    const double start = fl ? 0.5 : -7, step = fl ? 0.25 : 3;
    run_out("arange", {},
            Attrs{{"start", fl ? plugflow::Scalar(start) : plugflow::Scalar(int64_t(start))},
                  {"step", fl ? plugflow::Scalar(step) : plugflow::Scalar(int64_t(step))}},
            {t});
    std::vector<double> expected(n);
    for (int64_t i = 0; i < n; ++i) expected[i] = representable(dt, start + static_cast<double>(i) * step);
    EXPECT_TRUE(all_close(values(t), expected, 0.0));
  }
}

TEST_F(CpuTest, LinspaceMatchesPyTorch) {
  auto linspace = [](double start, double end, int64_t n, DType dt) {
    Tensor t = Tensor::empty({n}, dt, cpu());
    run_out("linspace", {}, Attrs{{"start", start}, {"end", end}}, {t});
    return values(t);
  };
  // Values printed by PyTorch 1.13 (float32 arithmetic, counting down from end in the second half).
  const std::vector<double> f32 = {0.0, 0.1666666716337204, 0.3333333432674408, 0.5, 0.6666666269302368,
                                   0.8333333134651184, 1.0};
  EXPECT_TRUE(all_close(linspace(0, 1, 7, DType::Float32), f32, 0.0));
  EXPECT_TRUE(all_close(linspace(0, 10, 4, DType::Int64), {0, 3, 6, 10}, 0.0));
  EXPECT_TRUE(all_close(linspace(-3.7, 2.2, 6, DType::Int32), {-3, -2, -1, 0, 1, 2}, 0.0));
  EXPECT_TRUE(all_close(linspace(2.5, 99, 1, DType::Float64), {2.5}, 0.0));
  // Large: both ends exact, evenly spaced in between.
  const int64_t n = 100001;
  const std::vector<double> v = linspace(-1, 3, n, DType::Float64);
  EXPECT_EQ(v.front(), -1.0);
  EXPECT_EQ(v.back(), 3.0);
  for (int64_t i = 0; i < n; i += 997) EXPECT_NEAR(v[i], -1.0 + 4.0 * i / (n - 1), 1e-14);
}

}  // namespace
}  // namespace cpu_test
