// Core-internal hooks between the registries (registry.cpp, device.cpp) and the
// runtime/loader. Not part of the SDK; exported only so the core's own tests can drive them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plugflow/export.h"

namespace plugflow {
class DeviceBackend;
}

namespace plugflow::internal {

// Replaces the dispatcher's provider order and invalidates every cached kernel choice.
PF_API void set_kernel_preference(std::vector<std::string> providers);
PF_API std::vector<std::string> kernel_preference();
// Calls every hook registered with Registrar::on_set_num_threads.
PF_API void run_thread_hooks(int n);
// Bumped whenever kernels are added or the preference changes; dispatch caches compare it.
PF_API uint64_t registry_generation();
// Installs the backend for its device type (device.cpp); a second one for a type is refused.
PF_API void register_device_backend(std::shared_ptr<DeviceBackend> backend, const std::string& provider);

}  // namespace plugflow::internal
