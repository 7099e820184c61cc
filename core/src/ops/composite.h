// The functions that compose the ops of core/opdefs/composite.yaml, one per op, named after it:
// called by ops::composite (composite.cpp) after the dtype rule and autocast, with the op's
// arguments as attributes of their names. Each is written with the op's family.
#pragma once
#include "opdefs.h"
#include "plugflow/op.h"
#include "plugflow/tensor.h"

namespace plugflow::ops::composites {
#define PF_X(name, function, dtype, sig) Tensor function(const Tensor& self, const Attrs& attrs);
PF_OPDEFS_COMPOSITE(PF_X)
#undef PF_X
}  // namespace plugflow::ops::composites
