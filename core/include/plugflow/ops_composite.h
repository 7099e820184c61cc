// The ops without a kernel of their own, composed of other ops by a function of the core
// (core/opdefs/composite.yaml: logsumexp). Included from plugflow/ops.h.
#pragma once
#include <string>

#include "plugflow/export.h"
#include "plugflow/op.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// A composite op by name (the Python bindings of every one call this), its arguments after the
// input as attributes of their names (logsumexp: `dim` a Shape, `keepdim` a bool): the
// definition's dtype rule (float: integers and bool promote to float32) and autocast policy,
// then the core's function composing it. An unknown name raises ValueError.
PF_API Tensor composite(const std::string& name, const Tensor& a, const Attrs& attrs);

}  // namespace plugflow::ops
