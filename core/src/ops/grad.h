// Core-internal: where the functional layer hands finished ops to autograd. Each function
// records a node (with its backward formula) when grad mode is on and an input requires grad.
#pragma once
#include <string>

#include "plugflow/op.h"
#include "plugflow/tensor.h"

namespace plugflow::internal {

// Out-of-place: inputs already promoted and broadcast to out's shape.
void record_binary(const std::string& name, const Tensor& a, const Tensor& b, const Tensor& out, const Attrs& attrs);
void record_unary(const std::string& name, const Tensor& a, const Tensor& out, const Attrs& attrs);
// In place on `self` (already modified); `self_before` is a copy of its old value when the
// formula needs it (see needs_self_before), else undefined.
bool binary_needs_self_before(const std::string& name);
bool unary_needs_self_before(const std::string& name);
// `b_value` is what the formula reads for b (its old value when b aliases self).
void record_binary_inplace(const std::string& name, const Tensor& self, const Tensor& self_before, const Tensor& b,
                           const Tensor& b_value, const Attrs& attrs);
void record_unary_inplace(const std::string& name, const Tensor& self, const Tensor& self_before,
                          const Attrs& attrs = {});

}  // namespace plugflow::internal
