// plugflow._C distributed bindings: the communicator behind plugflow.distributed.
//
// Python's process-group logic (env:// parsing, the default group, ReduceOp on the PyTorch
// names) lives in plugflow/distributed/; this file exposes one `_Communicator` per
// process group. Every blocking call releases the GIL, so other Python threads (a data
// loader, a heartbeat) keep running while a rank waits for its peers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "plugflow/communicator.h"
#include "plugflow/error.h"
#include "plugflow/graph.h"
#include "plugflow/ops.h"
#include "plugflow/runtime.h"

namespace py = pybind11;

namespace plugflow::python {
namespace {

std::chrono::milliseconds timeout_from_seconds(double seconds) {
  PF_CHECK_T(std::isfinite(seconds) && seconds > 0, ValueError, "timeout must be a positive number of seconds, got ",
             seconds);
  // Far beyond any job's length, and still far from overflowing the clock arithmetic.
  constexpr double kMaxSeconds = 1e9;
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(std::min(seconds, kMaxSeconds) * 1000.0)));
}

// The backend's plugin is normally loaded by the config (plugins: [cpu, gloo]); when it is
// not, try the plugin of the same name so init_process_group("nccl") works with any config
// under which the plugin can be found, and say why when it cannot.
void ensure_backend(const std::string& backend) {
  ensure_initialized();
  const auto names = communicator_backends();
  if (std::find(names.begin(), names.end(), backend) != names.end()) return;
  try {
    load_plugin(backend);
  } catch (const Error& e) {
    std::string registered;
    for (const auto& n : names) registered += (registered.empty() ? "" : ", ") + n;
    PF_THROW(PluginError, "no communicator backend '", backend, "' is registered (registered: ",
             registered.empty() ? "none" : registered, "), and loading a plugin named '", backend,
             "' failed: ", e.what());
  }
}

// The handle of a submitted operation (Python's Work): done once the worker ran it.
class Work {
 public:
  void finish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::move(error);
      done_ = true;
    }
    cv_.notify_all();
  }
  // Blocks until the operation ran; rethrows its exception. TimeoutError after `timeout_s`
  // seconds when given (the operation itself is bounded by the group's timeout anyway).
  void wait(std::optional<double> timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    if (timeout_s) {
      const auto limit = timeout_from_seconds(*timeout_s);
      PF_CHECK_T(cv_.wait_for(lock, limit, [&] { return done_; }), TimeoutError, "Work.wait: the operation did not "
                 "complete within ", *timeout_s, " s");
    } else {
      cv_.wait(lock, [&] { return done_; });
    }
    if (error_) std::rethrow_exception(error_);
  }
  bool completed() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  bool succeeded() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_ && !error_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// Holds the communicator and runs its operations, in submission order, on one worker thread:
// every rank submits the same sequence, so the sequences match on the wire, and a caller that
// does not wait (async_op=True, DistributedDataParallel's buckets) keeps computing meanwhile.
// Blocking calls submit and wait. close() drops the communicator with the GIL released: a
// destructor may wait on the peers (NCCL flushes outstanding work), and Python's GC must not
// hold the GIL through that.
class PyCommunicator : public std::enable_shared_from_this<PyCommunicator> {
 public:
  using Job = std::function<void(Communicator&)>;

  explicit PyCommunicator(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)), owner_pid_(::getpid()) {}
  ~PyCommunicator() { close(); }

  std::shared_ptr<Communicator> get() const {
    std::shared_ptr<Communicator> c = std::atomic_load(&comm_);
    PF_CHECK(c != nullptr, "this process group was destroyed (destroy_process_group); create a new one with "
                           "init_process_group");
    return c;
  }

  std::shared_ptr<Work> submit(Job job) {
    std::shared_ptr<Communicator> comm = get();
    auto work = std::make_shared<Work>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      PF_CHECK(!stopping_, "this process group was destroyed (destroy_process_group)");
      if (!worker_.joinable()) worker_ = std::thread([this] { serve(); });
      queue_.push_back({std::move(comm), std::move(job), work});
    }
    cv_.notify_one();
    return work;
  }

  // Waits for the operation running now; operations not started yet fail.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (worker_.joinable()) {
      if (::getpid() == owner_pid_) {
        worker_.join();
      } else {
        // A forked child (a DataLoader worker) has no copy of the thread: nothing to join.
        new std::thread(std::move(worker_));  // leaked on purpose: its destructor would abort
      }
    }
    std::atomic_store(&comm_, std::shared_ptr<Communicator>());
  }
  bool closed() const { return std::atomic_load(&comm_) == nullptr; }

 private:
  struct Pending {
    std::shared_ptr<Communicator> comm;
    Job job;
    std::shared_ptr<Work> work;
  };

  void serve() {
    for (;;) {
      Pending next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        next = std::move(queue_.front());
        queue_.pop_front();
        if (stopping_) {
          lock.unlock();
          next.work->finish(std::make_exception_ptr(
              Error("the process group was destroyed (destroy_process_group) before this operation ran")));
          continue;
        }
      }
      std::exception_ptr error;
      try {
        next.job(*next.comm);
      } catch (...) {
        error = std::current_exception();
      }
      next.work->finish(std::move(error));
    }
  }

  std::shared_ptr<Communicator> comm_;
  const pid_t owner_pid_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

// Runs `job` on the communicator's worker: returns its Work with async_op, else waits for it
// (GIL released) and returns None.
py::object run(PyCommunicator& c, const char* name, bool async_op, PyCommunicator::Job job) {
  PF_CHECK_T(!graph::capturing(), graph::CaptureError, name, " inside an nn.Graph's build(): a graph captures only "
             "all_reduce and broadcast (what DistributedDataParallel's buckets and buffers need)");
  std::shared_ptr<Work> work = c.submit(std::move(job));
  if (async_op) return py::cast(work);
  {
    py::gil_scoped_release nogil;
    work->wait(std::nullopt);
  }
  return py::none();
}

// A collective of an nn.Graph: while build() is captured, all_reduce and broadcast become two
// host nodes of the graph instead of running. The start node submits the operation, on the
// tensor bound for that replay, to the communicator's thread at its place in the plan (so a
// bucket started mid-backward overlaps the rest of the backward, as in eager mode); the wait
// node blocks until it is done. A blocking call records both at once; async_op returns a
// CapturedWork whose wait() records the wait node where build() waits.
using TensorJob = std::function<void(Communicator&, Tensor&)>;

struct PendingCollective {
  std::shared_ptr<Work> work;  // set by the start node of the running replay, taken by the wait
};

class CapturedWork {
 public:
  CapturedWork(std::shared_ptr<const graph::HostCall> wait_call, Tensor t)
      : wait_call_(std::move(wait_call)), tensor_(std::move(t)) {}
  void wait(std::optional<double>) {
    PF_CHECK_T(graph::capturing(), graph::CaptureError, "a collective started inside an nn.Graph's build() must be "
               "waited for inside build()");
    if (waited_) return;
    std::vector<Tensor> ts{tensor_};
    graph::record_host_call(wait_call_, ts, ts);
    waited_ = true;
  }
  bool completed() const {
    graph::check_host_read("Work.is_completed() of a collective inside build()");
    return waited_;
  }

 private:
  std::shared_ptr<const graph::HostCall> wait_call_;
  Tensor tensor_;
  bool waited_ = false;
};

py::object run_on(PyCommunicator& c, const char* name, Tensor t, bool async_op, TensorJob job) {
  if (!graph::capturing())
    return run(c, name, async_op, [t, job](Communicator& comm) mutable { job(comm, t); });
  c.get();  // a destroyed group fails now, not at the first replay
  auto pending = std::make_shared<PendingCollective>();
  auto start = std::make_shared<graph::HostCall>();
  start->name = std::string(name) + ".start";
  start->run = [comm = c.shared_from_this(), job, pending, name = start->name](std::span<Tensor>,
                                                                               std::span<Tensor> out) {
    PF_CHECK(pending->work == nullptr, name, ": the previous replay's operation was never waited for");
    pending->work = comm->submit([job, t = out[0]](Communicator& cm) mutable { job(cm, t); });
  };
  auto wait = std::make_shared<graph::HostCall>();
  wait->name = std::string(name) + ".wait";
  wait->run = [pending](std::span<Tensor>, std::span<Tensor>) {
    std::shared_ptr<Work> work = std::move(pending->work);
    PF_CHECK(work != nullptr, "a graph's collective wait ran without its start");
    work->wait(std::nullopt);
  };
  std::vector<Tensor> ts{t};
  graph::record_host_call(start, ts, ts);
  auto work = std::make_shared<CapturedWork>(wait, t);
  if (async_op) return py::cast(work);
  work->wait(std::nullopt);
  return py::none();
}

}  // namespace

void bind_distributed(py::module_& m) {
  py::enum_<ReduceOp>(m, "_ReduceOp", "Reduction of all_reduce / reduce_scatter (PyTorch's ReduceOp names).")
      .value("SUM", ReduceOp::Sum)
      .value("AVG", ReduceOp::Avg)
      .value("PRODUCT", ReduceOp::Product)
      .value("MIN", ReduceOp::Min)
      .value("MAX", ReduceOp::Max);

  m.def("_communicator_backends", [] {
        ensure_initialized();
        return communicator_backends();
      },
      "Names of the registered communicator backends (after loading the config's plugins).");

  py::class_<Work, std::shared_ptr<Work>>(m, "_Work", "A submitted communicator operation.")
      .def("wait", &Work::wait, py::arg("timeout_s") = py::none(), py::call_guard<py::gil_scoped_release>(),
           "Block until the operation ran; raise its error if it failed.")
      .def("is_completed", &Work::completed)
      .def("is_success", &Work::succeeded);

  py::class_<CapturedWork, std::shared_ptr<CapturedWork>>(
      m, "_CapturedWork", "A collective recorded into an nn.Graph: wait() records where the graph waits for it.")
      .def("wait", &CapturedWork::wait, py::arg("timeout_s") = py::none())
      .def("is_completed", &CapturedWork::completed)
      .def("is_success", &CapturedWork::completed);

  py::class_<PyCommunicator, std::shared_ptr<PyCommunicator>>(
      m, "_Communicator",
      "One process group's communicator. Every operation is collective (send/recv: "
      "between two ranks) and in place; operations run in call order on the "
      "communicator's thread, and each returns when complete, or at once with a _Work "
      "when async_op=True. TimeoutError when a peer does not answer within the timeout.")
      .def(py::init([](const std::string& backend, const std::string& master_addr, int master_port,
                       const std::string& store_path, int rank, int world_size, double timeout_s,
                       const std::string& run_id) {
             Rendezvous rv;
             rv.master_addr = master_addr;
             rv.master_port = master_port;
             rv.store_path = store_path;
             rv.rank = rank;
             rv.world_size = world_size;
             rv.timeout = timeout_from_seconds(timeout_s);
             rv.run_id = run_id;
             std::unique_ptr<Communicator> comm;
             {
               py::gil_scoped_release nogil;  // the rendezvous waits for the peers
               ensure_backend(backend);
               comm = create_communicator(backend, rv);
             }
             return std::make_shared<PyCommunicator>(std::move(comm));
           }),
           py::arg("backend"), py::arg("master_addr") = "127.0.0.1", py::arg("master_port") = 29500,
           py::arg("store_path") = "", py::arg("rank") = 0, py::arg("world_size") = 1, py::arg("timeout_s") = 1800.0,
           py::arg("run_id") = "",
           "Rendezvous with the peers: a TCP store served by rank 0 at master_addr:master_port, or a file store\n"
           "in the directory store_path when it is set. The job is its world_size and run_id: a store refuses\n"
           "processes of another job.")
      .def_property_readonly("rank", [](const PyCommunicator& c) { return c.get()->rank(); })
      .def_property_readonly("world_size", [](const PyCommunicator& c) { return c.get()->world_size(); })
      .def_property_readonly("backend", [](const PyCommunicator& c) { return c.get()->backend(); })
      .def_property_readonly("closed", &PyCommunicator::closed)
      .def("close", &PyCommunicator::close, py::call_guard<py::gil_scoped_release>(),
           "Destroy the communicator now (later calls raise RuntimeError).")
      .def("all_reduce",
           [](PyCommunicator& c, Tensor t, ReduceOp op, bool async_op) {
             return run_on(c, "all_reduce", t, async_op,
                           [op](Communicator& comm, Tensor& x) { comm.all_reduce(x, op); });
           },
           py::arg("tensor"), py::arg("op") = ReduceOp::Sum, py::arg("async_op") = false)
      .def("broadcast",
           [](PyCommunicator& c, Tensor t, int src, bool async_op) {
             return run_on(c, "broadcast", t, async_op,
                           [src](Communicator& comm, Tensor& x) { comm.broadcast(x, src); });
           },
           py::arg("tensor"), py::arg("src"), py::arg("async_op") = false)
      .def("all_gather",
           [](PyCommunicator& c, std::vector<Tensor> out, const Tensor& in, bool async_op) {
             return run(c, "all_gather", async_op,
                        [out, in](Communicator& comm) mutable { comm.all_gather(out, in); });
           },
           py::arg("tensor_list"), py::arg("tensor"), py::arg("async_op") = false,
           "tensor_list[i] receives rank i's tensor; the tensors of the list are written in place.")
      .def("all_gather_into_tensor",
           [](PyCommunicator& c, Tensor& out, const Tensor& in, bool async_op) {
             const int64_t n = in.numel();
             const int ws = c.get()->world_size();
             PF_CHECK_T(out.numel() == n * ws, ValueError, "all_gather_into_tensor: the output has ", out.numel(),
                        " elements; it needs world_size x input = ", ws, " x ", n);
             PF_CHECK_T(out.is_contiguous(), ValueError, "all_gather_into_tensor: the output must be contiguous");
             PF_CHECK_T(out.dtype() == in.dtype(), TypeError, "all_gather_into_tensor: output dtype ",
                        dtype_name(out.dtype()), " differs from the input's ", dtype_name(in.dtype()));
             // Views on the output: each rank's slice is written in place.
             const Tensor flat = ops::view(out, {n * ws});
             std::vector<Tensor> chunks;
             for (int r = 0; r < ws; ++r) chunks.push_back(ops::view(ops::narrow(flat, 0, n * r, n), in.sizes()));
             return run(c, "all_gather_into_tensor", async_op,
                        [chunks, in](Communicator& comm) mutable { comm.all_gather(chunks, in); });
           },
           py::arg("output_tensor"), py::arg("input_tensor"), py::arg("async_op") = false,
           "output (world_size x input elements, contiguous) receives every rank's input in rank order.")
      .def("reduce_scatter",
           [](PyCommunicator& c, Tensor& out, std::vector<Tensor> inputs, ReduceOp op, bool async_op) {
             const int ws = c.get()->world_size();
             PF_CHECK_T(static_cast<int>(inputs.size()) == ws, ValueError, "reduce_scatter: input_list has ",
                        inputs.size(), " tensors; it needs one per rank (", ws, ")");
             // Stack the list into one [world_size, *out.shape] tensor, the form the
             // communicator splits on dim 0.
             Shape stacked_shape{ws};
             stacked_shape.insert(stacked_shape.end(), out.sizes().begin(), out.sizes().end());
             Tensor stacked = ops::empty(stacked_shape, out.dtype(), out.device());
             for (int r = 0; r < ws; ++r) {
               PF_CHECK_T(inputs[r].sizes() == out.sizes(), ValueError, "reduce_scatter: input_list[", r,
                          "] has shape ", shape_str(inputs[r].sizes()), " but the output has ",
                          shape_str(out.sizes()));
               PF_CHECK_T(inputs[r].dtype() == out.dtype(), TypeError, "reduce_scatter: input_list[", r,
                          "] has dtype ", dtype_name(inputs[r].dtype()), " but the output has ",
                          dtype_name(out.dtype()));
               Tensor slot = ops::select(stacked, 0, r);
               ops::copy_(slot, inputs[r]);
             }
             return run(c, "reduce_scatter", async_op,
                        [out, stacked, op](Communicator& comm) mutable { comm.reduce_scatter(out, stacked, op); });
           },
           py::arg("output"), py::arg("input_list"), py::arg("op") = ReduceOp::Sum, py::arg("async_op") = false,
           "output receives the reduction over ranks of input_list[rank].")
      .def("reduce_scatter_tensor",
           [](PyCommunicator& c, Tensor out, const Tensor& in, ReduceOp op, bool async_op) {
             return run(c, "reduce_scatter_tensor", async_op,
                        [out, in, op](Communicator& comm) mutable { comm.reduce_scatter(out, in, op); });
           },
           py::arg("output"), py::arg("input"), py::arg("op") = ReduceOp::Sum, py::arg("async_op") = false,
           "input is split on dim 0 into world_size chunks; output receives the reduction of chunk `rank`.")
      .def("barrier",
           [](PyCommunicator& c, bool async_op) {
             return run(c, "barrier", async_op, [](Communicator& comm) { comm.barrier(); });
           },
           py::arg("async_op") = false)
      .def("send",
           [](PyCommunicator& c, const Tensor& t, int dst, int tag, bool async_op) {
             return run(c, "send", async_op, [t, dst, tag](Communicator& comm) { comm.send(t, dst, tag); });
           },
           py::arg("tensor"), py::arg("dst"), py::arg("tag") = 0, py::arg("async_op") = false)
      .def("recv",
           [](PyCommunicator& c, Tensor t, int src, int tag, bool async_op) {
             return run(c, "recv", async_op, [t, src, tag](Communicator& comm) mutable { comm.recv(t, src, tag); });
           },
           py::arg("tensor"), py::arg("src"), py::arg("tag") = 0, py::arg("async_op") = false)
      .def("__repr__", [](const PyCommunicator& c) {
        if (c.closed()) return std::string("<plugflow._C._Communicator (destroyed)>");
        const std::shared_ptr<Communicator> comm = c.get();
        return detail::str_cat("<plugflow._C._Communicator backend='", comm->backend(), "' rank=", comm->rank(),
                               " world_size=", comm->world_size(), ">");
      });
}

}  // namespace plugflow::python
