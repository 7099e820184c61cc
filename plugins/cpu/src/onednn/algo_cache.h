// The persisted algorithm choices of the `exhaustive` search (optimizations.algo_cache).
//
// The file is YAML with one map per section, `section: {problem key: algorithm}`. The CPU plugin
// writes only its own section (named after the library version and CPU ISA, so a cache from
// another machine or oneDNN release is not trusted) and keeps the others as it found them, so
// several plugins can share one file.
#pragma once
#include <optional>
#include <string>

namespace plugflow::cpu::onednn {

// The algorithm stored for `key` in `section` of the file at `path` ('~' expands to $HOME), or
// nothing. The file is read once per path; a missing file is empty, and an unreadable or corrupt
// one is ignored with a warning on stderr.
std::optional<std::string> cached_algorithm(const std::string& path, const std::string& section,
                                            const std::string& key);

// Records `algorithm` for `key` and rewrites the file atomically (a temporary file renamed over
// it). A failure to write is a warning on stderr: the cache is an optimization.
void store_algorithm(const std::string& path, const std::string& section, const std::string& key,
                     const std::string& algorithm);

}  // namespace plugflow::cpu::onednn
