// Core-internal hooks between the registries (registry.cpp) and the runtime/loader.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace plugflow::internal {

// Replaces the dispatcher's provider order and invalidates every cached kernel choice.
void set_kernel_preference(std::vector<std::string> providers);
std::vector<std::string> kernel_preference();
// Calls every hook registered with Registrar::on_set_num_threads.
void run_thread_hooks(int n);
// Bumped whenever kernels are added or the preference changes; dispatch caches compare it.
uint64_t registry_generation();

}  // namespace plugflow::internal

#include <memory>

namespace plugflow {
class DeviceBackend;
}

namespace plugflow::internal {
// Installs the backend for its device type (device.cpp); a second one for a type is refused.
void register_device_backend(std::shared_ptr<DeviceBackend> backend, const std::string& provider);
}  // namespace plugflow::internal
