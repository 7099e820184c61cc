// copy (casting between every dtype pair, any strides), fill, arange, linspace.
#include <cstring>

#include "kernels.h"
#include "loops.h"
#include "opdefs.h"

namespace plugflow::cpu {
namespace {

template <size_t Size> struct bits;
template <> struct bits<1> { using type = uint8_t; };
template <> struct bits<2> { using type = uint16_t; };
template <> struct bits<4> { using type = uint32_t; };
template <> struct bits<8> { using type = uint64_t; };

// Dense operands laid out identically: one flat memcpy, split across threads.
bool copy_dense(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() != src.dtype() || dst.strides() != src.strides() || !dst.is_non_overlapping_and_dense())
    return false;
  // Strides are non-negative, so data_ptr is the lowest address of the dense block.
  char* d = static_cast<char*>(dst.data_ptr());
  const char* s = static_cast<const char*>(src.data_ptr());
  const int64_t nbytes = dst.numel() * static_cast<int64_t>(dst.itemsize());
  if (d == s) return true;
  parallel_for(nbytes, kGrainSize * 8, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, e - b); });
  return true;
}

// A transposing copy (dst contiguous along the dim where src is strided, and the other way
// round for the next dim out, e.g. contiguous() of a transposed matrix) walks one of the two
// with a large stride: a cache line per element. Copying in square tiles touches each line
// once per tile instead.
constexpr int64_t kTransposeTile = 32;

// Copies a rows x cols tile of item_size-byte elements between byte-strided layouts (values
// move as bits).
template <typename U>
void copy_tile_as(const char* src, int64_t s_row, int64_t s_col, char* dst, int64_t d_row, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    U* drow = reinterpret_cast<U*>(dst + r * d_row);
    const char* srow = src + r * s_row;
    for (int64_t c = 0; c < cols; ++c) drow[c] = *reinterpret_cast<const U*>(srow + c * s_col);
  }
}
void copy_tile(int64_t item_size, const char* src, int64_t s_row, int64_t s_col, char* dst, int64_t d_row, int64_t rows,
               int64_t cols) {
  switch (item_size) {
    case 1: return copy_tile_as<uint8_t>(src, s_row, s_col, dst, d_row, rows, cols);
    case 2: return copy_tile_as<uint16_t>(src, s_row, s_col, dst, d_row, rows, cols);
    case 4: return copy_tile_as<uint32_t>(src, s_row, s_col, dst, d_row, rows, cols);
    default: return copy_tile_as<uint64_t>(src, s_row, s_col, dst, d_row, rows, cols);
  }
}

// Tiled transposing copy; `convert` casts a contiguous run of src's dtype to dst's (nullptr
// for one dtype: tiles are copied straight into dst). False when the layouts don't call for it.
bool copy_transposed(const Tensor& dst, const Tensor& src, detail::ContiguousLoop convert, const void* f) {
  const StridedLayout L = make_layout({&dst, &src});
  if (L.ndim < 2) return false;
  const int64_t dsize = static_cast<int64_t>(dst.itemsize()), ssize = static_cast<int64_t>(src.itemsize());
  const int in = L.ndim - 1, mid = L.ndim - 2;
  const int64_t ds_in = L.byte_strides[0][in], ds_mid = L.byte_strides[0][mid];
  const int64_t ss_in = L.byte_strides[1][in], ss_mid = L.byte_strides[1][mid];
  // Worth it only when src is contiguous along `mid` and strided along the inner dim.
  if (ss_mid != ssize || ss_in <= 8 * ssize || ds_in != dsize) return false;
  const int64_t rows = L.sizes[mid], cols = L.sizes[in];
  const int64_t row_tiles = (rows + kTransposeTile - 1) / kTransposeTile;
  const int64_t col_tiles = (cols + kTransposeTile - 1) / kTransposeTile;
  const int64_t outer = L.numel / (rows * cols);
  const int64_t items = outer * row_tiles * col_tiles;
  constexpr int64_t tile_elems = kTransposeTile * kTransposeTile;
  parallel_for(items, std::max<int64_t>(1, kGrainSize / tile_elems), [&](int64_t i0, int64_t i1) {
    alignas(64) char tile[tile_elems * 8];  // a cast's source tile, rows contiguous
    for (int64_t it = i0; it < i1; ++it) {
      int64_t o = it / (row_tiles * col_tiles);
      const int64_t t = it % (row_tiles * col_tiles);
      const int64_t r0 = (t / col_tiles) * kTransposeTile, c0 = (t % col_tiles) * kTransposeTile;
      char* dp = L.data[0];
      const char* sp = L.data[1];
      for (int d = mid - 1; d >= 0; --d) {  // the outer dims' offsets
        const int64_t idx = o % L.sizes[d];
        o /= L.sizes[d];
        dp += idx * L.byte_strides[0][d];
        sp += idx * L.byte_strides[1][d];
      }
      const int64_t nr = std::min(rows - r0, kTransposeTile), nc = std::min(cols - c0, kTransposeTile);
      const char* s0 = sp + r0 * ss_mid + c0 * ss_in;
      char* d0 = dp + r0 * ds_mid + c0 * dsize;
      if (!convert) {
        copy_tile(ssize, s0, ss_mid, ss_in, d0, ds_mid, nr, nc);
        continue;
      }
      // A cast: the tile gathered, then cast row by row into dst (faster here than casting the
      // whole tile into a second buffer and copying that).
      copy_tile(ssize, s0, ss_mid, ss_in, tile, nc * ssize, nr, nc);
      for (int64_t r = 0; r < nr; ++r) {
        char* p[2] = {d0 + r * ds_mid, tile + r * nc * ssize};
        convert(p, nc, f);
      }
    }
  });
  return true;
}

// A cast between storage types, as a functor the elementwise loop and copy_transposed share.
template <typename D, typename S>
struct Convert {
  D operator()(S v) const { return convert<D>(v); }
};

void copy_kernel(KernelContext& ctx) { copy_tensor(ctx.output(0), ctx.input(0)); }

void fill_kernel(KernelContext& ctx) {
  const Tensor& out = ctx.output(0);
  const Scalar& value = ctx.attr<Scalar>("value");
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = scalar_to<T>(value);
    elementwise<T>(out, {}, [v]() { return v; });
  });
}

template <typename T>
struct RangeSupported {
  static constexpr bool supported = !std::is_same_v<T, bool>;
};

void arange_kernel(KernelContext& ctx) {
  const Tensor& out = ctx.output(0);
  const Scalar& start = ctx.attr<Scalar>("start");
  const Scalar& step = ctx.attr<Scalar>("step");
  dispatch_supported<RangeSupported>(ctx, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) {
      const double s0 = start.to_double(), ds = step.to_double();
      generate_indexed<T>(out, [=](int64_t i) { return convert<T>(s0 + static_cast<double>(i) * ds); });
    } else {
      const int64_t s0 = start.to_int(), ds = step.to_int();
      generate_indexed<T>(out, [=](int64_t i) { return convert<T>(wrap_add(s0, wrap_mul(i, ds))); });
    }
  });
}

// PyTorch's linspace: the first half counts up from start, the second half down from end, so
// both ends are exact. The step is computed in the output's compute type (double for
// integers, whose range may exceed the type).
void linspace_kernel(KernelContext& ctx) {
  const Tensor& out = ctx.output(0);
  const double start_attr = ctx.attr<double>("start"), end_attr = ctx.attr<double>("end");
  const int64_t steps = out.numel();
  dispatch_supported<RangeSupported>(ctx, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_integral_v<T>, double, opmath_t<T>>;
    const C start = static_cast<C>(static_cast<opmath_t<T>>(convert<T>(start_attr)));
    const C end = static_cast<C>(static_cast<opmath_t<T>>(convert<T>(end_attr)));
    if (steps == 1) {  // step would be 0/0
      generate_indexed<T>(out, [=](int64_t) { return convert<T>(start); });
      return;
    }
    const C step = (end - start) / static_cast<C>(steps - 1);
    const int64_t halfway = steps / 2;
    generate_indexed<T>(out, [=](int64_t i) {
      return convert<T>(i < halfway ? start + step * static_cast<C>(i) : end - step * static_cast<C>(steps - i - 1));
    });
  });
}

}  // namespace

void run_widened(KernelContext& ctx, KernelFn kernel) {
  auto widen = [](const Tensor& t) {
    if (!t.defined() || (t.dtype() != DType::Float16 && t.dtype() != DType::BFloat16)) return t;
    Tensor wide = Tensor::empty(t.sizes(), DType::Float32, t.device());
    copy_tensor(wide, t);
    return wide;
  };
  std::vector<Tensor> inputs, outputs;
  for (const Tensor& t : ctx.inputs) inputs.push_back(widen(t));
  for (const Tensor& t : ctx.outputs) outputs.push_back(widen(t));
  KernelContext wide{ctx.op, inputs, outputs, ctx.attrs, ctx.device, ctx.stream};
  kernel(wide);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i].is_same(ctx.outputs[i])) copy_tensor(ctx.outputs[i], outputs[i]);
}

void copy_tensor(const Tensor& dst, const Tensor& src) {
  PF_CHECK_T(dst.sizes() == src.sizes(), ValueError, "copy: source shape ", shape_str(src.sizes()),
             " differs from destination shape ", shape_str(dst.sizes()), " (broadcast before the kernel)");
  if (dst.numel() == 0 || copy_dense(dst, src)) return;
  if (dst.dtype() == src.dtype()) {
    if (copy_transposed(dst, src, nullptr, nullptr)) return;
    // Same type: move bits, so 10 dtypes share 4 loops (and NaN payloads survive).
    visit_dtype(dst.dtype(), [&](auto tag) {
      using U = typename bits<sizeof(typename decltype(tag)::type)>::type;
      elementwise<U, U>(dst, {&src}, [](U v) { return v; });
    });
    return;
  }
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    visit_dtype(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      if constexpr (!std::is_same_v<D, S>) {  // handled above
        const Convert<D, S> f;
        if (!copy_transposed(dst, src, &detail::contiguous_loop<Convert<D, S>, D, S>, &f)) elementwise<D, S>(dst, {&src}, f);
      }
    });
  });
}

void register_copy_fill_kernels(Registrar& reg) {
  // core/opdefs/creation.yaml names each op's kernel function and dtypes.
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) reg.kernel(name, DeviceType::CPU, {PF_OPDEFS_UNPAREN cpu_dtypes}, fn);
  PF_OPDEFS_CREATION_KERNELS(PF_X)
#undef PF_X
}

}  // namespace plugflow::cpu
