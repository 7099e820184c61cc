// ensure_initialized(): lazy, once, thread-safe, and retried after a failure. Its own process,
// because the first successful initialization happens only once per process.
#include <gtest/gtest.h>
#include <plugflow/error.h>
#include <plugflow/runtime.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "test_helpers.h"

using pf_test::ScopedEnv;
using pf_test::TempDir;

TEST(LazyInit, FailsUntilTheConfigIsFixedThenRunsOnceAcrossThreads) {
  ASSERT_FALSE(plugflow::is_initialized());
  TempDir dir;

  // A broken config: every call reports it, nothing is marked initialized.
  const auto bad = dir.write("bad.yaml", "threds: 2\n");
  {
    ScopedEnv env("PLUGFLOW_CONFIG", bad.string());
    for (int i = 0; i < 2; ++i) EXPECT_THROW(plugflow::ensure_initialized(), plugflow::ConfigError);
    EXPECT_FALSE(plugflow::is_initialized());
  }

  const std::string plugin = std::string(PF_TEST_PLUGIN_DIR) + "/libplugflow_test_good.so";
  const auto good = dir.write("good.yaml", "plugins: [" + plugin + "]\nthreads: 2\n");
  ScopedEnv env("PLUGFLOW_CONFIG", good.string());
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      try {
        plugflow::ensure_initialized();
        if (plugflow::current_config().source.empty()) ++errors;
      } catch (...) {
        ++errors;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_TRUE(plugflow::is_initialized());
  EXPECT_EQ(plugflow::current_config().source, good.string());
  EXPECT_EQ(plugflow::get_num_threads(), 2);
  const auto loaded = plugflow::loaded_plugins();
  EXPECT_EQ(std::count_if(loaded.begin(), loaded.end(), [](const auto& p) { return p.name == "test_good"; }), 1);

  // Once initialized, ensure_initialized() does not read the config again.
  ScopedEnv gone("PLUGFLOW_CONFIG", (dir.path() / "deleted.yaml").string());
  EXPECT_NO_THROW(plugflow::ensure_initialized());
  EXPECT_EQ(plugflow::current_config().source, good.string());
}
