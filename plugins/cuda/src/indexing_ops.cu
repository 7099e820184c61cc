// The indexing family (docs/kernels.md, "Indexing family"): index, index_put, where, nonzero.
//
// index and index_put are one elementwise walk over the iteration shape: the core hands the
// data tensor restrided to that shape (stride 0 in the indexed dims) and the int64 index
// tensors broadcast to it, so element e lives at data(e) + sum_j w(idx_j[e]) * strides[j].
// Out-of-range indices are recorded on the device and raised on the host as the CPU kernel's
// IndexError (index_check.cuh). index_put with accumulate: integers and bool add through
// atomics (wrapping sums and or are order-independent); floats are deterministic, as PyTorch's
// sort-based CUDA index_put_: the destination addresses are radix-sorted stably and each run
// of duplicates is summed in iteration order by one thread, rounding to the dtype after every
// add like the CPU kernel, so both devices give the same bits.
//
// nonzero: a flag per element in logical (row-major) order, an inclusive scan (CUB) gives
// each non-zero element its output row, a second pass writes the coordinates.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <array>
#include <span>

#include "atomics.cuh"
#include "elementwise.cuh"
#include "index_check.cuh"

namespace plugflow::cuda {
namespace {

// Operands of index / index_put: [out or dst, src or values, idx_0 .. idx_{k-1}].
constexpr int kIndexOperands = kMaxLayoutOperands;
constexpr int kMaxIndexTensors = kIndexOperands - 2;

struct IndexParams {
  int k = 0;
  int64_t sizes[kMaxIndexTensors] = {};
  int64_t strides[kMaxIndexTensors] = {};  // elements
  bool wrap = false;
};

struct IndexCall {
  IndexParams params;
  Shape dims;  // named in errors
  StridedLayout layout;
};

IndexCall prepare_index_call(const KernelContext& ctx, const Tensor& written) {
  const int k = static_cast<int>(ctx.inputs.size()) - 1;
  const Shape& sizes = ctx.attr<Shape>("sizes");
  const Shape& strides = ctx.attr<Shape>("strides");
  const Shape& dims = ctx.attr<Shape>("dims");
  PF_CHECK(k >= 0 && static_cast<int>(sizes.size()) == k && static_cast<int>(strides.size()) == k &&
               static_cast<int>(dims.size()) == k,
           ctx.op.name, ": need one size, stride and dim per index tensor");
  PF_CHECK(k <= kMaxIndexTensors, ctx.op.name, ": at most ", kMaxIndexTensors, " index tensors per kernel call, got ",
           k);
  IndexCall call;
  call.params.k = k;
  call.params.wrap = ctx.attr<bool>("wrap");
  for (int j = 0; j < k; ++j) {
    PF_CHECK(ctx.input(j + 1).dtype() == DType::Int64, ctx.op.name, ": index tensors must be int64, got ",
             dtype_name(ctx.input(j + 1).dtype()));
    call.params.sizes[j] = sizes[j];
    call.params.strides[j] = strides[j];
  }
  call.dims = dims;
  std::array<const Tensor*, kIndexOperands> ops{};
  ops[0] = &written;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) ops[i + 1] = &ctx.inputs[i];
  call.layout = make_layout(std::span<const Tensor* const>(ops.data(), static_cast<size_t>(k + 2)));
  return call;
}

// The element offset of walk element `off` in the indexed tensor (sum of wrapped index times
// stride); false after recording a bad index.
PF_DEVICE bool indexed_offset(const IndexParams& ip, const OperandPtrs<kIndexOperands>& base,
                              const int64_t (&off)[kIndexOperands], BadIndex* bad, int64_t& elem) {
  elem = 0;
  for (int j = 0; j < ip.k; ++j) {
    const int64_t v = *reinterpret_cast<const int64_t*>(base.p[j + 2] + off[j + 2]);
    const int64_t w = ip.wrap && v < 0 ? v + ip.sizes[j] : v;
    if (w < 0 || w >= ip.sizes[j]) {
      report_bad_index(bad, v, j);
      return false;
    }
    elem += w * ip.strides[j];
  }
  return true;
}

template <typename W>
__global__ void index_kernel(uint32_t n, OperandPtrs<kIndexOperands> base, ElementwiseOffsets<kIndexOperands> calc,
                             IndexParams ip, BadIndex* bad) {
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[kIndexOperands];
    calc.get(i, off);
    int64_t elem;
    if (!indexed_offset(ip, base, off, bad, elem)) continue;
    *reinterpret_cast<W*>(base.p[0] + off[0]) =
        *reinterpret_cast<const W*>(base.p[1] + off[1] + elem * static_cast<int64_t>(sizeof(W)));
  }
}

template <typename D, bool Accumulate>
__global__ void index_put_kernel(uint32_t n, OperandPtrs<kIndexOperands> base, ElementwiseOffsets<kIndexOperands> calc,
                                 IndexParams ip, BadIndex* bad) {
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[kIndexOperands];
    calc.get(i, off);
    int64_t elem;
    if (!indexed_offset(ip, base, off, bad, elem)) continue;
    D* dst = reinterpret_cast<D*>(base.p[0] + off[0] + elem * static_cast<int64_t>(sizeof(D)));
    const D v = *reinterpret_cast<const D*>(base.p[1] + off[1]);
    if constexpr (Accumulate) atomic_accumulate(dst, v);
    else *dst = v;
  }
}

// Waits for the call's kernels and raises the first bad index they recorded.
void raise_bad_index(const IndexCall& call, const BadIndexCheck& check) {
  if (const auto bad = check.wait()) {
    const auto j = static_cast<size_t>(bad->which);
    throw_out_of_bounds(bad->value, call.dims[j], call.params.sizes[j]);
  }
}

// Launches kernel(n, base, calc, params, bad) over 32-bit pieces of the call's layout, then
// raises the first bad index found.
template <typename Launch>
void run_index_call(const KernelScope& scope, const IndexCall& call, const Launch& launch) {
  if (call.layout.numel == 0) return;
  BadIndexCheck check(scope);
  for_each_32bit_piece(call.layout, [&](const StridedLayout& piece) {
    OperandPtrs<kIndexOperands> base{};
    for (int q = 0; q < piece.num_operands; ++q) base.p[q] = piece.data[q];
    launch(static_cast<uint32_t>(piece.numel), base, ElementwiseOffsets<kIndexOperands>::from_layout(piece),
           check.slot());
    PF_CUDA_CHECK_LAUNCH();
  });
  raise_bad_index(call, check);
}

// ---- ordered (deterministic) accumulation for floats -----------------------------------------

constexpr unsigned long long kNoDestination = ~0ull;  // a bad index: sorts last, skipped

// Element first + i of the walk: its destination address as the sort key, its position, its value.
template <typename D>
__global__ void accumulate_keys_kernel(uint32_t n, int64_t first, OperandPtrs<kIndexOperands> base,
                                       ElementwiseOffsets<kIndexOperands> calc, IndexParams ip, BadIndex* bad,
                                       unsigned long long* keys, int64_t* positions, D* values) {
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[kIndexOperands];
    calc.get(i, off);
    int64_t elem;
    const bool valid = indexed_offset(ip, base, off, bad, elem);
    const int64_t g = first + i;
    keys[g] = !valid ? kNoDestination
                       : reinterpret_cast<unsigned long long>(base.p[0] + off[0] + elem * static_cast<int64_t>(sizeof(D)));
    positions[g] = g;
    values[g] = *reinterpret_cast<const D*>(base.p[1] + off[1]);
  }
}

// keys sorted stably: the thread at the start of each run of one destination adds the run's
// values in walk order, rounding to D after every add (the CPU kernel's arithmetic).
template <typename D>
__global__ void accumulate_runs_kernel(int64_t n, const unsigned long long* keys, const int64_t* positions,
                                       const D* values) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const unsigned long long key = keys[i];
    if (key == kNoDestination || (i > 0 && keys[i - 1] == key)) continue;
    D* dst = reinterpret_cast<D*>(key);
    D acc = *dst;
    for (int64_t j = i; j < n && keys[j] == key; ++j) acc = cast_to<D>(to_opmath(acc) + to_opmath(values[positions[j]]));
    *dst = acc;
  }
}

template <typename D>
void ordered_accumulate(const KernelScope& scope, const IndexCall& call) {
  const int64_t n = call.layout.numel;
  if (n == 0) return;
  const size_t words = static_cast<size_t>(n) * sizeof(int64_t);
  Workspace keys(scope.device, words), keys_sorted(scope.device, words), positions(scope.device, words),
      positions_sorted(scope.device, words), values(scope.device, static_cast<size_t>(n) * sizeof(D));
  using Key = unsigned long long;
  BadIndexCheck check(scope);
  int64_t first = 0;  // pieces come in walk order: piece k starts where piece k - 1 ended
  for_each_32bit_piece(call.layout, [&](const StridedLayout& piece) {
    OperandPtrs<kIndexOperands> base{};
    for (int q = 0; q < piece.num_operands; ++q) base.p[q] = piece.data[q];
    accumulate_keys_kernel<D><<<scope.blocks_for(piece.numel), kBlockThreads, 0, scope.stream>>>(
        static_cast<uint32_t>(piece.numel), first, base, ElementwiseOffsets<kIndexOperands>::from_layout(piece),
        call.params, check.slot(), keys.as<Key>(), positions.as<int64_t>(), values.as<D>());
    PF_CUDA_CHECK_LAUNCH();
    first += piece.numel;
  });
  raise_bad_index(call, check);  // before anything is written
  size_t temp_bytes = 0;
  PF_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys.as<Key>(), keys_sorted.as<Key>(),
                                                positions.as<int64_t>(), positions_sorted.as<int64_t>(), n, 0, 64,
                                                scope.stream));
  {
    Workspace temp(scope.device, std::max<size_t>(temp_bytes, 1));
    PF_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, keys.as<Key>(), keys_sorted.as<Key>(),
                                                  positions.as<int64_t>(), positions_sorted.as<int64_t>(), n, 0, 64,
                                                  scope.stream));
  }
  accumulate_runs_kernel<D><<<scope.blocks_for(n), kBlockThreads, 0, scope.stream>>>(
      n, keys_sorted.as<Key>(), positions_sorted.as<int64_t>(), values.as<D>());
  PF_CUDA_CHECK_LAUNCH();
}

template <size_t Size> struct word;
template <> struct word<1> { using type = uint8_t; };
template <> struct word<2> { using type = uint16_t; };
template <> struct word<4> { using type = uint32_t; };
template <> struct word<8> { using type = uint64_t; };

// out[e] = src[e + offset(e)]; a byte copy, so every dtype shares four kernels.
void index_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& out = ctx.output(0);
  PF_CHECK(out.dtype() == ctx.input(0).dtype(), "cuda 'index' kernel writes its source's dtype");
  const IndexCall call = prepare_index_call(ctx, out);
  visit_dtype(out.dtype(), [&](auto tag) {
    using W = typename word<sizeof(typename decltype(tag)::type)>::type;
    run_index_call(scope, call, [&](uint32_t n, const auto& base, const auto& calc, BadIndex* bad) {
      index_kernel<W><<<scope.blocks_for(n), kBlockThreads, 0, scope.stream>>>(n, base, calc, call.params, bad);
    });
  });
}

// dst[e + offset(e)] = values[e], or += with accumulate (floats ordered, others atomic).
void index_put_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& dst = ctx.output(0);
  PF_CHECK(dst.dtype() == ctx.input(0).dtype(), "cuda 'index_put' kernel needs values of the destination's dtype");
  const IndexCall call = prepare_index_call(ctx, dst);
  const bool accumulate = ctx.attr<bool>("accumulate");
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating_v<T>) {
      if (accumulate) return ordered_accumulate<dev_t<T>>(scope, call);
    }
    run_index_call(scope, call, [&](uint32_t n, const auto& base, const auto& calc, BadIndex* bad) {
      const unsigned blocks = scope.blocks_for(n);
      if (accumulate) {  // integers and bool: atomics (floats took the ordered path above)
        if constexpr (!is_floating_v<T>)
          index_put_kernel<dev_t<T>, true><<<blocks, kBlockThreads, 0, scope.stream>>>(n, base, calc, call.params, bad);
      } else {  // a plain store: only the element size matters
        using W = typename word<sizeof(T)>::type;
        index_put_kernel<W, false><<<blocks, kBlockThreads, 0, scope.stream>>>(n, base, calc, call.params, bad);
      }
    });
  });
}

// ---- where -------------------------------------------------------------------------------------

struct WhereFn {
  template <typename C>
  PF_DEVICE C operator()(C self, C other, bool condition) const {
    return condition ? self : other;
  }
};

void where_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor &self = ctx.input(0), &other = ctx.input(1), &condition = ctx.input(2);
  Tensor& out = ctx.output(0);
  PF_CHECK(other.dtype() == self.dtype() && out.dtype() == self.dtype() && condition.dtype() == DType::Bool,
           "cuda 'where' kernel needs self, other and out of one dtype and a bool condition, got ",
           dtype_name(self.dtype()), ", ", dtype_name(other.dtype()), ", ", dtype_name(condition.dtype()), " -> ",
           dtype_name(out.dtype()));
  visit_dtype(self.dtype(), [&](auto tag) {
    // A bit-exact select: move the elements as same-size words (f16 NaN payloads included).
    using W = typename word<sizeof(typename decltype(tag)::type)>::type;
    using D = std::conditional_t<std::is_same_v<typename decltype(tag)::type, bool>, bool, W>;
    launch_elementwise<D, D, D, bool>(make_layout({&out, &self, &other, &condition}), scope, WhereFn{});
  });
}

// ---- nonzero ------------------------------------------------------------------------------------

constexpr int kMaxNonzeroDims = kMaxLayoutDims;

// A tensor's logical shape with byte strides, for walking it in row-major order.
struct LogicalShape {
  int ndim = 0;
  int64_t sizes[kMaxNonzeroDims] = {};
  int64_t strides[kMaxNonzeroDims] = {};  // bytes
};

template <typename D>
__global__ void nonzero_flags_kernel(int64_t n, const char* in, LogicalShape shape, int64_t* flags) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t r = i, off = 0;
    for (int d = shape.ndim - 1; d >= 0; --d) {
      off += (r % shape.sizes[d]) * shape.strides[d];
      r /= shape.sizes[d];
    }
    // NaN is non-zero, -0.0 is zero; f16/bf16 compare as float.
    flags[i] = to_opmath(*reinterpret_cast<const D*>(in + off)) != opmath_t<D>(0) ? 1 : 0;
  }
}

// positions: the inclusive scan of the flags; element i is non-zero when its position grows.
__global__ void nonzero_write_kernel(int64_t n, const int64_t* positions, LogicalShape shape, int64_t rows,
                                     int64_t* out) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t row = i > 0 ? positions[i - 1] : 0;  // non-zero elements before this one
    if (positions[i] == row || row >= rows) continue;   // a zero, or no room (the host checks the count)
    int64_t r = i;
    for (int d = shape.ndim - 1; d >= 0; --d) {
      out[row * shape.ndim + d] = r % shape.sizes[d];
      r /= shape.sizes[d];
    }
  }
}

void nonzero_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& self = ctx.input(0);
  const Tensor& out = ctx.output(0);
  const int64_t nd = self.dim(), numel = self.numel();
  PF_CHECK(out.dtype() == DType::Int64 && out.dim() == 2 && out.sizes()[1] == nd && out.is_contiguous(), ctx.op.name,
           ": out must be a contiguous (n, ", nd, ") int64 tensor, got ", shape_str(out.sizes()));
  PF_CHECK(nd >= 1 && nd <= kMaxNonzeroDims, "cuda 'nonzero' kernel supports 1 to ", kMaxNonzeroDims,
           " dims, got ", nd);
  if (numel == 0) return;
  LogicalShape shape;
  shape.ndim = static_cast<int>(nd);
  for (int64_t d = 0; d < nd; ++d) {
    shape.sizes[d] = self.sizes()[d];
    shape.strides[d] = self.strides()[d] * static_cast<int64_t>(self.itemsize());
  }
  Workspace positions(scope.device, static_cast<size_t>(numel) * sizeof(int64_t));
  int64_t* pos = positions.as<int64_t>();
  visit_dtype(self.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    nonzero_flags_kernel<D><<<scope.blocks_for(numel), kBlockThreads, 0, scope.stream>>>(
        numel, static_cast<const char*>(self.data_ptr()), shape, pos);
    PF_CUDA_CHECK_LAUNCH();
  });
  size_t temp_bytes = 0;
  PF_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, pos, numel, scope.stream));  // in place
  {
    Workspace temp(scope.device, std::max<size_t>(temp_bytes, 1));
    PF_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp.as<void>(), temp_bytes, pos, numel, scope.stream));
  }
  const int64_t rows = out.sizes()[0];
  nonzero_write_kernel<<<scope.blocks_for(numel), kBlockThreads, 0, scope.stream>>>(numel, pos, shape, rows,
                                                                                   out.data<int64_t>());
  PF_CUDA_CHECK_LAUNCH();
  int64_t total = 0;
  PF_CUDA_CHECK(cudaMemcpyAsync(&total, pos + (numel - 1), sizeof(int64_t), cudaMemcpyDeviceToHost, scope.stream));
  PF_CUDA_CHECK(cudaStreamSynchronize(scope.stream));
  PF_CHECK(total == rows, ctx.op.name, ": out has ", rows, " rows but the input has ", total, " non-zero elements");
}

}  // namespace

std::vector<KernelDef> indexing_kernels() {
  const std::vector<DType> all = supported_dtypes<AllTypes>();
  return {
      {"index", all, &index_entry},
      {"index_put", all, &index_put_entry},
      {"where", all, &where_entry},
      {"nonzero", all, &nonzero_entry},
  };
}

}  // namespace plugflow::cuda
