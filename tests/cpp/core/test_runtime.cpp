// The runtime (core/src/runtime.cpp): applying a config, optional plugin failures, kernel
// preference, threads, PLUGFLOW_CONFIG.
#include <gtest/gtest.h>
#include <plugflow/dispatch.h>
#include <plugflow/error.h>
#include <plugflow/ops.h>
#include <plugflow/runtime.h>
#include <sched.h>

#include <algorithm>
#include <string>

#include "test_core_support.h"
#include "test_helpers.h"

using pf_test::ScopedEnv;
using pf_test::TempDir;
using plugflow::Config;
using plugflow::PluginSpec;

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

TEST(Runtime, ZeroThreadsMeansOnePerAvailableCore) {
  plugflow::init_from_config(config_with({}, {}, 0));
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(plugflow::get_num_threads(), CPU_COUNT(&set));
  EXPECT_THROW(plugflow::set_num_threads(-2), plugflow::ValueError);
}

TEST(Runtime, InitReadsAFileOrPlugflowConfig) {
  TempDir dir;
  const auto file = dir.write("a.yaml", "plugins: [" + plugin_file("test_good") + "]\nthreads: 2\n");
  const auto other = dir.write("b.yaml", "threads: 1\n");

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

TEST(Runtime, Version) { EXPECT_EQ(plugflow::version(), PF_EXPECTED_VERSION); }
