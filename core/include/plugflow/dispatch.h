// The dispatcher: meta -> allocate outputs -> pick a kernel -> run it.
#pragma once
#include <map>
#include <span>
#include <string>
#include <vector>

#include "plugflow/kernel.h"

namespace plugflow {

// The kernel for (op, device type, dtype): the first provider in the config's
// kernels.prefer list that has one, else the highest-priority registration. Cached.
// Throws NotImplementedError naming the op, device, dtype and what is registered.
PF_API KernelFn find_kernel(const OpDef& op, DeviceType device, DType dtype);
// Which provider find_kernel would choose (for plugflow.info); empty when none.
PF_API std::string chosen_provider(const OpDef& op, DeviceType device, DType dtype);

// Ops of a device type listed in the config's kernels.cpu_fallback that had no kernel there and
// ran on the CPU: calls, and bytes copied to the CPU and back, per op.
struct CpuFallbackStats {
  int64_t calls = 0;
  int64_t bytes_to_cpu = 0;
  int64_t bytes_from_cpu = 0;
};
PF_API std::map<std::string, CpuFallbackStats> cpu_fallback_stats();
PF_API void reset_cpu_fallback_stats();

// Runs the meta function, allocates the outputs and runs the kernel.
PF_API std::vector<Tensor> call_op(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs = {});
// Same, writing into caller-provided outputs (in-place ops, out=). Their shapes and dtypes
// must equal the meta function's (ValueError/TypeError otherwise).
PF_API void call_op_out(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                        std::span<Tensor> outputs);

}  // namespace plugflow
