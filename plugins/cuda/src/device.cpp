#include "device.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <set>

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

// cudaStreamQuery / cudaEventQuery: true when done, false when work is pending.
bool ready(cudaError_t err, const char* expr) {
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  throw_cuda_error(err, expr, __FILE__, __LINE__);
}

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
    // A cached block may still be read by kernels queued on its stream. CUDA 13 documents that
    // cudaFree of cudaMalloc'ed memory only "may perform implicit synchronization", so the
    // device finishes first (called by empty_cache and the out-of-memory retry only).
    PF_CUDA_CHECK(cudaDeviceSynchronize());
    PF_CUDA_CHECK(cudaFree(ptr));
  }
  std::string name() const override { return "cuda:" + std::to_string(index_); }

 private:
  int index_;
};

// The events of the allocator's deferred frees (record_stream): without timing, the cheapest
// kind to record and query.
class CudaStreamEvents final : public StreamEvents {
 public:
  explicit CudaStreamEvents(int index) : index_(index) {}
  void* record(void* stream) override {
    DeviceGuard guard(index_);
    cudaEvent_t e = nullptr;
    PF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    if (const cudaError_t err = cudaEventRecord(e, static_cast<cudaStream_t>(stream)); err != cudaSuccess) {
      (void)cudaEventDestroy(e);
      throw_cuda_error(err, "cudaEventRecord(event, stream)", __FILE__, __LINE__);
    }
    return e;
  }
  bool query(void* event) override {
    DeviceGuard guard(index_);
    return ready(cudaEventQuery(static_cast<cudaEvent_t>(event)), "cudaEventQuery(event)");
  }
  void synchronize(void* event) override {
    DeviceGuard guard(index_);
    PF_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }
  void destroy(void* event) override {
    DeviceGuard guard(index_);
    PF_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
  }

 private:
  int index_;
};

}  // namespace

struct CudaBackend::PerDevice {
  explicit PerDevice(int i)
      : index(i), allocator(std::make_unique<CudaRawMemory>(i), std::make_unique<CudaStreamEvents>(i)) {}
  int index;
  CachingAllocator allocator;
  std::once_flag once;  // stream and attributes are created on first use (needs a context)
  std::atomic<bool> initialized{false};
  cudaStream_t stream = nullptr;  // the default stream
  int sm_count = 0;
  std::mutex streams_mutex;
  std::set<cudaStream_t> streams;  // created by create_stream and not yet destroyed

  // ValueError unless `s` is the default stream or one of `streams`.
  void check_stream(cudaStream_t s, const char* what) {
    if (s == stream) return;
    std::lock_guard<std::mutex> lock(streams_mutex);
    PF_CHECK_T(streams.count(s) > 0, ValueError, what, ": not a live stream of cuda:", index);
  }
};

namespace {
// The calling thread's current stream per device, when it is not the default one.
thread_local std::vector<cudaStream_t> tls_current_stream;

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) {
  PF_CHECK_T(e != nullptr, ValueError, "invalid CUDA event handle");
  return static_cast<cudaEvent_t>(e);
}
}  // namespace

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
    d.initialized = true;
  });
}

cudaStream_t CudaBackend::stream(int index) {
  PerDevice& d = dev(index);
  const auto i = static_cast<size_t>(index);
  return i < tls_current_stream.size() && tls_current_stream[i] != nullptr ? tls_current_stream[i] : d.stream;
}
int CudaBackend::multiprocessor_count(int index) { return dev(index).sm_count; }

// ---- memory -----------------------------------------------------------------------------

void* CudaBackend::allocate(int index, size_t nbytes) {
  // The block belongs to the stream the caller's kernels will use (allocator.h).
  return dev(index).allocator.allocate(nbytes, stream(index));
}

void CudaBackend::deallocate(int index, void* ptr, size_t nbytes) {
  // Called from Storage's destructor: report, never throw.
  if (ptr == nullptr) return;
  try {
    if (index < 0 || index >= device_count() || !devices_[static_cast<size_t>(index)]->allocator.deallocate(ptr))
      std::fprintf(stderr, "plugflow cuda: ignoring deallocate of %zu bytes at %p on cuda:%d: not allocated there\n",
                   nbytes, ptr, index);
  } catch (const std::exception& e) {
    // Recording an event on a recorded stream failed: the block stays out of use.
    std::fprintf(stderr, "plugflow cuda: deallocate of %zu bytes at %p on cuda:%d: %s\n", nbytes, ptr, index,
                 e.what());
  }
}

void CudaBackend::record_stream(int index, void* ptr, void* stream) {
  PerDevice& d = dev(index);
  d.check_stream(as_stream(stream), "record_stream");
  // Memory the allocator did not hand out (DLPack imports) is its owner's to keep: ignored, as
  // PyTorch does.
  (void)d.allocator.record_stream(ptr, stream);
}

size_t CudaBackend::allocated_bytes(int index) const { return dev(index).allocator.allocated_bytes(); }
size_t CudaBackend::peak_allocated_bytes(int index) const { return dev(index).allocator.peak_allocated_bytes(); }
void CudaBackend::reset_peak(int index) { dev(index).allocator.reset_peak(); }
void CudaBackend::empty_cache(int index) { dev(index).allocator.empty_cache(); }
std::map<std::string, int64_t> CudaBackend::memory_stats(int index) const { return dev(index).allocator.stats(); }

// ---- copies and synchronization -----------------------------------------------------------

void CudaBackend::copy_to_host(int index, void* host_dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  const cudaStream_t s = stream(index);
  DeviceGuard guard(index);
  // Ordered after the kernels that produced `src`; finished before the host reads it.
  PF_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, s));
  PF_CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaBackend::copy_from_host(int index, void* dst, const void* host_src, size_t nbytes) {
  if (nbytes == 0) return;
  const cudaStream_t s = stream(index);
  DeviceGuard guard(index);
  PF_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, s));
  // The caller may free or overwrite host_src as soon as we return.
  PF_CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaBackend::copy_on_device(int index, void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  const cudaStream_t s = stream(index);
  DeviceGuard guard(index);
  // cudaMemcpyDefault: with unified addressing this also copies between two GPUs.
  PF_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, s));
}

void CudaBackend::synchronize(int index) {
  PerDevice& d = dev(index);
  DeviceGuard guard(index);
  PF_CUDA_CHECK(cudaDeviceSynchronize());
  // Every event of a deferred free recorded so far has completed: those blocks are free again.
  d.allocator.process_deferred_frees(/*wait=*/false);
}

// Asynchronous copies (non_blocking=True with pinned host memory): enqueued on the current
// stream and not waited for; the host side stays valid because pinned blocks are only freed
// after the devices finished (free_pinned_host).
void CudaBackend::copy_from_host_async(int index, void* dst, const void* host_src, size_t nbytes) {
  if (nbytes == 0) return;
  const cudaStream_t s = stream(index);
  DeviceGuard guard(index);
  PF_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, s));
}

void CudaBackend::copy_to_host_async(int index, void* host_dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  const cudaStream_t s = stream(index);
  DeviceGuard guard(index);
  PF_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, s));
}

// ---- streams and events ---------------------------------------------------------------------------

void* CudaBackend::create_stream(int index) {
  PerDevice& d = dev(index);
  DeviceGuard guard(index);
  cudaStream_t s = nullptr;
  PF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::lock_guard<std::mutex> lock(d.streams_mutex);
  d.streams.insert(s);
  return s;
}

void CudaBackend::destroy_stream(int index, void* stream) {
  PerDevice& d = dev(index);
  {
    std::lock_guard<std::mutex> lock(d.streams_mutex);
    if (d.streams.erase(as_stream(stream)) == 0) return;  // the default stream, or destroyed already
  }
  const auto i = static_cast<size_t>(index);
  if (i < tls_current_stream.size() && tls_current_stream[i] == as_stream(stream)) tls_current_stream[i] = nullptr;
  DeviceGuard guard(index);
  // Finished first: its cached blocks stay in the pool under this handle, which a later stream
  // may receive again, and must not be reused while this stream's work still reads them.
  PF_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
  // Done, and no more work can come: live blocks recorded on it need no event for it (the
  // handle may be reused by a later stream).
  d.allocator.forget_stream(stream);
  PF_CUDA_CHECK(cudaStreamDestroy(as_stream(stream)));
}

void* CudaBackend::default_stream(int index) { return dev(index).stream; }

void CudaBackend::set_current_stream(int index, void* stream) {
  PerDevice& d = dev(index);
  d.check_stream(as_stream(stream), "set_current_stream");
  const auto i = static_cast<size_t>(index);
  if (tls_current_stream.size() <= i) tls_current_stream.resize(i + 1, nullptr);
  tls_current_stream[i] = as_stream(stream) == d.stream ? nullptr : as_stream(stream);
}

void CudaBackend::synchronize_stream(int index, void* stream) {
  dev(index);
  DeviceGuard guard(index);
  PF_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
}

bool CudaBackend::query_stream(int index, void* stream) {
  dev(index);
  DeviceGuard guard(index);
  return ready(cudaStreamQuery(as_stream(stream)), "cudaStreamQuery(stream)");
}

void* CudaBackend::create_event(int index, bool enable_timing) {
  dev(index);
  DeviceGuard guard(index);
  cudaEvent_t e = nullptr;
  PF_CUDA_CHECK(cudaEventCreateWithFlags(&e, enable_timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

void CudaBackend::destroy_event(int index, void* event) {
  dev(index);
  DeviceGuard guard(index);
  PF_CUDA_CHECK(cudaEventDestroy(as_event(event)));
}

void CudaBackend::record_event(int index, void* event, void* stream) {
  dev(index);
  DeviceGuard guard(index);
  PF_CUDA_CHECK(cudaEventRecord(as_event(event), stream != nullptr ? as_stream(stream) : this->stream(index)));
}

void CudaBackend::synchronize_event(int index, void* event) {
  dev(index);
  DeviceGuard guard(index);
  PF_CUDA_CHECK(cudaEventSynchronize(as_event(event)));
}

bool CudaBackend::query_event(int index, void* event) {
  dev(index);
  DeviceGuard guard(index);
  return ready(cudaEventQuery(as_event(event)), "cudaEventQuery(event)");
}

double CudaBackend::event_elapsed_ms(int index, void* start, void* end) {
  dev(index);
  DeviceGuard guard(index);
  float ms = 0;
  PF_CUDA_CHECK(cudaEventElapsedTime(&ms, as_event(start), as_event(end)));
  return ms;
}

void CudaBackend::stream_wait_event(int index, void* stream, void* event) {
  dev(index);
  DeviceGuard guard(index);
  PF_CUDA_CHECK(cudaStreamWaitEvent(stream != nullptr ? as_stream(stream) : this->stream(index), as_event(event), 0));
}

// ---- page-locked host memory ---------------------------------------------------------------------

void* CudaBackend::allocate_pinned_host(size_t nbytes) {
  if (device_count() == 0) return nullptr;
  dev(0);
  DeviceGuard guard(0);
  void* p = nullptr;
  // Portable: pinned for every device of the process, not only the current one.
  PF_CUDA_CHECK(cudaHostAlloc(&p, nbytes, cudaHostAllocPortable));
  std::lock_guard<std::mutex> lock(pinned_mutex_);
  pinned_.emplace(static_cast<const char*>(p), nbytes);
  return p;
}

void CudaBackend::free_pinned_host(void* ptr) {
  // From a Storage destructor: report, never throw. An asynchronous copy may still read or
  // write the block: every started device finishes its queues first.
  try {
    {
      std::lock_guard<std::mutex> lock(pinned_mutex_);
      if (pinned_.erase(static_cast<const char*>(ptr)) == 0) return;
    }
    for (const auto& d : devices_) {
      if (!d->initialized) continue;
      DeviceGuard guard(d->index);
      PF_CUDA_CHECK(cudaDeviceSynchronize());
    }
    PF_CUDA_CHECK(cudaFreeHost(ptr));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plugflow cuda: freeing pinned host memory at %p: %s\n", ptr, e.what());
  }
}

bool CudaBackend::is_pinned_host(const void* ptr) const {
  const auto* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(pinned_mutex_);
  auto it = pinned_.upper_bound(p);
  if (it == pinned_.begin()) return false;
  --it;
  return p < it->first + std::max<size_t>(it->second, 1);
}

std::shared_ptr<CudaBackend> backend_ptr() {
  static const std::shared_ptr<CudaBackend> instance = std::make_shared<CudaBackend>();
  return instance;
}

}  // namespace plugflow::cuda
