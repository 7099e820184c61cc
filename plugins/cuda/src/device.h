// The "cuda" DeviceBackend: device discovery, one stream and one caching allocator per
// device, host <-> device copies. Kernels of the plugin reach it through backend().
#pragma once
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "allocator.h"
#include "plugflow/device.h"

namespace plugflow::cuda {

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend();  // probes the devices; never throws for a machine without GPU or driver

  DeviceType type() const override { return DeviceType::CUDA; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  std::string unavailable_reason() const override { return unavailable_reason_; }
  void* allocate(int index, size_t nbytes) override;
  void deallocate(int index, void* ptr, size_t nbytes) override;
  void copy_to_host(int index, void* host_dst, const void* src, size_t nbytes) override;
  void copy_from_host(int index, void* dst, const void* host_src, size_t nbytes) override;
  void copy_on_device(int index, void* dst, const void* src, size_t nbytes) override;
  void synchronize(int index) override;
  void* current_stream(int index) override { return stream(index); }
  size_t allocated_bytes(int index) const override;
  size_t peak_allocated_bytes(int index) const override;
  void reset_peak(int index) override;
  void empty_cache(int index) override;

  // Plugin-internal.
  cudaStream_t stream(int index);
  int multiprocessor_count(int index);

 private:
  struct PerDevice;
  PerDevice& dev(int index) const;  // DeviceError for a bad index
  void init_device(PerDevice& d) const;

  std::vector<std::unique_ptr<PerDevice>> devices_;
  std::string unavailable_reason_;
};

// The plugin's backend (created on first use; registered with the core by plugin.cpp).
std::shared_ptr<CudaBackend> backend_ptr();
inline CudaBackend& backend() { return *backend_ptr(); }

}  // namespace plugflow::cuda
