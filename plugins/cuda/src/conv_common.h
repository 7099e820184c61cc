// What the cuDNN convolutions share: the plain ops of conv.cpp (cuDNN's convolution API) and the
// fused conv2d_fused of cudnn_fused_conv.cpp (cuDNN's graph API). Operand layouts and copies,
// cuDNN's data types, the problem key of the algorithm cache and of `plugflow.info --algos`,
// the per-device AlgoSelector (one cache section per cuDNN release and GPU model) and the
// search strategy a call asks for. Host code (g++).
#pragma once
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "algo_search.h"
#include "plugflow/kernel.h"
#include "plugflow/tensor.h"

namespace plugflow::cuda {

// cuDNN's data type of the operands and of the arithmetic: float16 / bfloat16 data with float
// accumulation (as PyTorch), float32 in float, float64 in double.
struct CudnnTypes {
  cudnnDataType_t data, compute;
};
CudnnTypes cudnn_types(DType t);

// `v` as cuDNN's int, or an error naming `what` when it does not fit.
int checked_int(int64_t v, const char* what);

// Packed strides of (N, C, spatial...) in NC(D)HW order, or N(D)HWC (channels-last) order.
Shape packed_strides(const Shape& sizes, bool channels_last);

// Whether `t` has these strides wherever they matter (a size-1 dim's stride never addresses).
bool has_strides(const Tensor& t, const Shape& strides);

// An operand as cuDNN reads or writes it: the tensor itself when packed NC(D)HW or N(D)HWC,
// else a contiguous copy (an output: a contiguous temporary the caller copies back).
struct Image {
  Tensor tensor;  // what cuDNN sees
  bool nhwc = false;
  bool copied = false;
};
// The layout cuDNN will see `t` in, before any copy is made (`copied`: one is needed, and
// `tensor` is still `t`).
Image image_layout(const Tensor& t);
// image_layout(t) with the copy made (an input's values copied in; an output's left to the caller).
Image image_operand(const Tensor& t, bool is_output, cudaStream_t stream);
// A weight for the convolution API, whose filter descriptor takes no strides: packed NC(D)HW.
Image weight_operand(const Tensor& t, bool is_output, cudaStream_t stream);

// A convolution problem's geometry and precision, as the problem key names it.
struct ConvProblem {
  DType dtype;
  bool allow_tf32;
  size_t workspace_limit;
  Shape stride, padding, dilation;
  int64_t groups;
};

// "float32 tf32 in=2x3x9x11 out=2x4x9x11 k=3x3 s=1x1 p=1x1 d=1x1 g=1 x:nhwc ws<=4096M": the
// key of the algorithm cache and of `plugflow.info --algos` (layouts of x, y and, when
// `weight_layout`, of w too).
std::string conv_problem_key(const ConvProblem& p, const Image& x, const Image& w, const Image& y,
                             bool weight_layout = false);

// The AlgoSelector of device `device`: its cache file section is named after the cuDNN release
// and the GPU model, so a file from another GPU or release is not trusted.
algo_search::AlgoSelector& cudnn_selector(int device);

// The search strategy of a call: an nn.Graph may choose its own (the `algo_search` attribute),
// else the config's optimizations.conv_algo_search.
algo_search::Strategy conv_strategy(const KernelContext& ctx);

}  // namespace plugflow::cuda
