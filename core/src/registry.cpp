// Kernel registry, provider preference and the plugin-facing Registrar.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "plugflow/plugin.h"
#include "registry_internal.h"

namespace plugflow {
namespace {
struct Registry {
  std::mutex mutex;
  std::vector<KernelRecord> kernels;
  std::vector<std::string> prefer;
  std::vector<std::function<void(int)>> thread_hooks;
  std::atomic<uint64_t> generation{1};
};
Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace

std::string_view priority_name(Priority p) {
  switch (p) {
    case Priority::Fallback: return "fallback";
    case Priority::Default: return "default";
    case Priority::Optimized: return "optimized";
  }
  return "unknown";
}

void Registrar::kernel(const std::string& op, DeviceType device, std::initializer_list<DType> dtypes, KernelFn fn,
                       Priority priority) {
  PF_CHECK_T(try_find_op(op) != nullptr, PluginError, "plugin '", provider_, "' registers a kernel for unknown op '",
             op, "'");
  PF_CHECK_T(fn != nullptr, PluginError, "plugin '", provider_, "' registers a null kernel for op '", op, "'");
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  for (DType t : dtypes) r.kernels.push_back(KernelRecord{op, device, t, provider_, priority, fn});
  r.generation.fetch_add(1);
}

void Registrar::device(std::shared_ptr<DeviceBackend> backend) {
  internal::register_device_backend(std::move(backend), provider_);
}

void Registrar::on_set_num_threads(std::function<void(int)> hook) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.thread_hooks.push_back(std::move(hook));
}

std::vector<KernelRecord> registered_kernels() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  return r.kernels;
}

namespace internal {

void set_kernel_preference(std::vector<std::string> providers) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.prefer = std::move(providers);
  r.generation.fetch_add(1);
}

std::vector<std::string> kernel_preference() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  return r.prefer;
}

void run_thread_hooks(int n) {
  std::vector<std::function<void(int)>> hooks;
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    hooks = r.thread_hooks;
  }
  for (auto& h : hooks) h(n);
}

uint64_t registry_generation() { return registry().generation.load(std::memory_order_acquire); }

// The dispatcher's choice for one key (called on a cache miss, under no lock).
const KernelRecord* choose_kernel(const std::vector<KernelRecord>& candidates, const std::vector<std::string>& prefer) {
  const KernelRecord* best = nullptr;
  size_t best_rank = SIZE_MAX;
  for (const auto& k : candidates) {
    const auto it = std::find(prefer.begin(), prefer.end(), k.provider);
    const size_t rank = it == prefer.end() ? prefer.size() : static_cast<size_t>(it - prefer.begin());
    if (best == nullptr || rank < best_rank || (rank == best_rank && k.priority > best->priority)) {
      best = &k;
      best_rank = rank;
    }
  }
  return best;
}

}  // namespace internal
}  // namespace plugflow
