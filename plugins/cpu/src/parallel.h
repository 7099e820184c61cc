// OpenMP work splitting for the CPU kernels.
//
// The thread count lives in a plugin-wide atomic (set by the runtime's set_num_threads hook)
// instead of OpenMP's per-thread ICV: omp_set_num_threads only affects the calling thread,
// and kernels may be called from any thread (DataLoader workers, autograd, Python threads).
#pragma once
#include <omp.h>

#include <algorithm>
#include <atomic>
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

// Calls f(begin, end) on disjoint, contiguous, in-order slices covering [0, n). Runs on the
// calling thread when n <= grain, when one thread is configured, or inside another parallel
// region (no nested parallelism). Exceptions thrown by f are caught on the worker threads
// (they must not escape an OpenMP region) and the first one is rethrown here.
template <typename F>
void parallel_for(int64_t n, int64_t grain, const F& f) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_threads = num_threads();
  if (n <= grain || max_threads <= 1 || omp_in_parallel()) {
    f(int64_t{0}, n);
    return;
  }
  const int nt = static_cast<int>(std::min(max_threads, (n + grain - 1) / grain));
  std::exception_ptr error;
  std::once_flag error_once;
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t chunk = (n + T - 1) / T;
    const int64_t begin = t * chunk, end = std::min(n, begin + chunk);
    if (begin < end) {
      try {
        f(begin, end);
      } catch (...) {
        std::call_once(error_once, [&] { error = std::current_exception(); });
      }
    }
  }
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
