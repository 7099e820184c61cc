// The "gloo" communicator backend (CPU tensors; other devices are staged through the host).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plugflow/communicator.h"
#include "plugflow/plugin.h"

namespace gloo {
class Context;
}

namespace plugflow::collectives {

class Store;

class GlooCommunicator final : public Communicator {
 public:
  // Rendezvous with the peers; TimeoutError when they do not all arrive within rv.timeout.
  explicit GlooCommunicator(const Rendezvous& rv);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return "gloo"; }
  void all_reduce(Tensor& t, ReduceOp op) override;
  void broadcast(Tensor& t, int root) override;
  void all_gather(std::vector<Tensor>& out, const Tensor& in) override;
  void reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override;
  void barrier() override;
  void send(const Tensor& t, int dst, int tag) override;
  void recv(Tensor& t, int src, int tag) override;

 private:
  // Runs one operation under the lock; turns Gloo's exceptions into TimeoutError / Error and
  // marks the communicator unusable after them.
  template <typename F>
  void run(const char* op, F&& body);

  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  // Kept for the communicator's life: rank 0 serves it, holding the port and refusing strays.
  std::unique_ptr<Store> store_;
  std::string where_;  // the rendezvous store, for messages
  std::shared_ptr<gloo::Context> context_;
  std::mutex mu_;  // one operation at a time: Gloo ops on a context must not interleave
  // Collectives are numbered; every rank runs them in the same order, so the numbers match
  // and go into each collective's tag (call_tag in the .cpp).
  uint32_t next_seq_ = 0;
  std::string broken_;  // why the communicator is unusable; empty while healthy
};

}  // namespace plugflow::collectives
