// A well-formed test plugin. It registers an "add" kernel for CPU float32 that ignores its
// inputs and writes TEST_PLUGIN_ADD_VALUE into every output element, so a test can tell from
// the result which provider the dispatcher picked. Built several times (test_good, test_second,
// test_late) with different names and values, for preference and load-order tests.
#include <plugflow/layout.h>
#include <plugflow/plugin.h>

#include <atomic>

#ifndef TEST_PLUGIN_NAME
#error "TEST_PLUGIN_NAME must be defined by tests/plugins/meson.build"
#endif

namespace {

std::atomic<int> g_last_thread_count{0};

void add_marker(plugflow::KernelContext& ctx) {
  plugflow::Tensor& out = ctx.output(0);
  const plugflow::StridedLayout layout = plugflow::make_layout({&out});
  plugflow::for_each_run(layout, 0, plugflow::num_runs(layout), [&](char* const* ptrs, int64_t n) {
    const int64_t stride = layout.ndim == 0 ? 0 : layout.byte_strides[0][layout.ndim - 1];
    for (int64_t i = 0; i < n; ++i) *reinterpret_cast<float*>(ptrs[0] + i * stride) = TEST_PLUGIN_ADD_VALUE;
  });
}

}  // namespace

// Lets tests check that a plugin sees the thread count (also when loaded after it was set).
extern "C" __attribute__((visibility("default"))) int plugflow_test_last_thread_count() {
  return g_last_thread_count.load();
}

PLUGFLOW_PLUGIN(TEST_PLUGIN_NAME, "1.2.3") {
  reg.kernel("add", plugflow::DeviceType::CPU, {plugflow::DType::Float32}, &add_marker, plugflow::Priority::Optimized);
  reg.on_set_num_threads([](int n) { g_last_thread_count.store(n); });
}
