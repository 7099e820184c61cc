// The functional API of the `reduction` family: statistics (var, std, var_mean, std_mean),
// logsumexp, vector norms, all/any, scans (cumsum, cumprod) and softmax/log_softmax.
// Included from plugflow/ops.h.
//
// Every function follows PyTorch 1.13: its dtype rules, its error messages, and its gradient
// (recorded with a backward written in ops, so double backward works). `dims` empty means
// every dim, as for ops::reduce.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plugflow/export.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// ---- statistics -----------------------------------------------------------------------------
// Floating inputs only. The divisor is max(0, N - correction): correction 1 is the unbiased
// estimator (PyTorch's default), 0 the population variance. N - correction <= 0 gives inf
// (or nan when every value is equal), and a reduction over nothing gives nan.
PF_API Tensor var(const Tensor& a, const Shape& dims, double correction = 1, bool keepdim = false);
PF_API Tensor std_dev(const Tensor& a, const Shape& dims, double correction = 1, bool keepdim = false);
// (var, mean) and (std, mean) from one pass over the data.
PF_API std::pair<Tensor, Tensor> var_mean(const Tensor& a, const Shape& dims, double correction = 1,
                                          bool keepdim = false);
PF_API std::pair<Tensor, Tensor> std_mean(const Tensor& a, const Shape& dims, double correction = 1,
                                          bool keepdim = false);
// The functions over the reductions with several outputs by name (the variants of
// core/opdefs/moments.yaml: var, std, var_mean, std_mean; the Python bindings of every one call
// this): the outputs the variant returns. An unknown name raises ValueError.
PF_API std::vector<Tensor> moments(const std::string& name, const Tensor& a, const Shape& dims,
                                   double correction = 1, bool keepdim = false);

// torch.max(a) / torch.min(a): the extreme of all elements (NaN wins), amax/amin's value with
// PyTorch's gradient (shared by the elements equal to it: MaxBackward1 / MinBackward1).
PF_API Tensor extreme(const Tensor& a, bool is_max);

// log(sum(exp(a))) over dims, computed stably (the max is subtracted first); integers
// promote to float32. Over nothing: -inf.
PF_API Tensor logsumexp(const Tensor& a, const Shape& dims, bool keepdim = false);

// The vector p-norm over dims: p = 2 (also 'fro'), 1, any other number, +inf (max |a|), -inf
// (min |a|), 0 (count of non-zeros). Floating inputs only; `dtype` computes (and returns) in
// another floating dtype. Over nothing: 0.
PF_API Tensor norm(const Tensor& a, double p = 2, const Shape& dims = {}, bool keepdim = false,
                   std::optional<DType> dtype = std::nullopt);

// ---- logical reductions ---------------------------------------------------------------------
// True where every / some element over dims is non-zero (NaN counts as non-zero). Bool
// output; uint8 for uint8 inputs, as PyTorch keeps it. Over nothing: all -> true, any -> false.
PF_API Tensor all(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
PF_API Tensor any(const Tensor& a, const Shape& dims = {}, bool keepdim = false);

// ---- scans ------------------------------------------------------------------------------------
// Running sum / product along dim. Without dtype, bool and integer inputs accumulate in int64;
// floats in double (float32/64) or float (float16/bfloat16) and return their own dtype.
PF_API Tensor cumsum(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);
PF_API Tensor cumprod(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);

// ---- softmax ----------------------------------------------------------------------------------
// exp(a - max) / sum(exp(a - max)) along dim (and its log), one fused kernel. Floating inputs
// (or a floating `dtype`, which the input is cast to first).
PF_API Tensor softmax(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);
PF_API Tensor log_softmax(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);

// The scans and the softmax family by name (those of core/opdefs/along_dim.yaml: the Python
// bindings of every one of them call this); an unknown name raises ValueError.
PF_API Tensor along_dim(const std::string& name, const Tensor& a, int64_t dim,
                        std::optional<DType> dtype = std::nullopt);

}  // namespace plugflow::ops
