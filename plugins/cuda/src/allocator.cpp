#include "allocator.h"

#include <algorithm>

#include "plugflow/error.h"

namespace plugflow::cuda {

namespace {
std::string mib(size_t bytes) {
  return std::to_string(bytes / (1024 * 1024)) + "." + std::to_string(bytes % (1024 * 1024) * 10 / (1024 * 1024)) +
         " MiB";
}
}  // namespace

// Blocks are deliberately not returned here: the allocator dies at process exit, possibly
// after the CUDA runtime has been torn down, where cudaFree would fail. The driver reclaims
// the memory with the process.
CachingAllocator::~CachingAllocator() = default;

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes <= kSmallSize) return std::max(kSmallRound, (nbytes + kSmallRound - 1) / kSmallRound * kSmallRound);
  return (nbytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}

void* CachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  FreeSet& pool = size <= kSmallSize ? free_small_ : free_large_;
  // Best fit, but do not let a request pin a much larger block: reuse only blocks at most
  // a quarter (or one rounding step) bigger than needed.
  const size_t max_waste = std::max(size / 4, size <= kSmallSize ? kSmallRound : kLargeRound);
  void* ptr = nullptr;
  size_t block = size;
  if (auto it = pool.lower_bound({size, nullptr}); it != pool.end() && it->first <= size + max_waste) {
    block = it->first;
    ptr = it->second;
    pool.erase(it);
  } else {
    std::string why;
    ptr = raw_->malloc(size, why);
    if (ptr == nullptr && (!free_small_.empty() || !free_large_.empty())) {
      // Out of memory with blocks cached: give them back and try once more.
      release_cached_locked();
      ptr = raw_->malloc(size, why);
    }
    if (ptr == nullptr)
      PF_THROW(DeviceError, "CUDA out of memory: tried to allocate ", mib(size), " on ", raw_->name(), " (",
               mib(allocated_), " allocated by plugflow, ", mib(reserved_ - allocated_), " cached; ", why,
               "). Free tensors you no longer need, or use smaller batches.");
    reserved_ += size;
  }
  live_.emplace(ptr, block);
  allocated_ += block;
  peak_ = std::max(peak_, allocated_);
  return ptr;
}

bool CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  const size_t size = it->second;
  live_.erase(it);
  allocated_ -= size;
  (size <= kSmallSize ? free_small_ : free_large_).emplace(size, ptr);
  return true;
}

void CachingAllocator::release_cached_locked() {
  // cudaFree synchronizes the device, so kernels still reading a cached block finish first.
  for (FreeSet* pool : {&free_small_, &free_large_}) {
    for (const auto& [size, ptr] : *pool) {
      raw_->free(ptr);
      reserved_ -= size;
    }
    pool->clear();
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

size_t CachingAllocator::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}
size_t CachingAllocator::peak_allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}
size_t CachingAllocator::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserved_;
}
size_t CachingAllocator::cached_blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return free_small_.size() + free_large_.size();
}
void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = allocated_;
}

}  // namespace plugflow::cuda
