#include "indexing.h"

#include <algorithm>
#include <cstdlib>

#include "plugflow/error.h"

namespace plugflow::cuda {

namespace {

// One dim of an iteration space: its size and the byte stride of every operand.
struct Dim {
  int64_t size;
  int64_t stride[4];  // input, output 0, output 1 (unused slots 0)
};

// Merges neighbours (outer a, inner b) where each operand steps over b exactly into a.
std::vector<Dim> coalesce(const std::vector<Dim>& dims, int nops) {
  std::vector<Dim> out;
  for (const Dim& d : dims) {
    if (!out.empty()) {
      Dim& prev = out.back();
      bool merge = true;
      for (int k = 0; k < nops && merge; ++k) merge = prev.stride[k] == d.stride[k] * d.size;
      if (merge) {
        prev.size *= d.size;
        for (int k = 0; k < nops; ++k) prev.stride[k] = d.stride[k];
        continue;
      }
    }
    out.push_back(d);
  }
  return out;
}

int64_t min_abs_stride(const std::vector<Dim>& dims) {
  int64_t m = INT64_MAX;
  for (const Dim& d : dims)
    if (d.stride[0] != 0) m = std::min(m, std::abs(d.stride[0]));
  return m;
}

}  // namespace

ReduceIndexing make_reduce_indexing(const Tensor& in, const std::vector<int64_t>& dims, bool keepdim,
                                    const Tensor& values, const Tensor* indices) {
  const int64_t nd = in.dim();
  std::vector<bool> reduced(static_cast<size_t>(nd), false);
  for (int64_t d : dims) {
    if (nd == 0) continue;  // a 0-d input reduces over its single element
    PF_CHECK(d >= 0 && d < nd, "reduction dim ", d, " out of range for a ", nd, "-d input");
    reduced[static_cast<size_t>(d)] = true;
  }
  const int64_t expected_out_dim =
      keepdim ? nd : nd - static_cast<int64_t>(std::count(reduced.begin(), reduced.end(), true));
  PF_CHECK(values.dim() == expected_out_dim, "reduction output has ", values.dim(), " dims, expected ",
           expected_out_dim);

  const int64_t in_item = static_cast<int64_t>(in.itemsize());
  const int64_t v_item = static_cast<int64_t>(values.itemsize());
  const int64_t i_item = indices ? static_cast<int64_t>(indices->itemsize()) : 0;

  std::vector<Dim> kept, red;
  int64_t out_dim = 0;  // the output dim that corresponds to input dim d
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t size = in.sizes()[static_cast<size_t>(d)];
    const int64_t in_stride = in.strides()[static_cast<size_t>(d)] * in_item;
    if (reduced[static_cast<size_t>(d)]) {
      if (keepdim) ++out_dim;
      if (size != 1) red.push_back({size, {in_stride, 0, 0, 0}});
      continue;
    }
    PF_CHECK(values.sizes()[static_cast<size_t>(out_dim)] == size, "reduction output has shape ",
             shape_str(values.sizes()), ", which does not match input shape ", shape_str(in.sizes()));
    if (size != 1) {
      Dim k{size, {in_stride, values.strides()[static_cast<size_t>(out_dim)] * v_item,
                   indices ? indices->strides()[static_cast<size_t>(out_dim)] * i_item : 0, 0}};
      kept.push_back(k);
    }
    ++out_dim;
  }
  // Innermost (smallest input stride) last, so consecutive r walk memory in order. Stable:
  // with a single reduced dim r stays the index along it.
  std::stable_sort(red.begin(), red.end(),
                   [](const Dim& a, const Dim& b) { return std::abs(a.stride[0]) > std::abs(b.stride[0]); });
  const bool inner = !red.empty() && min_abs_stride(red) < min_abs_stride(kept);
  kept = coalesce(kept, 3);
  red = coalesce(red, 1);
  PF_CHECK(kept.size() <= static_cast<size_t>(kMaxLayoutDims) && red.size() <= static_cast<size_t>(kMaxLayoutDims),
           "reduction needs more than ", kMaxLayoutDims, " dims after merging");

  ReduceIndexing R;
  R.inner = inner;
  R.out_ndim = static_cast<int>(kept.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    R.out_sizes[i] = kept[i].size;
    R.out_in_strides[i] = kept[i].stride[0];
    R.out_strides[0][i] = kept[i].stride[1];
    R.out_strides[1][i] = kept[i].stride[2];
    R.num_outputs *= kept[i].size;
  }
  R.red_ndim = static_cast<int>(red.size());
  for (size_t i = 0; i < red.size(); ++i) {
    R.red_sizes[i] = red[i].size;
    R.red_strides[i] = red[i].stride[0];
    R.reduce_size *= red[i].size;
  }
  return R;
}

}  // namespace plugflow::cuda
