// The `math` family (plugflow/ops_math.h): clamp, lerp, addcmul, addcdiv, parametrized
// activations, and linear algebra built on mm/bmm (addmm, addmv, mv, baddbmm, addbmm, dot,
// outer, tensordot, einsum).
//
// Pointwise ops follow the elementwise pattern of elementwise.cpp: promote and broadcast the
// operands (with autograd, so the casts and expands carry their own gradients), run one fused
// catalog op, and record a node on the prepared operands. A device whose plugin has no kernel
// for a fused op (clamp, lerp, addcmul, addcdiv are newer than the binary ops) gets the same
// result composed from binary ops.
//
// Linear algebra runs its products through mm/bmm and records one node per op with PyTorch's
// formula; the others are compositions of differentiable ops.
#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "../autograd/grad_utils.h"
#include "plugflow/autocast.h"
#include "../registry_internal.h"
#include "grad.h"
#include "op_tables.h"
#include "plugflow/autograd.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace plugflow::ops {
namespace {

using Tensors = std::vector<Tensor>;
namespace ag = autograd;

// ================================================================================================
// catalog: the fused pointwise ops (docs/kernels.md)
// ================================================================================================

std::vector<TensorMeta> ternary_meta(std::span<const Tensor> in, const Attrs&) {
  PF_CHECK(in.size() == 3, "ternary elementwise op: expected 3 inputs, got ", in.size());
  for (size_t i = 1; i < in.size(); ++i) {
    PF_CHECK(in[i].sizes() == in[0].sizes(), "ternary elementwise op: inputs must have one shape (broadcast first), got ",
             shape_str(in[0].sizes()), " and ", shape_str(in[i].sizes()));
    PF_CHECK_T(in[i].dtype() == in[0].dtype(), TypeError,
               "ternary elementwise op: inputs must have one dtype (promote first), got ", dtype_name(in[0].dtype()),
               " and ", dtype_name(in[i].dtype()));
  }
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}};
}

// The fused ops, from their definitions (core/opdefs/math.yaml).
enum class Fused {
#define PF_X(name, Camel, dtypes, sig) Camel,
  PF_OPDEFS_TERNARY(PF_X)
#undef PF_X
};
#define PF_X(name, Camel, dtypes, sig) name,
constexpr const char* kFusedNames[] = {PF_OPDEFS_TERNARY(PF_X)};
#undef PF_X
constexpr size_t kNumFused = std::size(kFusedNames);

const bool kMathOpsRegistered = [] {
#define PF_X(name, Camel, dtypes, sig) register_op(name, sig, ternary_meta);
  PF_OPDEFS_TERNARY(PF_X)
#undef PF_X
  return true;
}();

const OpDef& op_of(Fused f) {
  static const auto defs = [] {
    std::array<const OpDef*, kNumFused> d{};
    for (size_t i = 0; i < kNumFused; ++i) d[i] = &find_op(kFusedNames[i]);
    return d;
  }();
  return *defs[static_cast<size_t>(f)];
}

// Whether the device's plugins implement `f` for `dtype`, else the composite runs. A miss is
// remembered until the kernel registry changes (a plugin loads), so devices without the fused
// kernels pay no failed lookup per call.
bool has_kernel(Fused f, Device device, DType dtype) {
  static std::atomic<uint64_t> missing[kNumFused][kMaxDeviceTypes][kNumDTypes] = {};  // registry generation + 1
  auto& miss = missing[static_cast<size_t>(f)][static_cast<int>(device.type)][static_cast<int>(dtype)];
  const uint64_t gen = internal::registry_generation();
  if (miss.load(std::memory_order_relaxed) == gen + 1) return false;
  try {
    find_kernel(op_of(f), device.type, dtype);
    return true;
  } catch (const NotImplementedError&) {
    miss.store(gen + 1, std::memory_order_relaxed);
    return false;
  }
}

// ================================================================================================
// helpers
// ================================================================================================

int category(DType t) { return t == DType::Bool ? 0 : is_floating(t) ? 2 : 1; }

// torch.result_type over any number of tensors and numbers (dim > 0 tensors, then 0-d
// tensors, then numbers; a lower group only counts when it is of a higher kind).
struct Promotion {
  std::optional<DType> dim, zero_dim, wrapped;
  static std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
    if (!higher) return lower;
    if (!lower) return higher;
    if (is_floating(*higher)) return higher;
    if (*higher == DType::Bool || is_floating(*lower)) return promote_types(*higher, *lower);
    return higher;
  }
  Promotion& add(const Tensor& t) {
    if (!t.defined()) return *this;
    auto& slot = t.dim() > 0 ? dim : zero_dim;
    slot = slot ? promote_types(*slot, t.dtype()) : t.dtype();
    return *this;
  }
  Promotion& add(const std::optional<Scalar>& s) {
    if (!s) return *this;
    wrapped = wrapped ? promote_types(*wrapped, s->default_dtype()) : s->default_dtype();
    return *this;
  }
  DType result() const { return *combine(dim, combine(zero_dim, wrapped)); }
};

Shape broadcast_all(std::initializer_list<const Tensor*> ts) {
  Shape s;
  bool first = true;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    s = first ? t->sizes() : broadcast_shapes(s, t->sizes());
    first = false;
  }
  return s;
}

// t as dtype dt, expanded to shape (both recorded for autograd, so gradients flow back).
Tensor prepare(const Tensor& t, DType dt, const Shape& shape) {
  if (!t.defined()) return t;
  Tensor c = to(t, std::nullopt, dt);
  return c.sizes() == shape ? c : expand(c, shape);
}

// An operand of an in-place op that shares memory with the destination but is not the very
// same elements is read from a private copy (kernels may not read what another lane writes).
Tensor unalias(const Tensor& t, const Tensor& self) {
  if (!t.defined() || t.storage() != self.storage()) return t;
  if (t.offset() == self.offset() && t.strides() == self.strides() && t.sizes() == self.sizes()) return t;
  return clone(t);
}

void check_inplace_result(DType result, const Tensor& self) {
  PF_CHECK(category(result) <= category(self.dtype()), "result type ", scalar_type_name(result),
           " can't be cast to the desired output type ", scalar_type_name(self.dtype()));
}

void check_inplace_shape(const Shape& shape, const Tensor& self) {
  PF_CHECK(shape == self.sizes(), "output with shape ", shape_str(self.sizes()), " doesn't match the broadcast shape ",
           shape_str(shape));
}

Tensor cmp(const char* name, const Tensor& a, const Tensor& b) { return binary(name, a, b); }
Tensor cmp(const char* name, const Tensor& a, Scalar b) { return binary(name, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", a, b); }
Tensor mul(const Tensor& a, Scalar b) { return binary("mul", a, b); }

bool is_zero(const Scalar& s) { return s.to_double() == 0.0; }
bool is_one(const Scalar& s) { return s.is_floating() ? s.to_double() == 1.0 : s.to_int() == 1; }

// ================================================================================================
// clamp
// ================================================================================================

// Values of clamp into a new tensor: inputs already of one dtype and shape. Missing bounds are
// undefined. No autograd.
Tensor clamp_values(const Tensor& a, const Tensor& lo, const Tensor& hi) {
  ag::GradModeGuard no_grad(false);
  if (has_kernel(Fused::Clamp, a.device(), a.dtype())) {
    // An absent bound's slot repeats the other bound (a broadcast number stays one).
    const Tensor in[] = {a, lo.defined() ? lo : hi, hi.defined() ? hi : lo};
    return call_op(op_of(Fused::Clamp), in, Attrs{{"has_min", lo.defined()}, {"has_max", hi.defined()}})[0];
  }
  // Composite: maximum/minimum propagate NaN like the fused kernel.
  Tensor r = lo.defined() ? binary("maximum", a, lo) : a;
  if (hi.defined()) r = binary("minimum", r, hi);
  return r.is_same(a) ? clone(a) : r;
}

// In place: self = clamp(self, lo, hi); lo/hi of self's dtype and shape (or undefined).
void clamp_values_(Tensor& self, const Tensor& lo, const Tensor& hi) {
  ag::GradModeGuard no_grad(false);
  if (has_kernel(Fused::Clamp, self.device(), self.dtype())) {
    const Tensor in[] = {self, lo.defined() ? lo : hi, hi.defined() ? hi : lo};
    Tensor out[] = {self};
    call_op_out(op_of(Fused::Clamp), in, Attrs{{"has_min", lo.defined()}, {"has_max", hi.defined()}}, out);
    return;
  }
  Tensor r = clamp_values(self, lo, hi);
  copy_(self, r);
}

// g where cond, else 0 (an infinite gradient stays out of the masked-off elements).
Tensor grad_where(const Tensor& cond, const Tensor& g) { return where(cond, g, Scalar(0)); }

// PyTorch's clamp gradients: the input gets the gradient where lo <= a <= hi; a tensor bound
// where it was the active one (min where a < min < max, max where a > max or max < min).
Tensors clamp_grads(const Tensor& g, const Tensor& a, const Tensor& lo, const Tensor& hi,
                    const std::optional<Scalar>& slo, const std::optional<Scalar>& shi, const std::vector<bool>& need) {
  Tensor inside;
  auto both = [](const Tensor& x, const Tensor& y) { return x.defined() ? binary("logical_and", x, y) : y; };
  if (lo.defined()) inside = cmp("ge", a, lo);
  if (slo) inside = cmp("ge", a, *slo);
  if (hi.defined()) inside = both(inside, cmp("le", a, hi));
  if (shi) inside = both(inside, cmp("le", a, *shi));
  Tensors out(3);
  if (need[0]) out[0] = grad_where(inside, g);
  if (need[1] && lo.defined()) {
    const Tensor below = cmp("lt", a, lo);
    out[1] = grad_where(hi.defined() ? binary("logical_and", below, cmp("lt", lo, hi)) : below, g);
  }
  if (need[2] && hi.defined()) {
    const Tensor above = cmp("gt", a, hi);
    out[2] = grad_where(lo.defined() ? binary("logical_or", above, cmp("lt", hi, lo)) : above, g);
  }
  return out;
}

std::vector<bool> needs_grad(std::initializer_list<const Tensor*> ts) {
  std::vector<bool> out;
  for (const Tensor* t : ts) out.push_back(t->defined() && ag::requires_grad(*t));
  return out;
}

void record_clamp(const char* name, const Tensor& a, const Tensor& lo, const Tensor& hi, std::optional<Scalar> slo,
                  std::optional<Scalar> shi, const Tensor& out) {
  if (!is_floating(out.dtype()) || !ag::any_requires_grad({&a, &lo, &hi})) return;
  auto node = ag::make_node(name, [slo, shi, need = needs_grad({&a, &lo, &hi})](const Tensors& g, const Tensors& s) {
    return clamp_grads(g[0], s[0], s[1], s[2], slo, shi, need);
  });
  node->save(a);
  node->save(lo);
  node->save(hi);
  ag::record(node, {a, lo, hi}, {out});
}

// The bound clamp's values use: PyTorch 1.13's clamp with a single number bound computes
// min(a, bound) / max(a, bound) as std::min / std::max, which return `a` for a NaN bound, so a
// lone NaN bound leaves the values alone (an infinite bound of the same side does that too). Its
// gradient still compares with NaN (zero). With both bounds, a NaN one makes every value NaN:
// the other bound is then not converted to the dtype (PyTorch fills NaN before any range check).
std::optional<Scalar> value_bound(const std::optional<Scalar>& bound, const std::optional<Scalar>& other,
                                  double neutral) {
  const auto is_nan = [](const std::optional<Scalar>& b) { return b && b->is_floating() && std::isnan(b->to_double()); };
  if (is_nan(bound) && !other) return Scalar(neutral);
  if (bound && is_nan(other)) return other;
  return bound;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_clamp_dtype(DType dt, bool scalar) {
  PF_CHECK(!(scalar && dt == DType::Bool), "\"clamp_scalar_cpu\" not implemented for 'Bool'");
}

// In-place pointwise ops record through this: `fn(g, saved)` gets `saved` (self's value before
// the op, when the formula needs it, and whatever else it reads) and returns
// {grad of self, grads of others...}.
template <typename F>
void record_pointwise_inplace(const char* name, const Tensor& self, const Tensors& saved, const Tensors& others,
                              F&& fn) {
  auto node = ag::make_node(name, std::forward<F>(fn));
  for (const Tensor& t : saved) node->save(t);
  ag::record_inplace(node, self, others);
}

}  // namespace

Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  PF_CHECK(min || max, "torch.clamp: At least one of 'min' or 'max' must not be None");
  const DType dt = Promotion().add(a).add(min).add(max).result();
  check_clamp_dtype(dt, true);
  const Tensor x = to(a, std::nullopt, dt);
  const std::optional<Scalar> vmin = value_bound(min, max, -kInf), vmax = value_bound(max, min, kInf);
  const Tensor lo = vmin ? expand(scalar_tensor(*vmin, dt, a.device()), x.sizes()) : Tensor();
  const Tensor hi = vmax ? expand(scalar_tensor(*vmax, dt, a.device()), x.sizes()) : Tensor();
  Tensor out = clamp_values(x, lo, hi);
  record_clamp(min && max ? "ClampBackward1" : min ? "ClampMinBackward0" : "ClampMaxBackward0", x, Tensor(), Tensor(),
               min, max, out);
  return out;
}

Tensor clamp(const Tensor& a, const Tensor& min, const Tensor& max) {
  PF_CHECK(min.defined() || max.defined(), "torch.clamp: At least one of 'min' or 'max' must not be None");
  const DType dt = Promotion().add(a).add(min).add(max).result();
  const Shape shape = broadcast_all({&a, &min, &max});
  const Tensor x = prepare(a, dt, shape), lo = prepare(min, dt, shape), hi = prepare(max, dt, shape);
  Tensor out = clamp_values(x, lo, hi);
  record_clamp(min.defined() && max.defined() ? "ClampBackward0"
               : min.defined()                ? "ClampMinBackward1"
                                              : "ClampMaxBackward1",
               x, lo, hi, std::nullopt, std::nullopt, out);
  return out;
}

Tensor& clamp_(Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  PF_CHECK(min || max, "torch.clamp: At least one of 'min' or 'max' must not be None");
  const DType dt = Promotion().add(a).add(min).add(max).result();
  check_clamp_dtype(dt, true);
  check_inplace_result(dt, a);
  check_no_internal_overlap(a);
  ag::check_inplace(a);
  // Clamping in a's dtype selects the same values as clamping in the promoted one.
  const DType st = a.dtype();
  const std::optional<Scalar> vmin = value_bound(min, max, -kInf), vmax = value_bound(max, min, kInf);
  const Tensor lo = vmin ? expand(scalar_tensor(*vmin, st, a.device()), a.sizes()) : Tensor();
  const Tensor hi = vmax ? expand(scalar_tensor(*vmax, st, a.device()), a.sizes()) : Tensor();
  const bool grad = is_floating(st) && ag::any_requires_grad({&a});
  const Tensor before = grad ? clone(ag::detach(a)) : Tensor();
  clamp_values_(a, lo, hi);
  if (grad)
    record_pointwise_inplace("ClampBackward1", a, {before}, {}, [min, max](const Tensors& g, const Tensors& s) {
      return Tensors{clamp_grads(g[0], s[0], Tensor(), Tensor(), min, max, {true, false, false})[0]};
    });
  return a;
}

Tensor& clamp_(Tensor& a, const Tensor& min, const Tensor& max) {
  PF_CHECK(min.defined() || max.defined(), "torch.clamp: At least one of 'min' or 'max' must not be None");
  const DType dt = Promotion().add(a).add(min).add(max).result();
  check_inplace_result(dt, a);
  const Shape shape = broadcast_all({&a, &min, &max});
  check_inplace_shape(shape, a);
  check_no_internal_overlap(a);
  ag::check_inplace(a);
  const DType st = a.dtype();
  const Tensor lo = unalias(prepare(min, st, shape), a), hi = unalias(prepare(max, st, shape), a);
  const bool grad = is_floating(st) && ag::any_requires_grad({&a, &lo, &hi});
  const Tensor before = grad ? clone(ag::detach(a)) : Tensor();
  clamp_values_(a, lo, hi);
  if (grad) {
    const bool has_lo = lo.defined(), has_hi = hi.defined();
    Tensors others;
    if (has_lo) others.push_back(lo);
    if (has_hi) others.push_back(hi);
    Tensors saved{before};
    saved.insert(saved.end(), others.begin(), others.end());
    record_pointwise_inplace("ClampBackward0", a, saved, others,
                             [has_lo, has_hi, need = needs_grad({&a, &lo, &hi})](const Tensors& g, const Tensors& s) {
                               const Tensor l = has_lo ? s[1] : Tensor();
                               const Tensor h = has_hi ? s[has_lo ? 2 : 1] : Tensor();
                               Tensors r = clamp_grads(g[0], s[0], l, h, std::nullopt, std::nullopt,
                                                       {true, need[1], need[2]});
                               Tensors out{r[0]};
                               if (has_lo) out.push_back(r[1]);
                               if (has_hi) out.push_back(r[2]);
                               return out;
                             });
  }
  return a;
}

// ---- hardtanh: clamp's values, strict-inequality gradient ---------------------------------------

namespace {
// PyTorch's hardtanh_backward: zero where a <= lo or a >= hi, the gradient elsewhere (NaN included).
Tensor hardtanh_grad(const Tensor& g, const Tensor& a, Scalar lo, Scalar hi) {
  return where(binary("logical_or", cmp("le", a, lo), cmp("ge", a, hi)), Scalar(0), g);
}
void check_hardtanh(const Tensor& a) {
  PF_CHECK(a.dtype() != DType::Bool, "\"hardtanh_cpu\" not implemented for 'Bool'");
}
}  // namespace

Tensor hardtanh(const Tensor& a, Scalar min_val, Scalar max_val) {
  check_hardtanh(a);
  const DType dt = a.dtype();
  const Tensor lo = expand(scalar_tensor(min_val, dt, a.device()), a.sizes());
  const Tensor hi = expand(scalar_tensor(max_val, dt, a.device()), a.sizes());
  Tensor out = clamp_values(a, lo, hi);
  if (is_floating(dt) && ag::any_requires_grad({&a})) {
    auto node = ag::make_node("HardtanhBackward0", [min_val, max_val](const Tensors& g, const Tensors& s) {
      return Tensors{hardtanh_grad(g[0], s[0], min_val, max_val)};
    });
    node->save(a);
    ag::record(node, {a}, {out});
  }
  return out;
}

Tensor& hardtanh_(Tensor& a, Scalar min_val, Scalar max_val) {
  check_hardtanh(a);
  check_no_internal_overlap(a);
  ag::check_inplace(a);
  const DType dt = a.dtype();
  const Tensor lo = expand(scalar_tensor(min_val, dt, a.device()), a.sizes());
  const Tensor hi = expand(scalar_tensor(max_val, dt, a.device()), a.sizes());
  const bool grad = is_floating(dt) && ag::any_requires_grad({&a});
  const Tensor before = grad ? clone(ag::detach(a)) : Tensor();
  clamp_values_(a, lo, hi);
  if (grad)
    record_pointwise_inplace("HardtanhBackward1", a, {before}, {}, [min_val, max_val](const Tensors& g, const Tensors& s) {
      return Tensors{hardtanh_grad(g[0], s[0], min_val, max_val)};
    });
  return a;
}

// ================================================================================================
// lerp
// ================================================================================================

namespace {

void check_lerp(const Tensor& a, const Tensor& end, const Tensor& weight) {
  PF_CHECK(a.dtype() == end.dtype(), "expected dtype ", cpp_type_name(a.dtype()), " for `end` but got dtype ",
           cpp_type_name(end.dtype()));
  if (weight.defined())
    PF_CHECK(a.dtype() == weight.dtype(), "expected dtype ", cpp_type_name(a.dtype()), " for `weight` but got dtype ",
             cpp_type_name(weight.dtype()));
  PF_CHECK(is_floating(a.dtype()), "\"lerp_kernel_", weight.defined() ? "tensor" : "scalar", "\" not implemented for '",
           scalar_type_name(a.dtype()), "'");
}

Tensor lerp_values(const Tensor& a, const Tensor& end, const Tensor& w) {
  ag::GradModeGuard no_grad(false);
  if (has_kernel(Fused::Lerp, a.device(), a.dtype())) {
    const Tensor in[] = {a, end, w};
    return call_op(op_of(Fused::Lerp), in)[0];
  }
  return binary("add", a, mul(w, binary("sub", end, a)));
}

void lerp_values_(Tensor& self, const Tensor& end, const Tensor& w) {
  ag::GradModeGuard no_grad(false);
  if (has_kernel(Fused::Lerp, self.device(), self.dtype())) {
    const Tensor in[] = {self, end, w};
    Tensor out[] = {self};
    call_op_out(op_of(Fused::Lerp), in, {}, out);
    return;
  }
  copy_(self, lerp_values(self, end, w));
}

// PyTorch computes a float16 / bfloat16 lerp in float32 with a number weight held as a float:
// a weight the 16-bit dtype cannot hold exactly (0.7; 3.4e38, past bfloat16's range) would be
// rounded by the 16-bit kernel's weight operand, so such a call runs in float32 and rounds once,
// as PyTorch's.
bool weight_needs_float32(const Tensor& a, Scalar weight) {
  if (a.dtype() != DType::Float16 && a.dtype() != DType::BFloat16) return false;
  const float w = static_cast<float>(weight.to_double());
  if (!std::isfinite(w)) return false;
  const float held = a.dtype() == DType::Float16 ? Half::to_float(Half::from_float(w))
                                                 : BFloat16::to_float(BFloat16::from_float(w));
  return held != w;
}

// lerp's values for a number weight: in float32 where the 16-bit dtype cannot hold it (rounded
// once to `dt`), else with the weight as an operand of `dt`. Autograd is the caller's, the same
// either way (PyTorch's derivative multiplies by the number in the tensor's dtype).
Tensor number_weight_lerp_values(const Tensor& a, const Tensor& end, Scalar weight, DType dt, const Shape& shape) {
  if (!weight_needs_float32(a, weight))
    return lerp_values(a, end, expand(scalar_tensor(weight, dt, a.device()), shape));
  ag::GradModeGuard no_grad(false);
  const auto wide = [](const Tensor& t) { return to(t, std::nullopt, DType::Float32); };
  return to(lerp_values(wide(a), wide(end), expand(scalar_tensor(weight, DType::Float32, a.device()), shape)),
            std::nullopt, dt);
}

// In place: `self` gets number_weight_lerp_values of its old value.
void lerp_values_float32_(Tensor& self, const Tensor& end, Scalar weight, const Shape& shape) {
  ag::GradModeGuard no_grad(false);
  copy_(self, number_weight_lerp_values(self, end, weight, self.dtype(), shape));
}

// d/da = 1 - w, d/dend = w, d/dw = end - a.
Tensors lerp_grads(const Tensor& g, const Tensor& a, const Tensor& end, const Tensor& w, double sw,
                   const std::vector<bool>& need) {
  Tensors out(3);
  if (need[0]) out[0] = w.defined() ? mul(g, binary("sub", Scalar(1), w)) : mul(g, Scalar(1.0 - sw));
  if (need[1]) out[1] = w.defined() ? mul(g, w) : mul(g, Scalar(sw));
  if (need[2]) out[2] = mul(g, binary("sub", end, a));
  return out;
}

Tensor lerp_impl(const Tensor& a, const Tensor& end, const Tensor& weight, std::optional<Scalar> sweight) {
  check_lerp(a, end, weight);
  const Shape shape = broadcast_all({&a, &end, &weight});
  const DType dt = a.dtype();
  const Tensor x = prepare(a, dt, shape), e = prepare(end, dt, shape);
  const Tensor wt = weight.defined() ? prepare(weight, dt, shape) : Tensor();
  Tensor out = wt.defined() ? lerp_values(x, e, wt) : number_weight_lerp_values(x, e, *sweight, dt, shape);
  if (ag::any_requires_grad({&x, &e, &wt})) {
    const double sw = sweight ? sweight->to_double() : 0.0;
    const auto need = needs_grad({&x, &e, &wt});
    auto node = ag::make_node(weight.defined() ? "LerpBackward1" : "LerpBackward0",
                              [sw, need](const Tensors& g, const Tensors& s) {
                                return lerp_grads(g[0], s[0], s[1], s[2], sw, need);
                              });
    node->save(need[2] ? x : Tensor());
    node->save(need[2] ? e : Tensor());
    node->save(wt);
    ag::record(node, {x, e, wt}, {out});
  }
  return out;
}

Tensor& lerp_impl_(Tensor& a, const Tensor& end, const Tensor& weight, std::optional<Scalar> sweight) {
  check_lerp(a, end, weight);
  const Shape shape = broadcast_all({&a, &end, &weight});
  check_inplace_shape(shape, a);
  check_no_internal_overlap(a);
  ag::check_inplace(a);
  const DType dt = a.dtype();
  const Tensor e = unalias(prepare(end, dt, shape), a);
  const Tensor wt = weight.defined() ? unalias(prepare(weight, dt, shape), a) : Tensor();
  const bool grad = ag::any_requires_grad({&a, &e, &wt});
  const auto need = needs_grad({&a, &e, &wt});
  const Tensor before = grad && need[2] ? clone(ag::detach(a)) : Tensor();
  if (wt.defined() || !weight_needs_float32(a, *sweight))
    lerp_values_(a, e, wt.defined() ? wt : expand(scalar_tensor(*sweight, dt, a.device()), shape));
  else
    lerp_values_float32_(a, e, *sweight, shape);
  if (grad) {
    const double sw = sweight ? sweight->to_double() : 0.0;
    Tensors others{e};
    if (wt.defined()) others.push_back(wt);
    const bool tensor_w = wt.defined();
    // Saved: self's old value and end (for d/dweight only), the weight (for the others).
    const Tensors saved{before, need[2] ? e : Tensor(), wt};
    record_pointwise_inplace(tensor_w ? "LerpBackward1" : "LerpBackward0", a, saved, others,
                             [sw, need, tensor_w](const Tensors& g, const Tensors& s) {
                               Tensors r = lerp_grads(g[0], s[0], s[1], tensor_w ? s[2] : Tensor(), sw,
                                                      {true, need[1], need[2]});
                               Tensors out{r[0], r[1]};
                               if (tensor_w) out.push_back(r[2]);
                               return out;
                             });
  }
  return a;
}

}  // namespace

Tensor lerp(const Tensor& a, const Tensor& end, const Tensor& weight) { return lerp_impl(a, end, weight, std::nullopt); }
Tensor lerp(const Tensor& a, const Tensor& end, Scalar weight) { return lerp_impl(a, end, Tensor(), weight); }
Tensor& lerp_(Tensor& a, const Tensor& end, const Tensor& weight) { return lerp_impl_(a, end, weight, std::nullopt); }
Tensor& lerp_(Tensor& a, const Tensor& end, Scalar weight) { return lerp_impl_(a, end, Tensor(), weight); }

// ================================================================================================
// addcmul / addcdiv
// ================================================================================================

namespace {

// PyTorch's kernels convert value to their compute type, float for float16 / bfloat16, with
// an overflow check: 3.4e38 is a valid bfloat16 value (the product overflows to inf), 1e39 not.
void check_value_fits(Scalar value, DType dt) {
  check_scalar_fits(value, dt == DType::Float16 || dt == DType::BFloat16 ? DType::Float32 : dt);
}

// The value as the compute dtype sees it (PyTorch casts it: integral ops truncate).
Scalar value_as(Scalar v, DType dt) {
  if (is_floating(dt)) return Scalar(v.to_double());
  return Scalar(v.to_int());
}

DType addc_dtype(bool is_div, const Tensor& self, const Tensor& t1, const Tensor& t2) {
  if (is_div)
    PF_CHECK(!(is_integral(t1.dtype(), true) && is_integral(t2.dtype(), true)),
             "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform a "
             "true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as (input + "
             "value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input + value * "
             "tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter implementation: "
             "(input + value * tensor1 / tensor2), for all dtypes.");
  const DType dt = Promotion().add(self).add(t1).add(t2).result();
  PF_CHECK(dt != DType::Bool, "\"", is_div ? "addcdiv" : "addcmul", "_cpu_out\" not implemented for 'Bool'");
  return dt;
}

Tensor addc_values(bool is_div, const Tensor& s, const Tensor& t1, const Tensor& t2, Scalar value) {
  ag::GradModeGuard no_grad(false);
  const Fused op = is_div ? Fused::Addcdiv : Fused::Addcmul;
  const Scalar v = value_as(value, s.dtype());
  if (has_kernel(op, s.device(), s.dtype())) {
    const Tensor in[] = {s, t1, t2};
    return call_op(op_of(op), in, Attrs{{"value", v}})[0];
  }
  const Tensor prod = is_div ? binary("div", mul(t1, v), t2) : mul(mul(t1, t2), v);
  return binary("add", s, prod);
}

void addc_values_(bool is_div, Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value) {
  ag::GradModeGuard no_grad(false);
  const Fused op = is_div ? Fused::Addcdiv : Fused::Addcmul;
  if (has_kernel(op, self.device(), self.dtype())) {
    const Tensor in[] = {self, t1, t2};
    Tensor out[] = {self};
    call_op_out(op_of(op), in, Attrs{{"value", value_as(value, self.dtype())}}, out);
    return;
  }
  copy_(self, addc_values(is_div, self, t1, t2, value));
}

// addcmul: d/dt1 = g * t2 * v, d/dt2 = g * t1 * v; addcdiv: d/dt1 = g * v / t2,
// d/dt2 = -g * v * t1 / t2^2.
Tensors addc_grads(bool is_div, const Tensor& g, const Tensor& t1, const Tensor& t2, double v,
                   const std::vector<bool>& need) {
  Tensors out(3);
  if (need[0]) out[0] = g;
  if (is_div) {
    if (need[1]) out[1] = binary("div", mul(g, Scalar(v)), t2);
    if (need[2]) out[2] = binary("div", mul(mul(g, Scalar(-v)), t1), mul(t2, t2));
  } else {
    if (need[1]) out[1] = mul(mul(g, t2), Scalar(v));
    if (need[2]) out[2] = mul(mul(g, t1), Scalar(v));
  }
  return out;
}

Tensor addc(bool is_div, const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value) {
  const DType dt = addc_dtype(is_div, self, t1, t2);
  check_value_fits(value, dt);
  const Shape shape = broadcast_all({&self, &t1, &t2});
  const Tensor s = prepare(self, dt, shape), a = prepare(t1, dt, shape), b = prepare(t2, dt, shape);
  Tensor out = addc_values(is_div, s, a, b, value);
  if (is_floating(dt) && ag::any_requires_grad({&s, &a, &b})) {
    const auto need = needs_grad({&s, &a, &b});
    const double v = value.to_double();
    auto node = ag::make_node(is_div ? "AddcdivBackward0" : "AddcmulBackward0",
                              [is_div, v, need](const Tensors& g, const Tensors& sv) {
                                return addc_grads(is_div, g[0], sv[0], sv[1], v, need);
                              });
    node->save(need[2] || (is_div && need[1]) ? a : Tensor());
    node->save(need[1] || (is_div && need[2]) ? b : Tensor());
    ag::record(node, {s, a, b}, {out});
  }
  return out;
}

Tensor& addc_(bool is_div, Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value) {
  const DType dt = addc_dtype(is_div, self, t1, t2);
  check_value_fits(value, dt);
  check_inplace_result(dt, self);
  const Shape shape = broadcast_all({&self, &t1, &t2});
  check_inplace_shape(shape, self);
  check_no_internal_overlap(self);
  if (dt != self.dtype()) {  // computed in the wider dtype, then cast back (as PyTorch)
    copy_(self, addc(is_div, self, t1, t2, value));
    return self;
  }
  ag::check_inplace(self);
  const Tensor a = unalias(prepare(t1, dt, shape), self), b = unalias(prepare(t2, dt, shape), self);
  // An operand that is self itself is saved as its old value.
  const bool grad = is_floating(dt) && ag::any_requires_grad({&self, &a, &b});
  const Tensor a_saved = grad && a.is_same(self) ? clone(ag::detach(a)) : a;
  const Tensor b_saved = grad && b.is_same(self) ? clone(ag::detach(b)) : b;
  addc_values_(is_div, self, a, b, value);
  if (grad) {
    const auto need = needs_grad({&self, &a, &b});
    const double v = value.to_double();
    auto node = ag::make_node(is_div ? "AddcdivBackward0" : "AddcmulBackward0",
                              [is_div, v, need](const Tensors& g, const Tensors& sv) {
                                return addc_grads(is_div, g[0], sv[0], sv[1], v, {true, need[1], need[2]});
                              });
    node->save(a_saved);
    node->save(b_saved);
    ag::record_inplace(node, self, {a, b});
  }
  return self;
}

}  // namespace

Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"addcmul", {self, t1, t2}}) return addcmul(cast[0], cast[1], cast[2], value);
  return addc(false, self, t1, t2, value);
}
Tensor& addcmul_(Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value) {
  return addc_(false, self, t1, t2, value);
}
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"addcdiv", {self, t1, t2}}) return addcdiv(cast[0], cast[1], cast[2], value);
  return addc(true, self, t1, t2, value);
}
Tensor& addcdiv_(Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value) {
  return addc_(true, self, t1, t2, value);
}

// ================================================================================================
// activations
// ================================================================================================

namespace {

bool is_param_activation(const std::string& name) {
  for (const auto& act : internal::kParamActivations)
    if (act.name == name) return true;
  return false;
}

double double_attr(const Attrs& attrs, const char* name, double fallback) {
  for (const auto& [n, v] : attrs.items()) {
    if (std::string_view(n) != name) continue;
    if (const double* d = std::get_if<double>(&v)) return *d;
    if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    if (const Scalar* s = std::get_if<Scalar>(&v)) return s->to_double();
    if (const bool* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
    PF_THROW(TypeError, "activation attribute '", name, "' must be a number");
  }
  return fallback;
}

// The kernel's attributes with PyTorch's defaults filled in (docs/kernels.md).
Attrs activation_attrs(const std::string& name, const Attrs& in) {
  if (name == "gelu") {
    std::string approx = "none";
    if (in.has("approximate")) approx = in.get<std::string>("approximate");
    PF_CHECK(approx == "none" || approx == "tanh", "approximate argument must be either none or tanh.");
    return Attrs{{"approximate", approx}};
  }
  if (name == "softplus")
    return Attrs{{"beta", double_attr(in, "beta", 1.0)}, {"threshold", double_attr(in, "threshold", 20.0)}};
  if (name == "leaky_relu") return Attrs{{"negative_slope", double_attr(in, "negative_slope", 0.01)}};
  if (name == "elu")
    return Attrs{{"alpha", double_attr(in, "alpha", 1.0)},
                 {"scale", double_attr(in, "scale", 1.0)},
                 {"input_scale", double_attr(in, "input_scale", 1.0)}};
  return {};
}

// PyTorch's kernel names in "not implemented for" errors.
std::string kernel_label(const std::string& name) { return name == "gelu" ? "GeluKernelImpl" : name + "_cpu"; }

bool float_only_activation(const std::string& name) {
  return is_param_activation(name) || name == "silu" || name == "mish" || name == "hardswish" ||
         name == "hardsigmoid";
}

void check_activation(const std::string& name, const Tensor& a) {
  if (float_only_activation(name))
    PF_CHECK(is_floating(a.dtype()), "\"", kernel_label(name), "\" not implemented for '",
             scalar_type_name(a.dtype()), "'");
  else if (name == "relu")
    PF_CHECK(a.dtype() != DType::Bool, "Boolean inputs not supported for relu");
  else
    PF_CHECK_T(name == "sigmoid" || name == "tanh", ValueError, "unknown activation '", name, "'");
}

}  // namespace

Tensor activation(const std::string& name, const Tensor& a, const Attrs& attrs) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{name, {a}}) return activation(name, cast[0], attrs);
  check_activation(name, a);
  if (!is_param_activation(name)) return unary(name, a);
  const Attrs full = activation_attrs(name, attrs);
  const Tensor in[] = {a};
  Tensor out = call_op(find_op(name), in, full)[0];
  internal::record_unary(name, a, out, full);
  return out;
}

Tensor& activation_(const std::string& name, Tensor& a, const Attrs& attrs) {
  check_activation(name, a);
  if (!is_param_activation(name)) return unary_(name, a);
  const Attrs full = activation_attrs(name, attrs);
  check_no_internal_overlap(a);
  ag::check_inplace(a);
  const bool grad = ag::any_requires_grad({&a});
  const Tensor before = grad && internal::unary_needs_self_before(name) ? clone(ag::detach(a)) : Tensor();
  const Tensor in[] = {a};
  Tensor out[] = {a};
  call_op_out(find_op(name), in, full, out);
  if (grad) internal::record_unary_inplace(name, a, before, full);
  return a;
}

// ================================================================================================
// linear algebra
// ================================================================================================

namespace {

// An alpha/beta as the product's dtype sees it: integral products truncate (PyTorch casts).
Scalar coeff(Scalar s, DType dt) { return is_floating(dt) ? Scalar(s.to_double()) : Scalar(s.to_int()); }

// prod (fresh, owned) = beta * self + alpha * prod, with self broadcastable to prod. No autograd.
// As PyTorch: a zero beta ignores self (NaN and infinities included), and so does a zero alpha
// the product for addmv only (BLAS gemv's rule; addmm and the batched ones multiply it by 0);
// an integral product converts alpha and beta with overflow checks.
Tensor scale_add(Tensor prod, const Tensor& self, Scalar beta, Scalar alpha, bool zero_alpha_ignores_product) {
  ag::GradModeGuard no_grad(false);
  const DType dt = prod.dtype();
  if (is_integral(dt, false)) {
    check_scalar_fits(alpha, dt);
    check_scalar_fits(beta, dt);
  }
  if (zero_alpha_ignores_product && is_zero(coeff(alpha, dt))) fill_(prod, Scalar(int64_t{0}));
  else if (!is_one(coeff(alpha, dt))) binary_("mul", prod, coeff(alpha, dt));
  if (!is_zero(coeff(beta, dt))) binary_("add", prod, is_one(coeff(beta, dt)) ? self : mul(self, coeff(beta, dt)));
  return prod;
}

// beta * self + alpha * (a @ b) for matrices (mm) or batches (bmm); self already checked to
// broadcast to the product's shape. Records PyTorch's AddmmBackward0 / BaddbmmBackward0.
Tensor add_product(const char* name, const Tensor& self, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha,
                   bool batched, bool zero_alpha_ignores_product = false) {
  Tensor prod;
  {
    ag::GradModeGuard no_grad(false);
    prod = batched ? bmm(a, b) : mm(a, b);  // a fresh tensor, scaled in place below
  }
  Tensor out = scale_add(prod, self, beta, alpha, zero_alpha_ignores_product);
  if (is_floating(out.dtype()) && ag::any_requires_grad({&self, &a, &b})) {
    const auto need = needs_grad({&self, &a, &b});
    const double be = beta.to_double(), al = alpha.to_double();
    const bool a_column_major = !batched && ag::column_major(a), b_column_major = !batched && ag::column_major(b);
    auto node = ag::make_node(name, [need, be, al, batched, a_column_major, b_column_major, self_shape = self.sizes()](
                                        const Tensors& g, const Tensors& s) -> Tensors {
      const int64_t r = batched ? 1 : 0;
      auto prod = [batched](const Tensor& x, const Tensor& y) { return batched ? bmm(x, y) : mm(x, y); };
      auto scaled = [](const Tensor& t, double c) { return c == 1.0 ? t : mul(t, Scalar(c)); };
      Tensors out(3);
      if (need[0]) out[0] = ag::sum_to(scaled(g[0], be), self_shape);
      if (need[1]) out[1] = scaled(batched ? prod(g[0], transpose(s[1], r, r + 1)) : ag::mm_grad_a(g[0], s[1], a_column_major), al);
      if (need[2]) out[2] = scaled(batched ? prod(transpose(s[0], r, r + 1), g[0]) : ag::mm_grad_b(g[0], s[0], b_column_major), al);
      return out;
    });
    node->save(need[2] ? a : Tensor());
    node->save(need[1] ? b : Tensor());
    ag::record(node, {self, a, b}, {out});
  }
  return out;
}

// PyTorch has no bool matrix products (its kernels raise "not implemented for 'Bool'", as the
// dispatcher does here); an empty one (inner size 0) fails instead on casting beta * self, whose
// type a number beta promotes (a bool beta keeps bool), back to bool.
void check_empty_bool_product(const Tensor& self, int64_t inner, const Scalar& beta) {
  if (self.dtype() == DType::Bool && inner == 0 && !beta.is_bool())
    PF_THROW(Error, "result type ", beta.is_floating() ? "Float" : "Long", " can't be cast to the desired output type Bool");
}

[[noreturn]] void scalar_type_mismatch(DType expected, DType found) {
  PF_THROW(Error, "expected scalar type ", scalar_type_name(expected), " but found ", scalar_type_name(found));
}

}  // namespace

Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, Scalar beta, Scalar alpha) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"addmm", {self, mat1, mat2}}) return addmm(cast[0], cast[1], cast[2], beta, alpha);
  PF_CHECK(mat1.dim() == 2, "mat1 must be a matrix, got ", mat1.dim(), "-D tensor");
  PF_CHECK(mat2.dim() == 2, "mat2 must be a matrix, got ", mat2.dim(), "-D tensor");
  PF_CHECK(mat1.sizes()[1] == mat2.sizes()[0], "mat1 and mat2 shapes cannot be multiplied (", mat1.sizes()[0], "x",
           mat1.sizes()[1], " and ", mat2.sizes()[0], "x", mat2.sizes()[1], ")");
  PF_CHECK(self.dtype() == mat2.dtype(), "self and mat2 must have the same dtype");
  PF_CHECK(mat1.dtype() == mat2.dtype(), "mat1 and mat2 must have the same dtype");
  expand(ag::detach(self), {mat1.sizes()[0], mat2.sizes()[1]});  // PyTorch's broadcast error
  check_empty_bool_product(self, mat1.sizes()[1], beta);
  return add_product("AddmmBackward0", self, mat1, mat2, beta, alpha, false);
}

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"linear", {input, weight, bias}}) return linear(cast[0], cast[1], cast[2]);
  PF_CHECK(weight.dim() <= 2, "t() expects a tensor with <= 2 dimensions, but self is ", weight.dim(), "D");
  const Tensor wt = weight.dim() < 2 ? weight : transpose(weight, 0, 1);
  if (input.dim() == 2 && bias.defined()) return addmm(bias, input, wt);
  const Tensor out = matmul(input, wt);
  return bias.defined() ? binary("add", out, bias) : out;
}

Tensor mv(const Tensor& mat, const Tensor& vec) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"mv", {mat, vec}}) return mv(cast[0], cast[1]);
  PF_CHECK(mat.dim() == 2 && vec.dim() == 1, "vector + matrix @ vector expected, got 1, ", mat.dim(), ", ", vec.dim());
  PF_CHECK(mat.sizes()[1] == vec.sizes()[0], "size mismatch, got ", mat.sizes()[0], ", ", mat.sizes()[0], "x",
           mat.sizes()[1], ",", vec.sizes()[0]);
  if (mat.dtype() != vec.dtype()) scalar_type_mismatch(mat.dtype(), vec.dtype());
  return squeeze(mm(mat, unsqueeze(vec, 1)), 1);
}

Tensor addmv(const Tensor& self, const Tensor& mat, const Tensor& vec, Scalar beta, Scalar alpha) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"addmv", {self, mat, vec}}) return addmv(cast[0], cast[1], cast[2], beta, alpha);
  PF_CHECK(mat.dim() == 2 && vec.dim() == 1 && self.dim() <= 1, "vector + matrix @ vector expected, got ", self.dim(),
           ", ", mat.dim(), ", ", vec.dim());
  const int64_t n = mat.sizes()[0];
  const bool self_ok = self.dim() == 0 || self.sizes()[0] == n || self.sizes()[0] == 1;
  PF_CHECK(mat.sizes()[1] == vec.sizes()[0] && self_ok, "size mismatch, got ", self.dim() == 0 ? 1 : self.sizes()[0],
           ", ", n, "x", mat.sizes()[1], ",", vec.sizes()[0]);
  if (mat.dtype() != vec.dtype()) scalar_type_mismatch(mat.dtype(), vec.dtype());
  const Tensor s = to(self, std::nullopt, mat.dtype());  // PyTorch computes in mat's dtype
  const Tensor s2 = s.dim() == 1 ? unsqueeze(s, 1) : s;
  return squeeze(add_product("AddmvBackward0", s2, mat, unsqueeze(vec, 1), beta, alpha, false, true), 1);
}

Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, Scalar beta, Scalar alpha) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"baddbmm", {self, batch1, batch2}}) return baddbmm(cast[0], cast[1], cast[2], beta, alpha);
  PF_CHECK(batch1.dim() == 3, "batch1 must be a 3D tensor");
  PF_CHECK(batch2.dim() == 3, "batch2 must be a 3D tensor");
  const int64_t b = batch1.sizes()[0], n = batch1.sizes()[1], k = batch1.sizes()[2], p = batch2.sizes()[2];
  PF_CHECK(batch2.sizes()[0] == b && batch2.sizes()[1] == k,
           "Expected size for first two dimensions of batch2 tensor to be: [", b, ", ", k, "] but got: [",
           batch2.sizes()[0], ", ", batch2.sizes()[1], "].");
  if (batch1.dtype() != batch2.dtype()) scalar_type_mismatch(batch1.dtype(), batch2.dtype());
  const Tensor s = to(self, std::nullopt, batch1.dtype());
  expand(ag::detach(s), {b, n, p});
  check_empty_bool_product(s, k, beta);
  return add_product("BaddbmmBackward0", s, batch1, batch2, beta, alpha, true);
}

Tensor addbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, Scalar beta, Scalar alpha) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"addbmm", {self, batch1, batch2}}) return addbmm(cast[0], cast[1], cast[2], beta, alpha);
  PF_CHECK(batch1.dim() == 3, "batch1 must be a 3D tensor");
  PF_CHECK(batch2.dim() == 3, "batch2 must be a 3D tensor");
  const int64_t b = batch1.sizes()[0], n = batch1.sizes()[1], k = batch1.sizes()[2], p = batch2.sizes()[2];
  PF_CHECK(batch2.sizes()[0] == b, "batch1 and batch2 must have same number of batches, got ", b, " and ",
           batch2.sizes()[0]);
  PF_CHECK(batch2.sizes()[1] == k, "Incompatible matrix sizes for bmm (", n, "x", k, " and ", batch2.sizes()[1], "x", p,
           ")");
  // sum_b A_b @ B_b = [A_0 A_1 ...] @ [B_0; B_1; ...]: one GEMM.
  const Tensor a = reshape(permute(batch1, {1, 0, 2}), {n, b * k});
  const Tensor bb = reshape(batch2, {b * k, p});
  return addmm(self, a, bb, beta, alpha);
}

Tensor dot(const Tensor& a, const Tensor& b) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"dot", {a, b}}) return dot(cast[0], cast[1]);
  PF_CHECK(a.dim() == 1 && b.dim() == 1, "1D tensors expected, but got ", a.dim(), "D and ", b.dim(), "D tensors");
  PF_CHECK(a.sizes()[0] == b.sizes()[0], "inconsistent tensor size, expected tensor [", a.sizes()[0], "] and src [",
           b.sizes()[0], "] to have the same number of elements, but got ", a.sizes()[0], " and ", b.sizes()[0],
           " elements respectively");
  PF_CHECK(a.dtype() == b.dtype(), "dot : expected both vectors to have same dtype, but found ",
           scalar_type_name(a.dtype()), " and ", scalar_type_name(b.dtype()));
  PF_CHECK(a.dtype() != DType::Bool, "\"dot\" not implemented for 'Bool'");
  return reshape(mm(unsqueeze(a, 0), unsqueeze(b, 1)), {});
}

Tensor vdot(const Tensor& a, const Tensor& b) { return dot(a, b); }

Tensor outer(const Tensor& a, const Tensor& b) {
  PF_CHECK(a.dim() == 1, "outer: Expected 1-D argument self, but got ", a.dim(), "-D");
  PF_CHECK(b.dim() == 1, "outer: Expected 1-D argument vec2, but got ", b.dim(), "-D");
  return binary("mul", unsqueeze(a, 1), b);
}

Tensor tensordot(const Tensor& a, const Tensor& b, const Shape& dims_a, const Shape& dims_b) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"tensordot", {a, b}}) return tensordot(cast[0], cast[1], dims_a, dims_b);
  PF_CHECK(dims_a.size() == dims_b.size(), "both dimension lists should have same length");
  std::vector<bool> ca(std::max<int64_t>(a.dim(), 1), false), cb(std::max<int64_t>(b.dim(), 1), false);
  Shape da, db;
  for (size_t i = 0; i < dims_a.size(); ++i) {
    const int64_t x = wrap_dim(dims_a[i], a.dim()), y = wrap_dim(dims_b[i], b.dim());
    PF_CHECK(a.sizes()[x] == b.sizes()[y], "contracted dimensions need to match, but first has size ", a.sizes()[x],
             " in dim ", dims_a[i], " and second has size ", b.sizes()[y], " in dim ", dims_b[i]);
    PF_CHECK(!ca[x], "dim ", x, " appears multiple times in the list of dims");
    PF_CHECK(!cb[y], "dim ", y, " appears multiple times in the list of dims");
    ca[x] = cb[y] = true;
    da.push_back(x);
    db.push_back(y);
  }
  if (a.dtype() != b.dtype()) scalar_type_mismatch(a.dtype(), b.dtype());
  Shape perm_a, perm_b, out_shape;
  int64_t m = 1, k = 1, n = 1;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (!ca[d]) {
      perm_a.push_back(d);
      out_shape.push_back(a.sizes()[d]);
      m *= a.sizes()[d];
    }
  for (int64_t d : da) {
    perm_a.push_back(d);
    k *= a.sizes()[d];
  }
  perm_b = db;
  for (int64_t d = 0; d < b.dim(); ++d)
    if (!cb[d]) {
      perm_b.push_back(d);
      out_shape.push_back(b.sizes()[d]);
      n *= b.sizes()[d];
    }
  const Tensor am = reshape(permute(a, perm_a), {m, k});
  const Tensor bm = reshape(permute(b, perm_b), {k, n});
  return reshape(mm(am, bm), out_shape);
}

Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims) {
  PF_CHECK(dims >= 0, "tensordot expects dims >= 0, but got dims=", dims);
  Shape da, db;
  for (int64_t i = 0; i < dims; ++i) {
    da.push_back(i - dims);
    db.push_back(i);
  }
  return tensordot(a, b, da, db);
}

// ================================================================================================
// einsum (PyTorch 1.13's algorithm: align every operand to one dim order, then contract
// left to right with bmm, summing each contraction dim as soon as no later operand has it)
// ================================================================================================

namespace {

constexpr int kLetters = 26;
constexpr int kLabels = 2 * kLetters;
constexpr int kEllipsis = kLabels;

bool is_subscript(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
int to_subscript(char c) { return c >= 'A' && c <= 'Z' ? c - 'A' : c - 'a' + kLetters; }
char to_label(int s) { return static_cast<char>(s < kLetters ? 'A' + s : 'a' + (s - kLetters)); }

// left * right summed over sum_dims; both have the same number of dims (size 1 where a dim is
// missing). Keeps the summed dims as size 1.
Tensor sumproduct_pair(const Tensor& left_in, const Tensor& right_in, const Shape& sum_dims) {
  if (sum_dims.empty()) return binary("mul", left_in, right_in);
  if (left_in.dtype() != right_in.dtype()) scalar_type_mismatch(left_in.dtype(), right_in.dtype());
  const int64_t ndim = left_in.dim();
  std::vector<bool> summed(ndim, false);
  for (int64_t d : sum_dims) summed[d] = true;
  Tensor left = left_in, right = right_in;
  Shape lro, lo, ro;
  int64_t lro_size = 1, lo_size = 1, ro_size = 1, sum_size = 1;
  for (int64_t i = 0; i < ndim; ++i) {
    const bool sl = left.sizes()[i] != 1, sr = right.sizes()[i] != 1;
    if (summed[i]) {
      if (sl && sr) sum_size *= left.sizes()[i];
      else if (sl) left = reduce("sum", left, {i}, true);
      else if (sr) right = reduce("sum", right, {i}, true);
    } else if (sl && sr) {
      lro.push_back(i);
      lro_size *= left.sizes()[i];
    } else if (sl) {
      lo.push_back(i);
      lo_size *= left.sizes()[i];
    } else {
      ro.push_back(i);
      ro_size *= right.sizes()[i];
    }
  }
  Shape out_size;
  for (int64_t d : lro) out_size.push_back(left.sizes()[d]);
  for (int64_t d : lo) out_size.push_back(left.sizes()[d]);
  for (size_t i = 0; i < sum_dims.size(); ++i) out_size.push_back(1);
  for (int64_t d : ro) out_size.push_back(right.sizes()[d]);

  Shape lperm = lro, rperm = lro;
  lperm.insert(lperm.end(), lo.begin(), lo.end());
  lperm.insert(lperm.end(), sum_dims.begin(), sum_dims.end());
  lperm.insert(lperm.end(), ro.begin(), ro.end());
  rperm.insert(rperm.end(), sum_dims.begin(), sum_dims.end());
  rperm.insert(rperm.end(), ro.begin(), ro.end());
  rperm.insert(rperm.end(), lo.begin(), lo.end());
  Shape operm(ndim, -1);
  int64_t pos = 0;
  for (const Shape* group : std::initializer_list<const Shape*>{&lro, &lo, &sum_dims, &ro})
    for (int64_t d : *group) operm[d] = pos++;

  left = reshape(permute(left, lperm), {lro_size, lo_size, sum_size});
  right = reshape(permute(right, rperm), {lro_size, sum_size, ro_size});
  return permute(view(bmm(left, right), out_size), operm);
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"einsum", operands}) return einsum(equation, cast.tensors());
  PF_CHECK(!operands.empty(), "einsum(): must provide at least one operand");
  const size_t num_ops = operands.size();
  const auto arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);

  // Labels of each operand (kEllipsis for "...").
  std::vector<std::vector<int>> op_labels(num_ops);
  bool found_ell = false;
  size_t cur = 0;
  for (size_t i = 0; i < lhs.size(); ++i) {
    const char c = lhs[i];
    switch (c) {
      case ' ':
        break;
      case '.':
        PF_CHECK(!found_ell, "einsum(): found '.' for operand ", cur, " for which an ellipsis was already found");
        PF_CHECK(i + 2 < lhs.size() && lhs[++i] == '.' && lhs[++i] == '.', "einsum(): found '.' for operand ", cur,
                 " that is not part of any ellipsis");
        op_labels[cur].push_back(kEllipsis);
        found_ell = true;
        break;
      case ',':
        ++cur;
        PF_CHECK(cur < num_ops, "einsum(): fewer operands were provided than specified in the equation");
        found_ell = false;
        break;
      default:
        PF_CHECK(is_subscript(c), "einsum(): invalid subscript given at index ", i,
                 " in the equation string, subscripts must be in [a-zA-Z]");
        op_labels[cur].push_back(to_subscript(c));
    }
  }
  PF_CHECK(cur == num_ops - 1, "einsum(): more operands were provided than specified in the equation");

  std::vector<int64_t> label_count(kLabels, 0);
  int64_t ell_num_dim = 0;  // the most dims any ellipsis covers
  for (size_t i = 0; i < num_ops; ++i) {
    const int64_t ndims = operands[i].dim();
    auto nlabels = static_cast<int64_t>(op_labels[i].size());
    bool has_ell = false;
    for (int label : op_labels[i]) {
      if (label == kEllipsis) {
        --nlabels;
        has_ell = true;
        ell_num_dim = std::max(ell_num_dim, ndims - nlabels);
      } else {
        ++label_count[label];
      }
    }
    if (has_ell)
      PF_CHECK(nlabels <= ndims, "einsum(): the number of subscripts in the equation (", nlabels,
               ") is more than the number of dimensions (", ndims, ") for operand ", i);
    else
      PF_CHECK(nlabels == ndims, "einsum(): the number of subscripts in the equation (", nlabels,
               ") does not match the number of dimensions (", ndims, ") for operand ", i,
               " and no ellipsis was given");
  }

  // Every label's position in the aligned dim order: output dims first, then contractions.
  std::vector<int64_t> perm_index(kLabels, -1);
  int64_t next = 0, ell_index = 0;
  found_ell = false;
  if (arrow == std::string::npos) {  // implicit output: "..." then the labels seen once
    next = ell_num_dim;
    found_ell = true;
    for (int label = 0; label < kLabels; ++label)
      if (label_count[label] == 1) perm_index[label] = next++;
  } else {
    const std::string rhs = equation.substr(arrow + 2);
    for (size_t i = 0; i < rhs.size(); ++i) {
      const char c = rhs[i];
      switch (c) {
        case ' ':
          break;
        case '.':
          PF_CHECK(!found_ell, "einsum(): found '.' for output but an ellipsis (...) was already found");
          PF_CHECK(i + 2 < rhs.size() && rhs[++i] == '.' && rhs[++i] == '.',
                   "einsum(): found '.' for output that is not part of any ellipsis (...)");
          ell_index = next;
          next += ell_num_dim;
          found_ell = true;
          break;
        default: {
          PF_CHECK(is_subscript(c), "einsum(): invalid subscript given at index ", lhs.size() + 2 + i,
                   " in the equation string, subscripts must be in [a-zA-Z]");
          const int s = to_subscript(c);
          PF_CHECK(label_count[s] > 0 && perm_index[s] == -1, "einsum(): output subscript ", c,
                   perm_index[s] > -1 ? " appears more than once in the output"
                                      : " does not appear in the equation for any input operand");
          perm_index[s] = next++;
        }
      }
    }
  }
  const int64_t out_size = next;
  if (!found_ell) {  // ellipsis dims not in the output are contracted
    ell_index = next;
    next += ell_num_dim;
  }
  for (int label = 0; label < kLabels; ++label)
    if (label_count[label] > 0 && perm_index[label] == -1) perm_index[label] = next++;
  const int64_t total = next;

  // Align the operands: diagonals for repeated labels, size-1 dims for missing ones, permute.
  std::vector<int64_t> label_size(kLabels, 1), ell_sizes(ell_num_dim, 1);
  std::vector<int64_t> dim_counts(total, 0);  // operands with a non-1 size in each dim
  std::vector<Tensor> ops;
  for (size_t i = 0; i < num_ops; ++i) {
    Tensor op = operands[i];
    Shape perm(total, -1);
    int64_t dim = 0;
    for (int s : op_labels[i]) {
      if (s == kEllipsis) {
        const int64_t covered = operands[i].dim() - (static_cast<int64_t>(op_labels[i].size()) - 1);
        for (int64_t j = ell_num_dim - covered; j < ell_num_dim; ++j) {
          const int64_t size = op.sizes()[dim];
          if (size != 1) {
            PF_CHECK(ell_sizes[j] == 1 || ell_sizes[j] == size, "einsum(): dimension ", dim,
                     " covered by ellipsis in operand ", i, "has size ", size,
                     " which does not broadcast with previously seen ellipsis with size ", ell_sizes[j],
                     " for the respective dimension");
            ell_sizes[j] = size;
            ++dim_counts[ell_index + j];
          }
          perm[ell_index + j] = dim++;
        }
      } else if (perm[perm_index[s]] == -1) {
        const int64_t size = op.sizes()[dim];
        if (size != 1) {
          PF_CHECK(label_size[s] == 1 || label_size[s] == size, "einsum(): subscript ", to_label(s), " has size ",
                   size, " for operand ", i, " which does not broadcast with previously seen size ", label_size[s]);
          label_size[s] = size;
          ++dim_counts[perm_index[s]];
        }
        perm[perm_index[s]] = dim++;
      } else {  // repeated label: the diagonal, kept at the first occurrence's position
        const int64_t prev = perm[perm_index[s]];
        PF_CHECK(op.sizes()[dim] == op.sizes()[prev], "einsum(): subscript ", to_label(s), " is repeated for operand ",
                 i, " but the sizes don't match, ", op.sizes()[dim], " != ", op.sizes()[prev]);
        // The diagonal is an as_strided view, whose gradient assumes its base does not overlap
        // itself: a broadcast (stride-0) operand is materialized first.
        for (int64_t d = 0; d < op.dim(); ++d)
          if (op.strides()[d] == 0 && op.sizes()[d] > 1) {
            op = contiguous(op);
            break;
          }
        Shape sizes = op.sizes(), strides = op.strides();
        strides[prev] += strides[dim];
        sizes.erase(sizes.begin() + dim);
        strides.erase(strides.begin() + dim);
        op = as_strided(op, sizes, strides, op.offset());
      }
    }
    for (auto& p : perm)
      if (p == -1) {
        op = unsqueeze(op, dim);
        p = dim++;
      }
    ops.push_back(permute(op, perm));
  }

  // (An empty operand goes through the contraction too: a shortcut to zeros would leave the
  // result out of autograd, where PyTorch 1.13's inputs get their zero gradients.)
  Tensor result;
  if (num_ops == 1) {
    result = ops[0];
    Shape sum_dims;
    for (int64_t d = out_size; d < total; ++d)
      if (result.sizes()[d] != 1) sum_dims.push_back(d);
    if (!sum_dims.empty()) result = reduce("sum", result, sum_dims, true);
  } else {
    result = ops[0];
    for (size_t i = 1; i < num_ops; ++i) {
      Tensor a = result, b = ops[i];
      Shape sum_dims, a_sum, b_sum;
      for (int64_t d = out_size; d < total; ++d) {
        const bool sa = a.sizes()[d] != 1, sb = b.sizes()[d] != 1;
        if (sa && sb) {
          if (--dim_counts[d] == 1) {
            sum_dims.push_back(d);
            dim_counts[d] = 0;
          }
        } else if (dim_counts[d] == 1) {
          if (sa) {
            a_sum.push_back(d);
            dim_counts[d] = 0;
          } else if (sb) {
            b_sum.push_back(d);
            dim_counts[d] = 0;
          }
        }
      }
      if (!a_sum.empty()) a = reduce("sum", a, a_sum, true);
      if (!b_sum.empty()) b = reduce("sum", b, b_sum, true);
      result = sumproduct_pair(a, b, sum_dims);
    }
  }
  // The contraction dims are all size 1 now.
  if (total > out_size) {
    Shape shape(result.sizes().begin(), result.sizes().begin() + out_size);
    result = reshape(result, shape);
  }
  return result;
}

}  // namespace plugflow::ops
