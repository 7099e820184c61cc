// Shape-family kernels (docs/kernels.md, "Shape ops") on CUDA: sort, topk, tril/triu, flip,
// pad (reflect / replicate / circular), unique, and the along-dim gather / scatter-add.
//
//   * sort / topk: each line's elements become unsigned radix keys that order like the values
//     (NaN largest, -0 == +0, f16/bf16 as float; complemented for a descending order) and a
//     stable CUB radix sort of (key, index) pairs, segmented by line, orders them; equal keys
//     keep their input order, so the result is the stable one and matches the CPU exactly.
//     topk sorts the whole line and keeps the first k (a simple, exact approach).
//   * unique: rows ordered lexicographically by one stable radix pass per column, last column
//     first (LSD), then group starts flagged, scanned into group numbers, and written.
//   * tril / triu / flip / pad: one gather over the output's logical elements (each thread
//     decodes its coordinates), so any input and output strides work.
//   * _take_along_dim / _scatter_add_along_dim: elementwise over the index's shape with the
//     data tensor restrided to it (stride 0 along dim); scatter-add accumulates atomically.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <climits>
#include <string>

#include "atomics.cuh"
#include "elementwise.cuh"
#include "index_check.cuh"
#include "lines.cuh"
#include "opdefs.h"

namespace plugflow::cuda {
namespace {

template <size_t Size> struct word;
template <> struct word<1> { using type = uint8_t; };
template <> struct word<2> { using type = uint16_t; };
template <> struct word<4> { using type = uint32_t; };
template <> struct word<8> { using type = uint64_t; };
// The unsigned type of T's size: element moves that only copy bits.
template <typename T> using word_t = typename word<sizeof(T)>::type;

// Grid-stride loop bounds for n items (64-bit).
#define PF_GRID_STRIDE_LOOP(i, n)                                                                      \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);               \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- radix keys -----------------------------------------------------------------------------------

// An unsigned key whose order is the value order of docs/kernels.md: integers by value, floats
// by value with -0 == +0 and every NaN equal and above +inf, f16/bf16 as float.
template <typename D>
PF_DEVICE word_t<D> radix_key(D x) {
  using K = word_t<D>;
  constexpr K kSign = K(K(1) << (8 * sizeof(D) - 1));
  if constexpr (std::is_same_v<D, bool> || std::is_same_v<D, uint8_t>) {
    return static_cast<K>(x);
  } else if constexpr (std::is_integral_v<D>) {
    return static_cast<K>(static_cast<K>(x) ^ kSign);
  } else {
    const auto v = to_opmath(x);
    if (v != v) return static_cast<K>(~K(0));
    if (v == decltype(v)(0)) return kSign;  // +0 (and -0) after the transform below
    K bits;
    if constexpr (std::is_same_v<D, __half>) bits = __half_as_ushort(x);
    else if constexpr (std::is_same_v<D, __nv_bfloat16>) bits = __bfloat16_as_ushort(x);
    else if constexpr (std::is_same_v<D, float>) bits = __float_as_uint(x);
    else bits = static_cast<K>(__double_as_longlong(x));
    return (bits & kSign) ? static_cast<K>(~bits) : static_cast<K>(bits | kSign);
  }
}

// Values are equal as the CPU's unique compares them (==: NaN never equal, -0 == +0).
template <typename D>
PF_DEVICE bool same_value(D a, D b) {
  return to_opmath(a) == to_opmath(b);
}

// ---- sort, topk ---------------------------------------------------------------------------------------

// Lines [first, first + count / n) of the input: key and position of each element, packed
// line after line.
template <typename D>
__global__ void line_keys_kernel(Lines L, const char* in, int64_t first, int64_t count, bool descending,
                                 word_t<D>* keys, int64_t* positions) {
  PF_GRID_STRIDE_LOOP(e, count) {
    const int64_t line = first + e / L.n, j = e % L.n;
    int64_t in_off, unused0, unused1;
    L.ix.output_offsets(line, in_off, unused0, unused1);
    const word_t<D> key = radix_key(*reinterpret_cast<const D*>(in + in_off + j * L.in_step));
    keys[e] = descending ? static_cast<word_t<D>>(~key) : key;
    positions[e] = j;
  }
}

__global__ void segment_offsets_kernel(int num_segments, int segment_len, int* offsets) {
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s <= num_segments;
       s += static_cast<int64_t>(gridDim.x) * blockDim.x)
    offsets[s] = static_cast<int>(s * segment_len);
}

// The first k of each sorted line: values[i] = a[order[i]], indices[i] = order[i].
template <typename W>
__global__ void write_sorted_kernel(Lines L, const char* in, char* values, char* indices, int64_t first, int64_t count,
                                    int64_t k, const int64_t* order) {
  PF_GRID_STRIDE_LOOP(e, count) {
    const int64_t local_line = e / k, i = e % k;
    int64_t in_off, v_off, i_off;
    L.ix.output_offsets(first + local_line, in_off, v_off, i_off);
    const int64_t j = order[local_line * L.n + i];
    *reinterpret_cast<W*>(values + v_off + i * L.out0_step) = *reinterpret_cast<const W*>(in + in_off + j * L.in_step);
    *reinterpret_cast<int64_t*>(indices + i_off + i * L.out1_step) = j;
  }
}

// Elements of one batch of lines: enough lines to keep the scratch buffers modest (~2^26
// elements), at least one whole line.
constexpr int64_t kSortBatchElements = int64_t{1} << 26;

// Stable-sorts `keys` (count = lines * n of them, packed line after line) together with
// `positions`, each line on its own, into keys_out / positions_out.
template <typename K>
void sort_packed_lines(const KernelScope& scope, const K* keys, K* keys_out, const int64_t* positions,
                       int64_t* positions_out, int64_t lines, int64_t n) {
  const int64_t count = lines * n;
  size_t temp_bytes = 0;
  if (lines == 1) {  // one line: the plain radix sort, which takes 64-bit counts
    PF_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_out, positions, positions_out, count,
                                                  0, static_cast<int>(8 * sizeof(K)), scope.stream));
    Workspace temp(scope.device, std::max<size_t>(temp_bytes, 1));
    PF_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, keys, keys_out, positions,
                                                  positions_out, count, 0, static_cast<int>(8 * sizeof(K)),
                                                  scope.stream));
    return;
  }
  // Several lines of a batch: count < 2^31 (kSortBatchElements), as the segmented sort needs.
  Workspace offsets(scope.device, static_cast<size_t>(lines + 1) * sizeof(int));
  segment_offsets_kernel<<<scope.blocks_for(lines + 1), kBlockThreads, 0, scope.stream>>>(
      static_cast<int>(lines), static_cast<int>(n), offsets.as<int>());
  PF_CUDA_CHECK_LAUNCH();
  const int* begin = offsets.as<int>();
  PF_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_out, positions, positions_out,
                                                         static_cast<int>(count), static_cast<int>(lines), begin,
                                                         begin + 1, 0, static_cast<int>(8 * sizeof(K)), scope.stream));
  Workspace temp(scope.device, std::max<size_t>(temp_bytes, 1));
  PF_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(temp.as<void>(), temp_bytes, keys, keys_out, positions,
                                                         positions_out, static_cast<int>(count),
                                                         static_cast<int>(lines), begin, begin + 1, 0,
                                                         static_cast<int>(8 * sizeof(K)), scope.stream));
}

// sort (k = n) and topk: the first k of every line, ordered ascending or descending, stable.
template <typename D>
void sort_lines(const KernelScope& scope, const Tensor& a, const Lines& L, const Tensor& values,
                const Tensor& indices, int64_t k, bool descending) {
  using K = word_t<D>;
  if (L.num_lines == 0 || L.n == 0 || k == 0) return;
  const int64_t batch_lines = std::max<int64_t>(1, std::min(L.num_lines, kSortBatchElements / L.n));
  const int64_t batch_max = batch_lines * L.n;
  Workspace keys(scope.device, static_cast<size_t>(batch_max) * sizeof(K));
  Workspace keys_sorted(scope.device, static_cast<size_t>(batch_max) * sizeof(K));
  Workspace positions(scope.device, static_cast<size_t>(batch_max) * sizeof(int64_t));
  Workspace order(scope.device, static_cast<size_t>(batch_max) * sizeof(int64_t));
  const char* in = static_cast<const char*>(a.data_ptr());
  for (int64_t first = 0; first < L.num_lines; first += batch_lines) {
    const int64_t lines = std::min(batch_lines, L.num_lines - first);
    const int64_t count = lines * L.n;
    line_keys_kernel<D><<<scope.blocks_for(count), kBlockThreads, 0, scope.stream>>>(
        L, in, first, count, descending, keys.as<K>(), positions.as<int64_t>());
    PF_CUDA_CHECK_LAUNCH();
    sort_packed_lines<K>(scope, keys.as<K>(), keys_sorted.as<K>(), positions.as<int64_t>(), order.as<int64_t>(), lines,
                         L.n);
    write_sorted_kernel<word_t<D>><<<scope.blocks_for(lines * k), kBlockThreads, 0, scope.stream>>>(
        L, in, static_cast<char*>(values.data_ptr()), static_cast<char*>(indices.data_ptr()), first, lines * k, k,
        order.as<int64_t>());
    PF_CUDA_CHECK_LAUNCH();
  }
}

void sort_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor &values = ctx.output(0), &indices = ctx.output(1);
  PF_CHECK(values.dtype() == a.dtype() && indices.dtype() == DType::Int64 && values.sizes() == a.sizes() &&
               indices.sizes() == a.sizes(),
           "cuda 'sort' kernel writes values of the input's shape and dtype and int64 indices");
  const Lines L = make_lines(a, ctx.attr<int64_t>("dim"), values, &indices);
  const bool descending = ctx.attr<bool>("descending");
  dispatch_supported<AllTypes>(ctx, a.dtype(), [&](auto tag) {
    sort_lines<dev_t<typename decltype(tag)::type>>(scope, a, L, values, indices, L.n, descending);
  });
}

void topk_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor &values = ctx.output(0), &indices = ctx.output(1);
  const int64_t dim = ctx.attr<int64_t>("dim"), k = ctx.attr<int64_t>("k");
  const Lines L = make_lines(a, dim, values, &indices);
  PF_CHECK(k >= 0 && k <= L.n, "selected index k out of range");
  PF_CHECK(values.dtype() == a.dtype() && indices.dtype() == DType::Int64 && values.sizes()[dim] == k &&
               indices.sizes()[dim] == k,
           "cuda 'topk' kernel writes k values of the input's dtype and k int64 indices along dim");
  const bool largest = ctx.attr<bool>("largest");
  dispatch_supported<NumericTypes>(ctx, a.dtype(), [&](auto tag) {
    sort_lines<dev_t<typename decltype(tag)::type>>(scope, a, L, values, indices, k, largest);
  });
}

// ---- gathers over the output's logical elements (tril, triu, flip, pad) -------------------------------

constexpr int kMaxGatherDims = kMaxLayoutDims;

// How output coordinate c along a dim maps to the input coordinate.
enum class MapMode : int { Identity, Flip, Reflect, Replicate, Circular };

struct GatherGeometry {
  int ndim = 0;
  int64_t out_sizes[kMaxGatherDims] = {};
  int64_t out_strides[kMaxGatherDims] = {};  // bytes
  int64_t in_sizes[kMaxGatherDims] = {};
  int64_t in_strides[kMaxGatherDims] = {};  // bytes
  int64_t before[kMaxGatherDims] = {};      // pad: the leading pad (negative crops)
  MapMode mode[kMaxGatherDims] = {};
};

PF_DEVICE int64_t source_coord(MapMode mode, int64_t c, int64_t n, int64_t before) {
  switch (mode) {
    case MapMode::Identity: return c;
    case MapMode::Flip: return n - 1 - c;
    case MapMode::Reflect: {
      int64_t s = c - before;
      if (s < 0) s = -s;
      if (s >= n) s = 2 * (n - 1) - s;
      return s;
    }
    case MapMode::Replicate: {
      const int64_t s = c - before;
      return s < 0 ? 0 : (s >= n ? n - 1 : s);
    }
    case MapMode::Circular: {
      const int64_t s = (c - before) % n;
      return s < 0 ? s + n : s;
    }
  }
  return c;
}

// out[c] = in[source(c)]. index_t: uint32_t when the output has fewer than 2^31 elements
// (cheaper divisions), int64_t otherwise.
template <typename W, typename index_t>
__global__ void gather_map_kernel(index_t numel, const char* in, char* out, GatherGeometry g) {
  const index_t step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < numel; e += step) {
    index_t r = e;
    int64_t in_off = 0, out_off = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const index_t size = static_cast<index_t>(g.out_sizes[d]);
      const index_t q = r / size;
      const int64_t c = static_cast<int64_t>(r - q * size);
      r = q;
      out_off += c * g.out_strides[d];
      in_off += source_coord(g.mode[d], c, g.in_sizes[d], g.before[d]) * g.in_strides[d];
    }
    *reinterpret_cast<W*>(out + out_off) = *reinterpret_cast<const W*>(in + in_off);
  }
}

// out[..., i, j] = keep(i, j) ? a[..., i, j] : 0, keep = j - i <= diagonal (tril) or >= (triu).
// The output may be the input (in place): each element is read, then written, by one thread.
template <typename W, typename index_t>
__global__ void triangle_kernel(index_t numel, const char* in, char* out, GatherGeometry g, int64_t diagonal,
                                bool lower) {
  const index_t step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < numel; e += step) {
    index_t r = e;
    int64_t in_off = 0, out_off = 0, row = 0, col = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const index_t size = static_cast<index_t>(g.out_sizes[d]);
      const index_t q = r / size;
      const int64_t c = static_cast<int64_t>(r - q * size);
      r = q;
      if (d == g.ndim - 1) col = c;
      if (d == g.ndim - 2) row = c;
      out_off += c * g.out_strides[d];
      in_off += c * g.in_strides[d];
    }
    // col - row cannot overflow (both in [0, 2^63)); diagonal may be any int64.
    const bool keep = lower ? col - row <= diagonal : col - row >= diagonal;
    *reinterpret_cast<W*>(out + out_off) = keep ? *reinterpret_cast<const W*>(in + in_off) : W(0);
  }
}

GatherGeometry gather_geometry(const Tensor& in, const Tensor& out, const char* op) {
  PF_CHECK(in.dim() == out.dim(), op, ": input and output need the same number of dims");
  PF_CHECK(out.dim() <= kMaxGatherDims, "cuda '", op, "' kernel supports up to ", kMaxGatherDims, " dims, got ",
           out.dim());
  GatherGeometry g;
  g.ndim = static_cast<int>(out.dim());
  for (int d = 0; d < g.ndim; ++d) {
    g.out_sizes[d] = out.sizes()[d];
    g.out_strides[d] = out.strides()[d] * static_cast<int64_t>(out.itemsize());
    g.in_sizes[d] = in.sizes()[d];
    g.in_strides[d] = in.strides()[d] * static_cast<int64_t>(in.itemsize());
    g.mode[d] = MapMode::Identity;
  }
  return g;
}

void launch_gather_map(const KernelScope& scope, const Tensor& in, const Tensor& out, const GatherGeometry& g) {
  const int64_t numel = out.numel();
  if (numel == 0) return;
  const char* src = static_cast<const char*>(in.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  visit_dtype(out.dtype(), [&](auto tag) {
    using W = word_t<typename decltype(tag)::type>;
    if (numel <= INT32_MAX)
      gather_map_kernel<W, uint32_t><<<scope.blocks_for(numel), kBlockThreads, 0, scope.stream>>>(
          static_cast<uint32_t>(numel), src, dst, g);
    else
      gather_map_kernel<W, int64_t><<<scope.blocks_for(numel), kBlockThreads, 0, scope.stream>>>(numel, src, dst, g);
    PF_CUDA_CHECK_LAUNCH();
  });
}

template <bool Lower>
void tril_triu_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  PF_CHECK(a.dim() >= 2 && out.sizes() == a.sizes() && out.dtype() == a.dtype(), "cuda '", ctx.op.name,
           "' kernel needs a (batched) matrix and an output of its shape and dtype");
  const GatherGeometry g = gather_geometry(a, out, ctx.op.name.c_str());
  const int64_t diagonal = ctx.attr<int64_t>("diagonal");
  const int64_t numel = out.numel();
  if (numel == 0) return;
  const char* src = static_cast<const char*>(a.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  visit_dtype(out.dtype(), [&](auto tag) {
    using W = word_t<typename decltype(tag)::type>;  // all-zero bits are 0 (+0.0) in every dtype
    if (numel <= INT32_MAX)
      triangle_kernel<W, uint32_t><<<scope.blocks_for(numel), kBlockThreads, 0, scope.stream>>>(
          static_cast<uint32_t>(numel), src, dst, g, diagonal, Lower);
    else
      triangle_kernel<W, int64_t><<<scope.blocks_for(numel), kBlockThreads, 0, scope.stream>>>(numel, src, dst, g,
                                                                                                 diagonal, Lower);
    PF_CUDA_CHECK_LAUNCH();
  });
}

void flip_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  PF_CHECK(out.sizes() == a.sizes() && out.dtype() == a.dtype(), "cuda 'flip' kernel writes its input's shape and dtype");
  GatherGeometry g = gather_geometry(a, out, "flip");
  for (int64_t d : ctx.attr<Shape>("dims")) {
    PF_CHECK_T(d >= 0 && d < a.dim(), IndexError, "flip: dim ", d, " out of range");
    g.mode[d] = MapMode::Flip;
  }
  launch_gather_map(scope, a, out, g);
}

void pad_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  const Shape& pads = ctx.attr<Shape>("pads");
  const std::string& mode = ctx.attr<std::string>("mode");
  PF_CHECK(static_cast<int64_t>(pads.size()) == 2 * a.dim(), "pad: expected 2 pads per dim");
  PF_CHECK(out.dtype() == a.dtype(), "cuda 'pad' kernel writes its input's dtype");
  MapMode padded;
  if (mode == "reflect") padded = MapMode::Reflect;
  else if (mode == "replicate") padded = MapMode::Replicate;
  else if (mode == "circular") padded = MapMode::Circular;
  else PF_THROW(Error, "pad: unknown mode '", mode, "'");
  GatherGeometry g = gather_geometry(a, out, "pad");
  for (int64_t d = 0; d < a.dim(); ++d) {
    const int64_t before = pads[2 * d], after = pads[2 * d + 1], n = a.sizes()[d], m = out.sizes()[d];
    PF_CHECK(m == n + before + after, "pad: output size ", m, " of dim ", d, " is not ", n, " + ", before, " + ",
             after);
    if (before == 0 && after == 0) continue;
    if (m == 0) continue;  // nothing to write (out.numel() == 0)
    PF_CHECK(n > 0, "pad: cannot pad an empty dim");
    if (padded == MapMode::Reflect) {
      // The source index is monotone between the ends, so checking both ends checks all.
      const int64_t first = -before, last = m - 1 - before;
      PF_CHECK(first > -n && last < 2 * n - 1, "pad: reflect padding must be smaller than the input size");
    }
    g.mode[d] = padded;
    g.before[d] = before;
  }
  launch_gather_map(scope, a, out, g);
}

// ---- unique ------------------------------------------------------------------------------------------------

// rows (n, m) with element strides; row r, column c.
struct RowsView {
  const char* data;
  int64_t row_stride, col_stride;  // bytes
  int64_t n, m;
};

template <typename D>
PF_DEVICE D row_elem(const RowsView& v, int64_t r, int64_t c) {
  return *reinterpret_cast<const D*>(v.data + r * v.row_stride + c * v.col_stride);
}

__global__ void iota_kernel(int64_t n, int64_t* out) {
  PF_GRID_STRIDE_LOOP(i, n) out[i] = i;
}

template <typename D>
__global__ void column_keys_kernel(RowsView v, int64_t col, const int64_t* order, word_t<D>* keys) {
  PF_GRID_STRIDE_LOOP(i, v.n) keys[i] = radix_key(row_elem<D>(v, order[i], col));
}

// flags[i] = 1 where sorted row i starts a group (differs from row i - 1).
template <typename D>
__global__ void group_start_kernel(RowsView v, const int64_t* order, int64_t* flags) {
  PF_GRID_STRIDE_LOOP(i, v.n) {
    bool start = i == 0;
    for (int64_t c = 0; !start && c < v.m; ++c)
      start = !same_value(row_elem<D>(v, order[i - 1], c), row_elem<D>(v, order[i], c));
    flags[i] = start ? 1 : 0;
  }
}

struct UniqueOut {
  char* values;
  int64_t v_row_stride, v_col_stride;  // bytes
  int64_t* inverse;
  int64_t inverse_stride;  // elements
  int64_t* counts;
  int64_t counts_stride;  // elements
  int64_t* num;
};

// group[i] = the inclusive scan of the start flags = group number + 1 of sorted row i.
template <typename W>
__global__ void unique_write_kernel(RowsView v, const int64_t* order, const int64_t* group, UniqueOut o,
                                    int64_t* group_first) {
  PF_GRID_STRIDE_LOOP(i, v.n) {
    const int64_t g = group[i] - 1;
    const int64_t row = order[i];
    o.inverse[row * o.inverse_stride] = g;
    const bool start = i == 0 || group[i - 1] != group[i];
    if (!start) continue;
    group_first[g] = i;
    for (int64_t c = 0; c < v.m; ++c)
      *reinterpret_cast<W*>(o.values + g * o.v_row_stride + c * o.v_col_stride) =
          *reinterpret_cast<const W*>(v.data + row * v.row_stride + c * v.col_stride);
  }
}

__global__ void unique_counts_kernel(int64_t n, const int64_t* group, const int64_t* group_first, UniqueOut o) {
  PF_GRID_STRIDE_LOOP(i, n) {
    const bool last = i == n - 1 || group[i + 1] != group[i];
    if (!last) continue;
    const int64_t g = group[i] - 1;
    o.counts[g * o.counts_stride] = i + 1 - group_first[g];
    if (i == n - 1) *o.num = g + 1;
  }
}

void unique_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor &values = ctx.output(0), &inverse = ctx.output(1), &counts = ctx.output(2), &num = ctx.output(3);
  PF_CHECK(a.dim() == 2 && values.sizes() == a.sizes() && values.dtype() == a.dtype() && inverse.dim() == 1 &&
               counts.dim() == 1 && inverse.sizes()[0] == a.sizes()[0] && counts.sizes()[0] == a.sizes()[0] &&
               num.numel() == 1 && inverse.dtype() == DType::Int64 && counts.dtype() == DType::Int64 &&
               num.dtype() == DType::Int64,
           "cuda 'unique' kernel: rows (n, m) give values (n, m), inverse (n), counts (n) and num (1) int64");
  const bool consecutive = ctx.attr<bool>("consecutive");
  const int64_t isz = static_cast<int64_t>(a.itemsize());
  const RowsView rows{static_cast<const char*>(a.data_ptr()), a.strides()[0] * isz, a.strides()[1] * isz,
                      a.sizes()[0], a.sizes()[1]};
  const int64_t n = rows.n;
  if (n == 0) return;
  const UniqueOut o{static_cast<char*>(values.data_ptr()), values.strides()[0] * isz, values.strides()[1] * isz,
                    inverse.data<int64_t>(), inverse.strides()[0], counts.data<int64_t>(), counts.strides()[0],
                    num.data<int64_t>()};
  const size_t index_bytes = static_cast<size_t>(n) * sizeof(int64_t);
  Workspace order(scope.device, index_bytes), order_alt(scope.device, index_bytes);
  int64_t* ord = order.as<int64_t>();
  int64_t* ord_alt = order_alt.as<int64_t>();
  const unsigned blocks = scope.blocks_for(n);
  iota_kernel<<<blocks, kBlockThreads, 0, scope.stream>>>(n, ord);
  PF_CUDA_CHECK_LAUNCH();
  visit_dtype(a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    using K = word_t<D>;
    if (!consecutive) {
      // LSD: a stable sort by each column, last to first, leaves rows in lexicographic order
      // with ties in input order.
      Workspace keys(scope.device, static_cast<size_t>(n) * sizeof(K)), keys_sorted(scope.device, static_cast<size_t>(n) * sizeof(K));
      for (int64_t c = rows.m - 1; c >= 0; --c) {
        column_keys_kernel<D><<<blocks, kBlockThreads, 0, scope.stream>>>(rows, c, ord, keys.as<K>());
        PF_CUDA_CHECK_LAUNCH();
        sort_packed_lines<K>(scope, keys.as<K>(), keys_sorted.as<K>(), ord, ord_alt, 1, n);
        std::swap(ord, ord_alt);
      }
    }
    Workspace group(scope.device, index_bytes), group_first(scope.device, index_bytes);
    group_start_kernel<D><<<blocks, kBlockThreads, 0, scope.stream>>>(rows, ord, group.as<int64_t>());
    PF_CUDA_CHECK_LAUNCH();
    size_t temp_bytes = 0;
    PF_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, group.as<int64_t>(), n, scope.stream));
    {
      Workspace temp(scope.device, std::max<size_t>(temp_bytes, 1));
      PF_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp.as<void>(), temp_bytes, group.as<int64_t>(), n, scope.stream));
    }
    unique_write_kernel<word_t<D>><<<blocks, kBlockThreads, 0, scope.stream>>>(rows, ord, group.as<int64_t>(), o,
                                                                               group_first.as<int64_t>());
    PF_CUDA_CHECK_LAUNCH();
    unique_counts_kernel<<<blocks, kBlockThreads, 0, scope.stream>>>(n, group.as<int64_t>(), group_first.as<int64_t>(),
                                                                      o);
    PF_CUDA_CHECK_LAUNCH();
  });
}

// ---- along-dim gather / scatter-add ---------------------------------------------------------------------

// `t` seen with index's sizes (index.size(d) <= t.size(d) for d != dim) and stride 0 along dim:
// operand e of the walk is the start of index element e's line in t.
Tensor along_dim_view(const Tensor& t, const Tensor& index, int64_t dim, const char* op) {
  PF_CHECK(t.dim() == index.dim(), op, ": index needs ", t.dim(), " dims, got ", index.dim());
  Shape strides = t.strides();
  for (int64_t d = 0; d < t.dim(); ++d)
    PF_CHECK(d == dim || index.sizes()[d] <= t.sizes()[d], op, ": index size ", index.sizes()[d], " exceeds size ",
             t.sizes()[d], " at dim ", d);
  strides[dim] = 0;
  return Tensor::view_of(t.storage(), index.sizes(), strides, t.offset(), t.dtype());
}

// Operands: [0] out (take) or the restrided destination (scatter), [1] index, [2] the other.
struct AlongDim {
  int64_t size;        // of the data tensor along dim (the valid index range)
  int64_t data_step;   // its byte stride along dim
};

template <typename W>
__global__ void take_along_dim_kernel(uint32_t n, OperandPtrs<3> base, ElementwiseOffsets<3> calc, AlongDim ad,
                                      BadIndex* bad) {
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[3];
    calc.get(i, off);
    const int64_t k = *reinterpret_cast<const int64_t*>(base.p[1] + off[1]);
    if (k < 0 || k >= ad.size) {
      report_bad_index(bad, k, 0);
      continue;
    }
    *reinterpret_cast<W*>(base.p[0] + off[0]) = *reinterpret_cast<const W*>(base.p[2] + off[2] + k * ad.data_step);
  }
}

template <typename D>
__global__ void scatter_add_along_dim_kernel(uint32_t n, OperandPtrs<3> base, ElementwiseOffsets<3> calc, AlongDim ad,
                                             BadIndex* bad) {
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[3];
    calc.get(i, off);
    const int64_t k = *reinterpret_cast<const int64_t*>(base.p[1] + off[1]);
    if (k < 0 || k >= ad.size) {
      report_bad_index(bad, k, 0);
      continue;
    }
    atomic_accumulate(reinterpret_cast<D*>(base.p[0] + off[0] + k * ad.data_step),
                      *reinterpret_cast<const D*>(base.p[2] + off[2]));
  }
}

// Runs launch(n, base, calc, bad) over 32-bit pieces of the walk and raises a bad index as the
// CPU kernel does (a RuntimeError naming it).
template <typename Launch>
void run_along_dim(const KernelScope& scope, const StridedLayout& layout, int64_t dim, int64_t size,
                   const Launch& launch) {
  if (layout.numel == 0) return;
  BadIndexCheck check(scope);
  for_each_32bit_piece(layout, [&](const StridedLayout& piece) {
    OperandPtrs<3> base{};
    for (int q = 0; q < 3; ++q) base.p[q] = piece.data[q];
    launch(static_cast<uint32_t>(piece.numel), base, ElementwiseOffsets<3>::from_layout(piece), check.slot());
    PF_CUDA_CHECK_LAUNCH();
  });
  if (const auto bad = check.wait())
    PF_THROW(Error, "index ", bad->value, " is out of bounds for dimension ", dim, " with size ", size);
}

void take_along_dim_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor &a = ctx.input(0), &index = ctx.input(1);
  const Tensor& out = ctx.output(0);
  const int64_t dim = ctx.attr<int64_t>("dim");
  PF_CHECK_T(dim >= 0 && dim < a.dim(), IndexError, "_take_along_dim: dim ", dim, " out of range");
  PF_CHECK(index.dtype() == DType::Int64 && out.dtype() == a.dtype() && out.sizes() == index.sizes(),
           "cuda '_take_along_dim' kernel needs an int64 index and an output of its shape and the input's dtype");
  const Tensor a_view = along_dim_view(a, index, dim, "_take_along_dim");
  const AlongDim ad{a.sizes()[dim], a.strides()[dim] * static_cast<int64_t>(a.itemsize())};
  const StridedLayout layout = make_layout({&out, &index, &a_view});
  visit_dtype(a.dtype(), [&](auto tag) {
    using W = word_t<typename decltype(tag)::type>;
    run_along_dim(scope, layout, dim, ad.size, [&](uint32_t n, const auto& base, const auto& calc, BadIndex* bad) {
      take_along_dim_kernel<W><<<scope.blocks_for(n), kBlockThreads, 0, scope.stream>>>(n, base, calc, ad, bad);
    });
  });
}

struct ZeroFn {
  PF_DEVICE int operator()() const { return 0; }
};

void scatter_add_along_dim_entry(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor &src = ctx.input(0), &index = ctx.input(1);
  const Tensor& out = ctx.output(0);
  const int64_t dim = ctx.attr<int64_t>("dim");
  PF_CHECK_T(dim >= 0 && dim < out.dim(), IndexError, "_scatter_add_along_dim: dim ", dim, " out of range");
  PF_CHECK(index.dtype() == DType::Int64 && out.dtype() == src.dtype() && src.sizes() == index.sizes(),
           "cuda '_scatter_add_along_dim' kernel needs an int64 index of src's shape and an output of src's dtype");
  const Tensor out_view = along_dim_view(out, index, dim, "_scatter_add_along_dim");
  const AlongDim ad{out.sizes()[dim], out.strides()[dim] * static_cast<int64_t>(out.itemsize())};
  const StridedLayout layout = make_layout({&out_view, &index, &src});
  dispatch_supported<NumericTypes>(ctx, src.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    launch_elementwise<D>(make_layout({&out}), scope, ZeroFn{});
    run_along_dim(scope, layout, dim, ad.size, [&](uint32_t n, const auto& base, const auto& calc, BadIndex* bad) {
      scatter_add_along_dim_kernel<D><<<scope.blocks_for(n), kBlockThreads, 0, scope.stream>>>(n, base, calc, ad, bad);
    });
  });
}

}  // namespace

std::vector<KernelDef> shape_kernels() {
  const std::vector<DType> all = supported_dtypes<AllTypes>(), numeric = supported_dtypes<NumericTypes>();
  // core/opdefs/shape.yaml names the kernel function and dtypes of sort, topk, flip, pad and
  // unique; the others are registered here (their `kernel: custom`).
  return {
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) {name, {PF_OPDEFS_UNPAREN cuda_dtypes}, fn},
      PF_OPDEFS_SHAPE_KERNELS(PF_X)
#undef PF_X
      {"tril", all, &tril_triu_kernel<true>},
      {"triu", all, &tril_triu_kernel<false>},
      {"_take_along_dim", all, &take_along_dim_entry},
      {"_scatter_add_along_dim", numeric, &scatter_add_along_dim_entry},
  };
}

}  // namespace plugflow::cuda
