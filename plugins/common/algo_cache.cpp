#include "algo_cache.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <system_error>

namespace plugflow::algo_search {
namespace {

std::string expand_user(const std::string& path) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + path.substr(1) : path;
}

void warn(const std::string& path, const std::string& what) {
  std::fprintf(stderr, "plugflow: warning: algorithm cache '%s': %s\n", path.c_str(), what.c_str());
}

// The whole file as sections of key -> algorithm. Throws YAML::Exception or std::runtime_error
// when the file exists but is not such a map; a missing file is an empty cache.
using Sections = std::map<std::string, std::map<std::string, std::string>>;
Sections read_file(const std::string& file) {
  Sections sections;
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return sections;
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot be read");
  const YAML::Node root = YAML::Load(in);
  if (root.IsNull()) return sections;  // an empty file
  if (!root.IsMap()) throw std::runtime_error("is not a YAML map of sections");
  for (const auto& section : root) {
    if (!section.second.IsMap()) throw std::runtime_error("section '" + section.first.Scalar() + "' is not a map");
    auto& entries = sections[section.first.as<std::string>()];
    for (const auto& e : section.second) entries[e.first.as<std::string>()] = e.second.as<std::string>();
  }
  return sections;
}

// The cache of the file last used (configs normally name one file for the process's life).
struct State {
  std::mutex mutex;
  std::string path;  // as configured
  Sections sections;
};
State& state() {
  static State s;
  return s;
}

// Loads `path` into the state unless it is loaded already. Caller holds the mutex.
void load(State& s, const std::string& path) {
  if (s.path == path) return;
  s.path = path;
  s.sections.clear();
  try {
    s.sections = read_file(expand_user(path));
  } catch (const std::exception& e) {
    warn(path, std::string("ignored (") + e.what() + ")");
  }
}

}  // namespace

std::optional<std::string> cached_algorithm(const std::string& path, const std::string& section,
                                            const std::string& key) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  load(s, path);
  const auto sec = s.sections.find(section);
  if (sec == s.sections.end()) return std::nullopt;
  const auto it = sec->second.find(key);
  if (it == sec->second.end()) return std::nullopt;
  return it->second;
}

void store_algorithm(const std::string& path, const std::string& section, const std::string& key,
                     const std::string& algorithm) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  load(s, path);
  s.sections[section][key] = algorithm;
  const std::string file = expand_user(path);
  // Another process (or plugin) may have written other sections since we read the file.
  Sections merged;
  try {
    merged = read_file(file);
  } catch (const std::exception&) {
    // A corrupt file was warned about at load; it is replaced.
  }
  merged[section] = s.sections[section];

  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const auto& [name, entries] : merged) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
    for (const auto& [k, algo] : entries) out << YAML::Key << k << YAML::Value << algo;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;

  std::error_code ec;
  const std::filesystem::path target(file);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  const std::string tmp = file + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << "# plugflow algorithm cache (written by the plugins; safe to delete)\n" << out.c_str() << "\n";
    f.close();
    if (!f) {
      warn(path, "cannot be written");
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, target, ec);
  if (ec) {
    warn(path, "cannot be replaced (" + ec.message() + ")");
    std::filesystem::remove(tmp, ec);
  }
}

}  // namespace plugflow::algo_search
