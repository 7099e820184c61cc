// The fused ops of nn.Graph's passes (docs/kernels.md, "Fused ops"), the plugin's own kernels:
// the float64 path, and the fallback of the oneDNN kernels (onednn/conv.cpp, onednn/fused.cpp)
// for what oneDNN does not take.
//
// conv2d_fused and mm_fused are composed from the plain op's kernel and the add and activation
// kernels (plugins/common/fused_compose.h): bit-identical to the unfused graph; the gain of these
// kernels is one node instead of three, the oneDNN kernels' is the epilogue done in registers.
// fold_conv_bn is there too; batch_norm_fused and batch_norm_relu_backward live with batch norm
// (norm.cpp).
#include "kernels.h"
#include "opdefs.h"

namespace plugflow::cpu {

void register_fused_kernels(Registrar& reg) {
  const auto floats = {DType::Float32, DType::Float64};
  reg.kernel("conv2d_fused", DeviceType::CPU, floats, conv2d_fused_native);
  reg.kernel("mm_fused", DeviceType::CPU, floats, mm_fused_native);
  // core/opdefs/fused.yaml names the kernel function and dtypes of the ops not registered above.
  using fused_compose::fold_conv_bn_native;
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) reg.kernel(name, DeviceType::CPU, {PF_OPDEFS_UNPAREN cpu_dtypes}, fn);
  PF_OPDEFS_FUSED_KERNELS(PF_X)
#undef PF_X
}

}  // namespace plugflow::cpu
