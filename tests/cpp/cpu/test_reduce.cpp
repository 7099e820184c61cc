// Reductions against a reference loop over every input element: several dim sets per shape,
// keepdim, transposed and gapped inputs, strided outputs, long reductions split across
// threads, accumulation accuracy, NaN propagation and first-index ties.
#include <limits>

#include "cpu_test_util.h"
#include "plugflow/error.h"

namespace cpu_test {
namespace {

struct Reference {
  std::vector<double> value;
  std::vector<int64_t> index;
  std::vector<double> abs_sum;  // scale of the rounding error of sums
  int64_t count = 0;            // elements per output
};

// Reduces `in` (row-major values of `shape`) over the dims flagged in `reduced`.
Reference reference(const std::string& op, DType dt, const std::vector<double>& in, const Shape& shape,
                    const std::vector<bool>& reduced) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t n_out = 1, n_red = 1;
  for (int64_t d = 0; d < nd; ++d) (reduced[d] ? n_red : n_out) *= shape[d];
  Reference r;
  r.count = n_red;
  std::vector<long double> acc(n_out, op == "prod" ? 1.0L : 0.0L);
  std::vector<uint64_t> iacc(n_out, op == "prod" ? 1 : 0);  // integers wrap modulo 2^64
  std::vector<double> ext(n_out, NAN);
  std::vector<int64_t> idx(n_out, -1);
  r.abs_sum.assign(n_out, 0.0);
  const bool fl = plugflow::is_floating(dt);
  std::vector<int64_t> mi(nd, 0);
  for (int64_t flat = 0; flat < static_cast<int64_t>(in.size()); ++flat) {
    int64_t rem = flat;
    for (int64_t d = nd - 1; d >= 0; --d) {
      mi[d] = rem % shape[d];
      rem /= shape[d];
    }
    int64_t o = 0, pos = 0;
    for (int64_t d = 0; d < nd; ++d) {
      if (reduced[d]) pos = pos * shape[d] + mi[d];
      else o = o * shape[d] + mi[d];
    }
    const double x = in[flat];
    r.abs_sum[o] += std::abs(x);
    if (op == "sum" || op == "mean") {
      acc[o] += x;
      iacc[o] += static_cast<uint64_t>(static_cast<int64_t>(x));
    } else if (op == "prod") {
      acc[o] *= x;
      iacc[o] *= static_cast<uint64_t>(static_cast<int64_t>(x));
    } else {
      const bool is_max = op == "amax" || op == "max_dim" || op == "argmax";
      if (idx[o] < 0) {
        ext[o] = x;
        idx[o] = pos;
      } else if (!std::isnan(ext[o]) && (std::isnan(x) || (is_max ? x > ext[o] : x < ext[o]))) {
        ext[o] = x;  // strict comparison: the first index wins ties; a NaN wins once and stays
        idx[o] = pos;
      }
    }
  }
  r.value.resize(n_out);
  r.index = idx;
  for (int64_t o = 0; o < n_out; ++o) {
    if (op == "sum" || op == "prod") r.value[o] = fl ? static_cast<double>(acc[o]) : static_cast<double>(static_cast<int64_t>(iacc[o]));
    else if (op == "mean") r.value[o] = static_cast<double>(acc[o] / n_red);
    else r.value[o] = ext[o];
    if (!(op == "argmax" || op == "argmin")) r.value[o] = representable(dt, r.value[o]);
  }
  return r;
}

Shape reduced_shape(const Shape& shape, const std::vector<bool>& reduced, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

std::vector<double> inputs_for(const std::string& op, DType dt, int64_t n, uint32_t seed) {
  if (dt == DType::Bool) return random_values(n, 0, 1, seed);
  const bool fl = plugflow::is_floating(dt);
  if (op == "prod") {
    // Mostly +-1 with a few 2s (integers) or values near 1 (floats), so products stay finite.
    std::mt19937 gen(seed);
    std::vector<double> v(n);
    for (auto& x : v) {
      const uint32_t k = gen() % 16;
      if (fl) x = (k % 2 ? 1 : -1) * (0.875 + 0.0625 * (gen() % 5));
      else x = k == 0 ? 2 : (dt == DType::UInt8 ? 1 : (k % 2 ? 1 : -1));
    }
    return v;
  }
  if (dt == DType::UInt8) return random_values(n, 0, 250, seed);
  return random_values(n, -100, 100, seed, fl);
}

void check_reduce(const std::string& op, DType dt, const Shape& shape, const Shape& dims, bool keepdim, Layout layout,
                  uint32_t seed, bool strided_out = false) {
  SCOPED_TRACE(op + " " + dtype_str(dt) + " " + plugflow::shape_str(shape) + " dims " + plugflow::shape_str(dims) +
               (keepdim ? " keepdim " : " ") + layout_name(layout) + (strided_out ? " strided out" : ""));
  const int64_t n = numel(shape);
  Tensor a = make(shape, dt, inputs_for(op, dt, n, seed), layout);
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t d : dims) reduced[d] = true;
  const Attrs attrs{{"dims", dims}, {"keepdim", keepdim}};
  Tensor out;
  if (strided_out) {
    out = empty_with_layout(reduced_shape(shape, reduced, keepdim), dt, Layout::Gapped);
    run_out(op, {a}, attrs, {out});
  } else {
    out = run(op, {a}, attrs).at(0);
  }
  ASSERT_EQ(out.sizes(), reduced_shape(shape, reduced, keepdim));
  ASSERT_EQ(out.dtype(), dt);
  const Reference r = reference(op, dt, values(a), shape, reduced);
  const std::vector<double> got = values(out);
  ASSERT_EQ(got.size(), r.value.size());
  // Accumulators: double for float32/64, float for float16/bfloat16; the result is rounded
  // once to dt. Sums of mixed signs can cancel, so the error bound scales with sum |x|.
  const double acc_eps = (dt == DType::Float16 || dt == DType::BFloat16) ? 1e-6 : 1e-14;
  int bad = 0;
  for (size_t o = 0; o < got.size(); ++o) {
    const double e = r.value[o];
    double tol = rel_tol(dt) * std::abs(e);
    if (op == "sum") tol += acc_eps * r.abs_sum[o];
    if (op == "mean") tol += acc_eps * r.abs_sum[o] / static_cast<double>(r.count);
    const bool ok = std::isnan(e) ? std::isnan(got[o]) : std::abs(got[o] - e) <= tol;
    if (!ok && bad++ < 5) ADD_FAILURE() << "output " << o << ": got " << got[o] << ", expected " << e;
  }
}

struct ShapeDims {
  Shape shape;
  std::vector<Shape> dim_sets;
};

std::vector<ShapeDims> small_cases() {
  return {
      {{7, 33}, {{0}, {1}, {0, 1}}},
      {{4, 5, 6}, {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}}},
      {{2, 3, 4, 5}, {{0, 2}, {1, 3}, {3}, {0}, {0, 1, 2, 3}}},
      {{5, 1, 7}, {{1}, {0, 2}}},
      {{1}, {{0}}},
      {{1000, 3}, {{0}, {1}}},
      {{3, 1000}, {{0}, {1}}},
  };
}

TEST_F(CpuTest, ReductionsSmallShapesAllDtypesLayouts) {
  uint32_t seed = 1;
  for (const std::string op : {"sum", "prod", "mean", "amax", "amin"})
    for (DType dt : kAllDTypes) {
      if (op == "mean" && !plugflow::is_floating(dt)) continue;
      for (const ShapeDims& sd : small_cases())
        for (const Shape& dims : sd.dim_sets)
          for (Layout l : kLayouts)
            for (bool keepdim : {false, true}) check_reduce(op, dt, sd.shape, dims, keepdim, l, seed++);
    }
}

TEST_F(CpuTest, ReductionsLargeShapesAcrossThreads) {
  uint32_t seed = 1000;
  const std::vector<ShapeDims> large = {
      {{100003}, {{0}}},
      {{301, 337}, {{0}, {1}, {0, 1}}},
      {{40000, 3}, {{0}, {1}}},  // few outputs, long strided reductions: sliced across threads
      {{3, 2, 40000}, {{0, 2}, {2}, {1}}},
      {{64, 2000}, {{1}}},
  };
  for (const std::string op : {"sum", "mean", "amax", "amin", "prod"})
    for (DType dt : {DType::Float32, DType::BFloat16, DType::Int64, DType::Float64})
      for (const ShapeDims& sd : large)
        for (const Shape& dims : sd.dim_sets)
          for (Layout l : kLayouts) {
            if (op == "mean" && !plugflow::is_floating(dt)) continue;
            check_reduce(op, dt, sd.shape, dims, false, l, seed++);
          }
}

TEST_F(CpuTest, ReductionsIntoStridedOutputs) {
  uint32_t seed = 2000;
  for (const std::string op : {"sum", "amax", "mean"})
    for (DType dt : {DType::Float32, DType::Float16})
      for (const ShapeDims& sd : small_cases())
        for (const Shape& dims : sd.dim_sets)
          for (bool keepdim : {false, true}) check_reduce(op, dt, sd.shape, dims, keepdim, Layout::Transposed, seed++, true);
}

TEST_F(CpuTest, SumAccumulatesBeyondTheOutputPrecision) {
  // bfloat16 holds integers exactly only up to 256: a bfloat16 accumulator would stall there.
  Tensor ones = make({100000}, DType::BFloat16, std::vector<double>(100000, 1));
  EXPECT_EQ(values(run("sum", {ones}, Attrs{{"dims", Shape{0}}, {"keepdim", false}}).at(0))[0],
            representable(DType::BFloat16, 100000));
  // float32: 10^7 copies of 0.1f summed in double are exact to float precision.
  const int64_t n = 10000000;
  Tensor tenth = Tensor::empty({n}, DType::Float32, cpu());
  std::fill(tenth.data<float>(), tenth.data<float>() + n, 0.1f);
  const double got = values(run("sum", {tenth}, Attrs{{"dims", Shape{0}}, {"keepdim", false}}).at(0))[0];
  EXPECT_NEAR(got, static_cast<double>(0.1f) * n, static_cast<double>(0.1f) * n * 1e-7);
  const double mean = values(run("mean", {tenth}, Attrs{{"dims", Shape{0}}, {"keepdim", false}}).at(0))[0];
  EXPECT_EQ(mean, static_cast<double>(0.1f));
}

TEST_F(CpuTest, ReductionsOverAnEmptyDim) {
  Tensor a = Tensor::empty({3, 0}, DType::Float32, cpu());
  const Attrs attrs{{"dims", Shape{1}}, {"keepdim", false}};
  EXPECT_TRUE(all_close(values(run("sum", {a}, attrs).at(0)), {0, 0, 0}, 0));
  EXPECT_TRUE(all_close(values(run("prod", {a}, attrs).at(0)), {1, 1, 1}, 0));
  EXPECT_TRUE(all_close(values(run("mean", {a}, attrs).at(0)), {NAN, NAN, NAN}, 0));
}

TEST_F(CpuTest, ExtremesPropagateNaN) {
  const double nan = NAN;
  for (DType dt : kFloatDTypes) {
    Tensor a = make({2, 4}, dt, {1, nan, 3, 2, 5, 4, -1, 0});
    for (const char* op : {"amax", "amin"}) {
      EXPECT_TRUE(all_close(values(run(op, {a}, Attrs{{"dims", Shape{1}}, {"keepdim", false}}).at(0)),
                            {nan, std::string(op) == "amax" ? 5.0 : -1.0}, 0))
          << op << " " << dtype_str(dt);
      EXPECT_TRUE(std::isnan(values(run(op, {a}, Attrs{{"dims", Shape{0, 1}}, {"keepdim", false}}).at(0))[0]));
    }
    // NaN deep inside a long contiguous run (the vectorized lanes) and across thread slices.
    std::vector<double> v(100003, 1);
    v[99999] = nan;
    Tensor big = make({100003}, dt, v);
    EXPECT_TRUE(std::isnan(values(run("amax", {big}, Attrs{{"dims", Shape{0}}, {"keepdim", false}}).at(0))[0]));
    EXPECT_TRUE(std::isnan(values(run("sum", {big}, Attrs{{"dims", Shape{0}}, {"keepdim", false}}).at(0))[0]));
  }
}

// ---- max_dim / min_dim / argmax / argmin ------------------------------------------------------

void check_indexed(const std::string& op, DType dt, const Shape& shape, int64_t dim, bool keepdim, Layout layout,
                   uint32_t seed, const std::vector<double>* fixed = nullptr) {
  SCOPED_TRACE(op + " " + dtype_str(dt) + " " + plugflow::shape_str(shape) + " dim " + std::to_string(dim) +
               (keepdim ? " keepdim " : " ") + layout_name(layout));
  const int64_t n = numel(shape);
  // Few distinct values: many ties, so the first-index rule is exercised.
  std::vector<double> v = fixed ? *fixed : (dt == DType::Bool ? random_values(n, 0, 1, seed)
                                            : dt == DType::UInt8 ? random_values(n, 0, 6, seed)
                                                                  : random_values(n, -3, 3, seed));
  Tensor a = make(shape, dt, v, layout);
  std::vector<bool> reduced(shape.size(), false);
  reduced[dim] = true;
  const Reference r = reference(op, dt, values(a), shape, reduced);
  const auto outs = run(op, {a}, Attrs{{"dim", dim}, {"keepdim", keepdim}});
  const Shape out_shape = reduced_shape(shape, reduced, keepdim);
  const bool values_too = op == "max_dim" || op == "min_dim";
  ASSERT_EQ(outs.size(), values_too ? 2u : 1u);
  const Tensor& indices = outs.back();
  ASSERT_EQ(indices.dtype(), DType::Int64);
  ASSERT_EQ(indices.sizes(), out_shape);
  EXPECT_TRUE(all_equal(int_values(indices), r.index));
  if (values_too) {
    ASSERT_EQ(outs[0].dtype(), dt);
    EXPECT_TRUE(all_close(values(outs[0]), r.value, 0));
  }
}

TEST_F(CpuTest, IndexedReductionsAllDtypesDimsLayouts) {
  uint32_t seed = 3000;
  for (const std::string op : {"max_dim", "min_dim", "argmax", "argmin"})
    for (DType dt : kAllDTypes)
      for (const Shape& shape : {Shape{7, 33}, Shape{4, 5, 6}, Shape{1000, 3}, Shape{3, 1000}, Shape{1}, Shape{5, 1}})
        for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim)
          for (Layout l : kLayouts)
            for (bool keepdim : {false, true}) check_indexed(op, dt, shape, dim, keepdim, l, seed++);
}

TEST_F(CpuTest, IndexedReductionsLarge) {
  uint32_t seed = 4000;
  for (const std::string op : {"max_dim", "argmin"})
    for (DType dt : {DType::Float32, DType::Int16, DType::BFloat16})
      for (const Shape& shape : {Shape{100003}, Shape{40000, 3}, Shape{3, 40000}, Shape{301, 337}})
        for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim)
          for (Layout l : {Layout::Contiguous, Layout::Transposed}) check_indexed(op, dt, shape, dim, false, l, seed++);
}

TEST_F(CpuTest, IndexedReductionsNaNWinsAtItsFirstIndex) {
  const double nan = NAN;
  // PyTorch 1.13: torch.max(torch.tensor([1., nan, 3., nan]), 0) -> (nan, 1).
  const std::vector<double> v = {1, nan, 3, nan};
  for (const std::string op : {"max_dim", "min_dim", "argmax", "argmin"})
    for (DType dt : kFloatDTypes) check_indexed(op, dt, {4}, 0, false, Layout::Contiguous, 0, &v);
  Tensor a = make({4}, DType::Float32, v);
  EXPECT_TRUE(all_equal(int_values(run("argmax", {a}, Attrs{{"dim", int64_t{0}}, {"keepdim", false}}).at(0)), {1}));
  // Long rows split across threads: the NaN in the second half still wins, at its own index.
  std::vector<double> w(100003, 0);
  w[5] = 7;
  w[90000] = nan;
  w[95000] = nan;
  check_indexed("argmax", DType::Float32, {100003}, 0, false, Layout::Contiguous, 0, &w);
  std::vector<double> ties(100003, 2);
  check_indexed("argmin", DType::Float64, {100003}, 0, false, Layout::Contiguous, 0, &ties);  // index 0
}

}  // namespace
}  // namespace cpu_test
