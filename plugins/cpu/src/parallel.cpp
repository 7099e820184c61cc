#include "parallel.h"

#include <pthread.h>

#include <cstdlib>
#include <string_view>

extern "C" void openblas_set_num_threads(int);

namespace plugflow::cpu {
namespace {
// Defaults to OpenMP's own choice (OMP_NUM_THREADS or the core count) until the runtime
// applies its config.
std::atomic<int> g_num_threads{0};

// GNU OpenMP is not fork-safe: a child of a process that has run parallel regions can hang
// in its first region (the inherited thread pool does not exist there). DataLoader-style
// workers fork, so the child runs its kernels on one thread, as PyTorch's workers do; it can
// still opt in to more with set_num_threads.
void after_fork_in_child() { g_num_threads.store(1, std::memory_order_relaxed); }
}  // namespace

int num_threads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}

void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();  // the config's 0 means "one per core"
  g_num_threads.store(n, std::memory_order_relaxed);
  // OpenBLAS stays single-threaded: blas.h splits GEMMs over the OpenMP pool. (OpenBLAS's
  // OpenMP build sets the calling thread's OpenMP count here too, so this comes first.)
  openblas_set_num_threads(1);
  omp_set_num_threads(n);  // for OpenMP regions opened by this thread outside parallel_for
}

LateWorkerGuard& late_worker_guard() {
  static LateWorkerGuard guard([] {
    const char* v = std::getenv("PLUGFLOW_LATE_WORKER_GUARD");
    return v == nullptr || std::string_view(v) != "0";
  }());
  return guard;
}

void install_fork_handler() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, after_fork_in_child); });
}

}  // namespace plugflow::cpu
