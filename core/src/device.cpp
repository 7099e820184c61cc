#include "plugflow/device.h"

#include <array>
#include <atomic>
#include <charconv>
#include <mutex>
#include <string>

#include "plugflow/error.h"
#include "registry_internal.h"

namespace plugflow {

std::string_view device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda";
  }
  return "unknown";
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
  if (type_str == "cpu") {
    d.type = DeviceType::CPU;
  } else if (type_str == "cuda") {
    d.type = DeviceType::CUDA;
  } else {
    PF_THROW(ValueError, "Expected one of cpu, cuda device type at start of device string: ", s);
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
struct BackendSlot {
  std::shared_ptr<DeviceBackend> owner;
  std::atomic<DeviceBackend*> ptr{nullptr};
  std::string provider;
};
std::array<BackendSlot, kNumDeviceTypes>& slots() {
  static std::array<BackendSlot, kNumDeviceTypes> s;
  return s;
}
std::mutex& slots_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

void internal::register_device_backend(std::shared_ptr<DeviceBackend> backend, const std::string& provider) {
  PF_CHECK_T(backend != nullptr, PluginError, "plugin '", provider, "' registered a null device backend");
  std::lock_guard<std::mutex> lock(slots_mutex());
  auto& slot = slots()[static_cast<int>(backend->type())];
  PF_CHECK_T(slot.ptr.load() == nullptr, PluginError, "plugin '", provider, "' registers device type '",
             device_type_name(backend->type()), "', which plugin '", slot.provider, "' already provides");
  slot.owner = std::move(backend);
  slot.provider = provider;
  slot.ptr.store(slot.owner.get(), std::memory_order_release);
}

DeviceBackend* find_device_backend(DeviceType t) {
  return slots()[static_cast<int>(t)].ptr.load(std::memory_order_acquire);
}

DeviceBackend& device_backend(Device d) {
  DeviceBackend* b = find_device_backend(d.type);
  if (b == nullptr) {
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
