// A device backend on host memory that claims the CUDA device type, so that core tests can
// load, drop and reload a plugin that provides a device without a GPU or the CUDA plugin.
// Tensors on it are plain malloc'd memory, readable from the test.
#pragma once
#include <plugflow/device.h>

#include <cstdlib>
#include <cstring>

namespace pf_test {

class FakeCudaBackend : public plugflow::DeviceBackend {
 public:
  plugflow::DeviceType type() const override { return plugflow::DeviceType::CUDA; }
  int device_count() const override { return 1; }
  void* allocate(int, size_t n) override { return std::malloc(n ? n : 1); }
  void deallocate(int, void* p, size_t) override { std::free(p); }
  void copy_to_host(int, void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_from_host(int, void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_on_device(int, void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void synchronize(int) override {}
};

}  // namespace pf_test
