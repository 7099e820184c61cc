// Random number generators: a Philox key (the seed) and a counter offset (plugflow/philox.h).
// Each random call reserves a range of counters, so results depend only on the seed and the
// sequence of calls, are the same on every device and independent of thread count.
#pragma once
#include <cstdint>
#include <mutex>
#include <utility>

#include "plugflow/export.h"

namespace plugflow {

class PF_API Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ull;  // PyTorch's default seed

  explicit Generator(uint64_t seed = kDefaultSeed) : seed_(seed) {}
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Restarts the stream from `seed`.
  void manual_seed(uint64_t seed);
  uint64_t initial_seed() const;
  // The seed and the first of `n` counters reserved for one random call.
  std::pair<uint64_t, uint64_t> reserve(uint64_t n);
  // (seed, offset): saving and restoring it replays the same numbers.
  std::pair<uint64_t, uint64_t> state() const;
  void set_state(uint64_t seed, uint64_t offset);

 private:
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The generator random ops use when none is given (torch.default_generator); one for all
// devices, so manual_seed seeds CPU and CUDA alike.
PF_API Generator& default_generator();

}  // namespace plugflow
