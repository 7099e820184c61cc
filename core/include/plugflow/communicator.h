// Collective communication. The core defines the interface; Gloo (CPU) and NCCL (CUDA)
// plugins implement it and register a factory under a backend name.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plugflow/export.h"
#include "plugflow/tensor.h"

namespace plugflow {

enum class ReduceOp { Sum, Avg, Max, Min, Product };

// Where the peers find each other: a TCP store at master_addr:master_port (rank 0 serves it)
// or, when store_path is set, a shared directory. A job is identified by its world size and
// run id: the store refuses a process whose identity differs from rank 0's, so two jobs
// pointed at one store never count each other's ranks.
struct Rendezvous {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string store_path;  // file store directory; empty: TCP
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // The same on every rank of one launch and different between launches (a launcher's job
  // id); empty when none was given.
  std::string run_id;
};

// All operations are collective and in place unless noted; they throw TimeoutError when a
// peer does not answer within the rendezvous timeout.
class PF_API Communicator {
 public:
  virtual ~Communicator();
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  // out[i] receives rank i's `in`; each out[i] has in's shape and dtype.
  virtual void all_gather(std::vector<Tensor>& out, const Tensor& in) = 0;
  // `out` receives the reduction of chunk `rank` of every rank's `in` (split on dim 0).
  virtual void reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) = 0;
  virtual void barrier() = 0;
  virtual void send(const Tensor& t, int dst, int tag) = 0;
  virtual void recv(Tensor& t, int src, int tag) = 0;
};

using CommunicatorFactory = std::function<std::unique_ptr<Communicator>(const Rendezvous&)>;

PF_API std::unique_ptr<Communicator> create_communicator(const std::string& backend, const Rendezvous& rv);
PF_API std::vector<std::string> communicator_backends();

}  // namespace plugflow
