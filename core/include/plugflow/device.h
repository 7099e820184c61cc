// Devices. A device type is backed by a DeviceBackend that a plugin registers (the CPU
// plugin registers "cpu", the CUDA plugin "cuda"); the core never names a vendor API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "plugflow/export.h"

namespace plugflow {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

PF_API std::string_view device_type_name(DeviceType t);

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // -1 only while parsing "cuda" (means: the current device)

  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::CPU; }
  PF_API std::string str() const;           // "cpu", "cuda:0"
  PF_API static Device parse(std::string_view s);  // "cpu", "cuda", "cuda:1"; ValueError otherwise
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
