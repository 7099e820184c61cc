// The persisted algorithm choices of the `exhaustive` search (optimizations.algo_cache).
//
// The file is YAML with one map per section, `section: {problem key: algorithm}`. A plugin
// writes only its own section (named after its library's version and the processor, e.g. the
// oneDNN release and CPU ISA, or the cuDNN release and GPU model, so a cache from another
// machine or release is not trusted) and keeps the others as it found them, so several plugins
// (each with its own copy of this code) share one file.
#pragma once
#include <optional>
#include <string>

namespace plugflow::algo_search {

// The algorithm stored for `key` in `section` of the file at `path` ('~' expands to $HOME), or
// nothing. The file is read once per path; a missing file is empty, and an unreadable or corrupt
// one is ignored with a warning on stderr.
std::optional<std::string> cached_algorithm(const std::string& path, const std::string& section,
                                            const std::string& key);

// Records `algorithm` for `key` and rewrites the file atomically (a temporary file renamed over
// it). A failure to write is a warning on stderr: the cache is an optimization.
void store_algorithm(const std::string& path, const std::string& section, const std::string& key,
                     const std::string& algorithm);

}  // namespace plugflow::algo_search
