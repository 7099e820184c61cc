// The "cpu" DeviceBackend: a size-bucketed caching allocator over 64-byte-aligned memory
// (a cache line, and the widest AVX-512 load), plus memcpy copies.
//
// Training allocates the same tensor sizes every step; recycling blocks avoids page faults
// and the zeroing the kernel does for fresh pages. Requests are rounded up to a size class
// (multiples of 64 bytes up to 4 KiB, then 8 classes per power of two, so at most 12.5%
// is wasted) and freed blocks wait on a per-class free list. The cache is capped so that a
// workload with ever-changing sizes cannot hold on to unbounded memory.
#include "device.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "plugflow/error.h"

namespace plugflow::cpu {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kSmallLimit = 4096;
constexpr size_t kMaxCachedBytes = size_t{1} << 30;  // 1 GiB of idle blocks at most

constexpr size_t kLargestClassed = size_t{1} << 48;  // beyond any machine: no class arithmetic can wrap

size_t size_class(size_t nbytes) {
  if (nbytes <= kSmallLimit) return nbytes == 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  // A request no machine can hold: keep it as it is (aligned_alloc fails, and we raise).
  if (nbytes > kLargestClassed) return nbytes;
  size_t pow2 = kSmallLimit;  // the largest power of two <= nbytes
  while (pow2 * 2 <= nbytes) pow2 <<= 1;
  const size_t step = pow2 / 8;  // >= 512, a multiple of the alignment; rounding adds < step <= nbytes/8
  return (nbytes + step - 1) / step * step;
}

class CachingAllocator {
 public:
  ~CachingAllocator() { release_cached(); }

  void* allocate(size_t nbytes) {
    const size_t size = size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        note_alloc(size);
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlignment, size);
    if (p == nullptr) {
      // Idle blocks of other sizes may be what stands between us and success.
      release_cached();
      p = std::aligned_alloc(kAlignment, size);
    }
    if (p == nullptr) {
      PF_THROW(Error, "CPU out of memory: tried to allocate ", nbytes, " bytes (", allocated_bytes(),
               " bytes in use by tensors). Free tensors you no longer need or reduce the batch size.");
    }
    std::lock_guard<std::mutex> lock(mu_);
    note_alloc(size);
    return p;
  }

  void deallocate(void* p, size_t nbytes) {
    if (p == nullptr) return;
    const size_t size = size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      allocated_ -= size;
      if (cached_ + size <= kMaxCachedBytes) {
        free_[size].push_back(p);
        cached_ += size;
        return;
      }
    }
    std::free(p);
  }

  void release_cached() {
    std::unordered_map<size_t, std::vector<void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks.swap(free_);
      cached_ = 0;
    }
    for (auto& [size, list] : blocks)
      for (void* p : list) std::free(p);
  }

  size_t allocated_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return allocated_;
  }
  size_t peak_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }
  size_t cached_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = allocated_;
  }

 private:
  void note_alloc(size_t size) {  // under mu_
    allocated_ += size;
    if (allocated_ > peak_) peak_ = allocated_;
  }

  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> idle blocks
  size_t allocated_ = 0;  // bytes handed out (size classes), not yet returned
  size_t peak_ = 0;
  size_t cached_ = 0;  // bytes idle on the free lists
};

class CpuBackend final : public DeviceBackend {
 public:
  DeviceType type() const override { return DeviceType::CPU; }
  int device_count() const override { return 1; }
  void* allocate(int, size_t nbytes) override { return alloc_.allocate(nbytes); }
  void deallocate(int, void* ptr, size_t nbytes) override { alloc_.deallocate(ptr, nbytes); }
  void copy_to_host(int, void* host_dst, const void* src, size_t nbytes) override { copy(host_dst, src, nbytes); }
  void copy_from_host(int, void* dst, const void* host_src, size_t nbytes) override { copy(dst, host_src, nbytes); }
  void copy_on_device(int, void* dst, const void* src, size_t nbytes) override { copy(dst, src, nbytes); }
  void synchronize(int) override {}  // CPU kernels run synchronously
  size_t allocated_bytes(int) const override { return alloc_.allocated_bytes(); }
  size_t peak_allocated_bytes(int) const override { return alloc_.peak_bytes(); }
  void reset_peak(int) override { alloc_.reset_peak(); }
  void empty_cache(int) override { alloc_.release_cached(); }

 private:
  static void copy(void* dst, const void* src, size_t nbytes) {
    if (nbytes != 0 && dst != src) std::memmove(dst, src, nbytes);
  }
  CachingAllocator alloc_;
};

}  // namespace

size_t allocation_size_class(size_t nbytes) { return size_class(nbytes); }

std::shared_ptr<DeviceBackend> make_cpu_backend() { return std::make_shared<CpuBackend>(); }

}  // namespace plugflow::cpu
