// The plugin loader (core/src/loader.cpp) against the test plugins in tests/plugins: a good
// plugin, and one library for each way a plugin can be broken.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <plugflow/communicator.h>
#include <plugflow/dispatch.h>
#include <plugflow/error.h>
#include <plugflow/kernel.h>
#include <plugflow/plugin.h>
#include <plugflow/runtime.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "../../../core/src/registry_internal.h"
#include "test_helpers.h"

namespace fs = std::filesystem;
using pf_test::ScopedEnv;
using pf_test::TempDir;
using plugflow::PluginError;

namespace {

const std::string kPluginDir = PF_TEST_PLUGIN_DIR;

std::string plugin_file(const std::string& name) { return kPluginDir + "/libplugflow_" + name + ".so"; }
std::string canonical(const std::string& path) { return fs::canonical(path).string(); }

// The message of the PluginError that loading raises (a test failure if none does).
std::string load_error(const std::string& name_or_path, const std::vector<std::string>& extra_dirs = {}) {
  try {
    plugflow::load_plugin(name_or_path, extra_dirs);
  } catch (const PluginError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a PluginError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "loading " << name_or_path << " did not fail";
  return {};
}

size_t count_loaded(const std::string& name) {
  const auto all = plugflow::loaded_plugins();
  return std::count_if(all.begin(), all.end(), [&](const auto& p) { return p.name == name; });
}

size_t count_kernels(const std::string& provider) {
  const auto all = plugflow::registered_kernels();
  return std::count_if(all.begin(), all.end(), [&](const auto& k) { return k.provider == provider; });
}

std::string abi_str(unsigned major, unsigned minor) { return std::to_string(major) + "." + std::to_string(minor); }

}  // namespace

TEST(Loader, LoadsAGoodPluginAndRecordsItsEntry) {
  const plugflow::LoadedPlugin rec = plugflow::load_plugin(plugin_file("test_good"));
  EXPECT_EQ(rec.name, "test_good");
  EXPECT_EQ(rec.version, "1.2.3");
  EXPECT_EQ(rec.abi_major, unsigned{PLUGFLOW_ABI_MAJOR});
  EXPECT_EQ(rec.abi_minor, unsigned{PLUGFLOW_ABI_MINOR});
  EXPECT_EQ(rec.path, canonical(plugin_file("test_good")));

  const auto all = plugflow::loaded_plugins();
  const auto it = std::find_if(all.begin(), all.end(), [](const auto& p) { return p.name == "test_good"; });
  ASSERT_NE(it, all.end());
  EXPECT_EQ(it->version, "1.2.3");
  EXPECT_EQ(it->path, rec.path);

  // Its registration ran under its provider name.
  bool found = false;
  for (const auto& k : plugflow::registered_kernels())
    if (k.provider == "test_good") {
      EXPECT_EQ(k.op, "add");
      EXPECT_EQ(k.device, plugflow::DeviceType::CPU);
      EXPECT_EQ(k.dtype, plugflow::DType::Float32);
      EXPECT_EQ(k.priority, plugflow::Priority::Optimized);
      found = true;
    }
  EXPECT_TRUE(found);
}

TEST(Loader, LoadingTwiceReturnsTheExistingRecord) {
  const auto first = plugflow::load_plugin(plugin_file("test_good"));
  const size_t kernels = count_kernels("test_good");
  // Same file by path, by a non-canonical path, and by name.
  const auto again = plugflow::load_plugin(plugin_file("test_good"));
  const auto dotted = plugflow::load_plugin(kPluginDir + "/./libplugflow_test_good.so");
  const auto by_name = plugflow::load_plugin("test_good", {kPluginDir});
  for (const auto* r : {&again, &dotted, &by_name}) {
    EXPECT_EQ(r->name, first.name);
    EXPECT_EQ(r->path, first.path);
  }
  EXPECT_EQ(count_loaded("test_good"), 1u);
  EXPECT_EQ(count_kernels("test_good"), kernels);  // registration did not run again
}

TEST(Loader, AnotherFileWithALoadedProviderNameIsRefused) {
  plugflow::load_plugin(plugin_file("test_good"));
  TempDir dir;
  const fs::path copy = dir.path() / "libplugflow_test_good_copy.so";
  fs::copy_file(plugin_file("test_good"), copy);
  const std::string msg = load_error(copy.string());
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_good_copy' from " + canonical(copy.string()));
  EXPECT_CONTAINS(msg, "a plugin named 'test_good' is already loaded from " + canonical(plugin_file("test_good")));
  EXPECT_EQ(count_loaded("test_good"), 1u);
}

TEST(Loader, RefusesADifferentAbiMajor) {
  const std::string msg = load_error(plugin_file("test_bad_abi"));
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_bad_abi' from " + canonical(plugin_file("test_bad_abi")));
  EXPECT_CONTAINS(msg, "ABI mismatch");
  EXPECT_CONTAINS(msg, "built for plugflow plugin ABI " + abi_str(PLUGFLOW_ABI_MAJOR + 1, 0));
  EXPECT_CONTAINS(msg, "this core implements ABI " + abi_str(PLUGFLOW_ABI_MAJOR, PLUGFLOW_ABI_MINOR));
  EXPECT_NOT_CONTAINS(msg, "register_plugin of a plugin with a refused ABI was called");
  EXPECT_EQ(count_loaded("test_bad_abi"), 0u);
}

TEST(Loader, RefusesANewerAbiMinor) {
  const std::string msg = load_error(plugin_file("test_newer_minor"));
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_newer_minor' from " + canonical(plugin_file("test_newer_minor")));
  EXPECT_CONTAINS(msg, "ABI " + abi_str(PLUGFLOW_ABI_MAJOR, PLUGFLOW_ABI_MINOR + 1) + ", newer than this core's " +
                           abi_str(PLUGFLOW_ABI_MAJOR, PLUGFLOW_ABI_MINOR));
  EXPECT_EQ(count_loaded("test_newer_minor"), 0u);
}

TEST(Loader, RefusesATruncatedEntryStruct) {
  const std::string msg = load_error(plugin_file("test_small_struct"));
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_small_struct' from " + canonical(plugin_file("test_small_struct")));
  EXPECT_CONTAINS(msg, "entry struct_size " + std::to_string(offsetof(PlugflowPluginEntry, name)) + " is too small");
  EXPECT_CONTAINS(msg, std::to_string(sizeof(PlugflowPluginEntry)) + " bytes");
}

TEST(Loader, RefusesAnAbi1PluginWithoutCallingItsAliasAsCode) {
  const std::string msg = load_error(plugin_file("test_abi1_alias"));
  EXPECT_CONTAINS(msg, "built for plugflow plugin ABI 1.1 but this core implements ABI " +
                           abi_str(PLUGFLOW_ABI_MAJOR, PLUGFLOW_ABI_MINOR));
  EXPECT_NOT_CONTAINS(msg, "register_plugin of an ABI 1 plugin was called");
  EXPECT_EQ(count_loaded("test_abi1_alias"), 0u);
}

TEST(Loader, RefusesAPluginBuiltAgainstOtherLayouts) {
  const std::string msg = load_error(plugin_file("test_other_layout"));
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_other_layout' from " + canonical(plugin_file("test_other_layout")));
  EXPECT_CONTAINS(msg, "it was built differently from this plugflow core");
  EXPECT_CONTAINS(msg, "sizeof(TensorImpl) is " + std::to_string(sizeof(plugflow::TensorImpl) + 8) +
                           " in the plugin, " + std::to_string(sizeof(plugflow::TensorImpl)) + " in the core");
  EXPECT_NOT_CONTAINS(msg, "register_plugin of a plugin with a refused ABI was called");
  EXPECT_EQ(count_loaded("test_other_layout"), 0u);
}

TEST(Loader, RefusesAPluginBuiltWithTheOldStringAbi) {
  const std::string msg = load_error(plugin_file("test_old_string_abi"));
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_old_string_abi'");
  EXPECT_CONTAINS(msg, "_GLIBCXX_USE_CXX11_ABI=0, the core with 1");
  EXPECT_CONTAINS(msg, "sizeof(std::string) is 8 in the plugin, 32 in the core");
  EXPECT_EQ(count_loaded("test_old_string_abi"), 0u);
}

TEST(Loader, TheCoreAndItsPluginsShareOneFingerprint) {
  // The plugins built here (test_good) were accepted, so their fingerprint matched; the
  // fingerprint itself must describe this build.
  const PlugflowBuildFingerprint f = plugflow::build_fingerprint();
  EXPECT_EQ(f.struct_size, sizeof(PlugflowBuildFingerprint));
  EXPECT_EQ(f.cxx11_abi, 1u);
  EXPECT_EQ(f.sizeof_std_string, sizeof(std::string));
  EXPECT_GE(f.cplusplus, 2020u);
  EXPECT_NO_THROW(plugflow::load_plugin(plugin_file("test_good")));
}

TEST(Loader, ReportsALibraryWithoutTheEntrySymbol) {
  const std::string msg = load_error(plugin_file("test_no_entry"));
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_no_entry' from " + canonical(plugin_file("test_no_entry")));
  EXPECT_CONTAINS(msg, "no entry symbol 'plugflow_plugin_entry'");
}

TEST(Loader, AThrowingRegistrationIsReportedAndLeavesNothingLive) {
  const uint64_t generation = plugflow::internal::registry_generation();
  const std::string msg = load_error(plugin_file("test_throws"));
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_throws' from " + canonical(plugin_file("test_throws")));
  EXPECT_CONTAINS(msg, "failed to register: boom from test plugin");
  EXPECT_EQ(count_loaded("test_throws"), 0u);
  // It registered a kernel, a device, a communicator and a hook before throwing: none is live
  // (each would abort the test if reached).
  EXPECT_EQ(plugflow::internal::registry_generation(), generation);
  const auto providers = plugflow::internal::kernel_providers();
  EXPECT_EQ(std::count(providers.begin(), providers.end(), "test_throws"), 0);
  EXPECT_NE(plugflow::chosen_provider(plugflow::find_op("add"), plugflow::DeviceType::CPU, plugflow::DType::Float32),
            "test_throws");
  EXPECT_EQ(plugflow::find_device_backend(plugflow::DeviceType::CUDA), nullptr);
  const auto comms = plugflow::communicator_backends();
  EXPECT_EQ(std::count(comms.begin(), comms.end(), "test_throws_ccl"), 0);
  plugflow::set_num_threads(2);
  // A retry reports the same failure without running the registration again.
  const std::string again = load_error(plugin_file("test_throws"));
  EXPECT_CONTAINS(again, "boom from test plugin");
  EXPECT_CONTAINS(again, "earlier in this process");
}

TEST(Loader, ReportsTheDynamicLoadersMessageForAFileThatIsNotALibrary) {
  const std::string file = canonical(plugin_file("test_not_elf"));
  const std::string msg = load_error(plugin_file("test_not_elf"));
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_not_elf' from " + file);
  EXPECT_CONTAINS(msg, "dlopen failed: " + file);  // dlerror() starts with the file
  EXPECT_CONTAINS(msg, "ELF header");
}

TEST(Loader, ResolvesSymbolsAtLoadTime) {
  // RTLD_NOW: an unresolved function fails the load instead of the first call.
  const std::string msg = load_error(plugin_file("test_undefined_symbol"));
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_undefined_symbol'");
  EXPECT_CONTAINS(msg, "undefined symbol: plugflow_test_symbol_that_does_not_exist");
}

TEST(Loader, ReportsAMissingDependency) {
  const std::string msg = load_error(plugin_file("test_missing_dep"));
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_missing_dep' from " + canonical(plugin_file("test_missing_dep")));
  EXPECT_CONTAINS(msg, "dlopen failed: libplugflow_test_vanished.so: cannot open shared object file");
}

TEST(Loader, NotFoundListsEverySearchedDirectory) {
  ScopedEnv env("PLUGFLOW_PLUGIN_PATH", "/nonexistent/from_env");
  const std::vector<std::string> extra = {"/nonexistent/extra"};
  const std::string msg = load_error("no_such_plugin", extra);
  EXPECT_CONTAINS(msg, "cannot load plugin 'no_such_plugin': libplugflow_no_such_plugin.so was not found");
  for (const auto& dir : plugflow::plugin_search_path(extra)) EXPECT_CONTAINS(msg, "\n  " + dir);
  EXPECT_CONTAINS(msg, "/nonexistent/extra (does not exist)");
  EXPECT_CONTAINS(msg, "/nonexistent/from_env (does not exist)");
  EXPECT_CONTAINS(msg, "PLUGFLOW_PLUGIN_PATH");
}

TEST(Loader, MissingPathIsReported) {
  const std::string msg = load_error("/nonexistent/dir/libplugflow_ghost.so");
  EXPECT_CONTAINS(msg,
                  "cannot load plugin 'ghost' from /nonexistent/dir/libplugflow_ghost.so: the file does not exist");
  EXPECT_CONTAINS(load_error(kPluginDir), "not a regular file");
  EXPECT_CONTAINS(load_error(""), "empty plugin name");
}

TEST(Loader, SearchPathOrder) {
  ScopedEnv env("PLUGFLOW_PLUGIN_PATH", "/env/a:/env/b/::/env/c:/extra");
  const auto dirs = plugflow::plugin_search_path({"/extra", "/extra2/"});

  // The core library's directory, found the way a user's process would see it.
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&plugflow::plugin_search_path), &info), 0);
  const std::string core_dir = fs::weakly_canonical(info.dli_fname).parent_path().string();

  ASSERT_GE(dirs.size(), 7u);
  // Extra dirs first, then the environment (empty entries and duplicates dropped), then the
  // core library's plugins/ and own directory, then the build tree.
  const std::vector<std::string> head(dirs.begin(), dirs.begin() + 7);
  EXPECT_EQ(head, (std::vector<std::string>{"/extra", "/extra2", "/env/a", "/env/b", "/env/c", core_dir + "/plugins",
                                            core_dir}));
}

TEST(Loader, HonoursPlugflowPluginPathAndExtraDirs) {
  // test_second lives only in the test plugin directory, which is not on the default path.
  {
    ScopedEnv env("PLUGFLOW_PLUGIN_PATH", std::nullopt);
    EXPECT_CONTAINS(load_error("test_second"), "libplugflow_test_second.so was not found");
  }
  {
    ScopedEnv env("PLUGFLOW_PLUGIN_PATH", "/nonexistent:" + kPluginDir);
    const auto rec = plugflow::load_plugin("test_second");
    EXPECT_EQ(rec.name, "test_second");
    EXPECT_EQ(rec.path, canonical(plugin_file("test_second")));
  }
  // A bare name found through extra_dirs (the config's plugin_path) reports that file.
  const std::string msg = load_error("test_no_entry", {kPluginDir});
  EXPECT_CONTAINS(msg, "cannot load plugin 'test_no_entry' from " + canonical(plugin_file("test_no_entry")));
}

TEST(Loader, PluginsSeeTheThreadCount) {
  plugflow::load_plugin(plugin_file("test_good"));
  void* handle = dlopen(plugin_file("test_good").c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr);
  auto last_count = reinterpret_cast<int (*)()>(dlsym(handle, "plugflow_test_last_thread_count"));
  ASSERT_NE(last_count, nullptr);
  EXPECT_EQ(last_count(), plugflow::get_num_threads());  // applied when it loaded
  plugflow::set_num_threads(3);
  EXPECT_EQ(last_count(), 3);
  EXPECT_EQ(plugflow::get_num_threads(), 3);
  EXPECT_THROW(plugflow::set_num_threads(0), plugflow::ValueError);
  EXPECT_EQ(plugflow::get_num_threads(), 3);

  // A plugin loaded after the count was set gets it at load time (test_late: loaded only here).
  plugflow::set_num_threads(2);
  plugflow::load_plugin(plugin_file("test_late"));
  void* late = dlopen(plugin_file("test_late").c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(late, nullptr);
  auto late_count = reinterpret_cast<int (*)()>(dlsym(late, "plugflow_test_last_thread_count"));
  ASSERT_NE(late_count, nullptr);
  EXPECT_EQ(late_count(), 2);
  dlclose(late);
  dlclose(handle);
}
