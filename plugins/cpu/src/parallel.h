// OpenMP work splitting for the CPU kernels.
//
// The thread count lives in a plugin-wide atomic (set by the runtime's set_num_threads hook)
// instead of OpenMP's per-thread ICV: omp_set_num_threads only affects the calling thread,
// and kernels may be called from any thread (DataLoader workers, autograd, Python threads).
#pragma once
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>

namespace plugflow::cpu {

// Elements below which a loop runs on the calling thread: starting a parallel region costs a
// few microseconds, about what 32K simple elementwise operations take.
inline constexpr int64_t kGrainSize = 32768;

int num_threads();
void set_num_threads(int n);
// Makes forked children run kernels single-threaded (see parallel.cpp). Idempotent.
void install_fork_handler();

// A busy machine: when other processes hold the cores, a parallel region waits for the
// scheduler to run each worker (a millisecond or more), while a small loop takes microseconds on
// one thread; a stream of small loops then runs many times slower than serially. The guard keeps
// a debt: what the calling thread waited for the others at the end of each small region, less
// what running that region's slices serially would have added (kGrainNs per grain). Rare late
// workers are paid back by the punctual regions after them; when the debt passes kDebtLimitNs
// the waits cost more than serial execution would, and the next small loops (a stretch) run
// their slices on the calling thread. Then loops go parallel again with no debt (the first
// region pays for waking the workers, which slept meanwhile); for the next kSoonRegions regions a
// smaller debt (kRetryDebtLimitNs) is enough to go back, with a doubled stretch (up to
// kMaxSerialRegions), so the parallel tries cost a few percent on a machine that stays busy; a
// debt run up later starts over.
// Races between threads only shift a decision by a region.
class LateWorkerGuard {
 public:
  static constexpr int64_t kGrainNs = 8'000;
  static constexpr int64_t kDebtLimitNs = 50'000'000;
  static constexpr int64_t kRetryDebtLimitNs = 5'000'000;
  static constexpr int64_t kWaitCapNs = 5'000'000;  // one stall (a suspended process) is not a trend
  static constexpr int64_t kFirstSerialRegions = 64;
  static constexpr int64_t kMaxSerialRegions = 4096;
  static constexpr int64_t kSoonRegions = 256;

  // A disabled guard keeps every loop parallel (PLUGFLOW_LATE_WORKER_GUARD=0, docs/design.md).
  explicit LateWorkerGuard(bool enabled = true) : enabled_(enabled) {}

  // True when a small loop should run serially now (and counts it).
  bool take_serial_turn() {
    int64_t left = serial_left_.load(std::memory_order_relaxed);
    while (left > 0 && !serial_left_.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) {
    }
    return left > 0;
  }

  // A small parallel region of `grains` grains whose calling thread waited wait_ns for the others.
  void observe(int64_t grains, int64_t wait_ns) {
    if (!enabled_) return;
    const int64_t regions = parallel_regions_.fetch_add(1, std::memory_order_relaxed) + 1;
    const int64_t debt = std::max<int64_t>(
        0, debt_.load(std::memory_order_relaxed) + std::min(wait_ns, kWaitCapNs) - grains * kGrainNs);
    if (debt <= (regions <= kSoonRegions ? kRetryDebtLimitNs : kDebtLimitNs)) {
      debt_.store(debt, std::memory_order_relaxed);
      return;
    }
    const int64_t last = stretch_.load(std::memory_order_relaxed);
    const int64_t stretch = regions <= kSoonRegions ? std::min(2 * last, kMaxSerialRegions) : kFirstSerialRegions;
    stretch_.store(stretch, std::memory_order_relaxed);
    debt_.store(0, std::memory_order_relaxed);
    parallel_regions_.store(0, std::memory_order_relaxed);
    serial_left_.store(stretch, std::memory_order_relaxed);
  }

 private:
  const bool enabled_;
  std::atomic<int64_t> serial_left_{0};
  std::atomic<int64_t> stretch_{kFirstSerialRegions};
  std::atomic<int64_t> debt_{0};
  std::atomic<int64_t> parallel_regions_{kSoonRegions};  // no serial stretch yet: none is recent
};

LateWorkerGuard& late_worker_guard();

// Loops of at most this many grains are "small" for the guard: serially a few hundred
// microseconds at most. Loops with grain 1 (items of unknown, often large cost) never are.
inline constexpr int64_t kSmallLoopGrains = 64;

inline int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Calls f(begin, end) on disjoint, contiguous, in-order slices covering [0, n). Runs on the
// calling thread when n <= grain, when one thread is configured, or inside another parallel
// region (no nested parallelism). The slices depend only on n, grain and the thread count, so
// results are the same whether a team or (on a busy machine, see LateWorkerGuard) the calling
// thread runs them. Exceptions thrown by f are caught on the worker threads (they must not
// escape an OpenMP region) and the first one is rethrown here.
template <typename F>
void parallel_for(int64_t n, int64_t grain, const F& f) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_threads = num_threads();
  if (n <= grain || max_threads <= 1 || omp_in_parallel()) {
    f(int64_t{0}, n);
    return;
  }
  const int slices = static_cast<int>(std::min(max_threads, (n + grain - 1) / grain));
  const int64_t chunk = (n + slices - 1) / slices;
  LateWorkerGuard& guard = late_worker_guard();
  const bool small = grain > 1 && n / grain <= kSmallLoopGrains;
  if (small && guard.take_serial_turn()) {
    for (int64_t begin = 0; begin < n; begin += chunk) f(begin, std::min(n, begin + chunk));
    return;
  }
  std::exception_ptr error;
  std::once_flag error_once;
  int64_t own_done = 0;
#pragma omp parallel num_threads(slices)
  {
    // A team smaller than asked for (OpenMP may grant fewer threads) still runs every slice.
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    for (int s = t; s < slices; s += team) {
      const int64_t begin = s * chunk, end = std::min(n, begin + chunk);
      if (begin >= end) continue;
      try {
        f(begin, end);
      } catch (...) {
        std::call_once(error_once, [&] { error = std::current_exception(); });
      }
    }
    if (small && t == 0) own_done = monotonic_ns();
  }
  if (small) guard.observe((n + grain - 1) / grain, monotonic_ns() - own_done);
  if (error) std::rethrow_exception(error);
}

// The number of slices parallel_for(n, grain, ...) would use; callers that keep per-slice
// partial results (reductions) size their buffers with it.
inline int parallel_slices(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_threads = num_threads();
  if (n <= grain || max_threads <= 1 || omp_in_parallel()) return 1;
  return static_cast<int>(std::min(max_threads, (n + grain - 1) / grain));
}

}  // namespace plugflow::cpu
