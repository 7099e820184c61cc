// The device runtime the core routes without naming a device: pinned host memory
// (ops::pin_memory / is_pinned through DeviceBackend::allocate_pinned_host), non_blocking copies
// (asynchronous only between pinned memory and a device), and the DeviceBackend defaults for a
// backend with one queue (no second stream, no events). A fake "cuda" backend on host memory
// counts which copy entry points the core calls.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "../../../core/src/registry_internal.h"
#include "../../plugins/fake_device.h"
#include "plugflow/ops.h"
#include "test_core_support.h"

using namespace plugflow;

namespace {

class PinningBackend final : public pf_test::FakeCudaBackend {
 public:
  void copy_to_host(int i, void* d, const void* s, size_t n) override {
    ++sync_copies;
    FakeCudaBackend::copy_to_host(i, d, s, n);
  }
  void copy_from_host(int i, void* d, const void* s, size_t n) override {
    ++sync_copies;
    FakeCudaBackend::copy_from_host(i, d, s, n);
  }
  void copy_from_host_async(int, void* d, const void* s, size_t n) override {
    ++async_copies;
    std::memcpy(d, s, n);
  }
  void copy_to_host_async(int, void* d, const void* s, size_t n) override {
    ++async_copies;
    std::memcpy(d, s, n);
  }
  void* allocate_pinned_host(size_t n) override {
    void* p = std::malloc(n);
    blocks[static_cast<const char*>(p)] = n;
    return p;
  }
  void free_pinned_host(void* p) override {
    blocks.erase(static_cast<const char*>(p));
    ++frees;
    std::free(p);
  }
  bool is_pinned_host(const void* p) const override {
    const auto* c = static_cast<const char*>(p);
    for (const auto& [start, n] : blocks)
      if (c >= start && c < start + n) return true;
    return false;
  }

  int sync_copies = 0, async_copies = 0, frees = 0;
  std::map<const char*, size_t> blocks;
};

std::shared_ptr<PinningBackend> g_backend;

void copy_kernel(KernelContext& ctx) {  // same-dtype contiguous copies are all these tests make
  std::memcpy(ctx.output(0).data_ptr(), ctx.input(0).data_ptr(), ctx.input(0).numel() * ctx.input(0).itemsize());
}

class DeviceRuntime : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pf_test::install_test_cpu_device();
    g_backend = std::make_shared<PinningBackend>();
    internal::register_provider("device_runtime_test", [](Registrar& r) {
      r.device(g_backend);
      for (DeviceType d : {DeviceType::CPU, DeviceType::CUDA}) r.kernel("copy", d, {DType::Float32}, copy_kernel);
    });
  }
  void SetUp() override { g_backend->sync_copies = g_backend->async_copies = 0; }
};

const Device kCpu{DeviceType::CPU, 0}, kDev{DeviceType::CUDA, 0};

Tensor iota(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::Float32, kCpu);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(i) * 0.5f;
  return t;
}

TEST_F(DeviceRuntime, PinMemoryCopiesIntoPinnedHostMemory) {
  const Tensor t = iota(10);
  EXPECT_FALSE(ops::is_pinned(t));
  const Tensor p = ops::pin_memory(t);
  EXPECT_TRUE(p.device().is_cpu());
  EXPECT_TRUE(ops::is_pinned(p));
  EXPECT_TRUE(ops::is_pinned(ops::slice(p, 0, 3, 7, 1))) << "a view into pinned memory is pinned";
  EXPECT_EQ(std::memcmp(p.data_ptr(), t.data_ptr(), 40), 0);
  EXPECT_TRUE(ops::pin_memory(p).is_same(p)) << "pinning a pinned tensor returns it";
}

TEST_F(DeviceRuntime, PinnedMemoryGoesBackToItsBackend) {
  const int before = g_backend->frees;
  { const Tensor p = ops::pin_memory(iota(4)); }
  EXPECT_EQ(g_backend->frees, before + 1);
}

TEST_F(DeviceRuntime, PinningADeviceTensorIsRefused) {
  const Tensor d = ops::to(iota(3), kDev, std::nullopt);
  EXPECT_THROW(ops::pin_memory(d), Error);
}

TEST_F(DeviceRuntime, NonBlockingCopiesAreAsynchronousOnlyWithPinnedMemory) {
  const Tensor pageable = iota(8), pinned = ops::pin_memory(iota(8));
  ops::to(pageable, kDev, std::nullopt, false, /*non_blocking=*/true);
  EXPECT_EQ(g_backend->async_copies, 0) << "pageable memory is copied synchronously";
  EXPECT_EQ(g_backend->sync_copies, 1);
  const Tensor d = ops::to(pinned, kDev, std::nullopt, false, /*non_blocking=*/true);
  EXPECT_EQ(g_backend->async_copies, 1);
  ops::to(pinned, kDev, std::nullopt, false, /*non_blocking=*/false);
  EXPECT_EQ(g_backend->async_copies, 1) << "blocking copies stay synchronous, pinned or not";

  Tensor back = ops::pin_memory(Tensor::empty({8}, DType::Float32, kCpu));
  ops::copy_(back, d, /*non_blocking=*/true);
  EXPECT_EQ(g_backend->async_copies, 2);
  EXPECT_EQ(std::memcmp(back.data_ptr(), pinned.data_ptr(), 32), 0);
}

TEST_F(DeviceRuntime, ABackendWithOneQueueHasNoSecondStreamOrEvents) {
  DeviceBackend& b = *g_backend;
  EXPECT_THROW(b.create_stream(0), NotImplementedError);
  EXPECT_THROW(b.create_event(0, false), NotImplementedError);
  EXPECT_NO_THROW(b.set_current_stream(0, b.default_stream(0))) << "the default stream is always fine";
  EXPECT_TRUE(b.query_stream(0, b.default_stream(0)));
  EXPECT_TRUE(b.memory_stats(0).empty());
  const Tensor d = ops::to(iota(4), kDev, std::nullopt);
  EXPECT_NO_THROW(ops::record_stream(d, b.default_stream(0))) << "nothing to record with one queue";
  int other_stream = 0;
  EXPECT_THROW(ops::record_stream(d, &other_stream), NotImplementedError);
}

}  // namespace
