// Autocast in the functional layer: the policies on a device type that the Python tests cannot
// reach without a GPU (CUDA's lists, on the fake CUDA backend of tests/plugins), the per-thread
// state, the scope's exclusion and restore, and the weight-cast cache. The test kernels exist
// only for the dtypes the policy must produce, so a wrong cast fails with "no kernel".
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "../../../core/src/registry_internal.h"
#include "../../plugins/fake_device.h"
#include "plugflow/autocast.h"
#include "plugflow/autograd.h"
#include "plugflow/ops.h"
#include "test_core_support.h"

using namespace plugflow;

namespace {

// A casting copy between contiguous tensors of any floating dtype (both devices: host memory).
void copy_kernel(KernelContext& ctx) {
  const Tensor& src = ctx.input(0);
  Tensor& dst = ctx.output(0);
  for (int64_t i = 0; i < src.numel(); ++i) {
    const float v = visit_dtype(src.dtype(), [&](auto tag) -> float {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) return src.data<bool>()[i];
      else return static_cast<float>(src.data<T>()[i]);
    });
    visit_dtype(dst.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) dst.data<bool>()[i] = v != 0;
      else dst.data<T>()[i] = static_cast<T>(v);
    });
  }
}

DType g_last_mm_dtype = DType::Bool;
void mm_kernel(KernelContext& ctx) {
  g_last_mm_dtype = ctx.input(0).dtype();
  std::memset(ctx.output(0).data_ptr(), 0, ctx.output(0).numel() * ctx.output(0).itemsize());
}

void fill_kernel(KernelContext& ctx) {
  Tensor& out = ctx.output(0);
  std::memset(out.data_ptr(), 0, out.numel() * out.itemsize());
}

class Autocast : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pf_test::install_test_cpu_device();
    internal::register_provider("autocast_test", [](Registrar& r) {
      r.device(std::make_shared<pf_test::FakeCudaBackend>());
      const auto floats = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
      for (DeviceType d : {DeviceType::CPU, DeviceType::CUDA}) {
        r.kernel("copy", d, floats, copy_kernel);
        r.kernel("fill", d, floats, fill_kernel);
      }
      // The products have kernels in the lower-precision dtypes (and float64) only; exp in
      // float32 only: an op that autocast did not cast finds no kernel.
      r.kernel("mm", DeviceType::CUDA, {DType::Float16, DType::BFloat16, DType::Float64}, mm_kernel);
      r.kernel("mm", DeviceType::CPU, {DType::BFloat16}, mm_kernel);
      r.kernel("exp", DeviceType::CUDA, {DType::Float32}, fill_kernel);
    });
  }
  void TearDown() override {
    for (DeviceType d : {DeviceType::CPU, DeviceType::CUDA}) autocast::set_enabled(d, false);
    autocast::set_lower_dtype(DeviceType::CUDA, DType::Float16);
    autocast::clear_cache();
  }
};

Tensor filled(const Shape& s, DType dt, DeviceType d) { return ops::zeros(s, dt, Device{d, 0}); }

}  // namespace

TEST_F(Autocast, OffCostsNothingAndChangesNothing) {
  EXPECT_FALSE(autocast::active());
  const Tensor a = filled({2, 2}, DType::Float16, DeviceType::CUDA);
  EXPECT_EQ(ops::mm(a, a).dtype(), DType::Float16);
  EXPECT_THROW(ops::mm(filled({2, 2}, DType::Float32, DeviceType::CUDA), filled({2, 2}, DType::Float32, DeviceType::CUDA)),
               NotImplementedError);
}

TEST_F(Autocast, CudaListsCastToTheirTypes) {
  autocast::set_enabled(DeviceType::CUDA, true);
  EXPECT_TRUE(autocast::active());
  const Tensor a = filled({2, 3}, DType::Float32, DeviceType::CUDA), b = filled({3, 2}, DType::Float32, DeviceType::CUDA);
  EXPECT_EQ(ops::mm(a, b).dtype(), DType::Float16);  // lower precision
  EXPECT_EQ(g_last_mm_dtype, DType::Float16);
  autocast::set_lower_dtype(DeviceType::CUDA, DType::BFloat16);
  EXPECT_EQ(ops::matmul(a, b).dtype(), DType::BFloat16);
  EXPECT_EQ(ops::unary("exp", filled({4}, DType::Float16, DeviceType::CUDA)).dtype(), DType::Float32);  // float32 list
  // float64 is never cast: its own kernel runs.
  const Tensor d = filled({2, 2}, DType::Float64, DeviceType::CUDA);
  EXPECT_EQ(ops::mm(d, d).dtype(), DType::Float64);
}

TEST_F(Autocast, PoliciesDifferPerDeviceType) {
  using autocast::Policy;
  EXPECT_EQ(autocast::policy("conv_transpose2d", DeviceType::CPU), Policy::Float32);
  EXPECT_EQ(autocast::policy("conv_transpose2d", DeviceType::CUDA), Policy::Lower);
  EXPECT_EQ(autocast::policy("softmax", DeviceType::CPU), Policy::None);
  EXPECT_EQ(autocast::policy("softmax", DeviceType::CUDA), Policy::Float32);
  EXPECT_EQ(autocast::policy("cat", DeviceType::CPU), Policy::Promote);
  EXPECT_EQ(autocast::policy("cat", DeviceType::CUDA), Policy::None);
  EXPECT_EQ(autocast::policy("binary_cross_entropy", DeviceType::CUDA), Policy::Banned);
  EXPECT_EQ(autocast::policy("relu", DeviceType::CUDA), Policy::None);
}

TEST_F(Autocast, OnlyTheEnabledDeviceTypeCasts) {
  autocast::set_enabled(DeviceType::CUDA, true);
  // CPU tensors under CUDA autocast: untouched (the CPU has no float32 mm kernel here).
  const Tensor c = filled({2, 2}, DType::Float32, DeviceType::CPU);
  EXPECT_THROW(ops::mm(c, c), NotImplementedError);
  autocast::set_enabled(DeviceType::CPU, true);
  EXPECT_EQ(ops::mm(c, c).dtype(), DType::BFloat16);
}

TEST_F(Autocast, ScopeExcludesItsDeviceTypeAndRestores) {
  autocast::set_enabled(DeviceType::CUDA, true);
  const Tensor a = filled({2, 2}, DType::Float32, DeviceType::CUDA);
  {
    autocast::OpScope cast{"mm", {a, a}};
    ASSERT_TRUE(cast);
    EXPECT_EQ(cast[0].dtype(), DType::Float16);
    EXPECT_FALSE(autocast::is_enabled(DeviceType::CUDA));  // inside the op
  }
  EXPECT_TRUE(autocast::is_enabled(DeviceType::CUDA));
  {
    autocast::OpScope unlisted{"relu", {a}};
    EXPECT_FALSE(unlisted);
    EXPECT_TRUE(autocast::is_enabled(DeviceType::CUDA));
  }
  EXPECT_THROW((autocast::OpScope{"binary_cross_entropy", {a, a}}), Error);
  EXPECT_TRUE(autocast::is_enabled(DeviceType::CUDA));  // a throwing scope restores nothing it did not take
  // A promote op with an unexpected floating type throws before it takes the device type.
  const Tensor bf = filled({2}, DType::BFloat16, DeviceType::CUDA);
  EXPECT_THROW((autocast::OpScope{"addcmul", {filled({2}, DType::Float16, DeviceType::CUDA), bf, bf}}), Error);
  EXPECT_TRUE(autocast::is_enabled(DeviceType::CUDA));
}

TEST_F(Autocast, DisabledGuardTurnsEverythingOff) {
  autocast::set_enabled(DeviceType::CPU, true);
  autocast::set_enabled(DeviceType::CUDA, true);
  {
    autocast::DisabledGuard off;
    EXPECT_FALSE(autocast::active());
  }
  EXPECT_TRUE(autocast::is_enabled(DeviceType::CPU) && autocast::is_enabled(DeviceType::CUDA));
}

TEST_F(Autocast, ParameterCastsAreCachedPerRegion) {
  autocast::set_enabled(DeviceType::CUDA, true);
  const Tensor w = filled({2, 2}, DType::Float32, DeviceType::CUDA);
  autograd::set_requires_grad(w, true);
  const Tensor x = filled({2, 2}, DType::Float32, DeviceType::CUDA);
  Tensor first, again, plain;
  {
    autocast::OpScope cast{"mm", {x, w}};
    first = cast[1];
    plain = cast[0];
  }
  {
    autocast::OpScope cast{"mm", {x, w}};
    again = cast[1];
    EXPECT_FALSE(cast[0].is_same(plain));  // not a parameter: cast again
  }
  EXPECT_TRUE(first.is_same(again));
  autocast::set_cache_enabled(false);
  {
    autocast::OpScope cast{"mm", {x, w}};
    EXPECT_FALSE(cast[1].is_same(first));
  }
  autocast::set_cache_enabled(true);
  autocast::clear_cache();
  {
    autocast::OpScope cast{"mm", {x, w}};
    EXPECT_FALSE(cast[1].is_same(first));
  }
}

TEST_F(Autocast, StateIsPerThread) {
  autocast::set_enabled(DeviceType::CPU, true);
  bool other = true;
  std::thread([&] { other = autocast::active(); }).join();
  EXPECT_FALSE(other);
  EXPECT_TRUE(autocast::active());
}
