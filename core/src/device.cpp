#include "plugflow/device.h"

#include <array>
#include <atomic>
#include <charconv>
#include <mutex>
#include <string>

#include "plugflow/error.h"
#include "registry_internal.h"

namespace plugflow {

namespace {
// Names are written once, under the mutex, before the count that publishes them grows; readers
// (every Device::str) read without the lock.
struct DeviceTypeNames {
  std::mutex mutex;
  std::array<std::string, kMaxDeviceTypes> names{"cpu", "cuda"};
  std::atomic<int> count{2};
};
DeviceTypeNames& type_names() {
  static DeviceTypeNames* n = new DeviceTypeNames();  // never destroyed: tensors may outlive statics
  return *n;
}

bool valid_type_name(std::string_view name) {
  if (name.empty() || name.size() > 32 || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}
}  // namespace

std::string_view device_type_name(DeviceType t) {
  const auto i = static_cast<int>(t);
  if (i >= type_names().count.load(std::memory_order_acquire)) return "unknown";
  return type_names().names[i];
}

int num_device_types() { return type_names().count.load(std::memory_order_acquire); }

std::optional<DeviceType> find_device_type(std::string_view name) {
  DeviceTypeNames& n = type_names();
  const int count = n.count.load(std::memory_order_acquire);
  for (int i = 0; i < count; ++i)
    if (n.names[i] == name) return static_cast<DeviceType>(i);
  return std::nullopt;
}

DeviceType claim_device_type(std::string_view name) {
  PF_CHECK_T(valid_type_name(name), ValueError, "a device type name is a lowercase identifier of at most 32 "
             "characters (letters, digits, '_'), got '", name, "'");
  DeviceTypeNames& n = type_names();
  std::lock_guard<std::mutex> lock(n.mutex);
  if (auto t = find_device_type(name)) return *t;
  const int count = n.count.load(std::memory_order_relaxed);
  PF_CHECK_T(count < kMaxDeviceTypes, PluginError, "cannot add device type '", name, "': all ", kMaxDeviceTypes,
             " device type ids are taken");
  n.names[count] = std::string(name);
  n.count.store(count + 1, std::memory_order_release);
  return static_cast<DeviceType>(count);
}

std::string Device::str() const {
  if (type == DeviceType::CPU) return "cpu";
  std::string s(device_type_name(type));
  if (index >= 0) s += ":" + std::to_string(index);
  return s;
}

Device Device::parse(std::string_view s) {
  const auto colon = s.find(':');
  const std::string_view type_str = s.substr(0, colon);
  Device d;
  if (auto t = find_device_type(type_str)) {
    d.type = *t;
  } else {
    std::string known;
    for (int i = 0; i < num_device_types(); ++i)
      known += (i ? ", " : "") + std::string(device_type_name(static_cast<DeviceType>(i)));
    PF_THROW(ValueError, "Expected one of ", known, " device type at start of device string: ", s);
  }
  if (colon == std::string_view::npos) {
    d.index = d.type == DeviceType::CPU ? 0 : -1;
    return d;
  }
  const std::string_view idx = s.substr(colon + 1);
  int value = -1;
  auto [ptr, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), value);
  if (idx.empty() || ec != std::errc() || ptr != idx.data() + idx.size() || value < 0)
    PF_THROW(ValueError, "Invalid device string: '", s, "'");
  d.index = value;
  return d;
}

DeviceBackend::~DeviceBackend() = default;

namespace {
[[noreturn]] void no_streams(const DeviceBackend& b, const char* what) {
  PF_THROW(NotImplementedError, "the ", device_type_name(b.type()), " device backend has no ", what);
}
}  // namespace

void* DeviceBackend::create_stream(int) { no_streams(*this, "streams besides its default one"); }
void DeviceBackend::destroy_stream(int, void*) { no_streams(*this, "streams besides its default one"); }
void DeviceBackend::set_current_stream(int index, void* stream) {
  if (stream != default_stream(index)) no_streams(*this, "streams besides its default one");
}
bool DeviceBackend::query_stream(int index, void*) {
  synchronize(index);
  return true;
}
void* DeviceBackend::create_event(int, bool) { no_streams(*this, "events"); }
void DeviceBackend::destroy_event(int, void*) { no_streams(*this, "events"); }
void DeviceBackend::record_event(int, void*, void*) { no_streams(*this, "events"); }
void DeviceBackend::synchronize_event(int, void*) { no_streams(*this, "events"); }
bool DeviceBackend::query_event(int, void*) { no_streams(*this, "events"); }
double DeviceBackend::event_elapsed_ms(int, void*, void*) { no_streams(*this, "events"); }
void DeviceBackend::stream_wait_event(int, void*, void*) { no_streams(*this, "events"); }
void DeviceBackend::record_stream(int index, void*, void* stream) {
  if (stream != default_stream(index)) no_streams(*this, "streams besides its default one");
}

DeviceBackend* pinned_host_owner(const void* ptr) {
  for (int t = 0; t < num_device_types(); ++t) {
    DeviceBackend* b = find_device_backend(static_cast<DeviceType>(t));
    if (b != nullptr && b->is_pinned_host(ptr)) return b;
  }
  return nullptr;
}

namespace {
// One per device type. `ptr` is what lookups see: the backend while its provider is active,
// null while init has dropped it. `owner` keeps the backend alive for the process's life either
// way (tensors allocated on it free through it), and the type stays claimed by its provider.
struct BackendSlot {
  std::shared_ptr<DeviceBackend> owner;
  std::atomic<DeviceBackend*> ptr{nullptr};
  std::string provider;
};
std::array<BackendSlot, kMaxDeviceTypes>& slots() {
  static std::array<BackendSlot, kMaxDeviceTypes> s;
  return s;
}
std::mutex& slots_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

void internal::check_device_backends(const StagedRegistration& staged) {
  std::lock_guard<std::mutex> lock(slots_mutex());
  for (const auto& backend : staged.devices) {
    const auto& slot = slots()[static_cast<int>(backend->type())];
    PF_CHECK_T(slot.owner == nullptr, PluginError, "plugin '", staged.provider, "' registers device type '",
               device_type_name(backend->type()), "', which plugin '", slot.provider, "' already provides");
  }
}

void internal::install_device_backends(const StagedRegistration& staged) {
  std::lock_guard<std::mutex> lock(slots_mutex());
  for (const auto& backend : staged.devices) {
    auto& slot = slots()[static_cast<int>(backend->type())];
    slot.owner = backend;
    slot.provider = staged.provider;
    slot.ptr.store(slot.owner.get(), std::memory_order_release);
  }
}

void internal::set_device_backends_active(const std::string& provider, bool active) {
  std::lock_guard<std::mutex> lock(slots_mutex());
  for (auto& slot : slots())
    if (slot.owner != nullptr && slot.provider == provider)
      slot.ptr.store(active ? slot.owner.get() : nullptr, std::memory_order_release);
}

DeviceBackend* find_device_backend(DeviceType t) {
  return slots()[static_cast<int>(t)].ptr.load(std::memory_order_acquire);
}

DeviceBackend& device_backend(Device d) {
  DeviceBackend* b = find_device_backend(d.type);
  if (b == nullptr) {
    std::string dropped_by;
    {
      std::lock_guard<std::mutex> lock(slots_mutex());
      const auto& slot = slots()[static_cast<int>(d.type)];
      if (slot.owner != nullptr) dropped_by = slot.provider;
    }
    if (!dropped_by.empty())
      PF_THROW(DeviceError, "device type '", device_type_name(d.type), "' is not available: plugin '", dropped_by,
               "', which provides it, is not part of the active config (plugflow.init applied a config that does "
               "not list it; tensors created on it before cannot be used until a config lists it again)");
    if (d.type == DeviceType::CUDA)
      PF_THROW(DeviceError, "no CUDA device: the cuda plugin is not loaded (use a config that lists it, "
                            "e.g. plugflow.init('configs/cuda.yaml'); `python -m plugflow.info` shows why it failed)");
    PF_THROW(DeviceError, "device type '", device_type_name(d.type),
             "' is not available: no loaded plugin provides it (is the '", device_type_name(d.type),
             "' plugin in the config?)");
  }
  if (d.type == DeviceType::CPU) {
    PF_CHECK_T(d.index == 0 || d.index == -1, DeviceError, "there is only one CPU device (cpu:0), got ", d.str());
    return *b;
  }
  const int count = b->device_count();
  if (count == 0) {
    std::string reason = b->unavailable_reason();
    if (reason.empty()) reason = "no " + std::string(d.type == DeviceType::CUDA ? "CUDA" : device_type_name(d.type)) + " device";
    PF_THROW(DeviceError, reason);
  }
  PF_CHECK_T(d.index < count, DeviceError, device_type_name(d.type), " device ", d.index, " requested but only ",
             count, " available (valid: 0..", count - 1, ")");
  return *b;
}

}  // namespace plugflow
