// The CUDA plugin's entry point: the "cuda" device backend and every kernel of
// docs/kernels.md for CUDA. It registers even when no GPU is usable: the backend then
// reports 0 devices and why, so `cuda:0` fails with "no CUDA device: ..." instead of the
// plugin failing to load.
#include "device.h"
#include "launchers.h"
#include "plugflow/plugin.h"

PLUGFLOW_PLUGIN("cuda", "0.1.0") {
  using namespace plugflow;
  using namespace plugflow::cuda;
  reg.device(backend_ptr());
  for (auto* family : {&copy_kernels, &random_kernels, &binary_kernels, &unary_kernels, &reduce_kernels,
                       &reduction_extra_kernels, &shape_kernels, &indexing_kernels, &math_kernels, &matmul_kernels,
                       &conv_kernels, &norm_kernels, &pool_kernels, &fused_kernels, &optim_kernels,
                       &grid_sample_kernels, &vision_kernels, &lstsq_kernels})
    for (const KernelDef& k : (*family)())
      for (DType t : k.dtypes) reg.kernel(k.op, DeviceType::CUDA, {t}, k.fn);
}
