// The runtime configuration: YAML read with yaml-cpp and checked against a fixed schema.
//
// Every problem is reported as "file:line: key 'a.b': what is wrong" so that a user can jump
// to the line; unknown keys get a "did you mean" hint, since a misspelt key that were silently
// ignored would leave an optimization on or off without anyone noticing.
//
// A file is read over the compiled-in default: `plugins`, `plugin_path`, `kernels` and
// `threads` replace the default's value when the file sets them, `optimizations` and
// `collectives` merge key by key, and a file that sets `plugins` but not `kernels.prefer`
// prefers its own plugins in order (the default's preference names the default's plugins).
#include "plugflow/config.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "plugflow/error.h"
#include "runtime_internal.h"

// Generated at build time from configs/cpu.yaml (tools/embed.py).
extern const char* const plugflow_embedded_default_config;

namespace plugflow {

namespace internal {

std::string expand_user(const std::string& path) {
  if (path.empty() || path[0] != '~') return path;
  const size_t slash = path.find('/');
  const std::string user = path.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
  const std::string rest = slash == std::string::npos ? std::string() : path.substr(slash);
  std::string home;
  if (user.empty()) {
    if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') home = h;
  }
  if (home.empty()) {
    // No $HOME (daemons, some containers) or "~user": ask the password database.
    std::vector<char> buf(16384);
    passwd pw{};
    passwd* found = nullptr;
    const int rc = user.empty() ? getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &found)
                                : getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found);
    if (rc == 0 && found != nullptr && found->pw_dir != nullptr) home = found->pw_dir;
  }
  if (home.empty()) return path;  // leave it as written; opening it will report the path
  return home + rest;
}

}  // namespace internal

namespace {

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), so that
// "threds" and "thraeds" both land on "threads".
size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

}  // namespace

std::optional<std::string> internal::closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

namespace {

std::optional<std::string> closest(std::string_view word, std::initializer_list<std::string_view> candidates) {
  return internal::closest_match(word, std::vector<std::string>(candidates.begin(), candidates.end()));
}

std::string join(std::initializer_list<std::string_view> items, std::string_view sep) {
  std::string out;
  for (std::string_view s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return "nothing (null)";
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
  }
  return "an unknown node";
}

// Reads one document over a base config (the default's values). `source` names it in messages
// (a file path or "<default cpu.yaml>").
class SchemaReader {
 public:
  SchemaReader(const std::string& source, Config base) : source_(source), config_(std::move(base)) {
    config_.source = source;
    config_.lines.clear();  // the base's lines are positions in another file
  }

  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& key, const std::string& problem) const {
    std::string where = source_;
    if (!mark.is_null()) where += ":" + std::to_string(mark.line + 1);
    if (key.empty()) PF_THROW(ConfigError, where, ": ", problem);
    PF_THROW(ConfigError, where, ": key '", key, "': ", problem);
  }

  // A node's own position, or its parent key's when the node has none (null values).
  static YAML::Mark mark_of(const YAML::Node& node, const YAML::Mark& fallback) {
    const YAML::Mark m = node.Mark();
    return m.is_null() ? fallback : m;
  }

  // Walks a map, rejecting unknown and duplicate keys, and calls fn(key, key_mark, value).
  // A null node (a section whose entries are all commented out) is an empty map.
  void for_each_field(const YAML::Node& map, const std::string& path, const YAML::Mark& mark,
                      std::initializer_list<std::string_view> known,
                      const std::function<void(const std::string&, const YAML::Mark&, const YAML::Node&)>& fn) {
    if (map.IsNull()) return;
    if (!map.IsMap())
      fail(mark_of(map, mark), path, "expected a map with keys " + join(known, ", ") + ", got " + describe(map));
    std::set<std::string> seen;
    for (const auto& kv : map) {
      const YAML::Mark key_mark = kv.first.Mark();
      if (!kv.first.IsScalar()) fail(key_mark, path, "keys must be plain names, got " + describe(kv.first));
      const std::string key = kv.first.Scalar();
      const std::string full = path.empty() ? key : path + "." + key;
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        std::string msg = "unknown key";
        if (auto hint = closest(key, known)) msg += "; did you mean '" + std::string(*hint) + "'?";
        msg += " (valid keys";
        msg += path.empty() ? "" : " of '" + path + "'";
        msg += ": " + join(known, ", ") + ")";
        fail(key_mark, full, msg);
      }
      if (!seen.insert(key).second) fail(key_mark, full, "duplicate key");
      note_line(full, key_mark);
      fn(full, key_mark, kv.second);
    }
  }

  std::string read_string(const YAML::Node& node, const std::string& key, const YAML::Mark& mark) const {
    if (node.IsNull())
      fail(mark_of(node, mark), key,
           "expected a string, got nothing (null); note that YAML reads a lone ~ as null, write \"~\" for the "
           "home directory");
    if (!node.IsScalar()) fail(mark_of(node, mark), key, "expected a string, got " + describe(node));
    if (node.Scalar().empty()) fail(mark_of(node, mark), key, "expected a non-empty string");
    return node.Scalar();
  }

  // Quoted scalars are strings in YAML ("2" is not a number), so typed values must be plain.
  static bool is_plain_scalar(const YAML::Node& node) { return node.IsScalar() && node.Tag() != "!"; }

  bool read_bool(const YAML::Node& node, const std::string& key, const YAML::Mark& mark) const {
    bool v = false;
    if (!is_plain_scalar(node) || !YAML::convert<bool>::decode(node, v))
      fail(mark_of(node, mark), key, "expected true or false, got " + describe(node));
    return v;
  }

  long long read_int(const YAML::Node& node, const std::string& key, const YAML::Mark& mark) const {
    long long v = 0;
    if (!is_plain_scalar(node) || !YAML::convert<long long>::decode(node, v))
      fail(mark_of(node, mark), key, "expected an integer, got " + describe(node));
    return v;
  }

  double read_number(const YAML::Node& node, const std::string& key, const YAML::Mark& mark) const {
    double v = 0;
    if (!is_plain_scalar(node) || !YAML::convert<double>::decode(node, v))
      fail(mark_of(node, mark), key, "expected a number, got " + describe(node));
    return v;
  }

  std::string read_choice(const YAML::Node& node, const std::string& key, const YAML::Mark& mark,
                          std::initializer_list<std::string_view> choices) const {
    const std::string v = node.IsScalar() ? node.Scalar() : std::string();
    if (node.IsScalar() && std::find(choices.begin(), choices.end(), v) != choices.end()) return v;
    std::string msg = "expected one of " + join(choices, ", ") + ", got " + describe(node);
    if (node.IsScalar())
      if (auto hint = closest(v, choices)) msg += "; did you mean '" + std::string(*hint) + "'?";
    fail(mark_of(node, mark), key, msg);
  }

  // A name of a provider or communicator backend. YAML reads an unquoted 5 or `on` as a number
  // or a boolean, which is almost surely a slip here; quoted, it is a name.
  std::string read_name(const YAML::Node& node, const std::string& key, const YAML::Mark& mark,
                        std::string_view what) const {
    double number = 0;
    bool boolean = false;
    if (is_plain_scalar(node) &&
        (YAML::convert<double>::decode(node, number) || YAML::convert<bool>::decode(node, boolean)))
      fail(mark_of(node, mark), key,
           "expected " + std::string(what) + ", got " + node.Scalar() +
               ", which YAML reads as a number or boolean (quote it if it really is a name)");
    return read_string(node, key, mark);
  }

  // A list of non-empty strings (names when `names`); null is the empty list.
  std::vector<std::string> read_string_list(const YAML::Node& node, const std::string& key, const YAML::Mark& mark,
                                            std::string_view what, bool names = false) {
    std::vector<std::string> out;
    if (node.IsNull()) return out;
    if (!node.IsSequence())
      fail(mark_of(node, mark), key, "expected a list of " + std::string(what) + ", got " + describe(node));
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string item = key + "[" + std::to_string(i) + "]";
      const YAML::Mark m = mark_of(node[i], mark);
      note_line(item, m);
      out.push_back(names ? read_name(node[i], item, m, "a provider name") : read_string(node[i], item, m));
    }
    return out;
  }

  PluginSpec read_plugin(const YAML::Node& node, const std::string& key, const YAML::Mark& mark) {
    PluginSpec spec;
    if (node.IsMap()) {
      bool has_name = false;
      for_each_field(node, key, mark, {"name", "optional"},
                     [&](const std::string& k, const YAML::Mark& m, const YAML::Node& v) {
                       if (k.ends_with(".name")) {
                         spec.name = read_string(v, k, m);
                         has_name = true;
                       } else {
                         spec.optional = read_bool(v, k, m);
                       }
                     });
      if (!has_name) fail(mark_of(node, mark), key, "a plugin entry needs a 'name' (a plugin name or a path)");
    } else if (node.IsScalar()) {
      spec.name = read_string(node, key, mark);
    } else {
      fail(mark_of(node, mark), key,
           "expected a plugin name or path, or a map {name: ..., optional: true}, got " + describe(node));
    }
    spec.name = internal::expand_user(spec.name);
    return spec;
  }

  Config read(const YAML::Node& root) {
    if (root.IsNull()) return config_;  // an empty file: every default
    if (!root.IsMap())
      fail(root.Mark(), "", "the config must be a map of keys (plugins, kernels, threads, ...), got " + describe(root));

    Config& c = config_;
    bool sets_plugins = false, sets_prefer = false;
    for_each_field(root, "", root.Mark(),
                   {"plugins", "plugin_path", "kernels", "threads", "optimizations", "collectives"},
                   [&](const std::string& key, const YAML::Mark& m, const YAML::Node& v) {
                     if (key == "plugins") {
                       if (v.IsNull()) return;
                       if (!v.IsSequence())
                         fail(mark_of(v, m), key,
                              "expected a list of plugin names or paths (e.g. [cpu, gloo]), got " + describe(v));
                       sets_plugins = true;
                       c.plugins.clear();
                       for (size_t i = 0; i < v.size(); ++i) {
                         const std::string item = key + "[" + std::to_string(i) + "]";
                         note_line(item, mark_of(v[i], m));
                         c.plugins.push_back(read_plugin(v[i], item, mark_of(v[i], m)));
                       }
                     } else if (key == "plugin_path") {
                       if (v.IsNull()) return;
                       c.plugin_path.clear();
                       for (auto& dir : read_string_list(v, key, m, "directories"))
                         c.plugin_path.push_back(internal::expand_user(dir));
                     } else if (key == "kernels") {
                       for_each_field(v, key, m, {"prefer", "cpu_fallback"},
                                      [&](const std::string& k, const YAML::Mark& km, const YAML::Node& kv) {
                                        if (kv.IsNull()) return;
                                        if (k == "kernels.cpu_fallback") {
                                          c.kernel_cpu_fallback = read_string_list(kv, k, km, "device type names", true);
                                          return;
                                        }
                                        sets_prefer = true;
                                        c.kernel_prefer = read_string_list(kv, k, km, "provider names", true);
                                      });
                     } else if (key == "threads") {
                       const long long n = read_int(v, key, m);
                       if (n < 0 || n > (1 << 16))
                         fail(mark_of(v, m), key,
                              "expected 0 (one thread per core) or a thread count up to 65536, got " + v.Scalar());
                       c.threads = static_cast<int>(n);
                     } else if (key == "optimizations") {
                       read_optimizations(v, key, m, c.optimizations);
                     } else if (key == "collectives") {
                       read_collectives(v, key, m, c);
                     }
                   });
    // The default's preference names the default's plugins: a file that lists its own
    // plugins prefers them in order unless it says otherwise.
    if (sets_plugins && !sets_prefer) c.kernel_prefer.clear();
    return c;
  }

  void read_optimizations(const YAML::Node& node, const std::string& path, const YAML::Mark& mark, Optimizations& o) {
    for_each_field(node, path, mark,
                   {"conv_algo_search", "algo_cache", "fuse_pad_conv", "fuse_add_to_output", "fuse_conv_bn",
                    "fuse_bias_act", "fuse_model_update", "blocked_layout", "amp", "graph", "graph_memory_format"},
                   [&](const std::string& key, const YAML::Mark& m, const YAML::Node& v) {
                     const std::string leaf = key.substr(path.size() + 1);
                     if (leaf == "conv_algo_search") {
                       o.conv_algo_search = read_choice(v, key, m, {"heuristic", "exhaustive"});
                     } else if (leaf == "algo_cache") {
                       // null (`~` or nothing) turns persistence off; YAML reads a lone `~` as null.
                       o.algo_cache = v.IsNull() ? std::string() : internal::expand_user(read_string(v, key, m));
                     } else if (leaf == "fuse_pad_conv") {
                       o.fuse_pad_conv = read_bool(v, key, m);
                     } else if (leaf == "fuse_add_to_output") {
                       o.fuse_add_to_output = read_bool(v, key, m);
                     } else if (leaf == "fuse_conv_bn") {
                       o.fuse_conv_bn = read_bool(v, key, m);
                     } else if (leaf == "fuse_bias_act") {
                       o.fuse_bias_act = read_bool(v, key, m);
                     } else if (leaf == "fuse_model_update") {
                       o.fuse_model_update = read_bool(v, key, m);
                     } else if (leaf == "blocked_layout") {
                       o.blocked_layout = read_bool(v, key, m);
                     } else if (leaf == "graph") {
                       o.graph = read_bool(v, key, m);
                     } else if (leaf == "graph_memory_format") {
                       o.graph_memory_format = read_choice(v, key, m, {"contiguous", "channels_last"});
                     } else if (leaf == "amp") {
                       // YAML 1.1 readers take `off`/`no`/`false` for a boolean false; all mean "off".
                       bool b = true;
                       if (is_plain_scalar(v) && YAML::convert<bool>::decode(v, b) && !b) {
                         o.amp = "off";
                       } else {
                         o.amp = read_choice(v, key, m, {"off", "bf16", "fp16"});
                       }
                     }
                   });
  }

  void read_collectives(const YAML::Node& node, const std::string& path, const YAML::Mark& mark, Config& c) {
    for_each_field(node, path, mark, {"cpu", "cuda", "timeout_s"},
                   [&](const std::string& key, const YAML::Mark& m, const YAML::Node& v) {
                     const std::string leaf = key.substr(path.size() + 1);
                     if (leaf == "cpu") {
                       c.collective_cpu = read_name(v, key, m, "a communicator backend name (e.g. gloo)");
                     } else if (leaf == "cuda") {
                       c.collective_cuda = read_name(v, key, m, "a communicator backend name (e.g. nccl)");
                     } else {
                       const double t = read_number(v, key, m);
                       if (!std::isfinite(t) || t <= 0)
                         fail(mark_of(v, m), key, "expected a finite number of seconds > 0, got " + v.Scalar());
                       c.collective_timeout_s = t;
                     }
                   });
  }

 private:
  void note_line(const std::string& key, const YAML::Mark& mark) {
    if (!mark.is_null()) config_.lines[key] = mark.line + 1;
  }

  const std::string& source_;
  Config config_;
};

Config read_document(const std::string& text, const std::string& source, Config base) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    PF_THROW(ConfigError, source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": invalid YAML: ", e.msg);
  } catch (const YAML::Exception& e) {
    PF_THROW(ConfigError, source, ": invalid YAML: ", e.what());
  }
  try {
    return SchemaReader(source, std::move(base)).read(root);
  } catch (const YAML::Exception& e) {
    // The reader checks types before converting, so this means a yaml-cpp quirk, not user error;
    // still report it as a config problem with the position yaml-cpp gives.
    if (e.mark.is_null()) PF_THROW(ConfigError, source, ": ", e.msg);
    PF_THROW(ConfigError, source, ":", e.mark.line + 1, ": ", e.msg);
  }
}

}  // namespace

Config parse_config(const std::string& text, const std::string& source) {
  return read_document(text, source, default_config());
}

Config default_config() { return read_document(default_config_text(), internal::kDefaultConfigSource, Config{}); }

void internal::config_key_error(const Config& config, const std::string& key, const std::string& problem) {
  const auto line = config.lines.find(key);
  if (line == config.lines.end()) PF_THROW(ConfigError, config.source, ": key '", key, "': ", problem);
  PF_THROW(ConfigError, config.source, ":", line->second, ": key '", key, "': ", problem);
}

Config load_config_file(const std::string& path) {
  const std::string file = internal::expand_user(path);
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    PF_THROW(ConfigError, "config file '", file, "' does not exist",
             std::filesystem::path(file).is_relative()
                 ? " (relative to the working directory " + std::filesystem::current_path(ec).string() + ")"
                 : std::string());
  if (std::filesystem::is_directory(file, ec))
    PF_THROW(ConfigError, "config file '", file, "' is a directory, expected a YAML file");
  std::ifstream in(file, std::ios::binary);
  if (!in) PF_THROW(ConfigError, "cannot open config file '", file, "': ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) PF_THROW(ConfigError, "cannot read config file '", file, "': ", std::strerror(errno));
  return parse_config(text.str(), file);
}

const std::string& default_config_text() {
  static const std::string text(plugflow_embedded_default_config);
  return text;
}

}  // namespace plugflow
