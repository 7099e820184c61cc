#include "plugflow/profiler.h"

#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "plugflow/dispatch.h"
#include "plugflow/error.h"

namespace plugflow::profiler {

namespace internal {
std::atomic<bool> enabled{false};
}

namespace {

struct Session {
  std::mutex mutex;
  bool record_shapes = false;
  int64_t origin_ns = 0;
  std::vector<Event> events;
  std::map<std::thread::id, uint64_t> threads;
  // chosen_provider walks the registry: looked up once per (op, device type, dtype).
  std::map<std::tuple<const OpDef*, DeviceType, DType>, std::string> providers;
};

Session& session() {
  static Session* s = new Session();  // never destroyed: kernels may run in static destructors
  return *s;
}

int64_t clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t thread_number(Session& s) {  // under s.mutex
  auto [it, fresh] = s.threads.emplace(std::this_thread::get_id(), s.threads.size());
  return it->second;
}

}  // namespace

int64_t now_ns() { return clock_ns(); }

void start(bool record_shapes) {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  PF_CHECK(!internal::enabled.load(), "the profiler is already recording (profilers cannot be nested)");
  s.events.clear();
  s.threads.clear();
  s.record_shapes = record_shapes;
  s.origin_ns = clock_ns();
  internal::enabled.store(true);
}

std::vector<Event> stop() {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  internal::enabled.store(false);
  std::vector<Event> out;
  out.swap(s.events);
  return out;
}

void record_kernel(EventKind kind, const OpDef& op, Device device, DType key, std::span<const Tensor> inputs,
                   int64_t allocated_bytes, int64_t start_ns, int64_t end_ns) {
  Session& s = session();
  Event e;
  e.kind = kind;
  e.name = op.name;
  e.device = device.str();
  e.allocated_bytes = allocated_bytes;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!internal::enabled.load(std::memory_order_relaxed)) return;  // stopped while it ran
  if (s.record_shapes) {
    e.input_shapes.reserve(inputs.size());
    for (const auto& t : inputs) e.input_shapes.push_back(t.sizes());
  }
  auto key_tuple = std::make_tuple(&op, device.type, key);
  auto it = s.providers.find(key_tuple);
  if (it == s.providers.end()) it = s.providers.emplace(key_tuple, chosen_provider(op, device.type, key)).first;
  e.provider = it->second;
  e.start_ns = start_ns - s.origin_ns;
  e.end_ns = end_ns - s.origin_ns;
  e.thread = thread_number(s);
  s.events.push_back(std::move(e));
}

int64_t range_begin() { return clock_ns(); }

void range_end(const std::string& name, int64_t handle) {
  const int64_t end = clock_ns();
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!internal::enabled.load(std::memory_order_relaxed)) return;
  Event e;
  e.kind = EventKind::Range;
  e.name = name;
  e.start_ns = handle - s.origin_ns;
  e.end_ns = end - s.origin_ns;
  e.thread = thread_number(s);
  s.events.push_back(std::move(e));
}

}  // namespace plugflow::profiler
