// The caching allocator of one CUDA device. cudaMalloc/cudaFree are slow (cudaFree also
// synchronizes the device), so freed blocks go back to a pool and the next request of a
// similar size reuses them, as PyTorch's CUDACachingAllocator does.
//
// Stream ordering: every block belongs to the stream it was allocated for (the calling thread's
// current stream), and a freed block is only handed out again for that same stream. A block freed
// by the host may still be read by kernels queued earlier on its stream; reusing it at once is
// nevertheless safe, because everything that uses the new allocation is enqueued on the same
// stream, after those kernels. Host reads go through copy_to_host, which synchronizes.
// A block also used by work on other streams is named to record_stream (Tensor.record_stream),
// as in PyTorch: when it is freed, an event is recorded on each of those streams, and the block
// returns to the pool only once all of them completed. Those deferred frees are polled on every
// allocation and waited for by empty_cache, by the out-of-memory retry and by
// process_deferred_frees(wait) (the device's synchronize). Without record_stream, a tensor used
// on another stream must be kept alive until that stream is done with it.
//
// Statistics follow torch.cuda.memory_stats: per pool ("all", "small_pool", "large_pool"),
// current / peak / allocated / freed of allocation counts and bytes, reserved segments and
// bytes, plus num_alloc_retries and num_ooms. Blocks are never split, so no block is
// "inactive_split". As in PyTorch 1.13, a freed block leaves "allocation"/"allocated_bytes" when
// it is freed and "active"/"active_bytes" when it is back in the pool: the two differ by the
// deferred frees.
//
// The raw memory source and the events are interfaces so the pool logic is tested without a GPU.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace plugflow::cuda {

class RawMemory {
 public:
  virtual ~RawMemory() = default;
  // nullptr when out of memory (other errors throw); `why` receives the driver's reason.
  virtual void* malloc(size_t nbytes, std::string& why) = 0;
  virtual void free(void* ptr) = 0;
  virtual std::string name() const = 0;  // "cuda:0", for messages
};

// Events marking the work queued on a stream so far (CUDA events without timing).
class StreamEvents {
 public:
  virtual ~StreamEvents() = default;
  // A new event, recorded on `stream` now.
  virtual void* record(void* stream) = 0;
  // True once the work before the event has finished.
  virtual bool query(void* event) = 0;
  virtual void synchronize(void* event) = 0;
  virtual void destroy(void* event) = 0;
};

class CachingAllocator {
 public:
  // Requests up to kSmallSize are rounded to kSmallRound bytes, larger ones to kLargeRound:
  // few distinct sizes means freed blocks fit later requests.
  static constexpr size_t kSmallSize = size_t{1} << 20;    // 1 MiB
  static constexpr size_t kSmallRound = 512;               // also cudaMalloc's alignment
  static constexpr size_t kLargeRound = size_t{2} << 20;   // 2 MiB

  CachingAllocator(std::unique_ptr<RawMemory> raw, std::unique_ptr<StreamEvents> events)
      : raw_(std::move(raw)), events_(std::move(events)) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  static size_t round_size(size_t nbytes);

  // A block of at least nbytes for work on `stream` (an opaque handle; nullptr is the device's
  // default stream). nbytes == 0 gives nullptr. Throws DeviceError ("CUDA out of memory ...")
  // when the device is full even after the cache was released.
  void* allocate(size_t nbytes, void* stream = nullptr);
  // Returns false (and does nothing) for a pointer this allocator did not hand out. A block
  // with recorded streams becomes a deferred free (records one event per stream).
  bool deallocate(void* ptr);
  // The live block at ptr is also used by work on `stream` (record_stream). Returns false (and
  // does nothing) for a pointer this allocator did not hand out; the block's own stream needs
  // no record.
  bool record_stream(void* ptr, void* stream);
  // `stream` is being destroyed after it finished: live blocks stop waiting for it.
  void forget_stream(void* stream);
  // Returns deferred frees whose events completed to the pool; with `wait`, waits for all.
  void process_deferred_frees(bool wait);
  // Waits for the deferred frees, then returns every cached (free) block to the driver.
  void empty_cache();

  size_t allocated_bytes() const;  // in blocks handed out (rounded sizes)
  size_t peak_allocated_bytes() const;
  size_t reserved_bytes() const;   // allocated + cached
  size_t cached_blocks() const;
  size_t deferred_frees() const;  // freed blocks waiting for their recorded streams' events
  // Peaks back to the current values (torch.cuda.reset_peak_memory_stats).
  void reset_peak();
  // torch.cuda.memory_stats' flat counters ("allocated_bytes.all.current", ...).
  std::map<std::string, int64_t> stats() const;

 private:
  // current / peak / allocated (ever) / freed (ever), as PyTorch's Stat.
  struct Stat {
    int64_t current = 0, peak = 0, allocated = 0, freed = 0;
    void add(int64_t n) {
      current += n;
      allocated += n;
      peak = std::max(peak, current);
    }
    void remove(int64_t n) {
      current -= n;
      freed += n;
    }
  };
  // Each counter for "all", "small_pool" and "large_pool" (PyTorch's StatTypes): the aggregate
  // has its own peak, which is not the sum of the pools' peaks.
  enum Pool { kSmallPool = 1, kLargePool = 2 };
  struct PoolStat {
    std::array<Stat, 3> by_type;  // [all, small_pool, large_pool]
    void add(Pool p, int64_t n) {
      by_type[0].add(n);
      by_type[p].add(n);
    }
    void remove(Pool p, int64_t n) {
      by_type[0].remove(n);
      by_type[p].remove(n);
    }
  };
  struct Block {
    size_t size;
    void* stream;
    std::vector<void*> stream_uses;  // other streams named to record_stream
  };
  // A freed block and the events it waits for (one per recorded stream, pending ones only).
  struct DeferredFree {
    void* ptr;
    Block block;
    std::vector<void*> events;
  };
  // (stream, size, ptr): best fit on the same stream by lower_bound.
  using FreeSet = std::set<std::tuple<void*, size_t, void*>>;
  static Pool pool_of(size_t size) { return size <= kSmallSize ? kSmallPool : kLargePool; }
  void return_to_pool_locked(void* ptr, const Block& b);
  void process_deferred_frees_locked(bool wait);
  void release_cached_locked();
  std::string out_of_memory_message(size_t size, const std::string& why) const;

  std::unique_ptr<RawMemory> raw_;
  std::unique_ptr<StreamEvents> events_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> live_;  // handed-out block -> its size and streams
  std::vector<DeferredFree> deferred_;     // freed, not yet back in the pool
  std::array<FreeSet, 3> free_;            // [unused, small, large]
  PoolStat allocation_, allocated_bytes_, active_, active_bytes_, segment_, reserved_bytes_;
  int64_t num_alloc_retries_ = 0, num_ooms_ = 0;
};

}  // namespace plugflow::cuda
