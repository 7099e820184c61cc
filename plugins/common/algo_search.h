// Algorithm choice for library-backed kernels (oneDNN convolutions on CPU, cuDNN ones on CUDA),
// the two strategies of optimizations.conv_algo_search, with no device or library in it:
//
// - `heuristic`: the library's own pick, no timing;
// - `exhaustive`: every candidate run on the call's buffers and timed; the fastest is kept and,
//   when a cache file is configured, persisted in the plugin's section of it (algo_cache.h), so a
//   later process reads it instead of timing again. An entry the problem can no longer use (a
//   library update dropped the algorithm, a smaller workspace limit) is stale: searched again
//   and overwritten.
//
// Choices are kept in memory per (strategy, problem key). What runs and how it is timed are
// parameters (AlgoSource), so the logic is tested with a fake timer on any machine.
#pragma once
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace plugflow::algo_search {

enum class Strategy { Heuristic, Exhaustive };

// "heuristic" or "exhaustive" (the config's values); std::invalid_argument otherwise.
Strategy parse_strategy(const std::string& name);

// How one problem's candidates are known and run. Algorithms are named by strings, the names
// the cache file stores and `plugflow.info --algos` shows.
struct AlgoSource {
  // The library's pick for the heuristic strategy; nothing when the library has none.
  std::function<std::optional<std::string>()> heuristic;
  // The exhaustive strategy's candidates, in the library's order of preference (ties in time go
  // to the earlier one).
  std::function<std::vector<std::string>()> candidates;
  // Runs `algorithm` once on the call's buffers and returns its time in seconds; nothing when
  // the algorithm cannot run this problem (it is skipped).
  std::function<std::optional<double>(const std::string& algorithm)> time;
  // Whether an algorithm read from the cache file can still run this problem. Unset: it can
  // when it is one of candidates().
  std::function<bool(const std::string& algorithm)> usable;
  // Timed runs per candidate after one untimed warm-up; the fastest counts. 1 with no warm-up
  // suits a `time` that reports a measurement the library made itself (cuDNN's Find).
  int repetitions = 3;
  bool warm_up = true;
};

struct Choice {
  std::string algorithm;
  std::string source;  // "heuristic", "search" (timed now) or "cache" (read from the file)
  bool fresh = false;  // chosen by this call (report it); false for the in-memory cache's answer
};

class AlgoSelector {
 public:
  // `section`: this plugin's section of the cache file (its library version and processor).
  explicit AlgoSelector(std::string section) : section_(std::move(section)) {}

  const std::string& section() const { return section_; }

  // The algorithm for problem `key` under `strategy`, or nothing when no candidate can run it
  // (then the caller falls back to another kernel). `cache_file` empty: no persistence. The
  // source's functions run without the selector's lock held (a search may take long); two
  // threads racing on a new key both search, and the first answer stored wins.
  std::optional<Choice> choose(Strategy strategy, const std::string& key, const std::string& cache_file,
                               const AlgoSource& source);

  // Forgets the in-memory choices (the file stays).
  void clear();

 private:
  std::optional<Choice> decide(Strategy strategy, const std::string& key, const std::string& cache_file,
                               const AlgoSource& source) const;

  std::string section_;
  std::mutex mutex_;
  std::map<std::string, std::optional<Choice>> memory_;  // "strategy|key" -> choice
};

// The fastest of `candidates` under `time` (warm-up and repetitions as in `source`), or nothing
// when none can run.
std::optional<std::string> fastest(const std::vector<std::string>& candidates, const AlgoSource& source);

}  // namespace plugflow::algo_search
