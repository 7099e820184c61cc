// The fused convolution / product ops of nn.Graph's passes (docs/kernels.md, "Fused ops") on
// CUDA, composed from the plugin's plain kernels (plugins/common/fused_compose.h): cuDNN's
// convolution or cuBLAS's product, then the add and activation kernels, in the unfused graph's
// order, so results are bit-identical to it. The fused batch norms are kernels of their own
// (norm.cu). The gain is one graph node instead of three; an epilogue
// fused into the convolution (cuDNN's graph API) is the next step (docs/design.md).
#include "fused_compose.h"
#include "launchers.h"

namespace plugflow::cuda {

std::vector<KernelDef> fused_kernels() {
  // The CPU plugin's dtypes for each op (bfloat16 where its graph amp fuses).
  const std::vector<DType> floats = {DType::Float32, DType::Float64};
  const std::vector<DType> with_bf16 = {DType::BFloat16, DType::Float32, DType::Float64};
  return {
      {"conv2d_fused", with_bf16, fused_compose::conv2d_fused_native},
      {"mm_fused", floats, fused_compose::mm_fused_native},
      {"fold_conv_bn", floats, fused_compose::fold_conv_bn_native},
  };
}

}  // namespace plugflow::cuda
