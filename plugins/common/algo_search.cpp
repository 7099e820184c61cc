#include "algo_search.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "algo_cache.h"

namespace plugflow::algo_search {

Strategy parse_strategy(const std::string& name) {
  if (name == "heuristic") return Strategy::Heuristic;
  if (name == "exhaustive") return Strategy::Exhaustive;
  throw std::invalid_argument("conv_algo_search: expected 'heuristic' or 'exhaustive', got '" + name + "'");
}

std::optional<std::string> fastest(const std::vector<std::string>& candidates, const AlgoSource& source) {
  std::optional<std::string> best;
  double best_s = std::numeric_limits<double>::infinity();
  for (const std::string& algo : candidates) {
    if (source.warm_up && !source.time(algo)) continue;  // page faults, lazy set-up; or cannot run
    std::optional<double> fastest_s;
    for (int rep = 0; rep < std::max(1, source.repetitions); ++rep) {
      const std::optional<double> s = source.time(algo);
      if (!s) break;
      fastest_s = std::min(fastest_s.value_or(*s), *s);
    }
    if (fastest_s && *fastest_s < best_s) {
      best_s = *fastest_s;
      best = algo;
    }
  }
  return best;
}

std::optional<Choice> AlgoSelector::decide(Strategy strategy, const std::string& key, const std::string& cache_file,
                                           const AlgoSource& source) const {
  if (strategy == Strategy::Heuristic) {
    const auto algo = source.heuristic();
    if (!algo) return std::nullopt;
    return Choice{*algo, "heuristic", true};
  }
  std::optional<std::vector<std::string>> candidates;  // asked once, when needed
  const auto get_candidates = [&]() -> const std::vector<std::string>& {
    if (!candidates) candidates = source.candidates();
    return *candidates;
  };
  if (!cache_file.empty()) {
    if (const auto cached = cached_algorithm(cache_file, section_, key)) {
      const bool usable = source.usable ? source.usable(*cached)
                                        : std::find(get_candidates().begin(), get_candidates().end(), *cached) !=
                                              get_candidates().end();
      if (usable) return Choice{*cached, "cache", true};
      // A stale entry: searched again below, and overwritten.
    }
  }
  const auto best = fastest(get_candidates(), source);
  if (!best) return std::nullopt;
  if (!cache_file.empty()) store_algorithm(cache_file, section_, key, *best);
  return Choice{*best, "search", true};
}

std::optional<Choice> AlgoSelector::choose(Strategy strategy, const std::string& key, const std::string& cache_file,
                                           const AlgoSource& source) {
  const std::string memory_key = (strategy == Strategy::Heuristic ? "heuristic|" : "exhaustive|") + key;
  {
    std::lock_guard lock(mutex_);
    if (const auto it = memory_.find(memory_key); it != memory_.end()) {
      std::optional<Choice> known = it->second;
      if (known) known->fresh = false;
      return known;
    }
  }
  const std::optional<Choice> choice = decide(strategy, key, cache_file, source);
  std::lock_guard lock(mutex_);
  const auto [it, inserted] = memory_.emplace(memory_key, choice);
  std::optional<Choice> result = it->second;
  if (!inserted && result) result->fresh = false;  // another thread's answer won the race
  return result;
}

void AlgoSelector::clear() {
  std::lock_guard lock(mutex_);
  memory_.clear();
}

}  // namespace plugflow::algo_search
