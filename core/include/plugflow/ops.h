// The C++ functional API: what Python calls. Each function validates its arguments, applies
// PyTorch's broadcasting and type promotion, and runs catalog ops through the dispatcher.
// View functions only change metadata.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "plugflow/export.h"
#include "plugflow/generator.h"
#include "plugflow/scalar.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// ---- creation ---------------------------------------------------------------------------
PF_API Tensor empty(const Shape& sizes, DType dtype, Device device);
PF_API Tensor full(const Shape& sizes, Scalar value, DType dtype, Device device);
PF_API Tensor zeros(const Shape& sizes, DType dtype, Device device);
PF_API Tensor ones(const Shape& sizes, DType dtype, Device device);
PF_API Tensor arange(Scalar start, Scalar end, Scalar step, std::optional<DType> dtype, Device device);
PF_API Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device);
PF_API Tensor scalar_tensor(Scalar value, DType dtype, Device device);
// A Python number as the operand of an op that computes in `dtype` (t + 300, t / -1): a 0-d
// tensor converted as a kernel's cast converts (integers wrap), where scalar_tensor checks
// that the value fits (check_scalar_fits).
PF_API Tensor wrapped_scalar_tensor(Scalar value, DType dtype, Device device);

// ---- random (the given generator, else the default one; see plugflow/generator.h) --------
PF_API void manual_seed(uint64_t seed);  // seeds the default generator
PF_API uint64_t initial_seed();
PF_API Tensor rand(const Shape& sizes, DType dtype, Device device, Generator* gen = nullptr);
PF_API Tensor randn(const Shape& sizes, DType dtype, Device device, Generator* gen = nullptr);
PF_API Tensor randint(int64_t low, int64_t high, const Shape& sizes, DType dtype, Device device,
                      Generator* gen = nullptr);
// A random permutation of 0..n-1.
PF_API Tensor randperm(int64_t n, DType dtype, Device device, Generator* gen = nullptr);
PF_API Tensor& uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
PF_API Tensor& normal_(Tensor& t, double mean, double std, Generator* gen = nullptr);

// ---- copies and conversion ----------------------------------------------------------------
// Copies src into dst (broadcasting src to dst's shape, any dtypes, any devices, any strides).
// non_blocking: a copy between pinned host memory (pin_memory) and a device is only enqueued on
// the device's current stream; the caller synchronizes before using the host side. Any other
// copy completes before returning, non_blocking or not.
PF_API Tensor& copy_(Tensor& dst, const Tensor& src, bool non_blocking = false);
// PyTorch's check on a tensor about to be written (an in-place op's self, an out= argument):
// several elements sharing one memory location (a dim of stride 0 and size > 1) would make the
// result order-dependent, so it raises.
PF_API void check_no_internal_overlap(const Tensor& t);
PF_API Tensor& fill_(Tensor& t, Scalar value);
// The one element of `t` as a number of its kind (PyTorch's Tensor::item()).
PF_API Scalar item(const Tensor& t);
PF_API Tensor& zero_(Tensor& t);
// PyTorch's resize_ (also what out= arguments get): t takes `sizes` with contiguous strides,
// keeping its storage when that holds them past t's offset, else on a fresh storage. Contents
// are kept only as far as the old storage is reused.
PF_API Tensor& resize_(Tensor& t, const Shape& sizes);
PF_API Tensor to(const Tensor& t, std::optional<Device> device, std::optional<DType> dtype, bool copy = false,
                 bool non_blocking = false);
// A copy of a CPU tensor in page-locked host memory of the first device backend that offers it
// (Tensor.pin_memory()); the tensor itself when it is pinned already. RuntimeError without one.
PF_API Tensor pin_memory(const Tensor& t);
PF_API bool is_pinned(const Tensor& t);
// Tensor.record_stream: t's memory is used by work on `stream` (a handle of t's device), so
// the backend keeps it from reuse after t's storage dies until that work has finished.
PF_API void record_stream(const Tensor& t, void* stream);
PF_API Tensor contiguous(const Tensor& t, MemoryFormat format = MemoryFormat::Contiguous);
PF_API Tensor clone(const Tensor& t, MemoryFormat format = MemoryFormat::Contiguous);

// ---- views ---------------------------------------------------------------------------------
PF_API Tensor as_strided(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset);
PF_API Tensor view(const Tensor& t, const Shape& sizes);  // one -1 allowed
PF_API Tensor view_dtype(const Tensor& t, DType dtype);  // the same bytes as another dtype
PF_API Tensor reshape(const Tensor& t, const Shape& sizes);
PF_API Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
PF_API Tensor permute(const Tensor& t, const Shape& dims);
PF_API Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
PF_API Tensor expand(const Tensor& t, const Shape& sizes);  // -1 keeps a dim
PF_API Tensor squeeze(const Tensor& t, std::optional<int64_t> dim = std::nullopt);
PF_API Tensor unsqueeze(const Tensor& t, int64_t dim);
PF_API Tensor slice(const Tensor& t, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step = 1);
PF_API Tensor select(const Tensor& t, int64_t dim, int64_t index);  // IndexError out of range
PF_API Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);

// ---- shape helpers ---------------------------------------------------------------------------
PF_API int64_t wrap_dim(int64_t dim, int64_t ndim);  // IndexError naming the valid range
// wrap_dim where a 0-d tensor has no dim at all (PyTorch's wrap_scalar=false: size(0), unbind,
// roll, unique and repeat_interleave along a dim): IndexError "Dimension specified as 0 but
// tensor has no dimensions".
PF_API int64_t wrap_dim_no_scalar(int64_t dim, int64_t ndim);
PF_API Shape broadcast_shapes(const Shape& a, const Shape& b);  // ValueError... as PyTorch: RuntimeError
// torch.result_type for two operands; a Scalar counts as a "wrapped number".
PF_API DType result_type(const Tensor& a, const Tensor& b);
PF_API DType result_type(const Tensor& a, Scalar b);

// ---- elementwise -----------------------------------------------------------------------------
// name: add sub mul div pow maximum minimum remainder fmod floor_divide atan2
//       bitwise_and bitwise_or bitwise_xor logical_and logical_or logical_xor
//       eq ne lt le gt ge
PF_API Tensor binary(const std::string& name, const Tensor& a, const Tensor& b);
PF_API Tensor binary(const std::string& name, const Tensor& a, Scalar b);
PF_API Tensor binary(const std::string& name, Scalar a, const Tensor& b);
// In place: a = a (op) b; the result dtype must be castable to a's (RuntimeError otherwise).
PF_API Tensor& binary_(const std::string& name, Tensor& a, const Tensor& b);
PF_API Tensor& binary_(const std::string& name, Tensor& a, Scalar b);
PF_API Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);
PF_API Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
PF_API Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode = "");
// name: neg abs exp log ... (see core/src/ops/unary.cpp for the list)
PF_API Tensor unary(const std::string& name, const Tensor& a);
PF_API Tensor& unary_(const std::string& name, Tensor& a);

// ---- reductions -------------------------------------------------------------------------------
// name: sum prod mean amax amin all any ... (core/opdefs/reductions.yaml). dims empty = all dims.
PF_API Tensor reduce(const std::string& name, const Tensor& a, const Shape& dims, bool keepdim,
                     std::optional<DType> dtype = std::nullopt);
// name: max_dim min_dim argmax argmin (core/opdefs/indexed.yaml): the outputs (values and int64
// indices, or the indices) along one dim; no dim (where the op allows it): over the flattened input.
PF_API std::vector<Tensor> indexed(const std::string& name, const Tensor& a, std::optional<int64_t> dim, bool keepdim);
// Values and int64 indices along one dim (torch.max(t, dim)).
PF_API std::pair<Tensor, Tensor> max_dim(const Tensor& a, int64_t dim, bool keepdim);
PF_API std::pair<Tensor, Tensor> min_dim(const Tensor& a, int64_t dim, bool keepdim);
PF_API Tensor argmax(const Tensor& a, std::optional<int64_t> dim, bool keepdim);
PF_API Tensor argmin(const Tensor& a, std::optional<int64_t> dim, bool keepdim);

// ---- linear algebra -----------------------------------------------------------------------------
PF_API Tensor mm(const Tensor& a, const Tensor& b);
PF_API Tensor bmm(const Tensor& a, const Tensor& b);
PF_API Tensor matmul(const Tensor& a, const Tensor& b);  // numpy/PyTorch semantics, batched broadcasting

}  // namespace plugflow::ops

#include "plugflow/ops_indexing.h"  // gather, scatter, index_select, where, advanced indexing, ...
#include "plugflow/ops_shape.h"     // cat, stack, split, flip, roll, repeat, sort, topk, unique, pad, ...
#include "plugflow/ops_math.h"      // clamp, lerp, addcmul/addcdiv, activations, addmm, baddbmm, dot, outer, einsum, ...
#include "plugflow/ops_reduction.h"  // var, std, var_mean, logsumexp, norm, all, any, cumsum, cumprod, softmax, log_softmax
#include "plugflow/ops_composite.h"  // the ops without a kernel by name (logsumexp)
#include "plugflow/ops_norm.h"      // batch_norm, layer_norm, group_norm, embedding, dropout
#include "plugflow/ops_conv.h"  // conv2d/3d, conv_transpose2d/3d, max/avg/adaptive pooling, upsampling
#include "plugflow/ops_sampling.h"  // grid_sample, affine_grid
#include "plugflow/ops_vision.h"    // torchvision's nms, roi_align, roi_pool
#include "plugflow/ops_linalg.h"    // linalg_lstsq
#include "plugflow/ops_optim.h"  // sgd_step_, adam_step_: fused optimizer updates
