// The caching allocator of one CUDA device. cudaMalloc/cudaFree are slow (cudaFree also
// synchronizes the device), so freed blocks go back to a pool and the next request of a
// similar size reuses them, as PyTorch's CUDACachingAllocator does.
//
// Stream ordering: all of the plugin's work on a device is enqueued on that device's one
// stream (current_stream). A block freed by the host may still be read by kernels queued
// earlier on that stream; handing it to a new allocation right away is nevertheless safe,
// because everything that uses the new allocation is enqueued on the same stream, after
// those kernels. Host reads go through copy_to_host, which synchronizes. (Work on other
// streams would need record_stream + events before reuse; the plugin has none.)
//
// The raw memory source is an interface so the pool logic is tested without a GPU.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

namespace plugflow::cuda {

class RawMemory {
 public:
  virtual ~RawMemory() = default;
  // nullptr when out of memory (other errors throw); `why` receives the driver's reason.
  virtual void* malloc(size_t nbytes, std::string& why) = 0;
  virtual void free(void* ptr) = 0;
  virtual std::string name() const = 0;  // "cuda:0", for messages
};

class CachingAllocator {
 public:
  // Requests up to kSmallSize are rounded to kSmallRound bytes, larger ones to kLargeRound:
  // few distinct sizes means freed blocks fit later requests.
  static constexpr size_t kSmallSize = size_t{1} << 20;    // 1 MiB
  static constexpr size_t kSmallRound = 512;               // also cudaMalloc's alignment
  static constexpr size_t kLargeRound = size_t{2} << 20;   // 2 MiB

  explicit CachingAllocator(std::unique_ptr<RawMemory> raw) : raw_(std::move(raw)) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  static size_t round_size(size_t nbytes);

  // nbytes == 0 gives nullptr. Throws DeviceError ("CUDA out of memory ...") when the
  // device is full even after the cache was released.
  void* allocate(size_t nbytes);
  // Returns false (and does nothing) for a pointer this allocator did not hand out.
  bool deallocate(void* ptr);
  // Returns every cached (free) block to the driver.
  void empty_cache();

  size_t allocated_bytes() const;  // in blocks handed out (rounded sizes)
  size_t peak_allocated_bytes() const;
  size_t reserved_bytes() const;   // allocated + cached
  size_t cached_blocks() const;
  void reset_peak();

 private:
  using FreeSet = std::set<std::pair<size_t, void*>>;  // (size, ptr): best fit by lower_bound
  void release_cached_locked();

  std::unique_ptr<RawMemory> raw_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;  // handed-out block -> its size
  FreeSet free_small_, free_large_;
  size_t allocated_ = 0, peak_ = 0, reserved_ = 0;
};

}  // namespace plugflow::cuda
