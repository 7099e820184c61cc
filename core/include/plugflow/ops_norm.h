// The functional API of the `norm` family: batch, layer and group normalization, embedding
// lookup, dropout and the classification losses over log_softmax. Included from plugflow/ops.h.
//
// Every function follows PyTorch 1.13 (torch.nn.functional): its argument checks and messages,
// its dtype rules, and its gradients. Each normalization runs one fused kernel forward and one
// fused kernel backward (docs/kernels.md, "Norm family"). An undefined Tensor stands for an
// absent optional argument (None in Python).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "plugflow/export.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// ---- normalization ------------------------------------------------------------------------------
// F.batch_norm over dim 1 of a (N, C, *) input. Training normalizes with the batch's mean and
// biased variance and, when running_mean/running_var are given, updates them in place:
// running = (1 - momentum) * running + momentum * batch statistic, with the unbiased variance.
// Eval mode normalizes with the running statistics (which must then be given).
PF_API Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                         const Tensor& weight, const Tensor& bias, bool training, double momentum, double eps);

// F.layer_norm: normalizes over the trailing dims `normalized_shape`; weight and bias (optional)
// have that shape.
PF_API Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                         const Tensor& bias, double eps);

// F.group_norm: (N, C, *) input, C split into num_groups groups normalized separately; weight
// and bias (optional) have C elements.
PF_API Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                         double eps);

// ---- embedding -----------------------------------------------------------------------------------
// weight[indices]: rows of a 2-d weight for int64/int32 indices of any shape. padding_idx
// (already wrapped, in [0, num_embeddings)) gets no gradient; scale_grad_by_freq divides each
// row's gradient by how often its index occurs in the batch. IndexError for an index outside
// [0, num_embeddings).
PF_API Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = std::nullopt,
                        bool scale_grad_by_freq = false);
// F.embedding's max_norm: rescales, in place and without gradient, the rows of weight that
// `indices` reference whose norm_type-norm exceeds max_norm, to norm max_norm.
PF_API Tensor& embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm, double norm_type);

// ---- dropout ---------------------------------------------------------------------------------------
// Zeroes each element with probability p and scales the rest by 1 / (1 - p); the mask is drawn
// from the global Philox generator. Not training, p == 0 or an empty input: the input itself.
// ValueError for p outside [0, 1].
PF_API Tensor dropout(const Tensor& input, double p, bool training);
PF_API Tensor& dropout_(Tensor& input, double p, bool training);
// Channel-wise ("feature") dropout: one draw per (batch, channel) for dims >= 2, as
// F.dropout1d/2d/3d after their rank checks.
PF_API Tensor feature_dropout(const Tensor& input, double p, bool training);
PF_API Tensor& feature_dropout_(Tensor& input, double p, bool training);
// F.alpha_dropout / F.feature_alpha_dropout: dropped elements become SELU's negative
// saturation, then an affine map keeps mean 0 and variance 1.
PF_API Tensor alpha_dropout(const Tensor& input, double p, bool training, bool feature = false);
PF_API Tensor& alpha_dropout_(Tensor& input, double p, bool training, bool feature = false);

// ---- losses ----------------------------------------------------------------------------------------
// reduction: "none", "mean" or "sum".
// F.nll_loss for class-index targets: input (N, C, *) or (C) log-probabilities, target
// (N, *) or () int64. ignore_index targets contribute nothing (and nothing to the "mean"
// divisor, which is the sum of the used targets' weights).
PF_API Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, const std::string& reduction,
                       int64_t ignore_index);
// F.cross_entropy for class-index targets: nll_loss over log_softmax along dim 1 (dim 0 for a
// 1-d input), with PyTorch's label smoothing.
PF_API Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                            const std::string& reduction, int64_t ignore_index, double label_smoothing);

}  // namespace plugflow::ops
