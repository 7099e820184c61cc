// View ops: new metadata on the same storage, no kernels.
#include <algorithm>
#include <numeric>

#include "../autograd/grad_utils.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"
#include "plugflow/ops_indexing.h"

namespace plugflow::ops {
namespace {

using Tensors = std::vector<Tensor>;

// Registers `view` with autograd: as a view of `base` whenever grad mode is on (so a later
// in-place write through it, even of a tensor that requires grad, reaches the base's history),
// and with a backward node from `make_fn()` when the base requires grad.
template <typename MakeFn>
Tensor finish_view(const Tensor& base, Tensor view, const char* name, MakeFn&& make_fn) {
  if (!autograd::is_grad_enabled()) return view;
  if (autograd::requires_grad(base)) autograd::record_view(base, view, autograd::make_node(name, make_fn()));
  else autograd::record_view(base, view, nullptr);
  return view;
}

// Backward of views that only rearrange metadata: reshape the gradient back.
auto reshape_back(const Tensor& base) {
  return [&base] {
    return [shape = base.sizes()](const Tensors& g, const Tensors&) -> Tensors { return {reshape(g[0], shape)}; };
  };
}

// The storage position of each element of a (sizes, strides, offset) geometry, flattened.
Tensor storage_positions(const Shape& sizes, const Shape& strides, int64_t offset, Device dev) {
  Tensor pos = full({}, Scalar(offset), DType::Int64, dev);
  for (size_t d = 0; d < sizes.size(); ++d) {
    Shape along(sizes.size(), 1);
    along[d] = sizes[d];
    const Tensor index = arange(Scalar(int64_t{0}), Scalar(sizes[d]), Scalar(int64_t{1}), DType::Int64, dev);
    pos = binary("add", pos, reshape(binary("mul", index, Scalar(strides[d])), along));
  }
  return reshape(pos, {-1});
}

// Backward of as_strided, PyTorch's as_strided_backward: each view element's gradient adds
// into the storage location it reads (elements that share a location add up), and each base
// element takes its location's total, divided among the base elements sharing that location.
auto as_strided_back(const Tensor& base, const Tensor& view) {
  return [&base, &view] {
    return [sizes = base.sizes(), dtype = base.dtype(), dev = base.device(), bstrides = base.strides(),
            boff = base.offset(), vsizes = view.sizes(), vstrides = view.strides(),
            voff = view.offset()](const Tensors& g, const Tensors&) -> Tensors {
      // The last element either geometry touches (a view may reach past its base's extent).
      auto last = [](const Shape& sz, const Shape& st, int64_t off) {
        for (size_t d = 0; d < sz.size(); ++d) {
          if (sz[d] == 0) return off;
          off += (sz[d] - 1) * st[d];
        }
        return off;
      };
      const int64_t hi = std::max(last(sizes, bstrides, boff), last(vsizes, vstrides, voff));
      // Summed in double: a stride-0 view may put many gradients on one location.
      Tensor total = zeros({hi + 1}, DType::Float64, dev);
      index_add_(total, 0, storage_positions(vsizes, vstrides, voff, dev), to(reshape(g[0], {-1}), dev, DType::Float64),
                 Scalar(int64_t{1}));
      const Tensor base_pos = storage_positions(sizes, bstrides, boff, dev);
      Tensor count = zeros({hi + 1}, DType::Float64, dev);
      index_add_(count, 0, base_pos, ones({base_pos.numel()}, DType::Float64, dev), Scalar(int64_t{1}));
      total = where(binary("gt", count, Scalar(int64_t{1})), binary("div", total, count), total);
      return {to(reshape(index_select(total, 0, base_pos), sizes), dev, dtype)};
    };
  };
}

}  // namespace

int64_t wrap_dim(int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 / -1, like PyTorch
  PF_CHECK_T(dim >= -n && dim < n, IndexError, "Dimension out of range (expected to be in range of [", -n, ", ",
             n - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + n : dim;
}

int64_t wrap_dim_no_scalar(int64_t dim, int64_t ndim) {
  PF_CHECK_T(ndim > 0, IndexError, "Dimension specified as ", dim, " but tensor has no dimensions");
  return wrap_dim(dim, ndim);
}

Tensor as_strided(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset) {
  PF_CHECK_T(sizes.size() == strides.size(), ValueError, "as_strided: mismatch in length of strides and shape");
  for (size_t i = 0; i < sizes.size(); ++i) {
    PF_CHECK_T(sizes[i] >= 0, ValueError, "as_strided: negative size ", sizes[i]);
    PF_CHECK_T(strides[i] >= 0, ValueError, "as_strided: negative strides are not supported, got ", strides[i]);
  }
  PF_CHECK_T(offset >= 0, ValueError, "as_strided: negative storage offset ", offset);
  // view_of checks that the view stays inside the storage.
  Tensor v = Tensor::view_of(t.storage(), sizes, strides, offset, t.dtype());
  return finish_view(t, v, "AsStridedBackward0", as_strided_back(t, v));
}

// Infers one -1 in a requested shape. PyTorch's messages.
static Shape infer_size(const Shape& requested, int64_t numel) {
  Shape out = requested;
  int64_t known = 1;
  int infer = -1;
  bool overflow = false;  // the known sizes multiply past int64: never a valid shape (numel fits)
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      PF_CHECK(infer < 0, "only one dimension can be inferred");
      infer = static_cast<int>(i);
    } else {
      PF_CHECK(out[i] >= 0, "invalid shape dimension ", out[i]);
      overflow |= __builtin_mul_overflow(known, out[i], &known);
    }
  }
  if (overflow && std::find(out.begin(), out.end(), 0) == out.end())
    PF_THROW(Error, "shape '", shape_str(requested), "' is invalid for input of size ", numel);
  if (overflow) known = 0;
  if (infer >= 0) {
    PF_CHECK(known != 0 && numel % known == 0, "shape '", shape_str(requested), "' is invalid for input of size ",
             numel);
    out[infer] = numel / known;
  } else {
    PF_CHECK(known == numel, "shape '", shape_str(requested), "' is invalid for input of size ", numel);
  }
  return out;
}

// Strides for viewing (sizes, strides) as new_sizes without copying, if possible
// (PyTorch's computeStride): each chunk of old dims that is contiguous within itself maps to
// a run of new dims.
static bool view_strides(const Shape& old_sizes, const Shape& old_strides, const Shape& new_sizes, Shape& out) {
  out.assign(new_sizes.size(), 0);
  if (old_sizes.empty()) {
    std::fill(out.begin(), out.end(), 1);
    return true;
  }
  const int64_t numel = shape_numel(old_sizes);
  if (numel == 0) {
    out = contiguous_strides(new_sizes);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    if (d == 0 || (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Tensor view(const Tensor& t, const Shape& sizes) {
  const Shape shape = infer_size(sizes, t.numel());
  Shape strides;
  PF_CHECK(view_strides(t.sizes(), t.strides(), shape, strides),
           "view size is not compatible with input tensor's size and stride (at least one dimension spans across "
           "two contiguous subspaces). Use .reshape(...) instead.");
  return finish_view(t, Tensor::view_of(t.storage(), shape, strides, t.offset(), t.dtype()), "ViewBackward0",
                     reshape_back(t));
}

// The same memory read as another dtype (PyTorch's view(dtype)): a new element size rescales the
// last dim, which must be dense, and every other stride and the offset must convert exactly. Not
// differentiable (the result never requires grad, as in PyTorch).
Tensor view_dtype(const Tensor& t, DType dtype) {
  const int64_t old_size = itemsize(t.dtype()), new_size = itemsize(dtype);
  if (old_size == new_size) return Tensor::view_of(t.storage(), t.sizes(), t.strides(), t.offset(), dtype);
  const auto why = [&](auto&&... what) {
    return detail::str_cat(what..., " to view ", scalar_type_name(t.dtype()), " as ", scalar_type_name(dtype),
                          " (different element sizes)");
  };
  PF_CHECK(t.dim() > 0, why("self.dim() cannot be 0"));
  const int64_t last = t.dim() - 1;
  const auto check_dense_last = [&] {
    PF_CHECK(t.strides()[last] == 1, why("self.stride(-1) must be 1"), ", but got ", t.strides()[last]);
  };
  Shape sizes = t.sizes(), strides = t.strides();
  int64_t offset = t.offset();
  if (new_size > old_size) {  // (PyTorch's order of checks)
    const int64_t ratio = new_size / old_size;
    PF_CHECK(sizes[last] % ratio == 0, why("self.size(-1) must be divisible by ", ratio), ", but got ", sizes[last]);
    PF_CHECK(offset % ratio == 0, why("self.storage_offset() must be divisible by ", ratio), ", but got ", offset);
    check_dense_last();
    for (int64_t d = 0; d < last; ++d)
      PF_CHECK(strides[d] % ratio == 0, why("self.stride(", d, ") must be divisible by ", ratio), ", but got ",
               strides[d]);
    sizes[last] /= ratio;
    for (int64_t d = 0; d < last; ++d) strides[d] /= ratio;
    offset /= ratio;
  } else {
    check_dense_last();
    const int64_t ratio = old_size / new_size;
    sizes[last] *= ratio;
    for (int64_t d = 0; d < last; ++d) strides[d] *= ratio;
    offset *= ratio;
  }
  return Tensor::view_of(t.storage(), std::move(sizes), std::move(strides), offset, dtype);
}

Tensor reshape(const Tensor& t, const Shape& sizes) {
  const Shape shape = infer_size(sizes, t.numel());
  Shape strides;
  if (view_strides(t.sizes(), t.strides(), shape, strides))
    return finish_view(t, Tensor::view_of(t.storage(), shape, strides, t.offset(), t.dtype()), "ViewBackward0",
                       reshape_back(t));
  return view(contiguous(t), shape);
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  start_dim = wrap_dim(start_dim, t.dim());  // checked for a 0-d tensor too (dims 0 and -1)
  end_dim = wrap_dim(end_dim, t.dim());
  if (t.dim() == 0) return reshape(t, {1});
  PF_CHECK(start_dim <= end_dim, "flatten() has invalid args: start_dim cannot come after end_dim");
  if (start_dim == end_dim) return t;
  Shape shape(t.sizes().begin(), t.sizes().begin() + start_dim);
  int64_t n = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) n *= t.sizes()[d];
  shape.push_back(n);
  shape.insert(shape.end(), t.sizes().begin() + end_dim + 1, t.sizes().end());
  return reshape(t, shape);
}

Tensor permute(const Tensor& t, const Shape& dims) {
  PF_CHECK(static_cast<int64_t>(dims.size()) == t.dim(), "permute(sparse_coo): number of dimensions in the tensor input "
           "does not match the length of the desired ordering of dimensions i.e. input.dim() = ", t.dim(),
           " is not equal to len(dims) = ", dims.size());
  Shape sizes(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], t.dim());
    PF_CHECK(!seen[d], "permute(): duplicate dims are not allowed.");
    seen[d] = true;
    sizes[i] = t.sizes()[d];
    strides[i] = t.strides()[d];
  }
  return finish_view(t, Tensor::view_of(t.storage(), sizes, strides, t.offset(), t.dtype()), "PermuteBackward0", [&] {
    Shape inverse(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], t.dim())] = static_cast<int64_t>(i);
    return [inverse](const Tensors& g, const Tensors&) -> Tensors { return {permute(g[0], inverse)}; };
  });
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  if (t.dim() == 0) {
    wrap_dim(dim0, 0);
    wrap_dim(dim1, 0);
    return finish_view(t, Tensor::view_of(t.storage(), t.sizes(), t.strides(), t.offset(), t.dtype()),
                       "TransposeBackward0", reshape_back(t));
  }
  dim0 = wrap_dim(dim0, t.dim());
  dim1 = wrap_dim(dim1, t.dim());
  Shape sizes = t.sizes(), strides = t.strides();
  std::swap(sizes[dim0], sizes[dim1]);
  std::swap(strides[dim0], strides[dim1]);
  return finish_view(t, Tensor::view_of(t.storage(), sizes, strides, t.offset(), t.dtype()), "TransposeBackward0", [&] {
    return [dim0, dim1](const Tensors& g, const Tensors&) -> Tensors { return {transpose(g[0], dim0, dim1)}; };
  });
}

Tensor expand(const Tensor& t, const Shape& sizes) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  PF_CHECK(nd >= t.dim(), "expand(", shape_str(t.sizes()), ", size=", shape_str(sizes),
           "): the number of sizes provided (", nd, ") must be greater or equal to the number of dimensions in the "
           "tensor (", t.dim(), ")");
  Shape out_sizes(nd), out_strides(nd);
  for (int64_t i = nd - 1; i >= 0; --i) {
    const int64_t j = i - (nd - t.dim());  // matching input dim, or < 0 for a new leading dim
    const int64_t want = sizes[i];
    if (j < 0) {
      PF_CHECK(want >= 0, "The expanded size of the tensor (", want, ") isn't allowed in a leading, non-existing "
               "dimension ", i);
      out_sizes[i] = want;
      out_strides[i] = 0;
      continue;
    }
    const int64_t have = t.sizes()[j];
    if (want == -1 || want == have) {
      out_sizes[i] = have;
      out_strides[i] = t.strides()[j];
    } else {
      PF_CHECK(have == 1, "The expanded size of the tensor (", want, ") must match the existing size (", have,
               ") at non-singleton dimension ", i, ".  Target sizes: ", shape_str(sizes), ".  Tensor sizes: ",
               shape_str(t.sizes()));
      out_sizes[i] = want;
      out_strides[i] = 0;
    }
  }
  return finish_view(t, Tensor::view_of(t.storage(), out_sizes, out_strides, t.offset(), t.dtype()), "ExpandBackward0",
                     [&] {
                       return [shape = t.sizes()](const Tensors& g, const Tensors&) -> Tensors {
                         return {autograd::sum_to(g[0], shape)};
                       };
                     });
}

Tensor squeeze(const Tensor& t, std::optional<int64_t> dim) {
  Shape sizes, strides;
  if (dim) {
    const int64_t d = wrap_dim(*dim, t.dim());
    for (int64_t i = 0; i < t.dim(); ++i) {
      if (i == d && t.sizes()[i] == 1) continue;
      sizes.push_back(t.sizes()[i]);
      strides.push_back(t.strides()[i]);
    }
  } else {
    for (int64_t i = 0; i < t.dim(); ++i) {
      if (t.sizes()[i] == 1) continue;
      sizes.push_back(t.sizes()[i]);
      strides.push_back(t.strides()[i]);
    }
  }
  return finish_view(t, Tensor::view_of(t.storage(), sizes, strides, t.offset(), t.dtype()), "SqueezeBackward0",
                     reshape_back(t));
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  dim = wrap_dim(dim, t.dim() + 1);
  Shape sizes = t.sizes(), strides = t.strides();
  const int64_t new_stride = dim < t.dim() ? sizes[dim] * strides[dim] : 1;
  sizes.insert(sizes.begin() + dim, 1);
  strides.insert(strides.begin() + dim, new_stride);
  return finish_view(t, Tensor::view_of(t.storage(), sizes, strides, t.offset(), t.dtype()), "UnsqueezeBackward0",
                     reshape_back(t));
}

Tensor slice(const Tensor& t, int64_t dim, std::optional<int64_t> start_opt, std::optional<int64_t> end_opt,
             int64_t step) {
  PF_CHECK_T(t.dim() > 0, IndexError, "slice() cannot be applied to a 0-dim tensor.");
  dim = wrap_dim(dim, t.dim());
  PF_CHECK_T(step > 0, ValueError, "step must be greater than zero");
  const int64_t n = t.sizes()[dim];
  auto clamp_index = [n](int64_t i) {
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  const int64_t start = start_opt ? clamp_index(*start_opt) : 0;
  const int64_t end = std::max(start, end_opt ? clamp_index(*end_opt) : n);
  Shape sizes = t.sizes(), strides = t.strides();
  sizes[dim] = (end - start + step - 1) / step;
  strides[dim] *= step;
  Tensor v = Tensor::view_of(t.storage(), sizes, strides, t.offset() + start * t.strides()[dim], t.dtype());
  return finish_view(t, v, "SliceBackward0", [&] {
    return [shape = t.sizes(), dtype = t.dtype(), dev = t.device(), dim, start, end,
            step](const Tensors& g, const Tensors&) -> Tensors {
      Tensor gi = zeros(shape, dtype, dev);
      Tensor region = slice(gi, dim, start, end, step);
      copy_(region, g[0]);
      return {gi};
    };
  });
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  PF_CHECK_T(t.dim() > 0, IndexError, "select() cannot be applied to a 0-dim tensor.");
  dim = wrap_dim(dim, t.dim());
  const int64_t n = t.sizes()[dim];
  PF_CHECK_T(index >= -n && index < n, IndexError, "index ", index, " is out of bounds for dimension ", dim,
             " with size ", n);
  if (index < 0) index += n;
  Shape sizes = t.sizes(), strides = t.strides();
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  Tensor v = Tensor::view_of(t.storage(), sizes, strides, t.offset() + index * t.strides()[dim], t.dtype());
  return finish_view(t, v, "SelectBackward0", [&] {
    return [shape = t.sizes(), dtype = t.dtype(), dev = t.device(), dim, index](const Tensors& g,
                                                                                const Tensors&) -> Tensors {
      Tensor gi = zeros(shape, dtype, dev);
      Tensor region = select(gi, dim, index);
      copy_(region, g[0]);
      return {gi};
    };
  });
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  PF_CHECK_T(t.dim() > 0, IndexError, "narrow() cannot be applied to a 0-dim tensor.");
  dim = wrap_dim(dim, t.dim());
  const int64_t n = t.sizes()[dim];
  PF_CHECK_T(start >= -n && start <= n, IndexError, "start out of range (expected to be in range of [", -n, ", ", n,
             "], but got ", start, ")");
  if (start < 0) start += n;
  PF_CHECK(length >= 0 && start + length <= n, "start (", start, ") + length (", length,
           ") exceeds dimension size (", n, ").");
  return slice(t, dim, start, start + length, 1);
}

}  // namespace plugflow::ops
