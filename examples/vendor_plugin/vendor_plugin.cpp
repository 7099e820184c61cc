// libplugflow_vendor.so: an out-of-tree plugflow plugin. It is built against the installed
// SDK only (headers + libplugflow_core.so, found through pkg-config) and registers two CPU
// float32 kernels, `relu` and `add`, under the provider name "vendor" with
// Priority::Optimized. The dispatcher runs them only when the config's `kernels.prefer`
// puts "vendor" before the other providers that have these kernels.
//
// So that a test (or you) can see that these kernels ran, the plugin counts its calls:
//   - `plugflow_vendor_calls("relu")` / `plugflow_vendor_calls("add")` (extern "C") returns
//     how often each kernel ran in this process (`plugflow_vendor_calls(nullptr)`: both);
//   - with PLUGFLOW_VENDOR_LOG=1 in the environment each call prints one line to stderr:
//     `plugflow_vendor: relu float32 numel=6`.
#include <plugflow/layout.h>
#include <plugflow/plugin.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

std::atomic<int64_t> g_relu_calls{0};
std::atomic<int64_t> g_add_calls{0};

bool log_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("PLUGFLOW_VENDOR_LOG");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

void note_call(std::atomic<int64_t>& counter, const char* op, int64_t numel) {
  counter.fetch_add(1, std::memory_order_relaxed);
  if (log_enabled()) std::fprintf(stderr, "plugflow_vendor: %s float32 numel=%lld\n", op, static_cast<long long>(numel));
}

// Element k of a run: the run's base pointer plus k times the operand's innermost byte stride.
inline float& at(char* base, int64_t byte_stride, int64_t k) {
  return *reinterpret_cast<float*>(base + k * byte_stride);
}

int64_t inner_stride(const plugflow::StridedLayout& L, int operand) {
  return L.ndim == 0 ? 0 : L.byte_strides[operand][L.ndim - 1];
}

// out = max(a, 0), keeping NaN and -0.0 as PyTorch's relu (clamp_min) does. Inputs and output
// may have any strides (views, broadcasts, in-place): make_layout orders and merges the dims.
void relu_f32(plugflow::KernelContext& ctx) {
  plugflow::Tensor& out = ctx.output(0);
  const plugflow::Tensor& a = ctx.input(0);
  note_call(g_relu_calls, "relu", out.numel());
  const plugflow::StridedLayout L = plugflow::make_layout({&out, &a});
  const int64_t so = inner_stride(L, 0), sa = inner_stride(L, 1);
  plugflow::for_each_run(L, 0, plugflow::num_runs(L), [&](char* const* p, int64_t n) {
    if (so == sizeof(float) && sa == sizeof(float)) {  // contiguous run: a loop the compiler vectorizes
      float* o = reinterpret_cast<float*>(p[0]);
      const float* x = reinterpret_cast<const float*>(p[1]);
      for (int64_t k = 0; k < n; ++k) o[k] = x[k] < 0.0f ? 0.0f : x[k];
    } else {
      for (int64_t k = 0; k < n; ++k) {
        const float x = at(p[1], sa, k);
        at(p[0], so, k) = x < 0.0f ? 0.0f : x;
      }
    }
  });
}

// out = a + alpha * b. Broadcasting was done by the core: a and b have out's shape (a
// broadcast input arrives as a stride-0 view).
void add_f32(plugflow::KernelContext& ctx) {
  plugflow::Tensor& out = ctx.output(0);
  const plugflow::Tensor& a = ctx.input(0);
  const plugflow::Tensor& b = ctx.input(1);
  const float alpha = ctx.attrs.has("alpha") ? ctx.attr<plugflow::Scalar>("alpha").to<float>() : 1.0f;
  note_call(g_add_calls, "add", out.numel());
  const plugflow::StridedLayout L = plugflow::make_layout({&out, &a, &b});
  const int64_t so = inner_stride(L, 0), sa = inner_stride(L, 1), sb = inner_stride(L, 2);
  plugflow::for_each_run(L, 0, plugflow::num_runs(L), [&](char* const* p, int64_t n) {
    if (so == sizeof(float) && sa == sizeof(float) && sb == sizeof(float)) {
      float* o = reinterpret_cast<float*>(p[0]);
      const float* x = reinterpret_cast<const float*>(p[1]);
      const float* y = reinterpret_cast<const float*>(p[2]);
      for (int64_t k = 0; k < n; ++k) o[k] = x[k] + alpha * y[k];
    } else {
      for (int64_t k = 0; k < n; ++k) at(p[0], so, k) = at(p[1], sa, k) + alpha * at(p[2], sb, k);
    }
  });
}

}  // namespace

// How often each kernel of this plugin ran in this process: op "relu" or "add", or nullptr
// for the total. Unknown ops give -1.
extern "C" __attribute__((visibility("default"))) int64_t plugflow_vendor_calls(const char* op) {
  if (op == nullptr) return g_relu_calls.load() + g_add_calls.load();
  if (std::strcmp(op, "relu") == 0) return g_relu_calls.load();
  if (std::strcmp(op, "add") == 0) return g_add_calls.load();
  return -1;
}

// Defines the extern "C" entry point (plugflow_plugin_entry) the loader looks up; the body
// runs inside a catch-all, so an exception here becomes a PluginError, never a crash.
PLUGFLOW_PLUGIN("vendor", "1.0.0") {
  using plugflow::DeviceType;
  using plugflow::DType;
  using plugflow::Priority;
  reg.kernel("relu", DeviceType::CPU, {DType::Float32}, &relu_f32, Priority::Optimized);
  reg.kernel("add", DeviceType::CPU, {DType::Float32}, &add_f32, Priority::Optimized);
}
