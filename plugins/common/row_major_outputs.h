// Kernels that write row-major outputs, in calls where the core asked for another layout
// (channels-last results: docs/kernels.md, "Memory formats"). Shared by the CPU and CUDA plugins.
#pragma once
#include "plugflow/kernel.h"

namespace plugflow {

// Runs `kernel` with every non-contiguous output replaced by a contiguous temporary, then
// copies the temporaries into the call's outputs with the device's copy kernel. A call whose
// outputs are all contiguous runs `kernel` directly.
void run_with_row_major_outputs(KernelContext& ctx, KernelFn kernel);

template <KernelFn kernel>
void with_row_major_outputs(KernelContext& ctx) {
  run_with_row_major_outputs(ctx, kernel);
}

// Runs `kernel` on row-major copies of the channels-last inputs (one copy of an input passed
// twice), its outputs as run_with_row_major_outputs does. Only for kernels that write no input
// in place that could be channels last (a batch norm's running statistics are 1-d).
void run_with_row_major_operands(KernelContext& ctx, KernelFn kernel);

template <KernelFn kernel>
void with_row_major_operands(KernelContext& ctx) {
  run_with_row_major_operands(ctx, kernel);
}

}  // namespace plugflow
