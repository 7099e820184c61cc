// A plugin whose registration throws halfway, after registering a kernel, a device backend, a
// communicator and a thread-count hook. PLUGFLOW_PLUGIN's catch-all turns the exception into a
// message that the loader must report, and registration being all-or-nothing, none of what it
// registered before throwing may become live.
#include <plugflow/plugin.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "fake_device.h"

namespace {

// Each aborts: reaching one means part of a failed registration went live.
void kernel_must_not_run(plugflow::KernelContext&) { std::abort(); }

}  // namespace

PLUGFLOW_PLUGIN("test_throws", "0.0.1") {
  reg.kernel("add", plugflow::DeviceType::CPU, {plugflow::DType::Float32, plugflow::DType::Float64},
             &kernel_must_not_run, plugflow::Priority::Optimized);
  reg.device(std::make_shared<pf_test::FakeCudaBackend>());
  reg.communicator("test_throws_ccl", plugflow::DeviceType::CPU,
                   [](const plugflow::Rendezvous&) -> std::unique_ptr<plugflow::Communicator> { std::abort(); });
  reg.on_set_num_threads([](int) { std::abort(); });
  throw std::runtime_error("boom from test plugin");
}
