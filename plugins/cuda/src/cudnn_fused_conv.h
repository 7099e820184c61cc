// conv2d_fused (docs/graph.md, the paragraph "Fused ops") as one cuDNN graph: convolution, bias, addend and
// activation in one kernel of cuDNN's fused runtime, where cuDNN has an engine for the problem.
// Host code (g++).
#pragma once
#include <optional>
#include <string>

#include "plugflow/kernel.h"

namespace plugflow::cuda {

// Runs the conv2d_fused call `ctx` as a cuDNN operation graph and returns true, or returns false
// when the call is to run composed (fused_compose.h): a call conv_fusion::refusal turns down,
// or a problem for which cuDNN finalizes no graph or no permitted plan within the workspace
// limit. The per-problem answer (the plan or "composed") is decided once and kept in memory.
bool run_conv2d_fused_cudnn(KernelContext& ctx);

// Builds and finalizes the cuDNN operation graph of the conv2d_fused call `ctx` without planning
// or running it: nothing when cuDNN accepts the graph, cuDNN's reason when it reports it
// unsupported, a DeviceError for any other refusal. cuDNN's descriptors are host objects, so
// this checks the graph's descriptors against the loaded cuDNN on machines without a GPU
// (tests/cpp/cuda/test_cudnn_graph.cpp); the operands' memory is not touched.
std::optional<std::string> check_conv2d_fused_graph(const KernelContext& ctx);

}  // namespace plugflow::cuda
