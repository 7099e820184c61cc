// Kernel families of the CPU plugin; each file registers its own kernels.
#pragma once
#include <string>

#include "fused_compose.h"
#include "plugflow/plugin.h"

namespace plugflow::cpu {

void register_copy_fill_kernels(Registrar& reg);  // copy, fill, arange, linspace
void register_binary_kernels(Registrar& reg);     // arithmetic, bitwise, logical, compare
void register_unary_kernels(Registrar& reg);      // math, activations, predicates
void register_reduce_kernels(Registrar& reg);     // sum ... amin, max_dim ... argmin
void register_matmul_kernels(Registrar& reg);     // mm, bmm
void register_random_kernels(Registrar& reg);     // uniform, normal, randint
void register_indexing_kernels(Registrar& reg);   // index, index_put, where, nonzero
void register_math_kernels(Registrar& reg);       // clamp, lerp, addcmul, addcdiv
void register_reduction_kernels(Registrar& reg);  // var_mean, norm, all, any, the ops of core/opdefs/along_dim.yaml
void register_norm_kernels(Registrar& reg);       // batch/layer/group norm (+ backward), embedding (+ backward), dropout
void register_conv_kernels(Registrar& reg);       // conv2d/conv3d, their _grad_input and _grad_weight
void register_pool_kernels(Registrar& reg);       // max/avg/adaptive pooling (2-d, 3-d), upsampling and their backwards
void register_grid_sample_kernels(Registrar& reg);  // grid_sampler_2d/3d and their backwards
void register_vision_kernels(Registrar& reg);       // torchvision's nms, roi_align, roi_pool (+ backwards)
void register_linalg_kernels(Registrar& reg);       // linalg_lstsq (LAPACK)
void register_linalg_decomposition_kernels(Registrar& reg);  // linalg_solve, _cholesky, _slogdet, _qr, _svd, _eigh (LAPACK)
void register_optim_kernels(Registrar& reg);      // sgd_step_, adam_step_ (fused optimizer updates)
void register_shape_kernels(Registrar& reg);      // sort, topk, tril/triu, flip, pad, unique, gather/scatter-add along a dim
void register_fused_kernels(Registrar& reg);       // conv2d_fused, mm_fused, fold_conv_bn (nn.Graph's fusion passes)
void register_onednn_conv_kernels(Registrar& reg);  // conv2d (float32, bfloat16) and its gradients on oneDNN, Priority::Optimized
// The other oneDNN kernels (float32, Priority::Optimized over the plugin's own, which stay the
// float64 path and their fallback):
void register_onednn_pool_kernels(Registrar& reg);        // max_pool2d, avg_pool2d (+ backward)
void register_onednn_layer_norm_kernels(Registrar& reg);  // layer_norm (its backward is faster natively)
void register_onednn_softmax_kernels(Registrar& reg);     // softmax (log_softmax is more accurate natively)
void register_onednn_fused_kernels(Registrar& reg);       // mm_fused (conv2d_fused is with the convolutions)
void register_onednn_matmul_kernels(Registrar& reg);      // mm, bmm (bfloat16 only: float32 keeps sgemm)

// The im2col + BLAS conv kernels (2-d and 3-d): the float64 path and the oneDNN kernels' fallback.
void conv_im2col(KernelContext& ctx);
void conv_grad_input_im2col(KernelContext& ctx);
void conv_grad_weight_im2col(KernelContext& ctx);
// The fused ops composed from the plugin's plain kernels (plugins/common/fused_compose.h).
using fused_compose::conv2d_fused_native;
using fused_compose::fused_epilogue;
using fused_compose::mm_fused_native;
// The plugin's own kernels of the ops that also have oneDNN kernels: the float64 path and the
// oneDNN kernels' fallback.
void max_pool_native(KernelContext& ctx);
void avg_pool_native(KernelContext& ctx);
void avg_pool_backward_native(KernelContext& ctx);
void layer_norm_native(KernelContext& ctx);
void softmax_native(KernelContext& ctx);
void mm_native(KernelContext& ctx);
void bmm_native(KernelContext& ctx);

// F32(ctx) or F64(ctx) by the first input's dtype; NotImplementedError naming the op otherwise.
template <void (*F32)(const KernelContext&), void (*F64)(const KernelContext&)>
void dispatch_float32_64(const KernelContext& ctx) {
  switch (ctx.input(0).dtype()) {
    case DType::Float32: F32(ctx); break;
    case DType::Float64: F64(ctx); break;
    default: PF_THROW(NotImplementedError, "cpu '", ctx.op.name, "' supports float32 and float64, got ",
                      dtype_name(ctx.input(0).dtype()));
  }
}

}  // namespace plugflow::cpu
