#include "plugflow/tensor.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "plugflow/error.h"
#include "plugflow/graph.h"

namespace plugflow {

Storage::Storage(Device device, size_t nbytes) : nbytes_(nbytes), device_(device) {
  if (device_.index < 0) device_.index = 0;
  backend_ = &device_backend(device_);
  if (graph::internal::active()) {
    virtual_ = true;
    graph::internal::note_storage(this);
    return;
  }
  data_ = backend_->allocate(device_.index, nbytes);
}

Storage::Storage(Device device, void* data, size_t nbytes, std::shared_ptr<void> owner)
    : data_(data), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {
  if (device_.index < 0) device_.index = 0;
  if (graph::internal::active()) graph::internal::note_storage(this);
}

void* Storage::materialize() const {
  PF_CHECK(graph::internal::active(), "this tensor was created while an nn.Graph was capturing its build() and "
           "holds no data: use the graph's outputs, not tensors kept from inside build()");
  // Host code writes it during capture (torch.tensor([...]) in build): it becomes a constant.
  data_ = backend_->allocate(device_.index, nbytes_);
  return data_;
}

Storage::~Storage() {
  if (backend_ != nullptr && data_ != nullptr) backend_->deallocate(device_.index, data_, nbytes_);
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    // Saturates: a stride is only used with the sizes, whose product shape_numel checks.
    if (__builtin_mul_overflow(s, std::max<int64_t>(sizes[i], 1), &s)) s = std::numeric_limits<int64_t>::max();
  }
  return strides;
}

int64_t checked_size_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  PF_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": integer multiplication overflow");
  return r;
}

int64_t checked_size_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  PF_CHECK(!__builtin_add_overflow(a, b, &r), what, ": integer addition overflow");
  return r;
}

int64_t shape_numel(const Shape& sizes) {
  // The non-zero sizes must multiply within int64 even when another size is 0: kernels and
  // views multiply sub-shapes of empty tensors too (PyTorch refuses such a shape as a view,
  // though its zeros() takes it).
  int64_t n = 1;
  bool empty = false;
  for (int64_t s : sizes) {
    PF_CHECK(s >= 0, "numel: negative size ", s, " in ", shape_str(sizes));
    if (s == 0) empty = true;
    else PF_CHECK(!__builtin_mul_overflow(n, s, &n), "numel: integer multiplication overflow with sizes=",
                  shape_str(sizes));
  }
  return empty ? 0 : n;
}

size_t storage_nbytes(const Shape& sizes, DType dtype) {
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) {
    shape_numel(sizes);  // no bytes, but the other sizes must still multiply within int64
    return 0;
  }
  int64_t nbytes = static_cast<int64_t>(itemsize(dtype));
  bool ok = true;
  for (int64_t s : sizes) ok = ok && s > 0 && !__builtin_mul_overflow(nbytes, s, &nbytes);
  PF_CHECK(ok, "Storage size calculation overflowed with sizes=", shape_str(sizes));
  return static_cast<size_t>(nbytes);
}

void check_view(const Shape& sizes, const Shape& strides, int64_t offset, size_t itemsize, size_t storage_nbytes) {
  PF_CHECK(sizes.size() == strides.size(), "mismatch in length of strides (", strides.size(), ") and shape (",
           sizes.size(), ")");
  PF_CHECK(offset >= 0, "negative storage offset ", offset);
  int64_t last = offset;  // the furthest element the view reaches
  bool overflow = false, empty = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    PF_CHECK(sizes[d] >= 0, "negative size ", sizes[d], " in ", shape_str(sizes));
    PF_CHECK(strides[d] >= 0, "negative stride ", strides[d], " in ", shape_str(strides), " (not supported)");
    if (sizes[d] == 0) empty = true;
    int64_t reach;
    overflow |= __builtin_mul_overflow(sizes[d] - (sizes[d] > 0), strides[d], &reach) ||
                __builtin_add_overflow(last, reach, &last);
  }
  shape_numel(sizes);  // the element count must fit too (a stride-0 view of 2^62 x 2 elements)
  if (empty) return;  // touches no memory
  const int64_t capacity = static_cast<int64_t>(storage_nbytes / itemsize);
  PF_CHECK(!overflow && last < capacity, "setStorage: sizes ", shape_str(sizes), ", strides ", shape_str(strides),
           ", storage offset ", offset, ", and itemsize ", itemsize, " requiring a storage of ",
           overflow ? std::string("more than 2^63") : std::to_string(last + 1), " elements are out of bounds for "
           "storage of ", capacity, " elements");
}

std::string shape_str(const Shape& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(sizes[i]);
  }
  return s + "]";
}

Shape format_strides(const Shape& sizes, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous) return contiguous_strides(sizes);
  PF_CHECK(sizes.size() == 4 || sizes.size() == 5, "required rank 4 or 5 tensor to use channels_last format, got ",
           sizes.size(), "-d");
  // (N, C, *spatial) laid out as (N, *spatial, C): PyTorch's products, a size 0 included (the
  // element count is checked by the caller; a stride saturates as contiguous_strides' do).
  Shape strides(sizes.size());
  int64_t step = 1;
  const auto place = [&](size_t d) {
    strides[d] = step;
    if (__builtin_mul_overflow(step, sizes[d], &step)) step = std::numeric_limits<int64_t>::max();
  };
  place(1);
  for (size_t d = sizes.size() - 1; d >= 2; --d) place(d);
  place(0);
  return strides;
}

Tensor Tensor::empty(const Shape& sizes, DType dtype, Device device, MemoryFormat format) {
  for (int64_t s : sizes)
    PF_CHECK_T(s >= 0, ValueError, "Trying to create tensor with negative dimension ", s, ": ", shape_str(sizes));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(device, storage_nbytes(sizes, dtype));
  impl->sizes = sizes;
  impl->strides = format_strides(sizes, format);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset, DType dtype) {
  check_view(sizes, strides, offset, plugflow::itemsize(dtype), storage->nbytes());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void Tensor::set_(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset, DType dtype) const {
  check_view(sizes, strides, offset, plugflow::itemsize(dtype), storage->nbytes());
  impl_->storage = std::move(storage);
  impl_->sizes = std::move(sizes);
  impl_->strides = std::move(strides);
  impl_->offset = offset;
  impl_->dtype = dtype;
}

static int64_t wrap(int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  PF_CHECK_T(dim >= -n && dim < n, IndexError, "Dimension out of range (expected to be in range of [", -n, ", ",
             n - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + n : dim;
}

int64_t Tensor::size(int64_t dim) const {
  if (this->dim() == 0) {
    wrap(dim, 0);
    return 1;
  }
  return impl_->sizes[wrap(dim, this->dim())];
}

int64_t Tensor::stride(int64_t dim) const {
  if (this->dim() == 0) {
    wrap(dim, 0);
    return 1;
  }
  return impl_->strides[wrap(dim, this->dim())];
}

bool Tensor::is_contiguous() const {
  // An empty tensor is contiguous whatever its strides (PyTorch; numpy gives them zero strides).
  for (int64_t s : impl_->sizes)
    if (s == 0) return true;
  int64_t expected = 1;
  for (size_t i = impl_->sizes.size(); i-- > 0;) {
    const int64_t s = impl_->sizes[i];
    if (s == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= s;
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::Contiguous) return is_contiguous();
  if (dim() != 4 && dim() != 5) return false;
  // PyTorch's check, empty tensors included: dense in the order C, the spatial dims from the
  // innermost, N, size-1 dims skipped.
  int64_t expected = 1;
  const auto dense_at = [&](size_t d) {
    if (impl_->sizes[d] == 1) return true;
    if (impl_->strides[d] != expected) return false;
    expected *= impl_->sizes[d];
    return true;
  };
  if (!dense_at(1)) return false;
  for (size_t d = impl_->sizes.size() - 1; d >= 2; --d)
    if (!dense_at(d)) return false;
  return dense_at(0);
}

MemoryFormat Tensor::suggest_memory_format() const {
  // (An empty tensor is row-major contiguous whatever its strides; its channels-last check
  // looks at the strides, as PyTorch's.)
  return (numel() == 0 || !is_contiguous()) && is_contiguous(MemoryFormat::ChannelsLast) ? MemoryFormat::ChannelsLast
                                                                                        : MemoryFormat::Contiguous;
}

MemoryFormat result_memory_format(std::span<const Tensor> inputs) {
  // Every elementwise op passes here: the common cases answer without the dense-layout sort.
  if (inputs.empty() || (inputs[0].dim() != 4 && inputs[0].dim() != 5)) return MemoryFormat::Contiguous;
  for (const Tensor& t : inputs) {
    if (t.numel() <= 1) continue;
    if (t.is_contiguous()) return MemoryFormat::Contiguous;
    if (t.is_contiguous(MemoryFormat::ChannelsLast)) return MemoryFormat::ChannelsLast;
    if (t.is_non_overlapping_and_dense()) return MemoryFormat::Contiguous;  // another dense order
  }
  return MemoryFormat::Contiguous;
}

bool Tensor::is_non_overlapping_and_dense() const {
  const size_t n = impl_->sizes.size();
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::sort(perm.begin(), perm.end(), [&](size_t a, size_t b) {
    if (impl_->sizes[a] < 2) return false;
    if (impl_->sizes[b] < 2) return true;
    return impl_->strides[a] < impl_->strides[b];
  });
  int64_t expected = 1;
  for (size_t k = 0; k < n; ++k) {
    const int64_t s = impl_->sizes[perm[k]];
    if (s == 0) return true;
    if (s == 1) continue;
    if (impl_->strides[perm[k]] != expected) return false;
    expected *= s;
  }
  return true;
}

}  // namespace plugflow
