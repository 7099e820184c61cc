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
// one thread; a stream of small loops then runs many times slower than serially. The guard
// watches how long the calling thread waits for the others at the end of each region. After a
// wait that is long in absolute terms (kLateWorkerNs: far beyond a worker's wake-up from sleep
// on an idle machine) and against the calling thread's own share of the work, the next small
// loops run their slices on the calling thread, then one probes the workers again; the serial
// stretch doubles on each late probe (up to kMaxSerialRegions, so probing costs ~1%) and resets
// after a punctual region. Races between threads only shift a decision by a region.
class LateWorkerGuard {
 public:
  static constexpr int64_t kLateWorkerNs = 500'000;
  static constexpr int64_t kFirstSerialRegions = 64;
  static constexpr int64_t kMaxSerialRegions = 4096;

  // True when a small loop should run serially now (and counts it).
  bool take_serial_turn() {
    int64_t left = serial_left_.load(std::memory_order_relaxed);
    while (left > 0 && !serial_left_.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) {
    }
    return left > 0;
  }

  // One parallel region's timing: the calling thread's own slices, then its wait for the others.
  void observe(int64_t own_ns, int64_t wait_ns) {
    if (wait_ns > kLateWorkerNs && wait_ns > 2 * own_ns) {
      const int64_t stretch = stretch_.load(std::memory_order_relaxed);
      serial_left_.store(stretch, std::memory_order_relaxed);
      stretch_.store(std::min(2 * stretch, kMaxSerialRegions), std::memory_order_relaxed);
    } else {
      stretch_.store(kFirstSerialRegions, std::memory_order_relaxed);
    }
  }

 private:
  std::atomic<int64_t> serial_left_{0};
  std::atomic<int64_t> stretch_{kFirstSerialRegions};
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
  if (grain > 1 && n / grain <= kSmallLoopGrains && guard.take_serial_turn()) {
    for (int64_t begin = 0; begin < n; begin += chunk) f(begin, std::min(n, begin + chunk));
    return;
  }
  std::exception_ptr error;
  std::once_flag error_once;
  const int64_t start = monotonic_ns();
  int64_t own_done = start;
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
    if (t == 0) own_done = monotonic_ns();
  }
  guard.observe(own_done - start, monotonic_ns() - own_done);
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
