// The gloo communicator: 2 and 3 ranks as threads of one process on loopback, each group on a
// port of its own. Every operation against values computed here, every dtype for all_reduce,
// strided tensors, the file store, and the failure paths: a missing peer, a missing master,
// a silent peer, ranks whose calls disagree, a taken port, a foreign service on the port, and
// bad arguments.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <thread>

#include "collectives_test_util.h"
#include "plugflow/error.h"
#include "plugflow/runtime.h"

using namespace plugflow;
using namespace pf_coll_test;

namespace {

const Device kCpu{DeviceType::CPU, 0};

class PluginEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    load_plugin(PF_CPU_PLUGIN_PATH);   // CPU device + kernels: Tensor::empty, contiguous, copy_
    load_plugin(PF_GLOO_PLUGIN_PATH);
  }
};
[[maybe_unused]] testing::Environment* const kEnv = testing::AddGlobalTestEnvironment(new PluginEnvironment);

constexpr DType kAllDTypes[] = {DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int16,  DType::Int32,
                                DType::Int64,   DType::Float16,  DType::BFloat16, DType::Float32, DType::Float64};
constexpr ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Product, ReduceOp::Max, ReduceOp::Min};

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Product: return "product";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

// Rank r's element i. Small values so that products of three ranks fit in int8 and every
// intermediate is exact in half and bfloat16.
double value(int rank, int i, DType dt) {
  if (dt == DType::Bool) return (rank + i) % 2 == 0 ? 1 : 0;
  return (rank + i) % 3 + 1;
}

double expected_reduction(ReduceOp op, int world_size, int i, DType dt) {
  std::vector<double> v;
  for (int r = 0; r < world_size; ++r) v.push_back(value(r, i, dt));
  const bool is_bool = dt == DType::Bool;
  double acc = v[0];
  for (size_t k = 1; k < v.size(); ++k) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: acc = is_bool ? (acc != 0 || v[k] != 0) : acc + v[k]; break;
      case ReduceOp::Product: acc = is_bool ? (acc != 0 && v[k] != 0) : acc * v[k]; break;
      case ReduceOp::Max: acc = std::max(acc, v[k]); break;
      case ReduceOp::Min: acc = std::min(acc, v[k]); break;
    }
  }
  if (op == ReduceOp::Avg) acc = is_integral(dt, false) ? std::trunc(acc / world_size) : acc / world_size;
  return acc;
}

template <typename T>
void check_all_reduce(Communicator& c, ReduceOp op, int64_t n) {
  const DType dt = cpp_dtype<T>::value;
  std::vector<double> mine;
  for (int64_t i = 0; i < n; ++i) mine.push_back(value(c.rank(), static_cast<int>(i), dt));
  Tensor t = make_tensor<T>(mine, {n}, kCpu);
  c.all_reduce(t, op);
  const std::vector<double> got = values_of<T>(t);
  for (int64_t i = 0; i < n; ++i) {
    const double want = expected_reduction(op, c.world_size(), static_cast<int>(i), dt);
    // Averages like 5/3 round to the dtype; everything else is exact.
    const double tol = (dt == DType::Float16 || dt == DType::BFloat16) ? 1e-2 * std::abs(want)
                       : dt == DType::Float32                           ? 1e-6 * std::abs(want)
                                                                        : 1e-12;
    ASSERT_NEAR(got[i], want, tol) << "all_reduce " << op_name(op) << " " << dtype_name(dt) << " element " << i
                                   << " on rank " << c.rank();
  }
}

class GlooGroup : public testing::TestWithParam<int> {};

TEST_P(GlooGroup, AllReduceEveryOpAndDtype) {
  run_group("gloo", GetParam(), [](Communicator& c) {
    EXPECT_EQ(c.backend(), "gloo");
    for (DType dt : kAllDTypes) {
      for (ReduceOp op : kAllOps) {
        if (op == ReduceOp::Avg && dt == DType::Bool) continue;  // rejected: see BadArguments
        visit_dtype(dt, [&](auto tag) { check_all_reduce<typename decltype(tag)::type>(c, op, 7); });
      }
    }
  });
}

TEST_P(GlooGroup, AllReduceLargeTensor) {
  // Several of Gloo's 1 MiB segments per rank.
  run_group("gloo", GetParam(), [](Communicator& c) { check_all_reduce<float>(c, ReduceOp::Sum, 3 << 20); });
}

TEST_P(GlooGroup, BroadcastFromEveryRoot) {
  run_group("gloo", GetParam(), [](Communicator& c) {
    for (int root = 0; root < c.world_size(); ++root) {
      Tensor f = make_tensor<double>({1.5 * c.rank(), -2.0 * c.rank(), 0.25}, {3}, kCpu);
      Tensor s = make_tensor<int16_t>({static_cast<double>(100 * c.rank() - 7)}, {1}, kCpu);
      Tensor b = make_tensor<BFloat16>({static_cast<double>(c.rank()), 2.0}, {2}, kCpu);
      c.broadcast(f, root);
      c.broadcast(s, root);
      c.broadcast(b, root);
      EXPECT_EQ(values_of<double>(f), (std::vector<double>{1.5 * root, -2.0 * root, 0.25}));
      EXPECT_EQ(values_of<int16_t>(s), (std::vector<double>{100.0 * root - 7}));
      EXPECT_EQ(values_of<BFloat16>(b), (std::vector<double>{static_cast<double>(root), 2.0}));
      // Into a strided view (a column), through a contiguous copy and back.
      Tensor m = make_tensor<float>({0, 10.0 * c.rank(), 1, 10.0 * c.rank() + 1}, {2, 2}, kCpu);
      Tensor col = ops::select(m, 1, 1);
      c.broadcast(col, root);
      EXPECT_EQ(values_of<float>(m), (std::vector<double>{0, 10.0 * root, 1, 10.0 * root + 1}));
    }
  });
}

TEST_P(GlooGroup, AllGather) {
  run_group("gloo", GetParam(), [](Communicator& c) {
    const int ws = c.world_size();
    Tensor in = make_tensor<int64_t>({10.0 * c.rank(), 10.0 * c.rank() + 1, 10.0 * c.rank() + 2, -1.0}, {2, 2}, kCpu);
    std::vector<Tensor> out;
    for (int r = 0; r < ws; ++r) {
      // Odd ranks' outputs are transposed views: written through the strided path.
      Tensor o = ops::zeros({2, 2}, DType::Int64, kCpu);
      out.push_back(r % 2 ? ops::transpose(o, 0, 1) : o);
    }
    c.all_gather(out, in);
    for (int r = 0; r < ws; ++r) {
      EXPECT_EQ(values_of<int64_t>(out[r]), (std::vector<double>{10.0 * r, 10.0 * r + 1, 10.0 * r + 2, -1.0}))
          << "slot " << r << " on rank " << c.rank();
    }
  });
}

TEST_P(GlooGroup, ReduceScatter) {
  run_group("gloo", GetParam(), [](Communicator& c) {
    const int ws = c.world_size();
    // in: [ws * 2, 3], element (row, col) = rank + row * 3 + col; rank r gets rows 2r, 2r+1.
    std::vector<double> in_values;
    for (int row = 0; row < ws * 2; ++row)
      for (int col = 0; col < 3; ++col) in_values.push_back(c.rank() + row * 3 + col);
    Tensor in = make_tensor<float>(in_values, {ws * 2, 3}, kCpu);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      Tensor out = ops::zeros({2, 3}, DType::Float32, kCpu);
      c.reduce_scatter(out, in, op);
      std::vector<double> want;
      for (int row = 2 * c.rank(); row < 2 * c.rank() + 2; ++row) {
        for (int col = 0; col < 3; ++col) {
          const double base = row * 3 + col;
          const double rank_sum = ws * (ws - 1) / 2.0;
          want.push_back(op == ReduceOp::Sum   ? ws * base + rank_sum
                         : op == ReduceOp::Avg ? base + rank_sum / ws
                                               : base + ws - 1);
        }
      }
      const auto got = values_of<float>(out);
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << op_name(op) << " element " << i;
    }
    // The input is left alone.
    EXPECT_EQ(values_of<float>(in), in_values);
  });
}

TEST_P(GlooGroup, BarrierWaitsForTheSlowestRank) {
  run_group("gloo", GetParam(), [](Communicator& c) {
    if (c.rank() != 0) std::this_thread::sleep_for(300ms);
    const auto start = Clock::now();
    c.barrier();
    if (c.rank() == 0) {
      EXPECT_GE(Clock::now() - start, 250ms) << "rank 0 left the barrier before the others arrived";
    }
  });
}

TEST_P(GlooGroup, SendRecv) {
  run_group("gloo", GetParam(), [](Communicator& c) {
    const int last = c.world_size() - 1;
    if (c.rank() == 0) {
      Tensor t = make_tensor<float>({1, 2, 3}, {3}, kCpu);
      c.send(t, last, 7);
      Tensor back = ops::zeros({3}, DType::Float32, kCpu);
      c.recv(back, last, 8);
      EXPECT_EQ(values_of<float>(back), (std::vector<double>{2, 3, 4}));
    } else if (c.rank() == last) {
      // Receive into a strided view: staged and copied back.
      Tensor storage = ops::zeros({3, 2}, DType::Float32, kCpu);
      Tensor column = ops::select(storage, 1, 1);
      c.recv(column, 0, 7);
      EXPECT_EQ(values_of<float>(column), (std::vector<double>{1, 2, 3}));
      EXPECT_EQ(values_of<float>(storage), (std::vector<double>{0, 1, 0, 2, 0, 3}));
      Tensor reply = make_tensor<float>({2, 3, 4}, {3}, kCpu);
      c.send(reply, 0, 8);
    }
    c.barrier();
  });
}

TEST_P(GlooGroup, StridedTensorAllReduce) {
  run_group("gloo", GetParam(), [](Communicator& c) {
    // A column of a [3, 2] matrix: strided, so it goes through a contiguous copy and back.
    Tensor m = make_tensor<double>({0, 1, 2, 3, 4, 5}, {3, 2}, kCpu);
    Tensor col = ops::select(m, 1, 0);
    ASSERT_FALSE(col.is_contiguous());
    c.all_reduce(col, ReduceOp::Sum);
    const double ws = c.world_size();
    EXPECT_EQ(values_of<double>(m), (std::vector<double>{0, 1, 2 * ws, 3, 4 * ws, 5}));
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooGroup, testing::Values(2, 3), [](const auto& info) {
  return "world" + std::to_string(info.param);
});

TEST(Gloo, WorldOfOne) {
  run_group("gloo", 1, [](Communicator& c) {
    Tensor t = make_tensor<float>({1, 2}, {2}, kCpu);
    c.all_reduce(t, ReduceOp::Avg);
    c.broadcast(t, 0);
    c.barrier();
    EXPECT_EQ(values_of<float>(t), (std::vector<double>{1, 2}));
  });
}

TEST(Gloo, BadArgumentsThrowAndLeaveTheCommunicatorUsable) {
  run_group("gloo", 2, [](Communicator& c) {
    Tensor t = make_tensor<float>({1, 2, 3, 4}, {4}, kCpu);
    std::vector<Tensor> one{ops::zeros({4}, DType::Float32, kCpu)};
    PF_EXPECT_THROW_MSG(c.all_gather(one, t), ValueError, "one per rank (2)");
    std::vector<Tensor> wrong_shape{ops::zeros({4}, DType::Float32, kCpu), ops::zeros({2, 2}, DType::Float32, kCpu)};
    PF_EXPECT_THROW_MSG(c.all_gather(wrong_shape, t), ValueError, "output 1 has shape [2, 2]");
    std::vector<Tensor> wrong_dtype{ops::zeros({4}, DType::Float32, kCpu), ops::zeros({4}, DType::Int32, kCpu)};
    PF_EXPECT_THROW_MSG(c.all_gather(wrong_dtype, t), TypeError, "dtype int32");
    PF_EXPECT_THROW_MSG(c.broadcast(t, 2), ValueError, "root 2 is not a rank");
    Tensor b = make_tensor<bool>({1, 0}, {2}, kCpu);
    PF_EXPECT_THROW_MSG(c.all_reduce(b, ReduceOp::Avg), TypeError, "AVG");
    Tensor odd = ops::zeros({3}, DType::Float32, kCpu);
    Tensor out = ops::zeros({1}, DType::Float32, kCpu);
    PF_EXPECT_THROW_MSG(c.reduce_scatter(out, odd, ReduceOp::Sum), ValueError, "multiple of the world size");
    Tensor out3 = ops::zeros({3}, DType::Float32, kCpu);
    PF_EXPECT_THROW_MSG(c.reduce_scatter(out3, t, ReduceOp::Sum), ValueError, "has 3 elements");
    PF_EXPECT_THROW_MSG(c.send(t, c.rank(), 0), ValueError, "itself");
    PF_EXPECT_THROW_MSG(c.recv(t, 1 - c.rank(), -1), ValueError, "tag");
    PF_EXPECT_THROW_MSG(c.send(Tensor(), 1 - c.rank(), 0), ValueError, "undefined");

    // Nothing went on the wire: the group still works, empty tensors included.
    Tensor empty = ops::zeros({0}, DType::Float32, kCpu);
    c.all_reduce(empty, ReduceOp::Sum);
    c.all_reduce(t, ReduceOp::Sum);
    EXPECT_EQ(values_of<float>(t), (std::vector<double>{2, 4, 6, 8}));
  });
}

TEST(Gloo, FileStoreRendezvousCleansUp) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("plugflow_gloo_store_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  run_group("gloo", 3, [](Communicator& c) {
    Tensor t = make_tensor<int32_t>({static_cast<double>(c.rank())}, {1}, kCpu);
    c.all_reduce(t, ReduceOp::Sum);
    EXPECT_EQ(values_of<int32_t>(t), (std::vector<double>{3}));
  }, 30s, [&](int, int rank) {
    Rendezvous rv = rendezvous(0, rank, 3);
    rv.store_path = dir.string();
    return rv;
  });
  ASSERT_TRUE(std::filesystem::is_directory(dir));
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "rendezvous keys left behind in " << dir;
  std::filesystem::remove_all(dir);
}

TEST(Gloo, FileStorePathThatIsAFile) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("plugflow_gloo_file_" + std::to_string(::getpid()));
  { std::ofstream(file) << "x"; }
  Rendezvous rv = rendezvous(0, 0, 1);
  rv.store_path = file.string();
  PF_EXPECT_THROW_MSG(create_communicator("gloo", rv), ValueError, "is not a directory");
  std::filesystem::remove(file);
}

// ---- failures end in clear errors within the timeout, never in a hang ----------------------

TEST(GlooFailures, MissingPeerTimesOut) {
  const auto timeout = 1000ms;
  const auto start = Clock::now();
  try {
    create_communicator("gloo", rendezvous(free_port(), 0, 2, timeout));
    FAIL() << "rank 0 of 2 started without rank 1";
  } catch (const TimeoutError& e) {
    const auto elapsed = Clock::now() - start;
    EXPECT_GE(elapsed, timeout - 50ms) << "gave up before the timeout";
    EXPECT_LT(elapsed, timeout + 1500ms) << "took far longer than the timeout";
    EXPECT_NE(std::string(e.what()).find("rank(s) 1"), std::string::npos) << e.what();
  }
}

TEST(GlooFailures, MissingMasterTimesOut) {
  const auto timeout = 1000ms;
  const auto start = Clock::now();
  try {
    create_communicator("gloo", rendezvous(free_port(), 1, 2, timeout));
    FAIL() << "rank 1 of 2 started without rank 0";
  } catch (const TimeoutError& e) {
    EXPECT_LT(Clock::now() - start, timeout + 1500ms);
    EXPECT_NE(std::string(e.what()).find("could not reach the rendezvous store"), std::string::npos) << e.what();
  }
}

TEST(GlooFailures, SilentPeerTimesOutAndPoisonsTheCommunicator) {
  std::promise<void> rank0_gave_up;
  std::shared_future<void> gave_up = rank0_gave_up.get_future().share();
  const auto timeout = 1000ms;
  run_group("gloo", 2, [&](Communicator& c) {
    if (c.rank() == 1) {
      // Stay connected but never join the all_reduce, until rank 0 has given up.
      gave_up.wait();
      return;
    }
    Tensor t = make_tensor<float>({1}, {1}, kCpu);
    const auto start = Clock::now();
    PF_EXPECT_THROW_MSG(c.all_reduce(t, ReduceOp::Sum), TimeoutError, "all_reduce");
    EXPECT_LT(Clock::now() - start, timeout + 1500ms);
    PF_EXPECT_THROW_MSG(c.barrier(), Error, "an earlier operation failed");
    rank0_gave_up.set_value();
  }, timeout);
}

// Before the call's hash went into Gloo's tag, a longer message than the receiver's buffer
// failed an enforce on Gloo's event-loop thread and aborted the whole process (this test
// binary), and a shorter one gave a silently wrong sum.
TEST(GlooFailures, RanksThatDisagreeOnSizeOrDtypeFailInsteadOfAborting) {
  struct Case {
    const char* name;
    std::function<void(Communicator&)> call;
  };
  const std::vector<Case> cases = {
      {"all_reduce, 4 vs 1000 elements", [](Communicator& c) {
         Tensor t = ops::ones({c.rank() == 0 ? 4 : 1000}, DType::Float32, kCpu);
         c.all_reduce(t, ReduceOp::Sum);
       }},
      {"all_reduce, 4 vs 3 elements", [](Communicator& c) {
         Tensor t = ops::ones({c.rank() == 0 ? 4 : 3}, DType::Float32, kCpu);
         c.all_reduce(t, ReduceOp::Sum);
       }},
      {"all_reduce, float32 vs float64", [](Communicator& c) {
         Tensor t = ops::ones({4}, c.rank() == 0 ? DType::Float32 : DType::Float64, kCpu);
         c.all_reduce(t, ReduceOp::Sum);
       }},
      {"broadcast, 8 vs 2 elements", [](Communicator& c) {
         Tensor t = ops::ones({c.rank() == 0 ? 8 : 2}, DType::Int64, kCpu);
         c.broadcast(t, 0);
       }},
      {"send 4 elements, recv 8", [](Communicator& c) {
         Tensor t = ops::ones({c.rank() == 0 ? 4 : 8}, DType::Float32, kCpu);
         if (c.rank() == 0) {
           c.send(t, 1, 5);
         } else {
           c.recv(t, 0, 5);
         }
       }},
  };
  for (const Case& k : cases) {
    run_group("gloo", 2, [&](Communicator& c) {
      SCOPED_TRACE(k.name);
      // TimeoutError, or Error when the peer gave up first and closed its connection.
      PF_EXPECT_THROW_MSG(k.call(c), Error, "gloo ");
      PF_EXPECT_THROW_MSG(c.barrier(), Error, "an earlier operation failed");
    }, 500ms);
  }
}

TEST(GlooFailures, PortInUse) {
  // A listener on every interface holds the port.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const auto start = Clock::now();
  PF_EXPECT_THROW_MSG(create_communicator("gloo", rendezvous(ntohs(a.sin_port), 0, 2, 10s)), Error,
                      "127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
  // It asks what holds the port for up to a second (a plugflow store answers at once).
  EXPECT_LT(Clock::now() - start, 5s) << "a taken port must fail at once, not at the timeout";
  ::close(fd);
}

TEST(GlooFailures, ForeignServiceOnThePort) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::thread server([fd] {
    int c = ::accept(fd, nullptr, nullptr);
    if (c < 0) return;
    const char reply[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    [[maybe_unused]] auto n = ::write(c, reply, sizeof reply - 1);
    std::this_thread::sleep_for(500ms);
    ::close(c);
  });
  PF_EXPECT_THROW_MSG(create_communicator("gloo", rendezvous(ntohs(a.sin_port), 1, 2, 5s)), Error,
                      "not a plugflow rendezvous store");
  server.join();
  ::close(fd);
}

}  // namespace
