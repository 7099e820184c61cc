// Indexing ops: gather/scatter, index_select/index_add, masked ops, where/nonzero, take and
// advanced indexing (PyTorch's aten::index / index_put_).
//
// Every op here is one of four kernels (indexing_meta.cpp). The index and index_put kernels see
// the data restrided to the iteration shape, with stride 0 in the indexed dims, and int64
// index tensors broadcast to that shape (PyTorch's AdvancedIndex "restride" trick); the
// functional layer builds those views without copying. Forward mechanics run with grad mode
// off; each op then records its own node (PyTorch's names), whose backward is written with the
// ops of this file, so double backward works.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "../autograd/grad_utils.h"
#include "plugflow/autocast.h"
#include "plugflow/autograd.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/graph.h"
#include "plugflow/layout.h"
#include "plugflow/ops.h"

namespace plugflow::ops {
namespace {

namespace ag = plugflow::autograd;
using Tensors = std::vector<Tensor>;

// The kernels take their operands through one strided layout: the output, the data, then
// the index tensors. More indices than fit are folded into one linear offset first.
constexpr size_t kMaxKernelIndices = kMaxLayoutOperands - 2;

const OpDef& index_op() {
  static const OpDef& op = find_op("index");
  return op;
}
const OpDef& index_put_op() {
  static const OpDef& op = find_op("index_put");
  return op;
}
const OpDef& where_op() {
  static const OpDef& op = find_op("where");
  return op;
}
const OpDef& nonzero_op() {
  static const OpDef& op = find_op("nonzero");
  return op;
}

// ---- raw views (no autograd: the ops record their own nodes) ---------------------------------

Tensor raw_view(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset) {
  return Tensor::view_of(t.storage(), sizes, strides, offset, t.dtype());
}

// t broadcast to `shape` (stride 0 on broadcast dims). The caller has checked broadcastability.
Tensor raw_expand(const Tensor& t, const Shape& shape) {
  if (t.sizes() == shape) return t;
  const int64_t nd = static_cast<int64_t>(shape.size()), lead = nd - t.dim();
  PF_CHECK(lead >= 0, "cannot broadcast ", shape_str(t.sizes()), " to ", shape_str(shape));
  Shape strides(nd, 0);
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.sizes()[i] == shape[lead + i]) strides[lead + i] = t.strides()[i];
    else PF_CHECK(t.sizes()[i] == 1, "cannot broadcast ", shape_str(t.sizes()), " to ", shape_str(shape));
  }
  return raw_view(t, shape, strides, t.offset());
}

bool broadcastable_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

// Dims and sizes as PyTorch's scatter/gather see them: a 0-d tensor is one element.
int64_t nd1(const Tensor& t) { return std::max<int64_t>(t.dim(), 1); }
int64_t size1(const Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.sizes()[d]; }
int64_t stride1(const Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.strides()[d]; }
Tensor one_d_view(const Tensor& t) { return t.dim() == 0 ? raw_view(t, {1}, {1}, t.offset()) : t; }

Tensor on_device(const Tensor& t, Device d) { return t.device() == d ? t : to(t, d, std::nullopt); }

int64_t read_int(const Tensor& t) {
  graph::check_host_read("an index value or a count of selected elements");
  const Tensor c = to(t, Device{DeviceType::CPU, 0}, DType::Int64, /*copy=*/true);
  return c.data<int64_t>()[0];
}

// The indices of a 1-d index outside [0, size): index_select / index_add into an empty tensor
// read none of them, but PyTorch still checks each.
Tensor out_of_range(const Tensor& index1, int64_t size) {
  return masked_select(index1, binary("logical_or", binary("lt", index1, Scalar(int64_t{0})),
                                      binary("ge", index1, Scalar(size))));
}

// A private copy of `t` when it shares memory with the tensor being written.
Tensor unaliased(const Tensor& t, const Tensor& written) {
  return t.defined() && t.storage() == written.storage() ? clone(t) : t;
}

// ---- kernel calls ---------------------------------------------------------------------------

struct IndexArgs {
  Tensors idx;         // int64, iteration-shaped
  Shape sizes, strides, dims;
  bool wrap = false;
};

// More index tensors than a kernel call takes: checked, wrapped and combined into one offset.
IndexArgs fold(IndexArgs a) {
  if (a.idx.size() <= kMaxKernelIndices) return a;
  Tensor offset;
  for (size_t j = 0; j < a.idx.size(); ++j) {
    const Tensor& v = a.idx[j];
    const int64_t size = a.sizes[j];
    const Tensor bad = binary("logical_or", binary("lt", v, Scalar(a.wrap ? -size : int64_t{0})),
                              binary("ge", v, Scalar(size)));
    const Tensor bad_values = masked_select(v, bad);
    if (bad_values.numel() > 0)
      PF_THROW(IndexError, "index ", read_int(bad_values), " is out of bounds for dimension ", a.dims[j], " with size ",
               size);
    const Tensor w = a.wrap ? where(binary("lt", v, Scalar(int64_t{0})), binary("add", v, Scalar(size)), v) : v;
    const Tensor term = binary("mul", w, Scalar(a.strides[j]));
    offset = offset.defined() ? binary("add", offset, term) : term;
  }
  return {{offset}, {std::numeric_limits<int64_t>::max()}, {1}, {0}, false};
}

Attrs index_attrs(const IndexArgs& a) {
  return Attrs{{"sizes", a.sizes}, {"strides", a.strides}, {"dims", a.dims}, {"wrap", a.wrap}};
}

// out[e] = src[e + sum_j idx_j[e] * strides[j]] (src restrided to the iteration shape).
Tensor run_index(const Tensor& src, IndexArgs a) {
  a = fold(std::move(a));
  Tensors in{src};
  in.insert(in.end(), a.idx.begin(), a.idx.end());
  return call_op(index_op(), in, index_attrs(a))[0];
}

// dst[e + sum_j idx_j[e] * strides[j]] = values[e] (or +=).
void run_index_put(const Tensor& dst, const Tensor& values, IndexArgs a, bool accumulate) {
  a = fold(std::move(a));
  Tensors in{values};
  in.insert(in.end(), a.idx.begin(), a.idx.end());
  Attrs attrs = index_attrs(a);
  attrs.set("accumulate", accumulate);
  Tensor out[] = {dst};
  call_op_out(index_put_op(), in, attrs, out);
}

// ---- advanced indexing (PyTorch's AdvancedIndex) ---------------------------------------------

bool any_defined(const Tensors& ts) {
  return std::any_of(ts.begin(), ts.end(), [](const Tensor& t) { return t.defined(); });
}

// Index tensors on self's device, dtypes checked, boolean masks turned into one int64 index
// per mask dim (their non-zero coordinates).
Tensors expand_indices(const Tensor& self, const Tensors& indices) {
  PF_CHECK_T(static_cast<int64_t>(indices.size()) <= self.dim(), IndexError, "too many indices for tensor of dimension ",
             self.dim(), " (got ", indices.size(), ")");
  Tensors out;
  for (const Tensor& index : indices) {
    if (!index.defined()) {
      out.emplace_back();
      continue;
    }
    const DType dt = index.dtype();
    PF_CHECK_T(dt == DType::Int64 || dt == DType::Bool || dt == DType::UInt8, IndexError,
               "tensors used as indices must be long, byte or bool tensors");
    Tensor ix = on_device(index, self.device());
    if (dt == DType::Int64) {
      out.push_back(ix);
      continue;
    }
    PF_CHECK_T(ix.dim() > 0, IndexError,
               "a 0-dim boolean index is only supported by t[...]: index with t[mask] instead");
    const int64_t start = static_cast<int64_t>(out.size());
    PF_CHECK_T(start + ix.dim() <= self.dim(), IndexError, "too many indices for tensor of dimension ", self.dim());
    for (int64_t j = 0; j < ix.dim(); ++j)
      PF_CHECK_T(ix.sizes()[j] == self.sizes()[start + j], IndexError, "The shape of the mask ", shape_str(ix.sizes()),
                 " at index ", j, " does not match the shape of the indexed tensor ", shape_str(self.sizes()),
                 " at index ", start + j);
    const Tensor nz = nonzero(ix);
    for (int64_t j = 0; j < ix.dim(); ++j) out.push_back(select(nz, 1, j));
  }
  return out;
}

struct IndexInfo {
  Tensor src;  // self, its indexed dims moved together, restrided to the result shape
  IndexArgs args;
  Shape result_shape;
};

// `indices`: int64 or undefined, at most self.dim() of them, at least one defined.
IndexInfo make_info(const Tensor& self_in, const Tensors& indices) {
  std::vector<int64_t> pos;
  for (size_t i = 0; i < indices.size(); ++i)
    if (indices[i].defined()) pos.push_back(static_cast<int64_t>(i));
  // The indices broadcast together.
  Shape bshape = indices[pos[0]].sizes();
  for (int64_t p : pos) {
    if (broadcastable_to(indices[p].sizes(), bshape)) continue;
    if (broadcastable_to(bshape, indices[p].sizes())) {
      bshape = indices[p].sizes();
      continue;
    }
    Shape merged(std::max(bshape.size(), indices[p].sizes().size()), 1);
    bool ok = true;
    for (size_t i = 0; i < merged.size() && ok; ++i) {
      const auto at = [&](const Shape& s) {
        const size_t lead = merged.size() - s.size();
        return i < lead ? int64_t{1} : s[i - lead];
      };
      const int64_t a = at(bshape), b = at(indices[p].sizes());
      ok = a == b || a == 1 || b == 1;
      merged[i] = a == 1 ? b : a;
    }
    if (!ok) {
      std::string shapes;
      for (int64_t q : pos) shapes += (shapes.empty() ? "" : ", ") + shape_str(indices[q].sizes());
      PF_THROW(IndexError, "shape mismatch: indexing tensors could not be broadcast together with shapes ", shapes);
    }
    bshape = merged;
  }

  // Separated indices move their dims to the front (the result's indexed dims come first).
  const int64_t k = static_cast<int64_t>(pos.size());
  const bool adjacent = pos.back() - pos.front() + 1 == k;
  Shape sizes = self_in.sizes(), strides = self_in.strides();
  Tensors ordered(self_in.dim());
  for (int64_t p : pos) ordered[p] = indices[p];
  int64_t start = pos.front();
  if (!adjacent) {
    Shape perm(pos.begin(), pos.end());
    for (int64_t d = 0; d < self_in.dim(); ++d)
      if (d >= static_cast<int64_t>(indices.size()) || !indices[d].defined()) perm.push_back(d);
    Tensors reordered;
    for (size_t i = 0; i < perm.size(); ++i) {
      sizes[i] = self_in.sizes()[perm[i]];
      strides[i] = self_in.strides()[perm[i]];
      reordered.push_back(ordered[perm[i]]);
    }
    ordered = std::move(reordered);
    start = 0;
  }
  const int64_t nd = self_in.dim(), nb = static_cast<int64_t>(bshape.size()), after = nd - start - k;

  IndexInfo info;
  Shape src_strides;
  for (int64_t d = 0; d < start; ++d) {
    info.result_shape.push_back(sizes[d]);
    src_strides.push_back(strides[d]);
  }
  for (int64_t d = 0; d < nb; ++d) {
    info.result_shape.push_back(bshape[d]);
    src_strides.push_back(0);
  }
  for (int64_t d = start + k; d < nd; ++d) {
    info.result_shape.push_back(sizes[d]);
    src_strides.push_back(strides[d]);
  }
  // No valid index exists for an empty dim (the kernel would never see the elements).
  const bool empty_indexed = std::any_of(sizes.begin() + start, sizes.begin() + start + k, [](int64_t s) { return s == 0; });
  PF_CHECK_T(!(empty_indexed && shape_numel(bshape) > 0), IndexError, "index is out of bounds for dimension with size 0");

  info.src = raw_view(self_in, info.result_shape, src_strides, self_in.offset());
  for (int64_t j = 0; j < k; ++j) {
    const Tensor e = raw_expand(ordered[start + j], bshape);
    Shape st(start, 0);
    st.insert(st.end(), e.strides().begin(), e.strides().end());
    st.resize(start + nb + after, 0);
    info.args.idx.push_back(raw_view(e, info.result_shape, st, e.offset()));
    info.args.sizes.push_back(sizes[start + j]);
    info.args.strides.push_back(strides[start + j]);
    info.args.dims.push_back(j);
  }
  info.args.wrap = true;
  return info;
}

// ---- scatter / gather helpers ----------------------------------------------------------------

// Runs f, reporting the kernel's out-of-range IndexError as a RuntimeError (gather/scatter).
template <typename F>
void as_runtime_error(F&& f) {
  try {
    f();
  } catch (const IndexError& e) {
    throw Error(e.what());
  }
}

// index's iteration-shaped view of `t` along `dim`: index's sizes, t's strides, stride 0 at
// `dim` when `zero_dim` (the indexed dim).
Tensor scatter_view(const Tensor& t, const Tensor& index1, int64_t dim, bool zero_dim) {
  // No index is valid for an empty dim: say which one, before viewing memory that is not there.
  if (zero_dim && size1(t, dim) == 0 && index1.numel() > 0) {
    const Tensor host = to(index1, Device{DeviceType::CPU, 0}, DType::Int64, /*copy=*/true);
    PF_THROW(Error, "index ", host.data<int64_t>()[0], " is out of bounds for dimension ", dim, " with size 0");
  }
  Shape strides(index1.dim());
  for (int64_t d = 0; d < index1.dim(); ++d) strides[d] = d == dim && zero_dim ? 0 : stride1(t, d);
  return raw_view(t, index1.sizes(), strides, t.offset());
}

// The gradient of src in scatter: g at the index-shaped corner of zeros shaped like src.
Tensor pad_to(const Tensor& g_in, const Shape& shape) {
  if (g_in.numel() == 0) return zeros(shape, g_in.dtype(), g_in.device());  // (an empty index: any rank)
  Tensor g = g_in;
  if (g.dim() != static_cast<int64_t>(shape.size())) g = reshape(g, shape.empty() ? Shape{} : Shape{1});
  if (g.sizes() == shape) return g;
  Tensor z = zeros(shape, g.dtype(), g.device());
  Tensor region = z;
  for (int64_t d = 0; d < g.dim(); ++d) region = slice(region, d, 0, g.sizes()[d], 1);
  copy_(region, g);
  return z;
}

enum class ScatterKind { Src, Value, Add };

void scatter_impl(Tensor& self, int64_t dim_in, const Tensor& index_in, const Tensor& src_in, Scalar value,
                  ScatterKind kind) {
  const int64_t dim = wrap_dim(dim_in, self.dim());
  const bool has_src = kind != ScatterKind::Value;
  // As PyTorch: an empty index skips the index checks, not src's dtype or self's overlap.
  if (has_src)
    PF_CHECK(src_in.dtype() == self.dtype(), "scatter(): Expected self.dtype to be equal to src.dtype");
  check_no_internal_overlap(self);
  ag::check_inplace(self);
  const bool grad = is_floating(self.dtype()) && ag::any_requires_grad({&self, &src_in});
  const Tensor index = on_device(index_in, self.device());
  // An empty index writes nothing, but the result is still recorded (its gradient flows).
  if (index_in.numel() > 0) {
    PF_CHECK(index_in.dtype() == DType::Int64, "scatter(): Expected dtype int64 for index");
    PF_CHECK(nd1(index_in) == nd1(self), "Index tensor must have the same number of dimensions as self tensor");
    if (has_src)
      PF_CHECK(nd1(index_in) == nd1(src_in), "Index tensor must have the same number of dimensions as src tensor");
    for (int64_t d = 0; d < nd1(self); ++d) {
      const bool ok = (d == dim || size1(index_in, d) <= size1(self, d)) && (!has_src || size1(index_in, d) <= size1(src_in, d));
      if (ok) continue;
      if (has_src)
        PF_THROW(Error, "Expected index ", shape_str(index_in.sizes()), " to be smaller than self ",
                 shape_str(self.sizes()), " apart from dimension ", dim, " and to be smaller size than src ",
                 shape_str(src_in.sizes()));
      PF_THROW(Error, "Expected index ", shape_str(index_in.sizes()), " to be smaller than self ", shape_str(self.sizes()),
               " apart from dimension ", dim);
    }
    {
      ag::GradModeGuard no_grad(false);
      const Tensor index1 = one_d_view(unaliased(index, self));
      const Tensor dst = scatter_view(self, index1, dim, true);
      Tensor values;
      if (has_src) values = scatter_view(unaliased(src_in, self), index1, dim, false);
      else values = raw_expand(scalar_tensor(value, self.dtype(), self.device()), index1.sizes());
      as_runtime_error([&] {
        run_index_put(dst, values, {{index1}, {size1(self, dim)}, {stride1(self, dim)}, {dim}, false},
                      kind == ScatterKind::Add);
      });
    }
  }
  if (!grad) return;
  std::shared_ptr<ag::FunctionNode> node;
  const Shape src_shape = has_src ? src_in.sizes() : Shape{};
  const bool src_grad = has_src && ag::requires_grad(src_in);
  if (kind == ScatterKind::Add) {
    node = ag::make_node("ScatterAddBackward0", [dim, src_shape, src_grad](const Tensors& g, const Tensors& s) -> Tensors {
      return {g[0], src_grad ? pad_to(gather(g[0], dim, s[0]), src_shape) : Tensor()};
    });
  } else if (kind == ScatterKind::Src) {
    node = ag::make_node("ScatterBackward0", [dim, src_shape, src_grad](const Tensors& g, const Tensors& s) -> Tensors {
      return {scatter(g[0], dim, s[0], Scalar(int64_t{0})), src_grad ? pad_to(gather(g[0], dim, s[0]), src_shape) : Tensor()};
    });
  } else {
    node = ag::make_node("ScatterBackward1", [dim](const Tensors& g, const Tensors& s) -> Tensors {
      return {scatter(g[0], dim, s[0], Scalar(int64_t{0}))};
    });
  }
  node->save(index);
  ag::record_inplace(node, self, has_src ? Tensors{src_in} : Tensors{});
}

// index_select / index_add: a 0-d or 1-d int32/int64 index as a 1-d int64 tensor.
Tensor vector_index(const Tensor& index, const Device& device) {
  Tensor ix = index.dtype() == DType::Int64 ? index : to(index, std::nullopt, DType::Int64);
  ix = on_device(ix, device);
  return one_d_view(ix);
}

// self restrided along `dim` by a 1-d index: `like`'s sizes with the index's length at dim.
// For the data operand `zero_dim` puts stride 0 at dim; the index operand varies only at dim.
Tensor along_dim(const Tensor& t, const Shape& sizes, int64_t dim) {
  Shape strides(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) strides[d] = static_cast<int64_t>(d) == dim ? 0 : stride1(t, d);
  return raw_view(t, sizes, strides, t.offset());
}
Tensor index_along_dim(const Tensor& index1, const Shape& sizes, int64_t dim) {
  Shape strides(sizes.size(), 0);
  strides[dim] = index1.strides()[0];
  return raw_view(index1, sizes, strides, index1.offset());
}

// ---- masked ops helpers ------------------------------------------------------------------------

void check_mask_dtype(const Tensor& mask, const char* op) {
  PF_CHECK(mask.dtype() == DType::Bool || mask.dtype() == DType::UInt8, op,
           " only supports boolean masks, but got mask with dtype ", scalar_type_name(mask.dtype()));
}

Tensor as_bool(const Tensor& t, Device device) {
  return on_device(t.dtype() == DType::Bool ? t : to(t, std::nullopt, DType::Bool), device);
}

// condition ? a : b in place into `out` (all three broadcast to out's shape by the caller).
void run_where(const Tensor& a, const Tensor& b, const Tensor& cond, Tensor& out) {
  const Tensor in[] = {a, b, cond};
  Tensor outs[] = {out};
  call_op_out(where_op(), in, {}, outs);
}

void masked_fill_impl(Tensor& self, const Tensor& mask, const Tensor& value0d, const Tensor& value_for_grad) {
  check_mask_dtype(mask, "masked_fill_");
  // PyTorch's kernel for a (deprecated) uint8 mask reads it as 0/1 only.
  if (mask.dtype() == DType::UInt8 && mask.numel() > 0)
    PF_CHECK(read_int(reduce("amax", mask, {}, false)) <= 1, "Mask tensor can take 0 and 1 values only");
  const Shape shape = broadcast_shapes(mask.sizes(), self.sizes());
  PF_CHECK(shape == self.sizes(), "output with shape ", shape_str(self.sizes()), " doesn't match the broadcast shape ",
           shape_str(shape));
  ag::check_inplace(self);
  check_no_internal_overlap(self);
  const Tensor m = as_bool(mask, self.device());
  const bool grad = is_floating(self.dtype()) && ag::any_requires_grad({&self, &value_for_grad});
  {
    ag::GradModeGuard no_grad(false);
    const Tensor v = raw_expand(to(on_device(value0d, self.device()), std::nullopt, self.dtype()), self.sizes());
    run_where(v, self, raw_expand(unaliased(m, self), self.sizes()), self);
  }
  if (!grad) return;
  if (!value_for_grad.defined()) {
    auto node = ag::make_node("MaskedFillBackward0", [](const Tensors& g, const Tensors& s) -> Tensors {
      return {masked_fill(g[0], s[0], Scalar(int64_t{0}))};
    });
    node->save(m);
    ag::record_inplace(node, self, {});
    return;
  }
  const bool value_grad = ag::requires_grad(value_for_grad);
  auto node = ag::make_node("MaskedFillBackward1", [value_grad](const Tensors& g, const Tensors& s) -> Tensors {
    Tensor gv;
    if (value_grad) gv = reduce("sum", where(s[0], g[0], Scalar(int64_t{0})), {}, false);
    return {masked_fill(g[0], s[0], Scalar(int64_t{0})), gv};
  });
  node->save(m);
  ag::record_inplace(node, self, {value_for_grad});
}

Tensor where_impl(const Tensor& cond, const Tensor& a, const Tensor& b, DType dt) {
  PF_CHECK(cond.dtype() == DType::Bool || cond.dtype() == DType::UInt8,
           "where expected condition to be a boolean tensor, but got a tensor with dtype ", scalar_type_name(cond.dtype()));
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes()), b.sizes());
  // 0-d operands may live on the CPU (PyTorch's scalars); the rest share a device.
  Device device = cond.device();
  if (cond.dim() == 0) device = a.dim() > 0 ? a.device() : b.dim() > 0 ? b.device() : cond.device();
  const auto place = [&](const Tensor& t) { return t.dim() == 0 ? on_device(t, device) : t; };
  const Tensor c = as_bool(place(cond), place(cond).device());
  Tensor out;
  {
    ag::GradModeGuard no_grad(false);
    const Tensor ac = raw_expand(to(place(a), std::nullopt, dt), shape);
    const Tensor bc = raw_expand(to(place(b), std::nullopt, dt), shape);
    const Tensor in[] = {ac, bc, raw_expand(c, shape)};
    out = call_op(where_op(), in)[0];
  }
  if (is_floating(dt) && ag::any_requires_grad({&a, &b})) {
    auto node = ag::make_node("WhereBackward0", [sa = a.sizes(), sb = b.sizes(), ga = ag::requires_grad(a),
                                                 gb = ag::requires_grad(b)](const Tensors& g, const Tensors& s) -> Tensors {
      const Tensor zero = zeros({}, g[0].dtype(), g[0].device());
      return {ga ? ag::sum_to(where(s[0], g[0], zero), sa) : Tensor(),
              gb ? ag::sum_to(where(s[0], zero, g[0]), sb) : Tensor()};
    });
    node->save(c);
    ag::record(node, {a, b}, {out});
  }
  return out;
}

}  // namespace

// ============================================================================================
// advanced indexing
// ============================================================================================

Tensor index(const Tensor& self, const Tensors& indices) {
  const Tensors idx = expand_indices(self, indices);
  if (!any_defined(idx)) return clone(self);
  Tensor out;
  {
    ag::GradModeGuard no_grad(false);
    IndexInfo info = make_info(self, idx);
    out = run_index(info.src, std::move(info.args));
  }
  if (is_floating(self.dtype()) && ag::any_requires_grad({&self})) {
    auto node = ag::make_node("IndexBackward0", [shape = self.sizes(), dtype = self.dtype(), device = self.device()](
                                                    const Tensors& g, const Tensors& s) -> Tensors {
      Tensor z = zeros(shape, dtype, device);
      index_put_(z, s, g[0], /*accumulate=*/true);
      return {z};
    });
    for (const Tensor& t : idx) node->save(t);
    ag::record(node, {self}, {out});
  }
  return out;
}

namespace {

// PyTorch's index_put_ without accumulate sends a one-element value and exactly one boolean
// (or uint8) mask among the indices to masked_fill_ (canDispatchToMaskedFill), which takes a
// value of any dtype (its item, checked to fit) where the general path requires self's dtype.
// Autograd records that masked fill of the value as a 0-d tensor, which gives index_put_'s
// gradients.
bool put_by_mask(Tensor& self, const Tensors& indices, const Tensor& values) {
  if (values.numel() != 1 || !values.device().is_cpu()) return false;
  PF_CHECK_T(static_cast<int64_t>(indices.size()) <= self.dim(), IndexError, "too many indices for tensor of dimension ",
             self.dim(), " (got ", indices.size(), ")");
  int64_t pos = 0;
  Tensor mask;
  for (const Tensor& index : indices) {
    if (!index.defined()) {
      ++pos;
      continue;
    }
    if ((index.dtype() != DType::Bool && index.dtype() != DType::UInt8) || index.device() != self.device() ||
        mask.defined())
      return false;
    mask = index;
    PF_CHECK_T(pos + mask.dim() <= self.dim(), IndexError, "too many indices for tensor of dimension ", self.dim());
    for (int64_t j = 0; j < mask.dim(); ++j)
      PF_CHECK_T(mask.sizes()[j] == self.sizes()[pos + j], IndexError, "The shape of the mask ",
                 shape_str(mask.sizes()), " at index ", j, " does not match the shape of the indexed tensor ",
                 shape_str(self.sizes()), " at index ", pos + j);
    pos += mask.dim();
  }
  if (!mask.defined()) return false;
  for (int64_t d = pos; d < self.dim(); ++d) mask = unsqueeze(mask, -1);
  masked_fill_(self, mask, values.dim() == 0 ? values : reshape(values, {}));
  return true;
}

}  // namespace

Tensor& index_put_(Tensor& self, const Tensors& indices, const Tensor& values_in, bool accumulate) {
  if (!accumulate && put_by_mask(self, indices, values_in)) return self;
  PF_CHECK(values_in.dtype() == self.dtype(), "Index put requires the source and destination dtypes match, got ",
           scalar_type_name(self.dtype()), " for the destination and ", scalar_type_name(values_in.dtype()),
           " for the source.");
  const Tensor values = values_in.dim() == 0 ? on_device(values_in, self.device()) : values_in;
  const Tensors idx = expand_indices(self, indices);
  if (!any_defined(idx)) {  // nothing indexed: the whole tensor
    if (accumulate) binary_("add", self, values);
    else copy_(self, values);
    return self;
  }
  ag::check_inplace(self);
  check_no_internal_overlap(self);
  const bool grad = is_floating(self.dtype()) && ag::any_requires_grad({&self, &values});
  {
    ag::GradModeGuard no_grad(false);
    IndexInfo info = make_info(self, idx);
    PF_CHECK(broadcastable_to(values.sizes(), info.result_shape), "shape mismatch: value tensor of shape ",
             shape_str(values.sizes()), " cannot be broadcast to indexing result of shape ",
             shape_str(info.result_shape));
    for (Tensor& t : info.args.idx) t = unaliased(t, self);
    run_index_put(info.src, raw_expand(unaliased(values, self), info.result_shape), std::move(info.args), accumulate);
  }
  if (grad) {
    const bool values_grad = ag::requires_grad(values);
    auto node = ag::make_node("IndexPutBackward0", [accumulate, values_grad, vshape = values.sizes()](
                                                       const Tensors& g, const Tensors& s) -> Tensors {
      Tensor gs = g[0];
      if (!accumulate) {
        gs = clone(g[0]);
        index_put_(gs, s, zeros({}, g[0].dtype(), g[0].device()), false);
      }
      return {gs, values_grad ? ag::sum_to(index(g[0], s), vshape) : Tensor()};
    });
    for (const Tensor& t : idx) node->save(t);
    ag::record_inplace(node, self, {values});
  }
  return self;
}

Tensor index_put(const Tensor& self, const Tensors& indices, const Tensor& values, bool accumulate) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"index_put", {self, values}}) return index_put(cast[0], indices, cast[1], accumulate);
  Tensor out = clone(self);
  index_put_(out, indices, values, accumulate);
  return out;
}

// ============================================================================================
// gather / scatter
// ============================================================================================

Tensor gather(const Tensor& self, int64_t dim_in, const Tensor& index_in) {
  const int64_t dim = wrap_dim(dim_in, self.dim());
  // As PyTorch: an empty index is not checked (the result is empty, whatever its dtype); an
  // empty view of self keeps the autograd connection.
  if (index_in.numel() == 0) return as_strided(self, index_in.sizes(), Shape(index_in.sizes().size(), 0), self.offset());
  PF_CHECK(index_in.dtype() == DType::Int64, "gather(): Expected dtype int64 for index");
  PF_CHECK(nd1(index_in) == nd1(self), "Index tensor must have the same number of dimensions as input tensor");
  for (int64_t d = 0; d < nd1(self); ++d)
    PF_CHECK(d == dim || size1(index_in, d) <= size1(self, d), "Size does not match at dimension ", d,
             " expected index ", shape_str(index_in.sizes()), " to be smaller than self ", shape_str(self.sizes()),
             " apart from dimension ", dim);
  const Tensor index = on_device(index_in, self.device());
  Tensor out;
  {
    ag::GradModeGuard no_grad(false);
    const Tensor index1 = one_d_view(index);
    as_runtime_error([&] {
      out = run_index(scatter_view(self, index1, dim, true),
                      {{index1}, {size1(self, dim)}, {stride1(self, dim)}, {dim}, false});
    });
    if (index.dim() == 0) out = raw_view(out, {}, {}, out.offset());
  }
  if (is_floating(self.dtype()) && ag::any_requires_grad({&self})) {
    auto node = ag::make_node("GatherBackward0", [dim, shape = self.sizes(), dtype = self.dtype(),
                                                  device = self.device()](const Tensors& g, const Tensors& s) -> Tensors {
      Tensor z = zeros(shape, dtype, device);
      scatter_add_(z, dim, s[0], g[0]);
      return {z};
    });
    node->save(index);
    ag::record(node, {self}, {out});
  }
  return out;
}

Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_impl(self, dim, index, src, Scalar(), ScatterKind::Src);
  return self;
}

Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, Scalar value) {
  scatter_impl(self, dim, index, Tensor(), value, ScatterKind::Value);
  return self;
}

Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_impl(self, dim, index, src, Scalar(), ScatterKind::Add);
  return self;
}

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = clone(self);
  return scatter_(out, dim, index, src);
}

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, Scalar value) {
  Tensor out = clone(self);
  return scatter_(out, dim, index, value);
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"scatter_add", {self, src}}) return scatter_add(cast[0], dim, index, cast[1]);
  Tensor out = clone(self);
  return scatter_add_(out, dim, index, src);
}

// ============================================================================================
// index_select / index_add / take
// ============================================================================================

Tensor index_select(const Tensor& self, int64_t dim_in, const Tensor& index_in) {
  PF_CHECK(index_in.dtype() == DType::Int64 || index_in.dtype() == DType::Int32,
           "index_select(): Expected dtype int32 or int64 for index");
  PF_CHECK_T(index_in.dim() <= 1, IndexError, "index_select(): Index is supposed to be a vector");
  const int64_t dim = wrap_dim(dim_in, self.dim());
  if (self.dim() == 0)
    PF_CHECK_T(index_in.numel() == 1, IndexError, "index_select(): Index to scalar can have only 1 value, got ",
               index_in.numel(), " value(s)");
  const Tensor index1 = vector_index(index_in, self.device());
  if (self.numel() == 0 && index1.numel() > 0) {
    PF_CHECK_T(self.dim() > 1 || out_of_range(index1, 0).numel() == 0, IndexError, "index out of range in self");
    PF_CHECK(self.sizes()[dim] > 0, "index_select(): self indexing axis dim should be positive");
    const Tensor bad = out_of_range(index1, self.sizes()[dim]);
    PF_CHECK(bad.numel() == 0, "INDICES element is out of DATA bounds, id=", read_int(bad), " axis_dim=",
             self.sizes()[dim]);
  }
  Tensor out;
  {
    ag::GradModeGuard no_grad(false);
    Shape sizes = one_d_view(self).sizes();
    sizes[dim] = index1.sizes()[0];
    try {
      out = run_index(along_dim(self, sizes, dim),
                      {{index_along_dim(index1, sizes, dim)}, {size1(self, dim)}, {stride1(self, dim)}, {dim}, false});
    } catch (const IndexError&) {
      PF_THROW(IndexError, "index out of range in self");
    }
    if (self.dim() == 0) out = raw_view(out, {}, {}, out.offset());
  }
  if (is_floating(self.dtype()) && ag::any_requires_grad({&self})) {
    auto node = ag::make_node("IndexSelectBackward0", [dim, shape = self.sizes(), dtype = self.dtype(),
                                                       device = self.device()](const Tensors& g, const Tensors& s) -> Tensors {
      Tensor z = zeros(shape, dtype, device);
      index_add_(z, dim, s[0], g[0]);
      return {z};
    });
    node->save(index1);
    ag::record(node, {self}, {out});
  }
  return out;
}

Tensor& index_add_(Tensor& self, int64_t dim_in, const Tensor& index_in, const Tensor& source, Scalar alpha) {
  PF_CHECK(index_in.dtype() == DType::Int64 || index_in.dtype() == DType::Int32,
           "index_add_(): Expected dtype int32/int64 for index but got: ", scalar_type_name(index_in.dtype()));
  PF_CHECK_T(index_in.dim() <= 1, IndexError, "index_add_(): Index is supposed to be a vector, but got dim: ",
             index_in.dim(), " with type: ", scalar_type_name(index_in.dtype()), " and size: ",
             shape_str(index_in.sizes()));
  const int64_t dim = wrap_dim(dim_in, self.dim());
  PF_CHECK(source.dtype() == self.dtype(), "index_add_(): self (", scalar_type_name(self.dtype()), ") and source (",
           scalar_type_name(source.dtype()), ") must have the same scalar type");
  const int64_t n = index_in.numel();
  PF_CHECK(source.dim() == 0 ? n == 1 : n == source.sizes()[dim], "index_add_(): Number of indices (", n,
           ") should be equal to source.size(dim): (", source.dim() == 0 ? 1 : source.sizes()[dim], "), for dim: ", dim);
  bool same = nd1(source) == nd1(self);
  for (int64_t d = 0; same && d < nd1(self); ++d) same = d == dim || size1(source, d) == size1(self, d);
  PF_CHECK(same, "index_add_(): source ", shape_str(source.sizes()), " must have the shape of self ",
           shape_str(self.sizes()), " apart from dimension ", dim);
  check_scalar_fits(alpha, self.dtype());  // PyTorch's kernel converts alpha with overflow checks
  ag::check_inplace(self);
  check_no_internal_overlap(self);
  const Tensor index1 = vector_index(index_in, self.device());
  if (self.numel() == 0)
    PF_CHECK_T(out_of_range(index1, size1(self, dim)).numel() == 0, IndexError, "index out of range in self");
  const bool grad = is_floating(self.dtype()) && ag::any_requires_grad({&self, &source});
  {
    ag::GradModeGuard no_grad(false);
    // alpha * source in self's dtype (an integral self truncates a float alpha, as PyTorch; a
    // bool self takes alpha as a bool: 0 adds nothing).
    Tensor values = unaliased(source, self);
    const bool unit = alpha.is_floating() ? alpha.to_double() == 1.0 : alpha.to_int() == 1;
    if (!unit) {
      const Scalar a = self.dtype() == DType::Bool   ? Scalar(alpha.to_bool())
                       : is_floating(self.dtype()) ? alpha
                                                   : Scalar(alpha.to_int());
      values = binary("mul", values, a);
    }
    values = one_d_view(values);
    const Shape& sizes = values.sizes();
    try {
      run_index_put(along_dim(self, sizes, dim), values,
                    {{index_along_dim(unaliased(index1, self), sizes, dim)}, {size1(self, dim)}, {stride1(self, dim)},
                     {dim}, false},
                    /*accumulate=*/true);
    } catch (const IndexError&) {
      PF_THROW(IndexError, "index out of range in self");
    }
  }
  if (grad) {
    auto node = ag::make_node("IndexAddBackward0", [dim, alpha, sshape = source.sizes(), sgrad = ag::requires_grad(source)](
                                                       const Tensors& g, const Tensors& s) -> Tensors {
      Tensor gs;
      if (sgrad) {
        gs = index_select(g[0], dim, s[0]);
        const bool unit = alpha.is_floating() ? alpha.to_double() == 1.0 : alpha.to_int() == 1;
        if (!unit) gs = binary("mul", gs, alpha);
        if (gs.sizes() != sshape) gs = reshape(gs, sshape);
      }
      return {g[0], gs};
    });
    node->save(index1);
    ag::record_inplace(node, self, {source});
  }
  return self;
}

Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha) {
  Tensor out = clone(self);
  return index_add_(out, dim, index, source, alpha);
}

Tensor take(const Tensor& self, const Tensor& index_in) {
  PF_CHECK(index_in.dtype() == DType::Int64, "take(): Expected a long tensor for index, but got ",
           scalar_type_name(index_in.dtype()));
  PF_CHECK_T(!(self.numel() == 0 && index_in.numel() > 0), IndexError, "take(): tried to take from an empty tensor");
  const Tensor index = on_device(index_in, self.device());
  Tensor out;
  {
    ag::GradModeGuard no_grad(false);
    const Tensor flat = reshape(contiguous(self), {-1});
    const Tensor src = raw_view(flat, index.sizes(), Shape(index.dim(), 0), flat.offset());
    try {
      out = run_index(src, {{index}, {self.numel()}, {1}, {0}, true});
    } catch (const IndexError& e) {
      // The kernel's message is "index V is out of bounds ..." (docs/kernels.md); PyTorch's
      // take() words it differently.
      long long value = 0;
      if (std::sscanf(e.what(), "index %lld", &value) != 1) throw;  // NOLINT(cert-err34-c)
      PF_THROW(IndexError, "out of range: tried to access index ", value, " on a tensor of ", self.numel(),
               " elements.");
    }
  }
  if (is_floating(self.dtype()) && ag::any_requires_grad({&self})) {
    auto node = ag::make_node("TakeBackward0", [shape = self.sizes(), dtype = self.dtype(), device = self.device()](
                                                   const Tensors& g, const Tensors& s) -> Tensors {
      Tensor z = zeros({shape_numel(shape)}, dtype, device);
      index_put_(z, {s[0]}, g[0], /*accumulate=*/true);
      return {reshape(z, shape)};
    });
    node->save(index);
    ag::record(node, {self}, {out});
  }
  return out;
}

// ============================================================================================
// masked ops, where, nonzero
// ============================================================================================

Tensor& masked_fill_(Tensor& self, const Tensor& mask, Scalar value) {
  masked_fill_impl(self, mask, scalar_tensor(value, self.dtype(), self.device()), Tensor());
  return self;
}

Tensor& masked_fill_(Tensor& self, const Tensor& mask, const Tensor& value) {
  PF_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
           value.dim(), " dimension(s).");
  check_scalar_fits(item(value), self.dtype());  // PyTorch fills with value.item()
  masked_fill_impl(self, mask, value, value);
  return self;
}

Tensor masked_fill(const Tensor& self, const Tensor& mask, Scalar value) {
  check_mask_dtype(mask, "masked_fill");
  const Shape shape = broadcast_shapes(mask.sizes(), self.sizes());
  Tensor out = clone(shape == self.sizes() ? self : expand(self, shape));
  return masked_fill_(out, mask, value);
}

Tensor masked_fill(const Tensor& self, const Tensor& mask, const Tensor& value) {
  check_mask_dtype(mask, "masked_fill");
  PF_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
           value.dim(), " dimension(s).");
  const Shape shape = broadcast_shapes(self.sizes(), mask.sizes());
  Tensor out = clone(shape == self.sizes() ? self : expand(self, shape));
  return masked_fill_(out, mask, value);
}

Tensor masked_select(const Tensor& self, const Tensor& mask) {
  PF_CHECK(mask.dtype() == DType::Bool || mask.dtype() == DType::UInt8,
           "masked_select: expected BoolTensor or ByteTensor for mask");
  const Shape shape = broadcast_shapes(mask.sizes(), self.sizes());
  const Shape shape1 = shape.empty() ? Shape{1} : shape;
  Tensors idx;
  Tensor out;
  {
    ag::GradModeGuard no_grad(false);
    const Tensor m = raw_expand(one_d_view(as_bool(mask, self.device())), shape1);
    const Tensor nz = nonzero(m);
    for (int64_t j = 0; j < nz.sizes()[1]; ++j) idx.push_back(select(nz, 1, j));
    IndexInfo info = make_info(raw_expand(one_d_view(self), shape1), idx);
    out = run_index(info.src, std::move(info.args));
  }
  if (is_floating(self.dtype()) && ag::any_requires_grad({&self})) {
    auto node = ag::make_node("MaskedSelectBackward0", [shape1, sshape = self.sizes()](const Tensors& g,
                                                                                       const Tensors& s) -> Tensors {
      Tensor z = zeros(shape1, g[0].dtype(), g[0].device());
      index_put_(z, s, g[0], /*accumulate=*/false);
      return {ag::sum_to(z, sshape)};
    });
    for (const Tensor& t : idx) node->save(t);
    ag::record(node, {self}, {out});
  }
  return out;
}

Tensor where(const Tensor& condition, const Tensor& self, const Tensor& other) {
  return where_impl(condition, self, other, result_type(self, other));
}

Tensor where(const Tensor& condition, const Tensor& self, Scalar other) {
  const DType dt = result_type(self, other);
  return where_impl(condition, self, scalar_tensor(other, dt, self.device()), dt);
}

Tensor where(const Tensor& condition, Scalar self, const Tensor& other) {
  const DType dt = result_type(other, self);
  return where_impl(condition, scalar_tensor(self, dt, other.device()), other, dt);
}

Tensor where(const Tensor& condition, Scalar self, Scalar other) {
  const DType dt = promote_types(self.default_dtype(), other.default_dtype());
  return where_impl(condition, scalar_tensor(self, dt, condition.device()), scalar_tensor(other, dt, condition.device()),
                    dt);
}

Tensor nonzero(const Tensor& self) {
  ag::GradModeGuard no_grad(false);
  const Tensor nz = self.dtype() == DType::Bool ? self : binary("ne", self, Scalar(int64_t{0}));
  const int64_t count = read_int(reduce("sum", nz, {}, false, DType::Int64));
  Tensor out = empty({count, self.dim()}, DType::Int64, self.device());
  const Tensor in[] = {self};
  Tensor outs[] = {out};
  call_op_out(nonzero_op(), in, {}, outs);
  return out;
}

std::vector<Tensor> nonzero_numpy(const Tensor& self) {
  ag::GradModeGuard no_grad(false);
  const Tensor nz = nonzero(one_d_view(self));
  std::vector<Tensor> out;
  for (int64_t j = 0; j < nz.sizes()[1]; ++j) out.push_back(select(nz, 1, j));
  return out;
}

}  // namespace plugflow::ops
