// Rendezvous stores: an in-process TCP key-value server (rank 0) with its client, and a
// directory-backed file store. See store.h.
#include "store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

#include "plugflow/error.h"
#include "stable_hash.h"

namespace plugflow::collectives {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

std::string errno_message(int e) { return std::system_category().message(e); }

long long ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<milliseconds>(b - a).count();
}

// Milliseconds left until `deadline`, clamped to [0, cap] for poll(2).
int poll_budget(Deadline deadline, int cap_ms = 1000) {
  const auto now = Clock::now();
  if (deadline <= now) return 0;
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - now).count();
  return static_cast<int>(std::clamp<long long>(left + 1, 0, cap_ms));
}

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// ---- wire format ---------------------------------------------------------------------------
// Integers little-endian; str = u32 length + bytes. A client opens with its hello:
//   kMagic, u32 version, u32 rank, u32 world_size, str run_id, str host, u32 pid
// The server answers kMagic + its version and, when the versions agree, a status: kOk (the
// process is admitted as that rank of the job) or kRefused + str reason (then it closes).
// Then strictly request/response; every reply opens with a status, kOk or kRefused + reason
// when the rendezvous was stopped (two processes claimed one rank):
//   SET   u8 1, str key, u64 vlen, value        -> kOk
//   GET   u8 2, str key                         -> kOk, u8 found [, u64 vlen, value]
//   CHECK u8 3, u32 n, n x str key              -> kOk, u32 m, m x u32 index of a missing key
// The job's identity travels once, in the hello: the connection then belongs to that rank of
// that job. Waiting is done by the client polling CHECK, so the server never holds
// per-client state beyond buffers and never has timers.
constexpr char kMagic[4] = {'P', 'F', 'K', 'V'};
constexpr uint32_t kProtocolVersion = 2;
constexpr uint8_t kSet = 1, kGet = 2, kCheck = 3;
constexpr uint8_t kOk = 0, kRefused = 1;
// Bounds that keep a stray connection (a port scanner, an HTTP probe) from making the server
// allocate without limit: rendezvous blobs are a few hundred bytes.
constexpr uint32_t kMaxKeys = 1 << 16;
constexpr uint32_t kMaxStringLen = 1 << 12;  // keys, run ids, host names, refusal reasons
constexpr uint64_t kMaxValueLen = 64ull << 20;
// Rank 0 publishes it once its store admits nobody more (Store::seal).
constexpr const char* kSealedKey = "rendezvous/sealed";

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_str(std::string& out, const std::string& s) {
  const std::string& bounded = s.size() <= kMaxStringLen ? s : s.substr(0, kMaxStringLen);
  put_u32(out, static_cast<uint32_t>(bounded.size()));
  out += bounded;
}
uint64_t load_le(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
std::string greeting() {
  std::string g(kMagic, 4);
  put_u32(g, kProtocolVersion);
  return g;
}

// Who a client says it is.
struct Hello {
  uint32_t rank = 0;
  uint32_t world_size = 0;
  std::string run_id;
  std::string host;
  uint32_t pid = 0;
};

// Reads fields from a buffer that may hold only part of a message. Each read returns false
// when the buffer ends first; `bad` is set for a field no well-formed message has.
class Cursor {
 public:
  explicit Cursor(const std::string& s) : s_(s) {}
  bool u8(uint8_t& v) {
    if (!has(1)) return false;
    v = static_cast<uint8_t>(s_[pos_++]);
    return true;
  }
  bool u32(uint32_t& v) {
    if (!has(4)) return false;
    v = static_cast<uint32_t>(load_le(s_.data() + pos_, 4));
    pos_ += 4;
    return true;
  }
  bool u64(uint64_t& v) {
    if (!has(8)) return false;
    v = load_le(s_.data() + pos_, 8);
    pos_ += 8;
    return true;
  }
  bool bytes(size_t n, std::string& out) {
    if (!has(n)) return false;
    out.assign(s_, pos_, n);
    pos_ += n;
    return true;
  }
  bool str(std::string& out) {
    uint32_t n;
    if (!u32(n)) return false;
    if (n > kMaxStringLen) {
      bad = true;
      return false;
    }
    return bytes(n, out);
  }
  size_t pos() const { return pos_; }
  bool bad = false;

 private:
  bool has(size_t n) const { return s_.size() - pos_ >= n; }
  const std::string& s_;
  size_t pos_ = 0;
};

std::string peer_name(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof host);
    port = ntohs(in6.sin6_port);
    // A dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d; print them as IPv4.
    if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) {
      ::inet_ntop(AF_INET, in6.sin6_addr.s6_addr + 12, host, sizeof host);
      return detail::str_cat(host, ":", port);
    }
    return detail::str_cat("[", host, "]:", port);
  }
  if (a.ss_family == AF_INET) {
    const auto& in4 = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &in4.sin_addr, host, sizeof host);
    return detail::str_cat(host, ":", ntohs(in4.sin_port));
  }
  return "an unknown address";
}

std::string describe_run_id(const std::string& run_id) {
  return run_id.empty() ? std::string("no run id") : "run id '" + run_id + "'";
}

// ---- server --------------------------------------------------------------------------------

// Serves the key-value map on one thread with poll(2). Only that thread touches the map.
//
// Admission: a job is its world size and run id; a client whose hello differs in either is
// refused (it belongs to another job). Each rank is admitted once: the first process to
// claim it owns it for the server's life. A second claim of a rank before the rendezvous is
// sealed is a conflict: two jobs of the same identity are starting on one port (or one was
// started twice), and nothing tells which of the two claimants is ours, so the server
// stops the rendezvous: the newcomer and every later request get the reason, and rank 0's
// seal() fails. After seal() every newcomer is refused and the job is left alone.
class TcpStoreServer {
 public:
  TcpStoreServer(UniqueFd listener, const Rendezvous& rv)
      : listen_(std::move(listener)), port_(rv.master_port), world_size_(rv.world_size), run_id_(rv.run_id) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) PF_THROW(Error, "rendezvous store: pipe2 failed: ", errno_message(errno));
    wake_read_ = UniqueFd(p[0]);
    wake_write_ = UniqueFd(p[1]);
    thread_ = std::thread([this] { serve(); });
  }
  ~TcpStoreServer() {
    const char c = 'x';
    // The pipe is non-blocking and holds at most this one byte, so the write cannot block.
    [[maybe_unused]] auto n = ::write(wake_write_.get(), &c, 1);
    if (thread_.joinable()) thread_.join();
  }
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // Admits nobody from now on. Returns why the rendezvous was stopped, or empty when it
  // was not (and then it cannot be any more).
  std::string seal() {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (conflict_.empty()) sealed_ = true;
    return conflict_;
  }

 private:
  struct Conn {
    UniqueFd fd;
    std::string peer;  // address:port, for messages
    std::string in, out;
    bool joined = false;   // its hello was answered with kOk
    bool closing = false;  // close once `out` is flushed
    bool dead = false;
  };

  void serve() noexcept {
    try {
      std::vector<pollfd> fds;
      for (;;) {
        fds.clear();
        fds.push_back({wake_read_.get(), POLLIN, 0});
        fds.push_back({listen_.get(), POLLIN, 0});
        for (auto& c : conns_) {
          fds.push_back({c->fd.get(), static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
        }
        if (::poll(fds.data(), fds.size(), -1) < 0) {
          if (errno == EINTR) continue;
          return;  // Clients see the connection drop and report it.
        }
        if (fds[0].revents) return;
        if (fds[1].revents & POLLIN) accept_all();
        // conns_ may have grown in accept_all; only the ones polled have an entry in fds.
        for (size_t i = 2; i < fds.size(); ++i) {
          Conn& c = *conns_[i - 2];
          if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(c);
          if (!c.dead) handle(c);
          if (!c.dead && !c.out.empty()) flush(c);
          if (c.closing && c.out.empty()) c.dead = true;
        }
        std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->dead; });
      }
    } catch (...) {
      // Out of memory or the like: stop serving; clients fail with a clear "connection
      // closed" rather than the process aborting.
    }
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      int fd = ::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a transient error (ECONNABORTED, EMFILE): retry on the next poll
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Conn>();
      c->fd = UniqueFd(fd);
      c->peer = peer_name(addr);
      conns_.push_back(std::move(c));
    }
  }

  static void read_from(Conn& c) {
    char buf[64 * 1024];
    for (;;) {
      ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.dead = true;  // EOF or error
      return;
    }
  }

  static void flush(Conn& c) {
    while (!c.out.empty()) {
      ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.dead = true;
      return;
    }
  }

  static void refuse(Conn& c, const std::string& why) {
    c.out.push_back(static_cast<char>(kRefused));
    put_str(c.out, why);
    c.closing = true;
  }

  // Why `h` may not join, or empty when it may: then its rank is claimed for it.
  std::string admit(const Hello& h, const std::string& peer) {
    if (h.world_size != static_cast<uint32_t>(world_size_)) {
      return detail::str_cat("it serves a job of world size ", world_size_, ", but this process has world size ",
                             h.world_size, ": it belongs to another job using the same MASTER_PORT, or WORLD_SIZE "
                             "differs between the ranks");
    }
    if (h.run_id != run_id_) {
      return detail::str_cat("it serves the job with ", describe_run_id(run_id_), ", but this process has ",
                             describe_run_id(h.run_id), ": it belongs to another job using the same MASTER_PORT, "
                             "or PLUGFLOW_RUN_ID / TORCHELASTIC_RUN_ID differs between the ranks");
    }
    if (h.rank >= h.world_size) {
      return detail::str_cat("rank ", h.rank, " is not a rank of a job of world size ", world_size_);
    }
    const std::string who = detail::str_cat("pid ", h.pid, " on ", h.host, " (", peer, ")");
    std::lock_guard<std::mutex> lock(state_mu_);
    if (!conflict_.empty()) return conflict_;
    const int rank = static_cast<int>(h.rank);
    auto it = claims_.find(rank);
    if (sealed_) {
      const std::string holder =
          it == claims_.end() ? std::string() : detail::str_cat(" (its rank ", rank, " is ", it->second, ")");
      return detail::str_cat("the job it serves completed its rendezvous", holder,
                             ": this process belongs to another job using the same MASTER_PORT, or RANK=", rank,
                             " was given to two processes");
    }
    if (it == claims_.end()) {
      claims_.emplace(rank, who);
      return {};
    }
    conflict_ = detail::str_cat(
        "rank ", rank, " was claimed by two processes, ", it->second, " and then ", who,
        ". Two jobs with the same world size and ", describe_run_id(run_id_), " are probably starting on port ", port_,
        " at once, and nothing tells which process belongs to which job, so the rendezvous was stopped rather than "
        "count another job's process. Give each job its own MASTER_PORT, or a distinct PLUGFLOW_RUN_ID");
    return conflict_;
  }

  // Answers the hello, then every complete request in c.in; drops the connection on
  // malformed input.
  void handle(Conn& c) {
    if (c.closing) return;
    if (!c.joined) {
      Cursor cur(c.in);
      std::string magic;
      uint32_t version;
      if (!cur.bytes(4, magic) || !cur.u32(version)) return;
      if (magic != std::string(kMagic, 4)) {
        c.dead = true;  // not a plugflow client
        return;
      }
      if (version != kProtocolVersion) {
        c.out += greeting();  // the client reads our version and says so
        c.closing = true;
        return;
      }
      Hello h;
      if (!cur.u32(h.rank) || !cur.u32(h.world_size) || !cur.str(h.run_id) || !cur.str(h.host) || !cur.u32(h.pid)) {
        if (cur.bad) c.dead = true;
        return;  // wait for the rest of the hello
      }
      c.in.erase(0, cur.pos());
      c.out += greeting();
      const std::string refusal = admit(h, c.peer);
      if (!refusal.empty()) {
        refuse(c, refusal);
        return;
      }
      c.out.push_back(static_cast<char>(kOk));
      c.joined = true;
    }
    const std::string stopped = [&] {
      std::lock_guard<std::mutex> lock(state_mu_);
      return conflict_;
    }();
    for (;;) {
      if (c.in.empty()) return;
      if (!stopped.empty()) {
        refuse(c, stopped);
        return;
      }
      Cursor cur(c.in);
      uint8_t cmd = 0;
      cur.u8(cmd);  // c.in is not empty
      std::string reply(1, static_cast<char>(kOk));
      bool complete = false;
      switch (cmd) {
        case kSet: {
          uint64_t vlen;
          std::string key, value;
          if (!cur.str(key) || !cur.u64(vlen)) break;
          if (vlen > kMaxValueLen) {
            cur.bad = true;
            break;
          }
          if (!cur.bytes(vlen, value)) break;
          data_[key].assign(value.begin(), value.end());
          complete = true;
          break;
        }
        case kGet: {
          std::string key;
          if (!cur.str(key)) break;
          auto it = data_.find(key);
          if (it == data_.end()) {
            reply.push_back(0);
          } else {
            reply.push_back(1);
            put_u64(reply, it->second.size());
            reply.append(it->second.data(), it->second.size());
          }
          complete = true;
          break;
        }
        case kCheck: {
          uint32_t n;
          if (!cur.u32(n)) break;
          if (n > kMaxKeys) {
            cur.bad = true;
            break;
          }
          std::vector<uint32_t> missing;
          bool have_all_fields = true;
          for (uint32_t i = 0; i < n; ++i) {
            std::string key;
            if (!cur.str(key)) {
              have_all_fields = false;
              break;
            }
            if (!data_.count(key)) missing.push_back(i);
          }
          if (!have_all_fields) break;
          put_u32(reply, static_cast<uint32_t>(missing.size()));
          for (uint32_t i : missing) put_u32(reply, i);
          complete = true;
          break;
        }
        default:
          cur.bad = true;
      }
      if (cur.bad) {
        c.dead = true;
        return;
      }
      if (!complete) return;  // wait for the rest of the message
      c.in.erase(0, cur.pos());
      c.out += reply;
    }
  }

  UniqueFd listen_, wake_read_, wake_write_;
  const int port_;
  const int world_size_;
  const std::string run_id_;
  std::map<std::string, std::vector<char>> data_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::mutex state_mu_;  // claims_, conflict_, sealed_: seal() runs on the owner's thread
  std::map<int, std::string> claims_;  // rank -> who claimed it
  std::string conflict_;               // why the rendezvous was stopped; empty while it runs
  bool sealed_ = false;
  std::thread thread_;
};

// Listens on every interface, like PyTorch's TCPStore: MASTER_ADDR names this host as the
// peers see it, which need not be an address we can tell apart locally. Dual-stack IPv6 when
// the host has it, IPv4 otherwise. SO_REUSEADDR only lets us bind over connections of an
// earlier job left in TIME_WAIT; without SO_REUSEPORT a second listener on the port fails, so
// at most one job's rank 0 serves on it. Returns no fd, with `err` set, on failure.
UniqueFd listen_on_port(int port, int& err) {
  err = 0;
  for (int family : {AF_INET6, AF_INET}) {
    UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) {
      err = errno;
      continue;  // no IPv6 on this host
    }
    const int one = 1, zero = 0;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (family == AF_INET6) {
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    // Two binds that race both succeed (SO_REUSEADDR, neither listening yet); the loser's
    // listen() then fails with EADDRINUSE.
    if (rc == 0) rc = ::listen(fd.get(), 1024);
    if (rc == 0) return fd;
    err = errno;
    // A taken port is the same answer for both families.
    if (err == EADDRINUSE || err == EACCES) return {};
  }
  return {};
}

// ---- client --------------------------------------------------------------------------------

class TcpStore final : public Store {
 public:
  // `server` is set on rank 0: the store owns it so it serves exactly as long as rank 0
  // holds the store.
  TcpStore(const Rendezvous& rv, Deadline deadline, std::unique_ptr<TcpStoreServer> server)
      : server_(std::move(server)),
        host_(rv.master_addr),
        port_(rv.master_port),
        rank_(rv.rank),
        world_size_(rv.world_size),
        run_id_(rv.run_id),
        deadline_(deadline) {
    connect();
  }

  std::string describe() const override { return "tcp://" + host_ + ":" + std::to_string(port_); }

  void set(const std::string& key, const std::vector<char>& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string req;
    req.push_back(static_cast<char>(kSet));
    put_key(req, key);
    put_u64(req, value.size());
    req.append(value.data(), value.size());
    send_all(req);
    expect_ok();
  }

  std::vector<char> get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string req;
    req.push_back(static_cast<char>(kGet));
    put_key(req, key);
    send_all(req);
    expect_ok();
    if (recv_exact(1)[0] == 0) PF_THROW(Error, "rendezvous store ", describe(), " has no key '", key, "'");
    const uint64_t len = load_le(recv_exact(8).data(), 8);
    if (len > kMaxValueLen) PF_THROW(Error, "rendezvous store ", describe(), " sent a corrupt reply");
    std::string v = recv_exact(static_cast<size_t>(len));
    return std::vector<char>(v.begin(), v.end());
  }

  void wait(const std::vector<std::string>& keys, Deadline deadline) override {
    // Poll: an answer costs one loopback round trip, and rendezvous happens once per job,
    // so a short back-off is cheaper than server-side waiters with timers.
    auto pause = milliseconds(1);
    const auto start = Clock::now();
    for (;;) {
      std::vector<std::string> missing = check(keys);
      if (missing.empty()) return;
      const auto now = Clock::now();
      if (now >= deadline) {
        std::ostringstream os;
        for (size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << "'" << missing[i] << "'";
        PF_THROW(TimeoutError, "timed out after ", ms_between(start, now), " ms waiting for key(s) ", os.str(),
                 " in the rendezvous store ", describe());
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, milliseconds(50));
    }
  }

  void seal(Deadline deadline) override {
    if (server_) {
      const std::string conflict = server_->seal();
      if (!conflict.empty()) PF_THROW(Error, "the rendezvous at ", describe(), " was stopped: ", conflict);
      set(kSealedKey, {});
    } else {
      wait({kSealedKey}, deadline);
    }
  }

 private:
  static void put_key(std::string& req, const std::string& key) {
    PF_CHECK(key.size() <= kMaxStringLen, "rendezvous store key too long (", key.size(), " bytes)");
    put_str(req, key);
  }

  std::vector<std::string> check(const std::vector<std::string>& keys) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string req;
    req.push_back(static_cast<char>(kCheck));
    put_u32(req, static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) put_key(req, k);
    send_all(req);
    expect_ok();
    const uint32_t m = static_cast<uint32_t>(load_le(recv_exact(4).data(), 4));
    PF_CHECK(m <= keys.size(), "rendezvous store ", describe(), " sent a corrupt reply");
    std::vector<std::string> missing;
    for (uint32_t i = 0; i < m; ++i) {
      const uint32_t idx = static_cast<uint32_t>(load_le(recv_exact(4).data(), 4));
      PF_CHECK(idx < keys.size(), "rendezvous store ", describe(), " sent a corrupt reply");
      missing.push_back(keys[idx]);
    }
    return missing;
  }

  // The status that opens every reply: returns on kOk, throws the server's reason otherwise.
  // `refused_prefix` introduces a refusal in the message.
  void expect_ok(const std::string& refused_prefix = {}) {
    const auto status = static_cast<uint8_t>(recv_exact(1)[0]);
    if (status == kOk) return;
    PF_CHECK(status == kRefused, "rendezvous store ", describe(), " sent a corrupt reply");
    const uint32_t len = static_cast<uint32_t>(load_le(recv_exact(4).data(), 4));
    PF_CHECK(len <= kMaxStringLen, "rendezvous store ", describe(), " sent a corrupt reply");
    const std::string why = recv_exact(len);
    fd_.reset();
    if (!refused_prefix.empty()) PF_THROW(Error, refused_prefix, why);
    PF_THROW(Error, "the rendezvous at ", describe(), " was stopped: ", why);
  }

  // Retries until the deadline: rank 0 may not be serving yet when the others start.
  void connect() {
    const auto start = Clock::now();
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const std::string port_str = std::to_string(port_);
    std::string last_error = "no address";
    auto pause = milliseconds(10);
    for (;;) {
      addrinfo* res = nullptr;
      const int gai = ::getaddrinfo(host_.c_str(), port_str.c_str(), &hints, &res);
      if (gai == 0) {
        for (addrinfo* ai = res; ai; ai = ai->ai_next) {
          UniqueFd fd = try_connect(ai, last_error);
          if (fd) {
            ::freeaddrinfo(res);
            fd_ = std::move(fd);
            handshake();
            return;
          }
        }
        ::freeaddrinfo(res);
      } else if (gai == EAI_AGAIN) {
        last_error = ::gai_strerror(gai);  // DNS not ready: transient, retry
      } else {
        PF_THROW(Error, "cannot resolve the rendezvous address '", host_, "' (MASTER_ADDR): ", ::gai_strerror(gai));
      }
      const auto now = Clock::now();
      if (now >= deadline_) {
        PF_THROW(TimeoutError, "could not reach the rendezvous store at ", describe(), " within ",
                 ms_between(start, now), " ms (last error: ", last_error,
                 "). Rank 0 serves it: check that rank 0 is running and that MASTER_ADDR/MASTER_PORT are "
                 "the same on every rank");
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline_ - now));
      pause = std::min(pause * 2, milliseconds(250));
    }
  }

  UniqueFd try_connect(const addrinfo* ai, std::string& last_error) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      last_error = errno_message(errno);
      return {};
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last_error = errno_message(errno);
        return {};
      }
      // Non-blocking connect bounded by the deadline: a blocking one to an unreachable host
      // would sit out the kernel's SYN retries (minutes), past our timeout.
      pollfd p{fd.get(), POLLOUT, 0};
      int rc;
      do {
        rc = ::poll(&p, 1, poll_budget(deadline_));
      } while (rc < 0 && errno == EINTR);
      if (rc == 0) {
        last_error = "connect timed out";
        return {};
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (rc < 0 || err != 0) {
        last_error = errno_message(rc < 0 ? errno : err);
        return {};
      }
    }
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }

  void handshake() {
    std::string hello = greeting();
    put_u32(hello, static_cast<uint32_t>(rank_));
    put_u32(hello, static_cast<uint32_t>(world_size_));
    put_str(hello, run_id_);
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "an unnamed host");
    put_str(hello, host);
    put_u32(hello, static_cast<uint32_t>(::getpid()));
    send_all(hello);
    std::string reply;
    try {
      reply = recv_exact(8);
    } catch (const TimeoutError&) {
      PF_THROW(TimeoutError, "the service at ", describe(),
               " accepted the connection but never answered as a plugflow rendezvous store; is another program "
               "listening on MASTER_PORT?");
    }
    PF_CHECK(reply.compare(0, 4, kMagic, 4) == 0, "the service at ", describe(),
             " is not a plugflow rendezvous store (another program listens on MASTER_PORT)");
    const auto version = load_le(reply.data() + 4, 4);
    PF_CHECK(version == kProtocolVersion, "the rendezvous store at ", describe(), " speaks protocol version ", version,
             " and this process version ", kProtocolVersion, ": run the same plugflow version on every rank");
    expect_ok(detail::str_cat("rank ", rank_, " of ", world_size_, " (", describe_run_id(run_id_),
                              ") was refused by the rendezvous store at ", describe(), ": "));
  }

  void send_all(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::send(fd_.get(), data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wait_fd(POLLOUT);
        continue;
      }
      lost(n < 0 ? errno_message(errno) : "send failed");
    }
  }

  std::string recv_exact(size_t len) {
    std::string out(len, '\0');
    size_t done = 0;
    while (done < len) {
      ssize_t n = ::recv(fd_.get(), out.data() + done, len - done, 0);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n == 0) lost("connection closed");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_fd(POLLIN);
        continue;
      }
      lost(errno_message(errno));
    }
    return out;
  }

  void wait_fd(short events) {
    for (;;) {
      if (Clock::now() >= deadline_) {
        PF_THROW(TimeoutError, "the rendezvous store at ", describe(), " did not answer before the rendezvous deadline");
      }
      pollfd p{fd_.get(), events, 0};
      int rc = ::poll(&p, 1, poll_budget(deadline_, 100));
      if (rc > 0) return;
      if (rc < 0 && errno != EINTR) lost(errno_message(errno));
    }
  }

  [[noreturn]] void lost(const std::string& why) {
    fd_.reset();
    PF_THROW(Error, "lost the connection to the rendezvous store at ", describe(), " (", why,
             "): rank 0 serves it and has exited or given up");
  }

  // Declared first so that it is destroyed last, after our own connection closed.
  std::unique_ptr<TcpStoreServer> server_;
  std::string host_;
  int port_;
  int rank_, world_size_;
  std::string run_id_;
  Deadline deadline_;
  std::mutex mu_;
  UniqueFd fd_;
};

// Rank 0 could not listen on the port because another process does. If that is the store
// of a job with our identity starting at the same moment, our other ranks may be joining it;
// presenting ourselves there as rank 0 makes it stop its rendezvous (rank 0 claimed twice)
// while it is still open, so neither job counts the other's processes. A sealed store or
// another job's identity refuses us and is left alone. Returns what answered, for the message.
std::string ask_port_holder(const Rendezvous& rv, Deadline deadline) {
  // A store answers within milliseconds; a program that stays silent longer is not one.
  const Deadline probe_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(1));
  try {
    TcpStore probe(rv, probe_deadline, nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  return "a plugflow store of a job with this world size and run id, starting at the same moment: both rendezvous "
         "stop, so that neither job counts the other's processes";
}

// ---- file store ----------------------------------------------------------------------------

class FileStore final : public Store {
 public:
  // Keys are named after the job's world size and run id, so jobs that differ in either can
  // share a directory.
  explicit FileStore(const Rendezvous& rv) : dir_(rv.store_path) {
    std::ostringstream prefix;
    prefix << "job-ws" << rv.world_size;
    if (!rv.run_id.empty()) prefix << "-run" << std::hex << StableHash().add(rv.run_id).value();
    key_prefix_ = prefix.str() + "-";
    std::error_code ec;
    if (fs::exists(dir_, ec) && !fs::is_directory(dir_, ec)) {
      PF_THROW(ValueError, "the rendezvous file store path '", dir_,
               "' exists and is not a directory: plugflow keeps one file per key in a directory; pass a "
               "directory path (it is created when missing)");
    }
    fs::create_directories(dir_, ec);
    if (ec) PF_THROW(Error, "cannot create the rendezvous directory '", dir_, "': ", ec.message());
  }

  ~FileStore() override {
    // Keys are deleted only by their writer, and only once the caller has proved (barrier,
    // or a finished collective init) that every peer read them.
    std::error_code ec;
    for (const auto& p : written_) fs::remove(p, ec);
  }

  std::string describe() const override { return "file://" + dir_; }

  void set(const std::string& key, const std::vector<char>& value) override {
    const fs::path final_path = path_of(key);
    // Write then rename: a reader never sees a half-written value.
    std::random_device rd;
    const fs::path tmp = final_path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(value.data(), static_cast<std::streamsize>(value.size()));
      f.close();
      if (!f) PF_THROW(Error, "cannot write the rendezvous file '", tmp.string(), "'");
    }
    std::error_code ec;
    fs::rename(tmp, final_path, ec);
    if (ec) {
      fs::remove(tmp, ec);
      PF_THROW(Error, "cannot publish the rendezvous file '", final_path.string(), "': ", ec.message());
    }
    written_.push_back(final_path);
  }

  std::vector<char> get(const std::string& key) override {
    std::ifstream f(path_of(key), std::ios::binary);
    if (!f) PF_THROW(Error, "rendezvous store ", describe(), " has no key '", key, "'");
    return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }

  void wait(const std::vector<std::string>& keys, Deadline deadline) override {
    const auto start = Clock::now();
    auto pause = milliseconds(1);
    for (;;) {
      std::vector<std::string> missing;
      std::error_code ec;
      for (const auto& k : keys) {
        if (!fs::exists(path_of(k), ec)) missing.push_back(k);
      }
      if (missing.empty()) return;
      const auto now = Clock::now();
      if (now >= deadline) {
        std::ostringstream os;
        for (size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << "'" << missing[i] << "'";
        PF_THROW(TimeoutError, "timed out after ", ms_between(start, now), " ms waiting for key(s) ", os.str(),
                 " in the rendezvous store ", describe());
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, milliseconds(50));
    }
  }

  // Nobody serves a directory, so nobody can refuse a process: the key names keep jobs of
  // another identity apart, and that is all (see docs/distributed.md).
  void seal(Deadline) override {}

 private:
  // Keys become file names: anything outside [A-Za-z0-9._-] is %-escaped, so "gloo/1" cannot
  // escape the directory.
  fs::path path_of(const std::string& key) const {
    std::string name;
    for (unsigned char ch : key_prefix_ + key) {
      if (std::isalnum(ch) || ch == '.' || ch == '_' || ch == '-') {
        name.push_back(static_cast<char>(ch));
      } else {
        static const char* hex = "0123456789ABCDEF";
        name += '%';
        name += hex[ch >> 4];
        name += hex[ch & 15];
      }
    }
    return fs::path(dir_) / name;
  }

  std::string dir_;
  std::string key_prefix_;
  std::vector<fs::path> written_;
};

}  // namespace

std::unique_ptr<Store> open_store(const Rendezvous& rv, Deadline deadline) {
  if (!rv.store_path.empty()) return std::make_unique<FileStore>(rv);
  std::unique_ptr<TcpStoreServer> server;
  if (rv.rank == 0) {
    int err = 0;
    UniqueFd listener = listen_on_port(rv.master_port, err);
    if (!listener) {
      std::string holder;
      if (err == EADDRINUSE) {
        holder = detail::str_cat(" Another process holds the port (a job that has not exited, or one starting at the "
                                 "same moment): give each job its own MASTER_PORT. What answers there: ",
                                 ask_port_holder(rv, deadline));
      }
      PF_THROW(Error, "rank 0 cannot serve the rendezvous store on MASTER_ADDR:MASTER_PORT ", rv.master_addr, ":",
               rv.master_port, " (it listens on port ", rv.master_port, " of every interface): ",
               errno_message(err), ".", holder);
    }
    server = std::make_unique<TcpStoreServer>(std::move(listener), rv);
  }
  return std::make_unique<TcpStore>(rv, deadline, std::move(server));
}

std::string local_address_towards(const std::string& master_addr, int port) {
  // connect(2) on a UDP socket sends nothing; it only makes the kernel choose the route and
  // thus the source address.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(master_addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) PF_THROW(Error, "cannot resolve the rendezvous address '", master_addr, "' (MASTER_ADDR): ", ::gai_strerror(gai));
  std::string last_error;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd || ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last_error = errno_message(errno);
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      last_error = errno_message(errno);
      continue;
    }
    char buf[INET6_ADDRSTRLEN] = {};
    const void* addr = local.ss_family == AF_INET6
                           ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                           : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (::inet_ntop(local.ss_family, addr, buf, sizeof buf)) {
      ::freeaddrinfo(res);
      return buf;
    }
    last_error = errno_message(errno);
  }
  ::freeaddrinfo(res);
  PF_THROW(Error, "no local network address routes to the rendezvous address '", master_addr, "': ", last_error,
           " (set GLOO_SOCKET_IFNAME to choose an interface)");
}

std::string join_ints(const std::vector<int>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str();
}

}  // namespace plugflow::collectives
