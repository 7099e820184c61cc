// mm and bmm against a naive triple loop: every numeric dtype, BLAS-readable operands (row
// major, transposed), operands BLAS cannot read (gapped, broadcast: packed first), odd and
// empty sizes, strided outputs.
#include "cpu_test_util.h"

namespace cpu_test {
namespace {

inline constexpr DType kMatmulDTypes[] = {DType::UInt8,   DType::Int8,     DType::Int16,   DType::Int32,
                                          DType::Int64,   DType::Float16,  DType::BFloat16, DType::Float32,
                                          DType::Float64};

enum class MatLayout { RowMajor, Transposed, Gapped, Broadcast };
const char* mat_layout_name(MatLayout l) {
  switch (l) {
    case MatLayout::RowMajor: return "row-major";
    case MatLayout::Transposed: return "transposed";
    case MatLayout::Gapped: return "gapped";
    case MatLayout::Broadcast: return "broadcast-rows";
  }
  return "?";
}

// A (rows x cols) matrix (optionally with a leading batch dim) holding `v` (row-major values),
// in the requested memory layout. Broadcast: every row is the same (stride 0 across rows), so
// the values' first row is repeated.
Tensor make_matrix(int64_t batch, int64_t rows, int64_t cols, DType dt, std::vector<double>& v, MatLayout l) {
  const bool batched = batch > 0;
  const int64_t b = batched ? batch : 1;
  Shape sizes = batched ? Shape{batch, rows, cols} : Shape{rows, cols};
  Tensor t;
  switch (l) {
    case MatLayout::RowMajor: t = make(sizes, dt, v); break;
    case MatLayout::Gapped: t = make(sizes, dt, v, Layout::Gapped); break;
    case MatLayout::Transposed: {
      // Storage (batch, cols, rows); the matrix dims are swapped in the view.
      Tensor base = Tensor::empty({b * cols * rows}, dt, cpu());
      Shape strides = batched ? Shape{cols * rows, 1, rows} : Shape{1, rows};
      t = Tensor::view_of(base.storage(), sizes, strides, 0, dt);
      set_values(t, v);
      break;
    }
    case MatLayout::Broadcast: {
      Tensor base = Tensor::empty({b * cols}, dt, cpu());
      Shape strides = batched ? Shape{cols, 0, 1} : Shape{0, 1};
      t = Tensor::view_of(base.storage(), sizes, strides, 0, dt);
      for (int64_t i = 0; i < b; ++i)
        for (int64_t r = 1; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) v[(i * rows + r) * cols + c] = v[i * rows * cols + c];
      // Write row 0 of each batch only: the others alias it.
      for (int64_t i = 0; i < b; ++i)
        for (int64_t c = 0; c < cols; ++c)
          store(dt, static_cast<char*>(base.data_ptr()) + (i * cols + c) * static_cast<int64_t>(base.itemsize()),
                v[i * rows * cols + c]);
      break;
    }
  }
  return t;
}

std::vector<double> matrix_values(DType dt, int64_t n, uint32_t seed) {
  if (plugflow::is_floating(dt)) return random_values(n, -4, 4, seed, true);
  if (dt == DType::UInt8) return random_values(n, 0, 10, seed);
  return random_values(n, -10, 10, seed);
}

void check_matmul(DType dt, int64_t batch, int64_t M, int64_t K, int64_t N, MatLayout la, MatLayout lb,
                  bool strided_out, uint32_t seed) {
  SCOPED_TRACE(dtype_str(dt) + " batch " + std::to_string(batch) + " " + std::to_string(M) + "x" + std::to_string(K) +
               "x" + std::to_string(N) + " " + mat_layout_name(la) + " @ " + mat_layout_name(lb) +
               (strided_out ? " -> strided out" : ""));
  const int64_t b = batch > 0 ? batch : 1;
  std::vector<double> av = matrix_values(dt, b * M * K, seed), bv = matrix_values(dt, b * K * N, seed + 1);
  for (auto& x : av) x = representable(dt, x);
  for (auto& x : bv) x = representable(dt, x);
  Tensor a = make_matrix(batch, M, K, dt, av, la);
  Tensor bm = make_matrix(batch, K, N, dt, bv, lb);
  const std::string op = batch > 0 ? "bmm" : "mm";
  const Shape out_shape = batch > 0 ? Shape{batch, M, N} : Shape{M, N};
  Tensor out;
  if (strided_out) {
    out = empty_with_layout(out_shape, dt, Layout::Transposed);
    run_out(op, {a, bm}, {}, {out});
  } else {
    out = run(op, {a, bm}).at(0);
  }
  ASSERT_EQ(out.sizes(), out_shape);
  ASSERT_EQ(out.dtype(), dt);
  const bool fl = plugflow::is_floating(dt);
  std::vector<double> expected(b * M * N), scale(b * M * N);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) {
        long double acc = 0, abs_acc = 0;
        uint64_t iacc = 0;  // integer products wrap modulo 2^64, then to the dtype
        for (int64_t k = 0; k < K; ++k) {
          const double x = av[(i * M + r) * K + k], y = bv[(i * K + k) * N + c];
          acc += static_cast<long double>(x) * y;
          abs_acc += std::abs(static_cast<long double>(x) * y);
          iacc += static_cast<uint64_t>(static_cast<int64_t>(x)) * static_cast<uint64_t>(static_cast<int64_t>(y));
        }
        const int64_t o = (i * M + r) * N + c;
        expected[o] = representable(dt, fl ? static_cast<double>(acc) : static_cast<double>(static_cast<int64_t>(iacc)));
        scale[o] = static_cast<double>(abs_acc);
      }
  // float16/bfloat16 and float32 accumulate in float (sgemm), float64 in double: the classic
  // bound for a K-term dot product is K * unit roundoff * sum |x*y|.
  const double unit = dt == DType::Float64 ? 1.2e-16 : fl ? 6e-8 : 0;
  const double acc_eps = unit * static_cast<double>(std::max<int64_t>(K, 1));
  const std::vector<double> got = values(out);
  int bad = 0;
  for (size_t o = 0; o < got.size(); ++o)
    if (!(std::abs(got[o] - expected[o]) <= rel_tol(dt) * std::abs(expected[o]) + acc_eps * scale[o]) && bad++ < 5)
      ADD_FAILURE() << "element " << o << ": got " << got[o] << ", expected " << expected[o];
}

struct Dims {
  int64_t M, K, N;
};
constexpr Dims kSizes[] = {{1, 1, 1}, {7, 33, 5}, {33, 7, 1}, {1, 100, 1}, {1, 5, 9}, {9, 5, 1}, {64, 64, 64}, {100, 3, 200}};
constexpr MatLayout kMatLayouts[] = {MatLayout::RowMajor, MatLayout::Transposed, MatLayout::Gapped, MatLayout::Broadcast};

TEST_F(CpuTest, MmEveryDtypeAndOperandLayout) {
  uint32_t seed = 1;
  for (DType dt : kMatmulDTypes)
    for (const Dims& d : kSizes)
      for (MatLayout la : kMatLayouts)
        for (MatLayout lb : kMatLayouts) check_matmul(dt, 0, d.M, d.K, d.N, la, lb, false, seed += 2);
}

TEST_F(CpuTest, MmLargeFloat) {
  uint32_t seed = 100;
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16})
    for (MatLayout la : {MatLayout::RowMajor, MatLayout::Transposed})
      for (MatLayout lb : {MatLayout::RowMajor, MatLayout::Transposed, MatLayout::Gapped})
        check_matmul(dt, 0, 257, 129, 300, la, lb, false, seed += 2);
  check_matmul(DType::Int32, 0, 200, 100, 150, MatLayout::Transposed, MatLayout::RowMajor, false, 77);
}

TEST_F(CpuTest, MmEmptyAndStridedOutputs) {
  for (DType dt : {DType::Float32, DType::Int64, DType::Float16}) {
    check_matmul(dt, 0, 5, 0, 4, MatLayout::RowMajor, MatLayout::RowMajor, false, 3);  // K = 0: zeros
    check_matmul(dt, 0, 7, 33, 5, MatLayout::Transposed, MatLayout::RowMajor, true, 5);
  }
}

TEST_F(CpuTest, BmmEveryDtypeAndLayout) {
  uint32_t seed = 500;
  for (DType dt : kMatmulDTypes)
    for (const Dims& d : {Dims{7, 33, 5}, Dims{1, 4, 1}, Dims{16, 16, 16}})
      for (MatLayout la : kMatLayouts)
        for (MatLayout lb : {MatLayout::RowMajor, MatLayout::Transposed, MatLayout::Gapped})
          check_matmul(dt, 3, d.M, d.K, d.N, la, lb, false, seed += 2);
  check_matmul(DType::Float32, 4, 6, 0, 5, MatLayout::RowMajor, MatLayout::RowMajor, false, 9);
  check_matmul(DType::Float64, 2, 7, 3, 5, MatLayout::Gapped, MatLayout::Transposed, true, 11);
}

TEST_F(CpuTest, BmmWithABroadcastBatch) {
  // The same right-hand matrix for every batch: stride 0 in the batch dim.
  std::vector<double> av = random_values(4 * 3 * 5, -4, 4, 1, true), bv = random_values(5 * 2, -4, 4, 2, true);
  Tensor a = make({4, 3, 5}, DType::Float32, av);
  Tensor b1 = make({1, 5, 2}, DType::Float32, bv);
  Tensor b = Tensor::view_of(b1.storage(), {4, 5, 2}, {0, 2, 1}, 0, DType::Float32);
  const std::vector<double> got = values(run("bmm", {a, b}).at(0));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 2; ++c) {
        double e = 0;
        for (int64_t k = 0; k < 5; ++k) e += av[(i * 3 + r) * 5 + k] * bv[k * 2 + c];
        EXPECT_NEAR(got[(i * 3 + r) * 2 + c], e, 1e-4);
      }
}

TEST_F(CpuTest, MmBoolHasNoKernel) {
  Tensor a = make({2, 2}, DType::Bool, {1, 0, 1, 1});
  EXPECT_THROW(run("mm", {a, a}), plugflow::NotImplementedError);
}

}  // namespace
}  // namespace cpu_test
