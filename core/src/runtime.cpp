// The process-wide runtime: which config is active, which optional plugins failed, and the
// thread count that plugins apply to their thread pools.
//
// Applying a config replaces the active one. Its plugins are loaded (or reused), the names in
// kernels.prefer and collectives are checked against what they registered, and only then do
// the plugins it does not name become unselectable; a failure leaves the previous config active.
#include "plugflow/runtime.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "plugflow/error.h"
#include "registry_internal.h"
#include "runtime_internal.h"

#ifndef PLUGFLOW_VERSION
#error "PLUGFLOW_VERSION must be defined by the build (core/meson.build)"
#endif

namespace plugflow {
namespace {

struct RuntimeState {
  // Recursive: ensure_initialized() takes it and then calls init(), which takes it again.
  std::recursive_mutex mutex;
  Config config;
  std::vector<PluginFailure> failures;
  std::atomic<bool> initialized{false};
};

RuntimeState& state() {
  // Never destroyed: Python may still ask for the config while the process exits, after
  // static destructors would have run.
  static RuntimeState* s = new RuntimeState();
  return *s;
}

// 0: nobody set a count yet, get_num_threads() answers with the machine's.
std::atomic<int> g_num_threads{0};

// CPUs this process may run on: the affinity mask (taskset, container cpusets) when it can
// be read, else the machine's count.
int machine_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

// A config's `threads: 0`: OMP_NUM_THREADS when it is a positive count (as PyTorch; launchers
// set it to 1 when several processes share the cores), else one per core.
int default_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end == '\0' && n > 0 && n <= 65536) return static_cast<int>(n);
  }
  return machine_threads();
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string list_or_none(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// What loading a config's plugins gave.
struct LoadResult {
  std::vector<std::string> providers;   // provider names of its loaded plugins, in config order
  std::vector<PluginFailure> failures;  // its optional plugins that did not load
  std::vector<std::string> not_loaded;  // the names those failed entries stand for
  // Entries whose plugin declares a provider name other than the entry's: {entry, file, declared}.
  struct Renamed {
    std::string entry, file, declared;
  };
  std::vector<Renamed> renamed;
};

LoadResult load_config_plugins(const Config& config) {
  LoadResult out;
  for (const auto& spec : config.plugins) {
    try {
      const LoadedPlugin p = load_plugin(spec.name, config.plugin_path);
      out.providers.push_back(p.name);
      if (const std::string entry = internal::plugin_name_of(spec.name); entry != p.name)
        out.renamed.push_back({entry, std::filesystem::path(p.path).filename().string(), p.name});
    } catch (const PluginError& e) {
      if (!spec.optional) {
        // Marking the plugin optional is advice for a user's own file, not for the built-in one.
        const bool own_file = config.source != internal::kDefaultConfigSource;
        PF_THROW(PluginError, e.what(), "\n(plugin '", spec.name, "' is required by ", config.source,
                 own_file ? "; mark it {name: " + spec.name + ", optional: true} to run without it)" : ")");
      }
      out.failures.push_back(PluginFailure{spec.name, e.what()});
      out.not_loaded.push_back(internal::plugin_name_of(spec.name));
    }
  }
  return out;
}

// Whether a provider's registrations are selectable under the config being applied: those of
// its plugins, and those registered in process (not by a plugin), which no config drops.
class Selectable {
 public:
  explicit Selectable(const LoadResult& loaded) : loaded_(loaded) {
    for (const auto& p : loaded_plugins()) plugins_.push_back(p.name);
  }
  bool operator()(const std::string& provider) const {
    return contains(loaded_.providers, provider) || !contains(plugins_, provider);
  }
  // A plugin loaded earlier in the process that this config does not list.
  bool dropped_plugin(const std::string& provider) const { return contains(plugins_, provider) && !(*this)(provider); }

 private:
  const LoadResult& loaded_;
  std::vector<std::string> plugins_;
};

// Every kernels.prefer name must be a provider whose kernels the config makes selectable, or
// stand for an optional plugin of the config that did not load.
void check_kernel_preference(const Config& config, const LoadResult& loaded) {
  const Selectable selectable(loaded);
  std::vector<std::string> providers;
  for (const auto& p : internal::kernel_providers())
    if (selectable(p)) providers.push_back(p);
  for (size_t i = 0; i < config.kernel_prefer.size(); ++i) {
    const std::string& name = config.kernel_prefer[i];
    if (contains(providers, name) || contains(loaded.not_loaded, name)) continue;
    std::string problem;
    std::optional<std::string> hint;
    if (contains(loaded.providers, name)) {
      problem = "plugin '" + name +
                "' is loaded but registers no kernels (kernel providers: " + list_or_none(providers) + ")";
    } else {
      problem = "no loaded plugin provides kernels under the name '" + name + "'";
      if (selectable.dropped_plugin(name))
        problem += " (plugin '" + name + "' is loaded, but this config does not list it)";
      problem += "; kernel providers: " + list_or_none(providers);
      for (const auto& r : loaded.renamed)
        if (r.entry == name) {
          problem += " (" + r.file + " declares itself '" + r.declared + "')";
          hint = r.declared;
        }
    }
    if (!hint) hint = internal::closest_match(name, providers);
    if (hint) problem += "; did you mean '" + *hint + "'?";
    internal::config_key_error(config, "kernels.prefer[" + std::to_string(i) + "]", problem);
  }
}

// A collectives value the file sets must name a communicator that one of the config's plugins
// provides for that device type, unless it names an optional plugin that did not load. The
// default's values are not checked: init_process_group loads their plugin when first used.
void check_collective(const Config& config, const LoadResult& loaded, DeviceType device, const std::string& value) {
  const std::string key = "collectives." + std::string(device_type_name(device));
  if (!config.lines.contains(key)) return;
  const Selectable selectable(loaded);
  std::vector<internal::CommunicatorRegistration> registered;
  std::vector<std::string> offered, for_device;
  for (const auto& c : internal::communicator_registrations()) {
    if (!selectable(c.provider)) continue;
    registered.push_back(c);
    offered.push_back(c.backend + " (" + std::string(device_type_name(c.device)) + ")");
    if (c.device == device) for_device.push_back(c.backend);
  }
  const std::string available = "communicators: " + list_or_none(offered);
  for (const auto& c : registered) {
    if (c.backend != value) continue;
    if (c.device == device) return;
    const std::string serves(device_type_name(c.device)), wanted(device_type_name(device));
    internal::config_key_error(config, key,
                               "communicator '" + value + "' (plugin '" + c.provider + "') serves " + serves +
                                   " tensors, not " + wanted + " (" + available + ")");
  }
  if (contains(loaded.not_loaded, value)) return;
  std::string problem = contains(loaded.providers, value)
                            ? "plugin '" + value + "' is loaded but provides no communicator named '" + value + "'"
                            : "no plugin of this config provides a communicator named '" + value +
                                  "' (list the plugin that does in plugins)";
  problem += "; " + available;
  if (auto hint = internal::closest_match(value, for_device)) problem += "; did you mean '" + *hint + "'?";
  internal::config_key_error(config, key, problem);
}

// Every kernels.cpu_fallback name must be a device type other than cpu that a plugin of the
// config registered (the device types exist only once their plugins loaded).
std::vector<DeviceType> check_cpu_fallback(const Config& config) {
  std::vector<DeviceType> out;
  for (size_t i = 0; i < config.kernel_cpu_fallback.size(); ++i) {
    const std::string& name = config.kernel_cpu_fallback[i];
    const auto type = find_device_type(name);
    std::vector<std::string> known;
    for (int t = 1; t < num_device_types(); ++t) known.emplace_back(device_type_name(static_cast<DeviceType>(t)));
    if (name == "cpu")
      internal::config_key_error(config, "kernels.cpu_fallback[" + std::to_string(i) + "]",
                                 "cpu cannot fall back to itself");
    if (!type) {
      std::string problem = "no loaded plugin registers a device type '" + name + "' (device types: cpu, " +
                            list_or_none(known) + ")";
      if (auto hint = internal::closest_match(name, known)) problem += "; did you mean '" + *hint + "'?";
      internal::config_key_error(config, "kernels.cpu_fallback[" + std::to_string(i) + "]", problem);
    }
    out.push_back(*type);
  }
  return out;
}

// Makes exactly the plugins in `active` selectable; providers registered in process (not by a
// plugin) stay as they are.
void set_active_plugins(const std::vector<std::string>& active) {
  for (const auto& p : loaded_plugins()) internal::set_provider_active(p.name, contains(active, p.name));
}

}  // namespace

void init(const std::string& config_path) {
  Config config;
  if (!config_path.empty()) {
    config = load_config_file(config_path);
  } else if (const char* env = std::getenv("PLUGFLOW_CONFIG"); env != nullptr && *env != '\0') {
    try {
      config = load_config_file(env);
    } catch (const ConfigError& e) {
      PF_THROW(ConfigError, e.what(), " (the config named by PLUGFLOW_CONFIG)");
    }
  } else {
    config = default_config();
  }
  init_from_config(config);
}

void init_from_config(const Config& config) {
  RuntimeState& st = state();
  std::lock_guard lock(st.mutex);

  std::vector<std::string> was_active;
  for (const auto& p : loaded_plugins())
    if (p.active) was_active.push_back(p.name);
  LoadResult loaded;
  std::vector<DeviceType> fallback;
  try {
    loaded = load_config_plugins(config);
    check_kernel_preference(config, loaded);
    check_collective(config, loaded, DeviceType::CPU, config.collective_cpu);
    check_collective(config, loaded, DeviceType::CUDA, config.collective_cuda);
    fallback = check_cpu_fallback(config);
  } catch (...) {
    set_active_plugins(was_active);  // loading reactivated reused plugins and added new ones
    throw;
  }
  set_active_plugins(loaded.providers);

  Config applied = config;
  // Without kernels.prefer, providers rank in the order the config lists the plugins.
  if (applied.kernel_prefer.empty()) applied.kernel_prefer = loaded.providers;
  internal::set_kernel_preference(applied.kernel_prefer);
  internal::set_cpu_fallback(fallback);
  set_num_threads(config.threads > 0 ? config.threads : default_threads());

  st.config = std::move(applied);
  st.failures = std::move(loaded.failures);
  st.initialized.store(true, std::memory_order_release);
}

void ensure_initialized() {
  RuntimeState& st = state();
  if (st.initialized.load(std::memory_order_acquire)) return;
  std::lock_guard lock(st.mutex);
  // A failed init leaves this false, so the next call reports the error again.
  if (!st.initialized.load(std::memory_order_acquire)) init();
}

bool is_initialized() { return state().initialized.load(std::memory_order_acquire); }

const Config& current_config() {
  ensure_initialized();
  return state().config;
}

std::vector<PluginFailure> plugin_failures() {
  RuntimeState& st = state();
  std::lock_guard lock(st.mutex);
  return st.failures;
}

void set_num_threads(int n) {
  PF_CHECK_T(n > 0, ValueError, "set_num_threads: expected a positive number of threads, got ", n,
             " (a config's `threads: 0` means one per core)");
  g_num_threads.store(n, std::memory_order_relaxed);
  internal::run_thread_hooks(n);
}

int get_num_threads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : machine_threads();
}

std::string version() { return PLUGFLOW_VERSION; }

}  // namespace plugflow
