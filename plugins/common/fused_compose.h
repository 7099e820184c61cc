// The fused ops of nn.Graph's passes (docs/kernels.md, "Fused ops") composed from the plain ops'
// kernels of the calling kernel's device (the dispatcher's choice for its device and dtype): the
// same kernels in the same order as the unfused graph, so results are bit-identical to it. Each
// plugin registers these where it has no kernel of its own that does better (the CPU: the float64
// path and oneDNN's fallback; CUDA: every dtype, after the cuDNN / cuBLAS product). Compiled into
// each plugin that uses it (plugins never link each other).
#pragma once
#include <string>

#include "plugflow/kernel.h"

namespace plugflow::fused_compose {

// conv2d_fused: the convolution (with its bias), then the addend and the activation.
void conv2d_fused_native(KernelContext& ctx);
// mm_fused: the product, then bias, addend (and save_pre) and the activation.
void mm_fused_native(KernelContext& ctx);
// fold_conv_bn: w' = w * s and b' = (b - mean) * s + beta with s = gamma / sqrt(var + eps) per
// output channel, in double, rounded once to the dtype (float32, float64). A one-off of graph
// compilation: a device's operands are computed through host copies.
void fold_conv_bn_native(KernelContext& ctx);
// out = act(result + bias + addend) with the device's add and activation kernels (bias: a (N)
// vector added to every row of a (M, N) result; bias and addend may be null, activation "none").
// `out` may be `result` or the addend's memory (exactly), not overlap them otherwise.
void fused_epilogue(const KernelContext& ctx, const Tensor& result, const Tensor* bias, const Tensor* addend,
                    const std::string& activation, const Tensor& out);

}  // namespace plugflow::fused_compose
