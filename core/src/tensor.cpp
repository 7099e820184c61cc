#include "plugflow/tensor.h"

#include <algorithm>
#include <numeric>

#include "plugflow/error.h"

namespace plugflow {

Storage::Storage(Device device, size_t nbytes) : nbytes_(nbytes), device_(device) {
  if (device_.index < 0) device_.index = 0;
  backend_ = &device_backend(device_);
  data_ = backend_->allocate(device_.index, nbytes);
}

Storage::Storage(Device device, void* data, size_t nbytes, std::shared_ptr<void> owner)
    : data_(data), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {
  if (device_.index < 0) device_.index = 0;
}

Storage::~Storage() {
  if (backend_ != nullptr && data_ != nullptr) backend_->deallocate(device_.index, data_, nbytes_);
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

int64_t shape_numel(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::string shape_str(const Shape& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(sizes[i]);
  }
  return s + "]";
}

Tensor Tensor::empty(const Shape& sizes, DType dtype, Device device) {
  for (int64_t s : sizes)
    PF_CHECK_T(s >= 0, ValueError, "Trying to create tensor with negative dimension ", s, ": ", shape_str(sizes));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(device, static_cast<size_t>(shape_numel(sizes)) * plugflow::itemsize(dtype));
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
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
