#include "allocator.h"

#include <algorithm>
#include <vector>

#include "plugflow/error.h"

namespace plugflow::cuda {

namespace {
std::string mib(size_t bytes) {
  return std::to_string(bytes / (1024 * 1024)) + "." + std::to_string(bytes % (1024 * 1024) * 10 / (1024 * 1024)) +
         " MiB";
}
}  // namespace

// Blocks (and the events of deferred frees) are deliberately not returned here: the allocator
// dies at process exit, possibly after the CUDA runtime has been torn down, where cudaFree would
// fail. The driver reclaims them with the process.
CachingAllocator::~CachingAllocator() = default;

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes <= kSmallSize) return std::max(kSmallRound, (nbytes + kSmallRound - 1) / kSmallRound * kSmallRound);
  return (nbytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}

void* CachingAllocator::allocate(size_t nbytes, void* stream) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_size(nbytes);
  const Pool pool = pool_of(size);
  std::lock_guard<std::mutex> lock(mutex_);
  // Deferred frees whose recorded streams finished may serve this request.
  process_deferred_frees_locked(false);
  FreeSet& free = free_[pool];
  // Best fit on the same stream, but do not let a request pin a much larger block: reuse only
  // blocks at most a quarter (or one rounding step) bigger than needed.
  const size_t max_waste = std::max(size / 4, pool == kSmallPool ? kSmallRound : kLargeRound);
  void* ptr = nullptr;
  size_t block = size;
  if (auto it = free.lower_bound({stream, size, nullptr});
      it != free.end() && std::get<0>(*it) == stream && std::get<1>(*it) <= size + max_waste) {
    block = std::get<1>(*it);
    ptr = std::get<2>(*it);
    free.erase(it);
  } else {
    std::string why;
    ptr = raw_->malloc(size, why);
    if (ptr == nullptr && (!free_[kSmallPool].empty() || !free_[kLargePool].empty() || !deferred_.empty())) {
      // Out of memory with blocks cached or about to be: give them back and try once more.
      ++num_alloc_retries_;
      process_deferred_frees_locked(true);
      release_cached_locked();
      ptr = raw_->malloc(size, why);
    }
    if (ptr == nullptr) {
      ++num_ooms_;
      PF_THROW(DeviceError, out_of_memory_message(size, why));
    }
    segment_.add(pool, 1);
    reserved_bytes_.add(pool, static_cast<int64_t>(size));
  }
  live_.emplace(ptr, Block{block, stream, {}});
  allocation_.add(pool, 1);
  allocated_bytes_.add(pool, static_cast<int64_t>(block));
  active_.add(pool, 1);
  active_bytes_.add(pool, static_cast<int64_t>(block));
  return ptr;
}

bool CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  // Events first: if recording fails the block stays live and nothing changed.
  std::vector<void*> events;
  try {
    for (void* stream : it->second.stream_uses) events.push_back(events_->record(stream));
  } catch (...) {
    for (void* e : events) events_->destroy(e);
    throw;
  }
  Block b = std::move(it->second);
  live_.erase(it);
  const Pool pool = pool_of(b.size);
  allocation_.remove(pool, 1);
  allocated_bytes_.remove(pool, static_cast<int64_t>(b.size));
  if (events.empty())
    return_to_pool_locked(ptr, b);
  else
    deferred_.push_back(DeferredFree{ptr, std::move(b), std::move(events)});
  return true;
}

bool CachingAllocator::record_stream(void* ptr, void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  Block& b = it->second;
  if (stream != b.stream && std::find(b.stream_uses.begin(), b.stream_uses.end(), stream) == b.stream_uses.end())
    b.stream_uses.push_back(stream);
  return true;
}

void CachingAllocator::forget_stream(void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [ptr, b] : live_) std::erase(b.stream_uses, stream);
}

void CachingAllocator::return_to_pool_locked(void* ptr, const Block& b) {
  const Pool pool = pool_of(b.size);
  active_.remove(pool, 1);
  active_bytes_.remove(pool, static_cast<int64_t>(b.size));
  free_[pool].emplace(b.stream, b.size, ptr);
}

void CachingAllocator::process_deferred_frees_locked(bool wait) {
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    std::vector<void*>& events = it->events;
    for (size_t i = 0; i < events.size();) {
      void* event = events[i];
      if (wait) {
        events_->synchronize(event);
      } else if (!events_->query(event)) {
        ++i;
        continue;
      }
      // Completed: out of the list first, so a failing destroy cannot leave it there twice.
      events[i] = events.back();
      events.pop_back();
      events_->destroy(event);
    }
    if (events.empty()) {
      return_to_pool_locked(it->ptr, it->block);
      it = deferred_.erase(it);
    } else {
      ++it;
    }
  }
}

void CachingAllocator::process_deferred_frees(bool wait) {
  std::lock_guard<std::mutex> lock(mutex_);
  process_deferred_frees_locked(wait);
}

void CachingAllocator::release_cached_locked() {
  // RawMemory::free waits for the device (the CUDA one synchronizes before cudaFree), so
  // kernels still reading a cached block finish first.
  for (Pool pool : {kSmallPool, kLargePool}) {
    for (const auto& [stream, size, ptr] : free_[pool]) {
      raw_->free(ptr);
      segment_.remove(pool, 1);
      reserved_bytes_.remove(pool, static_cast<int64_t>(size));
    }
    free_[pool].clear();
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  process_deferred_frees_locked(true);
  release_cached_locked();
}

std::string CachingAllocator::out_of_memory_message(size_t size, const std::string& why) const {
  const auto allocated = static_cast<size_t>(allocated_bytes_.by_type[0].current);
  const auto reserved = static_cast<size_t>(reserved_bytes_.by_type[0].current);
  return "CUDA out of memory: tried to allocate " + mib(size) + " on " + raw_->name() + " (" + mib(allocated) +
         " allocated by plugflow, " + mib(reserved - allocated) + " cached; " + why +
         "). Free tensors you no longer need, or use smaller batches.";
}

size_t CachingAllocator::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<size_t>(allocated_bytes_.by_type[0].current);
}
size_t CachingAllocator::peak_allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<size_t>(allocated_bytes_.by_type[0].peak);
}
size_t CachingAllocator::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<size_t>(reserved_bytes_.by_type[0].current);
}
size_t CachingAllocator::cached_blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return free_[kSmallPool].size() + free_[kLargePool].size();
}
size_t CachingAllocator::deferred_frees() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return deferred_.size();
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (PoolStat* s : {&allocation_, &allocated_bytes_, &active_, &active_bytes_, &segment_, &reserved_bytes_})
    for (Stat& t : s->by_type) t.peak = t.current;
}

std::map<std::string, int64_t> CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, int64_t> out;
  static const char* const kTypes[] = {"all", "small_pool", "large_pool"};
  const auto put = [&](const std::string& name, const PoolStat& s) {
    for (int t = 0; t < 3; ++t) {
      const std::string prefix = name + "." + kTypes[t] + ".";
      out[prefix + "current"] = s.by_type[t].current;
      out[prefix + "peak"] = s.by_type[t].peak;
      out[prefix + "allocated"] = s.by_type[t].allocated;
      out[prefix + "freed"] = s.by_type[t].freed;
    }
  };
  put("allocation", allocation_);
  put("allocated_bytes", allocated_bytes_);
  put("active", active_);
  put("active_bytes", active_bytes_);
  put("segment", segment_);
  put("reserved_bytes", reserved_bytes_);
  put("inactive_split", PoolStat{});
  put("inactive_split_bytes", PoolStat{});
  out["num_alloc_retries"] = num_alloc_retries_;
  out["num_ooms"] = num_ooms_;
  return out;
}

}  // namespace plugflow::cuda
