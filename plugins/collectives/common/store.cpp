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
// A client opens with kMagic + version; the server answers the same. Then strictly
// request/response, integers little-endian:
//   SET   u8 1, u32 klen, key, u64 vlen, value      -> u8 0
//   GET   u8 2, u32 klen, key                       -> u8 found [, u64 vlen, value]
//   CHECK u8 3, u32 n, n x (u32 klen, key)          -> u32 m, m x u32 index of a missing key
// Waiting is done by the client polling CHECK, so the server never holds per-client state
// beyond a read buffer and never has timers.
constexpr char kMagic[4] = {'P', 'F', 'K', 'V'};
constexpr uint32_t kProtocolVersion = 1;
constexpr uint8_t kSet = 1, kGet = 2, kCheck = 3;
// Bounds that keep a stray connection (a port scanner, an HTTP probe) from making the server
// allocate without limit: rendezvous blobs are a few hundred bytes.
constexpr uint32_t kMaxKeys = 1 << 16;
constexpr uint32_t kMaxKeyLen = 1 << 12;
constexpr uint64_t kMaxValueLen = 64ull << 20;

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
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

// Reads fields from a buffer that may hold only part of a message.
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
  size_t pos() const { return pos_; }

 private:
  bool has(size_t n) const { return s_.size() - pos_ >= n; }
  const std::string& s_;
  size_t pos_ = 0;
};

// ---- server --------------------------------------------------------------------------------

// Serves the key-value map on one thread with poll(2). Only that thread touches the map.
class TcpStoreServer {
 public:
  explicit TcpStoreServer(int port) {
    listen_ = bind_listener(port);
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

 private:
  struct Conn {
    UniqueFd fd;
    std::string in, out;
    bool greeted = false;
    bool dead = false;
  };

  // Listens on every interface, like PyTorch's TCPStore: MASTER_ADDR names this host as the
  // peers see it, which need not be an address we can tell apart locally. Dual-stack IPv6
  // when the host has it, IPv4 otherwise.
  static UniqueFd bind_listener(int port) {
    int last_errno = 0;
    for (int family : {AF_INET6, AF_INET}) {
      UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!fd) {
        last_errno = errno;
        continue;
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
      if (rc != 0) {
        last_errno = errno;
        // A taken port is the same answer for both families; report it right away.
        if (last_errno == EADDRINUSE || last_errno == EACCES) break;
        continue;
      }
      if (::listen(fd.get(), 1024) != 0) {
        last_errno = errno;
        continue;
      }
      return fd;
    }
    PF_THROW(Error, "rank 0 could not serve the rendezvous store on port ", port, ": ", errno_message(last_errno),
             last_errno == EADDRINUSE ? " (another process, or an earlier job that has not exited, uses this port; "
                                        "pick a free MASTER_PORT)"
                                      : "");
  }

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
      int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a transient error (ECONNABORTED, EMFILE): retry on the next poll
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Conn>();
      c->fd = UniqueFd(fd);
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

  // Answers every complete request in c.in; drops the connection on malformed input.
  void handle(Conn& c) {
    if (!c.greeted) {
      if (c.in.size() < 8) return;
      if (c.in.compare(0, 8, greeting()) != 0) {
        c.dead = true;
        return;
      }
      c.in.erase(0, 8);
      c.out += greeting();
      c.greeted = true;
    }
    for (;;) {
      Cursor cur(c.in);
      uint8_t cmd;
      if (!cur.u8(cmd)) return;
      std::string reply;
      bool complete = false, bad = false;
      switch (cmd) {
        case kSet: {
          uint32_t klen;
          uint64_t vlen;
          std::string key, value;
          if (!cur.u32(klen)) break;
          if (klen > kMaxKeyLen) { bad = true; break; }
          if (!cur.bytes(klen, key) || !cur.u64(vlen)) break;
          if (vlen > kMaxValueLen) { bad = true; break; }
          if (!cur.bytes(vlen, value)) break;
          data_[key].assign(value.begin(), value.end());
          reply.push_back(0);
          complete = true;
          break;
        }
        case kGet: {
          uint32_t klen;
          std::string key;
          if (!cur.u32(klen)) break;
          if (klen > kMaxKeyLen) { bad = true; break; }
          if (!cur.bytes(klen, key)) break;
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
          if (n > kMaxKeys) { bad = true; break; }
          std::vector<uint32_t> missing;
          bool have_all_fields = true;
          for (uint32_t i = 0; i < n; ++i) {
            uint32_t klen;
            std::string key;
            if (!cur.u32(klen)) { have_all_fields = false; break; }
            if (klen > kMaxKeyLen) { bad = true; break; }
            if (!cur.bytes(klen, key)) { have_all_fields = false; break; }
            if (!data_.count(key)) missing.push_back(i);
          }
          if (bad || !have_all_fields) break;
          put_u32(reply, static_cast<uint32_t>(missing.size()));
          for (uint32_t i : missing) put_u32(reply, i);
          complete = true;
          break;
        }
        default:
          bad = true;
      }
      if (bad) {
        c.dead = true;
        return;
      }
      if (!complete) return;  // wait for the rest of the message
      c.in.erase(0, cur.pos());
      c.out += reply;
    }
  }

  UniqueFd listen_, wake_read_, wake_write_;
  std::map<std::string, std::vector<char>> data_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::thread thread_;
};

// ---- client --------------------------------------------------------------------------------

class TcpStore final : public Store {
 public:
  // `server` is set on rank 0: the store owns it so it serves exactly as long as rank 0
  // holds the store.
  TcpStore(std::string host, int port, Deadline deadline, std::unique_ptr<TcpStoreServer> server)
      : server_(std::move(server)), host_(std::move(host)), port_(port), deadline_(deadline) {
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
    recv_exact(1);
  }

  std::vector<char> get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string req;
    req.push_back(static_cast<char>(kGet));
    put_key(req, key);
    send_all(req);
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

 private:
  static void put_key(std::string& req, const std::string& key) {
    PF_CHECK(key.size() <= kMaxKeyLen, "rendezvous store key too long (", key.size(), " bytes)");
    put_u32(req, static_cast<uint32_t>(key.size()));
    req += key;
  }

  std::vector<std::string> check(const std::vector<std::string>& keys) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string req;
    req.push_back(static_cast<char>(kCheck));
    put_u32(req, static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) put_key(req, k);
    send_all(req);
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
    send_all(greeting());
    std::string reply;
    try {
      reply = recv_exact(8);
    } catch (const TimeoutError&) {
      PF_THROW(TimeoutError, "the service at ", describe(),
               " accepted the connection but never answered as a plugflow rendezvous store; is another program "
               "listening on MASTER_PORT?");
    }
    PF_CHECK(reply == greeting(), "the service at ", describe(),
             " is not a plugflow rendezvous store (another program listens on MASTER_PORT, or a different "
             "plugflow version serves it)");
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
  Deadline deadline_;
  std::mutex mu_;
  UniqueFd fd_;
};

// ---- file store ----------------------------------------------------------------------------

class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {
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

 private:
  // Keys become file names: anything outside [A-Za-z0-9._-] is %-escaped, so "gloo/1" cannot
  // escape the directory.
  fs::path path_of(const std::string& key) const {
    std::string name;
    for (unsigned char ch : key) {
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
  std::vector<fs::path> written_;
};

}  // namespace

std::unique_ptr<Store> open_store(const Rendezvous& rv, Deadline deadline) {
  if (!rv.store_path.empty()) return std::make_unique<FileStore>(rv.store_path);
  std::unique_ptr<TcpStoreServer> server;
  if (rv.rank == 0) server = std::make_unique<TcpStoreServer>(rv.master_port);
  return std::make_unique<TcpStore>(rv.master_addr, rv.master_port, deadline, std::move(server));
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
