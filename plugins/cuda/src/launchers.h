// What the CUDA translation units (.cu) offer the host layer (plugin.cpp, matmul.cpp).
// Plain C++ declarations only: no CUDA or Boost headers, so both compilers read it.
#pragma once
#include <cstdint>
#include <vector>

#include "plugflow/dtype.h"
#include "plugflow/kernel.h"

namespace plugflow::cuda {

struct KernelScope;  // kernel_common.h

// One op's CUDA kernel and the dtypes it is registered for.
struct KernelDef {
  const char* op;
  std::vector<DType> dtypes;
  KernelFn fn;
};

std::vector<KernelDef> copy_kernels();     // copy.cu: fill copy arange linspace
std::vector<KernelDef> random_kernels();   // random.cu: uniform normal randint
std::vector<KernelDef> binary_kernels();   // binary.cu: arithmetic, bitwise, logical, compare
std::vector<KernelDef> unary_kernels();    // unary.cu (includes unary_math_kernels)
std::vector<KernelDef> unary_math_kernels();  // unary_math.cu: float math and activations
std::vector<KernelDef> reduce_kernels();   // reduce.cu: sum prod mean amax amin max_dim min_dim argmax argmin
std::vector<KernelDef> reduction_extra_kernels();  // reduction_extra.cu: var_mean norm all any, the ops of core/opdefs/along_dim.yaml
std::vector<KernelDef> shape_kernels();    // shape.cu: sort topk tril triu flip pad unique _take_along_dim _scatter_add_along_dim
std::vector<KernelDef> indexing_kernels(); // indexing_ops.cu: index index_put where nonzero
std::vector<KernelDef> math_kernels();     // math.cu: clamp lerp addcmul addcdiv
std::vector<KernelDef> matmul_kernels();   // matmul.cpp: mm bmm (cuBLAS + integer kernel)
std::vector<KernelDef> conv_kernels();     // conv.cpp: conv2d and its gradients (cuDNN)
std::vector<KernelDef> pool_kernels();     // pool.cu: max/avg/adaptive pooling 2-d and 3-d, nearest/bilinear/bicubic upsampling
std::vector<KernelDef> norm_kernels();     // norm.cu: batch/layer/group norm (+ backward), embedding (+ backward), dropout
std::vector<KernelDef> fused_kernels();    // fused.cpp: conv2d_fused mm_fused batch_norm_fused batch_norm_relu_backward fold_conv_bn
std::vector<KernelDef> optim_kernels();    // optim.cu: sgd/adam steps (single and multi-tensor), GradScaler's unscale and update
std::vector<KernelDef> grid_sample_kernels();  // grid_sample.cu: grid_sampler_2d/3d (+ backward)
std::vector<KernelDef> vision_kernels();   // vision.cu: nms roi_align roi_pool ps_roi_align ps_roi_pool deform_conv2d (+ backward)
std::vector<KernelDef> lstsq_kernels();    // lstsq.cpp: linalg_lstsq (cuSOLVER QR + cuBLAS trsm)

// dst = src cast to dst's dtype; same shape, any strides, same CUDA device. Enqueued on `stream`.
void launch_copy(const Tensor& dst, const Tensor& src, void* stream);

// Solves op(R) X = B in place for an upper-triangular column-major n x n R (lda) and the n x nrhs
// column-major B (ldb), op(R) = R or R^T; float32 or float64, cuBLAS's trsm on the scope's
// stream (matmul.cpp; linalg_lstsq calls it).
void triangular_solve(DType dtype, const KernelScope& scope, bool transpose, int n, int nrhs, const void* a, int lda,
                      void* b, int ldb);

// C (M x N) = op(A) (M x K) @ op(B) (K x N) + beta * C for row-major float32 or float64
// matrices, each operand read transposed when its flag is set, with BLAS's leading dimensions
// (the CPU plugin's gemm, plugins/cpu/src/blas.h): cuBLAS's GEMM in the dtype's own precision
// on the scope's stream (matmul.cpp; deform_conv2d calls it).
void gemm(DType dtype, const KernelScope& scope, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
          const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc);

// out[b] = a[b] @ b[b] for the integer dtypes (no BLAS has them): a (B,M,K), b (B,K,N) with any
// element strides (batch stride 0 allowed), out (B,M,N) with any strides. Accumulates in
// 64 bits and wraps to the dtype like the CPU kernel.
void launch_integer_bmm(const Tensor& out, const Tensor& a, const Tensor& b, void* stream);

}  // namespace plugflow::cuda
