// Process-wide runtime: the active config, loaded plugins, threads.
#pragma once
#include <string>
#include <vector>

#include "plugflow/config.h"
#include "plugflow/export.h"

namespace plugflow {

struct LoadedPlugin {
  std::string name;
  std::string version;
  unsigned abi_major = 0, abi_minor = 0;
  std::string path;
  // Whether its kernels, devices and communicators are selectable: false once a config that
  // does not name it was applied (the library stays loaded).
  bool active = true;
};

struct PluginFailure {
  std::string name;
  std::string reason;  // names the file(s) tried and why each failed
};

// Applies a config, replacing the active one: loads its plugins (plugins loaded before that it
// names again are reused, not reloaded), checks kernels.prefer and collectives against them,
// makes the plugins it does not name unselectable (libraries stay loaded for the process's
// life), and sets the kernel preference and thread count. An empty path means PLUGFLOW_CONFIG
// if set, else the compiled-in default. Throws ConfigError / PluginError, and then leaves the
// previous config active.
PF_API void init(const std::string& config_path = "");
PF_API void init_from_config(const Config& config);
// init() with the defaults on first use, once.
PF_API void ensure_initialized();
PF_API bool is_initialized();
PF_API const Config& current_config();

// Loads one plugin by name or path (outside any config); one loaded before is reused and made
// selectable again until the next init. Throws PluginError.
PF_API LoadedPlugin load_plugin(const std::string& name_or_path, const std::vector<std::string>& extra_dirs = {});
PF_API std::vector<LoadedPlugin> loaded_plugins();
PF_API std::vector<PluginFailure> plugin_failures();
// Directories searched for a plugin name, in order.
PF_API std::vector<std::string> plugin_search_path(const std::vector<std::string>& extra_dirs = {});

PF_API void set_num_threads(int n);
PF_API int get_num_threads();

PF_API std::string version();

}  // namespace plugflow
