// Indexing kernels (docs/kernels.md, "Indexing"): index, index_put, where, nonzero.
//
// index and index_put walk the iteration shape like an elementwise op. The core hands them
// the data tensor restrided to that shape (the indexed dims with stride 0) and the int64 index
// tensors broadcast to it; element e then lives at data[e] + sum_j idx_j[e] * strides[j].
// Gather, scatter, index_select, index_add, take and t[idx] are all this one walk.
#include <cstring>
#include <vector>

#include "kernels.h"
#include "loops.h"

namespace plugflow::cpu {
namespace {

template <size_t Size> struct word;
template <> struct word<1> { using type = uint8_t; };
template <> struct word<2> { using type = uint16_t; };
template <> struct word<4> { using type = uint32_t; };
template <> struct word<8> { using type = uint64_t; };

// The index attributes, read once per call.
struct IndexAttrs {
  int k = 0;  // number of index tensors
  const int64_t* sizes;
  const int64_t* strides;  // in elements
  const int64_t* dims;     // reported in errors
  bool wrap;
};

IndexAttrs read_attrs(const KernelContext& ctx, int k) {
  const auto& sizes = ctx.attr<Shape>("sizes");
  const auto& strides = ctx.attr<Shape>("strides");
  const auto& dims = ctx.attr<Shape>("dims");
  PF_CHECK(static_cast<int>(sizes.size()) == k && static_cast<int>(strides.size()) == k &&
               static_cast<int>(dims.size()) == k,
           ctx.op.name, ": need one size, stride and dim per index tensor");
  PF_CHECK(k + 2 <= kMaxLayoutOperands, ctx.op.name, ": at most ", kMaxLayoutOperands - 2,
           " index tensors per kernel call, got ", k);
  return {k, sizes.data(), strides.data(), dims.data(), ctx.attr<bool>("wrap")};
}

[[noreturn]] void out_of_bounds(int64_t value, int64_t dim, int64_t size) {
  PF_THROW(IndexError, "index ", value, " is out of bounds for dimension ", dim, " with size ", size);
}

// Byte offset of element i of the piece: sum_j idx_j * strides[j] * itemsize, checked.
// Operands idx_j are p[first + j] with byte strides s[first + j].
inline int64_t element_offset(const IndexAttrs& a, char* const* p, const int64_t* s, int first, int64_t i,
                              int64_t itemsize) {
  int64_t off = 0;
  for (int j = 0; j < a.k; ++j) {
    const int64_t v = *reinterpret_cast<const int64_t*>(p[first + j] + i * s[first + j]);
    const int64_t w = a.wrap && v < 0 ? v + a.sizes[j] : v;
    if (w < 0 || w >= a.sizes[j]) out_of_bounds(v, a.dims[j], a.sizes[j]);
    off += w * a.strides[j];
  }
  return off * itemsize;
}

// Operands: [out, src, idx...]; out[e] = src[e + offset(e)]. Only the element size matters.
template <typename W>
void index_loop(KernelContext& ctx) {
  const Tensor& out = ctx.output(0);
  const int k = static_cast<int>(ctx.inputs.size()) - 1;
  const IndexAttrs a = read_attrs(ctx, k);
  std::array<const Tensor*, kMaxLayoutOperands> ops{};
  ops[0] = &out;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) ops[i + 1] = &ctx.inputs[i];
  const StridedLayout L = make_layout(std::span<const Tensor* const>(ops.data(), k + 2));
  const int nops = k + 2;
  parallel_for(L.numel, kGrainSize / 4, [&](int64_t b, int64_t e) {
    for_each_piece(L, b, e, [&](char* const* p, int64_t n) {
      std::array<int64_t, kMaxLayoutOperands> s{};
      for (int q = 0; q < nops; ++q) s[q] = L.ndim == 0 ? 0 : L.byte_strides[q][L.ndim - 1];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t off = element_offset(a, p, s.data(), 2, i, sizeof(W));
        W v;
        std::memcpy(&v, p[1] + i * s[1] + off, sizeof(W));
        std::memcpy(p[0] + i * s[0], &v, sizeof(W));
      }
    });
  });
}

void index_kernel(KernelContext& ctx) {
  switch (ctx.output(0).itemsize()) {
    case 1: return index_loop<word<1>::type>(ctx);
    case 2: return index_loop<word<2>::type>(ctx);
    case 4: return index_loop<word<4>::type>(ctx);
    default: return index_loop<word<8>::type>(ctx);
  }
}

// dst += v in the dtype's arithmetic (bool: or; integers wrap; 16-bit floats through float).
template <typename T>
inline T accumulate(T dst, T v) {
  if constexpr (std::is_same_v<T, bool>) return dst || v;
  else if constexpr (is_int_v<T>) return wrap_add(dst, v);
  else return convert<T>(static_cast<opmath_t<T>>(dst) + static_cast<opmath_t<T>>(v));
}

// Operands: [dst, values, idx...]; dst[e + offset(e)] = values[e] (or +=). Accumulation runs on
// one thread in iteration order, so duplicates add up deterministically.
template <typename T>
void index_put_loop(KernelContext& ctx) {
  const Tensor& dst = ctx.output(0);
  const int k = static_cast<int>(ctx.inputs.size()) - 1;
  const IndexAttrs a = read_attrs(ctx, k);
  const bool acc = ctx.attr<bool>("accumulate");
  std::array<const Tensor*, kMaxLayoutOperands> ops{};
  ops[0] = &dst;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) ops[i + 1] = &ctx.inputs[i];
  const int nops = k + 2;
  const StridedLayout L = make_layout(std::span<const Tensor* const>(ops.data(), nops));
  auto piece = [&](char* const* p, int64_t n) {
    std::array<int64_t, kMaxLayoutOperands> s{};
    for (int q = 0; q < nops; ++q) s[q] = L.ndim == 0 ? 0 : L.byte_strides[q][L.ndim - 1];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t off = element_offset(a, p, s.data(), 2, i, sizeof(T));
      T* d = reinterpret_cast<T*>(p[0] + i * s[0] + off);
      const T v = *reinterpret_cast<const T*>(p[1] + i * s[1]);
      *d = acc ? accumulate(*d, v) : v;
    }
  };
  if (acc) for_each_piece(L, 0, L.numel, piece);
  else parallel_for(L.numel, kGrainSize / 4, [&](int64_t b, int64_t e) { for_each_piece(L, b, e, piece); });
}

void index_put_kernel(KernelContext& ctx) {
  visit_dtype(ctx.output(0).dtype(), [&](auto tag) { index_put_loop<typename decltype(tag)::type>(ctx); });
}

// out = condition ? self : other; operands broadcast by the core.
void where_kernel(KernelContext& ctx) {
  visit_dtype(ctx.input(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    elementwise<T, T, T, bool>(ctx.output(0), {&ctx.input(0), &ctx.input(1), &ctx.input(2)},
                               [](T a, T b, bool c) { return c ? a : b; });
  });
}

template <typename T>
inline bool is_nonzero(const char* p) {
  const T v = *reinterpret_cast<const T*>(p);
  if constexpr (is_reduced_float_v<T>) return static_cast<float>(v) != 0.0f;
  else return v != T(0);
}

// Calls f(ptr, coords) for the logical elements [begin, end) of t in row-major order.
template <typename F>
void walk_row_major(const Tensor& t, int64_t begin, int64_t end, F&& f) {
  const int64_t nd = t.dim();
  std::vector<int64_t> coord(nd, 0);
  const char* base = static_cast<const char*>(t.data_ptr());
  const auto isz = static_cast<int64_t>(t.itemsize());
  int64_t r = begin;
  const char* p = base;
  for (int64_t d = nd - 1; d >= 0; --d) {
    coord[d] = r % t.sizes()[d];
    r /= t.sizes()[d];
    p += coord[d] * t.strides()[d] * isz;
  }
  for (int64_t i = begin; i < end; ++i) {
    f(p, coord.data());
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++coord[d] < t.sizes()[d]) {
        p += t.strides()[d] * isz;
        break;
      }
      p -= (t.sizes()[d] - 1) * t.strides()[d] * isz;
      coord[d] = 0;
    }
  }
}

// out (n, ndim) int64: the coordinates of self's non-zero elements in row-major order. Two
// passes over the same slices: count per slice, then write from each slice's prefix offset.
void nonzero_kernel(KernelContext& ctx) {
  const Tensor& self = ctx.input(0);
  Tensor& out = ctx.output(0);
  const int64_t nd = self.dim(), numel = self.numel();
  PF_CHECK(out.dtype() == DType::Int64 && out.dim() == 2 && out.sizes()[1] == nd && out.is_contiguous(), ctx.op.name,
           ": out must be a contiguous (n, ", nd, ") int64 tensor, got ", shape_str(out.sizes()));
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int slices = parallel_slices(numel, kGrainSize);
    const int64_t chunk = slices > 0 ? (numel + slices - 1) / slices : 0;
    std::vector<int64_t> counts(slices + 1, 0);
    parallel_for(slices, 1, [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e; ++s) {
        int64_t c = 0;
        walk_row_major(self, s * chunk, std::min(numel, (s + 1) * chunk),
                       [&](const char* p, const int64_t*) { c += is_nonzero<T>(p); });
        counts[s + 1] = c;
      }
    });
    for (int s = 0; s < slices; ++s) counts[s + 1] += counts[s];
    PF_CHECK(counts[slices] == out.sizes()[0], ctx.op.name, ": out has ", out.sizes()[0], " rows but the input has ",
             counts[slices], " non-zero elements");
    int64_t* o = out.data<int64_t>();
    parallel_for(slices, 1, [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e; ++s) {
        int64_t* row = o + counts[s] * nd;
        walk_row_major(self, s * chunk, std::min(numel, (s + 1) * chunk), [&](const char* p, const int64_t* coord) {
          if (!is_nonzero<T>(p)) return;
          for (int64_t d = 0; d < nd; ++d) row[d] = coord[d];
          row += nd;
        });
      }
    });
  });
}

}  // namespace

void register_indexing_kernels(Registrar& reg) {
  for (int d = 0; d < kNumDTypes; ++d) {
    const DType dt = static_cast<DType>(d);
    reg.kernel("index", DeviceType::CPU, {dt}, index_kernel);
    reg.kernel("index_put", DeviceType::CPU, {dt}, index_put_kernel);
    reg.kernel("where", DeviceType::CPU, {dt}, where_kernel);
    reg.kernel("nonzero", DeviceType::CPU, {dt}, nonzero_kernel);
  }
}

}  // namespace plugflow::cpu
