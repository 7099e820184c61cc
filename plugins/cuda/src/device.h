// The "cuda" DeviceBackend: device discovery, one caching allocator per device, streams
// (a default non-blocking stream per device, more on request, one current stream per thread
// and device, record_stream), events, page-locked host memory and host <-> device copies.
// Kernels of the plugin reach it through backend().
#pragma once
#include <cuda_runtime_api.h>

#include <map>
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
  std::map<std::string, int64_t> memory_stats(int index) const override;

  void* create_stream(int index) override;
  void destroy_stream(int index, void* stream) override;
  void* default_stream(int index) override;
  void set_current_stream(int index, void* stream) override;
  void synchronize_stream(int index, void* stream) override;
  bool query_stream(int index, void* stream) override;
  void* create_event(int index, bool enable_timing) override;
  void destroy_event(int index, void* event) override;
  void record_event(int index, void* event, void* stream) override;
  void synchronize_event(int index, void* event) override;
  bool query_event(int index, void* event) override;
  double event_elapsed_ms(int index, void* start, void* end) override;
  void stream_wait_event(int index, void* stream, void* event) override;
  void record_stream(int index, void* ptr, void* stream) override;

  void* allocate_pinned_host(size_t nbytes) override;
  void free_pinned_host(void* ptr) override;
  bool is_pinned_host(const void* ptr) const override;
  void copy_from_host_async(int index, void* dst, const void* host_src, size_t nbytes) override;
  void copy_to_host_async(int index, void* host_dst, const void* src, size_t nbytes) override;

  // Plugin-internal. The calling thread's current stream of the device.
  cudaStream_t stream(int index);
  int multiprocessor_count(int index);

 private:
  struct PerDevice;
  PerDevice& dev(int index) const;  // DeviceError for a bad index
  void init_device(PerDevice& d) const;

  std::vector<std::unique_ptr<PerDevice>> devices_;
  std::string unavailable_reason_;
  // Page-locked host blocks (cudaHostAlloc): start -> size, so an interior pointer is found.
  mutable std::mutex pinned_mutex_;
  std::map<const char*, size_t> pinned_;
};

// The plugin's backend (created on first use; registered with the core by plugin.cpp).
std::shared_ptr<CudaBackend> backend_ptr();
inline CudaBackend& backend() { return *backend_ptr(); }

}  // namespace plugflow::cuda
