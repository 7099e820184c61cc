#include "cudnn.h"

#include <dlfcn.h>

#include <cstring>
#include <vector>

namespace plugflow::cuda {

const Cudnn& cudnn() {
  static const Cudnn api = [] {
    const std::string soname = "libcudnn.so." + std::to_string(CUDNN_MAJOR);
    // RTLD_NODELETE: handles outlive any unload of this plugin (see CudnnHandles).
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (lib == nullptr) PF_THROW(DeviceError, "cuda: cannot load cuDNN (", soname, "): ", dlerror());
    Cudnn c{};
#define PF_CUDNN_LOAD(name)                                                                       \
  c.name = reinterpret_cast<decltype(c.name)>(dlsym(lib, #name));                                 \
  if (c.name == nullptr) PF_THROW(DeviceError, "cuda: ", soname, " has no ", #name);
    PF_CUDNN_FUNCTIONS(PF_CUDNN_LOAD)
#undef PF_CUDNN_LOAD
    return c;
  }();
  return api;
}

std::string cudnn_version() {
  // cuDNN 9 encodes major * 10000 + minor * 100 + patch.
  const size_t v = cudnn().cudnnGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

void throw_cudnn_error(cudnnStatus_t status, const char* expr, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  PF_THROW(DeviceError, "cuDNN error ", cudnn().cudnnGetErrorString(status), " (", static_cast<int>(status), ") in ",
           expr, " at ", base ? base + 1 : file, ":", line);
}

namespace {
// One handle per device, created on first use and never destroyed (as the cuBLAS handles: the
// process may end after the CUDA runtime is torn down).
struct CudnnHandles {
  std::mutex mutex;
  std::vector<cudnnHandle_t> handles;
};
CudnnHandles& cudnn_handles() {
  static CudnnHandles h;
  return h;
}
}  // namespace

CudnnLease::CudnnLease(int device, cudaStream_t stream) : lock_(cudnn_handles().mutex) {
  auto& hs = cudnn_handles().handles;
  const auto d = static_cast<size_t>(device);
  if (hs.size() <= d) hs.resize(d + 1, nullptr);
  if (hs[d] == nullptr) {
    DeviceGuard guard(device);  // a handle belongs to the current device
    cudnnHandle_t h = nullptr;
    PF_CUDNN_CHECK(cudnn().cudnnCreate(&h));
    hs[d] = h;
  }
  handle_ = hs[d];
  PF_CUDNN_CHECK(cudnn().cudnnSetStream(handle_, stream));
}

}  // namespace plugflow::cuda
