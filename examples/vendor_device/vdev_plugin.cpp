// libplugflow_vdev.so: an out-of-tree plugin that adds a whole device type, "vdev", to
// plugflow without rebuilding it. The device is host memory behind the plugin's own allocator
// (a stand-in for a vendor accelerator's memory), with four float32 kernels: add, mul, relu,
// fill. Everything else either raises "no kernel for op '...' on device type 'vdev'" or, when
// the config lists vdev under kernels.cpu_fallback (vdev.yaml), runs on the CPU with its
// copies counted (plugflow.info, plugflow._C.cpu_fallback_stats()).
//
// `plugflow_vdev_stats(what)` (extern "C") reports, for tests: "allocated" live bytes,
// "allocations" so far, "kernel_calls" of the four kernels.
#include <plugflow/layout.h>
#include <plugflow/plugin.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

std::atomic<int64_t> g_allocated{0}, g_peak{0}, g_allocations{0}, g_kernel_calls{0};

// The device type id this process gave "vdev", set at registration.
plugflow::DeviceType g_type = plugflow::DeviceType::CPU;

class VdevBackend : public plugflow::DeviceBackend {
 public:
  plugflow::DeviceType type() const override { return g_type; }
  int device_count() const override { return 1; }
  void* allocate(int, size_t nbytes) override {
    void* p = std::aligned_alloc(64, (nbytes + 63) / 64 * 64 + 64);
    if (p == nullptr) throw std::bad_alloc();
    g_allocations.fetch_add(1);
    const int64_t now = g_allocated.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
    return p;
  }
  void deallocate(int, void* ptr, size_t nbytes) override {
    std::free(ptr);
    g_allocated.fetch_sub(static_cast<int64_t>(nbytes));
  }
  void copy_to_host(int, void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy_from_host(int, void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy_on_device(int, void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void synchronize(int) override {}
  size_t allocated_bytes(int) const override { return static_cast<size_t>(g_allocated.load()); }
  size_t peak_allocated_bytes(int) const override { return static_cast<size_t>(g_peak.load()); }
  void reset_peak(int) override { g_peak.store(g_allocated.load()); }
};

inline float& at(char* base, int64_t byte_stride, int64_t k) { return *reinterpret_cast<float*>(base + k * byte_stride); }

int64_t inner(const plugflow::StridedLayout& L, int operand) {
  return L.ndim == 0 ? 0 : L.byte_strides[operand][L.ndim - 1];
}

// out = f(inputs...) elementwise over any strides (the core broadcast the inputs already).
template <int NumInputs, typename F>
void elementwise(plugflow::KernelContext& ctx, F f) {
  g_kernel_calls.fetch_add(1);
  plugflow::Tensor& out = ctx.output(0);
  std::vector<const plugflow::Tensor*> operands{&out};
  for (int i = 0; i < NumInputs; ++i) operands.push_back(&ctx.input(i));
  const plugflow::StridedLayout L = plugflow::make_layout(operands);
  int64_t s[NumInputs + 1];
  for (int i = 0; i <= NumInputs; ++i) s[i] = inner(L, i);
  plugflow::for_each_run(L, 0, plugflow::num_runs(L), [&](char* const* p, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
      if constexpr (NumInputs == 0) at(p[0], s[0], k) = f();
      else if constexpr (NumInputs == 1) at(p[0], s[0], k) = f(at(p[1], s[1], k));
      else at(p[0], s[0], k) = f(at(p[1], s[1], k), at(p[2], s[2], k));
    }
  });
}

// a + alpha * b rounded once (one fused multiply-add), as the kernel contract says for add
// (docs/kernels.md): the same bits as the CPU plugin and PyTorch.
void add_f32(plugflow::KernelContext& ctx) {
  const float alpha = ctx.attrs.has("alpha") ? ctx.attr<plugflow::Scalar>("alpha").to<float>() : 1.0f;
  elementwise<2>(ctx, [alpha](float a, float b) { return std::fma(alpha, b, a); });
}
void mul_f32(plugflow::KernelContext& ctx) {
  elementwise<2>(ctx, [](float a, float b) { return a * b; });
}
void relu_f32(plugflow::KernelContext& ctx) {  // NaN and -0.0 kept, as PyTorch's relu
  elementwise<1>(ctx, [](float a) { return a < 0.0f ? 0.0f : a; });
}
void fill_f32(plugflow::KernelContext& ctx) {
  const float v = ctx.attr<plugflow::Scalar>("value").to<float>();
  elementwise<0>(ctx, [v] { return v; });
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int64_t plugflow_vdev_stats(const char* what) {
  if (std::strcmp(what, "allocated") == 0) return g_allocated.load();
  if (std::strcmp(what, "allocations") == 0) return g_allocations.load();
  if (std::strcmp(what, "kernel_calls") == 0) return g_kernel_calls.load();
  return -1;
}

PLUGFLOW_PLUGIN("vdev", "1.0.0") {
  using plugflow::DType;
  g_type = reg.device_type("vdev");  // claims the name; its id is this process's
  reg.device(std::make_shared<VdevBackend>());
  reg.kernel("add", g_type, {DType::Float32}, &add_f32);
  reg.kernel("mul", g_type, {DType::Float32}, &mul_f32);
  reg.kernel("relu", g_type, {DType::Float32}, &relu_f32);
  reg.kernel("fill", g_type, {DType::Float32}, &fill_f32);
}
