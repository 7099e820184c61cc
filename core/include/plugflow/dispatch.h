// The dispatcher: meta -> allocate outputs -> pick a kernel -> run it.
#pragma once
#include <span>
#include <vector>

#include "plugflow/kernel.h"

namespace plugflow {

// The kernel for (op, device type, dtype): the first provider in the config's
// kernels.prefer list that has one, else the highest-priority registration. Cached.
// Throws NotImplementedError naming the op, device, dtype and what is registered.
PF_API KernelFn find_kernel(const OpDef& op, DeviceType device, DType dtype);
// Which provider find_kernel would choose (for plugflow.info); empty when none.
PF_API std::string chosen_provider(const OpDef& op, DeviceType device, DType dtype);

// Runs the meta function, allocates the outputs and runs the kernel.
PF_API std::vector<Tensor> call_op(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs = {});
// Same, writing into caller-provided outputs (in-place ops, out=). Their shapes and dtypes
// must equal the meta function's (ValueError/TypeError otherwise).
PF_API void call_op_out(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                        std::span<Tensor> outputs);

}  // namespace plugflow
