// Kernels: what a plugin registers to compute one op on one device type for some dtypes.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "plugflow/export.h"
#include "plugflow/op.h"

namespace plugflow {

enum class Priority : int { Fallback = 0, Default = 1, Optimized = 2 };

// What a kernel sees. Outputs are allocated already with the meta function's shapes and
// dtypes (or are the caller's tensors for in-place and out= calls); inputs may have any
// strides. The kernel's key dtype is the first input's dtype (the first output's when the
// op has no inputs).
struct KernelContext {
  const OpDef& op;
  std::span<const Tensor> inputs;
  std::span<Tensor> outputs;
  const Attrs& attrs;
  Device device;
  void* stream = nullptr;  // the device's current stream (nullptr on CPU)

  const Tensor& input(size_t i) const { return inputs[i]; }
  Tensor& output(size_t i) const { return outputs[i]; }
  template <typename T>
  const T& attr(std::string_view name) const { return attrs.get<T>(name); }

  // nn.Graph's channel-blocked activations (docs/graph.md, "Channel-blocked activations"): the
  // blocked_layout pass lists, in the attributes `blocked_inputs` / `blocked_outputs`, the
  // operands it keeps in the nChw16c layout: an (N, C, H, W) float32 tensor, C a multiple of
  // kChannelBlock, described as dense row-major but holding element (n, c, h, w) at
  // ((n * C/16 + c/16) * H * W + h * W + w) * 16 + c % 16. The pass sets them only on ops whose
  // kernels read them (convolutions and batch norms of the built-in CPU plugin).
  static constexpr int64_t kChannelBlock = 16;
  bool blocked_input(int64_t i) const { return listed(attrs, "blocked_inputs", i); }
  bool blocked_output(int64_t i) const { return listed(attrs, "blocked_outputs", i); }

 private:
  static bool listed(const Attrs& a, std::string_view name, int64_t i) {
    if (!a.has(name)) return false;
    for (int64_t v : a.get<Shape>(name))
      if (v == i) return true;
    return false;
  }
};

struct KernelRecord {
  std::string op;
  DeviceType device;
  DType dtype;
  std::string provider;
  Priority priority;
  KernelFn fn;
};

// Every registered kernel, for plugflow.info and error messages.
PF_API std::vector<KernelRecord> registered_kernels();
PF_API std::string_view priority_name(Priority p);

}  // namespace plugflow
