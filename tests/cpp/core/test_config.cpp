// Config parsing and schema validation (core/src/config.cpp).
#include <gtest/gtest.h>
#include <plugflow/config.h>
#include <plugflow/error.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_helpers.h"

namespace fs = std::filesystem;
using plugflow::Config;
using plugflow::ConfigError;
using plugflow::parse_config;

namespace {

// The message of the ConfigError that parsing `text` raises (a test failure if none does).
std::string config_error(const std::string& text, const std::string& source = "test.yaml") {
  try {
    parse_config(text, source);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << text;
  return {};
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

using pf_test::ScopedEnv;
using pf_test::TempDir;

}  // namespace

TEST(Config, EmbeddedDefaultIsConfigsCpuYaml) {
  EXPECT_EQ(plugflow::default_config_text(), read_file(fs::path(PF_SOURCE_ROOT) / "configs" / "cpu.yaml"));
}

TEST(Config, EmbeddedDefaultParses) {
  ScopedEnv home("HOME", "/home/tester");
  const Config c = parse_config(plugflow::default_config_text(), "<default cpu.yaml>");
  EXPECT_EQ(c.source, "<default cpu.yaml>");
  ASSERT_EQ(c.plugins.size(), 3u);
  EXPECT_EQ(c.plugins[0].name, "cpu");
  EXPECT_FALSE(c.plugins[0].optional);
  EXPECT_EQ(c.plugins[1].name, "gloo");
  EXPECT_EQ(c.plugins[2].name, "cuda");
  EXPECT_TRUE(c.plugins[2].optional);
  EXPECT_EQ(c.kernel_prefer, std::vector<std::string>{"cpu"});
  EXPECT_EQ(c.threads, 0);
  EXPECT_EQ(c.optimizations.conv_algo_search, "heuristic");
  EXPECT_EQ(c.optimizations.algo_cache, "/home/tester/.cache/plugflow/algos.yaml");
  EXPECT_EQ(c.optimizations.amp, "off");  // written `amp: off`, a boolean to YAML 1.1 readers
  EXPECT_TRUE(c.optimizations.fuse_pad_conv);
  EXPECT_EQ(c.collective_cpu, "gloo");
  EXPECT_EQ(c.collective_cuda, "nccl");
  EXPECT_DOUBLE_EQ(c.collective_timeout_s, 1800.0);
}

TEST(Config, EveryShippedConfigParses) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(PF_SOURCE_ROOT) / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(plugflow::load_config_file(entry.path().string()));
    ++n;
  }
  EXPECT_GE(n, 2);  // cpu.yaml and cuda.yaml at least
}

TEST(Config, ReadsEveryKey) {
  ScopedEnv home("HOME", "/home/tester");
  const Config c = parse_config(R"(
plugins:
  - cpu
  - {name: ./build/libplugflow_vendor.so, optional: true}
  - name: cuda
    optional: yes
plugin_path: [~/plugins, /opt/plugflow]
kernels: {prefer: [vendor, cpu], cpu_fallback: [xpu]}
threads: 3
optimizations:
  conv_algo_search: exhaustive
  algo_cache: /tmp/algos.yaml
  fuse_pad_conv: false
  fuse_add_to_output: off
  fuse_conv_bn: no
  fuse_bias_act: true
  amp: bf16
collectives: {cpu: gloo, cuda: vendor_ccl, timeout_s: 2.5}
)",
                                "full.yaml");
  ASSERT_EQ(c.plugins.size(), 3u);
  EXPECT_EQ(c.plugins[1].name, "./build/libplugflow_vendor.so");
  EXPECT_TRUE(c.plugins[1].optional);
  EXPECT_TRUE(c.plugins[2].optional);
  EXPECT_EQ(c.plugin_path, (std::vector<std::string>{"/home/tester/plugins", "/opt/plugflow"}));
  EXPECT_EQ(c.kernel_prefer, (std::vector<std::string>{"vendor", "cpu"}));
  EXPECT_EQ(c.kernel_cpu_fallback, std::vector<std::string>{"xpu"});
  EXPECT_EQ(c.threads, 3);
  EXPECT_EQ(c.optimizations.conv_algo_search, "exhaustive");
  EXPECT_EQ(c.optimizations.algo_cache, "/tmp/algos.yaml");
  EXPECT_FALSE(c.optimizations.fuse_pad_conv);
  EXPECT_FALSE(c.optimizations.fuse_add_to_output);
  EXPECT_FALSE(c.optimizations.fuse_conv_bn);
  EXPECT_TRUE(c.optimizations.fuse_bias_act);
  EXPECT_EQ(c.optimizations.amp, "bf16");
  EXPECT_EQ(c.collective_cuda, "vendor_ccl");
  EXPECT_DOUBLE_EQ(c.collective_timeout_s, 2.5);
}

TEST(Config, EmptyDocumentsAndSectionsKeepDefaults) {
  const Config defaults = plugflow::default_config();
  for (const char* text : {"", "# only a comment\n", "optimizations:\n  # all commented out\n", "plugins:\n"}) {
    SCOPED_TRACE(text);
    const Config c = parse_config(text, "empty.yaml");
    EXPECT_EQ(c.source, "empty.yaml");
    ASSERT_EQ(c.plugins.size(), defaults.plugins.size());
    EXPECT_EQ(c.plugins[0].name, "cpu");
    EXPECT_EQ(c.kernel_prefer, defaults.kernel_prefer);
    EXPECT_EQ(c.threads, defaults.threads);
    EXPECT_EQ(c.optimizations.conv_algo_search, defaults.optimizations.conv_algo_search);
    EXPECT_EQ(c.optimizations.algo_cache, defaults.optimizations.algo_cache);
    EXPECT_EQ(c.optimizations.fuse_conv_bn, defaults.optimizations.fuse_conv_bn);
    EXPECT_EQ(c.collective_cpu, defaults.collective_cpu);
    EXPECT_EQ(c.collective_cuda, "nccl");
  }
}

TEST(Config, APartialFileKeepsTheDefaultsOfWhatItLeavesOut) {
  const Config defaults = plugflow::default_config();
  // Only optimizations: plugins, preference, threads and collectives are the default's, and
  // optimizations merge key by key.
  const Config opt = parse_config("optimizations:\n  amp: bf16\n", "opt.yaml");
  ASSERT_EQ(opt.plugins.size(), 3u);
  EXPECT_EQ(opt.plugins[1].name, "gloo");
  EXPECT_EQ(opt.kernel_prefer, std::vector<std::string>{"cpu"});
  EXPECT_EQ(opt.optimizations.amp, "bf16");
  EXPECT_EQ(opt.optimizations.conv_algo_search, defaults.optimizations.conv_algo_search);
  EXPECT_EQ(opt.optimizations.algo_cache, defaults.optimizations.algo_cache);
  EXPECT_TRUE(opt.optimizations.fuse_pad_conv);
  EXPECT_EQ(opt.collective_cpu, "gloo");
  EXPECT_DOUBLE_EQ(opt.collective_timeout_s, defaults.collective_timeout_s);

  const Config coll = parse_config("collectives: {timeout_s: 5}\n", "coll.yaml");
  EXPECT_EQ(coll.collective_cpu, "gloo");
  EXPECT_EQ(coll.collective_cuda, "nccl");
  EXPECT_DOUBLE_EQ(coll.collective_timeout_s, 5.0);

  // plugins replace the default's list; without kernels.prefer they are preferred in order.
  const Config own = parse_config("plugins: [cpu, vendor]\n", "own.yaml");
  ASSERT_EQ(own.plugins.size(), 2u);
  EXPECT_EQ(own.plugins[1].name, "vendor");
  EXPECT_TRUE(own.kernel_prefer.empty());
  EXPECT_EQ(parse_config("plugins: [cpu, vendor]\nkernels: {prefer: [vendor]}\n", "t.yaml").kernel_prefer,
            std::vector<std::string>{"vendor"});
  EXPECT_TRUE(parse_config("plugins: []\n", "none.yaml").plugins.empty());

  // kernels.prefer alone keeps the default's plugins.
  const Config prefer = parse_config("kernels: {prefer: [vendor, cpu]}\n", "prefer.yaml");
  EXPECT_EQ(prefer.plugins.size(), 3u);
  EXPECT_EQ(prefer.kernel_prefer, (std::vector<std::string>{"vendor", "cpu"}));

  const Config threads = parse_config("threads: 3\n", "threads.yaml");
  EXPECT_EQ(threads.threads, 3);
  EXPECT_EQ(threads.plugins.size(), 3u);
}

TEST(Config, RecordsTheLineOfEveryKeyTheFileSets) {
  const Config c = parse_config("threads: 1\nkernels:\n  prefer:\n    - cpu\n    - vendor\ncollectives: {cpu: gloo}\n",
                                "lines.yaml");
  EXPECT_EQ(c.lines.at("threads"), 1);
  EXPECT_EQ(c.lines.at("kernels.prefer"), 3);
  EXPECT_EQ(c.lines.at("kernels.prefer[0]"), 4);
  EXPECT_EQ(c.lines.at("kernels.prefer[1]"), 5);
  EXPECT_EQ(c.lines.at("collectives.cpu"), 6);
  // Keys left out are the default's: no line of this file.
  EXPECT_FALSE(c.lines.contains("plugins"));
  EXPECT_FALSE(c.lines.contains("collectives.timeout_s"));
}

TEST(Config, NamesMustBeStrings) {
  EXPECT_CONTAINS(config_error("collectives:\n  cpu: 5\n"),
                  "test.yaml:2: key 'collectives.cpu': expected a communicator backend name (e.g. gloo), got 5, which "
                  "YAML reads as a number or boolean (quote it if it really is a name)");
  EXPECT_CONTAINS(config_error("collectives: {cuda: true}"), "key 'collectives.cuda': expected a communicator");
  EXPECT_CONTAINS(config_error("collectives: {cuda: [nccl]}"), "key 'collectives.cuda': expected a string, got a list");
  EXPECT_CONTAINS(config_error("kernels:\n  prefer: [cpu, 1.5]\n"),
                  "test.yaml:2: key 'kernels.prefer[1]': expected a provider name, got 1.5");
  EXPECT_EQ(parse_config("collectives: {cpu: \"5\"}", "t.yaml").collective_cpu, "5");  // quoted: a name
}

TEST(Config, NullAlgoCacheTurnsPersistenceOff) {
  EXPECT_EQ(parse_config("optimizations: {algo_cache: ~}", "t.yaml").optimizations.algo_cache, "");
  EXPECT_EQ(parse_config("optimizations:\n  algo_cache:\n", "t.yaml").optimizations.algo_cache, "");
}

TEST(Config, AmpOffAcceptsYaml11Booleans) {
  for (const char* v : {"off", "\"off\"", "false", "no", "Off"}) {
    SCOPED_TRACE(v);
    EXPECT_EQ(parse_config(std::string("optimizations: {amp: ") + v + "}", "t.yaml").optimizations.amp, "off");
  }
  EXPECT_EQ(parse_config("optimizations: {amp: fp16}", "t.yaml").optimizations.amp, "fp16");
  const std::string msg = config_error("optimizations:\n  amp: on\n");
  EXPECT_CONTAINS(msg, "test.yaml:2: key 'optimizations.amp': expected one of off, bf16, fp16, got 'on'");
}

TEST(Config, UnknownKeyNamesLineAndSuggests) {
  const std::string msg = config_error("plugins: [cpu]\nthreds: 2\n");
  EXPECT_STARTS_WITH(msg, "test.yaml:2: key 'threds': unknown key; did you mean 'threads'?");
  EXPECT_CONTAINS(msg, "plugin_path");  // lists what is valid
}

TEST(Config, UnknownNestedKeySuggestsSibling) {
  const std::string msg = config_error("threads: 1\noptimizations:\n  fuse_pad_conv: true\n  fuse_cnov_bn: true\n");
  EXPECT_STARTS_WITH(msg, "test.yaml:4: key 'optimizations.fuse_cnov_bn': unknown key; did you mean 'fuse_conv_bn'?");
  EXPECT_CONTAINS(config_error("kernels: {prefr: [cpu]}"), "key 'kernels.prefr': unknown key; did you mean 'prefer'?");
  EXPECT_CONTAINS(config_error("plugins: [{name: cpu, optinal: true}]"),
                  "key 'plugins[0].optinal': unknown key; did you mean 'optional'?");
}

TEST(Config, UnknownKeyWithoutCloseMatchHasNoHint) {
  const std::string msg = config_error("banana: 1\n");
  EXPECT_CONTAINS(msg, "test.yaml:1: key 'banana': unknown key");
  EXPECT_NOT_CONTAINS(msg, "did you mean");
}

TEST(Config, DuplicateKey) {
  EXPECT_CONTAINS(config_error("threads: 1\nthreads: 2\n"), "test.yaml:2: key 'threads': duplicate key");
}

TEST(Config, WrongTypes) {
  EXPECT_CONTAINS(config_error("threads: two"), "test.yaml:1: key 'threads': expected an integer, got 'two'");
  EXPECT_CONTAINS(config_error("threads: \"2\""), "key 'threads': expected an integer");  // quoted: a string
  EXPECT_CONTAINS(config_error("threads: 1.5"), "key 'threads': expected an integer");
  EXPECT_CONTAINS(config_error("plugins: cpu"), "key 'plugins': expected a list of plugin names");
  EXPECT_CONTAINS(config_error("plugin_path: /opt"), "key 'plugin_path': expected a list of directories");
  EXPECT_CONTAINS(config_error("kernels: [cpu]"), "key 'kernels': expected a map with keys prefer, cpu_fallback, got a list");
  EXPECT_CONTAINS(config_error("kernels: {prefer: {cpu: 1}}"), "key 'kernels.prefer': expected a list");
  EXPECT_CONTAINS(config_error("optimizations:\n  fuse_conv_bn: maybe\n"),
                  "test.yaml:2: key 'optimizations.fuse_conv_bn': expected true or false, got 'maybe'");
  EXPECT_CONTAINS(config_error("optimizations: {algo_cache: [a]}"),
                  "key 'optimizations.algo_cache': expected a string, got a list");
  EXPECT_CONTAINS(config_error("collectives: {timeout_s: soon}"),
                  "key 'collectives.timeout_s': expected a number, got 'soon'");
  EXPECT_CONTAINS(config_error("collectives: {cpu: [gloo]}"), "key 'collectives.cpu': expected a string");
  EXPECT_CONTAINS(config_error("- plugins\n- threads\n"), "test.yaml:1: the config must be a map");
}

TEST(Config, BadValues) {
  EXPECT_CONTAINS(config_error("threads: -1"),
                  "test.yaml:1: key 'threads': expected 0 (one thread per core) or a thread count");
  EXPECT_CONTAINS(config_error("optimizations:\n  conv_algo_search: exaustive\n"),
                  "test.yaml:2: key 'optimizations.conv_algo_search': expected one of heuristic, exhaustive, "
                  "got 'exaustive'; did you mean 'exhaustive'?");
  EXPECT_CONTAINS(config_error("optimizations: {amp: fp8}"), "expected one of off, bf16, fp16, got 'fp8'");
  EXPECT_CONTAINS(config_error("collectives: {timeout_s: 0}"),
                  "key 'collectives.timeout_s': expected a finite number of seconds > 0, got 0");
  EXPECT_CONTAINS(config_error("collectives: {timeout_s: .nan}"), "key 'collectives.timeout_s'");
  EXPECT_CONTAINS(config_error("collectives: {timeout_s: -3}"), "key 'collectives.timeout_s'");
  EXPECT_CONTAINS(config_error("plugins: [\"\"]"), "key 'plugins[0]': expected a non-empty string");
  EXPECT_CONTAINS(config_error("plugins:\n  - cpu\n  - {optional: true}\n"),
                  "test.yaml:3: key 'plugins[1]': a plugin entry needs a 'name'");
  EXPECT_CONTAINS(config_error("plugins:\n  - cpu\n  - [gloo]\n"),
                  "test.yaml:3: key 'plugins[1]': expected a plugin name or path");
  EXPECT_CONTAINS(config_error("plugins: [{name: cuda, optional: sometimes}]"),
                  "key 'plugins[0].optional': expected true or false, got 'sometimes'");
}

TEST(Config, YamlSyntaxErrorNamesFileAndLine) {
  const std::string msg = config_error("threads: 1\nplugins: [cpu, gloo\nkernels: {}\n", "broken.yaml");
  EXPECT_STARTS_WITH(msg, "broken.yaml:");
  EXPECT_CONTAINS(msg, "invalid YAML");
  EXPECT_STARTS_WITH(config_error("threads: 1\n  plugins: [cpu]\n", "indent.yaml"), "indent.yaml:2:");
}

TEST(Config, LoadConfigFileReportsThePath) {
  TempDir dir;
  const fs::path good = dir.write("good.yaml", "plugins: [cpu]\nthreads: 4\n");
  const Config c = plugflow::load_config_file(good.string());
  EXPECT_EQ(c.source, good.string());
  EXPECT_EQ(c.threads, 4);

  const fs::path bad = dir.write("bad.yaml", "plugins: [cpu]\n\noptimisations: {}\n");
  try {
    plugflow::load_config_file(bad.string());
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STARTS_WITH(e.what(), bad.string() + ":3: key 'optimisations': unknown key; did you mean 'optimizations'?");
  }
}

TEST(Config, MissingFileIsAConfigErrorNamingIt) {
  TempDir dir;
  const std::string missing = (dir.path() / "nope.yaml").string();
  try {
    plugflow::load_config_file(missing);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_CONTAINS(e.what(), "config file '" + missing + "' does not exist");
  }
  EXPECT_THROW(plugflow::load_config_file(dir.path().string()), ConfigError);  // a directory
}

TEST(Config, TildeExpandsInPaths) {
  ScopedEnv home("HOME", "/home/tester");
  const Config c = parse_config("plugins: [~/vendor/libplugflow_x.so]\nplugin_path: [\"~\", /abs/~x]\n", "t.yaml");
  EXPECT_EQ(c.plugins[0].name, "/home/tester/vendor/libplugflow_x.so");
  EXPECT_EQ(c.plugin_path, (std::vector<std::string>{"/home/tester", "/abs/~x"}));
  EXPECT_CONTAINS(config_error("plugin_path: [~]"), "key 'plugin_path[0]': expected a string, got nothing (null)");

  TempDir dir;
  dir.write("home.yaml", "threads: 2\n");
  ScopedEnv temp_home("HOME", dir.path().string());
  EXPECT_EQ(plugflow::load_config_file("~/home.yaml").threads, 2);
}
