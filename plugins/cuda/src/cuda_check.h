// Error checking and device selection for every CUDA runtime / cuBLAS call in the plugin.
// A failed call becomes a plugflow::DeviceError that names the call, the CUDA error and where
// it happened, so a user sees "CUDA error cudaErrorMemoryAllocation (out of memory) in
// cudaMalloc(...)" instead of a crash or a silently wrong result.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "plugflow/error.h"

namespace plugflow::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);

// Sets the calling thread's current device for the scope and restores the previous one.
// Kernels and copies of device `index` must run with it current: launches, cudaMalloc and
// cuBLAS calls all act on the current device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace plugflow::cuda

#define PF_CUDA_CHECK(expr)                                                          \
  do {                                                                               \
    const cudaError_t pf_cuda_err_ = (expr);                                         \
    if (pf_cuda_err_ != cudaSuccess)                                                 \
      ::plugflow::cuda::throw_cuda_error(pf_cuda_err_, #expr, __FILE__, __LINE__);   \
  } while (0)

// After a <<<...>>> launch: launch-configuration errors are reported by cudaGetLastError.
#define PF_CUDA_CHECK_LAUNCH() PF_CUDA_CHECK(cudaGetLastError())
