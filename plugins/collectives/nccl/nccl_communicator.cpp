// The NCCL communicator: collectives on CUDA tensors.
//
// Rendezvous: rank 0 creates the ncclUniqueId and publishes it in the shared store
// (common/store.h) under "nccl/id"; the others read it. Once NCCL's init has joined every
// rank the store is sealed; rank 0 keeps serving it for the communicator's life, so the port
// stays taken and strays keep being refused. The communicator is bound to the CUDA device
// that is current on the creating thread (set it before creating, as with PyTorch's
// torch.cuda.set_device(local_rank)).
//
// Timeouts: the communicator is created non-blocking (ncclConfig_t::blocking = 0), so neither
// initialisation nor a collective can block the host inside NCCL. Every operation is enqueued
// on the tensor's current stream (the stream kernels see), then the host polls an event and
// ncclCommGetAsyncError until the work is done; past the deadline it calls ncclCommAbort and
// throws TimeoutError. Operations are thus complete when they return, which is what the
// Communicator contract (and its TimeoutError) promises.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "plugflow/communicator.h"
#include "plugflow/device.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"
#include "plugflow/plugin.h"
#include "store.h"
#include "tensor_args.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the nccl plugin needs NCCL >= 2.14 (non-blocking communicators, ncclCommFinalize, ncclGetLastError)"
#endif

namespace plugflow::collectives {
namespace {

constexpr const char* kIdKey = "nccl/id";

std::string cuda_message(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) PF_THROW(DeviceError, "nccl plugin: ", what, " failed (", cuda_message(e), ")");
}

// Makes `device` current for the scope: NCCL and CUDA calls act on the current device, and
// the caller's thread may have another one selected.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    cuda_check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device_) cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

// Element type for reductions. NCCL has no 16-bit integer type.
std::optional<ncclDataType_t> nccl_dtype(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8: return ncclUint8;
    case DType::Int8: return ncclInt8;
    case DType::Int16: return std::nullopt;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
  }
  return std::nullopt;
}

// bool as uint8 holds only 0/1: sum and max are both "or", product and min both "and", and
// max/min keep the values in {0, 1} where a uint8 sum would not.
ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  if (t == DType::Bool) return (op == ReduceOp::Sum || op == ReduceOp::Max) ? ncclMax : ncclMin;
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Product: return ncclProd;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  PF_THROW(ValueError, "unknown ReduceOp ", static_cast<int>(op));
}

ncclDataType_t reduction_dtype(const Tensor& t, const char* op) {
  auto d = nccl_dtype(t.dtype());
  PF_CHECK_T(d.has_value(), TypeError, "nccl ", op, ": NCCL cannot reduce ", dtype_name(t.dtype()),
             " tensors (it has no 16-bit integer type); convert to int32 first");
  return *d;
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const Rendezvous& rv)
      : rank_(rv.rank), world_size_(rv.world_size), timeout_(rv.timeout) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    PF_CHECK_T(e == cudaSuccess && count > 0, DeviceError, "the nccl backend needs a CUDA device, but ",
               e == cudaSuccess ? std::string("none was found") : "CUDA reports " + cuda_message(e),
               "; use the gloo backend for CPU tensors");
    cuda_check(cudaGetDevice(&device_), "cudaGetDevice");

    const Deadline deadline = deadline_after(timeout_);
    store_ = open_store(rv, deadline);
    ncclUniqueId id;
    if (rank_ == 0) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store_->set(kIdKey, std::vector<char>(id.internal, id.internal + sizeof id.internal));
    } else {
      try {
        store_->wait({kIdKey}, deadline);
      } catch (const TimeoutError& err) {
        PF_THROW(TimeoutError, "nccl rendezvous timed out: rank ", rank_, " of ", world_size_,
                 " got no NCCL id from rank 0 at ", store_->describe(), " (", err.what(),
                 "). Check that rank 0 is running with the same MASTER_ADDR and MASTER_PORT");
      }
      const std::vector<char> bytes = store_->get(kIdKey);
      PF_CHECK(bytes.size() == sizeof id.internal, "nccl rendezvous: the id at ", store_->describe(), " has ",
               bytes.size(), " bytes, expected ", sizeof id.internal, " (a different NCCL version on rank 0?)");
      std::memcpy(id.internal, bytes.data(), sizeof id.internal);
    }

    DeviceGuard guard(device_);
    try {
      init(id, deadline);
      store_->seal(deadline);
    } catch (...) {
      release();  // the destructor does not run for a constructor that throws
      throw;
    }
  }

  ~NcclCommunicator() override { release(); }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    check_tensor(t, "all_reduce", "tensor");
    check_avg_dtype(t, op, "all_reduce");
    const ncclDataType_t dtype = reduction_dtype(t, "all_reduce");
    const ncclRedOp_t nop = nccl_op(op, t.dtype());
    run("all_reduce", [&](cudaStream_t stream) {
      if (t.numel() == 0) return;
      Staged buf(t, t.device(), Staged::Fill::Copy);
      enqueued(ncclAllReduce(buf.data(), buf.data(), static_cast<size_t>(t.numel()), dtype, nop, comm_, stream),
               "ncclAllReduce");
      buf.write_back();
    }, t.device().index);
  }

  void broadcast(Tensor& t, int root) override {
    check_tensor(t, "broadcast", "tensor");
    check_rank_arg(root, world_size_, "broadcast", "root");
    run("broadcast", [&](cudaStream_t stream) {
      if (t.numel() == 0) return;
      const bool is_root = rank_ == root;
      Staged buf(t, t.device(), is_root ? Staged::Fill::Copy : Staged::Fill::Uninitialized);
      // Bytes: no arithmetic, so every dtype (int16 included) travels.
      enqueued(ncclBroadcast(buf.data(), buf.data(), buf.nbytes(), ncclUint8, root, comm_, stream), "ncclBroadcast");
      if (!is_root) buf.write_back();
    }, t.device().index);
  }

  void all_gather(std::vector<Tensor>& out, const Tensor& in) override {
    check_all_gather_args(out, in, world_size_);
    check_tensor(in, "all_gather", "input");
    for (const Tensor& o : out) check_tensor(o, "all_gather", "an output");
    run("all_gather", [&](cudaStream_t stream) {
      if (in.numel() == 0) return;
      Staged src(in, in.device(), Staged::Fill::Copy);
      const int64_t n = in.numel();
      Tensor gathered = ops::empty({n * world_size_}, in.dtype(), in.device());
      enqueued(ncclAllGather(src.data(), gathered.data_ptr(), src.nbytes(), ncclUint8, comm_, stream),
               "ncclAllGather");
      // The copies run on the same stream, after the gather.
      for (int r = 0; r < world_size_; ++r) {
        ops::copy_(out[r], ops::view(ops::narrow(gathered, 0, n * r, n), in.sizes()));
      }
    }, in.device().index);
  }

  void reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    check_reduce_scatter_args(out, in, world_size_);
    check_tensor(out, "reduce_scatter", "output");
    check_tensor(in, "reduce_scatter", "input");
    check_avg_dtype(in, op, "reduce_scatter");
    const ncclDataType_t dtype = reduction_dtype(in, "reduce_scatter");
    const ncclRedOp_t nop = nccl_op(op, in.dtype());
    run("reduce_scatter", [&](cudaStream_t stream) {
      if (in.numel() == 0) return;
      Staged src(in, in.device(), Staged::Fill::Copy);
      Staged dst(out, out.device(), Staged::Fill::Uninitialized);
      enqueued(ncclReduceScatter(src.data(), dst.data(), static_cast<size_t>(out.numel()), dtype, nop, comm_, stream),
               "ncclReduceScatter");
      dst.write_back();
    }, in.device().index);
  }

  void barrier() override {
    // NCCL has no barrier; a one-element all-reduce is one (PyTorch does the same).
    run("barrier", [&](cudaStream_t stream) {
      enqueued(ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclInt32, ncclSum, comm_, stream), "ncclAllReduce");
    }, device_);
  }

  // NCCL matches point-to-point messages between two ranks in issue order and has no tags;
  // the tag is accepted for API compatibility and ignored, as PyTorch's NCCL group does.
  void send(const Tensor& t, int dst, int tag) override {
    check_tensor(t, "send", "tensor");
    check_rank_arg(dst, world_size_, "send", "dst");
    PF_CHECK_T(dst != rank_, ValueError, "send: rank ", rank_, " cannot send to itself");
    PF_CHECK_T(tag >= 0, ValueError, "send: tag must be >= 0, got ", tag);
    run("send", [&](cudaStream_t stream) {
      if (t.numel() == 0) return;
      Staged buf(t, t.device(), Staged::Fill::Copy);
      enqueued(ncclSend(buf.data(), buf.nbytes(), ncclUint8, dst, comm_, stream), "ncclSend");
    }, t.device().index);
  }

  void recv(Tensor& t, int src, int tag) override {
    check_tensor(t, "recv", "tensor");
    check_rank_arg(src, world_size_, "recv", "src");
    PF_CHECK_T(src != rank_, ValueError, "recv: rank ", rank_, " cannot receive from itself");
    PF_CHECK_T(tag >= 0, ValueError, "recv: tag must be >= 0, got ", tag);
    run("recv", [&](cudaStream_t stream) {
      if (t.numel() == 0) return;
      Staged buf(t, t.device(), Staged::Fill::Uninitialized);
      enqueued(ncclRecv(buf.data(), buf.nbytes(), ncclUint8, src, comm_, stream), "ncclRecv");
      buf.write_back();
    }, t.device().index);
  }

 private:
  void init(const ncclUniqueId& id, Deadline deadline) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, world_size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string msg = nccl_message(r);
      if (comm_) ncclCommAbort(comm_);
      comm_ = nullptr;
      PF_THROW(Error, "nccl communicator init failed on rank ", rank_, " of ", world_size_, ": ", msg);
    }
    // Init completes only once every rank has joined, hence has read the id: then the store
    // may be sealed.
    wait_until_idle("initialization", deadline);
    cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaMalloc(&barrier_buffer_, sizeof(int32_t)), "cudaMalloc");
    cuda_check(cudaMemset(barrier_buffer_, 0, sizeof(int32_t)), "cudaMemset");
  }

  void release() noexcept {
    int previous = -1;
    cudaGetDevice(&previous);
    if (previous != device_) cudaSetDevice(device_);
    if (comm_) {
      bool clean = false;
      if (broken_.empty() && ncclCommFinalize(comm_) == ncclSuccess) {
        // Finalize flushes outstanding work with the peers; bound it like any operation.
        const Deadline deadline = deadline_after(timeout_);
        ncclResult_t state = ncclInProgress;
        while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
               Clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        clean = state == ncclSuccess;
      }
      if (clean) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    if (barrier_buffer_) cudaFree(barrier_buffer_);
    barrier_buffer_ = nullptr;
    if (done_) cudaEventDestroy(done_);
    done_ = nullptr;
    if (previous >= 0 && previous != device_) cudaSetDevice(previous);
  }

  void check_tensor(const Tensor& t, const char* op, const char* arg) const {
    check_defined(t, op, arg);
    PF_CHECK_T(t.device().type == DeviceType::CUDA, ValueError, "nccl ", op, ": ", arg, " is on ", t.device().str(),
               "; the nccl backend handles CUDA tensors (use the gloo backend for CPU tensors)");
    PF_CHECK_T(t.device().index == device_, ValueError, "nccl ", op, ": ", arg, " is on ", t.device().str(),
               " but rank ", rank_, "'s communicator was created on cuda:", device_,
               "; select the device (plugflow.cuda.set_device) before init_process_group");
  }

  std::string nccl_message(ncclResult_t r) const {
    std::string msg = ncclGetErrorString(r);
    if (const char* last = ncclGetLastError(comm_); last && *last) msg += std::string(" (") + last + ")";
    return msg;
  }

  void nccl_check(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess) PF_THROW(Error, "nccl plugin: ", what, " failed: ", nccl_message(r));
  }

  // A non-blocking communicator returns ncclInProgress while a call is still being enqueued;
  // anything else but success is an error.
  void enqueued(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    if (r == ncclInProgress) {
      wait_until_idle(what, deadline_);
      return;
    }
    throw NcclFailure(std::string(what) + " failed: " + nccl_message(r));
  }

  // Polls the communicator's state until no call is in progress.
  void wait_until_idle(const char* what, Deadline deadline) {
    auto pause = std::chrono::microseconds(50);
    for (;;) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(std::string(what) + " failed: " + nccl_message(state), false);
      if (Clock::now() >= deadline) fail(std::string(what) + " did not finish", true);
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }

  // Aborts the communicator (the only way to get NCCL's threads and kernels off a peer that
  // is gone) and throws. The object stays alive but refuses further work.
  [[noreturn]] void fail(const std::string& why, bool timed_out) {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    const std::string msg = detail::str_cat("nccl rank ", rank_, " of ", world_size_, ": ", why,
                                            timed_out ? detail::str_cat(" within ", timeout_.count(),
                                                                        " ms; a peer did not take part (it may have "
                                                                        "exited, hung, or called a different "
                                                                        "collective). The communicator was aborted")
                                                      : std::string());
    broken_ = msg;
    if (timed_out) throw TimeoutError(msg);
    throw Error(msg);
  }

  // Thrown inside run() for an NCCL error seen at enqueue time, so run() can tell it from
  // argument errors (which leave the communicator usable).
  struct NcclFailure : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  cudaStream_t stream_of(int device_index) const {
    // The stream kernels see, so collectives are ordered with the surrounding compute. Without
    // the CUDA plugin (a barrier-only program) there is no such stream: use the legacy one.
    DeviceBackend* backend = find_device_backend(DeviceType::CUDA);
    return backend ? static_cast<cudaStream_t>(backend->current_stream(device_index)) : nullptr;
  }

  // Enqueues `body` on the device's stream and waits for it, bounded by the timeout.
  template <typename F>
  void run(const char* op, F&& body, int device_index) {
    std::lock_guard<std::mutex> lock(mu_);
    PF_CHECK(comm_ != nullptr, "nccl communicator (rank ", rank_, " of ", world_size_, ") cannot run ", op,
             ": an earlier operation failed (", broken_, "). Destroy it (destroy_process_group) and create a new one");
    DeviceGuard guard(device_);
    deadline_ = deadline_after(timeout_);
    const cudaStream_t stream = stream_of(device_index);
    try {
      body(stream);
    } catch (const NcclFailure& e) {
      fail(std::string(op) + ": " + e.what(), false);
    }
    cuda_check(cudaEventRecord(done_, stream), "cudaEventRecord");
    auto pause = std::chrono::microseconds(20);
    for (;;) {
      const cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) fail(std::string(op) + ": CUDA reported " + cuda_message(q), false);
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
        fail(std::string(op) + " failed: " + nccl_message(state), false);
      }
      if (Clock::now() >= deadline_) fail(std::string(op) + " did not complete", true);
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }

  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  // Kept for the communicator's life: rank 0 serves it, holding the port and refusing strays.
  std::unique_ptr<Store> store_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* barrier_buffer_ = nullptr;
  Deadline deadline_{};  // of the operation in flight
  std::mutex mu_;        // one operation at a time
  std::string broken_;   // why comm_ was aborted
};

}  // namespace
}  // namespace plugflow::collectives

PLUGFLOW_PLUGIN("nccl", "0.1.0") {
  reg.communicator("nccl", plugflow::DeviceType::CUDA,
                   [](const plugflow::Rendezvous& rv) -> std::unique_ptr<plugflow::Communicator> {
                     return std::make_unique<plugflow::collectives::NcclCommunicator>(rv);
                   });
}
