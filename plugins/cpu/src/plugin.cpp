// The CPU plugin's entry point: the "cpu" device, every kernel of docs/kernels.md for the
// CPU, and the thread-count hook (OpenMP and OpenBLAS).
#include "device.h"
#include "kernels.h"
#include "parallel.h"
#include "plugflow/plugin.h"

PLUGFLOW_PLUGIN("cpu", "0.1.0") {
  using namespace plugflow::cpu;
  reg.device(make_cpu_backend());
  register_copy_fill_kernels(reg);
  register_binary_kernels(reg);
  register_unary_kernels(reg);
  register_reduce_kernels(reg);
  register_matmul_kernels(reg);
  register_random_kernels(reg);
  register_indexing_kernels(reg);
  register_shape_kernels(reg);
  register_math_kernels(reg);
  register_reduction_kernels(reg);
  register_norm_kernels(reg);
  register_conv_kernels(reg);
  register_onednn_conv_kernels(reg);
  register_onednn_pool_kernels(reg);
  register_onednn_layer_norm_kernels(reg);
  register_onednn_softmax_kernels(reg);
  register_fused_kernels(reg);
  register_onednn_fused_kernels(reg);
  register_onednn_matmul_kernels(reg);
  register_pool_kernels(reg);
  register_grid_sample_kernels(reg);
  register_vision_kernels(reg);
  register_linalg_kernels(reg);
  register_linalg_decomposition_kernels(reg);
  register_optim_kernels(reg);
  reg.on_set_num_threads([](int n) { set_num_threads(n); });
  install_fork_handler();
}
