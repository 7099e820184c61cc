// CUDA conformance of the op families beyond the elementwise core (docs/kernels.md: shape ops,
// reduction family, indexing family, math family): every result on the device against the CPU
// plugin's on the same random inputs, through the functional API, on contiguous, transposed,
// gapped and broadcast views, odd and edge sizes (1, a single long line, many short lines),
// NaN/inf and ties, and out-of-range indices (same exception on both devices).
//
// Without a GPU the comparisons skip; the registration test runs everywhere.
// PF_CUDA_CONFORMANCE_SELFCHECK=1 runs the comparisons with the CPU as the device under test
// (a check of this file's harness on a machine without GPU).
//
// Least squares (linalg_lstsq) is compared with the 'gels' driver, the only one on CUDA: QR on
// both devices (LAPACK on the CPU, cuSOLVER + cuBLAS on CUDA), so within rounding.
#include <exception>
#include <typeinfo>

#include "conformance_harness.h"
#include "opdefs.h"

namespace {

using namespace plugflow;
using namespace cuda_conformance;
namespace ops = plugflow::ops;

// The ops the four families register (each with the CPU plugin's dtypes), from their definitions
// (core/opdefs/shape.yaml, indexing.yaml, linalg.yaml, math.yaml, along_dim.yaml, moments.yaml).
const std::vector<std::string> kFamilyOps = {
#define PF_X(name, ...) name,
    PF_OPDEFS_SHAPE(PF_X)
    PF_OPDEFS_INDEXING(PF_X)
    PF_OPDEFS_LINALG(PF_X)
    PF_OPDEFS_TERNARY(PF_X)
    PF_OPDEFS_SCAN(PF_X)
    PF_OPDEFS_SOFTMAX(PF_X)
    PF_OPDEFS_MOMENTS(PF_X)
#undef PF_X
};

// The family ops the CUDA plugin lacks by definition (`cuda: []` in their entries: linalg.yaml's
// LAPACK decompositions), left out of the comparisons of the two plugins.
const std::set<std::string> kCpuOnlyOps = [] {
  std::set<std::string> names;
#define PF_X(name, cpu_dtypes, cuda_dtypes) \
  if (std::set<DType>{PF_OPDEFS_UNPAREN cuda_dtypes}.empty()) names.insert(name);
  PF_OPDEFS_KERNEL_DTYPES(PF_X)
#undef PF_X
  return names;
}();

const Tol kExact{0, 0};

// An int64 index tensor with values in [lo, hi] on both devices (contiguous, or transposed
// when `transposed` and 2-d or more).
Pair index_pair(const Shape& sizes, int64_t lo, int64_t hi, std::mt19937& rng, bool transposed = false) {
  std::vector<double> v(static_cast<size_t>(shape_numel(sizes)));
  for (auto& x : v) x = static_cast<double>(lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)));
  Shape base_sizes = sizes;
  if (transposed) std::reverse(base_sizes.begin(), base_sizes.end());
  const Tensor c = cpu_tensor(base_sizes, DType::Int64, v);
  const Tensor d = ops::to(c, target(), std::nullopt, true);
  if (!transposed || sizes.size() < 2) return {c, d};
  Shape perm(sizes.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(perm.size() - 1 - i);
  return {ops::permute(c, perm), ops::permute(d, perm)};
}

// A permutation of [0, n) on both devices (distinct indices: writes without duplicates).
Pair permutation_pair(int64_t n, std::mt19937& rng) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i);
  std::shuffle(v.begin(), v.end(), rng);
  const Tensor c = cpu_tensor({n}, DType::Int64, v);
  return {c, ops::to(c, target(), std::nullopt, true)};
}

// "<exception type>: <message>" of f, or "no error".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return std::string(typeid(e).name()) + ": " + e.what();
  }
  return "no error";
}

// Sums whose order differs between the devices (atomics, block scans): a few roundings of the dtype.
Tol accumulate_tol(DType dt) {
  if (dt == DType::Float16 || dt == DType::BFloat16) return {3e-2, 5e-2};
  return {1e-5, 1e-5};
}

const std::vector<View> kViews = {View::Contiguous, View::Transposed, View::Gapped, View::Broadcast};

// ---- runs everywhere --------------------------------------------------------------------------

TEST_F(CudaPlugin, RegistersTheFamilyKernelsOfTheCpuPlugin) {
  const auto cpu = kernels_of("cpu", DeviceType::CPU);
  const auto cuda = kernels_of("cuda", DeviceType::CUDA);
  for (const std::string& op : kFamilyOps) {
    if (kCpuOnlyOps.count(op) > 0) continue;
    for (DType t : kAllDTypes) {
      const bool c = cpu.count({op, t}) > 0, g = cuda.count({op, t}) > 0;
      EXPECT_EQ(c, g) << "op '" << op << "' dtype " << dtype_name(t) << ": cpu " << (c ? "has" : "lacks")
                      << " a kernel, cuda " << (g ? "has" : "lacks") << " one";
    }
    EXPECT_FALSE(common_dtypes(op).empty()) << "no dtype of '" << op << "' on both devices";
  }
}

TEST_F(CudaPlugin, RegistersTheDefinedDtypesOfEveryKernelOp) {
  // The ops with schemas of their own (`family: kernel` in core/opdefs/*.yaml) declare the CUDA
  // plugin's dtypes (none for an op it lacks); it registers exactly those.
  const auto cuda = kernels_of("cuda", DeviceType::CUDA);
#define PF_X(name, cpu_dtypes, cuda_dtypes)                                    \
  {                                                                           \
    const std::set<DType> declared = {PF_OPDEFS_UNPAREN cuda_dtypes};         \
    std::set<DType> registered;                                               \
    for (DType t : kAllDTypes)                                                \
      if (cuda.count({name, t}) > 0) registered.insert(t);                    \
    EXPECT_EQ(registered, declared) << name;                                  \
  }
  PF_OPDEFS_KERNEL_DTYPES(PF_X)
#undef PF_X
}

// ---- shape ops ---------------------------------------------------------------------------------

TEST_F(CudaVsCpu, SortIsStableAndExactOnEveryLayout) {
  const Shape shape{5, 37, 70};
  for (DType dt : common_dtypes("sort")) {
    for (View v : kViews) {
      Pair a = make_pair(shape, dt, v, Values::Small, rng);  // many ties
      inject_nans(a, rng, 30);
      for (int64_t dim : {0, 1, 2, -1}) {
        for (bool descending : {false, true}) {
          const std::string where = ctx("sort", dt, view_name(v)) + " dim " + std::to_string(dim) +
                                    (descending ? " descending" : "");
          auto [vc, ic] = ops::sort(a.cpu, dim, descending, /*stable=*/true);
          auto [vd, id] = ops::sort(a.dev, dim, descending, /*stable=*/true);
          EXPECT_TRUE(matches(vc, vd, kExact)) << where << " values";
          EXPECT_TRUE(matches(ic, id)) << where << " indices";
        }
      }
    }
  }
  // -0.0 ties +0.0 (input order kept), infinities, NaN; one long line (the unsegmented sort),
  // many short lines (several segmented batches), size-1 lines and a 0-d tensor.
  const std::vector<double> specials = {0.0, -0.0, INFINITY, -INFINITY, NAN, 0.0, -0.0, 1e30, -1e30, NAN};
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Pair a = make_pair({3, 100}, dt, View::Gapped, Values::Small, rng, specials);
    for (bool descending : {false, true}) {
      auto [vc, ic] = ops::sort(a.cpu, 1, descending, false);
      auto [vd, id] = ops::sort(a.dev, 1, descending, false);
      EXPECT_TRUE(matches(vc, vd, kExact)) << ctx("sort", dt, "specials");
      EXPECT_TRUE(matches(ic, id)) << ctx("sort", dt, "specials indices");
    }
  }
  for (const Shape& s : {Shape{200003}, Shape{70001, 3}, Shape{9, 1}, Shape{1}, Shape{}}) {
    Pair a = make_pair(s, DType::Float32, View::Contiguous, Values::Any, rng);
    const int64_t dim = s.size() == 2 ? 0 : -1;
    auto [vc, ic] = ops::sort(a.cpu, dim, false, false);
    auto [vd, id] = ops::sort(a.dev, dim, false, false);
    EXPECT_TRUE(matches(vc, vd, kExact)) << "sort of shape " << shape_str(s);
    EXPECT_TRUE(matches(ic, id)) << "sort indices of shape " << shape_str(s);
  }
  Pair many = make_pair({70001, 5}, DType::Int32, View::Transposed, Values::Small, rng);
  EXPECT_TRUE(matches(ops::argsort(many.cpu, 1, true, true), ops::argsort(many.dev, 1, true, true)))
      << "argsort of many short lines";
}

TEST_F(CudaVsCpu, TopkPicksTheFirstOfEqualValues) {
  const Shape shape{6, 41, 33};
  for (DType dt : common_dtypes("topk")) {
    for (View v : {View::Contiguous, View::Transposed, View::Gapped}) {
      Pair a = make_pair(shape, dt, v, Values::Small, rng);
      inject_nans(a, rng, 20);
      for (int64_t dim : {0, 1, -1}) {
        const int64_t n = shape[static_cast<size_t>(dim < 0 ? dim + 3 : dim)];
        for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{4}, n}) {
          for (bool largest : {true, false}) {
            const std::string where = ctx("topk", dt, view_name(v)) + " dim " + std::to_string(dim) + " k " +
                                      std::to_string(k) + (largest ? " largest" : " smallest");
            auto [vc, ic] = ops::topk(a.cpu, k, dim, largest, true);
            auto [vd, id] = ops::topk(a.dev, k, dim, largest, true);
            EXPECT_TRUE(matches(vc, vd, kExact)) << where << " values";
            EXPECT_TRUE(matches(ic, id)) << where << " indices";
          }
        }
      }
    }
  }
  Pair big = make_pair({3, 100000}, DType::Float32, View::Contiguous, Values::Any, rng);
  auto [vc, ic] = ops::topk(big.cpu, 7, 1, true, true);
  auto [vd, id] = ops::topk(big.dev, 7, 1, true, true);
  EXPECT_TRUE(matches(vc, vd, kExact)) << "topk of long lines";
  EXPECT_TRUE(matches(ic, id)) << "topk indices of long lines";
  Pair one = make_pair({5}, DType::Int64, View::Contiguous, Values::Any, rng);
  EXPECT_EQ(error_of([&] { ops::topk(one.cpu, 6, 0, true, true); }),
            error_of([&] { ops::topk(one.dev, 6, 0, true, true); }))
      << "k > size must fail alike";
}

TEST_F(CudaVsCpu, UniqueValuesInverseAndCounts) {
  for (DType dt : common_dtypes("unique")) {
    for (View v : {View::Contiguous, View::Transposed, View::Gapped}) {
      Pair a = make_pair({23, 4}, dt, v, Values::Small, rng);
      inject_nans(a, rng, 4);
      const std::string where = ctx("unique", dt, view_name(v));
      for (std::optional<int64_t> dim : {std::optional<int64_t>{}, std::optional<int64_t>{0},
                                         std::optional<int64_t>{1}}) {
        const std::string d = dim ? " dim " + std::to_string(*dim) : " flattened";
        const ops::UniqueResult c = ops::unique(a.cpu, true, dim), g = ops::unique(a.dev, true, dim);
        EXPECT_TRUE(matches(c.values, g.values, kExact)) << where << d << " values";
        EXPECT_TRUE(matches(c.inverse, g.inverse)) << where << d << " inverse";
        EXPECT_TRUE(matches(c.counts, g.counts)) << where << d << " counts";
        const ops::UniqueResult cc = ops::unique_consecutive(a.cpu, dim), gc = ops::unique_consecutive(a.dev, dim);
        EXPECT_TRUE(matches(cc.values, gc.values, kExact)) << where << d << " consecutive values";
        EXPECT_TRUE(matches(cc.inverse, gc.inverse)) << where << d << " consecutive inverse";
        EXPECT_TRUE(matches(cc.counts, gc.counts)) << where << d << " consecutive counts";
      }
    }
  }
  Pair big = make_pair({300001}, DType::Int32, View::Contiguous, Values::Any, rng);
  const ops::UniqueResult c = ops::unique(big.cpu, true, std::nullopt), g = ops::unique(big.dev, true, std::nullopt);
  EXPECT_TRUE(matches(c.values, g.values)) << "unique of 300001 int32";
  EXPECT_TRUE(matches(c.inverse, g.inverse)) << "unique inverse of 300001 int32";
  EXPECT_TRUE(matches(c.counts, g.counts)) << "unique counts of 300001 int32";
  Pair single = make_pair({1}, DType::Float32, View::Contiguous, Values::Any, rng);
  EXPECT_TRUE(matches(ops::unique(single.cpu, true, std::nullopt).values,
                      ops::unique(single.dev, true, std::nullopt).values, kExact))
      << "unique of one element";
}

TEST_F(CudaVsCpu, TrilTriuFlipAndPadGather) {
  for (DType dt : common_dtypes("tril")) {
    for (View v : kViews) {
      Pair a = make_pair({3, 17, 29}, dt, v, Values::Any, rng);
      for (int64_t diagonal : {int64_t{-40}, int64_t{-3}, int64_t{0}, int64_t{2}, int64_t{40}}) {
        EXPECT_TRUE(matches(ops::tril(a.cpu, diagonal), ops::tril(a.dev, diagonal), kExact))
            << ctx("tril", dt, view_name(v)) << " diagonal " << diagonal;
        EXPECT_TRUE(matches(ops::triu(a.cpu, diagonal), ops::triu(a.dev, diagonal), kExact))
            << ctx("triu", dt, view_name(v)) << " diagonal " << diagonal;
      }
    }
    for (const Shape& dims : {Shape{0}, Shape{1}, Shape{-1}, Shape{0, 2}, Shape{0, 1, 2}}) {
      Pair a = make_pair({4, 13, 9}, dt, View::Gapped, Values::Any, rng);
      EXPECT_TRUE(matches(ops::flip(a.cpu, dims), ops::flip(a.dev, dims), kExact))
          << ctx("flip", dt) << " dims " << shape_str(dims);
    }
  }
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 11}, {3, 2}},              // 1-d padding of the last dim
      {{2, 3, 7, 9}, {1, 4, 2, 0}},      // 2-d
      {{1, 2, 5, 6, 7}, {2, 1, 0, 3, 4, 2}},  // 3-d
      {{2, 3, 11}, {-2, 3}},             // negative pads crop
      {{1, 1, 1}, {0, 0}}};
  for (const char* mode : {"reflect", "replicate", "circular"}) {
    for (DType dt : {DType::Float32, DType::Float16, DType::Int64, DType::Bool}) {
      for (const auto& [shape, pads] : cases) {
        for (View v : {View::Contiguous, View::Transposed}) {
          Pair a = make_pair(shape, dt, v, Values::Any, rng);
          const std::string where = ctx("pad", dt, mode) + " " + view_name(v) + " shape " + shape_str(shape) +
                                    " pads " + shape_str(pads);
          const std::string ec = error_of([&] { ops::pad(a.cpu, pads, mode); });
          EXPECT_EQ(ec, error_of([&] { ops::pad(a.dev, pads, mode); })) << where;
          if (ec == "no error") {
            EXPECT_TRUE(matches(ops::pad(a.cpu, pads, mode), ops::pad(a.dev, pads, mode), kExact)) << where;
          }
        }
      }
    }
  }
}

// ---- indexing family ----------------------------------------------------------------------------

TEST_F(CudaVsCpu, GatherScatterAndAlongDimKernels) {
  for (DType dt : common_dtypes("index")) {
    Pair self = make_pair({7, 11, 13}, dt, View::Transposed, Values::Any, rng);
    for (int64_t dim : {0, 1, 2}) {
      const int64_t n = self.cpu.sizes()[static_cast<size_t>(dim)];
      Shape ishape{5, 9, 6};
      ishape[static_cast<size_t>(dim)] = 17;  // longer than the dim: repeats
      Pair index = index_pair(ishape, 0, n - 1, rng, /*transposed=*/dim == 1);
      const std::string where = ctx("gather", dt) + " dim " + std::to_string(dim);
      EXPECT_TRUE(matches(ops::gather(self.cpu, dim, index.cpu), ops::gather(self.dev, dim, index.dev), kExact)) << where;
      EXPECT_TRUE(matches(ops::take_along_dim_internal(self.cpu, dim, index.cpu),
                          ops::take_along_dim_internal(self.dev, dim, index.dev), kExact))
          << ctx("_take_along_dim", dt) << " dim " << dim;
      if (dt != DType::Bool) {
        Pair src = make_pair(ishape, dt, View::Gapped, Values::Small, rng);
        EXPECT_TRUE(matches(ops::scatter_add(self.cpu, dim, index.cpu, src.cpu),
                            ops::scatter_add(self.dev, dim, index.dev, src.dev), kExact))
            << ctx("scatter_add", dt) << " dim " << dim;
        Shape out_sizes = self.cpu.sizes();
        EXPECT_TRUE(matches(ops::scatter_add_internal(src.cpu, dim, index.cpu, out_sizes),
                            ops::scatter_add_internal(src.dev, dim, index.dev, out_sizes), accumulate_tol(dt)))
            << ctx("_scatter_add_along_dim", dt) << " dim " << dim;
      }
    }
    // scatter without duplicates: a permutation along dim 0 writes each element once.
    Pair perm = permutation_pair(7, rng);
    const Tensor idx_c = ops::contiguous(ops::expand(ops::reshape(perm.cpu, {7, 1, 1}), {7, 11, 13}));
    const Tensor idx_d = ops::contiguous(ops::expand(ops::reshape(perm.dev, {7, 1, 1}), {7, 11, 13}));
    Pair src = make_pair({7, 11, 13}, dt, View::Gapped, Values::Any, rng);
    EXPECT_TRUE(matches(ops::scatter(self.cpu, 0, idx_c, src.cpu), ops::scatter(self.dev, 0, idx_d, src.dev), kExact))
        << ctx("scatter", dt);
    EXPECT_TRUE(matches(ops::scatter(self.cpu, 0, idx_c, Scalar(int64_t{1})),
                        ops::scatter(self.dev, 0, idx_d, Scalar(int64_t{1})), kExact))
        << ctx("scatter value", dt);
  }
  // Out-of-range indices: the same exception and message on both devices.
  Pair self = make_pair({4, 5}, DType::Float32, View::Contiguous, Values::Any, rng);
  for (int64_t bad : {int64_t{5}, int64_t{-1}}) {
    Pair index = index_pair({2, 3}, 0, 4, rng);
    ops::fill_(index.cpu, Scalar(bad));
    ops::fill_(index.dev, Scalar(bad));
    EXPECT_EQ(error_of([&] { ops::gather(self.cpu, 1, index.cpu); }),
              error_of([&] { ops::gather(self.dev, 1, index.dev); }))
        << "gather with index " << bad;
    Pair src = make_pair({2, 3}, DType::Float32, View::Contiguous, Values::Any, rng);
    EXPECT_EQ(error_of([&] { ops::scatter_add(self.cpu, 1, index.cpu, src.cpu); }),
              error_of([&] { ops::scatter_add(self.dev, 1, index.dev, src.dev); }))
        << "scatter_add with index " << bad;
  }
  // The device still works after a reported bad index.
  EXPECT_TRUE(matches(ops::reduce("sum", self.cpu, {}, false), ops::reduce("sum", self.dev, {}, false)));
}

TEST_F(CudaVsCpu, IndexSelectIndexAddTakeAndAdvancedIndexing) {
  for (DType dt : common_dtypes("index_put")) {
    Pair self = make_pair({9, 8, 7}, dt, View::Gapped, Values::Any, rng);
    for (int64_t dim : {0, 1, 2}) {
      const int64_t n = self.cpu.sizes()[static_cast<size_t>(dim)];
      Pair index = index_pair({12}, 0, n - 1, rng);
      EXPECT_TRUE(matches(ops::index_select(self.cpu, dim, index.cpu), ops::index_select(self.dev, dim, index.dev),
                          kExact))
          << ctx("index_select", dt) << " dim " << dim;
      if (dt != DType::Bool) {
        Shape src_shape = self.cpu.sizes();
        src_shape[static_cast<size_t>(dim)] = 12;
        Pair source = make_pair(src_shape, dt, View::Transposed, Values::Small, rng);
        EXPECT_TRUE(matches(ops::index_add(self.cpu, dim, index.cpu, source.cpu),
                            ops::index_add(self.dev, dim, index.dev, source.dev), kExact))
            << ctx("index_add", dt) << " dim " << dim;
      }
    }
    Pair flat = index_pair({6, 5}, -9 * 8 * 7, 9 * 8 * 7 - 1, rng, true);  // negative indices wrap
    EXPECT_TRUE(matches(ops::take(self.cpu, flat.cpu), ops::take(self.dev, flat.dev), kExact)) << ctx("take", dt);
    // t[i, j] with broadcast index tensors, and t[i, j] = v / += v.
    Pair i0 = index_pair({4, 1}, -9, 8, rng), i1 = index_pair({1, 3}, 0, 7, rng);
    EXPECT_TRUE(matches(ops::index(self.cpu, {i0.cpu, i1.cpu}), ops::index(self.dev, {i0.dev, i1.dev}), kExact))
        << ctx("index", dt);
    Pair values = make_pair({4, 3, 7}, dt, View::Contiguous, Values::Small, rng);
    EXPECT_TRUE(matches(ops::index_put(self.cpu, {i0.cpu, i1.cpu}, values.cpu, /*accumulate=*/true),
                        ops::index_put(self.dev, {i0.dev, i1.dev}, values.dev, true), kExact))
        << ctx("index_put accumulate", dt);
    Pair rows = permutation_pair(9, rng);
    Pair row_values = make_pair({9, 8, 7}, dt, View::Transposed, Values::Any, rng);
    EXPECT_TRUE(matches(ops::index_put(self.cpu, {rows.cpu}, row_values.cpu, false),
                        ops::index_put(self.dev, {rows.dev}, row_values.dev, false), kExact))
        << ctx("index_put", dt);
  }
  // Many duplicates: integers and bool through atomics on 1-, 2-, 4- and 8-byte elements, floats
  // summed in iteration order with the CPU's rounding (bit-identical).
  for (DType dt : {DType::Int8, DType::UInt8, DType::Int16, DType::Int32, DType::Int64, DType::Float16,
                   DType::BFloat16, DType::Float32, DType::Float64, DType::Bool}) {
    Pair self = make_pair({6}, dt, View::Contiguous, Values::Small, rng);
    Pair index = index_pair({5000}, 0, 5, rng);
    Pair values = make_pair({5000}, dt, View::Contiguous, Values::Small, rng);
    EXPECT_TRUE(matches(ops::index_put(self.cpu, {index.cpu}, values.cpu, true),
                        ops::index_put(self.dev, {index.dev}, values.dev, true), kExact))
        << ctx("index_put accumulate duplicates", dt);
  }
  Pair self = make_pair({4, 5}, DType::Int32, View::Contiguous, Values::Any, rng);
  Pair bad = index_pair({3}, 7, 7, rng);
  EXPECT_EQ(error_of([&] { ops::index_select(self.cpu, 1, bad.cpu); }),
            error_of([&] { ops::index_select(self.dev, 1, bad.dev); }));
  EXPECT_EQ(error_of([&] { ops::take(self.cpu, bad.cpu); }), error_of([&] { ops::take(self.dev, bad.dev); }));
  EXPECT_EQ(error_of([&] { ops::index(self.cpu, {bad.cpu}); }), error_of([&] { ops::index(self.dev, {bad.dev}); }));
}

TEST_F(CudaVsCpu, WhereMaskedOpsAndNonzero) {
  for (DType dt : common_dtypes("where")) {
    for (View v : kViews) {
      Pair a = make_pair({13, 21}, dt, v, Values::Any, rng);
      Pair b = make_pair({13, 21}, dt, View::Transposed, Values::Any, rng);
      Pair mask = make_pair({13, 21}, DType::Bool, View::Gapped, Values::Any, rng);
      const std::string where = ctx("where", dt, view_name(v));
      EXPECT_TRUE(matches(ops::where(mask.cpu, a.cpu, b.cpu), ops::where(mask.dev, a.dev, b.dev), kExact)) << where;
      EXPECT_TRUE(matches(ops::masked_fill(a.cpu, mask.cpu, Scalar(int64_t{1})),
                          ops::masked_fill(a.dev, mask.dev, Scalar(int64_t{1})), kExact))
          << ctx("masked_fill", dt, view_name(v));
      EXPECT_TRUE(matches(ops::masked_select(a.cpu, mask.cpu), ops::masked_select(a.dev, mask.dev), kExact))
          << ctx("masked_select", dt, view_name(v));
      EXPECT_TRUE(matches(ops::nonzero(a.cpu), ops::nonzero(a.dev))) << ctx("nonzero", dt, view_name(v));
    }
    Pair cube = make_pair({3, 1, 5, 4}, dt, View::Transposed, Values::Small, rng);
    EXPECT_TRUE(matches(ops::nonzero(cube.cpu), ops::nonzero(cube.dev))) << ctx("nonzero", dt, "4-d");
  }
  // NaN is non-zero, -0.0 is zero; a large input spans many blocks of the scan.
  const std::vector<double> specials = {0.0, -0.0, NAN, INFINITY, 0.0, 1e-30};
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    Pair a = make_pair({301, 1001}, dt, View::Contiguous, Values::Small, rng, specials);
    EXPECT_TRUE(matches(ops::nonzero(a.cpu), ops::nonzero(a.dev))) << ctx("nonzero", dt, "specials, large");
  }
  Pair in_place = make_pair({17, 19}, DType::Float32, View::Gapped, Values::Any, rng);
  Pair mask = make_pair({17, 19}, DType::Bool, View::Contiguous, Values::Any, rng);
  ops::masked_fill_(in_place.cpu, mask.cpu, Scalar(-2.5));
  ops::masked_fill_(in_place.dev, mask.dev, Scalar(-2.5));
  EXPECT_TRUE(matches(in_place.cpu, in_place.dev, kExact)) << "masked_fill_ on a gapped view";
}

// ---- reduction family --------------------------------------------------------------------------

TEST_F(CudaVsCpu, VarStdMeanAndNorm) {
  const Shape shape{6, 37, 129};
  const std::vector<Shape> dim_sets = {{}, {0}, {1}, {2}, {0, 2}, {1, 2}};
  for (DType dt : common_dtypes("var_mean")) {
    const Tol tol = dt == DType::Float32 ? Tol{1e-5, 1e-6} : tolerance(dt);
    for (View v : kViews) {
      Pair a = make_pair(shape, dt, v, Values::Any, rng);
      for (const Shape& dims : dim_sets) {
        for (double correction : {0.0, 1.0, 2.5}) {
          const std::string where = ctx("var_mean", dt, view_name(v)) + " dims " + shape_str(dims) + " correction " +
                                    std::to_string(correction);
          auto [vc, mc] = ops::var_mean(a.cpu, dims, correction, true);
          auto [vd, md] = ops::var_mean(a.dev, dims, correction, true);
          EXPECT_TRUE(matches(vc, vd, tol)) << where << " var";
          EXPECT_TRUE(matches(mc, md, tol)) << where << " mean";
          EXPECT_TRUE(matches(ops::std_dev(a.cpu, dims, correction, false), ops::std_dev(a.dev, dims, correction, false),
                              tol))
              << where << " std";
        }
      }
      for (double p : {0.0, 1.0, 2.0, 3.0, -1.5, double(INFINITY), -double(INFINITY)}) {
        Pair b = make_pair(shape, dt, v, Values::Small, rng);  // zeros for p = 0 and negative p
        inject_nans(b, rng, p == INFINITY ? 2 : 0);
        for (const Shape& dims : dim_sets) {
          EXPECT_TRUE(matches(ops::norm(b.cpu, p, dims, false), ops::norm(b.dev, p, dims, false),
                              dt == DType::Float32 ? Tol{1e-5, 1e-5} : tolerance(dt)))
              << ctx("norm", dt, view_name(v)) << " p " << p << " dims " << shape_str(dims);
        }
      }
    }
  }
  // N <= correction (inf / nan), a slice of one element, and a long reduction (chunked).
  Pair small = make_pair({3, 2}, DType::Float64, View::Contiguous, Values::Any, rng);
  EXPECT_TRUE(matches(ops::var(small.cpu, {1}, 2.0, false), ops::var(small.dev, {1}, 2.0, false)));
  EXPECT_TRUE(matches(ops::var(small.cpu, {1}, 5.0, false), ops::var(small.dev, {1}, 5.0, false)));
  Pair single = make_pair({1}, DType::Float32, View::Contiguous, Values::Any, rng);
  EXPECT_TRUE(matches(ops::var(single.cpu, {0}, 1.0, false), ops::var(single.dev, {0}, 1.0, false)));
  Pair lng = make_pair({2, 1 << 20}, DType::Float32, View::Contiguous, Values::Any, rng);
  EXPECT_TRUE(matches(ops::var(lng.cpu, {1}, 1.0, false), ops::var(lng.dev, {1}, 1.0, false), Tol{1e-5, 1e-5}));
  EXPECT_TRUE(matches(ops::norm(lng.cpu, 2.0, {}, false), ops::norm(lng.dev, 2.0, {}, false), Tol{1e-5, 1e-5}));
}

TEST_F(CudaVsCpu, AllAnyCumsumCumprod) {
  const Shape shape{5, 33, 70};
  for (DType dt : common_dtypes("all")) {
    for (View v : kViews) {
      Pair a = make_pair(shape, dt, v, Values::Small, rng);  // zeros are common
      inject_nans(a, rng, 5);
      for (const Shape& dims : {Shape{}, Shape{0}, Shape{2}, Shape{0, 1}}) {
        EXPECT_TRUE(matches(ops::all(a.cpu, dims, false), ops::all(a.dev, dims, false)))
            << ctx("all", dt, view_name(v)) << " dims " << shape_str(dims);
        EXPECT_TRUE(matches(ops::any(a.cpu, dims, true), ops::any(a.dev, dims, true)))
            << ctx("any", dt, view_name(v)) << " dims " << shape_str(dims);
      }
    }
  }
  for (DType dt : common_dtypes("cumsum")) {
    for (View v : kViews) {
      Pair a = make_pair(shape, dt, v, Values::Small, rng);
      Pair p = make_pair(shape, dt, v, Values::NearOne, rng);
      for (int64_t dim : {0, 1, 2}) {
        // Integer and bool inputs scan in int64 (the functional layer's promotion).
        EXPECT_TRUE(matches(ops::cumsum(a.cpu, dim), ops::cumsum(a.dev, dim), tolerance(dt)))
            << ctx("cumsum", dt, view_name(v)) << " dim " << dim;
        EXPECT_TRUE(matches(ops::cumprod(p.cpu, dim), ops::cumprod(p.dev, dim), tolerance(dt)))
            << ctx("cumprod", dt, view_name(v)) << " dim " << dim;
      }
    }
    // The dtype is kept when asked: the kernel for dt itself (wrapping integers). A bool result
    // is refused before any kernel runs, as in PyTorch.
    if (dt == DType::Bool) continue;
    Pair a = make_pair({4, 300}, dt, View::Gapped, Values::Any, rng);
    EXPECT_TRUE(matches(ops::cumsum(a.cpu, 1, dt), ops::cumsum(a.dev, 1, dt), accumulate_tol(dt)))
        << ctx("cumsum", dt, "dtype kept");
  }
  // One long line: many tiles of the block scan carried into each other.
  Pair lng = make_pair({3, 100003}, DType::Float32, View::Contiguous, Values::Small, rng);
  EXPECT_TRUE(matches(ops::cumsum(lng.cpu, 1), ops::cumsum(lng.dev, 1), Tol{1e-6, 1e-2})) << "cumsum of long lines";
  Pair ints = make_pair({2, 70001}, DType::Int64, View::Transposed, Values::Any, rng);
  EXPECT_TRUE(matches(ops::cumsum(ints.cpu, 1), ops::cumsum(ints.dev, 1))) << "int64 cumsum is exact";
}

TEST_F(CudaVsCpu, SoftmaxAndLogSoftmax) {
  const Shape shape{4, 45, 130};
  for (DType dt : common_dtypes("softmax")) {
    const Tol tol = dt == DType::Float32 ? Tol{1e-5, 1e-6} : tolerance(dt);
    for (View v : kViews) {
      Pair a = make_pair(shape, dt, v, Values::Any, rng);
      for (int64_t dim : {0, 1, 2}) {
        EXPECT_TRUE(matches(ops::softmax(a.cpu, dim), ops::softmax(a.dev, dim), tol))
            << ctx("softmax", dt, view_name(v)) << " dim " << dim;
        EXPECT_TRUE(matches(ops::log_softmax(a.cpu, dim), ops::log_softmax(a.dev, dim), tol))
            << ctx("log_softmax", dt, view_name(v)) << " dim " << dim;
      }
      EXPECT_TRUE(matches(ops::logsumexp(a.cpu, {1, 2}, false), ops::logsumexp(a.dev, {1, 2}, false), tol))
          << ctx("logsumexp", dt, view_name(v));
    }
    // -inf elements add nothing, a line of -inf gives NaN, NaN and +inf make their line NaN.
    const std::vector<double> specials = {-INFINITY, -INFINITY, NAN, 80.0, -INFINITY, INFINITY};
    for (int64_t len : {int64_t{5}, int64_t{300}}) {  // the thread-per-line and block-per-line kernels
      Pair s = make_pair({6, len}, dt, View::Contiguous, Values::Any, rng, specials);
      Tensor last_row_cpu = ops::select(s.cpu, 0, 5), last_row_dev = ops::select(s.dev, 0, 5);
      ops::fill_(last_row_cpu, Scalar(-INFINITY));
      ops::fill_(last_row_dev, Scalar(-INFINITY));
      EXPECT_TRUE(matches(ops::softmax(s.cpu, 1), ops::softmax(s.dev, 1), tol)) << ctx("softmax", dt, "specials");
      EXPECT_TRUE(matches(ops::log_softmax(s.cpu, 1), ops::log_softmax(s.dev, 1), tol))
          << ctx("log_softmax", dt, "specials");
    }
  }
}

// ---- math family ---------------------------------------------------------------------------------

TEST_F(CudaVsCpu, ClampLerpAddcmulAddcdiv) {
  const Shape shape{19, 33};
  for (DType dt : common_dtypes("clamp")) {
    for (View v : kViews) {
      Pair a = make_pair(shape, dt, v, Values::Any, rng);
      inject_nans(a, rng, 3);
      Pair lo = make_pair(shape, dt, View::Transposed, Values::Any, rng);
      Pair hi = make_pair(shape, dt, View::Broadcast, Values::Any, rng);
      const std::string where = ctx("clamp", dt, view_name(v));
      EXPECT_TRUE(matches(ops::clamp(a.cpu, lo.cpu, hi.cpu), ops::clamp(a.dev, lo.dev, hi.dev), kExact)) << where;
      if (dt == DType::Bool) continue;
      const Scalar l = is_floating(dt) ? Scalar(-1.5) : Scalar(int64_t{-4}), h = Scalar(int64_t{3});
      EXPECT_TRUE(matches(ops::clamp(a.cpu, l, h), ops::clamp(a.dev, l, h), kExact)) << where << " scalars";
      EXPECT_TRUE(matches(ops::clamp(a.cpu, l, std::nullopt), ops::clamp(a.dev, l, std::nullopt), kExact))
          << where << " min only";
      EXPECT_TRUE(matches(ops::clamp(a.cpu, std::nullopt, h), ops::clamp(a.dev, std::nullopt, h), kExact))
          << where << " max only";
      EXPECT_TRUE(matches(ops::clamp(a.cpu, h, l), ops::clamp(a.dev, h, l), kExact)) << where << " min > max";
    }
  }
  for (DType dt : common_dtypes("lerp")) {
    for (View v : kViews) {
      Pair a = make_pair(shape, dt, v, Values::Any, rng);
      Pair end = make_pair(shape, dt, View::Gapped, Values::Any, rng);
      Pair w = make_pair(shape, dt, View::Transposed, Values::Unit, rng);
      EXPECT_TRUE(matches(ops::lerp(a.cpu, end.cpu, w.cpu), ops::lerp(a.dev, end.dev, w.dev)))
          << ctx("lerp", dt, view_name(v));
      EXPECT_TRUE(matches(ops::lerp(a.cpu, end.cpu, Scalar(0.75)), ops::lerp(a.dev, end.dev, Scalar(0.75))))
          << ctx("lerp", dt, view_name(v)) << " scalar weight";
    }
  }
  for (DType dt : common_dtypes("addcmul")) {
    for (View v : kViews) {
      Pair s = make_pair(shape, dt, v, Values::Any, rng);
      Pair t1 = make_pair(shape, dt, View::Transposed, Values::Any, rng);
      Pair t2 = make_pair(shape, dt, View::Broadcast, Values::Any, rng);
      const Scalar value = is_floating(dt) ? Scalar(-0.5) : Scalar(int64_t{3});
      EXPECT_TRUE(matches(ops::addcmul(s.cpu, t1.cpu, t2.cpu, value), ops::addcmul(s.dev, t1.dev, t2.dev, value)))
          << ctx("addcmul", dt, view_name(v));
      if (!is_floating(dt)) continue;
      Pair t3 = make_pair(shape, dt, View::Gapped, Values::NonZero, rng);
      EXPECT_TRUE(matches(ops::addcdiv(s.cpu, t1.cpu, t3.cpu, value), ops::addcdiv(s.dev, t1.dev, t3.dev, value)))
          << ctx("addcdiv", dt, view_name(v));
    }
  }
  // In place on a strided view.
  Pair a = make_pair(shape, DType::Float32, View::Gapped, Values::Any, rng);
  ops::clamp_(a.cpu, Scalar(-1.0), Scalar(1.0));
  ops::clamp_(a.dev, Scalar(-1.0), Scalar(1.0));
  EXPECT_TRUE(matches(a.cpu, a.dev, kExact)) << "clamp_ on a gapped view";
  Pair t1 = make_pair(shape, DType::Float32, View::Contiguous, Values::Any, rng);
  ops::addcmul_(a.cpu, t1.cpu, t1.cpu, Scalar(2.0));
  ops::addcmul_(a.dev, t1.dev, t1.dev, Scalar(2.0));
  EXPECT_TRUE(matches(a.cpu, a.dev)) << "addcmul_ on a gapped view";
}

// ---- least squares ----------------------------------------------------------------------------------

// A (batch, m, n) well-conditioned (N(0, 2) entries plus 6 on the diagonal) on both devices.
Pair well_conditioned(int64_t batch, int64_t m, int64_t n, DType dt, std::mt19937& rng) {
  std::vector<double> v = random_values(batch * m * n, dt, Values::Any, rng);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t d = 0; d < std::min(m, n); ++d) v[(b * m + d) * n + d] += 6.0;
  const Tensor c = cpu_tensor({batch, m, n}, dt, v);
  return {c, ops::to(c, target(), std::nullopt, true)};
}

TEST_F(CudaVsCpu, LeastSquaresGelsTallSquareAndWide) {
  for (DType dt : common_dtypes("linalg_lstsq")) {
    const Tol tol = dt == DType::Float64 ? Tol{1e-10, 1e-10} : Tol{1e-4, 1e-4};
    for (const auto& [m, n] : {std::pair<int64_t, int64_t>{7, 4}, {4, 4}, {3, 6}, {1, 1}})
      for (int64_t k : {1, 3}) {
        const std::string where = ctx("linalg_lstsq", dt, std::to_string(m) + "x" + std::to_string(n) + " k=" +
                                                              std::to_string(k));
        Pair a = well_conditioned(2, m, n, dt, rng);
        Pair b = make_pair({2, m, k}, dt, View::Transposed, Values::Any, rng);
        const auto want = ops::linalg_lstsq(a.cpu, b.cpu, std::nullopt, std::string("gels"));
        const auto got = ops::linalg_lstsq(a.dev, b.dev, std::nullopt, std::string("gels"));
        EXPECT_TRUE(matches(want.solution, got.solution, tol)) << where << " solution";
        EXPECT_TRUE(matches(want.residuals, got.residuals, tol)) << where << " residuals";
        EXPECT_EQ(got.rank.numel(), 0) << where;
      }
    // A matrix without full rank (a zero column; for a wide one, a zero row) raises on both.
    for (const auto& [m, n, zero_row] : {std::tuple<int64_t, int64_t, bool>{5, 3, false}, {2, 4, true}}) {
      std::vector<double> v = random_values(m * n, dt, Values::Any, rng);
      for (int64_t i = 0; i < (zero_row ? n : m); ++i) v[zero_row ? i : i * n + 1] = 0.0;
      const Tensor a = ops::to(cpu_tensor({m, n}, dt, v), target(), std::nullopt, true);
      Pair b = make_pair({m, 2}, dt, View::Contiguous, Values::Any, rng);
      try {
        ops::linalg_lstsq(a, b.dev, std::nullopt, std::string("gels"));
        ADD_FAILURE() << ctx("linalg_lstsq", dt) << ": a rank-deficient matrix must raise";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does not have full rank"), std::string::npos) << e.what();
      }
    }
  }
}

TEST_F(CudaVsCpu, LeastSquaresOnCudaUsesGelsOnly) {
  if (selfcheck()) GTEST_SKIP() << "the CPU allows every driver";
  Pair a = well_conditioned(1, 5, 3, DType::Float32, rng);
  Pair b = make_pair({1, 5, 2}, DType::Float32, View::Contiguous, Values::Any, rng);
  const auto by_default = ops::linalg_lstsq(a.dev, b.dev, std::nullopt, std::nullopt);
  EXPECT_EQ(by_default.rank.numel(), 0) << "the default driver on CUDA is gels (no rank)";
  EXPECT_EQ(by_default.residuals.numel(), 2) << "gels reports residuals for a tall A";
  for (const char* driver : {"gelsy", "gelsd", "gelss", "bogus"}) {
    try {
      ops::linalg_lstsq(a.dev, b.dev, std::nullopt, std::string(driver));
      ADD_FAILURE() << driver << " must raise on CUDA";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("other than `gels` is not supported on CUDA"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
