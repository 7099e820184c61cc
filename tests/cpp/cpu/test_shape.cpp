// Shape-family kernels (docs/kernels.md, "Shape ops") against reference loops: sort and topk
// (NaN, ties, descending), tril/triu, flip, pad (reflect / replicate / circular), unique, and
// the along-dim gather / scatter-add, on every layout and on the dtypes each op supports.
#include <algorithm>
#include <numeric>

#include "cpu_test_util.h"

namespace cpu_test {
namespace {

using plugflow::Shape;

// Row-major multi-index of flat index i.
Shape unravel(int64_t i, const Shape& sizes) {
  Shape idx(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    idx[d] = i % sizes[d];
    i /= sizes[d];
  }
  return idx;
}
int64_t ravel(const Shape& idx, const Shape& sizes) {
  int64_t f = 0;
  for (size_t d = 0; d < sizes.size(); ++d) f = f * sizes[d] + idx[d];
  return f;
}

// NaN-largest order with ties broken by index: the stable sort the kernels promise.
bool less_nan_last(double a, double b) { return (!std::isnan(a) && std::isnan(b)) || a < b; }

void reference_sort(const std::vector<double>& v, const Shape& sizes, int64_t dim, bool descending,
                    std::vector<double>& values, std::vector<int64_t>& indices) {
  values.assign(v.size(), 0);
  indices.assign(v.size(), 0);
  const int64_t n = sizes[dim];
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    Shape idx = unravel(i, sizes);
    if (idx[dim] != 0) continue;
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    auto at = [&](int64_t k) {
      Shape j = idx;
      j[dim] = k;
      return v[ravel(j, sizes)];
    };
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return descending ? less_nan_last(at(b), at(a)) : less_nan_last(at(a), at(b));
    });
    for (int64_t k = 0; k < n; ++k) {
      Shape j = idx;
      j[dim] = k;
      values[ravel(j, sizes)] = at(order[k]);
      indices[ravel(j, sizes)] = order[k];
    }
  }
}

class ShapeKernels : public CpuTest {};

TEST_F(ShapeKernels, SortMatchesStableReference) {
  const Shape sizes{3, 7, 4};
  std::vector<double> v = random_values(numel(sizes), -3, 3, 1);  // many ties
  v[5] = NAN;
  v[17] = NAN;
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::Int32, DType::Int8}) {
    std::vector<double> vals = v;
    if (!plugflow::is_floating(dt))
      for (double& x : vals) x = std::isnan(x) ? 0 : x;
    for (Layout layout : kLayouts) {
      for (int64_t dim = 0; dim < 3; ++dim) {
        for (bool desc : {false, true}) {
          const Tensor a = make(sizes, dt, vals, layout);
          auto outs = run("sort", {a}, Attrs{{"dim", dim}, {"descending", desc}, {"stable", true}});
          std::vector<double> ev;
          std::vector<int64_t> ei;
          reference_sort(vals, sizes, dim, desc, ev, ei);
          EXPECT_TRUE(all_close(values(outs[0]), ev, 0)) << dtype_str(dt) << " " << layout_name(layout) << " dim "
                                                          << dim << (desc ? " desc" : "");
          EXPECT_TRUE(all_equal(int_values(outs[1]), ei)) << dtype_str(dt) << " " << layout_name(layout);
        }
      }
    }
  }
}

TEST_F(ShapeKernels, TopkIsThePrefixOfTheSort) {
  const Shape sizes{5, 9};
  std::vector<double> v = random_values(numel(sizes), -50, 50, 2);
  v[3] = NAN;
  for (Layout layout : kLayouts) {
    const Tensor a = make(sizes, DType::Float32, v, layout);
    for (bool largest : {true, false}) {
      for (int64_t k : {0, 1, 4, 9}) {
        auto outs = run("topk", {a}, Attrs{{"k", k}, {"dim", int64_t{1}}, {"largest", largest}, {"sorted", true}});
        ASSERT_EQ(outs[0].sizes(), (Shape{5, k}));
        std::vector<double> ev;
        std::vector<int64_t> ei;
        reference_sort(v, sizes, 1, largest, ev, ei);
        std::vector<double> pv;
        std::vector<int64_t> pi;
        for (int64_t r = 0; r < 5; ++r)
          for (int64_t j = 0; j < k; ++j) {
            pv.push_back(ev[r * 9 + j]);
            pi.push_back(ei[r * 9 + j]);
          }
        EXPECT_TRUE(all_close(values(outs[0]), pv, 0)) << layout_name(layout) << " k " << k;
        EXPECT_TRUE(all_equal(int_values(outs[1]), pi)) << layout_name(layout) << " k " << k;
      }
    }
  }
}

TEST_F(ShapeKernels, TrilTriu) {
  const Shape sizes{2, 3, 5};
  const std::vector<double> v = random_values(numel(sizes), -9, 9, 3);
  for (DType dt : kAllDTypes) {
    std::vector<double> vals = v;
    if (dt == DType::Bool) for (double& x : vals) x = x > 0;
    if (dt == DType::UInt8) for (double& x : vals) x = std::abs(x);
    for (Layout layout : kLayouts) {
      for (int64_t k : {-3, -1, 0, 2, 6}) {
        for (bool lower : {true, false}) {
          const Tensor a = make(sizes, dt, vals, layout);
          Tensor out = run(lower ? "tril" : "triu", {a}, Attrs{{"diagonal", k}})[0];
          std::vector<double> expected(vals.size());
          for (int64_t i = 0; i < numel(sizes); ++i) {
            const Shape idx = unravel(i, sizes);
            const bool keep = lower ? idx[2] - idx[1] <= k : idx[2] - idx[1] >= k;
            expected[i] = keep ? vals[i] : 0;
          }
          EXPECT_TRUE(all_close(values(out), expected, 0)) << dtype_str(dt) << " " << layout_name(layout) << " k " << k;
        }
      }
    }
  }
}

TEST_F(ShapeKernels, TrilInPlaceOnAStridedTensor) {
  const Tensor a = make({4, 4}, DType::Float32, random_values(16, -5, 5, 4), Layout::Gapped);
  const std::vector<double> before = values(a);
  run_out("tril", {a}, Attrs{{"diagonal", int64_t{0}}}, {a});
  const std::vector<double> after = values(a);
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(after[i], i % 4 <= i / 4 ? before[i] : 0.0);
}

TEST_F(ShapeKernels, Flip) {
  const Shape sizes{3, 4, 5};
  const std::vector<double> v = random_values(numel(sizes), -100, 100, 5);
  for (DType dt : {DType::Float64, DType::Int16, DType::Float16}) {
    for (Layout layout : kLayouts) {
      for (Shape dims : {Shape{0}, Shape{2}, Shape{0, 2}, Shape{0, 1, 2}}) {
        Tensor out = run("flip", {make(sizes, dt, v, layout)}, Attrs{{"dims", dims}})[0];
        std::vector<double> expected(v.size());
        for (int64_t i = 0; i < numel(sizes); ++i) {
          Shape idx = unravel(i, sizes);
          for (int64_t d : dims) idx[d] = sizes[d] - 1 - idx[d];
          expected[i] = representable(dt, v[ravel(idx, sizes)]);
        }
        EXPECT_TRUE(all_close(values(out), expected, 0)) << dtype_str(dt) << " " << layout_name(layout);
      }
    }
  }
}

int64_t pad_source(const std::string& mode, int64_t j, int64_t before, int64_t n) {
  int64_t s = j - before;
  if (mode == "reflect") return s < 0 ? -s : (s >= n ? 2 * (n - 1) - s : s);
  if (mode == "replicate") return std::clamp<int64_t>(s, 0, n - 1);
  return ((s % n) + n) % n;
}

TEST_F(ShapeKernels, PadModes) {
  const Shape sizes{2, 3, 5};
  const std::vector<double> v = random_values(numel(sizes), -100, 100, 6);
  const Shape pads{0, 0, 2, 1, 3, -1};  // per dim (before, after)
  for (const std::string mode : {"reflect", "replicate", "circular"}) {
    for (Layout layout : kLayouts) {
      Tensor out = run("pad", {make(sizes, DType::Float32, v, layout)}, Attrs{{"pads", pads}, {"mode", mode}})[0];
      const Shape osz{2, 6, 7};
      ASSERT_EQ(out.sizes(), osz);
      std::vector<double> expected(numel(osz));
      for (int64_t i = 0; i < numel(osz); ++i) {
        Shape idx = unravel(i, osz);
        for (int64_t d = 0; d < 3; ++d) idx[d] = pad_source(mode, idx[d], pads[2 * d], sizes[d]);
        expected[i] = v[ravel(idx, sizes)];
      }
      EXPECT_TRUE(all_close(values(out), expected, 0)) << mode << " " << layout_name(layout);
    }
  }
}

TEST_F(ShapeKernels, UniqueRows) {
  // rows (as pairs): [2,1] [0,5] [2,1] [0,5] [1,1] [0,5]
  const std::vector<double> v{2, 1, 0, 5, 2, 1, 0, 5, 1, 1, 0, 5};
  for (Layout layout : kLayouts) {
    const Tensor a = make({6, 2}, DType::Int64, v, layout);
    auto outs = run("unique", {a}, Attrs{{"consecutive", false}});
    ASSERT_EQ(int_values(outs[3]), (std::vector<int64_t>{3}));
    const std::vector<double> vals = values(outs[0]);
    EXPECT_EQ(std::vector<double>(vals.begin(), vals.begin() + 6), (std::vector<double>{0, 5, 1, 1, 2, 1}));
    EXPECT_EQ(int_values(outs[1]), (std::vector<int64_t>{2, 0, 2, 0, 1, 0}));
    const std::vector<int64_t> counts = int_values(outs[2]);
    EXPECT_EQ(std::vector<int64_t>(counts.begin(), counts.begin() + 3), (std::vector<int64_t>{3, 1, 2}));
    auto cons = run("unique", {a}, Attrs{{"consecutive", true}});
    EXPECT_EQ(int_values(cons[3]), (std::vector<int64_t>{6}));
  }
}

TEST_F(ShapeKernels, GatherAndScatterAddAlongDim) {
  const Shape sizes{3, 4};
  const std::vector<double> v = random_values(12, -9, 9, 7);
  const Tensor a = make(sizes, DType::Float64, v, Layout::Transposed);
  const Tensor index = make({3, 2}, DType::Int64, {3, 0, 1, 1, 2, 0});
  Tensor g = run("_take_along_dim", {a, index}, Attrs{{"dim", int64_t{1}}})[0];
  EXPECT_TRUE(all_close(values(g), {v[3], v[0], v[5], v[5], v[10], v[8]}, 0));
  const Tensor src = make({3, 2}, DType::Float32, {1, 2, 3, 4, 5, 6});
  Tensor s = run("_scatter_add_along_dim", {src, index}, Attrs{{"dim", int64_t{1}}, {"size", sizes}})[0];
  EXPECT_TRUE(all_close(values(s), {2, 0, 0, 1, 0, 7, 0, 0, 6, 0, 5, 0}, 0));  // duplicates accumulate
  const Tensor bad = make({3, 2}, DType::Int64, {4, 0, 1, 1, 2, 0});
  EXPECT_THROW(run("_take_along_dim", {a, bad}, Attrs{{"dim", int64_t{1}}}), plugflow::Error);
}

}  // namespace
}  // namespace cpu_test
