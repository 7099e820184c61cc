// Kernel registry, provider preference, the plugin-facing Registrar and the all-or-nothing
// commit of a provider's registration.
//
// A Registrar only stages: each call validates its arguments (a plugin error names the plugin,
// the op and what is wrong) and appends to a StagedRegistration. register_provider commits
// the staged kernels, device backends, communicators and hooks once the plugin's register
// function has returned, so a registration that throws halfway leaves nothing live.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "plugflow/plugin.h"
#include "registry_internal.h"
#include "runtime_internal.h"

namespace plugflow {
namespace {

struct Provider {
  std::string name;
  bool active = true;
  std::vector<KernelRecord> kernels;
};

struct Registry {
  std::mutex mutex;
  std::vector<Provider> providers;  // registration order: ties in the dispatcher go to the first
  std::vector<std::string> prefer;
  std::vector<std::function<void(int)>> thread_hooks;
  std::atomic<uint64_t> generation{1};
};

Registry& registry() {
  static Registry r;
  return r;
}

// Serializes commits, so that the checks of one commit stay true until it has installed
// everything. Not held while a plugin's register function runs (it may load another plugin).
std::mutex& commit_mutex() {
  static std::mutex m;
  return m;
}

Provider* find_provider(Registry& r, const std::string& name) {
  for (auto& p : r.providers)
    if (p.name == name) return &p;
  return nullptr;
}

bool valid_device_type(DeviceType t) { return static_cast<int>(t) < num_device_types(); }

std::string device_types_list() {
  std::string out;
  for (int i = 0; i < num_device_types(); ++i)
    out += (i ? ", " : "") + std::string(device_type_name(static_cast<DeviceType>(i)));
  return out;
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

Registrar::Registrar(internal::StagedRegistration& staged) : provider_(staged.provider), staged_(staged) {}

void Registrar::kernel(const std::string& op, DeviceType device, std::initializer_list<DType> dtypes, KernelFn fn,
                       Priority priority) {
  PF_CHECK_T(!op.empty(), PluginError, "plugin '", provider_, "' registers a kernel with an empty op name");
  if (try_find_op(op) == nullptr) {
    std::string hint;
    if (auto near = internal::closest_match(op, op_names())) hint = "; did you mean '" + *near + "'?";
    PF_THROW(PluginError, "plugin '", provider_, "' registers a kernel for op '", op,
             "', which is not in plugflow's op catalog (plugins implement the core's ops; they cannot add new ones)",
             hint);
  }
  const std::string what = "plugin '" + provider_ + "' registers a kernel for op '" + op + "'";
  PF_CHECK_T(valid_device_type(device), PluginError, what, " on device type ", static_cast<int>(device),
             ", which does not exist (device types: ", device_types_list(), ")");
  const std::string where = what + " on " + std::string(device_type_name(device));
  PF_CHECK_T(dtypes.size() > 0, PluginError, where, " with no dtypes");
  PF_CHECK_T(fn != nullptr, PluginError, where, ": the kernel function is null");
  const int prio = static_cast<int>(priority);
  PF_CHECK_T(prio >= static_cast<int>(Priority::Fallback) && prio <= static_cast<int>(Priority::Optimized), PluginError,
             where, " with priority ", prio, ", which is not a priority (fallback = 0, default = 1, ",
             "optimized = 2)");
  for (DType t : dtypes) {
    PF_CHECK_T(static_cast<int>(t) < kNumDTypes, PluginError, where, " for dtype ", static_cast<int>(t),
               ", which is not a plugflow dtype (0 to ", kNumDTypes - 1, ")");
    for (const auto& k : staged_.kernels)
      PF_CHECK_T(!(k.op == op && k.device == device && k.dtype == t && k.priority == priority), PluginError, where,
                 " for ", dtype_name(t), " twice with priority ", priority_name(priority),
                 " (the dispatcher could not tell them apart)");
    staged_.kernels.push_back(KernelRecord{op, device, t, provider_, priority, fn});
  }
}

DeviceType Registrar::device_type(const std::string& name) {
  try {
    return claim_device_type(name);
  } catch (const Error& e) {
    PF_THROW(PluginError, "plugin '", provider_, "': ", e.what());
  }
}

void Registrar::device(std::shared_ptr<DeviceBackend> backend) {
  PF_CHECK_T(backend != nullptr, PluginError, "plugin '", provider_, "' registers a null device backend");
  const DeviceType type = backend->type();
  PF_CHECK_T(valid_device_type(type), PluginError, "plugin '", provider_, "' registers a backend for device type ",
             static_cast<int>(type), ", which does not exist (device types: ", device_types_list(), ")");
  for (const auto& d : staged_.devices)
    PF_CHECK_T(d->type() != type, PluginError, "plugin '", provider_, "' registers two backends for device type '",
               device_type_name(type), "'");
  staged_.devices.push_back(std::move(backend));
}

void Registrar::communicator(const std::string& backend, DeviceType device, CommunicatorFactory factory) {
  PF_CHECK_T(!backend.empty(), PluginError, "plugin '", provider_, "' registers a communicator with an empty name");
  PF_CHECK_T(valid_device_type(device), PluginError, "plugin '", provider_, "' registers communicator '", backend,
             "' for device type ", static_cast<int>(device),
             ", which does not exist (device types: ", device_types_list(), ")");
  PF_CHECK_T(static_cast<bool>(factory), PluginError, "plugin '", provider_, "' registers communicator '", backend,
             "' without a factory");
  for (const auto& c : staged_.communicators)
    PF_CHECK_T(c.backend != backend, PluginError, "plugin '", provider_, "' registers communicator '", backend,
               "' twice");
  staged_.communicators.push_back(internal::StagedCommunicator{backend, device, std::move(factory)});
}

void Registrar::on_set_num_threads(std::function<void(int)> hook) {
  PF_CHECK_T(static_cast<bool>(hook), PluginError, "plugin '", provider_, "' registers an empty thread-count hook");
  staged_.thread_hooks.push_back(std::move(hook));
}

std::vector<KernelRecord> registered_kernels() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<KernelRecord> out;
  for (const auto& p : r.providers)
    if (p.active) out.insert(out.end(), p.kernels.begin(), p.kernels.end());
  return out;
}

namespace internal {

void register_provider(const std::string& provider, const std::function<void(Registrar&)>& fill) {
  PF_CHECK_T(!provider.empty(), PluginError, "a provider needs a name");
  StagedRegistration staged{provider, {}, {}, {}, {}};
  Registrar registrar(staged);
  fill(registrar);

  std::lock_guard commit_lock(commit_mutex());
  auto& r = registry();
  {
    std::lock_guard lock(r.mutex);
    PF_CHECK_T(find_provider(r, provider) == nullptr, PluginError, "a provider named '", provider,
               "' is already registered; provider names must be unique");
  }
  // Every check first, then every install: a conflict must not leave part of it live.
  check_device_backends(staged);
  check_communicators(staged);
  install_device_backends(staged);
  install_communicators(staged);
  std::lock_guard lock(r.mutex);
  r.providers.push_back(Provider{provider, true, std::move(staged.kernels)});
  for (auto& h : staged.thread_hooks) r.thread_hooks.push_back(std::move(h));
  r.generation.fetch_add(1);
}

void set_provider_active(const std::string& provider, bool active) {
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    Provider* p = find_provider(r, provider);
    if (p == nullptr || p->active == active) return;
    p->active = active;
    if (!p->kernels.empty()) r.generation.fetch_add(1);
  }
  set_device_backends_active(provider, active);
  set_communicators_active(provider, active);
}

bool provider_active(const std::string& provider) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  const Provider* p = find_provider(r, provider);
  return p != nullptr && p->active;
}

std::vector<std::string> kernel_providers() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& p : r.providers)
    if (!p.kernels.empty()) out.push_back(p.name);
  return out;
}

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
