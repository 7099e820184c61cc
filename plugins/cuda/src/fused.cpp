// The fused convolution / product ops of nn.Graph's passes (docs/graph.md, the paragraph "Fused ops") on
// CUDA. conv2d_fused runs as one cuDNN graph (convolution with the bias, addend and activation
// in its epilogue, cudnn_fused_conv.cpp) where cuDNN's fused runtime takes the problem, and
// composed otherwise, as mm_fused always is: the plugin's plain kernels (cuDNN's convolution or
// cuBLAS's product, then the add and activation kernels) in the unfused graph's order
// (plugins/common/fused_compose.h), bit-identical to it. The fused batch norms are kernels of
// their own (norm.cu).
#include "cudnn_fused_conv.h"
#include "fused_compose.h"
#include "launchers.h"
#include "opdefs.h"

namespace plugflow::cuda {
namespace {

void conv2d_fused_kernel(KernelContext& ctx) {
  if (!run_conv2d_fused_cudnn(ctx)) fused_compose::conv2d_fused_native(ctx);
}

}  // namespace

std::vector<KernelDef> fused_kernels() {
  // The CPU plugin's dtypes for each op (bfloat16 where its graph amp fuses), and float16 for
  // the convolution: CUDA's AMP graphs are float16 by default, the dtype cuDNN's fusion serves best.
  const std::vector<DType> floats = {DType::Float32, DType::Float64};
  const std::vector<DType> conv_dtypes = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
  using fused_compose::fold_conv_bn_native;
  return {
      {"conv2d_fused", conv_dtypes, conv2d_fused_kernel},
      {"mm_fused", floats, fused_compose::mm_fused_native},
      // core/opdefs/fused.yaml names the kernel function and dtypes of the ops not registered above.
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) {name, {PF_OPDEFS_UNPAREN cuda_dtypes}, fn},
      PF_OPDEFS_FUSED_KERNELS(PF_X)
#undef PF_X
  };
}

}  // namespace plugflow::cuda
