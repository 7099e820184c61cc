// The reduction driver shared by the CPU plugin's reduction kernels (reduce.cpp,
// reduction_extra.cpp): any set of reduced dims, any input and output strides.
//
// Plan: split the input's dims into kept and reduced ones, drop size-1 dims, sort each group
// by input stride (outermost first) and merge neighbours that are contiguous with each other.
// That "permutes the reduced dims innermost" without copying. Then one of two loops:
//   * inner mode (the reduced dims hold the smallest stride, e.g. sum over the last dim):
//     every output reduces its own range; a contiguous range is reduced with 16 independent
//     accumulators in blocks of 4096, which vectorizes and keeps float sums accurate (a
//     two-level cascade). Few outputs with long ranges split the range across threads.
//   * outer mode (a kept dim is innermost, e.g. sum over dim 0 of a matrix): a tile of
//     up to 2048 neighbouring outputs keeps its accumulators in an array and every reduced
//     position adds a contiguous row of inputs to it, which again vectorizes.
// Ops can replace both contiguous loops with multiversioned kernels ("dense hooks" below);
// reduce.cpp's float32/float64 sum, mean, amax/amin and max/min/argmax/argmin do.
//
// A reduction op is a functor template on the storage type T with
//   acc_t, identity(), step(acc, x, index), merge(left, right), write(outs, acc, count).
// merge must be associative and, for the indexed ops, prefer `left` on ties so that the first
// index wins when partial results are merged in order.
#pragma once
#include <algorithm>
#include <array>
#include <memory>
#include <span>
#include <vector>

#include "loops.h"

namespace plugflow::cpu {

// Sum and product accumulate floats in double (float32/64) or float (float16/bfloat16), and
// integers in 64-bit unsigned arithmetic (wraps like int64, without signed overflow).
template <typename T>
using sum_acc_t = std::conditional_t<is_reduced_float_v<T>, float,
                                     std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>>;

template <typename T, typename Acc>
inline Acc to_acc(T x) {
  if constexpr (std::is_same_v<Acc, uint64_t>) return static_cast<uint64_t>(static_cast<int64_t>(x));
  else return static_cast<Acc>(static_cast<opmath_t<T>>(x));
}
template <typename T, typename Acc>
inline T from_acc(Acc a) {
  if constexpr (std::is_same_v<Acc, uint64_t>) return convert<T>(static_cast<int64_t>(a));
  else return convert<T>(a);
}


// ---- plan ------------------------------------------------------------------------------------

struct ReducePlan {
  // Kept dims, outermost first: size, input byte stride, byte stride in each output.
  std::vector<int64_t> ksize, ka, ko[2];
  // Reduced dims, outermost first: size, input byte stride.
  std::vector<int64_t> rsize, ra;
  std::vector<int64_t> rsize_outer, ra_outer;  // the reduced dims without the innermost
  int64_t n_out = 1, n_red = 1;
  const char* in = nullptr;
  char* out[2] = {nullptr, nullptr};
  int nouts = 1;
};

struct Dim {
  int64_t size, a, o[2];
};

// Stable sort by input stride (outermost first), then merge neighbours contiguous with each
// other in the input and in every output.
inline std::vector<Dim> coalesce(std::vector<Dim> dims, int nouts) {
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& x, const Dim& y) { return x.a > y.a; });
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& m = merged.back();
      bool ok = m.a == d.a * d.size;
      for (int k = 0; k < nouts; ++k) ok = ok && m.o[k] == d.o[k] * d.size;
      if (ok) {
        m.size *= d.size;
        m.a = d.a;
        for (int k = 0; k < nouts; ++k) m.o[k] = d.o[k];
        continue;
      }
    }
    merged.push_back(d);
  }
  return merged;
}

// reduced[d] says whether input dim d is reduced; outputs have the keepdim shape or the
// shape without the reduced dims.
inline ReducePlan make_plan(const Tensor& a, const std::vector<bool>& reduced, bool keepdim, std::span<Tensor> outs) {
  ReducePlan P;
  P.in = static_cast<const char*>(a.data_ptr());
  P.nouts = static_cast<int>(outs.size());
  for (int k = 0; k < P.nouts; ++k) P.out[k] = static_cast<char*>(outs[k].data_ptr());
  std::vector<Dim> kept, red;
  int od = 0;  // the output dim matching input dim d
  for (int64_t d = 0; d < a.dim(); ++d) {
    const int64_t size = a.sizes()[d];
    const int64_t astride = a.strides()[d] * static_cast<int64_t>(a.itemsize());
    if (reduced[d]) {
      if (keepdim) ++od;
      if (size == 0) P.n_red = 0;
      if (size > 1) red.push_back({size, astride, {0, 0}});
      continue;
    }
    Dim dim{size, astride, {0, 0}};
    for (int k = 0; k < P.nouts; ++k) {
      PF_CHECK(od < outs[k].dim() && outs[k].sizes()[od] == size, "reduction output ", k, " has shape ",
               shape_str(outs[k].sizes()), ", which does not match input ", shape_str(a.sizes()));
      dim.o[k] = outs[k].strides()[od] * static_cast<int64_t>(outs[k].itemsize());
    }
    ++od;
    P.n_out *= size;
    if (size != 1) kept.push_back(dim);
  }
  for (const Dim& d : coalesce(std::move(kept), P.nouts)) {
    P.ksize.push_back(d.size);
    P.ka.push_back(d.a);
    for (int k = 0; k < 2; ++k) P.ko[k].push_back(d.o[k]);
  }
  for (const Dim& d : coalesce(std::move(red), 0)) {
    P.rsize.push_back(d.size);
    P.ra.push_back(d.a);
    if (P.n_red != 0) P.n_red *= d.size;
  }
  if (!P.rsize.empty()) {
    P.rsize_outer.assign(P.rsize.begin(), P.rsize.end() - 1);
    P.ra_outer.assign(P.ra.begin(), P.ra.end() - 1);
  }
  PF_CHECK(P.ksize.size() <= static_cast<size_t>(kMaxLayoutDims) && P.rsize.size() <= static_cast<size_t>(kMaxLayoutDims),
           "reduction over ", a.dim(), "-d tensor needs more than ", kMaxLayoutDims, " dims after merging");
  return P;
}

// Walks a multi-dim index space (at most kMaxLayoutDims dims, checked by make_plan) in
// row-major order keeping the byte offsets of up to three operands (the input and two
// outputs) up to date. Fixed-size state: cursors are created per output row.
struct Cursor {
  int ndim = 0, nops = 0;
  const int64_t* sizes = nullptr;
  const int64_t* strides[3] = {nullptr, nullptr, nullptr};
  std::array<int64_t, kMaxLayoutDims> idx{};
  int64_t off[3] = {0, 0, 0};

  Cursor(const std::vector<int64_t>& s, std::initializer_list<const std::vector<int64_t>*> st)
      : ndim(static_cast<int>(s.size())), sizes(s.data()) {
    for (auto* p : st) strides[nops++] = p->data();
  }
  void seek(int64_t flat) {
    for (int k = 0; k < nops; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      idx[d] = flat % sizes[d];
      flat /= sizes[d];
      for (int k = 0; k < nops; ++k) off[k] += idx[d] * strides[k][d];
    }
  }
  void next() {
    for (int d = ndim - 1; d >= 0; --d) {
      for (int k = 0; k < nops; ++k) off[k] += strides[k][d];
      if (++idx[d] < sizes[d]) return;
      for (int k = 0; k < nops; ++k) off[k] -= idx[d] * strides[k][d];
      idx[d] = 0;
    }
  }
};

// ---- dense hooks -----------------------------------------------------------------------------
// An op may provide multiversioned kernels (AVX-512/AVX2/SSE2) over dense memory, used instead
// of its step() loops where the memory allows:
//   acc_t dense(const T* x, int64_t n, int64_t first): x[0..n), at reduced indices first,
//     first+1, ..., reduced from identity() (inner mode);
//   void dense_rows(const T* const* rows, int64_t nt, acc_t* acc): for j < nt, folds
//     rows[0][j], ..., rows[kRowGroup - 1][j] into acc[j] (outer mode; ops without indices).
inline constexpr int kRowGroup = 8;

template <typename Op, typename T>
concept HasDenseRun = requires(const Op& op, const T* x, int64_t n) { op.dense(x, n, n); };
template <typename Op, typename T>
concept HasDenseRows = requires(const Op& op, const T* const* rows, int64_t n, typename Op::acc_t* acc) {
  op.dense_rows(rows, n, acc);
};

// ---- inner mode ------------------------------------------------------------------------------

inline constexpr int kLanes = 16;
inline constexpr int64_t kBlock = 4096;

// Reduces n contiguous elements with kLanes interleaved accumulators (vectorizes, and splits
// the rounding error of long sums kLanes ways).
template <typename Op, typename T>
typename Op::acc_t reduce_contiguous_block(const Op& op, const T* x, int64_t n) {
  using acc_t = typename Op::acc_t;
  acc_t lanes[kLanes];
  for (int j = 0; j < kLanes; ++j) lanes[j] = op.identity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) lanes[j] = op.step(lanes[j], x[i + j], 0);
  }
  for (int width = kLanes / 2; width > 0; width /= 2)  // pairwise fold
    for (int j = 0; j < width; ++j) lanes[j] = op.merge(lanes[j], lanes[j + width]);
  acc_t acc = lanes[0];
  for (; i < n; ++i) acc = op.step(acc, x[i], 0);
  return acc;
}

// Folds the run of n elements at p (byte stride s, reduced indices first, first+1, ...) into acc.
template <typename Op, typename T>
typename Op::acc_t reduce_run(const Op& op, typename Op::acc_t acc, const char* p, int64_t s, int64_t n, int64_t first) {
  // Short rows (softmax over 10 classes) skip the lane setup, which would cost more than it saves.
  if (s == static_cast<int64_t>(sizeof(T)) && n >= 2 * kLanes) {
    const T* x = reinterpret_cast<const T*>(p);
    if constexpr (HasDenseRun<Op, T>) {
      return op.merge(acc, op.dense(x, n, first));
    } else if constexpr (!Op::indexed) {
      for (int64_t b = 0; b < n; b += kBlock)
        acc = op.merge(acc, reduce_contiguous_block(op, x + b, std::min(kBlock, n - b)));
      return acc;
    }
  }
  for (int64_t i = 0; i < n; ++i) acc = op.step(acc, *reinterpret_cast<const T*>(p + i * s), first + i);
  return acc;
}

// Reduces the flat reduced positions [r0, r1) starting at input pointer base: runs of the
// innermost reduced dim, stepping the outer reduced dims with a cursor.
template <typename Op, typename T>
typename Op::acc_t reduce_range(const Op& op, const ReducePlan& P, const char* base, int64_t r0, int64_t r1) {
  typename Op::acc_t acc = op.identity();
  if (r0 >= r1) return acc;
  if (P.rsize.empty()) return op.step(acc, *reinterpret_cast<const T*>(base), 0);  // one element
  const int64_t run = P.rsize.back(), s = P.ra.back();
  if (P.rsize.size() == 1) return reduce_run<Op, T>(op, acc, base + r0 * s, s, r1 - r0, r0);
  Cursor outer(P.rsize_outer, {&P.ra_outer});
  outer.seek(r0 / run);
  int64_t r = r0, pos = r0 % run;
  while (r < r1) {
    const int64_t n = std::min(run - pos, r1 - r);
    acc = reduce_run<Op, T>(op, acc, base + outer.off[0] + pos * s, s, n, r);
    r += n;
    pos = 0;
    outer.next();
  }
  return acc;
}

template <typename Op, typename T>
void reduce_inner(const Op& op, const ReducePlan& P) {
  using acc_t = typename Op::acc_t;
  const int64_t n_red = P.n_red;
  const int64_t out_grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n_red, 1));
  if (P.n_out >= num_threads()) {  // enough outputs to keep every thread busy
    parallel_for(P.n_out, out_grain, [&](int64_t o0, int64_t o1) {
      Cursor kept(P.ksize, {&P.ka, &P.ko[0], &P.ko[1]});
      kept.seek(o0);
      for (int64_t o = o0; o < o1; ++o, kept.next()) {
        char* outs[2] = {P.out[0] + kept.off[1], P.out[1] + kept.off[2]};
        op.write(outs, reduce_range<Op, T>(op, P, P.in + kept.off[0], 0, n_red), n_red);
      }
    });
    return;
  }
  // Few outputs, long reductions: split each reduction into slices, merge the partials in order.
  const int slices = parallel_slices(n_red, kGrainSize);
  std::unique_ptr<acc_t[]> partial(new acc_t[slices]);  // not std::vector: acc_t may be bool
  Cursor kept(P.ksize, {&P.ka, &P.ko[0], &P.ko[1]});
  for (int64_t o = 0; o < P.n_out; ++o, kept.next()) {
    const char* base = P.in + kept.off[0];
    parallel_for(slices, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s)
        partial[s] = reduce_range<Op, T>(op, P, base, n_red * s / slices, n_red * (s + 1) / slices);
    });
    acc_t acc = op.identity();
    for (int s = 0; s < slices; ++s) acc = op.merge(acc, partial[s]);
    char* outs[2] = {P.out[0] + kept.off[1], P.out[1] + kept.off[2]};
    op.write(outs, acc, n_red);
  }
}

// ---- outer mode ------------------------------------------------------------------------------

// Wide enough that a tile usually covers whole rows, so the input streams sequentially
// (a narrow tile of a wide matrix jumps a page per row); its accumulators still fit in L1/L2.
inline constexpr int64_t kTile = 2048;

// acc[j] = step(acc[j], row[j]) over the reduced positions [r0, r1) for a tile of nt outputs
// whose inputs are spaced by byte stride sj.
template <typename Op, typename T>
void accumulate_tile(const Op& op, const ReducePlan& P, const char* base, int64_t sj, int64_t nt, int64_t r0, int64_t r1,
                     typename Op::acc_t* acc) {
  for (int64_t j = 0; j < nt; ++j) acc[j] = op.identity();
  Cursor red(P.rsize, {&P.ra});
  red.seek(r0);
  int64_t r = r0;
  if constexpr (HasDenseRows<Op, T>) {
    if (sj == static_cast<int64_t>(sizeof(T))) {
      for (; r + kRowGroup <= r1; r += kRowGroup) {
        const T* rows[kRowGroup];
        for (int k = 0; k < kRowGroup; ++k, red.next()) rows[k] = reinterpret_cast<const T*>(base + red.off[0]);
        op.dense_rows(rows, nt, acc);
      }
    }
  }
  for (; r < r1; ++r, red.next()) {
    const char* row = base + red.off[0];
    if (sj == static_cast<int64_t>(sizeof(T))) {
      const T* x = reinterpret_cast<const T*>(row);
#pragma omp simd
      for (int64_t j = 0; j < nt; ++j) acc[j] = op.step(acc[j], x[j], r);
    } else {
      for (int64_t j = 0; j < nt; ++j) acc[j] = op.step(acc[j], *reinterpret_cast<const T*>(row + j * sj), r);
    }
  }
}

template <typename Op, typename T>
void reduce_outer(const Op& op, const ReducePlan& P) {
  using acc_t = typename Op::acc_t;
  // The innermost kept dim is tiled; the other kept dims are the outer loop.
  const int64_t ni = P.ksize.back(), sa = P.ka.back(), so0 = P.ko[0].back(), so1 = P.ko[1].back();
  const std::vector<int64_t> osize(P.ksize.begin(), P.ksize.end() - 1), oa(P.ka.begin(), P.ka.end() - 1),
      oo0(P.ko[0].begin(), P.ko[0].end() - 1), oo1(P.ko[1].begin(), P.ko[1].end() - 1);
  const int64_t tile = std::min(kTile, ni);
  const int64_t tiles_per_row = (ni + tile - 1) / tile;
  const int64_t items = (P.n_out / ni) * tiles_per_row;
  const int64_t n_red = P.n_red;

  auto write_tile = [&](const acc_t* acc, int64_t nt, int64_t off0, int64_t off1) {
    for (int64_t j = 0; j < nt; ++j) {
      char* outs[2] = {P.out[0] + off0 + j * so0, P.out[1] + off1 + j * so1};
      op.write(outs, acc[j], n_red);
    }
  };
  // Offsets of work item `it` (an outer kept index and a tile of the inner dim).
  auto locate = [&](Cursor& c, int64_t it, int64_t& a_off, int64_t& o0, int64_t& o1, int64_t& nt) {
    c.seek(it / tiles_per_row);
    const int64_t j0 = (it % tiles_per_row) * tile;
    nt = std::min(tile, ni - j0);
    a_off = c.off[0] + j0 * sa;
    o0 = c.off[1] + j0 * so0;
    o1 = c.off[2] + j0 * so1;
  };

  const int64_t item_work = tile * std::max<int64_t>(n_red, 1);
  if (items >= num_threads() || items * item_work <= kGrainSize) {
    parallel_for(items, std::max<int64_t>(1, kGrainSize / item_work), [&](int64_t i0, int64_t i1) {
      Cursor c(osize, {&oa, &oo0, &oo1});
      std::unique_ptr<acc_t[]> acc(new acc_t[tile]);
      for (int64_t it = i0; it < i1; ++it) {
        int64_t a_off, o0, o1, nt;
        locate(c, it, a_off, o0, o1, nt);
        accumulate_tile<Op, T>(op, P, P.in + a_off, sa, nt, 0, n_red, acc.get());
        write_tile(acc.get(), nt, o0, o1);
      }
    });
    return;
  }
  // Few tiles, long reductions (e.g. a column sum of a tall matrix): slice the reduction.
  const int slices = parallel_slices(item_work, kGrainSize);
  std::unique_ptr<acc_t[]> partial(new acc_t[static_cast<size_t>(slices) * tile]);
  Cursor c(osize, {&oa, &oo0, &oo1});
  for (int64_t it = 0; it < items; ++it) {
    int64_t a_off, o0, o1, nt;
    locate(c, it, a_off, o0, o1, nt);
    parallel_for(slices, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s)
        accumulate_tile<Op, T>(op, P, P.in + a_off, sa, nt, n_red * s / slices, n_red * (s + 1) / slices,
                               &partial[s * tile]);
    });
    for (int s = 1; s < slices; ++s)
      for (int64_t j = 0; j < nt; ++j) partial[j] = op.merge(partial[j], partial[s * tile + j]);
    write_tile(partial.get(), nt, o0, o1);
  }
}

template <typename Op, typename T>
void run_reduce(const Op& op, const ReducePlan& P) {
  if (P.n_out == 0) return;
  // Outer mode when the innermost kept dim is tighter in memory than the innermost reduced one.
  const bool outer = !P.ksize.empty() && P.n_red > 0 && (P.rsize.empty() || P.ka.back() < P.ra.back());
  if (outer) reduce_outer<Op, T>(op, P);
  else reduce_inner<Op, T>(op, P);
}

}  // namespace plugflow::cpu
