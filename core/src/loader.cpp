// The plugin loader: finds a plugin library, loads it with Boost.DLL, checks its entry and
// ABI, and lets it register its kernels, devices and communicators.
//
// Loading choices:
//  - RTLD_NOW: a plugin with an unresolved symbol fails here, with the dynamic loader's
//    message, instead of crashing at the first call into the missing function.
//  - RTLD_LOCAL: plugins never link against each other, so none of them needs another's
//    symbols; keeping them local stops two plugins that carry the same internal symbol (say,
//    two builds of a helper library) from binding to each other's copy. They reach the core
//    through their DT_NEEDED entry on libplugflow_core.so, which resolves to the instance that
//    is already loaded.
//  - Libraries are never unloaded: kernels, device backends and hooks registered by a plugin
//    point into its code for the rest of the process. A config that no longer names a plugin
//    makes its registrations unselectable instead (runtime.cpp).
//  - Registration is all-or-nothing (internal::register_provider): the plugin fills a staging
//    Registrar, committed only when its register function succeeds.
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <boost/dll/shared_library.hpp>

#include "plugflow/error.h"
#include "plugflow/plugin.h"
#include "plugflow/runtime.h"
#include "registry_internal.h"
#include "runtime_internal.h"

#ifndef PLUGFLOW_BUILD_PLUGIN_DIRS
#define PLUGFLOW_BUILD_PLUGIN_DIRS ""
#endif

namespace plugflow {
namespace {

namespace fs = std::filesystem;

// The ABI 2.0 entry ends with register_plugin; a plugin built for 2.0 must provide all of it.
// Fields added by later minors go after it and are read only when struct_size covers them.
constexpr size_t kEntrySizeV2_0 = offsetof(PlugflowPluginEntry, register_plugin) + sizeof(void*);
// struct_size, abi_major and abi_minor come first in every ABI version, so they can be read
// before the rest of the layout is known to match.
constexpr size_t kEntryHeaderSize = offsetof(PlugflowPluginEntry, name);

struct LoaderState {
  std::recursive_mutex mutex;  // recursive: a plugin's registration may (oddly) load another
  std::vector<LoadedPlugin> loaded;
  // Files whose registration failed, with the message. Nothing of a failed registration was
  // committed, but the library's own state after it is unknown (its static objects ran half a
  // registration), so a retry reports the first failure instead of calling it again.
  std::map<std::string, std::string> failed_registration;
  // Leaked on purpose (see the top of the file): destroying this at exit would dlclose plugins
  // whose objects other static destructors still reference.
  std::vector<boost::dll::shared_library>* libraries = new std::vector<boost::dll::shared_library>();
};

LoaderState& state() {
  static LoaderState* s = new LoaderState();  // never destroyed, for the same reason
  return *s;
}

std::vector<std::string> split_path_list(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(':', start);
    if (end == std::string_view::npos) end = list.size();
    if (end > start) out.emplace_back(list.substr(start, end - start));  // "a::b" has no empty entry
    start = end + 1;
  }
  return out;
}

// The directory holding libplugflow_core.so, found from the address of a function in it.
std::string core_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&core_library_dir), &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::path(info.dli_fname), ec);
  if (ec) p = fs::path(info.dli_fname);
  return p.parent_path().string();
}

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || s.ends_with(".so") || s.find(".so.") != std::string::npos;
}

std::string canonical_or_same(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::canonical(path, ec);
  return ec ? fs::absolute(path, ec).lexically_normal().string() : p.string();
}

std::string version_str(unsigned major, unsigned minor) { return std::to_string(major) + "." + std::to_string(minor); }

const char* compiler_name(uint32_t family) {
  switch (family) {
    case PLUGFLOW_COMPILER_GCC: return "GCC";
    case PLUGFLOW_COMPILER_CLANG: return "Clang";
    default: return "an unknown compiler";
  }
}

const char* stdlib_name(uint32_t family) {
  switch (family) {
    case PLUGFLOW_STDLIB_LIBSTDCXX: return "libstdc++";
    case PLUGFLOW_STDLIB_LIBCXX: return "libc++";
    default: return "an unknown C++ standard library";
  }
}

// What differs between a plugin's build and the core's, or "" when they can share C++ types.
// The rules: the same standard library (its types' layouts) with the same dual ABI, a
// standard-library release no newer than the core's (the process has the core's library), an
// Itanium-ABI compiler (GCC or Clang: their objects mix) in C++20 or later, and the same sizes
// of the types both sides lay out (a plugin built against another plugflow's headers).
std::string fingerprint_mismatch(const PlugflowBuildFingerprint& plugin) {
  const PlugflowBuildFingerprint core = build_fingerprint();
  if (plugin.struct_size < sizeof(PlugflowBuildFingerprint))
    return "its build fingerprint has " + std::to_string(plugin.struct_size) + " bytes, this core's " +
           std::to_string(sizeof(PlugflowBuildFingerprint));
  std::vector<std::string> diffs;
  auto built_with = [](uint32_t family, uint32_t major, uint32_t minor) {
    return std::string(compiler_name(family)) + " " + std::to_string(major) + "." + std::to_string(minor);
  };
  if (plugin.compiler_family != PLUGFLOW_COMPILER_GCC && plugin.compiler_family != PLUGFLOW_COMPILER_CLANG)
    diffs.push_back("the plugin was compiled with " + built_with(plugin.compiler_family, plugin.compiler_major,
                                                                 plugin.compiler_minor) +
                    ", the core with " + built_with(core.compiler_family, core.compiler_major, core.compiler_minor) +
                    " (GCC or Clang are supported)");
  if (plugin.stdlib_family != core.stdlib_family)
    diffs.push_back(std::string("the plugin uses ") + stdlib_name(plugin.stdlib_family) + ", the core " +
                    stdlib_name(core.stdlib_family));
  else if (plugin.stdlib_release > core.stdlib_release)
    diffs.push_back(std::string("the plugin was built with ") + stdlib_name(plugin.stdlib_family) + " release " +
                    std::to_string(plugin.stdlib_release) + ", newer than the core's " +
                    std::to_string(core.stdlib_release));
  if (plugin.cxx11_abi != core.cxx11_abi)
    diffs.push_back("the plugin was built with _GLIBCXX_USE_CXX11_ABI=" + std::to_string(plugin.cxx11_abi) +
                    ", the core with " + std::to_string(core.cxx11_abi));
  if (plugin.cplusplus < 2020)
    diffs.push_back("the plugin was built as C++ " + std::to_string(plugin.cplusplus) + " (C++20 is needed)");
  auto size = [&](const char* what, uint32_t p, uint32_t c) {
    if (p != c)
      diffs.push_back(std::string("sizeof(") + what + ") is " + std::to_string(p) + " in the plugin, " +
                      std::to_string(c) + " in the core");
  };
  size("TensorImpl", plugin.sizeof_tensor_impl, core.sizeof_tensor_impl);
  size("KernelContext", plugin.sizeof_kernel_context, core.sizeof_kernel_context);
  size("Attrs", plugin.sizeof_attrs, core.sizeof_attrs);
  size("AttrValue", plugin.sizeof_attr_value, core.sizeof_attr_value);
  size("Registrar", plugin.sizeof_registrar, core.sizeof_registrar);
  size("std::string", plugin.sizeof_std_string, core.sizeof_std_string);
  size("std::shared_ptr", plugin.sizeof_shared_ptr, core.sizeof_shared_ptr);
  std::string out;
  for (const auto& d : diffs) out += (out.empty() ? "" : "; ") + d;
  return out;
}

// Every load error names the plugin, the file and the reason.
[[noreturn]] void fail(const std::string& plugin, const std::string& file, const std::string& reason) {
  PF_THROW(PluginError, "cannot load plugin '", plugin, "' from ", file, ": ", reason);
}

// Resolves a bare plugin name to the first libplugflow_<name>.so on the search path.
std::string find_plugin_file(const std::string& name, const std::vector<std::string>& extra_dirs) {
  const std::string file = "libplugflow_" + name + ".so";
  const std::vector<std::string> dirs = plugin_search_path(extra_dirs);
  std::error_code ec;
  for (const auto& dir : dirs) {
    const fs::path candidate = fs::path(dir) / file;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  std::string msg = "cannot load plugin '" + name + "': " + file + " was not found in any of these directories:";
  for (const auto& dir : dirs) {
    msg += "\n  " + dir;
    if (!fs::is_directory(dir, ec)) msg += " (does not exist)";
  }
  msg +=
      "\nAdd its directory to the config's plugin_path or to PLUGFLOW_PLUGIN_PATH (colon-separated), "
      "or give the library's path.";
  throw PluginError(msg);
}

LoadedPlugin load_locked(const std::string& name_or_path, const std::vector<std::string>& extra_dirs) {
  LoaderState& st = state();
  const bool is_path = looks_like_path(name_or_path);
  const std::string plugin = internal::plugin_name_of(name_or_path);

  // A second request for a loaded plugin returns its record: by provider name for bare names
  // (the search path may have changed since), by the resolved file for paths. Asking for it
  // again makes it selectable again if a config had dropped it.
  auto reuse = [](const LoadedPlugin& p) {
    internal::set_provider_active(p.name, true);
    return p;
  };
  if (!is_path)
    for (const auto& p : st.loaded)
      if (p.name == name_or_path) return reuse(p);

  std::string file;
  if (is_path) {
    file = internal::expand_user(name_or_path);
    std::error_code ec;
    if (!fs::exists(file, ec)) fail(plugin, file, "the file does not exist");
    if (!fs::is_regular_file(file, ec)) fail(plugin, file, "not a regular file");
  } else {
    file = find_plugin_file(name_or_path, extra_dirs);
  }
  file = canonical_or_same(file);
  for (const auto& p : st.loaded)
    if (p.path == file) return reuse(p);
  if (auto it = st.failed_registration.find(file); it != st.failed_registration.end())
    fail(plugin, file, it->second + " (earlier in this process; restart it to try again)");

  // dlopen; dlerror() still holds the dynamic loader's message after Boost's failed load.
  boost::dll::shared_library lib;
  boost::dll::fs::error_code load_ec;
  dlerror();  // clear any stale message
  lib.load(file, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, load_ec);
  if (load_ec || !lib.is_loaded()) {
    const char* why = dlerror();
    fail(plugin, file, std::string("dlopen failed: ") + (why != nullptr ? why : load_ec.message()));
  }
  // Kept from here on, whatever happens next: the library's static constructors have run and
  // may have handed the core pointers into it.
  st.libraries->push_back(lib);

  if (!lib.has(PLUGFLOW_ENTRY_SYMBOL))
    fail(plugin, file,
         "no entry symbol '" PLUGFLOW_ENTRY_SYMBOL
         "'; is it a plugflow plugin? A plugin defines its entry with "
         "PLUGFLOW_PLUGIN(name, version) { ... } from <plugflow/plugin.h>");

  // ABI 2 exports the entry function itself. ABI 1 plugins exported a Boost.DLL alias: a data
  // symbol holding the function's address. Calling data would crash, so the symbol's ELF type
  // decides; an ABI 1 entry still starts with its version, refused below with the usual message.
  using EntryFn = const PlugflowPluginEntry*();
  void* symbol = &lib.get<char>(PLUGFLOW_ENTRY_SYMBOL);
  if (symbol == nullptr) fail(plugin, file, "the entry symbol '" PLUGFLOW_ENTRY_SYMBOL "' is null");
  EntryFn* entry_fn = reinterpret_cast<EntryFn*>(symbol);
  Dl_info info{};
  void* elf_symbol = nullptr;  // the symbol's ElfW(Sym)
  if (dladdr1(symbol, &info, &elf_symbol, RTLD_DL_SYMENT) != 0 && elf_symbol != nullptr &&
      ELF64_ST_TYPE(static_cast<const ElfW(Sym)*>(elf_symbol)->st_info) == STT_OBJECT) {
    entry_fn = *reinterpret_cast<EntryFn**>(symbol);
    if (entry_fn == nullptr) fail(plugin, file, "the entry symbol '" PLUGFLOW_ENTRY_SYMBOL "' is null");
  }
  const PlugflowPluginEntry* entry = nullptr;
  try {
    entry = entry_fn();
  } catch (const std::exception& e) {
    fail(plugin, file, std::string("its entry function threw: ") + e.what());
  } catch (...) {
    fail(plugin, file, "its entry function threw an unknown exception");
  }
  if (entry == nullptr) fail(plugin, file, "its entry function returned null");

  const std::string core_abi = version_str(PLUGFLOW_ABI_MAJOR, PLUGFLOW_ABI_MINOR);
  if (entry->struct_size < kEntryHeaderSize)
    fail(plugin, file,
         "entry struct_size " + std::to_string(entry->struct_size) + " is too small to hold the ABI version (" +
             std::to_string(kEntryHeaderSize) + " bytes at least); the library is not a valid plugflow plugin");
  const std::string plugin_abi = version_str(entry->abi_major, entry->abi_minor);
  if (entry->abi_major != PLUGFLOW_ABI_MAJOR)
    fail(plugin, file,
         "ABI mismatch: the plugin was built for plugflow plugin ABI " + plugin_abi + " but this core implements ABI " +
             core_abi + " (a different major version is incompatible); rebuild the plugin against this plugflow's SDK");
  if (entry->abi_minor > PLUGFLOW_ABI_MINOR)
    fail(plugin, file,
         "ABI mismatch: the plugin was built for plugflow plugin ABI " + plugin_abi + ", newer than this core's " +
             core_abi +
             "; it may use features this core lacks: upgrade plugflow or rebuild the plugin against "
             "this plugflow's SDK");
  if (entry->struct_size < kEntrySizeV2_0)
    fail(plugin, file,
         "entry struct_size " + std::to_string(entry->struct_size) + " is too small: ABI " + plugin_abi +
             " needs at least " + std::to_string(kEntrySizeV2_0) +
             " bytes; the entry was not built from "
             "<plugflow/plugin.h>");
  if (entry->fingerprint == nullptr) fail(plugin, file, "its entry has no build fingerprint");
  if (std::string why = fingerprint_mismatch(*entry->fingerprint); !why.empty())
    fail(plugin, file,
         "it was built differently from this plugflow core: " + why +
             ". Kernels and registrations cross the plugin boundary as C++ types, so a plugin must be "
             "built with the same standard library and plugflow SDK as the core (see docs/plugins.md, "
             "\"Building a plugin\"); rebuild it against this plugflow's SDK");
  if (entry->name == nullptr || entry->name[0] == '\0') fail(plugin, file, "its entry has no plugin name");
  if (entry->register_plugin == nullptr) fail(plugin, file, "its entry has no register function");

  LoadedPlugin rec;
  rec.name = entry->name;
  rec.version = entry->version != nullptr ? entry->version : "";
  rec.abi_major = entry->abi_major;
  rec.abi_minor = entry->abi_minor;
  rec.path = file;

  // Provider names key the kernel registry and the dispatcher's preference, so two libraries
  // must not share one.
  for (const auto& p : st.loaded)
    if (p.name == rec.name)
      fail(plugin, file,
           "a plugin named '" + rec.name + "' is already loaded from " + p.path + "; provider names must be unique");

  std::string problem;
  try {
    internal::register_provider(rec.name, [&](Registrar& registrar) {
      char err[1024] = {0};
      if (entry->register_plugin(&registrar, err, sizeof(err)) != 0) {
        err[sizeof(err) - 1] = '\0';
        throw PluginError("plugin '" + rec.name +
                          "' failed to register: " + (err[0] != '\0' ? err : "no message given"));
      }
    });
  } catch (const PluginError& e) {
    problem = e.what();  // the plugin's own message, or a conflict found when committing
  } catch (const std::exception& e) {
    // A hand-written entry without PLUGFLOW_PLUGIN's catch-all.
    problem = "plugin '" + rec.name + "' threw while registering: " + e.what();
  } catch (...) {
    problem = "plugin '" + rec.name + "' threw an unknown exception while registering";
  }
  if (!problem.empty()) {
    st.failed_registration.emplace(file, problem);
    fail(plugin, file, problem);
  }
  st.loaded.push_back(rec);

  // Hooks registered just now have not seen the thread count yet. Re-running every hook with
  // the current count is harmless: each one just applies the same number again.
  try {
    internal::run_thread_hooks(get_num_threads());
  } catch (const std::exception& e) {
    fail(plugin, file, std::string("its thread-count hook failed: ") + e.what());
  }
  return rec;
}

}  // namespace

std::string internal::plugin_name_of(const std::string& name_or_path) {
  if (!looks_like_path(name_or_path)) return name_or_path;
  std::string stem = fs::path(name_or_path).filename().string();
  if (const size_t so = stem.find(".so"); so != std::string::npos) stem.resize(so);
  if (stem.starts_with("libplugflow_") && stem.size() > 12) return stem.substr(12);
  return stem.empty() ? name_or_path : stem;
}

std::vector<std::string> plugin_search_path(const std::vector<std::string>& extra_dirs) {
  std::vector<std::string> dirs;
  auto add = [&](const std::string& dir) {
    if (dir.empty()) return;
    std::string d = internal::expand_user(dir);
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  };
  for (const auto& d : extra_dirs) add(d);
  if (const char* env = std::getenv("PLUGFLOW_PLUGIN_PATH"))
    for (const auto& d : split_path_list(env)) add(d);
  // An installed plugflow keeps its plugins in lib/plugins next to the core library.
  if (const std::string core_dir = core_library_dir(); !core_dir.empty()) {
    add(core_dir + "/plugins");
    add(core_dir);
  }
  // Last, the build tree this core was built in, so tests and uninstalled builds work.
  for (const auto& d : split_path_list(PLUGFLOW_BUILD_PLUGIN_DIRS)) add(d);
  return dirs;
}

LoadedPlugin load_plugin(const std::string& name_or_path, const std::vector<std::string>& extra_dirs) {
  if (name_or_path.empty()) PF_THROW(PluginError, "load_plugin: empty plugin name");
  LoaderState& st = state();
  std::lock_guard lock(st.mutex);
  return load_locked(name_or_path, extra_dirs);
}

std::vector<LoadedPlugin> loaded_plugins() {
  LoaderState& st = state();
  std::lock_guard lock(st.mutex);
  std::vector<LoadedPlugin> out = st.loaded;
  for (auto& p : out) p.active = internal::provider_active(p.name);
  return out;
}

}  // namespace plugflow
