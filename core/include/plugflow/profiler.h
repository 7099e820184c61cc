// The profiler: records every kernel the dispatcher runs (eager or in an nn.Graph replay),
// with the provider that ran it, its input shapes and the bytes of outputs it allocated, plus
// user ranges (plugflow.profiler.record_function). Off, it costs one relaxed atomic load per
// kernel; on, events go to one process-wide list under a mutex.
#pragma once
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "plugflow/export.h"
#include "plugflow/kernel.h"

namespace plugflow::profiler {

enum class EventKind { Kernel, GraphKernel, Range };

struct Event {
  EventKind kind;
  std::string name;      // op name, or the range's name
  std::string provider;  // the plugin whose kernel ran ("" for ranges)
  std::string device;    // "cpu", "cuda:0"
  int64_t start_ns = 0;  // steady clock, relative to start()
  int64_t end_ns = 0;
  uint64_t thread = 0;   // a small id per recording thread, 0 first
  std::vector<Shape> input_shapes;  // when record_shapes
  int64_t allocated_bytes = 0;      // outputs the dispatcher allocated for this call
};

namespace internal {
PF_API extern std::atomic<bool> enabled;
}
inline bool enabled() { return internal::enabled.load(std::memory_order_relaxed); }

// Starts recording (clears what an earlier session recorded). Throws if already recording.
PF_API void start(bool record_shapes);
// Stops and returns the events in the order they ended.
PF_API std::vector<Event> stop();

// A kernel call, timed around `run`; used by the dispatcher and the graph plan when enabled().
PF_API void record_kernel(EventKind kind, const OpDef& op, Device device, DType key, std::span<const Tensor> inputs,
                          int64_t allocated_bytes, int64_t start_ns, int64_t end_ns);
PF_API int64_t now_ns();

// User ranges; a range is recorded when it closes. Returns a handle for range_end.
PF_API int64_t range_begin();
PF_API void range_end(const std::string& name, int64_t handle);

}  // namespace plugflow::profiler
