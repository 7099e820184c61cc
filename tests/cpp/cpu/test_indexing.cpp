// Indexing kernels (index, index_put, where, nonzero) against reference loops, called directly
// with the operands docs/kernels.md describes: the data restrided to the iteration shape
// (stride 0 in the indexed dims), int64 indices broadcast to it, every dtype and layout, sizes
// that split across threads, wrapped negative indices, duplicates that accumulate, and the
// out-of-range error message.
#include <algorithm>
#include <numeric>

#include "cpu_test_util.h"
#include "plugflow/error.h"

namespace cpu_test {
namespace {

using plugflow::IndexError;

Attrs index_attrs(const Shape& sizes, const Shape& strides, bool wrap) {
  Shape dims(sizes.size());
  std::iota(dims.begin(), dims.end(), 0);
  return Attrs{{"sizes", sizes}, {"strides", strides}, {"dims", dims}, {"wrap", wrap}};
}

// A view of `base` with `sizes` and explicit strides (in elements).
Tensor restride(const Tensor& base, const Shape& sizes, const Shape& strides) {
  return Tensor::view_of(base.storage(), sizes, strides, base.offset(), base.dtype());
}

class IndexingTest : public CpuTest {};

// Random values every dtype holds: 0/1 for bool, non-negative for uint8.
std::vector<double> data_values(DType dt, int64_t n, uint32_t seed) {
  if (dt == DType::Bool) return random_values(n, 0, 1, seed);
  return random_values(n, dt == DType::UInt8 ? 0 : -50, 50, seed);
}

// gather along dim 1 of a (4, 7) matrix: out (4, 5), out[i][j] = a[i][index[i][j]].
TEST_F(IndexingTest, IndexGathersAlongADim) {
  for (DType dt : kAllDTypes) {
    for (Layout layout : kLayouts) {
      SCOPED_TRACE(dtype_str(dt) + " " + layout_name(layout));
      const Shape shape{4, 7};
      const auto vals = data_values(dt, 28, 1);
      Tensor a = make(shape, dt, vals, layout);
      const auto raw = random_values(20, -7, 6, 2);  // negatives wrap
      Tensor index = make({4, 5}, DType::Int64, raw, layout);
      Tensor src = restride(a, {4, 5}, {a.strides()[0], 0});
      Tensor out = run("index", {src, index}, index_attrs({7}, {a.strides()[1]}, true))[0];
      std::vector<double> expected(20);
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 5; ++j) {
          int64_t k = static_cast<int64_t>(raw[i * 5 + j]);
          if (k < 0) k += 7;
          expected[i * 5 + j] = vals[i * 7 + k];
        }
      EXPECT_TRUE(all_close(values(out), expected, 0));
    }
  }
}

// Two broadcast index tensors select elements of a (5, 6) matrix: out (3, 4).
TEST_F(IndexingTest, IndexWithBroadcastIndicesAndManyThreads) {
  for (int64_t rows : {int64_t{3}, int64_t{40000}}) {
    Tensor a = make({5, 6}, DType::Float32, random_values(30, -9, 9, 3), Layout::Gapped);
    const auto r = random_values(rows, 0, 4, 4);
    const auto c = random_values(4, 0, 5, 5);
    Tensor i0 = make({rows, 1}, DType::Int64, r);
    Tensor i1 = make({1, 4}, DType::Int64, c);
    Tensor e0 = Tensor::view_of(i0.storage(), {rows, 4}, {1, 0}, 0, DType::Int64);
    Tensor e1 = Tensor::view_of(i1.storage(), {rows, 4}, {0, 1}, 0, DType::Int64);
    Tensor src = restride(a, {rows, 4}, {0, 0});
    Tensor out = run("index", {src, e0, e1}, index_attrs({5, 6}, {a.strides()[0], a.strides()[1]}, false))[0];
    const auto av = values(a);
    std::vector<double> expected(rows * 4);
    for (int64_t i = 0; i < rows; ++i)
      for (int j = 0; j < 4; ++j) expected[i * 4 + j] = av[static_cast<int64_t>(r[i]) * 6 + static_cast<int64_t>(c[j])];
    EXPECT_TRUE(all_close(values(out), expected, 0));
  }
}

TEST_F(IndexingTest, IndexOutOfRangeNamesIndexDimAndSize) {
  Tensor a = make({3}, DType::Float64, {1, 2, 3});
  Tensor src = restride(a, {2}, {0});
  Tensor index = make({2}, DType::Int64, {1, 5});
  try {
    run("index", {src, index}, Attrs{{"sizes", Shape{3}}, {"strides", Shape{1}}, {"dims", Shape{4}}, {"wrap", true}});
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    EXPECT_STREQ(e.what(), "index 5 is out of bounds for dimension 4 with size 3");
  }
  Tensor neg = make({1}, DType::Int64, {-1});
  EXPECT_THROW(run("index", {restride(a, {1}, {0}), neg}, index_attrs({3}, {1}, false)), IndexError);
  Tensor neg4 = make({1}, DType::Int64, {-4});
  EXPECT_THROW(run("index", {restride(a, {1}, {0}), neg4}, index_attrs({3}, {1}, true)), IndexError);
}

// scatter along dim 0 of a (6, 3) tensor from a (4, 3) source; unique targets per column.
TEST_F(IndexingTest, IndexPutScatters) {
  for (DType dt : kAllDTypes) {
    for (Layout layout : kLayouts) {
      SCOPED_TRACE(dtype_str(dt) + " " + layout_name(layout));
      const auto init = data_values(dt, 18, 6);
      Tensor dst = make({6, 3}, dt, init, layout);
      const auto src_vals = data_values(dt, 12, 7);
      Tensor src = make({4, 3}, dt, src_vals, Layout::Transposed);
      const std::vector<double> rows{5, 0, 2, 3, -1, 1, 4, 2, 0, 0, -3, 5};  // 4x3, distinct per column after wrap
      Tensor index = make({4, 3}, DType::Int64, rows);
      Tensor dst_r = restride(dst, {4, 3}, {0, dst.strides()[1]});
      run_out("index_put", {src, index}, [&] {
        Attrs at = index_attrs({6}, {dst.strides()[0]}, true);
        at.set("accumulate", false);
        return at;
      }(), {dst_r});
      std::vector<double> expected = init;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 3; ++j) {
          int64_t r = static_cast<int64_t>(rows[i * 3 + j]);
          if (r < 0) r += 6;
          expected[r * 3 + j] = src_vals[i * 3 + j];
        }
      EXPECT_TRUE(all_close(values(dst), expected, 0));
    }
  }
}

// Accumulation: every duplicate adds (integers wrap, bool ors, 16-bit floats through float).
TEST_F(IndexingTest, IndexPutAccumulatesDuplicates) {
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_str(dt));
    const int64_t n = 50000;  // long enough to split across threads if the kernel did
    Tensor dst = make({3}, dt, {0, 1, 0});
    Tensor values_t = broadcast_scalar({n}, dt, 1);
    std::vector<double> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<double>(i % 2);
    Tensor index = make({n}, DType::Int64, idx);
    Attrs at = index_attrs({3}, {1}, false);
    at.set("accumulate", true);
    run_out("index_put", {values_t, index}, at, {restride(dst, {n}, {0})});
    const double half = n / 2;
    std::vector<double> expected;
    if (dt == DType::Bool) expected = {1, 1, 0};
    else expected = {representable(dt, half), representable(dt, half + 1), 0};  // integers wrap
    if (dt == DType::Float16 || dt == DType::BFloat16) {
      // Accumulating one at a time in a 16-bit float saturates; the kernel rounds after each add.
      float acc0 = 0, acc1 = 1;
      for (int64_t i = 0; i < n; ++i) {
        if (i % 2 == 0) acc0 = static_cast<float>(representable(dt, acc0 + 1.0f));
        else acc1 = static_cast<float>(representable(dt, acc1 + 1.0f));
      }
      expected = {acc0, acc1, 0};
    }
    EXPECT_TRUE(all_close(values(dst), expected, 0));
  }
}

TEST_F(IndexingTest, WhereBroadcastsAndRunsInPlace) {
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_str(dt));
    const auto av = data_values(dt, 12, 8);
    Tensor a = make({3, 4}, dt, av, Layout::Transposed);
    Tensor other = broadcast_scalar({3, 4}, dt, 1);
    const auto cv = random_values(4, 0, 1, 9);
    Tensor c1 = make({1, 4}, DType::Bool, cv);
    Tensor cond = Tensor::view_of(c1.storage(), {3, 4}, {0, 1}, 0, DType::Bool);
    std::vector<double> expected(12);
    for (int i = 0; i < 12; ++i) expected[i] = cv[i % 4] != 0 ? av[i] : 1;
    EXPECT_TRUE(all_close(values(run("where", {a, other, cond})[0]), expected, 0));
    // In place into `other`'s role (masked_fill_): out aliases input 1 element for element.
    Tensor self = make({3, 4}, dt, av, Layout::Gapped);
    run_out("where", {other, self, cond}, {}, {self});
    for (int i = 0; i < 12; ++i) expected[i] = cv[i % 4] != 0 ? 1 : av[i];
    EXPECT_TRUE(all_close(values(self), expected, 0));
  }
}

std::vector<int64_t> reference_nonzero(const std::vector<double>& v, const Shape& shape) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    if (v[i] == 0) continue;  // NaN != 0
    Shape coord(shape.size());
    int64_t r = i;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      coord[d] = r % shape[d];
      r /= shape[d];
    }
    out.insert(out.end(), coord.begin(), coord.end());
  }
  return out;
}

TEST_F(IndexingTest, NonzeroInRowMajorOrder) {
  for (DType dt : kAllDTypes) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : {Shape{7}, Shape{3, 5, 2}, Shape{300, 257}}) {
        SCOPED_TRACE(dtype_str(dt) + " " + layout_name(layout) + " " + plugflow::shape_str(shape));
        auto v = random_values(numel(shape), -1, 1, 10);
        if (plugflow::is_floating(dt) && v.size() > 3) {
          v[1] = std::nan("");
          v[2] = -0.0;
        }
        if (dt == DType::UInt8 || dt == DType::Bool)
          for (auto& x : v) x = std::abs(x);
        Tensor a = make(shape, dt, v, layout);
        const auto expected = reference_nonzero(values(a), shape);
        const int64_t nd = static_cast<int64_t>(shape.size());
        Tensor out = Tensor::empty({static_cast<int64_t>(expected.size()) / nd, nd}, DType::Int64, cpu());
        run_out("nonzero", {a}, {}, {out});
        EXPECT_TRUE(all_equal(int_values(out), expected));
      }
    }
  }
}

TEST_F(IndexingTest, NonzeroChecksItsOutput) {
  Tensor a = make({4}, DType::Float32, {1, 0, 2, 3});
  Tensor wrong = Tensor::empty({2, 1}, DType::Int64, cpu());
  EXPECT_THROW(run_out("nonzero", {a}, {}, {wrong}), plugflow::Error);
}

}  // namespace
}  // namespace cpu_test
