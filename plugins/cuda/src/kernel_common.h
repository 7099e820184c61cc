// What every CUDA kernel entry point (a plugflow KernelFn) starts with: the device made
// current and the stream to enqueue on. Host code; included by the .cu files too.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "cuda_check.h"
#include "device.h"
#include "plugflow/kernel.h"

namespace plugflow::cuda {

inline constexpr int kBlockThreads = 256;

// TypeError for a dtype a kernel was not built for. The dispatcher only routes registered
// dtypes to a kernel, so this guards direct calls and registration mistakes.
[[noreturn]] inline void throw_unsupported_dtype(const KernelContext& ctx, DType t) {
  PF_THROW(TypeError, "the cuda '", ctx.op.name, "' kernel does not support dtype ", dtype_name(t));
}

struct KernelScope {
  explicit KernelScope(const KernelContext& ctx)
      : device(ctx.device.index < 0 ? 0 : ctx.device.index),
        guard(device),
        stream(ctx.stream ? static_cast<cudaStream_t>(ctx.stream) : backend().stream(device)) {}
  KernelScope(int index, void* s)
      : device(index), guard(index), stream(s ? static_cast<cudaStream_t>(s) : backend().stream(index)) {}

  // Blocks for a grid-stride loop over n items: enough to fill the device several times
  // over, no more (each thread then handles several items).
  unsigned blocks_for(int64_t n, int threads = kBlockThreads) const {
    const int64_t wanted = (n + threads - 1) / threads;
    const int64_t cap = static_cast<int64_t>(backend().multiprocessor_count(device)) * (2048 / threads) * 4;
    return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
  }

  int device;
  DeviceGuard guard;
  cudaStream_t stream;
};

// Scratch device memory for one kernel call, from the caching allocator. Releasing it as soon
// as the kernels are enqueued is safe: the allocator is stream-ordered (allocator.h).
class Workspace {
 public:
  Workspace(int device, size_t nbytes) : device_(device), nbytes_(nbytes), ptr_(backend().allocate(device, nbytes)) {}
  ~Workspace() { backend().deallocate(device_, ptr_, nbytes_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  int device_;
  size_t nbytes_;
  void* ptr_;
};

}  // namespace plugflow::cuda
