// The rendezvous key-value store shared by the collectives plugins (Gloo and NCCL).
//
// Peers find each other by publishing small blobs (transport addresses, an ncclUniqueId) under
// agreed keys. Two stores implement that:
//   - TCP: rank 0 serves an in-process store on master_port; every rank (rank 0 included)
//     talks to it as a client. Clients retry connecting until the deadline, so ranks may start
//     in any order. Each connection opens with the job's identity (world size, run id) and
//     the rank it claims; the server admits one process per rank of one job and refuses the
//     rest (see TcpStoreServer in store.cpp for the rules).
//   - File: one file per key in a shared directory (Rendezvous::store_path), the keys named
//     after the job's world size and run id.
//
// This file is compiled into each plugin that needs it (plugins never link to each other);
// the plugins are built with hidden visibility, so the copies do not clash in one process.
// Every blocking call takes a deadline and ends in plugflow::TimeoutError, never a hang.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "plugflow/communicator.h"

namespace plugflow::collectives {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadline_after(std::chrono::milliseconds timeout) {
  // Saturate instead of overflowing for "infinite" timeouts.
  const auto max_left = Clock::time_point::max() - Clock::now();
  if (timeout >= max_left) return Clock::time_point::max();
  return Clock::now() + timeout;
}

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  // The value of a key that exists; Error when it does not (call wait() first).
  virtual std::vector<char> get(const std::string& key) = 0;
  // Blocks until every key exists. TimeoutError naming the missing keys at the deadline.
  virtual void wait(const std::vector<std::string>& keys, Deadline deadline) = 0;
  // The last step of a rendezvous, once every rank is connected to its peers (after a
  // barrier). TCP: rank 0's store stops admitting processes and the other ranks wait until
  // it has; when two processes claimed one rank before that, the group may hold another
  // job's process and every rank gets an Error instead. File store: nothing to do.
  virtual void seal(Deadline deadline) = 0;
  // "tcp://host:port" or "file:///dir", for messages.
  virtual std::string describe() const = 0;
};

// The store a Rendezvous describes, joined as rank rv.rank of the job (rv.world_size,
// rv.run_id). With TCP, rank 0 serves it on master_port for as long as the returned store
// lives, so communicators keep it for their whole life: the port stays taken and late
// strays keep being refused. A taken port is an Error naming it. Every rank connects before
// `deadline` (TimeoutError otherwise); a store that refuses this process (another job's, or
// its rank already taken) is an Error saying why. A file store removes the keys this rank
// wrote when it is destroyed, so the directory can be reused by the next job.
std::unique_ptr<Store> open_store(const Rendezvous& rv, Deadline deadline);

// The local address peers can reach this host on when the master is at `master_addr`: the
// source address the kernel would pick to route to it (loopback for a local master).
std::string local_address_towards(const std::string& master_addr, int port);

// "rank(s) 1, 2" style list of the ranks behind missing rendezvous keys, for messages.
std::string join_ints(const std::vector<int>& v);

}  // namespace plugflow::collectives
