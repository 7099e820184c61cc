// The plugin ABI. A plugin is a shared library exporting one extern "C" symbol,
// `plugflow_plugin_entry`, a function that returns its PlugflowPluginEntry. The loader checks
// the ABI version and the build fingerprint, then calls `register_plugin` with a Registrar. Registration is
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

#include "plugflow/communicator.h"
#include "plugflow/device.h"
#include "plugflow/export.h"
#include "plugflow/kernel.h"

// Bumped on incompatible changes (major) or additions a plugin may rely on (minor).
// 1.1: Registrar::communicator takes the device type its communicator serves.
// 2.0: the entry carries the build fingerprint; the entry symbol is a plain C function.
// 3.0: DeviceBackend gains streams, events, pinned host memory and allocator statistics (new
//      virtual functions: a backend built against 2.x would be called past its vtable).
// 4.0: DeviceBackend gains record_stream (a new virtual function: the same reason).
#define PLUGFLOW_ABI_MAJOR 4
#define PLUGFLOW_ABI_MINOR 0
#define PLUGFLOW_ENTRY_SYMBOL "plugflow_plugin_entry"

// The build fingerprint. Kernels, registrations and tensors cross between the core and a
// plugin as C++ types (std::string, std::function, std::shared_ptr, TensorImpl, ...), so both
// sides must agree on the standard library, its dual ABI and the layout of those types; a
// version number cannot tell. Each side computes the fingerprint with its own compiler and
// flags (build_fingerprint() is inline: the core's copy is compiled into the core, the
// plugin's into the plugin) and the loader compares the two before it calls anything else.
extern "C" {
struct PlugflowBuildFingerprint {
  uint32_t struct_size;      // sizeof(PlugflowBuildFingerprint) as the plugin saw it
  uint32_t compiler_family;  // PLUGFLOW_COMPILER_*
  uint32_t compiler_major;
  uint32_t compiler_minor;
  uint32_t stdlib_family;    // PLUGFLOW_STDLIB_*
  uint32_t stdlib_release;   // libstdc++'s _GLIBCXX_RELEASE, libc++'s _LIBCPP_VERSION
  uint32_t cxx11_abi;        // _GLIBCXX_USE_CXX11_ABI (std::string and std::list layouts)
  uint32_t cplusplus;        // __cplusplus / 100 (202002 -> 2020)
  // Sizes of what crosses the boundary by value or is laid out by both sides.
  uint32_t sizeof_tensor_impl;
  uint32_t sizeof_kernel_context;
  uint32_t sizeof_attrs;
  uint32_t sizeof_attr_value;
  uint32_t sizeof_registrar;
  uint32_t sizeof_std_string;
  uint32_t sizeof_shared_ptr;
};
}

#define PLUGFLOW_COMPILER_OTHER 0
#define PLUGFLOW_COMPILER_GCC 1
#define PLUGFLOW_COMPILER_CLANG 2
#define PLUGFLOW_STDLIB_OTHER 0
#define PLUGFLOW_STDLIB_LIBSTDCXX 1
#define PLUGFLOW_STDLIB_LIBCXX 2

extern "C" {
struct PlugflowPluginEntry {
  uint32_t struct_size;  // sizeof(PlugflowPluginEntry) as the plugin saw it
  uint32_t abi_major;
  uint32_t abi_minor;
  const char* name;     // provider name, e.g. "cpu"
  const char* version;  // the plugin's own version string
  // The plugin's build; checked before register_plugin is called.
  const PlugflowBuildFingerprint* fingerprint;
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
  // The id of a device type name, claimed for this process if new ("xpu"); a plugin that adds a
  // device calls it first and returns the id from its backend's type(). The claim itself is
  // not rolled back if the registration fails later (the name stays known, with no backend).
  DeviceType device_type(const std::string& name);
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

// The fingerprint of the translation unit that calls it.
inline PlugflowBuildFingerprint build_fingerprint() {
  PlugflowBuildFingerprint f{};
  f.struct_size = sizeof(PlugflowBuildFingerprint);
#if defined(__clang__)
  f.compiler_family = PLUGFLOW_COMPILER_CLANG;
  f.compiler_major = __clang_major__;
  f.compiler_minor = __clang_minor__;
#elif defined(__GNUC__)
  f.compiler_family = PLUGFLOW_COMPILER_GCC;
  f.compiler_major = __GNUC__;
  f.compiler_minor = __GNUC_MINOR__;
#else
  f.compiler_family = PLUGFLOW_COMPILER_OTHER;
#endif
#if defined(_LIBCPP_VERSION)
  f.stdlib_family = PLUGFLOW_STDLIB_LIBCXX;
  f.stdlib_release = _LIBCPP_VERSION;
#elif defined(__GLIBCXX__)
  f.stdlib_family = PLUGFLOW_STDLIB_LIBSTDCXX;
  f.stdlib_release = _GLIBCXX_RELEASE;
  f.cxx11_abi = _GLIBCXX_USE_CXX11_ABI;
#else
  f.stdlib_family = PLUGFLOW_STDLIB_OTHER;
#endif
  f.cplusplus = static_cast<uint32_t>(__cplusplus / 100);
  f.sizeof_tensor_impl = sizeof(TensorImpl);
  f.sizeof_kernel_context = sizeof(KernelContext);
  f.sizeof_attrs = sizeof(Attrs);
  f.sizeof_attr_value = sizeof(AttrValue);
  f.sizeof_registrar = sizeof(Registrar);
  f.sizeof_std_string = sizeof(std::string);
  f.sizeof_shared_ptr = sizeof(std::shared_ptr<int>);
  return f;
}

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
  extern "C" __attribute__((visibility("default"))) const PlugflowPluginEntry* plugflow_plugin_entry() noexcept { \
    static const PlugflowBuildFingerprint fingerprint = ::plugflow::build_fingerprint();    \
    static const PlugflowPluginEntry entry = {sizeof(PlugflowPluginEntry), PLUGFLOW_ABI_MAJOR, \
                                              PLUGFLOW_ABI_MINOR, NAME, VERSION, &fingerprint, \
                                              &plugflow_plugin_register};                  \
    return &entry;                                                                            \
  }                                                                                           \
  static void plugflow_plugin_register_body(::plugflow::Registrar& reg)
