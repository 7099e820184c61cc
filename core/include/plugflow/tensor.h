// Tensor: a strided view (sizes, strides, offset in elements) on a shared Storage.
// Views share the storage and its version counter; metadata changes never copy data.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "plugflow/device.h"
#include "plugflow/dtype.h"
#include "plugflow/export.h"

namespace plugflow {

using Shape = std::vector<int64_t>;

// Raw memory of one device. Owns it through the device backend unless `owner` keeps
// foreign memory alive (numpy arrays, DLPack, ...).
//
// While an nn.Graph captures (plugflow/graph.h), new storages are *virtual*: no memory until
// host code asks for data() (then it is allocated and the graph keeps it as a constant).
// data() of a virtual storage outside capture is an error: the tensor never held values.
class PF_API Storage {
 public:
  // Allocates nbytes on `device` through its backend (virtually while a graph captures).
  Storage(Device device, size_t nbytes);
  // Wraps memory someone else owns; `owner` is released when the storage dies.
  Storage(Device device, void* data, size_t nbytes, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_ != nullptr || !virtual_ ? data_ : materialize(); }
  bool is_virtual() const { return virtual_ && data_ == nullptr; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // Bumped by every in-place write; autograd compares it with the value it saved.
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* materialize() const;

  mutable void* data_ = nullptr;
  bool virtual_ = false;
  size_t nbytes_ = 0;
  Device device_;
  DeviceBackend* backend_ = nullptr;  // null for foreign memory
  std::shared_ptr<void> owner_;
  std::atomic<uint32_t> version_{0};
};

struct AutogradMeta;  // defined by the autograd engine (core/src/autograd)

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  std::shared_ptr<AutogradMeta> autograd;  // null: plain tensor without grad
};

// Checked size arithmetic. Every element count, byte size and view extent goes through these,
// so a shape from a user or a file that does not fit raises instead of wrapping around to a
// small allocation that kernels then write past.
PF_API Shape contiguous_strides(const Shape& sizes);
// The element count; Error "numel: integer multiplication overflow" past int64, and for a
// negative size.
PF_API int64_t shape_numel(const Shape& sizes);
// The bytes of a dense tensor of `sizes`; Error "Storage size calculation overflowed" when
// they exceed the largest object a pointer difference can span (2^63 - 1).
PF_API size_t storage_nbytes(const Shape& sizes, DType dtype);
// Throws unless the view (sizes, strides, offset; in elements of `itemsize` bytes) is well
// formed (non-negative sizes, strides and offset, ranks equal) and its furthest element lies
// inside `storage_nbytes`.
PF_API void check_view(const Shape& sizes, const Shape& strides, int64_t offset, size_t itemsize,
                       size_t storage_nbytes);
// a * b and a + b of non-negative sizes; Error naming `what` on overflow.
PF_API int64_t checked_size_mul(int64_t a, int64_t b, const char* what);
PF_API int64_t checked_size_add(int64_t a, int64_t b, const char* what);
PF_API std::string shape_str(const Shape& sizes);  // "[2, 3]"

// The order of a dense tensor's dims in memory (PyTorch's memory_format): row-major, or
// channels last, where a 4-d (N, C, H, W) or 5-d (N, C, D, H, W) tensor is laid out as
// (N, H, W, C) / (N, D, H, W, C). Ops whose inputs are channels last return channels-last
// results (elementwise, convolution, batch norm, pooling: docs/kernels.md, "Memory formats").
enum class MemoryFormat : uint8_t { Contiguous, ChannelsLast };
// The strides of a new tensor of `sizes` in `format` (ChannelsLast needs 4 or 5 dims).
PF_API Shape format_strides(const Shape& sizes, MemoryFormat format);

class PF_API Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // New uninitialized tensor, contiguous or in `format`.
  static Tensor empty(const Shape& sizes, DType dtype, Device device, MemoryFormat format = MemoryFormat::Contiguous);
  // A view on an existing storage; check_view's errors when it does not fit the storage.
  static Tensor view_of(std::shared_ptr<Storage> storage, Shape sizes, Shape strides,
                        int64_t offset, DType dtype);
  // Points this tensor (all its handles: it keeps its identity and autograd metadata) at
  // another storage and geometry, checked as view_of checks (`param.data = x`, out= resizes).
  void set_(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset, DType dtype) const;

  bool defined() const { return impl_ != nullptr; }
  const Shape& sizes() const { return impl_->sizes; }
  const Shape& strides() const { return impl_->strides; }
  int64_t size(int64_t dim) const;  // negative dims wrap; IndexError when out of range
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return impl_->offset; }
  int64_t dim() const { return static_cast<int64_t>(impl_->sizes.size()); }
  int64_t numel() const { return shape_numel(impl_->sizes); }
  DType dtype() const { return impl_->dtype; }
  size_t itemsize() const { return plugflow::itemsize(impl_->dtype); }
  Device device() const { return impl_->storage->device(); }
  bool is_contiguous() const;
  // Dense in `format`'s order (size-1 dims' strides ignored, as is_contiguous() does).
  bool is_contiguous(MemoryFormat format) const;
  // The format a result computed from this tensor takes: ChannelsLast for a 4-d/5-d tensor
  // dense in channels-last order and not also row-major (C == 1 or a 1x1 image is both;
  // an empty tensor counts by its strides).
  MemoryFormat suggest_memory_format() const;
  // True when the elements fill a dense block with no gaps (any order), so a flat loop works.
  bool is_non_overlapping_and_dense() const;

  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  void* data_ptr() const {
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * static_cast<int64_t>(itemsize());
  }
  template <typename T>
  T* data() const { return static_cast<T*>(data_ptr()); }

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// The format of an elementwise result of `inputs` (of one shape): as PyTorch's TensorIterator
// decides, the first input whose layout is unambiguous (dense, not broadcast) decides.
PF_API MemoryFormat result_memory_format(std::span<const Tensor> inputs);

}  // namespace plugflow
