// The nccl communicator on the GPUs present (skipped without one). One rank per GPU, as
// threads of this process; NCCL refuses two ranks on one GPU, so a single-GPU machine runs
// the world-of-one cases and the failure paths.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <future>

#include "collectives_test_util.h"
#include "plugflow/device.h"
#include "plugflow/error.h"
#include "plugflow/runtime.h"

using namespace plugflow;
using namespace pf_coll_test;

namespace {

const Device kCpu{DeviceType::CPU, 0};

int g_gpus = 0;

class PluginEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    load_plugin(PF_CPU_PLUGIN_PATH);
    load_plugin(PF_CUDA_PLUGIN_PATH);
    load_plugin(PF_NCCL_PLUGIN_PATH);
    if (DeviceBackend* cuda = find_device_backend(DeviceType::CUDA)) g_gpus = cuda->device_count();
  }
};
[[maybe_unused]] testing::Environment* const kEnv = testing::AddGlobalTestEnvironment(new PluginEnvironment);

#define REQUIRE_GPUS(n)                                                           \
  do {                                                                            \
    if (g_gpus < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA device(s), found " << g_gpus; \
  } while (0)

// Rank r runs on cuda:r: the communicator binds to the device current on its thread.
void run_nccl_group(int world_size, const std::function<void(Communicator&, Device)>& body,
                    std::chrono::milliseconds timeout = 60s) {
  run_group("nccl", world_size, [&](Communicator& c) { body(c, Device{DeviceType::CUDA, c.rank()}); }, timeout,
            [&](int port, int rank) {
              if (cudaSetDevice(rank) != cudaSuccess) throw std::runtime_error("cudaSetDevice failed");
              return rendezvous(port, rank, world_size, timeout);
            });
}

TEST(Nccl, WorldOfOneRunsEveryOperation) {
  REQUIRE_GPUS(1);
  run_nccl_group(1, [](Communicator& c, Device dev) {
    EXPECT_EQ(c.backend(), "nccl");
    Tensor t = make_tensor<float>({1, 2, 3}, {3}, dev);
    c.all_reduce(t, ReduceOp::Sum);
    c.all_reduce(t, ReduceOp::Avg);
    EXPECT_EQ(values_of<float>(t), (std::vector<double>{1, 2, 3}));
    Tensor b = make_tensor<bool>({1, 0, 1}, {3}, dev);
    c.all_reduce(b, ReduceOp::Sum);
    EXPECT_EQ(values_of<bool>(b), (std::vector<double>{1, 0, 1}));
    Tensor s = make_tensor<int16_t>({-7}, {1}, dev);
    c.broadcast(s, 0);  // bytes: int16 travels though NCCL cannot reduce it
    EXPECT_EQ(values_of<int16_t>(s), (std::vector<double>{-7}));
    std::vector<Tensor> out{ops::zeros({3}, DType::Float32, dev)};
    c.all_gather(out, t);
    EXPECT_EQ(values_of<float>(out[0]), (std::vector<double>{1, 2, 3}));
    Tensor rs = ops::zeros({3}, DType::Float32, dev);
    c.reduce_scatter(rs, t, ReduceOp::Max);
    EXPECT_EQ(values_of<float>(rs), (std::vector<double>{1, 2, 3}));
    // A strided view goes through a contiguous copy and back.
    Tensor m = make_tensor<double>({0, 1, 2, 3}, {2, 2}, dev);
    Tensor col = ops::select(m, 1, 1);
    c.all_reduce(col, ReduceOp::Product);
    EXPECT_EQ(values_of<double>(m), (std::vector<double>{0, 1, 2, 3}));
    c.barrier();
  });
}

TEST(Nccl, BadArguments) {
  REQUIRE_GPUS(1);
  run_nccl_group(1, [](Communicator& c, Device dev) {
    Tensor host = make_tensor<float>({1}, {1}, kCpu);
    PF_EXPECT_THROW_MSG(c.all_reduce(host, ReduceOp::Sum), ValueError, "handles CUDA tensors");
    Tensor s = make_tensor<int16_t>({1}, {1}, dev);
    PF_EXPECT_THROW_MSG(c.all_reduce(s, ReduceOp::Sum), TypeError, "int16");
    PF_EXPECT_THROW_MSG(c.broadcast(s, 1), ValueError, "root 1 is not a rank");
    if (g_gpus >= 2) {
      Tensor elsewhere = make_tensor<float>({1}, {1}, Device{DeviceType::CUDA, 1});
      PF_EXPECT_THROW_MSG(c.all_reduce(elsewhere, ReduceOp::Sum), ValueError, "created on cuda:0");
    }
    Tensor ok = make_tensor<float>({5}, {1}, dev);
    c.all_reduce(ok, ReduceOp::Sum);  // still usable
    EXPECT_EQ(values_of<float>(ok), (std::vector<double>{5}));
  });
}

TEST(Nccl, MissingPeerTimesOutDuringInit) {
  REQUIRE_GPUS(1);
  const auto timeout = 3000ms;
  const auto start = Clock::now();
  try {
    create_communicator("nccl", rendezvous(free_port(), 0, 2, timeout));
    FAIL() << "rank 0 of 2 started without rank 1";
  } catch (const TimeoutError& e) {
    const auto elapsed = Clock::now() - start;
    EXPECT_GE(elapsed, timeout - 50ms);
    EXPECT_LT(elapsed, timeout + 5s) << "ncclCommAbort must end the wait promptly";
    EXPECT_NE(std::string(e.what()).find("initialization"), std::string::npos) << e.what();
  }
}

TEST(Nccl, MissingMasterTimesOut) {
  REQUIRE_GPUS(1);
  const auto start = Clock::now();
  PF_EXPECT_THROW_MSG(create_communicator("nccl", rendezvous(free_port(), 1, 2, 1000ms)), TimeoutError,
                      "could not reach the rendezvous store");
  EXPECT_LT(Clock::now() - start, 2500ms);
}

TEST(Nccl, MultiGpuCollectives) {
  REQUIRE_GPUS(2);
  const int ws = std::min(g_gpus, 4);
  run_nccl_group(ws, [ws](Communicator& c, Device dev) {
    Tensor t = make_tensor<float>({static_cast<double>(c.rank() + 1), 2}, {2}, dev);
    c.all_reduce(t, ReduceOp::Sum);
    EXPECT_EQ(values_of<float>(t), (std::vector<double>{ws * (ws + 1) / 2.0, 2.0 * ws}));
    Tensor b = make_tensor<int64_t>({static_cast<double>(c.rank())}, {1}, dev);
    c.broadcast(b, ws - 1);
    EXPECT_EQ(values_of<int64_t>(b), (std::vector<double>{ws - 1.0}));
    std::vector<Tensor> out;
    for (int r = 0; r < ws; ++r) out.push_back(ops::zeros({1}, DType::Int64, dev));
    Tensor mine = make_tensor<int64_t>({10.0 * c.rank()}, {1}, dev);
    c.all_gather(out, mine);
    for (int r = 0; r < ws; ++r) EXPECT_EQ(values_of<int64_t>(out[r]), (std::vector<double>{10.0 * r}));
    if (c.rank() == 0) {
      c.send(make_tensor<float>({42}, {1}, dev), 1, 0);
    } else if (c.rank() == 1) {
      Tensor r = ops::zeros({1}, DType::Float32, dev);
      c.recv(r, 0, 0);
      EXPECT_EQ(values_of<float>(r), (std::vector<double>{42}));
    }
    c.barrier();
  });
}

}  // namespace
