// The plugins' shared algorithm search (plugins/common/algo_search.h) with a fake timer: what
// each strategy asks of the library, that `exhaustive` keeps the fastest candidate, the
// in-memory cache, and the persistent cache file (round trip, other sections kept, a corrupt
// file, a stale entry).
#include "algo_search.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../core/test_helpers.h"

namespace {

using plugflow::algo_search::AlgoSelector;
using plugflow::algo_search::AlgoSource;
using plugflow::algo_search::parse_strategy;
using plugflow::algo_search::Strategy;
using pf_test::TempDir;

// A library whose algorithms take the given times, run after run (the last value repeats);
// an algorithm with no times cannot run the problem. Counts what it is asked.
struct FakeLibrary {
  FakeLibrary(std::vector<std::string> names, std::map<std::string, std::vector<double>> run_times,
              std::optional<std::string> heuristic_pick = std::nullopt)
      : candidates(std::move(names)), times(std::move(run_times)), pick(std::move(heuristic_pick)) {}

  std::vector<std::string> candidates;
  std::map<std::string, std::vector<double>> times;
  std::optional<std::string> pick;  // the heuristic's answer
  std::map<std::string, int> runs;
  int heuristic_calls = 0, candidate_calls = 0;

  AlgoSource source() {
    AlgoSource s;
    s.heuristic = [this] {
      ++heuristic_calls;
      return pick;
    };
    s.candidates = [this] {
      ++candidate_calls;
      return candidates;
    };
    s.time = [this](const std::string& algo) -> std::optional<double> {
      const auto it = times.find(algo);
      if (it == times.end() || it->second.empty()) return std::nullopt;
      const int n = runs[algo]++;
      return it->second[std::min<size_t>(static_cast<size_t>(n), it->second.size() - 1)];
    };
    return s;
  }
  int total_runs() const {
    int n = 0;
    for (const auto& [algo, count] : runs) n += count;
    return n;
  }
};

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AlgoSearch, ParseStrategy) {
  EXPECT_EQ(parse_strategy("heuristic"), Strategy::Heuristic);
  EXPECT_EQ(parse_strategy("exhaustive"), Strategy::Exhaustive);
  EXPECT_THROW(parse_strategy("fastest"), std::invalid_argument);
}

TEST(AlgoSearch, HeuristicAsksTheLibraryAndTimesNothing) {
  FakeLibrary lib{{"a", "b"}, {{"a", {1.0}}, {"b", {2.0}}}, "b"};
  AlgoSelector sel("test section");
  const auto choice = sel.choose(Strategy::Heuristic, "k", "", lib.source());
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->algorithm, "b");  // the library's pick, though "a" would be faster
  EXPECT_EQ(choice->source, "heuristic");
  EXPECT_TRUE(choice->fresh);
  EXPECT_EQ(lib.total_runs(), 0);
  EXPECT_EQ(lib.candidate_calls, 0);

  FakeLibrary none{{"a"}, {{"a", {1.0}}}, std::nullopt};
  EXPECT_FALSE(sel.choose(Strategy::Heuristic, "other", "", none.source()));
}

TEST(AlgoSearch, ExhaustivePicksTheFastest) {
  // "c" is fastest on its best run; "b" cannot run the problem; "a" is steady but slower.
  FakeLibrary lib{{"a", "b", "c", "d"}, {{"a", {3.0, 2.0, 2.0, 2.0}}, {"c", {9.0, 4.0, 1.5, 6.0}}, {"d", {2.5}}}};
  AlgoSelector sel("test section");
  const auto choice = sel.choose(Strategy::Exhaustive, "k", "", lib.source());
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->algorithm, "c");
  EXPECT_EQ(choice->source, "search");
  EXPECT_EQ(lib.heuristic_calls, 0);
  // One warm-up (not counted: "c"'s 9.0) and three timed runs per candidate that can run.
  EXPECT_EQ(lib.runs["a"], 4);
  EXPECT_EQ(lib.runs["c"], 4);
  EXPECT_EQ(lib.runs["d"], 4);
}

TEST(AlgoSearch, ExhaustiveTieGoesToTheEarlierCandidateAndWarmUpIsOptional) {
  FakeLibrary lib{{"x", "y"}, {{"x", {1.0}}, {"y", {1.0}}}};
  AlgoSource src = lib.source();
  src.warm_up = false;  // as for a library that measured the candidates itself
  src.repetitions = 1;
  AlgoSelector sel("test section");
  const auto choice = sel.choose(Strategy::Exhaustive, "k", "", src);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->algorithm, "x");
  EXPECT_EQ(lib.runs["x"], 1);
  EXPECT_EQ(lib.runs["y"], 1);
}

TEST(AlgoSearch, NothingRunsMeansNoChoiceAndNothingStored) {
  TempDir dir;
  const auto file = dir.path() / "algos.yaml";
  FakeLibrary lib{{"a", "b"}, {}};
  AlgoSelector sel("test section");
  EXPECT_FALSE(sel.choose(Strategy::Exhaustive, "k", file.string(), lib.source()));
  EXPECT_FALSE(std::filesystem::exists(file));
  // Remembered: the next call does not try again.
  EXPECT_FALSE(sel.choose(Strategy::Exhaustive, "k", file.string(), lib.source()));
  EXPECT_EQ(lib.candidate_calls, 1);
}

TEST(AlgoSearch, InMemoryCachePerStrategyAndKey) {
  FakeLibrary lib{{"a", "b"}, {{"a", {2.0}}, {"b", {1.0}}}, "a"};
  AlgoSelector sel("test section");
  ASSERT_EQ(sel.choose(Strategy::Exhaustive, "k", "", lib.source())->algorithm, "b");
  const int runs = lib.total_runs();
  const auto again = sel.choose(Strategy::Exhaustive, "k", "", lib.source());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->algorithm, "b");
  EXPECT_EQ(again->source, "search");
  EXPECT_FALSE(again->fresh);  // already reported
  EXPECT_EQ(lib.total_runs(), runs);
  // The other strategy and another key are separate entries.
  EXPECT_EQ(sel.choose(Strategy::Heuristic, "k", "", lib.source())->algorithm, "a");
  ASSERT_TRUE(sel.choose(Strategy::Exhaustive, "k2", "", lib.source()));
  EXPECT_GT(lib.total_runs(), runs);
  sel.clear();
  EXPECT_TRUE(sel.choose(Strategy::Exhaustive, "k", "", lib.source())->fresh);
}

TEST(AlgoSearch, CacheFileRoundTrip) {
  TempDir dir;
  const auto file = dir.path() / "sub" / "algos.yaml";  // the directory does not exist yet
  FakeLibrary lib{{"a", "b"}, {{"a", {2.0}}, {"b", {1.0}}}};
  {
    AlgoSelector sel("gpu lib 9.1 model X");
    const auto choice = sel.choose(Strategy::Exhaustive, "conv2d f16 key: 1", file.string(), lib.source());
    ASSERT_TRUE(choice);
    EXPECT_EQ(choice->source, "search");
  }
  const YAML::Node root = YAML::LoadFile(file.string());
  EXPECT_EQ(root["gpu lib 9.1 model X"]["conv2d f16 key: 1"].as<std::string>(), "b");
  EXPECT_TRUE(std::filesystem::directory_iterator(file.parent_path()) != std::filesystem::directory_iterator());
  for (const auto& e : std::filesystem::directory_iterator(file.parent_path()))
    EXPECT_EQ(e.path().filename(), "algos.yaml");  // no temporary file left behind

  // A new selector (a later process) reads the entry and times nothing.
  const int runs = lib.total_runs();
  AlgoSelector later("gpu lib 9.1 model X");
  const auto choice = later.choose(Strategy::Exhaustive, "conv2d f16 key: 1", file.string(), lib.source());
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->algorithm, "b");
  EXPECT_EQ(choice->source, "cache");
  EXPECT_TRUE(choice->fresh);
  EXPECT_EQ(lib.total_runs(), runs);
  // Another section (another library release or device) does not trust it.
  AlgoSelector other("gpu lib 9.2 model X");
  EXPECT_EQ(other.choose(Strategy::Exhaustive, "conv2d f16 key: 1", file.string(), lib.source())->source, "search");
}

TEST(AlgoSearch, ReadsAFileWrittenByAnotherProcessAndKeepsItsSections) {
  TempDir dir;
  const auto file = dir.write("algos.yaml",
                              "cpu onednn 2.7:\n  'conv2d f32 k': winograd\n"
                              "mine:\n  'conv2d k1': a\n");
  FakeLibrary lib{{"a", "b"}, {{"a", {2.0}}, {"b", {1.0}}}};
  AlgoSelector sel("mine");
  const auto cached = sel.choose(Strategy::Exhaustive, "conv2d k1", file.string(), lib.source());
  ASSERT_TRUE(cached);
  EXPECT_EQ(cached->algorithm, "a");  // the file's word, not re-timed
  EXPECT_EQ(cached->source, "cache");
  EXPECT_EQ(lib.total_runs(), 0);
  ASSERT_EQ(sel.choose(Strategy::Exhaustive, "conv2d k2", file.string(), lib.source())->algorithm, "b");
  const YAML::Node root = YAML::LoadFile(file.string());
  EXPECT_EQ(root["cpu onednn 2.7"]["conv2d f32 k"].as<std::string>(), "winograd");
  EXPECT_EQ(root["mine"]["conv2d k1"].as<std::string>(), "a");
  EXPECT_EQ(root["mine"]["conv2d k2"].as<std::string>(), "b");
}

TEST(AlgoSearch, CorruptCacheFileWarnsSearchesAndIsReplaced) {
  for (const std::string content : {"{{{ not: yaml: [", "- a list\n- not a map\n", "mine: 3\n"}) {
    SCOPED_TRACE(content);
    TempDir dir;
    const auto file = dir.write("algos.yaml", content);
    FakeLibrary lib{{"a", "b"}, {{"a", {2.0}}, {"b", {1.0}}}};
    AlgoSelector sel("mine");
    testing::internal::CaptureStderr();
    const auto choice = sel.choose(Strategy::Exhaustive, "k", file.string(), lib.source());
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_PRED_FORMAT2(pf_test::contains, err, "warning: algorithm cache");
    EXPECT_PRED_FORMAT2(pf_test::contains, err, file.string());
    ASSERT_TRUE(choice);
    EXPECT_EQ(choice->algorithm, "b");
    EXPECT_EQ(choice->source, "search");
    const YAML::Node root = YAML::Load(read(file));
    EXPECT_EQ(root["mine"]["k"].as<std::string>(), "b");
  }
}

TEST(AlgoSearch, StaleEntryIsSearchedAgainAndOverwritten) {
  TempDir dir;
  // "gone" is no longer a candidate (a library update dropped it).
  const auto file = dir.write("algos.yaml", "mine:\n  k: gone\n  k2: a\n");
  FakeLibrary lib{{"a", "b"}, {{"a", {2.0}}, {"b", {1.0}}}};
  AlgoSelector sel("mine");
  const auto choice = sel.choose(Strategy::Exhaustive, "k", file.string(), lib.source());
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->algorithm, "b");
  EXPECT_EQ(choice->source, "search");
  EXPECT_EQ(YAML::Load(read(file))["mine"]["k"].as<std::string>(), "b");

  // A candidate the problem cannot use any more (say, its workspace is over a new limit), as
  // the plugin's `usable` says.
  AlgoSource src = lib.source();
  src.usable = [](const std::string& algo) { return algo != "a"; };
  const auto second = sel.choose(Strategy::Exhaustive, "k2", file.string(), src);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->source, "search");
  EXPECT_EQ(second->algorithm, "b");
  EXPECT_EQ(YAML::Load(read(file))["mine"]["k2"].as<std::string>(), "b");
}

}  // namespace
