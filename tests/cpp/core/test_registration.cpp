// Registration (core/src/registry.cpp): every Registrar call is validated, and a provider's
// registration is committed all at once or not at all. In-process providers here; the
// throwing test plugin goes through the loader in test_loader.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "../../../core/src/registry_internal.h"
#include "../../plugins/fake_device.h"
#include "plugflow/dispatch.h"
#include "test_core_support.h"
#include "test_helpers.h"

using namespace plugflow;

namespace {

void fill_ones(KernelContext& ctx) {
  Tensor& out = ctx.output(0);
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = 1.0f;
}

std::unique_ptr<Communicator> no_communicator(const Rendezvous&) { return nullptr; }

// The message of the PluginError that registering `fill` under `provider` raises.
std::string registration_error(const std::string& provider, const std::function<void(Registrar&)>& fill) {
  try {
    internal::register_provider(provider, fill);
  } catch (const PluginError& e) {
    return e.what();
  }
  ADD_FAILURE() << "registering '" << provider << "' did not fail";
  return {};
}

bool has_kernel_provider(const std::string& provider) {
  const auto all = internal::kernel_providers();
  return std::find(all.begin(), all.end(), provider) != all.end();
}

bool has_communicator(const std::string& backend) {
  for (const auto& c : internal::communicator_registrations())
    if (c.backend == backend) return true;
  return false;
}

// A backend whose type() is not a device type.
class BogusTypeBackend : public pf_test::FakeCudaBackend {
 public:
  DeviceType type() const override { return static_cast<DeviceType>(77); }
};

}  // namespace

TEST(Registration, KernelArgumentsAreValidated) {
  const auto add = [](Registrar& r, DeviceType d, std::initializer_list<DType> ts, KernelFn fn, Priority p) {
    r.kernel("add", d, ts, fn, p);
  };
  using enum DType;
  const Priority def = Priority::Default;
  EXPECT_CONTAINS(
      registration_error("bad", [&](Registrar& r) { add(r, static_cast<DeviceType>(77), {Float32}, fill_ones, def); }),
      "plugin 'bad' registers a kernel for op 'add' on device type 77, which does not exist (device "
      "types: cpu, cuda)");
  EXPECT_CONTAINS(
      registration_error("bad",
                         [&](Registrar& r) { add(r, DeviceType::CPU, {static_cast<DType>(200)}, fill_ones, def); }),
      "plugin 'bad' registers a kernel for op 'add' on cpu for dtype 200, which is not a plugflow dtype (0 to 9)");
  EXPECT_CONTAINS(registration_error("bad", [&](Registrar& r) { add(r, DeviceType::CPU, {}, fill_ones, def); }),
                  "plugin 'bad' registers a kernel for op 'add' on cpu with no dtypes");
  EXPECT_CONTAINS(registration_error("bad", [&](Registrar& r) { add(r, DeviceType::CPU, {Float32}, nullptr, def); }),
                  "plugin 'bad' registers a kernel for op 'add' on cpu: the kernel function is null");
  EXPECT_CONTAINS(
      registration_error(
          "bad", [&](Registrar& r) { add(r, DeviceType::CPU, {Float32}, fill_ones, static_cast<Priority>(7)); }),
      "plugin 'bad' registers a kernel for op 'add' on cpu with priority 7, which is not a priority");
  EXPECT_CONTAINS(registration_error("bad",
                                     [&](Registrar& r) {
                                       add(r, DeviceType::CPU, {Float32, Float64}, fill_ones, def);
                                       add(r, DeviceType::CPU, {Float64}, fill_ones, def);
                                     }),
                  "plugin 'bad' registers a kernel for op 'add' on cpu for float64 twice with priority default");
  // The same key at another priority is a fallback, not a duplicate.
  EXPECT_NO_THROW(internal::register_provider("two_priorities", [&](Registrar& r) {
    add(r, DeviceType::CPU, {Float32}, fill_ones, Priority::Fallback);
    add(r, DeviceType::CPU, {Float32}, fill_ones, Priority::Optimized);
  }));
  EXPECT_FALSE(has_kernel_provider("bad"));
}

TEST(Registration, OpsMustBeInTheCatalog) {
  EXPECT_CONTAINS(
      registration_error("bad", [](Registrar& r) { r.kernel("", DeviceType::CPU, {DType::Float32}, fill_ones); }),
      "plugin 'bad' registers a kernel with an empty op name");
  const std::string unknown = registration_error(
      "bad", [](Registrar& r) { r.kernel("softmaxx", DeviceType::CPU, {DType::Float32}, fill_ones); });
  EXPECT_CONTAINS(unknown,
                  "plugin 'bad' registers a kernel for op 'softmaxx', which is not in plugflow's op catalog "
                  "(plugins implement the core's ops; they cannot add new ones); did you mean 'softmax'?");
  EXPECT_NOT_CONTAINS(
      registration_error("bad",
                         [](Registrar& r) { r.kernel("no_such_op", DeviceType::CPU, {DType::Float32}, fill_ones); }),
      "did you mean");
}

TEST(Registration, DevicesCommunicatorsAndHooksAreValidated) {
  EXPECT_CONTAINS(registration_error("bad", [](Registrar& r) { r.device(nullptr); }),
                  "plugin 'bad' registers a null device backend");
  EXPECT_CONTAINS(registration_error("bad", [](Registrar& r) { r.device(std::make_shared<BogusTypeBackend>()); }),
                  "plugin 'bad' registers a backend for device type 77, which does not exist");
  EXPECT_CONTAINS(registration_error("bad",
                                     [](Registrar& r) {
                                       r.device(std::make_shared<pf_test::FakeCudaBackend>());
                                       r.device(std::make_shared<pf_test::FakeCudaBackend>());
                                     }),
                  "plugin 'bad' registers two backends for device type 'cuda'");
  EXPECT_CONTAINS(registration_error("bad", [](Registrar& r) { r.communicator("", DeviceType::CPU, no_communicator); }),
                  "plugin 'bad' registers a communicator with an empty name");
  EXPECT_CONTAINS(
      registration_error("bad", [](Registrar& r) { r.communicator("x", static_cast<DeviceType>(9), no_communicator); }),
      "plugin 'bad' registers communicator 'x' for device type 9, which does not exist");
  EXPECT_CONTAINS(registration_error("bad", [](Registrar& r) { r.communicator("x", DeviceType::CPU, nullptr); }),
                  "plugin 'bad' registers communicator 'x' without a factory");
  EXPECT_CONTAINS(registration_error("bad",
                                     [](Registrar& r) {
                                       r.communicator("x", DeviceType::CPU, no_communicator);
                                       r.communicator("x", DeviceType::CUDA, no_communicator);
                                     }),
                  "plugin 'bad' registers communicator 'x' twice");
  EXPECT_CONTAINS(registration_error("bad", [](Registrar& r) { r.on_set_num_threads(nullptr); }),
                  "plugin 'bad' registers an empty thread-count hook");
  EXPECT_EQ(find_device_backend(DeviceType::CUDA), nullptr);
  EXPECT_FALSE(has_communicator("x"));
}

TEST(Registration, AThrowingRegistrationLeavesNothingBehind) {
  const uint64_t generation = internal::registry_generation();
  std::atomic<int> hook_calls{0};
  try {
    internal::register_provider("halfway", [&](Registrar& r) {
      r.kernel("relu", DeviceType::CPU, {DType::Float32}, fill_ones, Priority::Optimized);
      r.device(std::make_shared<pf_test::FakeCudaBackend>());
      r.communicator("halfway_ccl", DeviceType::CPU, no_communicator);
      r.on_set_num_threads([&](int) { ++hook_calls; });
      throw std::runtime_error("failed halfway");
    });
    FAIL() << "the exception did not propagate";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "failed halfway");
  }
  EXPECT_EQ(internal::registry_generation(), generation);
  EXPECT_FALSE(has_kernel_provider("halfway"));
  for (const auto& k : registered_kernels()) EXPECT_NE(k.provider, "halfway");
  EXPECT_EQ(find_device_backend(DeviceType::CUDA), nullptr);
  EXPECT_FALSE(has_communicator("halfway_ccl"));
  internal::run_thread_hooks(2);
  EXPECT_EQ(hook_calls.load(), 0);
  EXPECT_FALSE(internal::provider_active("halfway"));

  // Nothing was taken: the name can register later.
  EXPECT_NO_THROW(internal::register_provider("halfway", [](Registrar&) {}));
}

TEST(Registration, AConflictFoundAtCommitLeavesNothingBehind) {
  internal::register_provider("first_device", [](Registrar& r) {
    r.device(std::make_shared<pf_test::FakeCudaBackend>());
    r.communicator("first_ccl", DeviceType::CUDA, no_communicator);
  });
  DeviceBackend* owner = find_device_backend(DeviceType::CUDA);
  ASSERT_NE(owner, nullptr);

  const uint64_t generation = internal::registry_generation();
  EXPECT_CONTAINS(registration_error("second_device",
                                     [](Registrar& r) {
                                       r.kernel("relu", DeviceType::CPU, {DType::Float32}, fill_ones);
                                       r.communicator("second_ccl", DeviceType::CPU, no_communicator);
                                       r.device(std::make_shared<pf_test::FakeCudaBackend>());
                                     }),
                  "plugin 'second_device' registers device type 'cuda', which plugin 'first_device' already provides");
  EXPECT_CONTAINS(registration_error("second_ccl_owner",
                                     [](Registrar& r) {
                                       r.kernel("relu", DeviceType::CPU, {DType::Float32}, fill_ones);
                                       r.communicator("first_ccl", DeviceType::CUDA, no_communicator);
                                     }),
                  "registers communicator backend 'first_ccl', which plugin 'first_device' already registered");
  EXPECT_EQ(internal::registry_generation(), generation);
  EXPECT_FALSE(has_kernel_provider("second_device"));
  EXPECT_FALSE(has_kernel_provider("second_ccl_owner"));
  EXPECT_FALSE(has_communicator("second_ccl"));
  EXPECT_EQ(find_device_backend(DeviceType::CUDA), owner);

  EXPECT_CONTAINS(registration_error("first_device", [](Registrar&) {}),
                  "a provider named 'first_device' is already registered");
}

TEST(Registration, ACommitMakesEverythingLiveWithOneGenerationBump) {
  pf_test::install_test_cpu_device();
  const uint64_t generation = internal::registry_generation();
  std::atomic<int> last_threads{0};
  internal::register_provider("complete", [&](Registrar& r) {
    r.kernel("neg", DeviceType::CPU, {DType::Float32, DType::Float64}, fill_ones, Priority::Optimized);
    r.kernel("abs", DeviceType::CPU, {DType::Float32}, fill_ones);
    r.communicator("complete_ccl", DeviceType::CPU, no_communicator);
    r.on_set_num_threads([&](int n) { last_threads = n; });
  });
  EXPECT_EQ(internal::registry_generation(), generation + 1);
  size_t kernels = 0;
  for (const auto& k : registered_kernels()) kernels += k.provider == "complete";
  EXPECT_EQ(kernels, 3u);
  EXPECT_TRUE(has_communicator("complete_ccl"));
  internal::run_thread_hooks(5);
  EXPECT_EQ(last_threads.load(), 5);

  internal::set_kernel_preference({"complete"});
  const Tensor x = Tensor::empty({4}, DType::Float32, Device{});
  const Tensor ins[] = {x};
  EXPECT_EQ(call_op(find_op("neg"), ins)[0].data<float>()[3], 1.0f);  // the committed kernel runs
}

TEST(DeviceTypes, PluginsClaimNamesWithIdsAfterCpuAndCuda) {
  EXPECT_EQ(device_type_name(DeviceType::CPU), "cpu");
  EXPECT_EQ(device_type_name(DeviceType::CUDA), "cuda");
  EXPECT_EQ(claim_device_type("cuda"), DeviceType::CUDA);  // fixed ids: claiming returns them
  const DeviceType xpu = claim_device_type("test_xpu");
  EXPECT_GE(static_cast<int>(xpu), 2);
  EXPECT_EQ(claim_device_type("test_xpu"), xpu);  // idempotent
  EXPECT_EQ(device_type_name(xpu), "test_xpu");
  EXPECT_EQ(find_device_type("test_xpu"), xpu);
  EXPECT_FALSE(find_device_type("test_nosuch").has_value());
  const Device d = Device::parse("test_xpu:1");
  EXPECT_EQ(d.type, xpu);
  EXPECT_EQ(d.index, 1);
  EXPECT_EQ(d.str(), "test_xpu:1");
  for (const char* bad : {"", "Xpu", "1xpu", "x-pu", "a_name_that_is_much_longer_than_32_chars"})
    EXPECT_THROW(claim_device_type(bad), ValueError) << bad;
  EXPECT_THROW(Device::parse("test_nosuch"), ValueError);
  // Ids run out at kMaxDeviceTypes, with a clear error, never an out-of-range id.
  bool exhausted = false;
  for (int i = 0; i < kMaxDeviceTypes && !exhausted; ++i) {
    try {
      const DeviceType t = claim_device_type("test_fill_" + std::to_string(i));
      EXPECT_LT(static_cast<int>(t), kMaxDeviceTypes);
    } catch (const PluginError& e) {
      exhausted = std::string(e.what()).find("device type ids are taken") != std::string::npos;
    }
  }
  EXPECT_TRUE(exhausted);
  EXPECT_EQ(num_device_types(), kMaxDeviceTypes);
}
