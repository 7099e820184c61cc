// The busy-machine guard of the CPU plugin's parallel loops (plugins/cpu/src/parallel.h): which
// regions count as late, how long small loops then stay on the calling thread, and the backoff.
#include <gtest/gtest.h>

#include "../../../plugins/cpu/src/parallel.h"

namespace {

using plugflow::cpu::LateWorkerGuard;

int64_t serial_turns(LateWorkerGuard& guard) {
  int64_t turns = 0;
  while (guard.take_serial_turn()) ++turns;
  return turns;
}

constexpr int64_t kUs = 1000;

TEST(LateWorkerGuard, PunctualRegionsKeepLoopsParallel) {
  LateWorkerGuard guard;
  EXPECT_FALSE(guard.take_serial_turn());
  guard.observe(10 * kUs, 100 * kUs);  // a worker woken from sleep on an idle machine
  EXPECT_FALSE(guard.take_serial_turn());
  guard.observe(5000 * kUs, 2000 * kUs);  // long wait, but short against the caller's own work
  EXPECT_FALSE(guard.take_serial_turn());
}

TEST(LateWorkerGuard, LateProbesDoubleTheSerialStretchUpToTheCap) {
  LateWorkerGuard guard;
  int64_t expected = LateWorkerGuard::kFirstSerialRegions;
  for (int probe = 0; probe < 10; ++probe) {
    guard.observe(10 * kUs, 2000 * kUs);
    EXPECT_EQ(serial_turns(guard), expected) << "probe " << probe;
    expected = std::min(2 * expected, LateWorkerGuard::kMaxSerialRegions);
  }
  EXPECT_EQ(expected, LateWorkerGuard::kMaxSerialRegions);
}

TEST(LateWorkerGuard, APunctualRegionResetsTheStretch) {
  LateWorkerGuard guard;
  guard.observe(10 * kUs, 2000 * kUs);
  guard.observe(10 * kUs, 2000 * kUs);
  EXPECT_EQ(serial_turns(guard), 2 * LateWorkerGuard::kFirstSerialRegions);
  guard.observe(10 * kUs, 20 * kUs);
  guard.observe(10 * kUs, 2000 * kUs);
  EXPECT_EQ(serial_turns(guard), LateWorkerGuard::kFirstSerialRegions);
}

}  // namespace
