// The functional API of the `math` family: pointwise extras (clamp, lerp, addcmul, addcdiv,
// parametrized activations) and linear algebra beyond mm/bmm/matmul (addmm, addmv, mv,
// baddbmm, addbmm, dot, vdot, outer, tensordot, einsum). Included from plugflow/ops.h.
//
// Every function follows PyTorch 1.13: its type promotion and broadcasting, its error
// messages, its gradient (recorded with a backward written in ops, so double backward works).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "plugflow/export.h"
#include "plugflow/op.h"
#include "plugflow/scalar.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// ---- activations ------------------------------------------------------------------------------
// name: gelu (attr approximate: "none" | "tanh"), softplus (beta, threshold), leaky_relu
// (negative_slope), elu (alpha, scale, input_scale), and the attribute-free silu, mish,
// hardswish, hardsigmoid, relu, sigmoid, tanh. Missing attributes take PyTorch's defaults.
// Floating inputs only, except relu (any dtype but bool) and sigmoid/tanh (integers promote).
PF_API Tensor activation(const std::string& name, const Tensor& a, const Attrs& attrs = {});
PF_API Tensor& activation_(const std::string& name, Tensor& a, const Attrs& attrs = {});
// torch.nn.functional.hardtanh (relu6 = hardtanh(0, 6)): clamp's values, but the gradient is
// 0 on the boundaries, as in PyTorch.
PF_API Tensor hardtanh(const Tensor& a, Scalar min_val, Scalar max_val);
PF_API Tensor& hardtanh_(Tensor& a, Scalar min_val, Scalar max_val);

// ---- pointwise ----------------------------------------------------------------------------------
// clamp: at least one bound (RuntimeError otherwise). NaN in the input gives NaN; so does a NaN
// bound beside another bound, where a lone NaN number bound leaves the values alone (PyTorch
// 1.13's min(a, NaN) is a; the gradient is still zero there).
PF_API Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max);
// Tensor bounds broadcast with `a`; an undefined tensor means "no bound".
PF_API Tensor clamp(const Tensor& a, const Tensor& min, const Tensor& max);
PF_API Tensor& clamp_(Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max);
PF_API Tensor& clamp_(Tensor& a, const Tensor& min, const Tensor& max);

// a + weight * (end - a); floating dtypes, no promotion (all dtypes must equal a's).
PF_API Tensor lerp(const Tensor& a, const Tensor& end, const Tensor& weight);
PF_API Tensor lerp(const Tensor& a, const Tensor& end, Scalar weight);
PF_API Tensor& lerp_(Tensor& a, const Tensor& end, const Tensor& weight);
PF_API Tensor& lerp_(Tensor& a, const Tensor& end, Scalar weight);

// self + value * t1 * t2 and self + value * t1 / t2 (promoting over the three tensors).
PF_API Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value = 1);
PF_API Tensor& addcmul_(Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value = 1);
PF_API Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value = 1);
PF_API Tensor& addcdiv_(Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value = 1);

// ---- linear algebra -------------------------------------------------------------------------------
// beta * self + alpha * (mat1 @ mat2); self broadcasts to the product's shape; beta == 0
// ignores self (NaN included).
PF_API Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, Scalar beta = 1, Scalar alpha = 1);
// F.linear: input @ weight^T + bias (bias undefined: none); a 2-d input with a bias is one addmm.
PF_API Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias);
PF_API Tensor mv(const Tensor& mat, const Tensor& vec);
PF_API Tensor addmv(const Tensor& self, const Tensor& mat, const Tensor& vec, Scalar beta = 1, Scalar alpha = 1);
PF_API Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, Scalar beta = 1,
                      Scalar alpha = 1);
// beta * self + alpha * sum_b(batch1[b] @ batch2[b])
PF_API Tensor addbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, Scalar beta = 1,
                     Scalar alpha = 1);
PF_API Tensor dot(const Tensor& a, const Tensor& b);
PF_API Tensor vdot(const Tensor& a, const Tensor& b);  // dot (plugflow has no complex dtypes)
PF_API Tensor outer(const Tensor& a, const Tensor& b);
// Contracts dims_a of a with dims_b of b (negative dims wrap).
PF_API Tensor tensordot(const Tensor& a, const Tensor& b, const Shape& dims_a, const Shape& dims_b);
// The last `dims` dims of a with the first `dims` of b.
PF_API Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims);
// torch.einsum: subscripts [a-zA-Z], "..." for broadcast dims, implicit output (ellipsis dims,
// then the labels seen once, in alphabetical order, upper case first) when there is no "->".
// Computed with diagonal views, permutes, sums and bmm, so it is differentiable to any order.
PF_API Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

}  // namespace plugflow::ops
