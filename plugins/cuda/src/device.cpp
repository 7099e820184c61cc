#include "device.h"

#include <cstdio>
#include <cstring>

#include "cuda_check.h"

namespace plugflow::cuda {

// ---- errors and device selection --------------------------------------------------------

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  // Clear the (non-sticky) error so the next unrelated call does not report it again.
  (void)cudaGetLastError();
  const char* base = std::strrchr(file, '/');
  PF_THROW(DeviceError, "CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") in ", expr, " at ",
           base ? base + 1 : file, ":", line);
}

DeviceGuard::DeviceGuard(int index) {
  PF_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != index) {
    PF_CUDA_CHECK(cudaSetDevice(index));
    switched_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_) (void)cudaSetDevice(previous_);  // a destructor must not throw
}

// ---- per-device state -------------------------------------------------------------------

namespace {

class CudaRawMemory final : public RawMemory {
 public:
  explicit CudaRawMemory(int index) : index_(index) {}
  void* malloc(size_t nbytes, std::string& why) override {
    DeviceGuard guard(index_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        why = "the device has " + std::to_string(free_b >> 20) + " MiB free of " + std::to_string(total_b >> 20) +
              " MiB";
      else
        why = cudaGetErrorString(err);
      (void)cudaGetLastError();
      return nullptr;
    }
    PF_CUDA_CHECK(err);
    return p;
  }
  void free(void* ptr) override {
    DeviceGuard guard(index_);
    PF_CUDA_CHECK(cudaFree(ptr));
  }
  std::string name() const override { return "cuda:" + std::to_string(index_); }

 private:
  int index_;
};

}  // namespace

struct CudaBackend::PerDevice {
  explicit PerDevice(int i) : index(i), allocator(std::make_unique<CudaRawMemory>(i)) {}
  int index;
  CachingAllocator allocator;
  std::once_flag once;  // stream and attributes are created on first use (needs a context)
  cudaStream_t stream = nullptr;
  int sm_count = 0;
};

CudaBackend::CudaBackend() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // No driver, no device, driver too old...: the plugin stays loaded with zero devices
    // and says why, so `cuda:0` gives a clear error instead of the library failing to load.
    (void)cudaGetLastError();
    unavailable_reason_ = std::string("no CUDA device: ") + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")";
    count = 0;
  } else if (count == 0) {
    unavailable_reason_ = "no CUDA device: the driver reports 0 devices";
  }
  for (int i = 0; i < count; ++i) devices_.push_back(std::make_unique<PerDevice>(i));
}

CudaBackend::PerDevice& CudaBackend::dev(int index) const {
  if (index < 0 || index >= device_count()) {
    if (device_count() == 0) PF_THROW(DeviceError, unavailable_reason_);
    PF_THROW(DeviceError, "CUDA device ", index, " requested but only ", device_count(), " available (valid: 0..",
             device_count() - 1, ")");
  }
  PerDevice& d = *devices_[static_cast<size_t>(index)];
  init_device(d);
  return d;
}

void CudaBackend::init_device(PerDevice& d) const {
  std::call_once(d.once, [&] {
    DeviceGuard guard(d.index);
    // A non-blocking stream: it does not serialize with the legacy default stream that
    // other libraries in the process may use.
    PF_CUDA_CHECK(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
    PF_CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, d.index));
  });
}

cudaStream_t CudaBackend::stream(int index) { return dev(index).stream; }
int CudaBackend::multiprocessor_count(int index) { return dev(index).sm_count; }

// ---- memory -----------------------------------------------------------------------------

void* CudaBackend::allocate(int index, size_t nbytes) { return dev(index).allocator.allocate(nbytes); }

void CudaBackend::deallocate(int index, void* ptr, size_t nbytes) {
  // Called from Storage's destructor: report, never throw.
  if (ptr == nullptr) return;
  if (index < 0 || index >= device_count() || !devices_[static_cast<size_t>(index)]->allocator.deallocate(ptr))
    std::fprintf(stderr, "plugflow cuda: ignoring deallocate of %zu bytes at %p on cuda:%d: not allocated there\n",
                 nbytes, ptr, index);
}

size_t CudaBackend::allocated_bytes(int index) const { return dev(index).allocator.allocated_bytes(); }
size_t CudaBackend::peak_allocated_bytes(int index) const { return dev(index).allocator.peak_allocated_bytes(); }
void CudaBackend::reset_peak(int index) { dev(index).allocator.reset_peak(); }
void CudaBackend::empty_cache(int index) { dev(index).allocator.empty_cache(); }

// ---- copies and synchronization -----------------------------------------------------------

void CudaBackend::copy_to_host(int index, void* host_dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  PerDevice& d = dev(index);
  DeviceGuard guard(index);
  // Ordered after the kernels that produced `src`; finished before the host reads it.
  PF_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, d.stream));
  PF_CUDA_CHECK(cudaStreamSynchronize(d.stream));
}

void CudaBackend::copy_from_host(int index, void* dst, const void* host_src, size_t nbytes) {
  if (nbytes == 0) return;
  PerDevice& d = dev(index);
  DeviceGuard guard(index);
  PF_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, d.stream));
  // The caller may free or overwrite host_src as soon as we return.
  PF_CUDA_CHECK(cudaStreamSynchronize(d.stream));
}

void CudaBackend::copy_on_device(int index, void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  PerDevice& d = dev(index);
  DeviceGuard guard(index);
  // cudaMemcpyDefault: with unified addressing this also copies between two GPUs.
  PF_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, d.stream));
}

void CudaBackend::synchronize(int index) {
  dev(index);
  DeviceGuard guard(index);
  PF_CUDA_CHECK(cudaDeviceSynchronize());
}

std::shared_ptr<CudaBackend> backend_ptr() {
  static const std::shared_ptr<CudaBackend> instance = std::make_shared<CudaBackend>();
  return instance;
}

}  // namespace plugflow::cuda
