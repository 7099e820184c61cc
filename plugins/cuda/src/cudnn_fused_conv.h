// conv2d_fused (docs/kernels.md, "Fused ops") as one cuDNN graph: convolution, bias, addend and
// activation in one kernel of cuDNN's fused runtime, where cuDNN has an engine for the problem.
// Host code (g++).
#pragma once
#include "plugflow/kernel.h"

namespace plugflow::cuda {

// Runs the conv2d_fused call `ctx` as a cuDNN operation graph and returns true, or returns false
// when the call is to run composed (fused_compose.h): a call conv_fusion::refusal turns down,
// or a problem for which cuDNN finalizes no graph or no permitted plan within the workspace
// limit. The per-problem answer (the plan or "composed") is decided once and kept in memory.
bool run_conv2d_fused_cudnn(KernelContext& ctx);

}  // namespace plugflow::cuda
