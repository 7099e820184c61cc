// The ops without a kernel of their own (core/opdefs/composite.yaml): the by-name functional
// entry applies the definition's dtype rule and autocast policy, then calls the function that
// composes the op, ops::composites::NAME (composite.h; written with the op's family: logsumexp
// in reduction_extra.cpp).
#include <string_view>
#include <unordered_map>

#include "composite.h"
#include "plugflow/autocast.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace plugflow::ops {

namespace {

enum class CompositeDtype {
  Float,  // integers and bool promote to float32
  Same,
};

struct Composite {
  Tensor (*fn)(const Tensor& self, const Attrs& attrs);
  CompositeDtype dtype;
};

const std::unordered_map<std::string_view, Composite>& composites_table() {
  static const std::unordered_map<std::string_view, Composite> table = {
#define PF_X(name, function, dtype, sig) {name, {&composites::function, CompositeDtype::dtype}},
      PF_OPDEFS_COMPOSITE(PF_X)
#undef PF_X
  };
  return table;
}

}  // namespace

Tensor composite(const std::string& name, const Tensor& a, const Attrs& attrs) {
  const auto it = composites_table().find(name);
  PF_CHECK_T(it != composites_table().end(), ValueError, "unknown composite op '", name, "'");
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{name, {a}}) return composite(name, cast[0], attrs);
  const Composite& op = it->second;
  if (op.dtype == CompositeDtype::Float && !is_floating(a.dtype()))
    return op.fn(to(a, std::nullopt, default_float_dtype()), attrs);
  return op.fn(a, attrs);
}

}  // namespace plugflow::ops
