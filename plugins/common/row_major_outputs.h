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

}  // namespace plugflow
