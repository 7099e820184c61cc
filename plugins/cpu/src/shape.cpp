// Shape-family kernels: sort, topk, tril/triu, flip, pad (reflect / replicate / circular),
// unique, and the along-dim gather / scatter-add (docs/kernels.md).
//
// Most of them work on 1-d slices along one dim: for_each_slice hands each slice's element
// offsets to a callback, slices split across threads. flip and pad are gathers through one
// index map per dim (source index of each output position), which copies rows with a single
// inner loop whatever the mode.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "kernels.h"
#include "loops.h"
#include "opdefs.h"

namespace plugflow::cpu {
namespace {

template <size_t Size> struct bits_of;
template <> struct bits_of<1> { using type = uint8_t; };
template <> struct bits_of<2> { using type = uint16_t; };
template <> struct bits_of<4> { using type = uint32_t; };
template <> struct bits_of<8> { using type = uint64_t; };

// Calls f(slice_number, offsets) for every 1-d slice along `dim` of a tensor of `sizes`:
// offsets[k] is the element offset (relative to operand k's data pointer, with strides[k])
// of the slice's first element. Slices are numbered row-major over the other dims.
template <size_t N, typename F>
void for_each_slice(const Shape& sizes, int64_t dim, const std::array<const Shape*, N>& strides, int64_t slice_len,
                    const F& f) {
  int64_t n_slices = 1;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (static_cast<int64_t>(d) != dim) n_slices *= sizes[d];
  if (n_slices == 0 || slice_len == 0) return;
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(slice_len, 1));
  parallel_for(n_slices, grain, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      std::array<int64_t, N> off{};
      int64_t r = s;
      for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
        if (d == dim) continue;
        const int64_t i = r % sizes[d];
        r /= sizes[d];
        for (size_t k = 0; k < N; ++k) off[k] += i * (*strides[k])[d];
      }
      f(s, off);
    }
  });
}

// Sort keys: every integer dtype (bool included) as int64, every float dtype as double. Both
// hold every value exactly, so the order is the dtype's own; an Entry is 16 bytes whatever
// the key (the index pads it), and the sorts are compiled for 2 key types instead of 8. NaN
// is larger than everything.
template <typename T>
using key_t = std::conditional_t<is_float_v<T>, double, int64_t>;

template <typename K>
inline bool key_less(K a, K b) {
  if constexpr (std::is_floating_point_v<K>) return (!std::isnan(a) && std::isnan(b)) || a < b;
  else return a < b;
}

template <typename K>
struct Entry {
  K key;
  int64_t index;
};

// Orders entries ascending or descending by key; equal keys keep their index order, so the
// result is the stable one (and deterministic) whether or not stability was asked for.
template <typename K>
struct EntryOrder {
  bool descending;
  bool operator()(const Entry<K>& x, const Entry<K>& y) const {
    if (descending ? key_less(y.key, x.key) : key_less(x.key, y.key)) return true;
    if (descending ? key_less(x.key, y.key) : key_less(y.key, x.key)) return false;
    return x.index < y.index;
  }
};

// Key-only order for std::stable_sort (stability supplies the index tie-break).
template <typename K>
struct KeyOrder {
  bool descending;
  bool operator()(const Entry<K>& x, const Entry<K>& y) const {
    return descending ? key_less(y.key, x.key) : key_less(x.key, y.key);
  }
};

template <typename K>
std::vector<Entry<K>>& scratch_entries(int64_t n) {
  thread_local std::vector<Entry<K>> buf;
  buf.resize(static_cast<size_t>(n));
  return buf;
}

// ---- sort, topk -------------------------------------------------------------------------------

void sort_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor &values = ctx.output(0), &indices = ctx.output(1);
  const int64_t dim = ctx.attr<int64_t>("dim");
  const bool descending = ctx.attr<bool>("descending");
  const int64_t n = a.sizes()[dim];
  const int64_t sa = a.strides()[dim], sv = values.strides()[dim], si = indices.strides()[dim];
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using K = key_t<T>;
    const T* ap = a.data<T>();
    T* vp = values.data<T>();
    int64_t* ip = indices.data<int64_t>();
    for_each_slice<3>(a.sizes(), dim, {&a.strides(), &values.strides(), &indices.strides()}, n,
                      [&](int64_t, const std::array<int64_t, 3>& off) {
                        auto& buf = scratch_entries<K>(n);
                        const T* src = ap + off[0];
                        for (int64_t i = 0; i < n; ++i) buf[i] = {static_cast<K>(src[i * sa]), i};
                        std::stable_sort(buf.begin(), buf.end(), KeyOrder<K>{descending});
                        T* vo = vp + off[1];
                        int64_t* io = ip + off[2];
                        for (int64_t i = 0; i < n; ++i) {
                          vo[i * sv] = src[buf[i].index * sa];
                          io[i * si] = buf[i].index;
                        }
                      });
  });
}

void topk_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor &values = ctx.output(0), &indices = ctx.output(1);
  const int64_t dim = ctx.attr<int64_t>("dim"), k = ctx.attr<int64_t>("k");
  const bool largest = ctx.attr<bool>("largest");
  const int64_t n = a.sizes()[dim];
  PF_CHECK(k >= 0 && k <= n, "selected index k out of range");
  const int64_t sa = a.strides()[dim], sv = values.strides()[dim], si = indices.strides()[dim];
  if (k == 0) return;
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using K = key_t<T>;
    const T* ap = a.data<T>();
    T* vp = values.data<T>();
    int64_t* ip = indices.data<int64_t>();
    // Slices are numbered over a's dims; the outputs share that numbering (only dim differs).
    for_each_slice<3>(a.sizes(), dim, {&a.strides(), &values.strides(), &indices.strides()}, n,
                      [&](int64_t, const std::array<int64_t, 3>& off) {
                        auto& buf = scratch_entries<K>(n);
                        const T* src = ap + off[0];
                        for (int64_t i = 0; i < n; ++i) buf[i] = {static_cast<K>(src[i * sa]), i};
                        std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), EntryOrder<K>{largest});
                        T* vo = vp + off[1];
                        int64_t* io = ip + off[2];
                        for (int64_t i = 0; i < k; ++i) {
                          vo[i * sv] = src[buf[i].index * sa];
                          io[i * si] = buf[i].index;
                        }
                      });
  });
}

template <typename T>
struct AnyDType {
  static constexpr bool supported = true;
};
template <typename T>
struct NonBool {
  static constexpr bool supported = !std::is_same_v<T, bool>;
};

// ---- tril, triu ---------------------------------------------------------------------------------

template <bool Lower>
void triangle_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  const int64_t k = ctx.attr<int64_t>("diagonal");
  const int64_t nd = a.dim(), rows = a.sizes()[nd - 2], cols = a.sizes()[nd - 1];
  const int64_t sa = a.strides()[nd - 1], so = out.strides()[nd - 1];
  visit_dtype(a.dtype(), [&](auto tag) {
    // Values move as bits (all-zero bits are every dtype's zero).
    using T = typename bits_of<sizeof(typename decltype(tag)::type)>::type;
    const T* ap = static_cast<const T*>(a.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    // Slices along the last dim are the matrix rows; the row index is the fastest other dim.
    for_each_slice<2>(a.sizes(), nd - 1, {&a.strides(), &out.strides()}, cols,
                      [&](int64_t s, const std::array<int64_t, 2>& off) {
                        const int64_t i = s % rows;
                        const T* src = ap + off[0];
                        T* dst = op + off[1];
                        // Lower keeps j <= i + k, upper keeps j >= i + k.
                        const int64_t edge = std::clamp<int64_t>(Lower ? i + k + 1 : i + k, 0, cols);
                        const int64_t keep_begin = Lower ? 0 : edge, keep_end = Lower ? edge : cols;
                        for (int64_t j = 0; j < cols; ++j)
                          dst[j * so] = (j >= keep_begin && j < keep_end) ? src[j * sa] : T{};
                      });
  });
}

// ---- gathers through per-dim index maps (flip, pad) ----------------------------------------------

// out[i_0, ..., i_{n-1}] = a[maps[0][i_0], ..., maps[n-1][i_{n-1}]]; an empty map is the identity.
void gather_maps(const Tensor& out, const Tensor& a, const std::vector<std::vector<int64_t>>& maps) {
  const int64_t nd = out.dim();
  if (out.numel() == 0) return;
  if (nd == 0) {
    std::memcpy(out.data_ptr(), a.data_ptr(), a.itemsize());
    return;
  }
  const int64_t last = nd - 1, cols = out.sizes()[last];
  const Shape &sa = a.strides(), &so = out.strides();
  auto map = [&](int64_t d, int64_t i) { return maps[d].empty() ? i : maps[d][i]; };
  visit_dtype(a.dtype(), [&](auto tag) {
    using U = typename bits_of<sizeof(typename decltype(tag)::type)>::type;
    const U* ap = static_cast<const U*>(a.data_ptr());
    U* op = static_cast<U*>(out.data_ptr());
    const int64_t rows = out.numel() / cols;
    const int64_t grain = std::max<int64_t>(1, kGrainSize / cols);
    const std::vector<int64_t>& inner = maps[last];
    parallel_for(rows, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t a_off = 0, o_off = 0, q = r;
        for (int64_t d = last - 1; d >= 0; --d) {
          const int64_t i = q % out.sizes()[d];
          q /= out.sizes()[d];
          a_off += map(d, i) * sa[d];
          o_off += i * so[d];
        }
        const U* src = ap + a_off;
        U* dst = op + o_off;
        const int64_t s_in = sa[last], s_out = so[last];
        if (inner.empty()) {
          for (int64_t j = 0; j < cols; ++j) dst[j * s_out] = src[j * s_in];
        } else {
          const int64_t* m = inner.data();
          for (int64_t j = 0; j < cols; ++j) dst[j * s_out] = src[m[j] * s_in];
        }
      }
    });
  });
}

void flip_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Shape& dims = ctx.attr<Shape>("dims");
  std::vector<std::vector<int64_t>> maps(a.dim());
  for (int64_t d : dims) {
    PF_CHECK_T(d >= 0 && d < a.dim(), IndexError, "flip: dim ", d, " out of range");
    const int64_t n = a.sizes()[d];
    maps[d].resize(n);
    for (int64_t i = 0; i < n; ++i) maps[d][i] = n - 1 - i;
  }
  gather_maps(ctx.output(0), a, maps);
}

void pad_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  const Shape& pads = ctx.attr<Shape>("pads");
  const std::string& mode = ctx.attr<std::string>("mode");
  PF_CHECK(static_cast<int64_t>(pads.size()) == 2 * a.dim(), "pad: expected 2 pads per dim");
  std::vector<std::vector<int64_t>> maps(a.dim());
  for (int64_t d = 0; d < a.dim(); ++d) {
    const int64_t before = pads[2 * d], after = pads[2 * d + 1], n = a.sizes()[d], m = out.sizes()[d];
    if (before == 0 && after == 0) continue;
    PF_CHECK(n > 0, "pad: cannot pad an empty dim");
    maps[d].resize(m);
    for (int64_t j = 0; j < m; ++j) {
      int64_t s = j - before;
      if (mode == "reflect") {
        if (s < 0) s = -s;
        if (s >= n) s = 2 * (n - 1) - s;
        PF_CHECK(s >= 0 && s < n, "pad: reflect padding must be smaller than the input size");
      } else if (mode == "replicate") {
        s = std::clamp<int64_t>(s, 0, n - 1);
      } else if (mode == "circular") {
        s = ((s % n) + n) % n;
      } else {
        PF_THROW(Error, "pad: unknown mode '", mode, "'");
      }
      maps[d][j] = s;
    }
  }
  gather_maps(out, a, maps);
}

// ---- unique ----------------------------------------------------------------------------------------

void unique_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor &values = ctx.output(0), &inverse = ctx.output(1), &counts = ctx.output(2), &num = ctx.output(3);
  const bool consecutive = ctx.attr<bool>("consecutive");
  const int64_t n = a.sizes()[0], m = a.sizes()[1];
  const int64_t s0 = a.strides()[0], s1 = a.strides()[1];
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using K = key_t<T>;
    const T* ap = a.data<T>();
    auto at = [&](int64_t row, int64_t col) { return static_cast<K>(ap[row * s0 + col * s1]); };
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    if (!consecutive && m == 1) {  // plain values (dim=None): a stable sort of (key, index) pairs
      auto& buf = scratch_entries<K>(n);
      for (int64_t i = 0; i < n; ++i) buf[i] = {at(i, 0), i};
      std::stable_sort(buf.begin(), buf.end(), KeyOrder<K>{false});
      for (int64_t i = 0; i < n; ++i) order[i] = buf[i].index;
    } else if (!consecutive) {
      std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        for (int64_t j = 0; j < m; ++j) {
          const K kx = at(x, j), ky = at(y, j);
          if (key_less(kx, ky)) return true;
          if (key_less(ky, kx)) return false;
        }
        return x < y;
      });
    }
    auto same_row = [&](int64_t x, int64_t y) {
      for (int64_t j = 0; j < m; ++j)
        if (!(at(x, j) == at(y, j))) return false;
      return true;
    };
    T* vp = values.data<T>();
    int64_t* ip = inverse.data<int64_t>();
    int64_t* cp = counts.data<int64_t>();
    const int64_t sv0 = values.strides()[0], sv1 = values.strides()[1], si = inverse.strides()[0],
                  sc = counts.strides()[0];
    int64_t groups = 0, rep = -1;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = order[i];
      if (rep < 0 || !same_row(rep, row)) {
        rep = row;
        for (int64_t j = 0; j < m; ++j) vp[groups * sv0 + j * sv1] = ap[row * s0 + j * s1];
        cp[groups * sc] = 0;
        ++groups;
      }
      ip[row * si] = groups - 1;
      ++cp[(groups - 1) * sc];
    }
    *num.data<int64_t>() = groups;
  });
}

// ---- along-dim gather / scatter-add ----------------------------------------------------------------

void take_along_dim_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &index = ctx.input(1);
  const Tensor& out = ctx.output(0);
  const int64_t dim = ctx.attr<int64_t>("dim");
  const int64_t n = a.sizes()[dim], len = index.sizes()[dim];
  const int64_t sa = a.strides()[dim], si = index.strides()[dim], so = out.strides()[dim];
  visit_dtype(a.dtype(), [&](auto tag) {
    using U = typename bits_of<sizeof(typename decltype(tag)::type)>::type;
    const U* ap = static_cast<const U*>(a.data_ptr());
    const int64_t* ip = index.data<int64_t>();
    U* op = static_cast<U*>(out.data_ptr());
    for_each_slice<3>(index.sizes(), dim, {&a.strides(), &index.strides(), &out.strides()}, len,
                      [&](int64_t, const std::array<int64_t, 3>& off) {
                        for (int64_t j = 0; j < len; ++j) {
                          const int64_t k = ip[off[1] + j * si];
                          PF_CHECK(k >= 0 && k < n, "index ", k, " is out of bounds for dimension ", dim,
                                   " with size ", n);
                          op[off[2] + j * so] = ap[off[0] + k * sa];
                        }
                      });
  });
}

void scatter_add_kernel(KernelContext& ctx) {
  const Tensor &src = ctx.input(0), &index = ctx.input(1);
  const Tensor& out = ctx.output(0);
  const int64_t dim = ctx.attr<int64_t>("dim");
  const int64_t n = out.sizes()[dim], len = index.sizes()[dim];
  const int64_t ss = src.strides()[dim], si = index.strides()[dim], so = out.strides()[dim];
  dispatch_supported<NonBool>(ctx, src.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = opmath_t<T>;
    elementwise<T>(out, {}, [] { return T(C(0)); });
    const T* sp = src.data<T>();
    const int64_t* ip = index.data<int64_t>();
    T* op = out.data<T>();
    // Slices differ in their other-dim coordinates, so they write disjoint parts of out.
    for_each_slice<3>(index.sizes(), dim, {&out.strides(), &index.strides(), &src.strides()}, len,
                      [&](int64_t, const std::array<int64_t, 3>& off) {
                        for (int64_t j = 0; j < len; ++j) {
                          const int64_t k = ip[off[1] + j * si];
                          PF_CHECK(k >= 0 && k < n, "index ", k, " is out of bounds for dimension ", dim,
                                   " with size ", n);
                          T& dst = op[off[0] + k * so];
                          if constexpr (std::is_integral_v<T>) dst = wrap_add(dst, sp[off[2] + j * ss]);
                          else dst = T(static_cast<C>(dst) + static_cast<C>(sp[off[2] + j * ss]));
                        }
                      });
  });
}

}  // namespace

void register_shape_kernels(Registrar& reg) {
  // core/opdefs/shape.yaml names the kernel function and dtypes of sort, topk, flip, pad and
  // unique; the others are registered here (their `kernel: custom`).
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) reg.kernel(name, DeviceType::CPU, {PF_OPDEFS_UNPAREN cpu_dtypes}, fn);
  PF_OPDEFS_SHAPE_KERNELS(PF_X)
#undef PF_X
  register_supported<AnyDType>(reg, "tril", triangle_kernel<true>);
  register_supported<AnyDType>(reg, "triu", triangle_kernel<false>);
  register_supported<AnyDType>(reg, "_take_along_dim", take_along_dim_kernel);
  register_supported<NonBool>(reg, "_scatter_add_along_dim", scatter_add_kernel);
}

}  // namespace plugflow::cpu
