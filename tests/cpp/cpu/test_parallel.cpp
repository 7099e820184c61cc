// The busy-machine guard of the CPU plugin's parallel loops (plugins/cpu/src/parallel.h): when
// the waits for late workers outweigh serial execution, how long small loops then stay on the
// calling thread, and their backoff.
#include <gtest/gtest.h>

#include "../../../plugins/cpu/src/parallel.h"

namespace {

using plugflow::cpu::LateWorkerGuard;

constexpr int64_t kUs = 1000;
constexpr int64_t kGrains = 8;  // relu on 262k floats

int64_t serial_turns(LateWorkerGuard& guard) {
  int64_t turns = 0;
  while (guard.take_serial_turn()) ++turns;
  return turns;
}

// Regions of kGrains grains, each waiting wait_ns, until the guard sends loops to the calling
// thread; returns how many regions that took (-1: never within `limit`).
int64_t regions_until_serial(LateWorkerGuard& guard, int64_t wait_ns, int64_t limit = 100000) {
  for (int64_t r = 1; r <= limit; ++r) {
    guard.observe(kGrains, wait_ns);
    if (guard.take_serial_turn()) return r;
  }
  return -1;
}

TEST(LateWorkerGuard, PunctualRegionsAndRareStallsKeepLoopsParallel) {
  LateWorkerGuard guard;
  EXPECT_FALSE(guard.take_serial_turn());
  EXPECT_EQ(regions_until_serial(guard, 20 * kUs), -1);  // a worker woken from sleep
  // A 5 ms stall once every 300 regions: ~17 us per region, less than serial would cost.
  for (int round = 0; round < 50; ++round) {
    guard.observe(kGrains, 5000 * kUs);
    EXPECT_FALSE(guard.take_serial_turn());
    for (int r = 0; r < 299; ++r) guard.observe(kGrains, 2 * kUs);
    EXPECT_FALSE(guard.take_serial_turn()) << "round " << round;
  }
}

TEST(LateWorkerGuard, PersistentWaitsSendSmallLoopsToTheCallingThread) {
  LateWorkerGuard guard;
  // A descheduled worker in every region (~1 ms each): serial once the waits beyond serial's
  // cost add up to the limit.
  const int64_t per_region = 1000 * kUs - kGrains * LateWorkerGuard::kGrainNs;
  const int64_t regions = regions_until_serial(guard, 1000 * kUs);
  EXPECT_EQ(regions, LateWorkerGuard::kDebtLimitNs / per_region + 1);
  EXPECT_EQ(serial_turns(guard) + 1, LateWorkerGuard::kFirstSerialRegions);
}

TEST(LateWorkerGuard, ADebtSoonAfterAStretchDoublesTheNextOneUpToTheCap) {
  LateWorkerGuard guard;
  ASSERT_GT(regions_until_serial(guard, 2000 * kUs), 0);
  serial_turns(guard);
  int64_t expected = 2 * LateWorkerGuard::kFirstSerialRegions;
  for (int stretch = 0; stretch < 10; ++stretch) {
    // Parallel again: the first region wakes sleeping workers (a 5 ms wait alone is no debt).
    guard.observe(kGrains, 5000 * kUs);
    EXPECT_FALSE(guard.take_serial_turn());
    const int64_t regions = regions_until_serial(guard, 2000 * kUs);
    EXPECT_GT(regions, 0);
    EXPECT_LE(regions + 1, LateWorkerGuard::kSoonRegions);
    EXPECT_EQ(serial_turns(guard) + 1, expected) << "stretch " << stretch;
    expected = std::min(2 * expected, LateWorkerGuard::kMaxSerialRegions);
  }
  EXPECT_EQ(expected, LateWorkerGuard::kMaxSerialRegions);
}

TEST(LateWorkerGuard, ARetryOnAMachineStillBusyReturnsToSerialWithinAFewRegions) {
  LateWorkerGuard guard;
  ASSERT_GT(regions_until_serial(guard, 1000 * kUs), 0);
  serial_turns(guard);
  guard.observe(kGrains, 5000 * kUs);  // waking the workers: no debt by itself
  EXPECT_FALSE(guard.take_serial_turn());
  const int64_t per_region = 1000 * kUs - kGrains * LateWorkerGuard::kGrainNs;
  const int64_t regions = regions_until_serial(guard, 1000 * kUs);
  EXPECT_LE(regions, LateWorkerGuard::kRetryDebtLimitNs / per_region + 1);
  EXPECT_EQ(serial_turns(guard) + 1, 2 * LateWorkerGuard::kFirstSerialRegions);
}

TEST(LateWorkerGuard, ADebtLongAfterTheLastStretchStartsOver) {
  LateWorkerGuard guard;
  ASSERT_GT(regions_until_serial(guard, 2000 * kUs), 0);
  serial_turns(guard);
  ASSERT_GT(regions_until_serial(guard, 2000 * kUs), 0);
  EXPECT_EQ(serial_turns(guard) + 1, 2 * LateWorkerGuard::kFirstSerialRegions);
  for (int64_t r = 0; r < LateWorkerGuard::kSoonRegions; ++r) guard.observe(kGrains, 10 * kUs);
  ASSERT_GT(regions_until_serial(guard, 2000 * kUs), 0);
  EXPECT_EQ(serial_turns(guard) + 1, LateWorkerGuard::kFirstSerialRegions);
}

TEST(LateWorkerGuard, ADisabledGuardKeepsEveryLoopParallel) {
  LateWorkerGuard guard(false);
  EXPECT_EQ(regions_until_serial(guard, 5000 * kUs, 1000), -1);
}

}  // namespace
