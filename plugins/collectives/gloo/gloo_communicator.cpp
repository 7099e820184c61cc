// The Gloo communicator: CPU collectives over TCP (gloo::transport::tcp).
//
// Rendezvous goes through the shared store (common/store.h): each rank publishes its pair
// addresses under "gloo/<rank>", Gloo's connectFullMesh connects every pair, and after a
// barrier (every rank is connected) the store is sealed. Rank 0 keeps serving it for the
// communicator's life, so the port stays taken and strays keep being refused.
//
// Tensors of any device and layout are accepted: non-contiguous or non-CPU tensors go through
// a contiguous host copy (Staged). Every operation runs under the rendezvous timeout; after a
// failure inside Gloo the communicator is marked unusable, because Gloo leaves the pairs in an
// unknown state (PyTorch's ProcessGroupGloo does the same). Each collective's Gloo tag holds
// a hash of the call (call_tag), so ranks that pass different sizes or dtypes never exchange
// bytes and time out, instead of Gloo aborting the process.
#include "gloo_communicator.h"

#include <unistd.h>
#include <netdb.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <type_traits>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "plugflow/error.h"
#include "stable_hash.h"
#include "store.h"
#include "tensor_args.h"

namespace plugflow::collectives {
namespace {

const Device kCpu{DeviceType::CPU, 0};

// ---- reductions ----------------------------------------------------------------------------
// Integers wrap on overflow (computed in uint64_t: signed overflow is undefined in C++); bool
// sums are logical or, products logical and; half and bfloat16 compute in float. Max and min
// propagate NaN, like PyTorch's reductions.

template <typename T>
constexpr bool kIsLowFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

struct Add {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) {
      return a || b;
    } else if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    } else if constexpr (kIsLowFloat<T>) {
      return T(static_cast<float>(a) + static_cast<float>(b));
    } else {
      return a + b;
    }
  }
};

struct Mul {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) {
      return a && b;
    } else if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    } else if constexpr (kIsLowFloat<T>) {
      return T(static_cast<float>(a) * static_cast<float>(b));
    } else {
      return a * b;
    }
  }
};

template <bool kMax>
struct Extremum {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (kIsLowFloat<T>) {
      return T(apply(static_cast<float>(a), static_cast<float>(b)));
    } else {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
      }
      if constexpr (kMax) {
        return a < b ? b : a;
      } else {
        return b < a ? b : a;
      }
    }
  }
};

template <typename T, typename Op>
void elementwise(void* c, const void* a, const void* b, size_t n) {
  // Gloo calls this with c == a; an in-order loop is safe for that aliasing.
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = Op::template apply<T>(x[i], y[i]);
}

template <typename T>
gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return &elementwise<T, Add>;
    case ReduceOp::Product: return &elementwise<T, Mul>;
    case ReduceOp::Max: return &elementwise<T, Extremum<true>>;
    case ReduceOp::Min: return &elementwise<T, Extremum<false>>;
  }
  PF_THROW(ValueError, "unknown ReduceOp ", static_cast<int>(op));
}

// AVG = SUM, then divide by the world size. Integers divide truncating toward zero, as
// NCCL's ncclAvg does.
template <typename T>
void divide(T* p, size_t n, int by) {
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bool>) {
      (void)by;  // rejected before communicating (check_avg_dtype)
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      p[i] = static_cast<T>(static_cast<int64_t>(p[i]) / by);
    } else if constexpr (std::is_integral_v<T>) {
      p[i] = static_cast<T>(static_cast<uint64_t>(p[i]) / static_cast<uint64_t>(by));
    } else if constexpr (kIsLowFloat<T>) {
      p[i] = T(static_cast<float>(p[i]) / static_cast<float>(by));
    } else {
      p[i] = p[i] / static_cast<T>(by);
    }
  }
}

// ---- rendezvous --------------------------------------------------------------------------

// Gloo's Store interface over ours. Keys are namespaced ("gloo/<rank>") and every wait uses
// the rendezvous deadline, so the whole rendezvous, not each step, is bounded by the timeout.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(collectives::Store& store, Deadline deadline, int rank, int world_size)
      : store_(store), deadline_(deadline), rank_(rank), world_size_(world_size) {}

  void set(const std::string& key, const std::vector<char>& data) override { store_.set(kPrefix + key, data); }

  std::vector<char> get(const std::string& key) override {
    wait({key});
    return store_.get(kPrefix + key);
  }

  // Gloo passes its context timeout (or none); the rendezvous deadline is what bounds us.
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds::zero()); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& /*gloo's*/) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back(kPrefix + k);
    const auto start = Clock::now();
    try {
      store_.wait(prefixed, deadline_);
    } catch (const TimeoutError&) {
      // Gloo's keys are peer ranks: say who is missing, which is what a user can act on.
      std::vector<int> missing_ranks;
      std::string other_keys;
      for (const auto& k : keys) {
        try {
          store_.wait({kPrefix + k}, Clock::now());
          continue;  // present by now
        } catch (const TimeoutError&) {
        }
        if (!k.empty() && std::all_of(k.begin(), k.end(), [](unsigned char c) { return std::isdigit(c); })) {
          missing_ranks.push_back(std::stoi(k));
        } else {
          other_keys += (other_keys.empty() ? "'" : ", '") + k + "'";
        }
      }
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      PF_THROW(TimeoutError, "gloo rendezvous timed out: rank ", rank_, " of ", world_size_, " waited ", waited,
               " ms at ", store_.describe(), " for ",
               missing_ranks.empty() ? "key(s) " + other_keys : "rank(s) " + join_ints(missing_ranks),
               " to join. Check that all ", world_size_,
               " ranks were started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, or raise the timeout");
    }
  }

 private:
  static constexpr const char* kPrefix = "gloo/";
  collectives::Store& store_;
  Deadline deadline_;
  int rank_, world_size_;
};

// The address this rank's Gloo pairs listen on: GLOO_SOCKET_IFNAME (as in PyTorch) when set,
// else the address that routes to the master; with a file store, this host's name if it
// resolves (peers on other hosts must reach it), else loopback.
gloo::transport::tcp::attr transport_attr(const Rendezvous& rv) {
  gloo::transport::tcp::attr attr;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    attr.iface = ifname;
    return attr;
  }
  if (rv.store_path.empty()) {
    attr.hostname = local_address_towards(rv.master_addr, rv.master_port);
    return attr;
  }
  char host[256] = {};
  addrinfo* res = nullptr;
  if (::gethostname(host, sizeof host - 1) == 0 && ::getaddrinfo(host, nullptr, nullptr, &res) == 0) {
    ::freeaddrinfo(res);
    attr.hostname = host;
  } else {
    attr.hostname = "127.0.0.1";
  }
  return attr;
}

std::chrono::milliseconds time_left(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(std::chrono::milliseconds(1), left);
}

// The Gloo tag of a collective: a hash of its sequence number in the group and of this
// rank's call (operation and the arguments every rank must agree on: dtype, element count,
// reduction, root). Ranks whose calls differ post their messages under different slots and
// never exchange a byte, so each of them times out. With one tag for all, a message longer
// than the buffer its receiver posted fails an enforce on Gloo's event-loop thread, where no
// catch can reach (the process aborts), and a shorter one leaves a silently wrong result.
template <typename... Args>
uint32_t call_tag(uint32_t seq, const std::string& op, Args... args) {
  StableHash h;
  h.add_value(seq).add(op);
  (h.add_value(args), ...);
  return static_cast<uint32_t>(h.value() ^ (h.value() >> 32));
}

// The Gloo slot of a point-to-point message: the user's tag in the low 32 bits and a hash of
// the tensor's dtype and element count in the 24 bits above, so a recv into a tensor of
// another size never meets the send (both time out instead of aborting, as in call_tag).
// The top byte stays zero; Gloo's collectives put a non-zero prefix there, so the two never
// collide.
uint64_t p2p_slot(int tag, const Tensor& t) {
  const uint64_t size_hash = StableHash().add_value(t.dtype()).add_value(t.numel()).value() & 0xffffff;
  return (size_hash << 32) | static_cast<uint32_t>(tag);
}

// Whether Gloo's message contains one of `phrases` (lower case), whatever its case.
bool mentions(const char* what, std::initializer_list<const char*> phrases) {
  std::string s(what);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return std::any_of(phrases.begin(), phrases.end(), [&](const char* p) { return s.find(p) != std::string::npos; });
}

bool mentions_timeout(const char* what) { return mentions(what, {"timeout", "timed out"}); }

}  // namespace

GlooCommunicator::GlooCommunicator(const Rendezvous& rv)
    : rank_(rv.rank), world_size_(rv.world_size), timeout_(rv.timeout) {
  const Deadline deadline = deadline_after(rv.timeout);
  store_ = open_store(rv, deadline);
  where_ = store_->describe();
  try {
    auto device = gloo::transport::tcp::CreateDevice(transport_attr(rv));
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, world_size_);
    // Gloo waits up to 5x the context timeout for a pair to connect: a fifth of the time left
    // keeps each pair's wait within the rendezvous deadline. (Later operations pass their own
    // timeouts.)
    context->setTimeout(std::max(std::chrono::milliseconds(1), time_left(deadline) / 5));
    GlooStoreAdapter adapter(*store_, deadline, rank_, world_size_);
    context->connectFullMesh(adapter, device);
    context_ = std::move(context);
    // Every rank is connected to every other once all have passed the barrier: then the
    // store admits nobody more. Both get what is left of the rendezvous timeout, so the whole
    // rendezvous stays within it.
    gloo::BarrierOptions opts(context_);
    opts.setTag(call_tag(next_seq_++, "rendezvous"));
    opts.setTimeout(time_left(deadline));
    gloo::barrier(opts);
    store_->seal(deadline);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (mentions_timeout(e.what())) {
      PF_THROW(TimeoutError, "gloo rendezvous of rank ", rank_, " of ", world_size_, " at ", where_,
               " timed out while connecting to its peers: ", e.what());
    }
    PF_THROW(Error, "gloo rendezvous of rank ", rank_, " of ", world_size_, " at ", where_, " failed: ", e.what());
  } catch (...) {
    PF_THROW(Error, "gloo rendezvous of rank ", rank_, " of ", world_size_, " at ", where_,
             " failed with an exception of unknown type");
  }
}

GlooCommunicator::~GlooCommunicator() = default;

template <typename F>
void GlooCommunicator::run(const char* op, F&& body) {
  std::lock_guard<std::mutex> lock(mu_);
  PF_CHECK(broken_.empty(), "gloo communicator (rank ", rank_, " of ", world_size_, ") cannot run ", op,
           ": an earlier operation failed (", broken_,
           "). Destroy it (destroy_process_group) and create a new one");
  try {
    body();
  } catch (const Error&) {
    throw;  // our own checks and staging copies: nothing went on the wire
  } catch (const std::exception& e) {
    broken_ = std::string(op) + ": " + e.what();
    if (mentions_timeout(e.what())) {
      PF_THROW(TimeoutError, "gloo ", op, " on rank ", rank_, " of ", world_size_, " timed out after ",
               timeout_.count(), " ms: a peer did not take part. It may have exited or hung, or called another "
               "collective, or this one with another shape, dtype, reduction or root "
               "(PLUGFLOW_DISTRIBUTED_DEBUG=1 names the ranks that differ). Gloo said: ", e.what());
    }
    PF_THROW(Error, "gloo ", op, " on rank ", rank_, " of ", world_size_, " failed: ", e.what(),
             mentions(e.what(), {"connection closed", "connection reset"})
                 ? ". A peer closed its connections: it exited, or its own operation failed first (Gloo closes "
                   "every connection after a timeout); that rank's error says why"
                 : "");
  } catch (...) {
    broken_ = std::string(op) + ": an exception of unknown type";
    PF_THROW(Error, "gloo ", op, " on rank ", rank_, " of ", world_size_, " failed with an exception of unknown type");
  }
}

void GlooCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  check_defined(t, "all_reduce", "tensor");
  check_avg_dtype(t, op, "all_reduce");
  run("all_reduce", [&] {
    if (t.numel() == 0) return;
    Staged buf(t, kCpu, Staged::Fill::Copy);
    const size_t n = static_cast<size_t>(t.numel());
    visit_dtype(t.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(buf.data<T>(), n);
      opts.setReduceFunction(reduce_function<T>(op));
      opts.setTag(call_tag(next_seq_++, "all_reduce", t.dtype(), t.numel(), op));
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
      if (op == ReduceOp::Avg) divide(buf.data<T>(), n, world_size_);
    });
    buf.write_back();
  });
}

void GlooCommunicator::broadcast(Tensor& t, int root) {
  check_defined(t, "broadcast", "tensor");
  check_rank_arg(root, world_size_, "broadcast", "root");
  run("broadcast", [&] {
    if (t.numel() == 0) return;
    const bool is_root = rank_ == root;
    Staged buf(t, kCpu, is_root ? Staged::Fill::Copy : Staged::Fill::Uninitialized);
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<char*>(buf.data()), buf.nbytes());  // bytes: no arithmetic involved
    opts.setRoot(root);
    opts.setTag(call_tag(next_seq_++, "broadcast", t.dtype(), t.numel(), root));
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
    if (!is_root) buf.write_back();
  });
}

void GlooCommunicator::all_gather(std::vector<Tensor>& out, const Tensor& in) {
  check_all_gather_args(out, in, world_size_);
  run("all_gather", [&] {
    if (in.numel() == 0) return;
    Staged src(in, kCpu, Staged::Fill::Copy);
    const size_t chunk = src.nbytes();
    // One flat host buffer for Gloo, then each rank's slice goes to its output tensor. It is
    // wrapped as a Storage so that strided or device outputs can take it through copy_.
    std::shared_ptr<char[]> gathered(new char[chunk * world_size_]);
    gloo::AllgatherOptions opts(context_);
    opts.setInput(static_cast<char*>(src.data()), chunk);
    opts.setOutput(gathered.get(), chunk * world_size_);
    opts.setTag(call_tag(next_seq_++, "all_gather", in.dtype(), in.numel()));
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
    auto storage = std::make_shared<Storage>(kCpu, gathered.get(), chunk * world_size_, gathered);
    const int64_t n = in.numel();
    for (int r = 0; r < world_size_; ++r) {
      Tensor& dst = out[r];
      if (dst.device().is_cpu() && dst.is_contiguous()) {
        std::memcpy(dst.data_ptr(), gathered.get() + chunk * r, chunk);
        dst.storage()->bump_version();
      } else {
        ops::copy_(dst, Tensor::view_of(storage, in.sizes(), contiguous_strides(in.sizes()), n * r, in.dtype()));
      }
    }
  });
}

void GlooCommunicator::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  check_reduce_scatter_args(out, in, world_size_);
  check_avg_dtype(in, op, "reduce_scatter");
  run("reduce_scatter", [&] {
    if (in.numel() == 0) return;
    // Gloo has no reduce-scatter for unbound buffers; all-reduce a copy and keep our chunk, as
    // PyTorch's Gloo process group does. It moves 2x the bytes of a ring reduce-scatter.
    Staged src(in, kCpu, Staged::Fill::Copy);
    const size_t total = static_cast<size_t>(in.numel());
    const size_t n = total / world_size_;
    const size_t item = in.itemsize();
    std::unique_ptr<char[]> scratch(new char[total * item]);
    std::memcpy(scratch.get(), src.data(), total * item);
    visit_dtype(in.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* data = reinterpret_cast<T*>(scratch.get());
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, total);
      opts.setReduceFunction(reduce_function<T>(op));
      opts.setTag(call_tag(next_seq_++, "reduce_scatter", in.dtype(), in.numel(), op));
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
      if (op == ReduceOp::Avg) divide(data + n * rank_, n, world_size_);
    });
    Staged dst(out, kCpu, Staged::Fill::Uninitialized);
    std::memcpy(dst.data(), scratch.get() + n * rank_ * item, n * item);
    dst.write_back();
  });
}

void GlooCommunicator::barrier() {
  run("barrier", [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(call_tag(next_seq_++, "barrier"));
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

// Point-to-point messages use the user's tag and the tensor's size as the Gloo slot (p2p_slot).
void GlooCommunicator::send(const Tensor& t, int dst, int tag) {
  check_defined(t, "send", "tensor");
  check_rank_arg(dst, world_size_, "send", "dst");
  PF_CHECK_T(dst != rank_, ValueError, "send: rank ", rank_, " cannot send to itself");
  PF_CHECK_T(tag >= 0, ValueError, "send: tag must be >= 0, got ", tag);
  run("send", [&] {
    if (t.numel() == 0) return;
    Staged buf(t, kCpu, Staged::Fill::Copy);
    auto ub = context_->createUnboundBuffer(buf.data(), buf.nbytes());
    ub->send(dst, p2p_slot(tag, t));
    PF_CHECK(ub->waitSend(timeout_), "gloo send to rank ", dst, " was aborted");
  });
}

void GlooCommunicator::recv(Tensor& t, int src, int tag) {
  check_defined(t, "recv", "tensor");
  check_rank_arg(src, world_size_, "recv", "src");
  PF_CHECK_T(src != rank_, ValueError, "recv: rank ", rank_, " cannot receive from itself");
  PF_CHECK_T(tag >= 0, ValueError, "recv: tag must be >= 0, got ", tag);
  run("recv", [&] {
    if (t.numel() == 0) return;
    Staged buf(t, kCpu, Staged::Fill::Uninitialized);
    auto ub = context_->createUnboundBuffer(buf.data(), buf.nbytes());
    ub->recv(src, p2p_slot(tag, t));
    PF_CHECK(ub->waitRecv(timeout_), "gloo recv from rank ", src, " was aborted");
    buf.write_back();
  });
}

}  // namespace plugflow::collectives

PLUGFLOW_PLUGIN("gloo", "0.1.0") {
  reg.communicator("gloo", plugflow::DeviceType::CPU,
                   [](const plugflow::Rendezvous& rv) -> std::unique_ptr<plugflow::Communicator> {
                     return std::make_unique<plugflow::collectives::GlooCommunicator>(rv);
                   });
}
