// Dispatcher: provider preference, priorities, cache invalidation, and the no-kernel error.
#include <gtest/gtest.h>

#include "../../../core/src/registry_internal.h"
#include "plugflow/dispatch.h"
#include "plugflow/ops.h"
#include "test_core_support.h"

using namespace plugflow;

namespace {
// Each fake kernel writes its own marker into every element of the output.
template <int Marker>
void marker_kernel(KernelContext& ctx) {
  Tensor& out = ctx.output(0);
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<float>(Marker);
}

Tensor run_relu() {
  Tensor in = Tensor::empty({3}, DType::Float32, Device{});
  const Tensor ins[] = {in};
  return call_op(find_op("relu"), ins)[0];
}

class Dispatch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pf_test::install_test_cpu_device();
    internal::register_provider("alpha", [](Registrar& a) {
      a.kernel("relu", DeviceType::CPU, {DType::Float32}, marker_kernel<1>, Priority::Default);
      a.kernel("relu", DeviceType::CPU, {DType::Float32}, marker_kernel<3>, Priority::Fallback);
    });
    internal::register_provider("beta", [](Registrar& b) {
      b.kernel("relu", DeviceType::CPU, {DType::Float32}, marker_kernel<2>, Priority::Optimized);
    });
  }
};
}  // namespace

TEST_F(Dispatch, PreferenceListWins) {
  internal::set_kernel_preference({"alpha", "beta"});
  EXPECT_EQ(run_relu().data<float>()[0], 1.0f);  // alpha's best (default beats its fallback)
  EXPECT_EQ(chosen_provider(find_op("relu"), DeviceType::CPU, DType::Float32), "alpha");
  internal::set_kernel_preference({"beta", "alpha"});  // cache must be invalidated
  EXPECT_EQ(run_relu().data<float>()[0], 2.0f);
}

TEST_F(Dispatch, UnlistedProvidersFallBackToPriority) {
  internal::set_kernel_preference({"nobody"});
  EXPECT_EQ(run_relu().data<float>()[0], 2.0f);  // beta's kernel is Optimized
}

TEST_F(Dispatch, MissingKernelNamesOpDeviceDtypeAndRegistered) {
  internal::set_kernel_preference({"alpha"});
  Tensor in = Tensor::empty({3}, DType::Float64, Device{});
  const Tensor ins[] = {in};
  try {
    call_op(find_op("relu"), ins);
    FAIL() << "expected NotImplementedError";
  } catch (const NotImplementedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'relu'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("float64"), std::string::npos) << msg;
    EXPECT_NE(msg.find("alpha (cpu): float32"), std::string::npos) << msg;
  }
}

TEST_F(Dispatch, OutputsAreCheckedForOutCalls) {
  internal::set_kernel_preference({"alpha"});
  Tensor in = Tensor::empty({3}, DType::Float32, Device{});
  Tensor wrong_shape = Tensor::empty({4}, DType::Float32, Device{});
  Tensor wrong_dtype = Tensor::empty({3}, DType::Int32, Device{});
  const Tensor ins[] = {in};
  Tensor o1[] = {wrong_shape};
  Tensor o2[] = {wrong_dtype};
  EXPECT_THROW(call_op_out(find_op("relu"), ins, {}, o1), Error);
  EXPECT_THROW(call_op_out(find_op("relu"), ins, {}, o2), Error);
  Tensor good = Tensor::empty({3}, DType::Float32, Device{});
  const uint32_t v = good.storage()->version();
  Tensor o3[] = {good};
  call_op_out(find_op("relu"), ins, {}, o3);
  EXPECT_EQ(good.data<float>()[2], 1.0f);
  EXPECT_GT(good.storage()->version(), v) << "in-place writes bump the version counter";
}

TEST_F(Dispatch, MixedDevicesAreRejected) {
  // Only a CPU device exists here: a CUDA device request explains itself.
  try {
    Tensor::empty({2}, DType::Float32, Device{DeviceType::CUDA, 0});
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}
