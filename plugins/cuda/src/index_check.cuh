// Device-side bounds checks for index tensors, reported on the host as plugflow errors (the CPU
// kernels' IndexError "index V is out of bounds for dimension D with size S") instead of a
// device trap, which would poison the CUDA context for the rest of the process.
//
// A kernel that meets a bad index records the first one to claim the slot and skips that
// element; the host waits for the stream once after the launches and throws. The wait costs a
// synchronization per call, as PyTorch's nonzero / masked_select do.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

#include "kernel_common.h"
#include "types.cuh"

namespace plugflow::cuda {

struct BadIndex {
  unsigned long long found;  // 0 until a kernel records a bad index
  long long value;           // the index as given (before wrapping)
  long long which;           // which index tensor / dim it belongs to (the caller's numbering)
};

PF_DEVICE void report_bad_index(BadIndex* slot, int64_t value, int64_t which) {
  if (atomicCAS(&slot->found, 0ull, 1ull) == 0ull) {
    slot->value = value;
    slot->which = which;
  }
}

class BadIndexCheck {
 public:
  explicit BadIndexCheck(const KernelScope& scope) : scope_(scope), slot_(scope.device, sizeof(BadIndex)) {
    PF_CUDA_CHECK(cudaMemsetAsync(slot_.as<BadIndex>(), 0, sizeof(BadIndex), scope.stream));
  }
  BadIndex* slot() const { return slot_.as<BadIndex>(); }

  // Waits for everything enqueued so far and returns the recorded bad index, if any.
  std::optional<BadIndex> wait() const {
    BadIndex host{};
    PF_CUDA_CHECK(cudaMemcpyAsync(&host, slot_.as<BadIndex>(), sizeof(BadIndex), cudaMemcpyDeviceToHost, scope_.stream));
    PF_CUDA_CHECK(cudaStreamSynchronize(scope_.stream));
    if (host.found == 0) return std::nullopt;
    return host;
  }

 private:
  const KernelScope& scope_;
  Workspace slot_;
};

// The CPU kernels' message, so the functional layer rewords both devices' errors alike.
[[noreturn]] inline void throw_out_of_bounds(int64_t value, int64_t dim, int64_t size) {
  PF_THROW(IndexError, "index ", value, " is out of bounds for dimension ", dim, " with size ", size);
}

}  // namespace plugflow::cuda
