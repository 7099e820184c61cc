// Host-side checks of the CUDA plugin's index arithmetic (plugins/cuda/src/indexing.h). The
// kernels run the same code on the device, so a wrong offset here is a wrong element there;
// checking it on the CPU covers every layout without a GPU. Tensors are views on host
// memory that no plugin owns, so no device backend is involved.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "indexing.h"
#include "plugflow/layout.h"
#include "plugflow/tensor.h"

namespace {

using plugflow::Device;
using plugflow::DeviceType;
using plugflow::DType;
using plugflow::Shape;
using plugflow::Storage;
using plugflow::StridedLayout;
using plugflow::Tensor;
using plugflow::cuda::ElementwiseOffsets;
using plugflow::cuda::for_each_32bit_piece;
using plugflow::cuda::make_reduce_indexing;
using plugflow::cuda::ReduceIndexing;

// Host memory wrapped as a plugflow storage (foreign memory: no backend frees it).
std::shared_ptr<Storage> host_storage(size_t nbytes) {
  auto mem = std::shared_ptr<char[]>(new char[nbytes]());
  return std::make_shared<Storage>(Device{DeviceType::CPU, 0}, mem.get(), nbytes, std::shared_ptr<void>(mem, mem.get()));
}

// A tensor of `sizes` whose dims are laid out in a random memory order with random gaps and
// offset; with `allow_broadcast` some dims get stride 0 (an expanded view).
Tensor random_layout(const Shape& sizes, DType dt, std::mt19937& rng, bool allow_broadcast) {
  const size_t n = sizes.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);  // order[0] innermost
  Shape strides(n);
  int64_t s = 1 + static_cast<int64_t>(rng() % 2);
  for (size_t k = 0; k < n; ++k) {
    const size_t d = order[k];
    if (allow_broadcast && rng() % 4 == 0) {
      strides[d] = 0;
      continue;
    }
    strides[d] = s;
    s *= sizes[d] + static_cast<int64_t>(rng() % 2);  // sometimes a gap after this dim
  }
  const int64_t offset = static_cast<int64_t>(rng() % 3);
  return Tensor::view_of(host_storage(static_cast<size_t>(s + offset + 1) * plugflow::itemsize(dt)), sizes, strides,
                         offset, dt);
}

Shape random_shape(std::mt19937& rng, int max_ndim, int64_t max_size) {
  Shape sizes(rng() % (max_ndim + 1));
  for (auto& d : sizes) d = 1 + static_cast<int64_t>(rng() % max_size);
  return sizes;
}

// Byte offset from t's data_ptr of logical (row-major) element `flat`.
int64_t logical_offset(const Tensor& t, int64_t flat) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (flat % t.sizes()[d]) * t.strides()[d];
    flat /= t.sizes()[d];
  }
  return off * static_cast<int64_t>(t.itemsize());
}

TEST(CudaIndexing, ElementwiseOffsetsVisitEveryElementOnce) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    const Shape sizes = random_shape(rng, 5, 5);
    const Tensor out = random_layout(sizes, DType::Float32, rng, false);
    const Tensor a = random_layout(sizes, DType::Int16, rng, true);
    const Tensor b = random_layout(sizes, DType::Float64, rng, true);
    const StridedLayout L = plugflow::make_layout({&out, &a, &b});
    const auto calc = ElementwiseOffsets<3>::from_layout(L);

    using Triple = std::array<int64_t, 3>;
    std::vector<Triple> expected, got;
    for (int64_t i = 0; i < out.numel(); ++i)
      expected.push_back({logical_offset(out, i), logical_offset(a, i), logical_offset(b, i)});
    const char* base[3] = {static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr()),
                           static_cast<char*>(b.data_ptr())};
    for (int64_t i = 0; i < L.numel; ++i) {
      int64_t off[3];
      calc.get(static_cast<uint32_t>(i), off);
      Triple t;
      for (int k = 0; k < 3; ++k) t[k] = (L.data[k] + off[k]) - base[k];
      got.push_back(t);
      if (L.ndim <= 1) {  // the linear kernel's formula: i * stride
        for (int k = 0; k < 3; ++k)
          ASSERT_EQ(off[k], L.ndim == 0 ? 0 : i * L.byte_strides[k][0]) << "trial " << trial;
      }
    }
    std::sort(expected.begin(), expected.end());
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got, expected) << "trial " << trial << ", shape " << plugflow::shape_str(sizes);
  }
}

TEST(CudaIndexing, ThirtyTwoBitPiecesTileAHugeLayout) {
  // Pointers only: nothing is dereferenced, so a fake address space of 5e9 elements is fine.
  for (const Shape& sizes : {Shape{5, 1'000'000'007}, Shape{1, 5'000'000'000}, Shape{3, 1, 900'000'000}}) {
    StridedLayout L;
    L.ndim = static_cast<int>(sizes.size());
    L.num_operands = 2;
    L.numel = plugflow::shape_numel(sizes);
    int64_t s = 4;
    for (int d = L.ndim - 1; d >= 0; --d) {
      L.sizes[d] = sizes[d];
      L.byte_strides[0][d] = s;
      L.byte_strides[1][d] = 2 * s;
      s *= sizes[d];
    }
    char* const base = reinterpret_cast<char*>(uintptr_t{1} << 40);
    L.data[0] = base;
    L.data[1] = base;

    // Contiguous operands: every piece is one run, the pieces follow each other in memory.
    std::vector<std::pair<int64_t, int64_t>> runs;  // (first element, count), operand 0
    for_each_32bit_piece(L, [&](const StridedLayout& p) {
      EXPECT_LE(p.numel, INT32_MAX);
      EXPECT_EQ(plugflow::shape_numel(Shape(p.sizes.begin(), p.sizes.begin() + p.ndim)), p.numel);
      EXPECT_EQ((p.data[1] - base) / 8, (p.data[0] - base) / 4) << "operands must split together";
      runs.emplace_back((p.data[0] - base) / 4, p.numel);
    });
    ASSERT_GT(runs.size(), 1u);
    std::sort(runs.begin(), runs.end());
    int64_t next = 0;
    for (const auto& [first, count] : runs) {
      EXPECT_EQ(first, next) << "pieces must tile the layout without gaps or overlap";
      next = first + count;
    }
    EXPECT_EQ(next, L.numel);
  }
}

// Reduces `in` (int64 values) with the plugin's ReduceIndexing into out (sum) and, for one
// dim, idx (argmax: first index of the maximum) exactly as the kernels address memory.
void reduce_like_kernel(const ReduceIndexing& ix, const Tensor& in, const Tensor& out, const Tensor* idx) {
  const char* ip = static_cast<const char*>(in.data_ptr());
  for (int64_t o = 0; o < ix.num_outputs; ++o) {
    int64_t in_off, off0, off1;
    ix.output_offsets(o, in_off, off0, off1);
    int64_t sum = 0, best = 0, best_r = -1;
    for (int64_t r = 0; r < ix.reduce_size; ++r) {
      int64_t v;
      std::memcpy(&v, ip + in_off + ix.reduce_offset(r), 8);
      sum += v;
      if (best_r < 0 || v > best) best = v, best_r = r;
    }
    std::memcpy(static_cast<char*>(out.data_ptr()) + off0, &sum, 8);
    if (idx) std::memcpy(static_cast<char*>(idx->data_ptr()) + off1, &best_r, 8);
  }
}

int64_t value_at(const Tensor& t, const std::vector<int64_t>& index) {
  int64_t off = 0;
  for (size_t d = 0; d < index.size(); ++d) off += index[d] * t.strides()[d];
  int64_t v;
  std::memcpy(&v, static_cast<const char*>(t.data_ptr()) + off * 8, 8);
  return v;
}

TEST(CudaIndexing, ReduceIndexingMatchesNaiveReduction) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 400; ++trial) {
    const Shape sizes = random_shape(rng, 4, 5);
    const int64_t nd = static_cast<int64_t>(sizes.size());
    const Tensor in = random_layout(sizes, DType::Int64, rng, true);
    {  // small values: many ties, so argmax's "first index" is exercised
      auto* p = static_cast<int64_t*>(in.storage()->data());
      for (size_t i = 0; i < in.storage()->nbytes() / 8; ++i) p[i] = static_cast<int64_t>(rng() % 4);
    }
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < nd; ++d)
      if (rng() % 2) dims.push_back(d);
    if (dims.empty() && nd > 0) dims.push_back(static_cast<int64_t>(rng() % nd));
    const bool one_dim = dims.size() == 1;
    const bool keepdim = rng() % 2;
    Shape out_sizes;
    for (int64_t d = 0; d < nd; ++d) {
      const bool red = std::find(dims.begin(), dims.end(), d) != dims.end();
      if (!red) out_sizes.push_back(sizes[d]);
      else if (keepdim) out_sizes.push_back(1);
    }
    const Tensor out = random_layout(out_sizes, DType::Int64, rng, false);
    const Tensor idx = random_layout(out_sizes, DType::Int64, rng, false);
    const ReduceIndexing ix = make_reduce_indexing(in, dims, keepdim, out, one_dim ? &idx : nullptr);
    reduce_like_kernel(ix, in, out, one_dim ? &idx : nullptr);

    // Naive: walk every input element, accumulate into its output position.
    const int64_t n_out = plugflow::shape_numel(out_sizes);
    std::vector<int64_t> sum(static_cast<size_t>(n_out), 0), best(static_cast<size_t>(n_out), 0),
        arg(static_cast<size_t>(n_out), -1);
    std::vector<int64_t> index(static_cast<size_t>(nd), 0);
    for (int64_t flat = 0; flat < in.numel(); ++flat) {
      int64_t rem = flat, o = 0, along = 0, mult = 1;
      for (int64_t d = nd - 1; d >= 0; --d) {
        index[static_cast<size_t>(d)] = rem % sizes[d];
        rem /= sizes[d];
      }
      for (int64_t d = nd - 1; d >= 0; --d) {
        const bool red = std::find(dims.begin(), dims.end(), d) != dims.end();
        if (red) {
          along = index[static_cast<size_t>(d)];
          continue;
        }
        o += index[static_cast<size_t>(d)] * mult;
        mult *= sizes[d];
      }
      const int64_t v = value_at(in, index);
      sum[static_cast<size_t>(o)] += v;
      if (arg[static_cast<size_t>(o)] < 0 || v > best[static_cast<size_t>(o)])
        best[static_cast<size_t>(o)] = v, arg[static_cast<size_t>(o)] = along;
    }
    for (int64_t o = 0; o < n_out; ++o) {
      int64_t v, a;
      std::memcpy(&v, static_cast<const char*>(out.data_ptr()) + logical_offset(out, o), 8);
      ASSERT_EQ(v, sum[static_cast<size_t>(o)]) << "trial " << trial << ": sum of " << plugflow::shape_str(sizes)
                                                << " output " << o;
      if (one_dim) {
        std::memcpy(&a, static_cast<const char*>(idx.data_ptr()) + logical_offset(idx, o), 8);
        ASSERT_EQ(a, arg[static_cast<size_t>(o)]) << "trial " << trial << ": argmax of " << plugflow::shape_str(sizes)
                                                  << " over dim " << dims[0] << ", output " << o;
      }
    }
  }
}

TEST(CudaIndexing, ReductionModeFollowsMemoryOrder) {
  const Tensor in = Tensor::view_of(host_storage(4 * 8 * 4), {4, 8}, {8, 1}, 0, DType::Float32);
  const Tensor rows = Tensor::view_of(host_storage(4 * 4), {4}, {1}, 0, DType::Float32);
  const Tensor cols = Tensor::view_of(host_storage(8 * 4), {8}, {1}, 0, DType::Float32);
  const ReduceIndexing last = make_reduce_indexing(in, {1}, false, rows, nullptr);
  EXPECT_TRUE(last.inner) << "sum over the contiguous dim: threads share an output";
  EXPECT_EQ(last.num_outputs, 4);
  EXPECT_EQ(last.reduce_size, 8);
  const ReduceIndexing first = make_reduce_indexing(in, {0}, false, cols, nullptr);
  EXPECT_FALSE(first.inner) << "sum over the outer dim: one thread per output";
  const ReduceIndexing all = make_reduce_indexing(in, {0, 1}, false, Tensor::view_of(host_storage(4), {}, {}, 0,
                                                                                    DType::Float32), nullptr);
  EXPECT_EQ(all.num_outputs, 1);
  EXPECT_EQ(all.red_ndim, 1) << "a contiguous full reduction coalesces to one dim";
  EXPECT_EQ(all.reduce_size, 32);
}

TEST(CudaIndexing, RejectsOutputOfTheWrongShape) {
  const Tensor in = Tensor::view_of(host_storage(6 * 4), {2, 3}, {3, 1}, 0, DType::Float32);
  const Tensor bad = Tensor::view_of(host_storage(4 * 4), {4}, {1}, 0, DType::Float32);
  EXPECT_THROW(make_reduce_indexing(in, {0}, false, bad, nullptr), plugflow::Error);
}

}  // namespace
