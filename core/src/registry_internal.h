// Core-internal hooks between the registries (registry.cpp, device.cpp, communicator.cpp) and
// the runtime/loader. Not part of the SDK; exported only so the core's own tests can drive them.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plugflow/communicator.h"
#include "plugflow/export.h"
#include "plugflow/kernel.h"

namespace plugflow {
class DeviceBackend;
class Registrar;
}

namespace plugflow::internal {

struct StagedCommunicator {
  std::string backend;
  DeviceType device;
  CommunicatorFactory factory;
};

// Everything one provider registered, validated, not yet live.
struct StagedRegistration {
  std::string provider;
  std::vector<KernelRecord> kernels;
  std::vector<std::shared_ptr<DeviceBackend>> devices;
  std::vector<StagedCommunicator> communicators;
  std::vector<std::function<void(int)>> thread_hooks;
};

// Runs `fill` on a Registrar for `provider`, then commits what it registered to the live
// registries at once (kernels under the registry's lock, with one generation bump). If `fill`
// throws, or the commit finds a conflict (the provider name, a device type or a communicator
// name is taken), nothing is committed and the PluginError propagates. The loader calls it
// around a plugin's register function; the core's tests call it for in-process providers.
// A committed provider is active (selectable) until set_provider_active says otherwise.
PF_API void register_provider(const std::string& provider, const std::function<void(Registrar&)>& fill);

// Makes a provider's kernels, device backends and communicators selectable or not (init drops
// the plugins the new config does not name; their libraries stay loaded). Bumps the
// generation when its kernels change state. Unknown providers are ignored.
PF_API void set_provider_active(const std::string& provider, bool active);
PF_API bool provider_active(const std::string& provider);
// Providers that registered at least one kernel, active or not, in registration order.
PF_API std::vector<std::string> kernel_providers();

// Replaces the dispatcher's provider order and invalidates every cached kernel choice.
PF_API void set_kernel_preference(std::vector<std::string> providers);
PF_API std::vector<std::string> kernel_preference();
// Device types whose ops without a kernel run on the CPU (config kernels.cpu_fallback).
PF_API void set_cpu_fallback(const std::vector<DeviceType>& types);
// Calls every hook registered with Registrar::on_set_num_threads.
PF_API void run_thread_hooks(int n);
// Bumped whenever the selectable kernels or the preference change; dispatch caches compare it.
PF_API uint64_t registry_generation();

// Device backends (device.cpp): the commit checks every staged type before installing any.
void check_device_backends(const StagedRegistration& staged);
void install_device_backends(const StagedRegistration& staged);
void set_device_backends_active(const std::string& provider, bool active);

// Communicator backends (communicator.cpp), committed the same way.
struct CommunicatorRegistration {
  std::string backend;
  DeviceType device;
  std::string provider;
};
void check_communicators(const StagedRegistration& staged);
void install_communicators(StagedRegistration& staged);
void set_communicators_active(const std::string& provider, bool active);
// Every registered communicator backend, active or not (for the config's collectives check).
PF_API std::vector<CommunicatorRegistration> communicator_registrations();

}  // namespace plugflow::internal
