// cuDNN for the plugin's kernels: the library loaded on first use, a handle per device, and
// error checking. Host code (g++).
//
// cuDNN is loaded with dlopen, not linked, for the reason cuBLAS is (matmul.cpp): the default
// config loads this plugin on every machine, and one without cuDNN must still load it (the
// kernels that need cuDNN then raise a clear error). libcudnn.so.<major> is cuDNN 9's small
// front library; it loads its sub-libraries (cnn, ops, engines) itself when first needed.
#pragma once
#include <cudnn.h>

#include <mutex>
#include <string>

#include "cuda_check.h"

namespace plugflow::cuda {

// The entry points the plugin calls, as members named after them (X(name) below): the
// convolution API (conv.cpp) and the graph ("backend") API (cudnn_fused_conv.cpp).
#define PF_CUDNN_FUNCTIONS(X)                                                                               \
  X(cudnnGetVersion)                                                                                        \
  X(cudnnGetErrorString)                                                                                    \
  X(cudnnCreate)                                                                                            \
  X(cudnnSetStream)                                                                                         \
  X(cudnnCreateTensorDescriptor)                                                                            \
  X(cudnnDestroyTensorDescriptor)                                                                           \
  X(cudnnSetTensorNdDescriptor)                                                                             \
  X(cudnnCreateFilterDescriptor)                                                                            \
  X(cudnnDestroyFilterDescriptor)                                                                           \
  X(cudnnSetFilterNdDescriptor)                                                                             \
  X(cudnnCreateConvolutionDescriptor)                                                                       \
  X(cudnnDestroyConvolutionDescriptor)                                                                      \
  X(cudnnSetConvolutionNdDescriptor)                                                                        \
  X(cudnnSetConvolutionGroupCount)                                                                          \
  X(cudnnSetConvolutionMathType)                                                                            \
  X(cudnnGetConvolutionForwardAlgorithm_v7)                                                                 \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                                                            \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                                                          \
  X(cudnnGetConvolutionForwardAlgorithmMaxCount)                                                            \
  X(cudnnGetConvolutionBackwardDataAlgorithmMaxCount)                                                       \
  X(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount)                                                     \
  X(cudnnFindConvolutionForwardAlgorithmEx)                                                                 \
  X(cudnnFindConvolutionBackwardDataAlgorithmEx)                                                            \
  X(cudnnFindConvolutionBackwardFilterAlgorithmEx)                                                          \
  X(cudnnGetConvolutionForwardWorkspaceSize)                                                                \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize)                                                           \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize)                                                         \
  X(cudnnConvolutionForward)                                                                                \
  X(cudnnConvolutionBackwardData)                                                                           \
  X(cudnnConvolutionBackwardFilter)                                                                         \
  X(cudnnAddTensor)                                                                                         \
  X(cudnnBackendCreateDescriptor)                                                                           \
  X(cudnnBackendDestroyDescriptor)                                                                          \
  X(cudnnBackendSetAttribute)                                                                               \
  X(cudnnBackendGetAttribute)                                                                               \
  X(cudnnBackendFinalize)                                                                                   \
  X(cudnnBackendExecute)

struct Cudnn {
#define PF_CUDNN_MEMBER(name) decltype(&::name) name;
  PF_CUDNN_FUNCTIONS(PF_CUDNN_MEMBER)
#undef PF_CUDNN_MEMBER
};

// Loaded once, on the first call; DeviceError naming the library when it cannot be loaded (a
// later call tries again).
const Cudnn& cudnn();

// "9.19.0": the version of the loaded library.
std::string cudnn_version();

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* expr, const char* file, int line);

// The device's cuDNN handle, bound to `stream`, locked for one call: a handle is not safe to
// rebind from several threads at once.
class CudnnLease {
 public:
  CudnnLease(int device, cudaStream_t stream);
  cudnnHandle_t get() const { return handle_; }

 private:
  std::unique_lock<std::mutex> lock_;
  cudnnHandle_t handle_ = nullptr;
};

}  // namespace plugflow::cuda

#define PF_CUDNN_CHECK(expr)                                                           \
  do {                                                                                 \
    const cudnnStatus_t pf_cudnn_st_ = (expr);                                         \
    if (pf_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                          \
      ::plugflow::cuda::throw_cudnn_error(pf_cudnn_st_, #expr, __FILE__, __LINE__);    \
  } while (0)
