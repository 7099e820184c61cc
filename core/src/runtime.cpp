// The process-wide runtime: which config is active, which optional plugins failed, and the
// thread count that plugins apply to their thread pools.
#include "plugflow/runtime.h"

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "plugflow/error.h"
#include "registry_internal.h"

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

constexpr const char* kDefaultSource = "<default cpu.yaml>";

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
    config = parse_config(default_config_text(), kDefaultSource);
  }
  init_from_config(config);
}

void init_from_config(const Config& config) {
  RuntimeState& st = state();
  std::lock_guard lock(st.mutex);

  std::vector<PluginFailure> failures;
  std::vector<std::string> providers;
  for (const auto& spec : config.plugins) {
    try {
      providers.push_back(load_plugin(spec.name, config.plugin_path).name);
    } catch (const PluginError& e) {
      if (!spec.optional) {
        // Marking the plugin optional is advice for a user's own file, not for the built-in one.
        const bool own_file = config.source != kDefaultSource;
        PF_THROW(PluginError, e.what(), "\n(plugin '", spec.name, "' is required by ", config.source,
                 own_file ? "; mark it {name: " + spec.name + ", optional: true} to run without it)" : ")");
      }
      failures.push_back(PluginFailure{spec.name, e.what()});
    }
  }

  Config applied = config;
  // Without kernels.prefer, providers rank in the order the config lists the plugins.
  if (applied.kernel_prefer.empty()) applied.kernel_prefer = providers;
  internal::set_kernel_preference(applied.kernel_prefer);
  set_num_threads(config.threads > 0 ? config.threads : machine_threads());

  st.config = std::move(applied);
  st.failures = std::move(failures);
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
