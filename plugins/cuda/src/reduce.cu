// Reductions: sum, prod, mean, amax, amin over any set of dims, and the indexed ones
// (max_dim, min_dim, argmax, argmin) over one dim; any input and output strides.
//
// make_reduce_indexing (indexing.cpp) turns the call into num_outputs independent
// reductions of reduce_size elements. One kernel covers every case with a 2-d block:
// threadIdx.x walks the reduced elements of one output, threadIdx.y picks the output.
//   * inner reductions (reduced elements closer in memory than neighbouring outputs, e.g.
//     sum over the last dim): up to 256 threads share one output, reading consecutive
//     memory, and fold their partials in shared memory;
//   * outer reductions (e.g. sum over dim 0 of a matrix): one thread per output, so a warp
//     reads 32 neighbouring outputs' elements at once.
// When that leaves the GPU underused (few outputs, long reductions), the reduced range is
// cut into chunks along gridDim.y; each block writes a partial accumulator and a second
// kernel merges the chunks in order and writes the outputs.
//
// A reducer (on device type D) has acc_t, identity(), step(acc, x, r), merge(a, b) and
// write(out0, out1, acc, count). merge must be associative and, for the indexed ones,
// independent of the merge order (ties go to the smaller index), because the block-level
// tree does not merge left to right.
#include <algorithm>

#include "elementwise.cuh"
#include "indexing.h"
#include "launchers.h"

namespace plugflow::cuda {
namespace {

// ---- reducers ------------------------------------------------------------------------------

// Sum and product accumulate floats in double (float32/64) or float (f16/bf16), integers in
// 64-bit unsigned arithmetic (wraps like int64, without signed overflow); as on the CPU.
template <typename D>
using sum_acc_t = std::conditional_t<is_reduced_float_v<D>, float,
                                     std::conditional_t<std::is_floating_point_v<D>, double, uint64_t>>;

template <typename D, typename Acc>
PF_DEVICE Acc to_acc(D x) {
  if constexpr (std::is_same_v<Acc, uint64_t>) return static_cast<uint64_t>(static_cast<int64_t>(x));
  else return static_cast<Acc>(to_opmath(x));
}
template <typename D, typename Acc>
PF_DEVICE D from_acc(Acc a) {
  if constexpr (std::is_same_v<Acc, uint64_t>) return cast_to<D>(static_cast<int64_t>(a));
  else return cast_to<D>(a);
}

template <typename D>
struct SumRed {
  using acc_t = sum_acc_t<D>;
  PF_DEVICE acc_t identity() const { return acc_t(0); }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t) const { return a + to_acc<D, acc_t>(x); }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const { return a + b; }
  PF_DEVICE void write(char* out0, char*, acc_t a, int64_t) const { *reinterpret_cast<D*>(out0) = from_acc<D>(a); }
};

template <typename D>
struct ProdRed {
  using acc_t = sum_acc_t<D>;
  PF_DEVICE acc_t identity() const { return acc_t(1); }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t) const { return a * to_acc<D, acc_t>(x); }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const { return a * b; }
  PF_DEVICE void write(char* out0, char*, acc_t a, int64_t) const { *reinterpret_cast<D*>(out0) = from_acc<D>(a); }
};

template <typename D>
struct MeanRed : SumRed<D> {
  using acc_t = sum_acc_t<D>;
  PF_DEVICE void write(char* out0, char*, acc_t a, int64_t count) const {
    // count == 0 gives 0 / 0 = nan, as PyTorch's mean of an empty tensor.
    *reinterpret_cast<D*>(out0) = from_acc<D>(a / static_cast<acc_t>(count));
  }
};

// amax / amin: NaN propagates (a NaN accumulator stays, a NaN input takes over).
template <typename D, bool IsMax>
struct ExtremeRed {
  using acc_t = opmath_t<D>;
  acc_t init;  // -inf / +inf, or the type's lowest / highest value (set on the host)
  PF_DEVICE acc_t identity() const { return init; }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t) const { return merge(a, to_opmath(x)); }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const {
    if constexpr (is_float_v<acc_t>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return (IsMax ? b > a : b < a) ? b : a;
  }
  PF_DEVICE void write(char* out0, char*, acc_t a, int64_t) const { *reinterpret_cast<D*>(out0) = cast_to<D>(a); }
};
template <typename D> using AmaxRed = ExtremeRed<D, true>;
template <typename D> using AminRed = ExtremeRed<D, false>;

// Value and index of the extreme: the first index on ties, the first NaN if there is one.
template <typename D, bool IsMax, bool WriteValues>
struct IndexedRed {
  using C = opmath_t<D>;
  struct acc_t {
    C v;
    int64_t i;  // -1: nothing seen yet
  };
  PF_DEVICE acc_t identity() const { return {C(0), -1}; }
  PF_DEVICE acc_t step(acc_t a, D x, int64_t r) const { return merge(a, {to_opmath(x), r}); }
  PF_DEVICE acc_t merge(acc_t a, acc_t b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool a_nan = a.v != a.v, b_nan = b.v != b.v;  // always false for integers
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return a.i < b.i ? a : b;
      return a_nan ? a : b;
    }
    if (IsMax ? b.v > a.v : b.v < a.v) return b;
    if (IsMax ? a.v > b.v : a.v < b.v) return a;
    return a.i < b.i ? a : b;
  }
  PF_DEVICE void write(char* out0, char* out1, acc_t a, int64_t) const {
    if constexpr (WriteValues) {
      *reinterpret_cast<D*>(out0) = cast_to<D>(a.v);
      *reinterpret_cast<int64_t*>(out1) = a.i;
    } else {
      *reinterpret_cast<int64_t*>(out0) = a.i;
    }
  }
};
template <typename D> using MaxDimRed = IndexedRed<D, true, true>;
template <typename D> using MinDimRed = IndexedRed<D, false, true>;
template <typename D> using ArgmaxRed = IndexedRed<D, true, false>;
template <typename D> using ArgminRed = IndexedRed<D, false, false>;

template <typename D, bool IsMax>
ExtremeRed<D, IsMax> make_extreme() {
  using A = opmath_t<D>;
  if constexpr (is_float_v<A>) {
    return {IsMax ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity()};
  } else {
    return {IsMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max()};
  }
}
// Reducers are aggregates; amax/amin carry their identity, computed here on the host.
template <typename D>
struct ReducerFactory {
  template <template <typename> class RedT>
  static RedT<D> make() {
    if constexpr (std::is_same_v<RedT<D>, AmaxRed<D>>) return make_extreme<D, true>();
    else if constexpr (std::is_same_v<RedT<D>, AminRed<D>>) return make_extreme<D, false>();
    else return RedT<D>{};
  }
};

// ---- kernels -------------------------------------------------------------------------------

template <typename Red, typename D>
__global__ void reduce_kernel(ReduceIndexing ix, const char* in, char* out0, char* out1, Red red,
                              typename Red::acc_t* partial, int64_t chunk_len) {
  using acc_t = typename Red::acc_t;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = o < ix.num_outputs;
  acc_t acc = red.identity();
  int64_t in_off = 0, off0 = 0, off1 = 0;
  if (active) {
    ix.output_offsets(o, in_off, off0, off1);
    const char* base = in + in_off;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk_len;
    const int64_t r1 = min(ix.reduce_size, r0 + chunk_len);
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
      acc = red.step(acc, *reinterpret_cast<const D*>(base + ix.reduce_offset(r)), r);
  }
  if (blockDim.x > 1) {  // fold the row of partials (blockDim.x is a power of two)
    acc_t* row = reinterpret_cast<acc_t*>(smem_raw) + threadIdx.y * blockDim.x;
    row[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) row[threadIdx.x] = red.merge(row[threadIdx.x], row[threadIdx.x + s]);
      __syncthreads();
    }
    acc = row[0];
  }
  if (threadIdx.x != 0 || !active) return;
  if (partial == nullptr) red.write(out0 + off0, out1 + off1, acc, ix.reduce_size);
  else partial[o * gridDim.y + blockIdx.y] = acc;
}

template <typename Red>
__global__ void reduce_chunks_kernel(ReduceIndexing ix, char* out0, char* out1, Red red,
                                     const typename Red::acc_t* partial, int chunks) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < ix.num_outputs; o += step) {
    typename Red::acc_t acc = red.identity();
    for (int c = 0; c < chunks; ++c) acc = red.merge(acc, partial[o * chunks + c]);
    int64_t in_off, off0, off1;
    ix.output_offsets(o, in_off, off0, off1);
    red.write(out0 + off0, out1 + off1, acc, ix.reduce_size);
  }
}

int64_t pow2_ceil(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

template <typename Red, typename D>
void run_reduce(const ReduceIndexing& ix, const Tensor& in, char* out0, char* out1, const Red& red,
                const KernelScope& scope) {
  using acc_t = typename Red::acc_t;
  const int64_t O = ix.num_outputs, R = ix.reduce_size;
  if (O == 0) return;
  // Block shape: threads along the reduction (tx) x outputs per block (ty), 256 in all.
  int64_t tx;
  if (ix.inner) tx = std::min<int64_t>(kBlockThreads, pow2_ceil(std::max<int64_t>(R, 1)));
  else tx = kBlockThreads / std::min<int64_t>(kBlockThreads, pow2_ceil(O));  // 1 unless few outputs
  const int64_t ty = kBlockThreads / tx;
  const int64_t blocks_x = (O + ty - 1) / ty;
  // Chunks along the reduction when the outputs alone do not fill the GPU; each thread keeps
  // at least 64 elements of work.
  const int64_t target_blocks = static_cast<int64_t>(backend().multiprocessor_count(scope.device)) * 4;
  int64_t chunks = 1;
  if (blocks_x < target_blocks)
    chunks = std::clamp<int64_t>(std::min((target_blocks + blocks_x - 1) / blocks_x, R / (tx * 64)), 1, 65535);
  const int64_t chunk_len = (R + chunks - 1) / chunks;
  chunks = std::max<int64_t>(1, (R + chunk_len - 1) / std::max<int64_t>(chunk_len, 1));
  PF_CHECK(blocks_x <= INT32_MAX, "reduction with ", O, " outputs is too large for one launch");

  const dim3 block(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  const size_t smem = tx > 1 ? static_cast<size_t>(kBlockThreads) * sizeof(acc_t) : 0;
  const char* in_ptr = static_cast<const char*>(in.data_ptr());
  if (chunks == 1) {
    reduce_kernel<Red, D><<<dim3(static_cast<unsigned>(blocks_x), 1), block, smem, scope.stream>>>(
        ix, in_ptr, out0, out1, red, nullptr, chunk_len);
    PF_CUDA_CHECK_LAUNCH();
    return;
  }
  Workspace partial(scope.device, static_cast<size_t>(O * chunks) * sizeof(acc_t));
  reduce_kernel<Red, D><<<dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(chunks)), block, smem,
                          scope.stream>>>(ix, in_ptr, out0, out1, red, partial.as<acc_t>(), chunk_len);
  PF_CUDA_CHECK_LAUNCH();
  reduce_chunks_kernel<Red><<<scope.blocks_for(O), kBlockThreads, 0, scope.stream>>>(
      ix, out0, out1, red, partial.as<acc_t>(), static_cast<int>(chunks));
  PF_CUDA_CHECK_LAUNCH();
}

// sum prod mean amax amin: attrs dims (sorted, unique) and keepdim.
template <template <typename> class RedT, typename Family>
void reduce_dims_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  PF_CHECK(out.dtype() == a.dtype(), "cuda '", ctx.op.name, "' kernel writes its input's dtype (",
           dtype_name(a.dtype()), "), the output is ", dtype_name(out.dtype()));
  const Shape& dims = ctx.attr<Shape>("dims");
  const ReduceIndexing ix = make_reduce_indexing(a, dims, ctx.attr<bool>("keepdim"), out, nullptr);
  dispatch_supported<Family>(ctx, a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    run_reduce<RedT<D>, D>(ix, a, static_cast<char*>(out.data_ptr()), nullptr,
                           ReducerFactory<D>::template make<RedT>(), scope);
  });
}

// max_dim min_dim (values + indices) and argmax argmin (indices): attrs dim and keepdim.
template <template <typename> class RedT>
void reduce_one_dim_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const int64_t dim = ctx.attr<int64_t>("dim");
  const bool keepdim = ctx.attr<bool>("keepdim");
  const Tensor& out0 = ctx.output(0);
  const Tensor* indices = ctx.outputs.size() > 1 ? &ctx.output(1) : nullptr;
  const int64_t wrapped = a.dim() == 0 ? 0 : (dim < 0 ? dim + a.dim() : dim);
  const ReduceIndexing ix = make_reduce_indexing(a, {wrapped}, keepdim, out0, indices);
  dispatch_supported<AllTypes>(ctx, a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    run_reduce<RedT<D>, D>(ix, a, static_cast<char*>(out0.data_ptr()),
                           indices ? static_cast<char*>(indices->data_ptr()) : nullptr, RedT<D>{}, scope);
  });
}

}  // namespace

std::vector<KernelDef> reduce_kernels() {
  return {
      {"sum", supported_dtypes<AllTypes>(), &reduce_dims_kernel<SumRed, AllTypes>},
      {"prod", supported_dtypes<AllTypes>(), &reduce_dims_kernel<ProdRed, AllTypes>},
      {"mean", supported_dtypes<FloatTypes>(), &reduce_dims_kernel<MeanRed, FloatTypes>},
      {"amax", supported_dtypes<AllTypes>(), &reduce_dims_kernel<AmaxRed, AllTypes>},
      {"amin", supported_dtypes<AllTypes>(), &reduce_dims_kernel<AminRed, AllTypes>},
      {"max_dim", supported_dtypes<AllTypes>(), &reduce_one_dim_kernel<MaxDimRed>},
      {"min_dim", supported_dtypes<AllTypes>(), &reduce_one_dim_kernel<MinDimRed>},
      {"argmax", supported_dtypes<AllTypes>(), &reduce_one_dim_kernel<ArgmaxRed>},
      {"argmin", supported_dtypes<AllTypes>(), &reduce_one_dim_kernel<ArgminRed>},
  };
}

}  // namespace plugflow::cuda
