// Helpers for the collectives tests: free ports, a group of ranks run as threads of this
// process, tensors from/to value lists, and exception assertions that check the message.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "plugflow/communicator.h"
#include "plugflow/ops.h"
#include "plugflow/tensor.h"

namespace pf_coll_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A TCP port nobody listens on right now: bind port 0 and let the kernel choose.
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind/getsockname failed");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

inline plugflow::Rendezvous rendezvous(int port, int rank, int world_size,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  plugflow::Rendezvous rv;
  rv.master_addr = "127.0.0.1";
  rv.master_port = port;
  rv.rank = rank;
  rv.world_size = world_size;
  rv.timeout = timeout;
  return rv;
}

inline std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Runs `body` on `world_size` threads, each with its own communicator of one group; fails the
// test with the rank's message for any exception. EXPECT_* work from the threads.
inline void run_group(const std::string& backend, int world_size,
                      const std::function<void(plugflow::Communicator&)>& body,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30),
                      const std::function<plugflow::Rendezvous(int port, int rank)>& make_rv = nullptr) {
  const int port = free_port();
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        const plugflow::Rendezvous rv = make_rv ? make_rv(port, r) : rendezvous(port, r, world_size, timeout);
        auto comm = plugflow::create_communicator(backend, rv);
        body(*comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world_size; ++r) {
    if (errors[r]) ADD_FAILURE() << "rank " << r << " of " << world_size << " threw: " << what_of(errors[r]);
  }
}

// A contiguous tensor of `shape` holding `values` converted to T.
template <typename T>
plugflow::Tensor make_tensor(const std::vector<double>& values, plugflow::Shape shape, plugflow::Device device) {
  const plugflow::DType dt = plugflow::cpp_dtype<T>::value;
  plugflow::Tensor host = plugflow::Tensor::empty(shape, dt, plugflow::Device{plugflow::DeviceType::CPU, 0});
  if (static_cast<size_t>(host.numel()) != values.size()) throw std::runtime_error("make_tensor: size mismatch");
  T* p = host.data<T>();
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_same_v<T, bool>) {
      p[i] = values[i] != 0;
    } else if constexpr (std::is_arithmetic_v<T>) {
      p[i] = static_cast<T>(values[i]);
    } else {
      p[i] = T(static_cast<float>(values[i]));  // Half, BFloat16
    }
  }
  if (device.is_cpu()) return host;
  return plugflow::ops::to(host, device, std::nullopt);
}

// The elements of any tensor (any layout, any device), in logical row-major order.
template <typename T>
std::vector<double> values_of(const plugflow::Tensor& t) {
  plugflow::Tensor host =
      plugflow::ops::contiguous(plugflow::ops::to(t, plugflow::Device{plugflow::DeviceType::CPU, 0}, std::nullopt));
  std::vector<double> out;
  const T* p = host.data<T>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    if constexpr (std::is_arithmetic_v<T>) {
      out.push_back(static_cast<double>(p[i]));
    } else {
      out.push_back(static_cast<float>(p[i]));  // Half, BFloat16
    }
  }
  return out;
}

}  // namespace pf_coll_test

// EXPECT that `stmt` throws `Type` whose message contains `substr`.
#define PF_EXPECT_THROW_MSG(stmt, Type, substr)                                                      \
  do {                                                                                               \
    try {                                                                                            \
      stmt;                                                                                          \
      ADD_FAILURE() << #stmt " did not throw " #Type;                                                \
    } catch (const Type& e_) {                                                                       \
      EXPECT_NE(std::string(e_.what()).find(substr), std::string::npos)                              \
          << #stmt " threw " #Type " without \"" << (substr) << "\" in: " << e_.what();               \
    } catch (const std::exception& e_) {                                                             \
      ADD_FAILURE() << #stmt " threw another exception than " #Type ": " << e_.what();               \
    }                                                                                                \
  } while (0)
