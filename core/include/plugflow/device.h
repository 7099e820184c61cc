// Devices. A device type is a name ("cpu", "cuda", a vendor's "xpu") with a small id, backed by
// a DeviceBackend that a plugin registers; the core never names a vendor API. "cpu" and "cuda"
// have fixed ids (code in the core and plugins names them); a plugin claims any other name with
// Registrar::device_type("xpu"), which gives it the next free id.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "plugflow/export.h"

namespace plugflow {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
// Ids are below this (per-op kernel caches are arrays of it).
inline constexpr int kMaxDeviceTypes = 8;

PF_API std::string_view device_type_name(DeviceType t);
// The device types named so far (cpu, cuda, then plugins' in the order they were claimed).
PF_API int num_device_types();
// The type of a name, or nullopt.
PF_API std::optional<DeviceType> find_device_type(std::string_view name);
// The type of a name, claiming the next id for a new one: a lowercase identifier of at most 32
// characters. Claiming an existing name returns its id. Throws ValueError for a bad name and
// PluginError when all kMaxDeviceTypes ids are taken.
PF_API DeviceType claim_device_type(std::string_view name);

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // -1 only while parsing "cuda" (means: the current device)

  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::CPU; }
  PF_API std::string str() const;           // "cpu", "cuda:0"
  PF_API static Device parse(std::string_view s);  // "cpu", "cuda:1", "xpu"; ValueError otherwise
};

// What a plugin implements for a device type. All pointers are device pointers of this
// backend; host pointers are plain CPU memory.
class PF_API DeviceBackend {
 public:
  virtual ~DeviceBackend();
  virtual DeviceType type() const = 0;
  // Number of usable devices (0 is legal: the plugin loaded but found no hardware).
  virtual int device_count() const = 0;
  // Why device_count() is 0, for messages and plugflow.info ("no CUDA device: ...").
  virtual std::string unavailable_reason() const { return {}; }
  virtual void* allocate(int index, size_t nbytes) = 0;
  virtual void deallocate(int index, void* ptr, size_t nbytes) = 0;
  // Copies of raw bytes; each is ordered on the device's current stream and finished when it
  // returns to the caller for host-visible memory.
  virtual void copy_to_host(int index, void* host_dst, const void* src, size_t nbytes) = 0;
  virtual void copy_from_host(int index, void* dst, const void* host_src, size_t nbytes) = 0;
  virtual void copy_on_device(int index, void* dst, const void* src, size_t nbytes) = 0;
  virtual void synchronize(int index) = 0;
  // The opaque stream handle kernels see in KernelContext (nullptr on CPU).
  virtual void* current_stream(int /*index*/) { return nullptr; }
  // Memory statistics in bytes (current, peak); 0 when the backend does not track them.
  virtual size_t allocated_bytes(int /*index*/) const { return 0; }
  virtual size_t peak_allocated_bytes(int /*index*/) const { return 0; }
  virtual void reset_peak(int /*index*/) {}
  virtual void empty_cache(int /*index*/) {}
};

// The backend registered for a device type, or a DeviceError explaining why there is none
// (plugin not loaded, or loaded without hardware). Checks the index too.
PF_API DeviceBackend& device_backend(Device d);
// nullptr when no plugin registered the type.
PF_API DeviceBackend* find_device_backend(DeviceType t);

}  // namespace plugflow
