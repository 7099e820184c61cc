// The CUDA caching allocator's pool logic (plugins/cuda/src/allocator.h) against a fake raw
// memory source and fake events: rounding, reuse, per-stream pools, statistics
// (torch.cuda.memory_stats' counters), releasing the cache, out-of-memory handling, and the
// deferred frees of record_stream.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "allocator.h"
#include "plugflow/error.h"

namespace {

using plugflow::cuda::CachingAllocator;
using plugflow::cuda::RawMemory;
using plugflow::cuda::StreamEvents;

constexpr size_t MiB = size_t{1} << 20;

// Hands out fake addresses from a counter and enforces a capacity.
struct FakeStats {
  size_t capacity = 1024 * MiB, used = 0;
  int mallocs = 0, frees = 0, failures = 0;
};
class FakeMemory final : public RawMemory {
 public:
  explicit FakeMemory(FakeStats* stats) : s_(stats) {}
  void* malloc(size_t nbytes, std::string& why) override {
    if (s_->used + nbytes > s_->capacity) {
      ++s_->failures;
      why = "fake device full";
      return nullptr;
    }
    ++s_->mallocs;
    s_->used += nbytes;
    void* p = reinterpret_cast<void*>(next_);
    next_ += nbytes + 4096;
    sizes_[p] = nbytes;
    return p;
  }
  void free(void* ptr) override {
    ++s_->frees;
    s_->used -= sizes_.at(ptr);
    sizes_.erase(ptr);
  }
  std::string name() const override { return "fake:0"; }

 private:
  FakeStats* s_;
  uintptr_t next_ = 0x10000000;
  std::map<void*, size_t> sizes_;
};

// Events as entries of a table: each remembers its stream and completes when the test says that
// stream finished its work (finish), as a CUDA event recorded there would.
struct FakeEventTable {
  struct Event {
    void* stream;
    bool complete = false, destroyed = false, waited = false;
  };
  std::vector<Event> events;
  int queries = 0;
  int records_left = -1;  // record() throws once this count of successful records is used up

  void finish(void* stream) {
    for (Event& e : events)
      if (e.stream == stream) e.complete = true;
  }
  int live() const {
    int n = 0;
    for (const Event& e : events) n += !e.destroyed;
    return n;
  }
};
class FakeEvents final : public StreamEvents {
 public:
  explicit FakeEvents(FakeEventTable* table) : t_(table) {}
  void* record(void* stream) override {
    if (t_->records_left == 0) throw plugflow::DeviceError("fake event record failed");
    if (t_->records_left > 0) --t_->records_left;
    t_->events.push_back({stream});
    return reinterpret_cast<void*>(t_->events.size());  // 1-based: never nullptr
  }
  bool query(void* event) override {
    ++t_->queries;
    return at(event).complete;
  }
  void synchronize(void* event) override {
    at(event).waited = true;
    at(event).complete = true;  // waiting lets the stream run to the event
  }
  void destroy(void* event) override {
    EXPECT_FALSE(at(event).destroyed) << "an event is destroyed once";
    at(event).destroyed = true;
  }

 private:
  FakeEventTable::Event& at(void* event) {
    const auto i = reinterpret_cast<uintptr_t>(event);
    EXPECT_GE(i, 1u);
    return t_->events.at(i - 1);
  }
  FakeEventTable* t_;
};

struct CudaAllocatorTest : ::testing::Test {
  FakeStats stats;
  FakeEventTable events;
  CachingAllocator alloc{std::make_unique<FakeMemory>(&stats), std::make_unique<FakeEvents>(&events)};
};

TEST(CudaAllocator, RoundsToFewSizes) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(MiB), MiB);
  EXPECT_EQ(CachingAllocator::round_size(MiB + 1), 2 * MiB);
  EXPECT_EQ(CachingAllocator::round_size(3 * MiB), 4 * MiB);
  EXPECT_EQ(CachingAllocator::round_size(64 * MiB), 64 * MiB);
}

TEST_F(CudaAllocatorTest, ZeroBytesAllocateNothing) {
  EXPECT_EQ(alloc.allocate(0), nullptr);
  EXPECT_EQ(stats.mallocs, 0);
  EXPECT_TRUE(alloc.deallocate(nullptr));
}

TEST_F(CudaAllocatorTest, ReusesFreedBlocksOfSimilarSize) {
  void* a = alloc.allocate(1000);
  ASSERT_TRUE(alloc.deallocate(a));
  EXPECT_EQ(alloc.allocate(900), a) << "same size class: the cached block comes back";
  EXPECT_EQ(stats.mallocs, 1);

  void* big = alloc.allocate(10 * MiB);
  ASSERT_TRUE(alloc.deallocate(big));
  EXPECT_EQ(alloc.allocate(9 * MiB), big) << "within a quarter of the request";
  ASSERT_TRUE(alloc.deallocate(big));
  void* small = alloc.allocate(2 * MiB);
  EXPECT_NE(small, big) << "a 10 MiB block must not serve a 2 MiB request";
  EXPECT_EQ(stats.mallocs, 3);
}

TEST_F(CudaAllocatorTest, SmallAndLargePoolsAreSeparate) {
  void* large = alloc.allocate(2 * MiB);
  ASSERT_TRUE(alloc.deallocate(large));
  EXPECT_NE(alloc.allocate(MiB), large);
}

TEST_F(CudaAllocatorTest, TracksAllocatedPeakAndReservedBytes) {
  void* a = alloc.allocate(3 * MiB);  // 4 MiB block
  void* b = alloc.allocate(100);      // 512 B block
  EXPECT_EQ(alloc.allocated_bytes(), 4 * MiB + 512);
  EXPECT_EQ(alloc.peak_allocated_bytes(), 4 * MiB + 512);
  ASSERT_TRUE(alloc.deallocate(a));
  EXPECT_EQ(alloc.allocated_bytes(), 512u);
  EXPECT_EQ(alloc.peak_allocated_bytes(), 4 * MiB + 512);
  EXPECT_EQ(alloc.reserved_bytes(), 4 * MiB + 512) << "freed blocks stay reserved in the cache";
  alloc.reset_peak();
  EXPECT_EQ(alloc.peak_allocated_bytes(), 512u);
  ASSERT_TRUE(alloc.deallocate(b));
  EXPECT_EQ(alloc.allocated_bytes(), 0u);
}

TEST_F(CudaAllocatorTest, EmptyCacheReturnsFreeBlocksOnly) {
  void* a = alloc.allocate(5 * MiB);
  void* b = alloc.allocate(5 * MiB);
  ASSERT_TRUE(alloc.deallocate(a));
  EXPECT_EQ(alloc.cached_blocks(), 1u);
  alloc.empty_cache();
  EXPECT_EQ(stats.frees, 1);
  EXPECT_EQ(alloc.cached_blocks(), 0u);
  EXPECT_EQ(alloc.reserved_bytes(), alloc.allocated_bytes());
  EXPECT_EQ(stats.used, 6 * MiB) << "the live block stays";
  ASSERT_TRUE(alloc.deallocate(b));
}

TEST_F(CudaAllocatorTest, OutOfMemoryReleasesTheCacheAndRetries) {
  stats.capacity = 10 * MiB;
  void* a = alloc.allocate(6 * MiB);
  ASSERT_TRUE(alloc.deallocate(a));  // cached: the fake device now has 4 MiB free
  void* b = alloc.allocate(8 * MiB);
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(stats.failures, 1);
  EXPECT_EQ(stats.frees, 1) << "the cached 6 MiB block was returned to make room";
  EXPECT_EQ(alloc.reserved_bytes(), 8 * MiB);
}

TEST_F(CudaAllocatorTest, OutOfMemoryIsADeviceErrorThatSaysWhy) {
  stats.capacity = 4 * MiB;
  void* keep = alloc.allocate(3 * MiB);
  try {
    alloc.allocate(3 * MiB);
    FAIL() << "expected DeviceError";
  } catch (const plugflow::DeviceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("CUDA out of memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fake:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fake device full"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4.0 MiB allocated"), std::string::npos) << msg;
  }
  EXPECT_EQ(alloc.allocated_bytes(), 4 * MiB) << "a failed allocation changes nothing";
  ASSERT_TRUE(alloc.deallocate(keep));
}

TEST_F(CudaAllocatorTest, RejectsPointersItDidNotAllocate) {
  int local = 0;
  EXPECT_FALSE(alloc.deallocate(&local));
  void* a = alloc.allocate(64);
  ASSERT_TRUE(alloc.deallocate(a));
  EXPECT_FALSE(alloc.deallocate(a)) << "a double free is rejected, not cached twice";
}

TEST_F(CudaAllocatorTest, FreedBlocksAreReusedOnlyByTheirOwnStream) {
  int side_stream_tag = 0;
  void* side = &side_stream_tag;  // any distinct opaque handle
  void* a = alloc.allocate(1000, side);
  ASSERT_TRUE(alloc.deallocate(a));
  void* b = alloc.allocate(1000);  // the default stream: must not get the side stream's block
  EXPECT_NE(b, a);
  EXPECT_EQ(alloc.allocate(1000, side), a) << "the side stream gets its own block back";
  EXPECT_EQ(stats.mallocs, 2);
}

TEST_F(CudaAllocatorTest, StatsFollowPyTorchsCounters) {
  void* a = alloc.allocate(3 * MiB);  // large pool, 4 MiB block
  void* b = alloc.allocate(100);      // small pool, 512 B block
  ASSERT_TRUE(alloc.deallocate(a));
  std::map<std::string, int64_t> s = alloc.stats();
  EXPECT_EQ(s.at("allocation.all.current"), 1);
  EXPECT_EQ(s.at("allocation.all.peak"), 2);
  EXPECT_EQ(s.at("allocation.all.allocated"), 2);
  EXPECT_EQ(s.at("allocation.all.freed"), 1);
  EXPECT_EQ(s.at("allocated_bytes.all.current"), 512);
  EXPECT_EQ(s.at("allocated_bytes.all.peak"), static_cast<int64_t>(4 * MiB + 512));
  EXPECT_EQ(s.at("allocated_bytes.large_pool.freed"), static_cast<int64_t>(4 * MiB));
  EXPECT_EQ(s.at("allocated_bytes.small_pool.current"), 512);
  EXPECT_EQ(s.at("reserved_bytes.all.current"), static_cast<int64_t>(4 * MiB + 512));
  EXPECT_EQ(s.at("segment.all.current"), 2);
  EXPECT_EQ(s.at("active_bytes.all.current"), 512);
  EXPECT_EQ(s.at("num_alloc_retries"), 0);
  EXPECT_EQ(s.at("num_ooms"), 0);

  alloc.empty_cache();
  alloc.reset_peak();
  s = alloc.stats();
  EXPECT_EQ(s.at("reserved_bytes.all.current"), 512);
  EXPECT_EQ(s.at("reserved_bytes.all.freed"), static_cast<int64_t>(4 * MiB));
  EXPECT_EQ(s.at("segment.large_pool.current"), 0);
  EXPECT_EQ(s.at("allocated_bytes.all.peak"), 512) << "reset_peak brings every peak to its current value";
  EXPECT_EQ(s.at("allocation.all.allocated"), 2) << "reset_peak keeps the accumulated counts";
  ASSERT_TRUE(alloc.deallocate(b));
}

TEST_F(CudaAllocatorTest, StatsCountRetriesAndOutOfMemoryErrors) {
  stats.capacity = 10 * MiB;
  ASSERT_TRUE(alloc.deallocate(alloc.allocate(6 * MiB)));
  void* b = alloc.allocate(8 * MiB);  // retried after releasing the cache
  EXPECT_THROW(alloc.allocate(8 * MiB), plugflow::DeviceError);
  const auto s = alloc.stats();
  EXPECT_EQ(s.at("num_alloc_retries"), 1);
  EXPECT_EQ(s.at("num_ooms"), 1);
  ASSERT_TRUE(alloc.deallocate(b));
}

// ---- record_stream: deferred frees ---------------------------------------------------------

// Opaque stream handles for the tests (the allocator only compares them).
int g_stream_tags[3];
void* const kSideA = &g_stream_tags[0];
void* const kSideB = &g_stream_tags[1];

TEST_F(CudaAllocatorTest, AFreedBlockWithARecordedStreamWaitsForItsEvent) {
  void* a = alloc.allocate(1000);
  ASSERT_TRUE(alloc.record_stream(a, kSideA));
  ASSERT_TRUE(alloc.deallocate(a));
  ASSERT_EQ(events.events.size(), 1u) << "one event, recorded on the recorded stream at free time";
  EXPECT_EQ(events.events[0].stream, kSideA);
  EXPECT_EQ(alloc.deferred_frees(), 1u);
  EXPECT_EQ(alloc.cached_blocks(), 0u);

  void* b = alloc.allocate(1000);
  EXPECT_NE(b, a) << "the side stream may still use the block: it must not be handed out";
  EXPECT_GE(events.queries, 1) << "the allocation polled the pending event";
  EXPECT_EQ(alloc.deferred_frees(), 1u);

  events.finish(kSideA);
  void* c = alloc.allocate(1000);
  EXPECT_EQ(c, a) << "the event completed: the block is back in its stream's pool";
  EXPECT_EQ(alloc.deferred_frees(), 0u);
  EXPECT_EQ(events.live(), 0) << "the completed event was destroyed";
  EXPECT_FALSE(events.events[0].waited) << "polling never blocks";
  EXPECT_EQ(stats.mallocs, 2);
  ASSERT_TRUE(alloc.deallocate(b));
  ASSERT_TRUE(alloc.deallocate(c));
  EXPECT_EQ(events.events.size(), 1u) << "recorded streams belong to one allocation, not to the block";
}

TEST_F(CudaAllocatorTest, ABlockWaitsForEveryRecordedStream) {
  void* a = alloc.allocate(3 * MiB);
  ASSERT_TRUE(alloc.record_stream(a, kSideA));
  ASSERT_TRUE(alloc.record_stream(a, kSideB));
  ASSERT_TRUE(alloc.record_stream(a, kSideA));  // twice: still one event
  ASSERT_TRUE(alloc.deallocate(a));
  ASSERT_EQ(events.events.size(), 2u);

  events.finish(kSideB);
  void* b = alloc.allocate(3 * MiB);
  EXPECT_NE(b, a) << "stream A has not finished";
  EXPECT_EQ(events.live(), 1) << "B's completed event is released at once";
  events.finish(kSideA);
  alloc.process_deferred_frees(/*wait=*/false);
  EXPECT_EQ(alloc.deferred_frees(), 0u);
  EXPECT_EQ(alloc.cached_blocks(), 1u);
  EXPECT_EQ(alloc.allocate(3 * MiB), a);
  EXPECT_EQ(events.live(), 0);
  ASSERT_TRUE(alloc.deallocate(b));
}

TEST_F(CudaAllocatorTest, RecordingTheBlocksOwnStreamDefersNothing) {
  void* a = alloc.allocate(1000, kSideA);
  ASSERT_TRUE(alloc.record_stream(a, kSideA));
  ASSERT_TRUE(alloc.deallocate(a));
  EXPECT_TRUE(events.events.empty());
  EXPECT_EQ(alloc.allocate(1000, kSideA), a);
}

TEST_F(CudaAllocatorTest, RecordStreamIgnoresMemoryItDidNotAllocate) {
  int local = 0;
  EXPECT_FALSE(alloc.record_stream(&local, kSideA));
  void* a = alloc.allocate(64);
  ASSERT_TRUE(alloc.deallocate(a));
  EXPECT_FALSE(alloc.record_stream(a, kSideA)) << "a freed block is no longer live";
  EXPECT_TRUE(events.events.empty());
}

TEST_F(CudaAllocatorTest, WaitingProcessesDeferredFreesAndEmptyCacheReleasesThem) {
  void* a = alloc.allocate(5 * MiB);
  void* b = alloc.allocate(1000);
  ASSERT_TRUE(alloc.record_stream(a, kSideA));
  ASSERT_TRUE(alloc.record_stream(b, kSideB));
  ASSERT_TRUE(alloc.deallocate(a));
  ASSERT_TRUE(alloc.deallocate(b));
  alloc.process_deferred_frees(/*wait=*/false);
  EXPECT_EQ(alloc.deferred_frees(), 2u) << "nothing finished: polling keeps both";

  alloc.empty_cache();
  EXPECT_EQ(alloc.deferred_frees(), 0u);
  EXPECT_TRUE(events.events[0].waited && events.events[1].waited) << "empty_cache waits for the events";
  EXPECT_EQ(events.live(), 0);
  EXPECT_EQ(stats.frees, 2) << "and returns the blocks to the driver";
  EXPECT_EQ(alloc.reserved_bytes(), 0u);
}

TEST_F(CudaAllocatorTest, OutOfMemoryWaitsForDeferredFreesBeforeRetrying) {
  stats.capacity = 10 * MiB;
  void* a = alloc.allocate(6 * MiB);
  ASSERT_TRUE(alloc.record_stream(a, kSideA));
  ASSERT_TRUE(alloc.deallocate(a));
  void* b = alloc.allocate(8 * MiB);
  EXPECT_NE(b, nullptr);
  EXPECT_TRUE(events.events[0].waited);
  EXPECT_EQ(stats.frees, 1) << "the deferred block was waited for, then returned to make room";
  EXPECT_EQ(alloc.stats().at("num_alloc_retries"), 1);
  ASSERT_TRUE(alloc.deallocate(b));
}

TEST_F(CudaAllocatorTest, ADestroyedStreamIsNoLongerWaitedFor) {
  void* a = alloc.allocate(1000);
  ASSERT_TRUE(alloc.record_stream(a, kSideA));
  ASSERT_TRUE(alloc.record_stream(a, kSideB));
  alloc.forget_stream(kSideA);  // the backend synchronized A before destroying it
  ASSERT_TRUE(alloc.deallocate(a));
  ASSERT_EQ(events.events.size(), 1u) << "no event is recorded on a destroyed stream";
  EXPECT_EQ(events.events[0].stream, kSideB);
}

TEST_F(CudaAllocatorTest, AFailedEventRecordLeavesTheBlockLive) {
  void* a = alloc.allocate(1000);
  ASSERT_TRUE(alloc.record_stream(a, kSideA));
  ASSERT_TRUE(alloc.record_stream(a, kSideB));
  events.records_left = 1;  // the second stream's record fails
  EXPECT_THROW(alloc.deallocate(a), plugflow::DeviceError);
  EXPECT_EQ(alloc.allocated_bytes(), 1024u) << "the block is still allocated, not half freed";
  EXPECT_EQ(alloc.deferred_frees(), 0u);
  ASSERT_EQ(events.events.size(), 1u);
  EXPECT_EQ(events.live(), 0) << "the first stream's event was destroyed again";
  events.records_left = -1;
  ASSERT_TRUE(alloc.deallocate(a));
  EXPECT_EQ(alloc.deferred_frees(), 1u);
  EXPECT_EQ(events.live(), 2);
}

TEST_F(CudaAllocatorTest, DeferredBlocksAreFreedButStillActiveAsInPyTorch) {
  void* a = alloc.allocate(3 * MiB);  // large pool, 4 MiB block
  void* b = alloc.allocate(100);      // small pool, 512 B block
  ASSERT_TRUE(alloc.record_stream(a, kSideA));
  ASSERT_TRUE(alloc.deallocate(a));
  auto s = alloc.stats();
  // PyTorch 1.13 counts a block as freed when the tensor dies and as inactive when it is back in
  // the pool.
  EXPECT_EQ(s.at("allocated_bytes.all.current"), 512);
  EXPECT_EQ(s.at("allocation.large_pool.freed"), 1);
  EXPECT_EQ(s.at("active_bytes.all.current"), static_cast<int64_t>(4 * MiB + 512));
  EXPECT_EQ(s.at("active.large_pool.current"), 1);
  EXPECT_EQ(s.at("active.large_pool.freed"), 0);
  EXPECT_EQ(s.at("reserved_bytes.all.current"), static_cast<int64_t>(4 * MiB + 512));
  EXPECT_EQ(alloc.allocated_bytes(), 512u);

  events.finish(kSideA);
  alloc.process_deferred_frees(/*wait=*/false);
  s = alloc.stats();
  EXPECT_EQ(s.at("active_bytes.all.current"), 512);
  EXPECT_EQ(s.at("active_bytes.all.peak"), static_cast<int64_t>(4 * MiB + 512));
  EXPECT_EQ(s.at("active.large_pool.freed"), 1);
  EXPECT_EQ(s.at("allocated_bytes.all.current"), 512) << "returning to the pool frees nothing twice";
  EXPECT_EQ(s.at("allocation.all.freed"), 1);
  ASSERT_TRUE(alloc.deallocate(b));
  EXPECT_EQ(alloc.stats().at("active.all.current"), 0);
}

}  // namespace
