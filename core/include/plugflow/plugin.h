// The plugin ABI. A plugin is a shared library exporting one extern "C" symbol,
// `plugflow_plugin_entry` (through Boost.DLL's alias macro), that returns a PluginEntry.
// The loader checks the ABI, then calls `register_plugin` with a Registrar. Registration is
// all-or-nothing: the Registrar only collects (and validates) what the plugin registers, and
// the core commits all of it to the live registries once `register_plugin` returns success;
// a plugin that fails or throws halfway leaves nothing behind. Nothing may throw across this
// boundary: PLUGFLOW_PLUGIN wraps the plugin's registration body in a catch-all that turns
// errors into a message.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

#include <boost/dll/alias.hpp>

#include "plugflow/communicator.h"
#include "plugflow/device.h"
#include "plugflow/export.h"
#include "plugflow/kernel.h"

// Bumped on incompatible changes (major) or additions a plugin may rely on (minor).
// 1.1: Registrar::communicator takes the device type its communicator serves.
#define PLUGFLOW_ABI_MAJOR 1
#define PLUGFLOW_ABI_MINOR 1
#define PLUGFLOW_ENTRY_SYMBOL "plugflow_plugin_entry"

extern "C" {
struct PlugflowPluginEntry {
  uint32_t struct_size;  // sizeof(PlugflowPluginEntry) as the plugin saw it
  uint32_t abi_major;
  uint32_t abi_minor;
  const char* name;     // provider name, e.g. "cpu"
  const char* version;  // the plugin's own version string
  // Returns 0 on success; otherwise writes a message into err (NUL-terminated, <= err_len).
  int (*register_plugin)(void* registrar, char* err, size_t err_len);
};
}

namespace plugflow {

namespace internal {
struct StagedRegistration;  // what a Registrar collected, committed by the core at once
}

// What a plugin's registration body receives. Every call checks its arguments and throws
// PluginError naming the plugin and what is wrong; nothing is live until the whole
// registration succeeded. Plugins never construct one: the core does.
class PF_API Registrar {
 public:
  explicit Registrar(internal::StagedRegistration& staged);
  const std::string& provider() const { return provider_; }

  // A kernel for an op of the core's catalog (plugins cannot add ops), one device type and
  // one or more dtypes. Refused: an op not in the catalog, a device type or dtype that does not
  // exist, no dtypes, a null function, a priority other than Fallback/Default/Optimized, and a
  // second kernel for the same (op, device, dtype, priority).
  void kernel(const std::string& op, DeviceType device, std::initializer_list<DType> dtypes, KernelFn fn,
              Priority priority = Priority::Default);
  // The backend of one device type; each type has one provider in the process.
  void device(std::shared_ptr<DeviceBackend> backend);
  // A communicator backend (the name configs use in `collectives`) for tensors of one device type.
  void communicator(const std::string& backend, DeviceType device, CommunicatorFactory factory);
  // Called with the thread count whenever the config or set_num_threads changes it.
  void on_set_num_threads(std::function<void(int)> hook);

 private:
  std::string provider_;
  internal::StagedRegistration& staged_;
};

}  // namespace plugflow

// Defines the entry point. Usage, in one .cpp of the plugin:
//   PLUGFLOW_PLUGIN("cpu", "0.1.0") { reg.kernel("add", ...); }
#define PLUGFLOW_PLUGIN(NAME, VERSION)                                                        \
  static void plugflow_plugin_register_body(::plugflow::Registrar& reg);                     \
  extern "C" int plugflow_plugin_register(void* registrar, char* err, size_t err_len) noexcept { \
    auto report = [&](const char* msg) {                                                      \
      if (err && err_len) {                                                                   \
        std::strncpy(err, msg, err_len - 1);                                                  \
        err[err_len - 1] = '\0';                                                              \
      }                                                                                       \
    };                                                                                        \
    try {                                                                                     \
      plugflow_plugin_register_body(*static_cast<::plugflow::Registrar*>(registrar));         \
      return 0;                                                                               \
    } catch (const std::exception& e) {                                                       \
      report(e.what());                                                                       \
    } catch (...) {                                                                           \
      report("unknown exception");                                                            \
    }                                                                                         \
    return 1;                                                                                 \
  }                                                                                           \
  static PlugflowPluginEntry plugflow_plugin_entry_value = {                                  \
      sizeof(PlugflowPluginEntry), PLUGFLOW_ABI_MAJOR, PLUGFLOW_ABI_MINOR, NAME, VERSION,     \
      &plugflow_plugin_register};                                                             \
  extern "C" PlugflowPluginEntry* plugflow_plugin_entry_fn() { return &plugflow_plugin_entry_value; } \
  BOOST_DLL_ALIAS(plugflow_plugin_entry_fn, plugflow_plugin_entry)                            \
  static void plugflow_plugin_register_body(::plugflow::Registrar& reg)
