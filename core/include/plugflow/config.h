// The runtime configuration (YAML). Parsed and validated against a schema: unknown keys,
// wrong types and bad values raise ConfigError with the file, line and key. A file is read
// over the compiled-in default (configs/cpu.yaml): keys it leaves out keep the default's values
// (docs/config.md has the merge rule). Names that only the loaded plugins can confirm
// (kernels.prefer, collectives) are checked when init applies the config.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plugflow/export.h"

namespace plugflow {

struct PluginSpec {
  std::string name;  // a bare name ("cpu") searched on the plugin path, or a path to a library
  bool optional = false;  // a failure is recorded (plugflow.info shows it) instead of raised
};

struct Optimizations {
  std::string conv_algo_search = "heuristic";  // heuristic | exhaustive
  std::string algo_cache;                      // file path; empty: no persistence
  // nn.Graph's pass defaults (graph.config overrides them per graph)
  bool fuse_pad_conv = true;
  bool fuse_add_to_output = true;
  bool fuse_conv_bn = true;
  bool fuse_bias_act = true;
  bool fuse_model_update = true;
  // float32 CPU activations kept channel-blocked (nChw16c) between convolutions and batch norms
  bool blocked_layout = true;
  std::string amp = "off";  // off | bf16 | fp16
  // The layout of nn.Graph's image activations: contiguous (the arguments' own) | channels_last
  std::string graph_memory_format = "contiguous";
  // Programs that can run their step either eagerly or as an nn.Graph (plugflow.nn.graph_mode())
  bool graph = false;
};

struct Config {
  std::string source = "<default>";  // file the config came from (for messages)
  std::vector<PluginSpec> plugins;
  std::vector<std::string> plugin_path;   // extra directories searched first
  std::vector<std::string> kernel_prefer;  // provider order; empty: the loaded plugins in order
  // Device types whose ops without a kernel run on the CPU (inputs copied there, results back).
  std::vector<std::string> kernel_cpu_fallback;
  int threads = 0;                         // 0: the machine's core count
  Optimizations optimizations;
  std::string collective_cpu = "gloo";
  std::string collective_cuda = "nccl";
  double collective_timeout_s = 1800.0;
  // The 1-based line in `source` of each key the file sets ("threads", "kernels.prefer[1]",
  // "collectives.cuda"), for errors found when the config is applied. A key missing here took
  // the default's value; init checks collectives values only where the file sets them.
  std::map<std::string, int> lines;
};

// Parses a config file's text over the compiled-in default.
PF_API Config parse_config(const std::string& text, const std::string& source);
PF_API Config load_config_file(const std::string& path);
PF_API const std::string& default_config_text();  // configs/cpu.yaml, compiled in
PF_API Config default_config();                   // the same, parsed

}  // namespace plugflow
