// Backward formulas of the elementwise ops (PyTorch's derivatives.yaml, written with ops).
#include <cmath>
#include <functional>
#include <unordered_map>

#include "../autograd/grad_utils.h"
#include "grad.h"
#include "op_tables.h"
#include "opdefs_derivatives.inc"

namespace plugflow::internal {
namespace {

using autograd::make_node;
using autograd::mask_as;
using autograd::mul;
using autograd::neg;
using Tensors = std::vector<Tensor>;

Tensor div_(const Tensor& a, const Tensor& b) { return ops::binary("div", a, b); }
Tensor add(const Tensor& a, const Tensor& b) { return ops::binary("add", a, b); }
Tensor un(const char* name, const Tensor& a) { return ops::unary(name, a); }
Tensor cmp(const char* name, const Tensor& a, const Tensor& b) { return ops::binary(name, a, b); }
Tensor cmp(const char* name, const Tensor& a, Scalar b) { return ops::binary(name, a, b); }
Tensor zeros_like(const Tensor& t) { return ops::zeros(t.sizes(), t.dtype(), t.device()); }
Tensor sigmoid_of(const Tensor& a) { return un("sigmoid", a); }
Tensor one_minus(const Tensor& t) { return ops::binary("sub", Scalar(1), t); }

constexpr double kPi = 3.14159265358979323846;

// d/da, d/db of a binary op given grad g, inputs a, b, output out.
using BinaryFn = std::function<std::pair<Tensor, Tensor>(const Tensor& g, const Tensor& a, const Tensor& b,
                                                         const Tensor& out, const Attrs& attrs)>;
// A formula and the tensors it reads: only those are saved (saving more would keep memory
// alive and flag harmless in-place changes as errors).
struct BinaryGrad {
  BinaryFn fn;
  const char* needs;  // subset of "abo": a, b, the output
};

using UnaryFn = std::function<Tensor(const Tensor& g, const Tensor& a, const Tensor& out, const Attrs& attrs)>;
struct UnaryGrad {
  UnaryFn fn;
  const char* needs;  // subset of "ao": the input, the output
};

// ---- backwards too long for a one-line formula, named by their op definitions ------------------

std::pair<Tensor, Tensor> div_backward(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&,
                                       const Attrs& at) {
  if (at.has("rounding_mode") && !at.get<std::string>("rounding_mode").empty())
    return std::pair{zeros_like(g), zeros_like(g)};
  return std::pair{div_(g, b), neg(div_(mul(g, a), mul(b, b)))};
}

std::pair<Tensor, Tensor> pow_backward(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& out,
                                       const Attrs&) {
  // d/da = b * a^(b-1), 0 where b == 0 (the exponent is made 1 there, so that 0 * a^0
  // stays 0 even at a == 0); d/db = out * log(a), 0 where a == 0 and b >= 0.
  Tensor b_safe = add(b, mask_as(cmp("eq", b, Scalar(0)), b.dtype()));
  // (g * (b * a^(b-1)), PyTorch's order: b * a^(b-1) may overflow where g * b would not)
  Tensor da = mul(g, mul(b, ops::binary("pow", a, ops::binary("sub", b_safe, Scalar(1)))));
  // log(1) where a == 0 and b >= 0 (PyTorch masks those to 0; b < 0 keeps -inf * inf).
  Tensor zero_base = ops::binary("logical_and", cmp("eq", a, Scalar(0)), cmp("ge", b, Scalar(0)));
  Tensor safe_log = un("log", add(a, mask_as(zero_base, a.dtype())));
  Tensor db = mul(mul(g, out), safe_log);
  return std::pair{da, db};
}

// PyTorch 1.13: ties split the gradient evenly; the smaller operand gets none; with a NaN
// both get all of it.
std::pair<Tensor, Tensor> maximum_backward(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&,
                                           const Attrs&) {
  Tensor half_tie = mul(mask_as(cmp("eq", a, b), g.dtype()), Scalar(0.5));
  Tensor w = ops::binary("sub", one_minus(mask_as(cmp("lt", a, b), g.dtype())), half_tie);
  Tensor wb = ops::binary("sub", one_minus(mask_as(cmp("gt", a, b), g.dtype())), half_tie);
  return std::pair{mul(g, w), mul(g, wb)};
}

std::pair<Tensor, Tensor> minimum_backward(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&,
                                           const Attrs&) {
  Tensor half_tie = mul(mask_as(cmp("eq", a, b), g.dtype()), Scalar(0.5));
  Tensor w = ops::binary("sub", one_minus(mask_as(cmp("gt", a, b), g.dtype())), half_tie);
  Tensor wb = ops::binary("sub", one_minus(mask_as(cmp("lt", a, b), g.dtype())), half_tie);
  return std::pair{mul(g, w), mul(g, wb)};
}

Tensor silu_backward(const Tensor& g, const Tensor& a, const Tensor&, const Attrs&) {
  Tensor s = sigmoid_of(a);
  return mul(g, mul(s, ops::binary("add", mul(a, one_minus(s)), Scalar(1))));
}

Tensor mish_backward(const Tensor& g, const Tensor& a, const Tensor&, const Attrs&) {
  Tensor sp = ops::unary("tanh", ops::unary("log1p", un("exp", a)));  // tanh(softplus(a))
  Tensor s = sigmoid_of(a);
  return mul(g, add(sp, mul(mul(a, s), one_minus(mul(sp, sp)))));
}

Tensor hardswish_backward(const Tensor& g, const Tensor& a, const Tensor&, const Attrs&) {
  // PyTorch's hardswish_backward: 0 for a < -3, a/3 + 1/2 for a <= 3, 1 otherwise (NaN
  // included). Branches picked with where, not masks multiplied: the slope of -inf is
  // -inf, and 0 * -inf would be NaN.
  Tensor slope = ops::binary("add", ops::binary("div", a, Scalar(3)), Scalar(0.5));
  Tensor d = ops::where(cmp("lt", a, Scalar(-3)), Scalar(0), ops::where(cmp("le", a, Scalar(3)), slope, Scalar(1)));
  return mul(g, d);
}

Tensor hardsigmoid_backward(const Tensor& g, const Tensor& a, const Tensor&, const Attrs&) {
  Tensor mid = mul(mask_as(cmp("gt", a, Scalar(-3)), g.dtype()), mask_as(cmp("lt", a, Scalar(3)), g.dtype()));
  return mul(mul(g, mid), Scalar(1.0 / 6.0));
}

Tensor gelu_backward(const Tensor& g, const Tensor& a, const Tensor&, const Attrs& at) {
  if (at.get<std::string>("approximate") == "tanh") {
    const double k = std::sqrt(2.0 / kPi);
    Tensor a3 = mul(a, mul(a, a));
    Tensor inner = mul(add(a, mul(a3, Scalar(0.044715))), Scalar(k));
    Tensor t = un("tanh", inner);
    Tensor dinner = mul(ops::binary("add", mul(mul(a, a), Scalar(3 * 0.044715)), Scalar(1)), Scalar(k));
    Tensor left = mul(ops::binary("add", t, Scalar(1)), Scalar(0.5));
    Tensor right = mul(mul(mul(a, Scalar(0.5)), one_minus(mul(t, t))), dinner);
    return mul(g, add(left, right));
  }
  Tensor cdf = mul(ops::binary("add", un("erf", mul(a, Scalar(1.0 / std::sqrt(2.0)))), Scalar(1)), Scalar(0.5));
  Tensor pdf = mul(un("exp", mul(mul(a, a), Scalar(-0.5))), Scalar(1.0 / std::sqrt(2.0 * kPi)));
  return mul(g, add(cdf, mul(a, pdf)));
}

Tensor softplus_backward(const Tensor& g, const Tensor& a, const Tensor&, const Attrs& at) {
  const double beta = at.get<double>("beta"), threshold = at.get<double>("threshold");
  Tensor ba = mul(a, Scalar(beta));
  Tensor below = mask_as(cmp("le", ba, Scalar(threshold)), g.dtype());
  Tensor d = add(mul(below, sigmoid_of(ba)), one_minus(below));
  return mul(g, d);
}

Tensor leaky_relu_backward(const Tensor& g, const Tensor& a, const Tensor&, const Attrs& at) {
  const double slope = at.get<double>("negative_slope");
  Tensor pos = mask_as(cmp("gt", a, Scalar(0)), g.dtype());
  return mul(g, add(pos, mul(one_minus(pos), Scalar(slope))));
}

Tensor elu_backward(const Tensor& g, const Tensor& a, const Tensor&, const Attrs& at) {
  const double alpha = at.get<double>("alpha"), scale = at.get<double>("scale"),
               input_scale = at.get<double>("input_scale");
  // PyTorch's elu_backward: x <= 0 takes the exponential branch, anything else (NaN
  // included) the linear one; a branch not taken never enters (exp(x) of a large x is inf).
  Tensor negd = mul(un("exp", mul(a, Scalar(input_scale))), Scalar(alpha * scale * input_scale));
  return mul(g, ops::where(cmp("le", a, Scalar(0)), negd, ops::full({}, Scalar(scale), g.dtype(), g.device())));
}

// The tables: one-line formulas and the names above, from the op definitions
// (core/opdefs/elementwise.yaml, `derivative:`).
const std::unordered_map<std::string, BinaryGrad>& binary_grads() {
  static const std::unordered_map<std::string, BinaryGrad> table = {PF_OPDEFS_BINARY_DERIVATIVES};
  return table;
}

const std::unordered_map<std::string, UnaryGrad>& unary_grads() {
  static const std::unordered_map<std::string, UnaryGrad> table = {PF_OPDEFS_UNARY_DERIVATIVES};
  return table;
}

// PyTorch names backward nodes after the op: "MulBackward0".
std::string node_name(const std::string& op) {
  std::string n;
  bool upper = true;
  for (char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    n += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return n + "Backward0";
}

bool needs(const char* list, char what) { return std::string_view(list).find(what) != std::string_view::npos; }

}  // namespace

bool binary_needs_self_before(const std::string& name) {
  auto it = binary_grads().find(name);
  return it != binary_grads().end() && needs(it->second.needs, 'a');
}
bool unary_needs_self_before(const std::string& name) {
  auto it = unary_grads().find(name);
  return it != unary_grads().end() && needs(it->second.needs, 'a');
}

void record_binary(const std::string& name, const Tensor& a, const Tensor& b, const Tensor& out, const Attrs& attrs) {
  if (!is_floating(out.dtype()) || !autograd::any_requires_grad({&a, &b})) return;
  auto it = binary_grads().find(name);
  PF_CHECK_T(it != binary_grads().end(), NotImplementedError, "the derivative for '", name, "' is not implemented.");
  const BinaryGrad& spec = it->second;
  auto node = make_node(node_name(name), [f = spec.fn, attrs](const Tensors& g, const Tensors& s) -> Tensors {
    auto [ga, gb] = f(g[0], s[0], s[1], s[2], attrs);
    return {ga, gb};
  });
  node->reserve_saved(3);
  node->save(needs(spec.needs, 'a') ? a : Tensor());
  node->save(needs(spec.needs, 'b') ? b : Tensor());
  node->save_output(needs(spec.needs, 'o') ? out : Tensor(), 0);
  autograd::record(node, {a, b}, {out});
}

void record_unary(const std::string& name, const Tensor& a, const Tensor& out, const Attrs& attrs) {
  if (!is_floating(out.dtype()) || !autograd::any_requires_grad({&a})) return;
  auto it = unary_grads().find(name);
  PF_CHECK_T(it != unary_grads().end(), NotImplementedError, "the derivative for '", name, "' is not implemented.");
  const UnaryGrad& spec = it->second;
  auto node = make_node(node_name(name), [f = spec.fn, attrs](const Tensors& g, const Tensors& s) -> Tensors {
    return {f(g[0], s[0], s[1], attrs)};
  });
  node->reserve_saved(2);
  node->save(needs(spec.needs, 'a') ? a : Tensor());
  node->save_output(needs(spec.needs, 'o') ? out : Tensor(), 0);
  autograd::record(node, {a}, {out});
}

void record_binary_inplace(const std::string& name, const Tensor& self, const Tensor& self_before, const Tensor& b,
                           const Tensor& b_value, const Attrs& attrs) {
  auto it = binary_grads().find(name);
  PF_CHECK_T(it != binary_grads().end(), NotImplementedError, "the derivative for '", name, "' is not implemented.");
  const BinaryGrad& spec = it->second;
  auto node = make_node(node_name(name + "_"), [f = spec.fn, attrs](const Tensors& g, const Tensors& s) -> Tensors {
    auto [ga, gb] = f(g[0], s[0], s[1], s[2], attrs);
    return {ga, gb};
  });
  node->save(self_before);
  node->save(needs(spec.needs, 'b') ? b_value : Tensor());
  node->save_output(needs(spec.needs, 'o') ? self : Tensor(), 0);
  autograd::record_inplace(node, self, {b});
}

void record_unary_inplace(const std::string& name, const Tensor& self, const Tensor& self_before, const Attrs& attrs) {
  auto it = unary_grads().find(name);
  PF_CHECK_T(it != unary_grads().end(), NotImplementedError, "the derivative for '", name, "' is not implemented.");
  const UnaryGrad& spec = it->second;
  auto node = make_node(node_name(name + "_"), [f = spec.fn, attrs](const Tensors& g, const Tensors& s) -> Tensors {
    return {f(g[0], s[0], s[1], attrs)};
  });
  node->save(self_before);
  node->save_output(needs(spec.needs, 'o') ? self : Tensor(), 0);
  autograd::record_inplace(node, self, {});
}

}  // namespace plugflow::internal
