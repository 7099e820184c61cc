// Shape ops (plugflow/ops_shape.h): joining, splitting, rearranging, ordering and padding.
//
// Data movement that views and the casting `copy` kernel can express is composed here, so
// it works on every device without new kernels: cat/stack copy into slices of the output,
// roll copies blocks, repeat/tile/repeat_interleave expand and reshape, constant padding
// fills and copies. Ops that need their own kernels (docs/kernels.md): sort, topk, tril,
// triu, flip, pad (reflect / replicate / circular), unique, and the along-dim gather /
// scatter-add that the backward of sort, topk and the padding modes use. Every backward is
// written with ops, so double backward works.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "../autograd/grad_utils.h"
#include "opdefs.h"
#include "plugflow/autocast.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/graph.h"
#include "plugflow/ops.h"

namespace plugflow::ops {
namespace {

using Tensors = std::vector<Tensor>;

// "[ torch.FloatTensor{2,0} ]": how PyTorch prints a tensor's type and shape in messages.
std::string torch_tensor_str(const Tensor& t) {
  std::string s = "[ torch." + std::string(scalar_type_name(t.dtype())) + "Tensor{";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? "," : "") + std::to_string(t.sizes()[d]);
  return s + "} ]";
}

const Device kCpu{DeviceType::CPU, 0};

// One element of an integer tensor, on the host.
int64_t item_int(const Tensor& t) {
  graph::check_host_read("reading an integer tensor value (repeats, class counts, sizes)");
  const Tensor c = to(contiguous(t), kCpu, DType::Int64);
  return *c.data<int64_t>();
}

bool records(const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  return is_floating(out.dtype()) && autograd::any_requires_grad(inputs);
}

// ============================================================================================
// catalog: the ops with kernels
// ============================================================================================

void check_dim_attr(const Tensor& a, int64_t dim, const char* op) {
  PF_CHECK_T(dim >= 0 && dim < a.dim(), IndexError, op, ": dim ", dim, " out of range for a ", a.dim(),
             "-d input (the functional layer wraps dims and reshapes 0-d inputs)");
}

std::vector<TensorMeta> sort_meta(std::span<const Tensor> in, const Attrs& attrs) {
  check_dim_attr(in[0], attrs.get<int64_t>("dim"), "sort");
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}, {in[0].sizes(), DType::Int64, in[0].device()}};
}

std::vector<TensorMeta> topk_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const int64_t dim = attrs.get<int64_t>("dim"), k = attrs.get<int64_t>("k");
  check_dim_attr(in[0], dim, "topk");
  PF_CHECK(k >= 0 && k <= in[0].sizes()[dim], "selected index k out of range");
  Shape s = in[0].sizes();
  s[dim] = k;
  return {{s, in[0].dtype(), in[0].device()}, {s, DType::Int64, in[0].device()}};
}

std::vector<TensorMeta> tri_meta(std::span<const Tensor> in, const Attrs& attrs) {
  attrs.get<int64_t>("diagonal");
  PF_CHECK(in[0].dim() >= 2, "tril/triu: input must have at least 2 dimensions, got ", in[0].dim());
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> flip_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Shape& dims = attrs.get<Shape>("dims");
  for (size_t i = 0; i < dims.size(); ++i) {
    check_dim_attr(in[0], dims[i], "flip");
    PF_CHECK(i == 0 || dims[i] > dims[i - 1], "flip: dims must be sorted and unique");
  }
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> pad_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const std::string& mode = attrs.get<std::string>("mode");
  PF_CHECK(mode == "reflect" || mode == "replicate" || mode == "circular", "pad: unknown mode '", mode, "'");
  const Shape& pads = attrs.get<Shape>("pads");
  PF_CHECK(static_cast<int64_t>(pads.size()) == 2 * in[0].dim(), "pad: expected ", 2 * in[0].dim(),
           " pads (before, after per dim), got ", pads.size());
  Shape out = in[0].sizes();
  for (int64_t d = 0; d < in[0].dim(); ++d) {
    out[d] += pads[2 * d] + pads[2 * d + 1];
    PF_CHECK(out[d] >= 0, "pad: negative output size at dim ", d);
    PF_CHECK(out[d] == 0 || in[0].sizes()[d] > 0, "pad: cannot pad an empty dim ", d);
  }
  return {{out, in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> unique_meta(std::span<const Tensor> in, const Attrs& attrs) {
  attrs.get<bool>("consecutive");
  const Tensor& a = in[0];
  PF_CHECK(a.dim() == 2, "unique: expected a 2-d (rows, row length) input, got ", a.dim(), "-d");
  const int64_t n = a.sizes()[0];
  return {{a.sizes(), a.dtype(), a.device()},
          {{n}, DType::Int64, a.device()},
          {{n}, DType::Int64, a.device()},
          {{1}, DType::Int64, a.device()}};
}

void check_along_dim(const Tensor& index, const Shape& sizes, int64_t dim, const char* op) {
  PF_CHECK(index.dtype() == DType::Int64, op, "(): Expected dtype int64 for index");
  PF_CHECK(index.dim() == static_cast<int64_t>(sizes.size()), op,
           "(): Index tensor must have the same number of dimensions as input tensor");
  PF_CHECK_T(dim >= 0 && (dim < index.dim() || index.dim() == 0), IndexError, op, ": dim ", dim, " out of range");
  for (int64_t d = 0; d < index.dim(); ++d)
    PF_CHECK(d == dim || index.sizes()[d] <= sizes[d], "Size does not match at dimension ", d,
             " expected index ", shape_str(index.sizes()), " to be smaller than self ", shape_str(sizes),
             " apart from dimension ", dim);
}

std::vector<TensorMeta> gather_meta(std::span<const Tensor> in, const Attrs& attrs) {
  check_along_dim(in[1], in[0].sizes(), attrs.get<int64_t>("dim"), "gather");
  return {{in[1].sizes(), in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> scatter_add_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Shape& size = attrs.get<Shape>("size");
  PF_CHECK(in[1].sizes() == in[0].sizes(), "scatter_add: index and src must have one shape");
  check_along_dim(in[1], size, attrs.get<int64_t>("dim"), "scatter_add");
  return {{size, in[0].dtype(), in[0].device()}};
}

// The catalog entries of core/opdefs/shape.yaml, with the meta functions above.
const bool kShapeOpsRegistered = [] {
#define PF_X(name, signature, meta, mutated) register_op(name, signature, meta, {PF_OPDEFS_UNPAREN mutated});
  PF_OPDEFS_SHAPE(PF_X)
#undef PF_X
  return true;
}();

const OpDef& op_named(const char* name) { return find_op(name); }

// ============================================================================================
// cat
// ============================================================================================

bool cat_skips(const Tensor& t) { return t.dim() == 1 && t.sizes()[0] == 0; }

struct CatPlan {
  int64_t dim = 0;
  Shape sizes;
  DType dtype = DType::Float32;
  Device device;
};

CatPlan plan_cat(const std::vector<Tensor>& tensors, int64_t dim_in) {
  for (size_t i = 0; i < tensors.size(); ++i)
    PF_CHECK(tensors[i].dim() > 0, "zero-dimensional tensor (at position ", i, ") cannot be concatenated");
  size_t valid = tensors.size();
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!cat_skips(tensors[i])) {
      valid = i;
      break;
    }
  CatPlan p;
  p.dim = valid < tensors.size() ? wrap_dim(dim_in, tensors[valid].dim()) : dim_in;
  PF_CHECK(!tensors.empty(), "torch.cat(): expected a non-empty list of Tensors");
  p.dtype = tensors[0].dtype();
  p.device = tensors[0].device();
  for (size_t i = 1; i < tensors.size(); ++i) {
    p.dtype = promote_types(p.dtype, tensors[i].dtype());
    PF_CHECK(tensors[i].device() == p.device, "Expected all tensors to be on the same device, but found at least two "
             "devices, ", p.device.str(), " and ", tensors[i].device().str(), "!");
  }
  if (valid == tensors.size()) {
    p.sizes = {0};
    return p;
  }
  const Tensor& first = tensors[valid];
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (cat_skips(t)) continue;
    PF_CHECK(t.dim() == first.dim(), "Tensors must have same number of dimensions: got ", first.dim(), " and ",
             t.dim());
    for (int64_t d = 0; d < t.dim(); ++d)
      PF_CHECK(d == p.dim || t.sizes()[d] == first.sizes()[d], "Sizes of tensors must match except in dimension ",
               p.dim, ". Expected size ", first.sizes()[d], " but got size ", t.sizes()[d], " for tensor number ", i,
               " in the list.");
    total += t.sizes()[p.dim];
  }
  p.sizes = first.sizes();
  p.sizes[p.dim] = total;
  return p;
}

// Copies the inputs into consecutive slices of out (casting), outside autograd.
void cat_fill(Tensor& out, const std::vector<Tensor>& tensors, int64_t dim) {
  autograd::GradModeGuard no_grad(false);
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (cat_skips(t)) continue;
    const int64_t n = t.sizes()[dim];
    if (n > 0 && t.numel() > 0) {
      Tensor region = narrow(out, dim, offset, n);
      copy_(region, t);
    }
    offset += n;
  }
}

void record_cat(const std::vector<Tensor>& tensors, const Tensor& out, int64_t dim) {
  if (!is_floating(out.dtype()) || !autograd::any_requires_grad(tensors)) return;
  std::vector<Shape> shapes;
  for (const Tensor& t : tensors) shapes.push_back(t.sizes());
  auto node = autograd::make_node("CatBackward0", [shapes, dim](const Tensors& g, const Tensors&) -> Tensors {
    Tensors grads;
    int64_t offset = 0;
    for (const Shape& s : shapes) {
      if (s.size() == 1 && s[0] == 0) {
        grads.push_back(zeros(s, g[0].dtype(), g[0].device()));
        continue;
      }
      grads.push_back(narrow(g[0], dim, offset, s[dim]));
      offset += s[dim];
    }
    return grads;
  });
  autograd::record(node, tensors, std::span<const Tensor>(&out, 1));
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"cat", tensors}) return cat(cast.tensors(), dim);
  const CatPlan p = plan_cat(tensors, dim);
  Tensor out = Tensor::empty(p.sizes, p.dtype, p.device);
  cat_fill(out, tensors, p.dim);
  record_cat(tensors, out, p.dim);
  return out;
}

Tensor& cat_out(Tensor& out, const std::vector<Tensor>& tensors, int64_t dim) {
  const CatPlan p = plan_cat(tensors, dim);
  PF_CHECK(can_cast(p.dtype, out.dtype()), "torch.cat(): input types can't be cast to the desired output type ",
           scalar_type_name(out.dtype()));
  PF_CHECK(out.device() == p.device, "Expected out tensor to be on ", p.device.str(), " but got ", out.device().str());
  PF_CHECK(!autograd::any_requires_grad(tensors) && !autograd::any_requires_grad({&out}),
           "cat(): functions with out=... arguments don't support automatic differentiation, but one of the "
           "arguments requires grad.");
  for (size_t i = 0; i < tensors.size(); ++i)
    PF_CHECK(tensors[i].storage() != out.storage(), "unsupported operation: the input tensors cannot refer to any of "
             "the output memory locations. Found overlap in input tensor ", i);
  resize_(out, p.sizes);
  check_no_internal_overlap(out);  // (after the resize, as PyTorch: a resized out is contiguous)
  cat_fill(out, tensors, p.dim);
  return out;
}

Tensor atleast_1d(const Tensor& t) { return t.dim() == 0 ? reshape(t, {1}) : t; }
Tensor atleast_2d(const Tensor& t) {
  if (t.dim() == 0) return reshape(t, {1, 1});
  return t.dim() == 1 ? unsqueeze(t, 0) : t;
}
Tensor atleast_3d(const Tensor& t) {
  if (t.dim() == 0) return reshape(t, {1, 1, 1});
  if (t.dim() == 1) return unsqueeze(unsqueeze(t, 0), 2);
  return t.dim() == 2 ? unsqueeze(t, 2) : t;
}

namespace {
Tensors map_tensors(const std::vector<Tensor>& ts, Tensor (*f)(const Tensor&)) {
  Tensors out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(f(t));
  return out;
}

// stack, hstack, vstack, dstack and column_stack are cat of reshaped inputs (PyTorch's too,
// out= included): the views cat joins, and along which dim.
struct JoinPlan {
  Tensors parts;
  int64_t dim;
};

JoinPlan plan_join(Join join, const std::vector<Tensor>& tensors, int64_t dim) {
  static constexpr const char* kNames[] = {"stack", "hstack", "vstack", "dstack", "column_stack"};
  PF_CHECK(!tensors.empty(), kNames[static_cast<int>(join)], " expects a non-empty TensorList");
  switch (join) {
    case Join::Stack: {
      const int64_t d = wrap_dim(dim, tensors[0].dim() + 1);
      for (size_t i = 1; i < tensors.size(); ++i)
        PF_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack expects each tensor to be equal size, but got ",
                 shape_str(tensors[0].sizes()), " at entry 0 and ", shape_str(tensors[i].sizes()), " at entry ", i);
      Tensors parts;
      parts.reserve(tensors.size());
      for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, d));
      return {std::move(parts), d};
    }
    case Join::HStack: {
      Tensors rs = map_tensors(tensors, atleast_1d);
      const int64_t d = rs[0].dim() == 1 ? 0 : 1;
      return {std::move(rs), d};
    }
    case Join::VStack: return {map_tensors(tensors, atleast_2d), 0};
    case Join::DStack: return {map_tensors(tensors, atleast_3d), 2};
    case Join::ColumnStack: {
      Tensors rs;
      for (const Tensor& t : tensors) rs.push_back(t.dim() <= 1 ? reshape(t, {t.numel(), 1}) : t);
      return {std::move(rs), 1};
    }
  }
  PF_THROW(Error, "unknown join");
}
}  // namespace

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"stack", tensors}) return stack(cast.tensors(), dim);
  JoinPlan p = plan_join(Join::Stack, tensors, dim);
  return cat(p.parts, p.dim);
}

Tensor hstack(const std::vector<Tensor>& tensors) {
  JoinPlan p = plan_join(Join::HStack, tensors, 0);
  return cat(p.parts, p.dim);
}

Tensor vstack(const std::vector<Tensor>& tensors) {
  JoinPlan p = plan_join(Join::VStack, tensors, 0);
  return cat(p.parts, p.dim);
}

Tensor dstack(const std::vector<Tensor>& tensors) {
  JoinPlan p = plan_join(Join::DStack, tensors, 0);
  return cat(p.parts, p.dim);
}

Tensor column_stack(const std::vector<Tensor>& tensors) {
  JoinPlan p = plan_join(Join::ColumnStack, tensors, 0);
  return cat(p.parts, p.dim);
}

Tensor& join_out(Tensor& out, Join join, const std::vector<Tensor>& tensors, int64_t dim) {
  JoinPlan p = plan_join(join, tensors, dim);
  return cat_out(out, p.parts, p.dim);
}

// ============================================================================================
// split, chunk, unbind: views
// ============================================================================================

std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim) {
  PF_CHECK(t.dim() != 0, "split expects at least a 1-dimensional tensor");
  PF_CHECK(split_size >= 0, "split expects split_size be non-negative, but got split_size=", split_size);
  const int64_t d = wrap_dim(dim, t.dim());
  const int64_t n = t.sizes()[d];
  PF_CHECK(split_size != 0 || n == 0, "split_size can only be 0 if dimension size is 0, but got dimension size of ", n);
  const int64_t parts = split_size == 0 ? 1 : std::max<int64_t>((n + split_size - 1) / split_size, 1);
  std::vector<Tensor> out;
  out.reserve(parts);
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t start = i * split_size;
    out.push_back(narrow(t, d, start, std::min(split_size, n - start)));
  }
  return out;
}

std::vector<Tensor> split_with_sizes(const Tensor& t, const Shape& sizes, int64_t dim) {
  PF_CHECK(t.dim() != 0, "split expects at least a 1-dimensional tensor");
  const int64_t d = wrap_dim(dim, t.dim());
  const int64_t n = t.sizes()[d];
  int64_t total = 0;
  for (int64_t s : sizes) {
    PF_CHECK(s >= 0, "split_with_sizes expects split_sizes have only non-negative entries, but got split_sizes=",
             shape_str(sizes));
    total += s;
  }
  PF_CHECK(total == n, "split_with_sizes expects split_sizes to sum exactly to ", n,
           " (input tensor's size at dimension ", d, "), but got split_sizes=", shape_str(sizes));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(t, d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  PF_CHECK(t.dim() > 0, "chunk expects at least a 1-dimensional tensor");
  PF_CHECK(chunks > 0, "chunk expects `chunks` to be greater than 0, got: ", chunks);
  const int64_t d = wrap_dim(dim, t.dim());
  const int64_t n = t.sizes()[d];
  const int64_t size = (n + chunks - 1) / chunks;
  if (size == 0 && n == 0) return split_with_sizes(t, Shape(chunks, 0), d);
  return split(t, size, d);
}

std::vector<Tensor> unbind(const Tensor& t, int64_t dim) {
  const int64_t d = wrap_dim_no_scalar(dim, t.dim());
  std::vector<Tensor> out;
  out.reserve(t.sizes()[d]);
  for (int64_t i = 0; i < t.sizes()[d]; ++i) out.push_back(select(t, d, i));
  return out;
}

// ============================================================================================
// flip, roll
// ============================================================================================

namespace {
// Sorted, unique, wrapped dims; "dim X appears multiple times in the list of dims" otherwise.
Shape unique_dims(const Tensor& t, const Shape& dims) {
  Shape out;
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, t.dim());
    PF_CHECK(std::find(out.begin(), out.end(), w) == out.end(), "dim ", w, " appears multiple times in the list of dims");
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

Tensor flip(const Tensor& t, const Shape& dims_in) {
  Shape dims = unique_dims(t, dims_in);
  if (t.dim() == 0) dims.clear();  // flipping a 0-d tensor's only "dim" is the identity
  // Dims of size <= 1 are unchanged by a flip.
  dims.erase(std::remove_if(dims.begin(), dims.end(), [&](int64_t d) { return t.sizes()[d] <= 1; }), dims.end());
  if (dims.empty() || t.numel() == 0) {
    Tensor out = clone(t);
    return out;
  }
  static const OpDef& op = op_named("flip");
  const Tensor in[] = {t};
  Tensor out = call_op(op, in, Attrs{{"dims", dims}})[0];
  if (records(out, {&t})) {
    auto node = autograd::make_node("FlipBackward0", [dims](const Tensors& g, const Tensors&) -> Tensors {
      return {flip(g[0], dims)};
    });
    autograd::record(node, {t}, {out});
  }
  return out;
}

Tensor roll(const Tensor& t, const Shape& shifts, const Shape& dims_in) {
  PF_CHECK(!shifts.empty(), "`shifts` required");
  if (dims_in.empty() && shifts.size() == 1) {
    if (t.dim() == 0) return clone(t);
    return view(roll(flatten(t), shifts, {0}), t.sizes());
  }
  PF_CHECK(shifts.size() == dims_in.size(), "shifts and dimensions must align. shifts: ", shifts.size(),
           ", dims:", dims_in.size());
  // Net shift per dim (a dim named twice rolls twice).
  Shape shift(t.dim(), 0);
  for (size_t i = 0; i < dims_in.size(); ++i) {
    const int64_t d = wrap_dim_no_scalar(dims_in[i], t.dim());
    const int64_t n = t.sizes()[d];
    if (n > 0) shift[d] = ((shift[d] + shifts[i]) % n + n) % n;
  }
  Shape rolled;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (shift[d] != 0) rolled.push_back(d);
  if (rolled.empty() || t.numel() == 0) return clone(t);
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), t.device());
  {
    autograd::GradModeGuard no_grad(false);
    // Each rolled dim splits into two blocks: [0, n-s) goes to [s, n) and [n-s, n) to [0, s).
    const size_t k = rolled.size();
    for (uint64_t combo = 0; combo < (uint64_t{1} << k); ++combo) {
      Tensor src = t, dst = out;
      for (size_t i = 0; i < k; ++i) {
        const int64_t d = rolled[i], n = t.sizes()[d], s = shift[d];
        if ((combo >> i) & 1u) {
          src = narrow(src, d, n - s, s);
          dst = narrow(dst, d, 0, s);
        } else {
          src = narrow(src, d, 0, n - s);
          dst = narrow(dst, d, s, n - s);
        }
      }
      copy_(dst, src);
    }
  }
  if (records(out, {&t})) {
    Shape back_shifts, back_dims;
    for (int64_t d : rolled) {
      back_shifts.push_back(-shift[d]);
      back_dims.push_back(d);
    }
    auto node = autograd::make_node("RollBackward0", [back_shifts, back_dims](const Tensors& g, const Tensors&) -> Tensors {
      return {roll(g[0], back_shifts, back_dims)};
    });
    autograd::record(node, {t}, {out});
  }
  return out;
}

// ============================================================================================
// repeat, tile, repeat_interleave
// ============================================================================================

Tensor repeat(const Tensor& t, const Shape& repeats) {
  PF_CHECK(static_cast<int64_t>(repeats.size()) >= t.dim(),
           "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor");
  const size_t lead = repeats.size() - static_cast<size_t>(t.dim());
  Shape padded(lead, 1);
  padded.insert(padded.end(), t.sizes().begin(), t.sizes().end());
  Shape target(repeats.size());
  for (size_t i = 0; i < repeats.size(); ++i) target[i] = checked_size_mul(repeats[i], padded[i], "repeat");
  for (int64_t s : target)
    PF_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", shape_str(target));
  // Each dim of size s becomes a (r, s) pair: a broadcast repeat dim and the data dim, which
  // one reshape turns into r * s rows (a copy, since the repeat dim has stride 0).
  Shape interleaved, expanded;
  for (size_t i = 0; i < repeats.size(); ++i) {
    interleaved.insert(interleaved.end(), {1, padded[i]});
    expanded.insert(expanded.end(), {repeats[i], padded[i]});
  }
  Tensor r = reshape(expand(reshape(t, interleaved), expanded), target);
  // A result that is still a view (every repeat 1) must not alias the input.
  return r.storage() == t.storage() ? clone(r) : r;
}

Tensor tile(const Tensor& t, const Shape& reps) {
  Shape r = reps;
  if (static_cast<int64_t>(r.size()) < t.dim()) r.insert(r.begin(), t.dim() - static_cast<int64_t>(r.size()), 1);
  return repeat(t, r);
}

Tensor repeat_interleave(const Tensor& t, int64_t repeats, std::optional<int64_t> dim) {
  const int64_t d = dim ? wrap_dim_no_scalar(*dim, t.dim()) : 0;
  PF_CHECK(repeats >= 0, "repeats can not be negative");
  const Tensor x = dim ? t : flatten(t);
  if (x.dim() == 0) return repeat_interleave(reshape(x, {1}), repeats, 0);
  Shape expanded = x.sizes();
  expanded.insert(expanded.begin() + d + 1, repeats);
  Shape target = x.sizes();
  target[d] *= repeats;
  Tensor r = reshape(expand(unsqueeze(x, d + 1), expanded), target);
  return r.storage() == x.storage() ? clone(r) : r;
}

namespace {
// Index i repeated reps[i] times, as an int64 tensor on `device`.
Tensor repeat_index(const Tensor& repeats, Device device) {
  graph::check_host_read("repeat_interleave with a tensor of repeats");
  const Tensor reps = contiguous(to(repeats, kCpu, DType::Int64));
  const int64_t* r = reps.data<int64_t>();
  int64_t total = 0;
  for (int64_t i = 0; i < reps.numel(); ++i) {
    PF_CHECK(r[i] >= 0, "repeats can not be negative");
    total = checked_size_add(total, r[i], "repeat_interleave");
  }
  Tensor idx = Tensor::empty({total}, DType::Int64, kCpu);
  int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0, k = 0; i < reps.numel(); ++i)
    for (int64_t j = 0; j < r[i]; ++j) p[k++] = i;
  return to(idx, device, std::nullopt);
}
}  // namespace

Tensor repeat_interleave(const Tensor& repeats) {
  PF_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  PF_CHECK(!is_floating(repeats.dtype()) && repeats.dtype() != DType::Bool,
           "repeats has to be Long or Int tensor");
  return repeat_index(repeats, repeats.device());
}

Tensor repeat_interleave(const Tensor& t, const Tensor& repeats, std::optional<int64_t> dim) {
  PF_CHECK(repeats.dim() <= 1, "repeats must be 0-dim or 1-dim tensor");
  PF_CHECK(!is_floating(repeats.dtype()) && repeats.dtype() != DType::Bool, "repeats has to be Long or Int tensor");
  const int64_t d = dim ? wrap_dim_no_scalar(*dim, t.dim()) : 0;
  const Tensor x = dim ? t : flatten(t);
  if (repeats.numel() == 1) return repeat_interleave(t, item_int(repeats), dim);
  PF_CHECK(repeats.numel() == x.sizes()[d], "repeats must have the same size as input along dim");
  const Tensor idx = repeat_index(repeats, x.device());
  Shape view_shape(x.dim(), 1), target = x.sizes();
  view_shape[d] = idx.numel();
  target[d] = idx.numel();
  return take_along_dim_internal(x, d, expand(reshape(idx, view_shape), target));
}

// ============================================================================================
// movedim, unflatten, meshgrid
// ============================================================================================

Tensor movedim(const Tensor& t, const Shape& source, const Shape& destination) {
  PF_CHECK(source.size() == destination.size(), "movedim: Invalid source or destination dims: source (",
           shape_str(source), " dims) should contain the same number of dims as destination (",
           shape_str(destination), " dims)");
  const int64_t n = t.dim();
  Shape src, dst;
  for (int64_t d : source) src.push_back(wrap_dim(d, n));
  for (int64_t d : destination) dst.push_back(wrap_dim(d, n));
  auto has_dup = [](Shape s) {
    std::sort(s.begin(), s.end());
    return std::adjacent_find(s.begin(), s.end()) != s.end();
  };
  PF_CHECK(!has_dup(src), "movedim: repeated dim in `source` (", shape_str(source), ")");
  PF_CHECK(!has_dup(dst), "movedim: repeated dim in `destination` (", shape_str(destination), ")");
  if (n == 0) return view(t, t.sizes());
  Shape order(n, -1);
  std::vector<bool> used(n, false);
  for (size_t i = 0; i < src.size(); ++i) {
    order[dst[i]] = src[i];
    used[src[i]] = true;
  }
  int64_t next = 0;
  for (int64_t d = 0; d < n; ++d) {
    if (order[d] != -1) continue;
    while (used[next]) ++next;
    order[d] = next++;
  }
  return permute(t, order);
}

Tensor unflatten(const Tensor& t, int64_t dim, const Shape& sizes) {
  const int64_t d = wrap_dim_no_scalar(dim, t.dim());
  PF_CHECK(!sizes.empty(), "unflatten: sizes must be non-empty");
  const int64_t n = t.sizes()[d];
  Shape inferred = sizes;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      PF_CHECK(infer < 0, "only one dimension can be inferred");
      infer = static_cast<int64_t>(i);
    } else {
      known *= sizes[i];
    }
  }
  if (infer >= 0 && known != 0 && n % known == 0) inferred[infer] = n / known;
  PF_CHECK(shape_numel(inferred) == n && (infer < 0 || (known != 0 && n % known == 0)), "unflatten: Provided sizes ",
           shape_str(sizes), " don't multiply up to the size of dim ", d, " (", n, ") in the input tensor");
  Shape shape(t.sizes().begin(), t.sizes().begin() + d);
  shape.insert(shape.end(), inferred.begin(), inferred.end());
  shape.insert(shape.end(), t.sizes().begin() + d + 1, t.sizes().end());
  return view(t, shape);
}

std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing) {
  PF_CHECK(!tensors.empty(), "meshgrid expects a non-empty TensorList");
  for (size_t i = 0; i + 1 < tensors.size(); ++i) {
    PF_CHECK(tensors[i].dtype() == tensors[i + 1].dtype(), "meshgrid expects all tensors to have the same dtype");
    PF_CHECK(tensors[i].device() == tensors[i + 1].device(), "meshgrid expects all tensors to have the same device");
  }
  PF_CHECK(indexing == "xy" || indexing == "ij",
           "torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: ", indexing);
  const bool swap = indexing == "xy" && tensors.size() >= 2;
  for (const Tensor& t : tensors)
    PF_CHECK(t.dim() <= 1, "torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: ",
             torch_tensor_str(t));
  const size_t n = tensors.size();
  Shape shape(n);
  for (size_t i = 0; i < n; ++i) shape[i] = tensors[i].numel();
  if (swap) std::swap(shape[0], shape[1]);
  std::vector<Tensor> out;
  for (size_t i = 0; i < n; ++i) {
    size_t pos = i;
    if (swap && i < 2) pos = 1 - i;
    Shape vs(n, 1);
    vs[pos] = -1;
    out.push_back(expand(reshape(tensors[i], vs), shape));
  }
  return out;
}

// ============================================================================================
// tril, triu
// ============================================================================================

namespace {
Tensor triangle(const char* name, const char* backward_name, const Tensor& t, int64_t diagonal) {
  wrap_dim(-2, t.dim());  // PyTorch's message for inputs with fewer than 2 dims
  if (t.numel() == 0) return clone(t);
  const OpDef& op = op_named(name);
  const Tensor in[] = {t};
  Tensor out = call_op(op, in, Attrs{{"diagonal", diagonal}})[0];
  if (records(out, {&t})) {
    const bool lower = std::string(name) == "tril";
    auto node = autograd::make_node(backward_name, [lower, diagonal](const Tensors& g, const Tensors&) -> Tensors {
      return {lower ? tril(g[0], diagonal) : triu(g[0], diagonal)};
    });
    autograd::record(node, {t}, {out});
  }
  return out;
}
}  // namespace

Tensor tril(const Tensor& t, int64_t diagonal) { return triangle("tril", "TrilBackward0", t, diagonal); }
Tensor triu(const Tensor& t, int64_t diagonal) { return triangle("triu", "TriuBackward0", t, diagonal); }

// ============================================================================================
// gather / scatter-add along a dim (internal; the backward of sort, topk and padding)
// ============================================================================================

Tensor take_along_dim_internal(const Tensor& t, int64_t dim, const Tensor& index) {
  static const OpDef& op = op_named("_take_along_dim");
  Tensor out;
  if (index.numel() == 0) {
    out = Tensor::empty(index.sizes(), t.dtype(), t.device());
  } else {
    const Tensor in[] = {t, index};
    out = call_op(op, in, Attrs{{"dim", dim}})[0];
  }
  if (records(out, {&t})) {
    auto node = autograd::make_node("GatherBackward0", [dim, shape = t.sizes()](const Tensors& g, const Tensors& s) -> Tensors {
      return {scatter_add_internal(g[0], dim, s[0], shape), Tensor()};
    });
    node->save(index);
    autograd::record(node, {t, index}, {out});
  }
  return out;
}

Tensor scatter_add_internal(const Tensor& src, int64_t dim, const Tensor& index, const Shape& sizes) {
  static const OpDef& op = op_named("_scatter_add_along_dim");
  Tensor out;
  if (index.numel() == 0) {
    out = zeros(sizes, src.dtype(), src.device());
  } else {
    const Tensor in[] = {src, index};
    out = call_op(op, in, Attrs{{"dim", dim}, {"size", sizes}})[0];
  }
  if (records(out, {&src})) {
    auto node = autograd::make_node("ScatterAddBackward0", [dim](const Tensors& g, const Tensors& s) -> Tensors {
      return {take_along_dim_internal(g[0], dim, s[0]), Tensor()};
    });
    node->save(index);
    autograd::record(node, {src, index}, {out});
  }
  return out;
}

// ============================================================================================
// sort, argsort, topk
// ============================================================================================

namespace {
void record_select_values(const char* name, const Tensor& a, const Tensor& values, const Tensor& indices,
                          int64_t dim) {
  if (!records(values, {&a})) return;
  auto node = autograd::make_node(name, [dim, shape = a.sizes()](const Tensors& g, const Tensors& s) -> Tensors {
    if (shape.empty()) return {reshape(g[0], shape)};
    return {scatter_add_internal(g[0], dim, s[0], shape)};
  });
  node->save(indices);
  autograd::record(node, {a}, {values, indices});
}
}  // namespace

std::pair<Tensor, Tensor> sort(const Tensor& t, int64_t dim, bool descending, bool stable) {
  static const OpDef& op = op_named("sort");
  const int64_t d = wrap_dim(dim, t.dim());
  const Tensor a = t.dim() == 0 ? reshape(t, {1}) : t;
  const Tensor in[] = {a};
  auto outs = call_op(op, in, Attrs{{"dim", t.dim() == 0 ? int64_t{0} : d}, {"descending", descending},
                                    {"stable", stable}});
  Tensor values = outs[0], indices = outs[1];
  if (t.dim() == 0) {
    autograd::GradModeGuard no_grad(false);
    values = reshape(values, {});
    indices = reshape(indices, {});
  }
  record_select_values("SortBackward0", t, values, indices, d);
  return {values, indices};
}

Tensor argsort(const Tensor& t, int64_t dim, bool descending, bool stable) {
  autograd::GradModeGuard no_grad(false);
  return sort(t, dim, descending, stable).second;
}

std::pair<Tensor, Tensor> topk(const Tensor& t, int64_t k, int64_t dim, bool largest, bool sorted) {
  static const OpDef& op = op_named("topk");
  const int64_t d = wrap_dim(dim, t.dim());
  const int64_t n = t.dim() == 0 ? 1 : t.sizes()[d];
  PF_CHECK(k >= 0 && k <= n, "selected index k out of range");
  PF_CHECK(t.dtype() != DType::Bool, "\"topk_cpu\" not implemented for 'Bool'");
  const Tensor a = t.dim() == 0 ? reshape(t, {1}) : t;
  const Tensor in[] = {a};
  // A 0-d input gives its element for k = 0 too, as PyTorch does.
  auto outs = call_op(op, in, Attrs{{"k", t.dim() == 0 ? int64_t{1} : k}, {"dim", t.dim() == 0 ? int64_t{0} : d},
                                    {"largest", largest}, {"sorted", sorted}});
  Tensor values = outs[0], indices = outs[1];
  if (t.dim() == 0) {
    autograd::GradModeGuard no_grad(false);
    values = reshape(values, {});
    indices = reshape(indices, {});
  }
  record_select_values("TopkBackward0", t, values, indices, d);
  return {values, indices};
}

// ============================================================================================
// unique
// ============================================================================================

namespace {
UniqueResult unique_impl(const Tensor& t, bool consecutive, std::optional<int64_t> dim_opt) {
  static const OpDef& op = op_named("unique");
  autograd::GradModeGuard no_grad(false);  // not differentiable
  UniqueResult r;
  if (!dim_opt) {
    const int64_t n = t.numel();
    if (n == 0) {
      r.values = Tensor::empty({0}, t.dtype(), t.device());
      r.inverse = Tensor::empty(t.sizes(), DType::Int64, t.device());
      r.counts = Tensor::empty({0}, DType::Int64, t.device());
      return r;
    }
    const Tensor in[] = {contiguous(reshape(t, {n, 1}))};
    auto outs = call_op(op, in, Attrs{{"consecutive", consecutive}});
    const int64_t k = item_int(outs[3]);
    r.values = clone(reshape(narrow(outs[0], 0, 0, k), {k}));
    r.inverse = reshape(outs[1], t.sizes());
    r.counts = clone(narrow(outs[2], 0, 0, k));
    return r;
  }
  const int64_t d = wrap_dim_no_scalar(*dim_opt, t.dim());
  const int64_t n = t.sizes()[d];
  PF_CHECK(!(t.numel() == 0 && n != 0),
           "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied");
  PF_CHECK(std::count(t.sizes().begin(), t.sizes().end(), 0) <= 1,
           "Number of zero sized dimensions is more than one, so unique cannot be applied ");
  if (n == 0) {
    r.values = clone(t);
    r.inverse = Tensor::empty({0}, DType::Int64, t.device());
    r.counts = Tensor::empty({0}, DType::Int64, t.device());
    return r;
  }
  const Tensor moved = movedim(t, {d}, {0});
  const int64_t m = t.numel() / n;
  const Tensor in[] = {contiguous(reshape(moved, {n, m}))};
  auto outs = call_op(op, in, Attrs{{"consecutive", consecutive}});
  const int64_t k = item_int(outs[3]);
  Shape moved_shape = moved.sizes();
  moved_shape[0] = k;
  r.values = contiguous(movedim(reshape(narrow(outs[0], 0, 0, k), moved_shape), {0}, {d}));
  r.inverse = outs[1];
  r.counts = clone(narrow(outs[2], 0, 0, k));
  return r;
}
}  // namespace

UniqueResult unique(const Tensor& t, bool /*sorted*/, std::optional<int64_t> dim) { return unique_impl(t, false, dim); }
UniqueResult unique_consecutive(const Tensor& t, std::optional<int64_t> dim) { return unique_impl(t, true, dim); }

// ============================================================================================
// pad
// ============================================================================================

Tensor constant_pad_nd(const Tensor& t, const Shape& pad, Scalar value) {
  PF_CHECK(pad.size() % 2 == 0, "Length of pad must be even but instead it equals ", pad.size());
  const int64_t npad = static_cast<int64_t>(pad.size()) / 2;
  PF_CHECK(npad <= t.dim(), "Length of pad should be no more than twice the number of dimensions of the input. Pad "
           "length is ", pad.size(), " while the input has ", t.dim(), " dimensions.");
  // Negative pads crop first (PyTorch narrows in this order, with narrow's messages).
  Tensor src = t;
  Shape out_shape = t.sizes();
  bool any_positive = false;
  for (int64_t i = 0; i < npad; ++i) {
    const int64_t d = t.dim() - 1 - i;
    const int64_t before = pad[2 * i], after = pad[2 * i + 1];
    PF_CHECK(before != std::numeric_limits<int64_t>::min(), "pad: padding ", before, " out of range");
    if (before < 0) src = narrow(src, d, -before, src.sizes()[d] + before);
    if (after < 0) src = narrow(src, d, 0, src.sizes()[d] + after);
    out_shape[d] = checked_size_add(checked_size_add(src.sizes()[d], std::max<int64_t>(before, 0), "pad"),
                                    std::max<int64_t>(after, 0), "pad");
    any_positive = any_positive || before > 0 || after > 0;
  }
  if (!any_positive) return clone(src);
  // With some padding to add, PyTorch requires every padded dim to come out non-empty.
  for (int64_t d = t.dim() - npad; d < t.dim(); ++d) {
    const int64_t i = t.dim() - 1 - d;
    PF_CHECK(out_shape[d] > 0, "The input size ", t.sizes()[d], ", plus negative padding ", pad[2 * i], " and ",
             pad[2 * i + 1], " resulted in a negative output size, which is invalid. Check dimension ", d,
             " of your input.");
  }
  Tensor out = full(out_shape, value, t.dtype(), t.device());
  {
    autograd::GradModeGuard no_grad(false);
    Tensor region = out;
    for (int64_t i = 0; i < npad; ++i) {
      const int64_t d = t.dim() - 1 - i;
      region = narrow(region, d, std::max<int64_t>(pad[2 * i], 0), src.sizes()[d]);
    }
    if (src.numel() > 0) copy_(region, src);
  }
  if (records(out, {&t})) {
    Shape back(pad.size());
    for (size_t i = 0; i < pad.size(); ++i) back[i] = -pad[i];
    auto node = autograd::make_node("ConstantPadNdBackward0", [back](const Tensors& g, const Tensors&) -> Tensors {
      return {constant_pad_nd(g[0], back, Scalar(int64_t{0}))};
    });
    autograd::record(node, {t}, {out});
  }
  return out;
}

namespace {

// Source index of output position j along a dim of input size n (the pad kernel's maps).
int64_t pad_source(const std::string& mode, int64_t j, int64_t before, int64_t n) {
  int64_t s = j - before;
  if (mode == "reflect") {
    if (s < 0) s = -s;
    if (s >= n) s = 2 * (n - 1) - s;
  } else if (mode == "replicate") {
    s = std::clamp<int64_t>(s, 0, n - 1);
  } else {
    s = ((s % n) + n) % n;
  }
  return s;
}

// Backward of a reflect/replicate/circular pad: per padded dim (last first), add each output
// position's gradient into its source position, with an expanded (stride-0) index.
Tensor pad_backward(const Tensor& g, const Shape& in_shape, const Shape& pads, const std::string& mode) {
  Tensor r = g;
  for (int64_t d = static_cast<int64_t>(in_shape.size()) - 1; d >= 0; --d) {
    const int64_t before = pads[2 * d], after = pads[2 * d + 1];
    if (before == 0 && after == 0) continue;
    const int64_t n = in_shape[d], m = r.sizes()[d];
    Tensor idx = Tensor::empty({m}, DType::Int64, kCpu);
    for (int64_t j = 0; j < m; ++j) idx.data<int64_t>()[j] = pad_source(mode, j, before, n);
    Shape vs(r.dim(), 1);
    vs[d] = m;
    Shape target = r.sizes();
    target[d] = n;
    const Tensor index = expand(reshape(to(idx, r.device(), std::nullopt), vs), r.sizes());
    r = scatter_add_internal(r, d, index, target);
  }
  return r;
}

Tensor pad_with_kernel(const Tensor& t, const Shape& torch_pad, const std::string& mode) {
  static const OpDef& op = op_named("pad");
  // torch's pad list runs from the last dim backwards; the kernel's runs over dims in order.
  Shape pads(2 * t.dim(), 0);
  const int64_t npad = static_cast<int64_t>(torch_pad.size()) / 2;
  for (int64_t i = 0; i < npad; ++i) {
    const int64_t d = t.dim() - 1 - i;
    pads[2 * d] = torch_pad[2 * i];
    pads[2 * d + 1] = torch_pad[2 * i + 1];
  }
  Shape out_shape = t.sizes();
  for (int64_t d = 0; d < t.dim(); ++d) out_shape[d] += pads[2 * d] + pads[2 * d + 1];
  Tensor out;
  if (shape_numel(out_shape) == 0) {
    out = Tensor::empty(out_shape, t.dtype(), t.device());
  } else {
    const Tensor in[] = {t};
    out = call_op(op, in, Attrs{{"pads", pads}, {"mode", mode}})[0];
  }
  if (records(out, {&t})) {
    const char* name = mode == "reflect" ? (npad == 1 ? "ReflectionPad1DBackward0" : npad == 2 ? "ReflectionPad2DBackward0" : "ReflectionPad3DBackward0")
                       : mode == "replicate" ? (npad == 1 ? "ReplicationPad1DBackward0" : npad == 2 ? "ReplicationPad2DBackward0" : "ReplicationPad3DBackward0")
                                             : "PadCircularBackward0";
    auto node = autograd::make_node(name, [shape = t.sizes(), pads, mode](const Tensors& g, const Tensors&) -> Tensors {
      return {pad_backward(g[0], shape, pads, mode)};
    });
    autograd::record(node, {t}, {out});
  }
  return out;
}

}  // namespace

Tensor pad(const Tensor& t, const Shape& pad_arg, const std::string& mode, std::optional<double> value) {
  if (autocast::active() && (mode == "reflect" || mode == "replicate")) [[unlikely]]
    if (autocast::OpScope cast{mode == "reflect" ? "reflection_pad" : "replication_pad", {t}})
      return pad(cast[0], pad_arg, mode, value);
  PF_CHECK_T(mode == "constant" || mode == "reflect" || mode == "replicate" || mode == "circular",
             NotImplementedError, "Unrecognised padding mode ", mode);
  PF_CHECK(pad_arg.size() % 2 == 0, "Padding length must be divisible by 2");
  PF_CHECK(static_cast<int64_t>(pad_arg.size()) <= t.dim() * 2, "Padding length too large");
  if (mode == "constant") {
    const double v = value.value_or(0.0);
    // The value is a float (as in PyTorch: -1 into uint8 raises, like fill_(-1.0)); an integral
    // one then stays exact for integer tensors. Only a pad that adds elements stores it (a
    // crop-only pad takes any value, as PyTorch).
    if (std::any_of(pad_arg.begin(), pad_arg.end(), [](int64_t p) { return p > 0; }))
      check_scalar_fits(Scalar(v), t.dtype());
    const Scalar s = std::abs(v) < 9e15 && v == std::trunc(v) ? Scalar(static_cast<int64_t>(v)) : Scalar(v);
    return constant_pad_nd(t, pad_arg, s);
  }
  PF_CHECK(!value || *value == 0.0, "Padding mode \"", mode, "\" doesn't take in value argument");
  const int64_t npad = static_cast<int64_t>(pad_arg.size()) / 2;
  const int64_t ndim = t.dim();
  PF_CHECK_T(npad >= 1 && npad <= 3 && (ndim == npad + 1 || ndim == npad + 2), NotImplementedError,
             "Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now");
  if (mode == "circular") {
    PF_CHECK(static_cast<int64_t>(pad_arg.size()) + 4 == ndim * 2, "Invalid padding size, expected ", (ndim - 2) * 2,
             " but got ", pad_arg.size());
    // Negative pads crop first; positive ones then wrap around what is left (PyTorch's order).
    Tensor src = t;
    Shape positive(pad_arg.size());
    for (int64_t i = 0; i < npad; ++i) {
      const int64_t d = ndim - 1 - i, n = t.sizes()[d];
      const int64_t before = pad_arg[2 * i], after = pad_arg[2 * i + 1];
      PF_CHECK(before <= n && after <= n, "Padding value causes wrapping around more than once.");
      PF_CHECK(n + before + after >= 0, "Negative padding value is resulting in an empty dimension");
      if (before < 0) src = narrow(src, d, -before, src.sizes()[d] + before);
      if (after < 0) src = narrow(src, d, 0, src.sizes()[d] + after);
      positive[2 * i] = std::max<int64_t>(before, 0);
      positive[2 * i + 1] = std::max<int64_t>(after, 0);
      PF_CHECK(src.sizes()[d] > 0 || positive[2 * i] + positive[2 * i + 1] == 0,
               "Padding value causes wrapping around more than once.");
    }
    return pad_with_kernel(src, positive, mode);
  }
  const bool reflect = mode == "reflect";
  PF_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::Float64, "\"",
           reflect ? "reflection_pad" : "replication_pad", npad, "d", reflect ? "" : "_cpu", "\" not implemented for '",
           scalar_type_name(t.dtype()), "'");
  // Every dim but the batch dim must be non-empty.
  bool non_empty = true;
  for (int64_t d = ndim == npad + 2 ? 1 : 0; d < ndim; ++d) non_empty = non_empty && t.sizes()[d] != 0;
  if (reflect)
    PF_CHECK(non_empty, npad + 1, "D or ", npad + 2, "D (batch mode) tensor expected for input, but got: ",
             torch_tensor_str(t));
  else
    PF_CHECK(non_empty, "Expected ", npad + 1, "D or ", npad + 2,
             "D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: ",
             shape_str(t.sizes()));
  static const char* kDimNames[] = {"W", "H", "D"};
  // PyTorch's rule: some padded dim keeps at least one element (an output of width 0 beside
  // height 5 is a valid empty result), none goes negative.
  bool some_output = false;
  std::string inputs, outputs;
  for (int64_t i = npad - 1; i >= 0; --i) {
    const int64_t d = ndim - 1 - i, n = t.sizes()[d];
    const int64_t before = pad_arg[2 * i], after = pad_arg[2 * i + 1];
    if (reflect)
      PF_CHECK(before < n && after < n, "Argument #", 4 + 2 * i,
               ": Padding size should be less than the corresponding input dimension, but got: padding (", before,
               ", ", after, ") at dimension ", d, " of input ", shape_str(t.sizes()));
    some_output = some_output || n + before + after >= 1;
    inputs += std::string(i + 1 < npad ? ", " : "") + kDimNames[i] + ": " + std::to_string(n);
    outputs += std::string(i + 1 < npad ? " " : "") + kDimNames[i] + ": " + std::to_string(n + before + after);
  }
  PF_CHECK(some_output, "input (", inputs, ") is too small. Calculated output ", outputs);
  for (int64_t i = 0; i < npad; ++i) {
    const int64_t n = t.sizes()[ndim - 1 - i], size = n + pad_arg[2 * i] + pad_arg[2 * i + 1];
    PF_CHECK(size >= 0, "Trying to create tensor with negative dimension ", size);
  }
  return pad_with_kernel(t, pad_arg, mode);
}

// ============================================================================================
// one_hot
// ============================================================================================

Tensor one_hot(const Tensor& t, int64_t num_classes) {
  PF_CHECK(t.dtype() == DType::Int64, "one_hot is only applicable to index tensor.");
  Shape shape = t.sizes();
  if (t.numel() == 0) {
    PF_CHECK(num_classes > 0, "Can not infer total number of classes from empty tensor.");
    shape.push_back(num_classes);
    return Tensor::empty(shape, DType::Int64, t.device());
  }
  if (graph::capturing() && num_classes > 0) {
    // No host check in a static graph: scatter's kernel raises for a class out of range.
    shape.push_back(num_classes);
    return scatter(zeros(shape, DType::Int64, t.device()), -1, unsqueeze(t, -1), Scalar(int64_t{1}));
  }
  PF_CHECK(item_int(reduce("amin", t, {}, false)) >= 0, "Class values must be non-negative.");
  const int64_t max = item_int(reduce("amax", t, {}, false));
  if (num_classes == -1) num_classes = max + 1;
  else PF_CHECK(max < num_classes, "Class values must be smaller than num_classes.");
  const Tensor classes = arange(Scalar(int64_t{0}), Scalar(num_classes), Scalar(int64_t{1}), DType::Int64, t.device());
  return to(binary("eq", unsqueeze(t, -1), classes), std::nullopt, DType::Int64);
}

}  // namespace plugflow::ops
