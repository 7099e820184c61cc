// The runtime (core/src/runtime.cpp): applying a config, optional plugin failures, kernel
// preference, threads, PLUGFLOW_CONFIG.
#include <gtest/gtest.h>
#include <plugflow/dispatch.h>
#include <plugflow/error.h>
#include <plugflow/ops.h>
#include <plugflow/runtime.h>
#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include "test_core_support.h"
#include "test_helpers.h"

namespace fs = std::filesystem;
using pf_test::ScopedEnv;
using pf_test::TempDir;
using plugflow::Config;
using plugflow::DeviceType;
using plugflow::DType;
using plugflow::PluginSpec;
using plugflow::Tensor;

namespace {

const std::string kPluginDir = PF_TEST_PLUGIN_DIR;
std::string plugin_file(const std::string& name) { return kPluginDir + "/libplugflow_" + name + ".so"; }

Config config_with(std::vector<PluginSpec> plugins, std::vector<std::string> prefer = {}, int threads = 1) {
  Config c;
  c.source = "test config";
  c.plugins = std::move(plugins);
  c.kernel_prefer = std::move(prefer);
  c.threads = threads;
  return c;
}

std::string chosen_add_provider() {
  return plugflow::chosen_provider(plugflow::find_op("add"), plugflow::DeviceType::CPU, plugflow::DType::Float32);
}

// Runs add on CPU float32 through the dispatcher and returns the first output element.
float run_add() {
  pf_test::install_test_cpu_device();
  const auto a = plugflow::Tensor::empty({2, 3}, plugflow::DType::Float32, plugflow::Device{});
  return plugflow::ops::add(a, a).data<float>()[0];
}

// The message of the ConfigError that applying the file raises (a test failure if none does).
std::string init_error(const fs::path& file) {
  try {
    plugflow::init(file.string());
  } catch (const plugflow::ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "applying " << file << " did not fail";
  return {};
}

bool is_active(const std::string& plugin) {
  for (const auto& p : plugflow::loaded_plugins())
    if (p.name == plugin) return p.active;
  ADD_FAILURE() << "plugin " << plugin << " is not loaded";
  return false;
}

size_t kernels_of(const std::string& provider) {
  const auto all = plugflow::registered_kernels();
  return std::count_if(all.begin(), all.end(), [&](const auto& k) { return k.provider == provider; });
}

bool has_communicator(const std::string& backend) {
  const auto all = plugflow::communicator_backends();
  return std::find(all.begin(), all.end(), backend) != all.end();
}

}  // namespace

TEST(Runtime, AppliesAConfigAndRecordsOptionalFailures) {
  Config c = config_with(
      {{plugin_file("test_good"), false}, {"no_such_plugin", true}, {plugin_file("test_throws"), true}}, {}, 3);
  plugflow::init_from_config(c);
  EXPECT_TRUE(plugflow::is_initialized());
  EXPECT_EQ(plugflow::current_config().source, "test config");
  EXPECT_EQ(plugflow::get_num_threads(), 3);

  const auto loaded = plugflow::loaded_plugins();
  EXPECT_TRUE(std::any_of(loaded.begin(), loaded.end(), [](const auto& p) { return p.name == "test_good"; }));

  const auto failures = plugflow::plugin_failures();
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(failures[0].name, "no_such_plugin");
  EXPECT_CONTAINS(failures[0].reason, "libplugflow_no_such_plugin.so was not found");
  EXPECT_EQ(failures[1].name, plugin_file("test_throws"));
  EXPECT_CONTAINS(failures[1].reason, "boom from test plugin");

  // Without kernels.prefer the loaded plugins rank in config order.
  EXPECT_EQ(plugflow::current_config().kernel_prefer, std::vector<std::string>{"test_good"});
  EXPECT_EQ(chosen_add_provider(), "test_good");
  EXPECT_EQ(run_add(), 4242.0f);

  // A later init replaces the failure list with its own.
  plugflow::init_from_config(config_with({{plugin_file("test_good"), false}}));
  EXPECT_TRUE(plugflow::plugin_failures().empty());
}

TEST(Runtime, KernelPreferenceFollowsTheConfig) {
  plugflow::init_from_config(config_with({{plugin_file("test_second"), false}, {plugin_file("test_good"), false}}));
  EXPECT_EQ(plugflow::current_config().kernel_prefer, (std::vector<std::string>{"test_second", "test_good"}));
  EXPECT_EQ(chosen_add_provider(), "test_second");
  EXPECT_EQ(run_add(), -17.0f);

  plugflow::init_from_config(
      config_with({{plugin_file("test_second"), false}, {plugin_file("test_good"), false}}, {"test_good"}));
  EXPECT_EQ(chosen_add_provider(), "test_good");
  EXPECT_EQ(run_add(), 4242.0f);
}

TEST(Runtime, ARequiredPluginFailureThrowsAndKeepsThePreviousConfig) {
  plugflow::init_from_config(config_with({{plugin_file("test_good"), false}}));
  Config bad = config_with({{plugin_file("test_good"), false}, {plugin_file("test_bad_abi"), false}});
  bad.source = "bad.yaml";
  try {
    plugflow::init_from_config(bad);
    FAIL() << "no PluginError";
  } catch (const plugflow::PluginError& e) {
    EXPECT_CONTAINS(e.what(), "cannot load plugin 'test_bad_abi'");
    EXPECT_CONTAINS(e.what(), "ABI mismatch");
    EXPECT_CONTAINS(e.what(), "is required by bad.yaml");
  }
  EXPECT_EQ(plugflow::current_config().source, "test config");
}

TEST(Runtime, ZeroThreadsMeansOmpNumThreadsElseOnePerAvailableCore) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  // As PyTorch: a launcher starting several processes per machine sets OMP_NUM_THREADS.
  for (const auto& [omp, expected] : {std::pair<std::optional<std::string>, int>{std::nullopt, CPU_COUNT(&set)},
                                      {"3", 3}, {"lots", CPU_COUNT(&set)}, {"0", CPU_COUNT(&set)}}) {
    ScopedEnv env("OMP_NUM_THREADS", omp);
    plugflow::init_from_config(config_with({}, {}, 0));
    EXPECT_EQ(plugflow::get_num_threads(), expected) << "OMP_NUM_THREADS=" << omp.value_or("(unset)");
  }
  EXPECT_THROW(plugflow::set_num_threads(-2), plugflow::ValueError);
}

TEST(Runtime, InitReadsAFileOrPlugflowConfig) {
  TempDir dir;
  const auto file = dir.write("a.yaml", "plugins: [" + plugin_file("test_good") + "]\nthreads: 2\n");
  const auto other = dir.write("b.yaml", "plugins: []\nthreads: 1\n");

  plugflow::init(file.string());
  EXPECT_EQ(plugflow::current_config().source, file.string());
  EXPECT_EQ(plugflow::get_num_threads(), 2);

  {
    ScopedEnv env("PLUGFLOW_CONFIG", other.string());
    plugflow::init();
    EXPECT_EQ(plugflow::current_config().source, other.string());
    plugflow::init(file.string());  // an explicit path wins over the environment
    EXPECT_EQ(plugflow::current_config().source, file.string());
  }
  {
    ScopedEnv env("PLUGFLOW_CONFIG", (dir.path() / "missing.yaml").string());
    try {
      plugflow::init();
      FAIL() << "no ConfigError";
    } catch (const plugflow::ConfigError& e) {
      EXPECT_CONTAINS(e.what(), (dir.path() / "missing.yaml").string() + "' does not exist");
      EXPECT_CONTAINS(e.what(), "PLUGFLOW_CONFIG");
    }
  }
  EXPECT_THROW(plugflow::init((dir.path() / "nope.yaml").string()), plugflow::ConfigError);
  EXPECT_EQ(plugflow::current_config().source, file.string());  // failures change nothing
}

TEST(Runtime, KernelsPreferMustNameAKernelProviderOfTheConfig) {
  TempDir dir;
  const std::string good = plugin_file("test_good");
  plugflow::init_from_config(config_with({{good, false}}));

  const auto typo = dir.write("typo.yaml", "plugins: [" + good + "]\nkernels:\n  prefer: [test_god]\n");
  const std::string msg = init_error(typo);
  EXPECT_STARTS_WITH(msg, typo.string() +
                              ":3: key 'kernels.prefer[0]': no loaded plugin provides kernels under the name "
                              "'test_god'; kernel providers: test_good; did you mean 'test_good'?");
  EXPECT_EQ(plugflow::current_config().source, "test config");  // a failed init changes nothing

  // gloo is a plugin with a communicator and no kernels.
  const auto gloo = dir.write("gloo.yaml", "plugins: [" + good + ", gloo]\nkernels: {prefer: [gloo, test_good]}\n");
  EXPECT_CONTAINS(init_error(gloo), ":2: key 'kernels.prefer[0]': plugin 'gloo' is loaded but registers no kernels");
  EXPECT_FALSE(is_active("gloo"));  // loaded by the failed init, not selectable

  // A plugin loaded earlier that this config does not list.
  plugflow::init_from_config(config_with({{plugin_file("test_second"), false}, {good, false}}));
  const auto dropped = dir.write("dropped.yaml", "plugins: [" + good + "]\nkernels: {prefer: [test_second]}\n");
  EXPECT_CONTAINS(init_error(dropped),
                  "no loaded plugin provides kernels under the name 'test_second' (plugin 'test_second' is loaded, "
                  "but this config does not list it)");
  EXPECT_TRUE(is_active("test_second"));
}

TEST(Runtime, KernelsPreferExplainsAPluginThatDeclaresAnotherName) {
  TempDir dir;
  // test_late is loaded nowhere else in this process; its copy declares "test_late" too.
  const fs::path copy = dir.path() / "libplugflow_late_copy.so";
  fs::copy_file(plugin_file("test_late"), copy);
  const auto renamed = dir.write("renamed.yaml", "plugins: [" + copy.string() + "]\nkernels: {prefer: [late_copy]}\n");
  const std::string msg = init_error(renamed);
  EXPECT_CONTAINS(msg, renamed.string() +
                           ":2: key 'kernels.prefer[0]': no loaded plugin provides kernels under the name 'late_copy'");
  EXPECT_CONTAINS(msg, "(libplugflow_late_copy.so declares itself 'test_late'); did you mean 'test_late'?");
  EXPECT_FALSE(is_active("test_late"));
  EXPECT_EQ(kernels_of("test_late"), 0u);

  const auto fixed = dir.write("fixed.yaml", "plugins: [" + copy.string() + "]\nkernels: {prefer: [test_late]}\n");
  plugflow::init(fixed.string());
  EXPECT_EQ(chosen_add_provider(), "test_late");
  EXPECT_EQ(run_add(), 99.0f);
}

TEST(Runtime, KernelsPreferMayNameAnOptionalPluginThatDidNotLoad) {
  TempDir dir;
  const std::string good = plugin_file("test_good");
  const auto by_name = dir.write("optional.yaml", "plugins:\n  - " + good +
                                                      "\n  - {name: no_such_plugin, optional: true}\n"
                                                      "kernels: {prefer: [no_such_plugin, test_good]}\n");
  plugflow::init(by_name.string());
  EXPECT_EQ(plugflow::current_config().kernel_prefer, (std::vector<std::string>{"no_such_plugin", "test_good"}));
  ASSERT_EQ(plugflow::plugin_failures().size(), 1u);
  EXPECT_EQ(chosen_add_provider(), "test_good");

  // An optional plugin given by path stands for the name in its file name.
  const auto by_path = dir.write("path.yaml", "plugins:\n  - " + good +
                                                  "\n  - {name: /nonexistent/libplugflow_vendor.so, optional: true}\n"
                                                  "kernels: {prefer: [vendor, test_good]}\n");
  plugflow::init(by_path.string());
  EXPECT_EQ(plugflow::current_config().source, by_path.string());
}

TEST(Runtime, CollectivesMustNameACommunicatorOfTheConfigForThatDevice) {
  TempDir dir;
  const std::string good = plugin_file("test_good");
  const std::string plugins = "plugins: [" + good + ", " + plugin_file("test_device") + "]\n";
  const auto ok = dir.write("ok.yaml", plugins + "collectives: {cuda: test_device_ccl}\n");
  plugflow::init(ok.string());
  EXPECT_EQ(plugflow::current_config().collective_cuda, "test_device_ccl");

  const auto device = dir.write("device.yaml", plugins + "collectives:\n  cpu: test_device_ccl\n");
  EXPECT_STARTS_WITH(init_error(device), device.string() +
                                             ":3: key 'collectives.cpu': communicator 'test_device_ccl' (plugin "
                                             "'test_device') serves cuda tensors, not cpu (communicators: "
                                             "test_device_ccl (cuda))");
  const auto no_comm = dir.write("no_comm.yaml", plugins + "collectives: {cpu: test_good}\n");
  EXPECT_CONTAINS(init_error(no_comm),
                  ":2: key 'collectives.cpu': plugin 'test_good' is loaded but provides no communicator named "
                  "'test_good'");
  const auto typo = dir.write("typo.yaml", plugins + "collectives: {cuda: test_device_cl}\n");
  EXPECT_CONTAINS(init_error(typo),
                  ":2: key 'collectives.cuda': no plugin of this config provides a communicator named "
                  "'test_device_cl' (list the plugin that does in plugins); communicators: test_device_ccl (cuda); "
                  "did you mean 'test_device_ccl'?");
  const auto unlisted = dir.write("unlisted.yaml", "plugins: [" + good + "]\ncollectives: {cuda: test_device_ccl}\n");
  EXPECT_CONTAINS(init_error(unlisted), "no plugin of this config provides a communicator named 'test_device_ccl'");
  EXPECT_EQ(plugflow::current_config().source, ok.string());

  // An optional plugin that did not load is not an error, and neither are the default's values.
  const auto optional =
      dir.write("optional.yaml",
                "plugins: [" + good + ", {name: no_such_ccl, optional: true}]\ncollectives: {cpu: no_such_ccl}\n");
  plugflow::init(optional.string());
  const auto defaults = dir.write("defaults.yaml", "plugins: [" + good + "]\n");
  plugflow::init(defaults.string());
  EXPECT_EQ(plugflow::current_config().collective_cpu, "gloo");
  EXPECT_EQ(plugflow::current_config().collective_cuda, "nccl");
}

TEST(Runtime, InitReplacesTheActiveConfig) {
  const std::string good = plugin_file("test_good"), device = plugin_file("test_device");
  plugflow::init_from_config(config_with({{good, false}, {device, false}}));
  const Tensor on_device = Tensor::empty({3}, DType::Float32, plugflow::Device{DeviceType::CUDA, 0});
  EXPECT_EQ(plugflow::ops::add(on_device, on_device).data<float>()[0], 7.0f);
  EXPECT_EQ(run_add(), 4242.0f);
  ASSERT_EQ(kernels_of("test_device"), 1u);
  EXPECT_TRUE(has_communicator("test_device_ccl"));

  // A config without test_device: its kernels, device and communicator are no longer selectable;
  // the library stays loaded.
  plugflow::init_from_config(config_with({{good, false}}));
  EXPECT_FALSE(is_active("test_device"));
  EXPECT_TRUE(is_active("test_good"));
  EXPECT_EQ(kernels_of("test_device"), 0u);
  EXPECT_EQ(plugflow::find_device_backend(DeviceType::CUDA), nullptr);
  EXPECT_FALSE(has_communicator("test_device_ccl"));
  try {
    plugflow::ops::add(on_device, on_device);
    FAIL() << "a tensor on the dropped device was usable";
  } catch (const plugflow::DeviceError& e) {
    EXPECT_CONTAINS(e.what(),
                    "device type 'cuda' is not available: plugin 'test_device', which provides it, is not "
                    "part of the active config");
  }
  EXPECT_THROW(Tensor::empty({1}, DType::Float32, plugflow::Device{DeviceType::CUDA, 0}), plugflow::DeviceError);
  EXPECT_THROW(plugflow::ops::to(on_device, plugflow::Device{}, std::nullopt), plugflow::DeviceError);  // no copy out
  EXPECT_EQ(run_add(), 4242.0f);  // CPU tensors are unaffected

  // Naming it again reuses the loaded plugin (no second registration); its tensors work again.
  plugflow::init_from_config(config_with({{good, false}, {device, false}}));
  EXPECT_TRUE(is_active("test_device"));
  EXPECT_EQ(kernels_of("test_device"), 1u);
  EXPECT_EQ(plugflow::ops::add(on_device, on_device).data<float>()[0], 7.0f);
}

TEST(Runtime, AFailedInitKeepsThePreviousPluginsSelectable) {
  const std::string good = plugin_file("test_good"), device = plugin_file("test_device");
  plugflow::init_from_config(config_with({{good, false}, {device, false}}));
  EXPECT_THROW(plugflow::init_from_config(config_with({{good, false}}, {"nosuch"})), plugflow::ConfigError);
  EXPECT_TRUE(is_active("test_device"));
  EXPECT_NE(plugflow::find_device_backend(DeviceType::CUDA), nullptr);
  EXPECT_EQ(plugflow::current_config().plugins.size(), 2u);
}

TEST(Runtime, Version) { EXPECT_EQ(plugflow::version(), PF_EXPECTED_VERSION); }
