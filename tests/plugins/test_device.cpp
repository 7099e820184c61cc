// A plugin that provides a device type (the fake CUDA backend of fake_device.h), an "add"
// kernel for it that writes 7 into every output element, and a communicator for it
// ("test_device_ccl", never created). Tests apply configs with and without it to check what
// plugflow::init replaces.
#include <plugflow/layout.h>
#include <plugflow/plugin.h>

#include <memory>

#include "fake_device.h"

namespace {

void add_seven(plugflow::KernelContext& ctx) {
  plugflow::Tensor& out = ctx.output(0);
  const plugflow::StridedLayout layout = plugflow::make_layout({&out});
  plugflow::for_each_run(layout, 0, plugflow::num_runs(layout), [&](char* const* ptrs, int64_t n) {
    const int64_t stride = layout.ndim == 0 ? 0 : layout.byte_strides[0][layout.ndim - 1];
    for (int64_t i = 0; i < n; ++i) *reinterpret_cast<float*>(ptrs[0] + i * stride) = 7.0f;
  });
}

}  // namespace

PLUGFLOW_PLUGIN("test_device", "0.0.1") {
  reg.device(std::make_shared<pf_test::FakeCudaBackend>());
  reg.kernel("add", plugflow::DeviceType::CUDA, {plugflow::DType::Float32}, &add_seven);
  reg.communicator("test_device_ccl", plugflow::DeviceType::CUDA,
                   [](const plugflow::Rendezvous&) -> std::unique_ptr<plugflow::Communicator> { return nullptr; });
}
