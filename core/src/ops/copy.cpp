// Copies between any dtypes, strides and devices; conversions built on them.
#include <algorithm>

#include "../autograd/grad_utils.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/graph.h"
#include "plugflow/ops.h"

namespace plugflow::ops {
namespace {

const OpDef& copy_op() {
  static const OpDef& op = find_op("copy");
  return op;
}

// Same-device casting copy through the device's `copy` kernel.
void device_copy(Tensor& dst, const Tensor& src) {
  const Tensor in[] = {src};
  Tensor out[] = {dst};
  call_op_out(copy_op(), in, {}, out);
}

// Byte range [lo, hi) of the storage a tensor can touch.
std::pair<int64_t, int64_t> byte_extent(const Tensor& t) {
  int64_t lo = t.offset(), hi = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sizes()[d] == 0) return {0, 0};
    hi += (t.sizes()[d] - 1) * t.strides()[d];
  }
  const auto sz = static_cast<int64_t>(t.itemsize());
  return {lo * sz, (hi + 1) * sz};
}

bool may_overlap(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage()) return false;
  auto [alo, ahi] = byte_extent(a);
  auto [blo, bhi] = byte_extent(b);
  return alo < bhi && blo < ahi;
}

void copy_data(Tensor& dst, const Tensor& src_in, bool non_blocking);

}  // namespace

void check_no_internal_overlap(const Tensor& t) { autograd::check_no_internal_overlap(t); }

Scalar item(const Tensor& t) {
  PF_CHECK(t.numel() == 1, "a Tensor with ", t.numel(), " elements cannot be converted to Scalar");
  const Device cpu{DeviceType::CPU, 0};
  if (is_floating(t.dtype())) return Scalar(to(t, cpu, DType::Float64, true).data<double>()[0]);
  if (t.dtype() == DType::Bool) return Scalar(to(t, cpu, DType::Bool, true).data<bool>()[0]);
  return Scalar(to(t, cpu, DType::Int64, true).data<int64_t>()[0]);
}

Tensor& copy_(Tensor& dst, const Tensor& src_in, bool non_blocking) {
  PF_CHECK(dst.defined() && src_in.defined(), "copy_: undefined tensor");
  autograd::check_no_internal_overlap(dst);
  autograd::check_inplace(dst);
  const bool grad = is_floating(dst.dtype()) && autograd::any_requires_grad({&dst, &src_in});
  {
    autograd::GradModeGuard no_grad(false);  // the mechanics below are not part of the graph
    copy_data(dst, src_in, non_blocking);
  }
  if (grad) {
    auto node = autograd::make_node(
        "CopyBackwards", [dst_meta = TensorMeta{dst.sizes(), dst.dtype(), dst.device()}, src_shape = src_in.sizes(),
                          src_dtype = src_in.dtype(), src_dev = src_in.device()](
                             const std::vector<Tensor>& g, const std::vector<Tensor>&) -> std::vector<Tensor> {
          Tensor gs = autograd::sum_to(to(g[0], src_dev, src_dtype), src_shape);
          return {zeros(dst_meta.sizes, dst_meta.dtype, dst_meta.device), is_floating(src_dtype) ? gs : Tensor()};
        });
    autograd::record_inplace(node, dst, {src_in});
  }
  return dst;
}

namespace {
// copy_ without autograd.
void copy_data(Tensor& dst, const Tensor& src_in, bool non_blocking) {
  Tensor src = src_in;
  if (src.sizes() != dst.sizes()) src = expand(src, dst.sizes());
  if (dst.numel() == 0) return;
  // A source that shares memory with the destination (other than being the very same view)
  // is read completely before anything is written.
  if (may_overlap(dst, src) &&
      !(dst.offset() == src.offset() && dst.strides() == src.strides() && dst.dtype() == src.dtype()))
    src = clone(src);
  else if (dst.is_same(src))
    return;

  const Device sd = src.device(), dd = dst.device();
  if (sd == dd) {
    device_copy(dst, src);
    return;
  }
  // Across devices: cast on the source side into a dense staging buffer of dst's dtype,
  // move the bytes, then scatter into dst's strides on the destination device.
  Tensor staged = src;
  if (src.dtype() != dst.dtype() || !src.is_contiguous()) {
    staged = Tensor::empty(src.sizes(), dst.dtype(), sd);
    device_copy(staged, src);
  }
  const size_t nbytes = static_cast<size_t>(staged.numel()) * staged.itemsize();
  Tensor target = dst.is_contiguous() ? dst : Tensor::empty(dst.sizes(), dst.dtype(), dd);
  if (graph::internal::active()) {
    graph::internal::record_device_copy(target, staged);
  } else if (sd.is_cpu()) {
    DeviceBackend& b = device_backend(dd);
    if (non_blocking && b.is_pinned_host(staged.data_ptr()))
      b.copy_from_host_async(dd.index, target.data_ptr(), staged.data_ptr(), nbytes);
    else
      b.copy_from_host(dd.index, target.data_ptr(), staged.data_ptr(), nbytes);
  } else if (dd.is_cpu()) {
    DeviceBackend& b = device_backend(sd);
    if (non_blocking && b.is_pinned_host(target.data_ptr()))
      b.copy_to_host_async(sd.index, target.data_ptr(), staged.data_ptr(), nbytes);
    else
      b.copy_to_host(sd.index, target.data_ptr(), staged.data_ptr(), nbytes);
  } else {  // device to another device: through host memory
    Tensor host = Tensor::empty(staged.sizes(), staged.dtype(), Device{DeviceType::CPU, 0});
    device_backend(sd).copy_to_host(sd.index, host.data_ptr(), staged.data_ptr(), nbytes);
    device_backend(dd).copy_from_host(dd.index, target.data_ptr(), host.data_ptr(), nbytes);
  }
  if (!target.is_same(dst)) device_copy(dst, target);
  else dst.storage()->bump_version();
}
}  // namespace


static void run_fill(const Tensor& t, const Scalar& value) {
  static const OpDef& op = find_op("fill");
  Tensor out[] = {t};
  call_op_out(op, {}, Attrs{{"value", value}}, out);
}

Tensor wrapped_scalar_tensor(Scalar value, DType dtype, Device device) {
  Tensor t = Tensor::empty({}, dtype, device);
  run_fill(t, value);
  return t;
}

Tensor& fill_(Tensor& t, Scalar value) {
  check_scalar_fits(value, t.dtype());
  autograd::check_inplace(t);
  run_fill(t, value);
  if (autograd::any_requires_grad({&t})) {
    auto node = autograd::make_node("FillBackward0", [](const std::vector<Tensor>& g, const std::vector<Tensor>&) {
      return std::vector<Tensor>{zeros(g[0].sizes(), g[0].dtype(), g[0].device())};
    });
    autograd::record_inplace(node, t, {});
  }
  return t;
}

Tensor& zero_(Tensor& t) { return fill_(t, Scalar(int64_t{0})); }

Tensor to(const Tensor& t, std::optional<Device> device, std::optional<DType> dtype, bool copy, bool non_blocking) {
  Device d = device.value_or(t.device());
  if (d.index < 0) d.index = 0;
  const DType dt = dtype.value_or(t.dtype());
  if (!copy && d == t.device() && dt == t.dtype()) return t;
  // PyTorch's preserve_format: a channels-last tensor stays channels last (autocast's casts too).
  Tensor out = Tensor::empty(t.sizes(), dt, d, t.suggest_memory_format());
  {
    autograd::GradModeGuard no_grad(false);
    copy_(out, t, non_blocking);
  }
  if (is_floating(dt) && autograd::any_requires_grad({&t})) {
    auto node = autograd::make_node(
        "ToCopyBackward0", [src_dtype = t.dtype(), src_dev = t.device()](const std::vector<Tensor>& g,
                                                                         const std::vector<Tensor>&) {
          return std::vector<Tensor>{to(g[0], src_dev, src_dtype)};
        });
    autograd::record(node, {t}, {out});
  }
  return out;
}

bool is_pinned(const Tensor& t) {
  return t.device().is_cpu() && t.numel() > 0 && pinned_host_owner(t.data_ptr()) != nullptr;
}

void record_stream(const Tensor& t, void* stream) {
  const Storage& storage = *t.storage();
  // A storage without memory (empty, or virtual while a graph captures) has no block to keep.
  if (storage.is_virtual() || storage.data() == nullptr) return;
  // The storage's start: the block the backend allocated, whatever t's offset.
  device_backend(t.device()).record_stream(t.device().index, storage.data(), stream);
}

Tensor pin_memory(const Tensor& t) {
  PF_CHECK(t.device().is_cpu(), "cannot pin a ", t.device().str(), " tensor: only dense CPU tensors can be pinned");
  if (is_pinned(t)) return t;
  const size_t nbytes = storage_nbytes(t.sizes(), t.dtype());
  std::string why;  // the reasons of backends without devices, for the error
  for (int i = 0; i < num_device_types(); ++i) {
    DeviceBackend* b = find_device_backend(static_cast<DeviceType>(i));
    if (b == nullptr) continue;
    if (b->device_count() == 0) {
      if (!b->unavailable_reason().empty()) why += "; " + b->unavailable_reason();
      continue;
    }
    void* p = b->allocate_pinned_host(std::max<size_t>(nbytes, 1));
    if (p == nullptr) continue;
    std::shared_ptr<void> owner(p, [b](void* q) { b->free_pinned_host(q); });
    auto storage = std::make_shared<Storage>(Device{DeviceType::CPU, 0}, p, nbytes, std::move(owner));
    Tensor out = Tensor::view_of(std::move(storage), t.sizes(), contiguous_strides(t.sizes()), 0, t.dtype());
    autograd::GradModeGuard no_grad(false);
    copy_(out, t);
    return out;
  }
  PF_THROW(Error, "Cannot pin memory: no device backend with page-locked host memory is available", why);
}

Tensor contiguous(const Tensor& t, MemoryFormat format) { return t.is_contiguous(format) ? t : clone(t, format); }

Tensor clone(const Tensor& t, MemoryFormat format) {
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), t.device(), format);
  if (t.numel() > 0) device_copy(out, t);
  if (autograd::any_requires_grad({&t})) {
    auto node = autograd::make_node("CloneBackward0", [](const std::vector<Tensor>& g, const std::vector<Tensor>&) {
      return std::vector<Tensor>{g[0]};
    });
    autograd::record(node, {t}, {out});
  }
  return out;
}

}  // namespace plugflow::ops
