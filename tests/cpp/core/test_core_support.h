// A minimal in-process CPU device for core tests that must not depend on the CPU plugin.
#pragma once
#include <cstdlib>
#include <cstring>

#include "../../../core/src/registry_internal.h"
#include "plugflow/plugin.h"

namespace pf_test {

class MallocBackend : public plugflow::DeviceBackend {
 public:
  plugflow::DeviceType type() const override { return plugflow::DeviceType::CPU; }
  int device_count() const override { return 1; }
  void* allocate(int, size_t n) override { return std::malloc(n ? n : 1); }
  void deallocate(int, void* p, size_t) override { std::free(p); }
  void copy_to_host(int, void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_from_host(int, void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_on_device(int, void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void synchronize(int) override {}
};

// Registers the malloc CPU device once per process.
inline void install_test_cpu_device() {
  static bool done = [] {
    plugflow::internal::register_provider(
        "core_test", [](plugflow::Registrar& reg) { reg.device(std::make_shared<MallocBackend>()); });
    return true;
  }();
  (void)done;
}

}  // namespace pf_test
