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
