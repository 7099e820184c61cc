// Devices. A device type is a name ("cpu", "cuda", a vendor's "xpu") with a small id, backed by
// a DeviceBackend that a plugin registers; the core never names a vendor API. "cpu" and "cuda"
// have fixed ids (code in the core and plugins names them); a plugin claims any other name with
// Registrar::device_type("xpu"), which gives it the next free id.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
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
  // The allocator's counters with torch.cuda.memory_stats' names ("allocated_bytes.all.peak",
  // "reserved_bytes.all.current", "num_ooms", ...); empty when the backend keeps none.
  virtual std::map<std::string, int64_t> memory_stats(int /*index*/) const { return {}; }

  // ---- streams and events -------------------------------------------------------------------
  // Opaque handles. Kernels and copies of a device run on the calling thread's current stream
  // (current_stream); a backend with one queue per device keeps these defaults, which raise
  // NotImplementedError for a second stream and for events.
  virtual void* create_stream(int index);
  virtual void destroy_stream(int index, void* stream);
  // The stream current_stream returns when no other was set on this thread.
  virtual void* default_stream(int index) { return current_stream(index); }
  // Makes `stream` (from create_stream, or default_stream) the calling thread's current stream.
  virtual void set_current_stream(int index, void* stream);
  virtual void synchronize_stream(int index, void* /*stream*/) { synchronize(index); }
  // True when all work queued on the stream has finished.
  virtual bool query_stream(int index, void* stream);
  virtual void* create_event(int index, bool enable_timing);
  virtual void destroy_event(int index, void* event);
  virtual void record_event(int index, void* event, void* stream);
  virtual void synchronize_event(int index, void* event);
  virtual bool query_event(int index, void* event);
  // Milliseconds between two recorded timing events.
  virtual double event_elapsed_ms(int index, void* start, void* end);
  // Work queued on `stream` after this call waits for the event's work.
  virtual void stream_wait_event(int index, void* stream, void* event);
  // Tensor.record_stream: the block at `ptr` (from allocate) is used by work on `stream` besides
  // the stream it was allocated for, so when it is deallocated the backend must not reuse it
  // before the work queued on `stream` by then has finished. Memory the backend did not allocate
  // is ignored. The default accepts only the default stream (nothing to record with one queue).
  virtual void record_stream(int index, void* ptr, void* stream);

  // ---- page-locked host memory and asynchronous copies ----------------------------------------
  // Host memory the device copies from and to without staging (Tensor.pin_memory()); nullptr
  // when the backend has none. free_pinned_host waits for copies still using it.
  virtual void* allocate_pinned_host(size_t /*nbytes*/) { return nullptr; }
  virtual void free_pinned_host(void* /*ptr*/) {}
  virtual bool is_pinned_host(const void* /*ptr*/) const { return false; }
  // non_blocking copies: enqueued on the current stream, not waited for. Only called with
  // pinned host memory (is_pinned_host); the caller synchronizes before reading or reusing it.
  virtual void copy_from_host_async(int index, void* dst, const void* host_src, size_t nbytes) {
    copy_from_host(index, dst, host_src, nbytes);
  }
  virtual void copy_to_host_async(int index, void* host_dst, const void* src, size_t nbytes) {
    copy_to_host(index, host_dst, src, nbytes);
  }
};

// The backend registered for a device type, or a DeviceError explaining why there is none
// (plugin not loaded, or loaded without hardware). Checks the index too.
PF_API DeviceBackend& device_backend(Device d);
// nullptr when no plugin registered the type.
PF_API DeviceBackend* find_device_backend(DeviceType t);
// The registered backend whose pinned host memory holds ptr, or nullptr (pageable memory).
PF_API DeviceBackend* pinned_host_owner(const void* ptr);

}  // namespace plugflow
