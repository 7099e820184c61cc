// Elementwise ops: PyTorch's type promotion and broadcasting, then one kernel call.
#include <array>
#include <optional>

#include "../autograd/grad_utils.h"
#include "plugflow/autocast.h"
#include "grad.h"
#include "op_tables.h"
#include "plugflow/autograd.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace plugflow::ops {
namespace {

using internal::BinaryInfo;
using internal::BinaryKind;
using internal::UnaryInfo;
using internal::UnaryKind;

// PyTorch's combine_categories: a lower-priority operand only matters when it is of a
// higher kind (bool < integral < floating).
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_floating(*higher)) return higher;
  if (*higher == DType::Bool || is_floating(*lower)) return promote_types(*higher, *lower);
  return higher;
}

struct PromotionState {
  std::optional<DType> dim, zero_dim, wrapped;
  void add(const Tensor& t) {
    auto& slot = t.dim() > 0 ? dim : zero_dim;
    slot = slot ? promote_types(*slot, t.dtype()) : t.dtype();
  }
  void add(Scalar s) { wrapped = wrapped ? promote_types(*wrapped, s.default_dtype()) : s.default_dtype(); }
  DType result() const { return *combine(dim, combine(zero_dim, wrapped)); }
};

const BinaryInfo& binary_info(const std::string& name) {
  const BinaryInfo* info = internal::find_binary(name);
  PF_CHECK_T(info != nullptr, ValueError, "unknown binary op '", name, "'");
  return *info;
}

// int category for can_cast: bool 0, integral 1, floating 2.
int category(DType t) { return t == DType::Bool ? 0 : is_floating(t) ? 2 : 1; }

// The dtype the kernel computes in, after PyTorch's op-specific rules.
DType compute_dtype(const BinaryInfo& info, DType common, const Attrs& attrs) {
  if (info.integral_only)
    PF_CHECK(!is_floating(common), "\"", info.name, "_cpu\" not implemented for '", dtype_name(common),
             "' (bitwise ops need integral or bool tensors)");
  if (info.float_only && !is_floating(common)) return default_float_dtype();
  if (info.name == "div" && !is_floating(common)) {
    const bool rounding = attrs.has("rounding_mode") && !attrs.get<std::string>("rounding_mode").empty();
    if (!rounding) return default_float_dtype();  // true division of integers
  }
  return common;
}

// PyTorch refuses subtraction when either operand (tensor or Python number) is a bool.
void check_sub_operands(const BinaryInfo& info, bool a_bool, bool b_bool) {
  if (info.name != "sub" || !(a_bool || b_bool)) return;
  PF_CHECK(!(a_bool && b_bool), "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` "
                                "or `logical_xor()` operator instead.");
  PF_THROW(Error, "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a "
                  "mask, use the `~` or `logical_not()` operator instead.");
}

void check_bool_arith(const BinaryInfo& info, DType dt) {
  if (dt != DType::Bool) return;
  PF_CHECK(info.name != "div" && info.name != "floor_divide" && info.name != "remainder" && info.name != "fmod" &&
               info.name != "pow",
           "\"", info.name, "\" is not supported for bool tensors");
}

Attrs binary_attrs(const BinaryInfo& info, Scalar alpha, const std::string& rounding_mode) {
  if (info.name == "add" || info.name == "sub") return Attrs{{"alpha", alpha}};
  if (info.name == "div") {
    PF_CHECK(rounding_mode.empty() || rounding_mode == "trunc" || rounding_mode == "floor",
             "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", rounding_mode, "'");
    return Attrs{{"rounding_mode", rounding_mode}};
  }
  return {};
}

// Catalog entries of the binary ops, looked up once (the catalog never changes after load).
const OpDef& binary_op(const BinaryInfo& info) {
  static const auto table = [] {
    std::array<const OpDef*, std::size(internal::kBinaryOps)> t{};
    for (size_t i = 0; i < t.size(); ++i) t[i] = &find_op(internal::kBinaryOps[i].name);
    return t;
  }();
  return *table[&info - internal::kBinaryOps];
}

Tensor prepare(const Tensor& t, DType dt, const Shape& shape) {
  Tensor c = to(t, std::nullopt, dt);
  return c.sizes() == shape ? c : expand(c, shape);
}

// add's and sub's alpha against the computation dtype (PyTorch's checks). sub(a, b, alpha) is
// PyTorch's add(a, b, -alpha): the negated alpha must fit (int64's negation wraps, as there):
// alpha = 2**31 is a valid int32 sub, -2**31 is not.
void check_alpha(const BinaryInfo& info, const Attrs& attrs, DType dt) {
  if (!attrs.has("alpha")) return;
  const Scalar& alpha = attrs.get<Scalar>("alpha");
  PF_CHECK(!alpha.is_bool() || dt == DType::Bool, "Boolean alpha only supported for Boolean results.");
  PF_CHECK(!(alpha.is_floating() && !is_floating(dt)),
           "For integral input tensors, argument alpha must not be a floating point number.");
  const bool negated = info.name == "sub" && !alpha.is_bool();
  check_scalar_fits(!negated              ? alpha
                    : alpha.is_floating() ? Scalar(-alpha.to_double())
                                          : Scalar(static_cast<int64_t>(0 - static_cast<uint64_t>(alpha.to_int()))),
                    dt);
}

Tensor run_binary(const BinaryInfo& info, const Tensor& a, const Tensor& b, DType common, const Attrs& attrs) {
  const DType dt = compute_dtype(info, common, attrs);
  check_bool_arith(info, dt);
  check_alpha(info, attrs, dt);
  // Same shape and dtype (the common case) needs no broadcasting or casting views.
  const bool plain = a.sizes() == b.sizes() && a.dtype() == dt && b.dtype() == dt;
  const Shape shape = plain ? Shape() : broadcast_shapes(a.sizes(), b.sizes());
  const Tensor in[] = {plain ? a : prepare(a, dt, shape), plain ? b : prepare(b, dt, shape)};
  Tensor out = call_op(binary_op(info), in, attrs)[0];
  internal::record_binary(std::string(info.name), in[0], in[1], out, attrs);
  return out;
}

Tensor run_binary_inplace(const BinaryInfo& info, Tensor& a, const Tensor& b, DType common, const Attrs& attrs) {
  const DType result = info.kind == BinaryKind::Arithmetic ? compute_dtype(info, common, attrs) : DType::Bool;
  PF_CHECK(category(result) <= category(a.dtype()), "result type ", dtype_name(result),
           " can't be cast to the desired output type ", dtype_name(a.dtype()));
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes());
  PF_CHECK(shape == a.sizes(), "output with shape ", shape_str(a.sizes()), " doesn't match the broadcast shape ",
           shape_str(shape));
  autograd::check_no_internal_overlap(a);
  if (info.kind != BinaryKind::Arithmetic || result != a.dtype()) {
    Tensor r = run_binary(info, a, b, common, attrs);
    copy_(a, r);
    return a;
  }
  check_bool_arith(info, result);
  check_alpha(info, attrs, result);
  autograd::check_inplace(a);
  Tensor bb = prepare(b, result, shape);
  // Elementwise kernels may read and write the same element, but not read elements another
  // lane writes: a partially overlapping operand is materialized first.
  if (bb.storage() == a.storage() && !(bb.offset() == a.offset() && bb.strides() == a.strides())) bb = clone(bb);
  const bool grad = is_floating(result) && autograd::any_requires_grad({&a, &bb});
  const std::string name(info.name);
  const Tensor before = grad && internal::binary_needs_self_before(name) ? clone(autograd::detach(a)) : Tensor();
  const Tensor in[] = {a, bb};
  Tensor out[] = {a};
  call_op_out(binary_op(info), in, attrs, out);
  // `a.mul_(a)`: the formula must see the old value for both operands.
  if (grad)
    internal::record_binary_inplace(name, a, before, bb, bb.storage() == a.storage() && before.defined() ? before : bb,
                                    attrs);
  return a;
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    PF_CHECK(da == db || da == 1 || db == 1, "The size of tensor a (", da, ") must match the size of tensor b (", db,
             ") at non-singleton dimension ", i);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

DType result_type(const Tensor& a, const Tensor& b) {
  PromotionState s;
  s.add(a);
  s.add(b);
  return s.result();
}

DType result_type(const Tensor& a, Scalar b) {
  PromotionState s;
  s.add(a);
  s.add(b);
  return s.result();
}

Tensor binary(const std::string& name, const Tensor& a, const Tensor& b) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{name, {a, b}}) return binary(name, cast[0], cast[1]);
  const BinaryInfo& info = binary_info(name);
  check_sub_operands(info, a.dtype() == DType::Bool, b.dtype() == DType::Bool);
  return run_binary(info, a, b, result_type(a, b), binary_attrs(info, Scalar(int64_t{1}), ""));
}

namespace {

// PyTorch's pow(Tensor, Scalar): no negative integer power of integers, and (past the 0 and 1
// shortcuts) the exponent is converted to a half, bfloat16 or integral compute dtype with
// overflow checks, so pow(int8 tensor, 300) raises where pow(int8 tensor, int8 tensor) wraps.
void check_pow_exponent(const BinaryInfo& info, const Tensor& base, Scalar exponent, DType common) {
  if (info.name != "pow") return;
  PF_CHECK(!(is_integral(base.dtype(), true) && !exponent.is_floating() && exponent.to_int() < 0),
           "Integers to negative integer powers are not allowed.");
  const double e = exponent.to_double();
  if (e == 0.0 || e == 1.0) return;
  if (common == DType::Float16 || common == DType::BFloat16 || is_integral(common, false))
    check_scalar_fits(exponent, common);
}

}  // namespace

Tensor binary(const std::string& name, const Tensor& a, Scalar b) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{name, {a}}) return binary(name, cast[0], b);
  const BinaryInfo& info = binary_info(name);
  check_sub_operands(info, a.dtype() == DType::Bool, b.is_bool());
  const DType common = result_type(a, b);
  check_pow_exponent(info, a, b, common);
  const Attrs attrs = binary_attrs(info, Scalar(int64_t{1}), "");
  return run_binary(info, a, wrapped_scalar_tensor(b, compute_dtype(info, common, attrs), a.device()), common, attrs);
}

Tensor binary(const std::string& name, Scalar a, const Tensor& b) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{name, {b}}) return binary(name, a, cast[0]);
  const BinaryInfo& info = binary_info(name);
  check_sub_operands(info, a.is_bool(), b.dtype() == DType::Bool);
  const DType common = result_type(b, a);
  const Attrs attrs = binary_attrs(info, Scalar(int64_t{1}), "");
  return run_binary(info, wrapped_scalar_tensor(a, compute_dtype(info, common, attrs), b.device()), b, common, attrs);
}

Tensor& binary_(const std::string& name, Tensor& a, const Tensor& b) {
  const BinaryInfo& info = binary_info(name);
  check_sub_operands(info, a.dtype() == DType::Bool, b.dtype() == DType::Bool);
  run_binary_inplace(info, a, b, result_type(a, b), binary_attrs(info, Scalar(int64_t{1}), ""));
  return a;
}

Tensor& binary_(const std::string& name, Tensor& a, Scalar b) {
  const BinaryInfo& info = binary_info(name);
  check_sub_operands(info, a.dtype() == DType::Bool, b.is_bool());
  const DType common = result_type(a, b);
  check_pow_exponent(info, a, b, common);
  const Attrs attrs = binary_attrs(info, Scalar(int64_t{1}), "");
  run_binary_inplace(info, a, wrapped_scalar_tensor(b, compute_dtype(info, common, attrs), a.device()), common, attrs);
  return a;
}

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  const BinaryInfo& info = binary_info("add");
  return run_binary(info, a, b, result_type(a, b), binary_attrs(info, alpha, ""));
}

Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  const BinaryInfo& info = binary_info("sub");
  check_sub_operands(info, a.dtype() == DType::Bool, b.dtype() == DType::Bool);
  return run_binary(info, a, b, result_type(a, b), binary_attrs(info, alpha, ""));
}

Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode) {
  const BinaryInfo& info = binary_info("div");
  return run_binary(info, a, b, result_type(a, b), binary_attrs(info, Scalar(int64_t{1}), rounding_mode));
}

// ---- unary ------------------------------------------------------------------------------------

namespace {

const UnaryInfo& unary_info(const std::string& name) {
  const UnaryInfo* info = internal::find_unary(name);
  PF_CHECK_T(info != nullptr, ValueError, "unknown unary op '", name, "'");
  return *info;
}

DType unary_compute_dtype(const UnaryInfo& info, DType in) {
  switch (info.kind) {
    case UnaryKind::FloatMath: return is_floating(in) ? in : default_float_dtype();
    case UnaryKind::IntegralOnly:
      PF_CHECK(!is_floating(in), "\"", info.name, "_cpu\" not implemented for '", dtype_name(in),
               "' (bitwise ops need integral or bool tensors)");
      return in;
    case UnaryKind::AnyDtype:
      PF_CHECK(!(info.name == "neg" && in == DType::Bool),
               "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, "
               "use the `~` or `logical_not()` operator instead.");
      // square is pow(x, 2), which promotes bool to int64.
      if (info.name == "square" && in == DType::Bool) return DType::Int64;
      return in;
    case UnaryKind::BoolOut: return in;
  }
  return in;
}

}  // namespace

const OpDef& unary_op(const UnaryInfo& info) {
  static const auto table = [] {
    std::array<const OpDef*, std::size(internal::kUnaryOps)> t{};
    for (size_t i = 0; i < t.size(); ++i) t[i] = &find_op(internal::kUnaryOps[i].name);
    return t;
  }();
  return *table[&info - internal::kUnaryOps];
}

Tensor unary(const std::string& name, const Tensor& a) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{name, {a}}) return unary(name, cast[0]);
  const UnaryInfo& info = unary_info(name);
  const Tensor in[] = {to(a, std::nullopt, unary_compute_dtype(info, a.dtype()))};
  Tensor out = call_op(unary_op(info), in)[0];
  internal::record_unary(name, in[0], out, {});
  return out;
}

Tensor& unary_(const std::string& name, Tensor& a) {
  const UnaryInfo& info = unary_info(name);
  const DType dt = unary_compute_dtype(info, a.dtype());
  const DType result = info.kind == UnaryKind::BoolOut ? DType::Bool : dt;
  PF_CHECK(category(result) <= category(a.dtype()), "result type ", dtype_name(result),
           " can't be cast to the desired output type ", dtype_name(a.dtype()));
  autograd::check_no_internal_overlap(a);
  if (result != a.dtype()) {
    copy_(a, unary(name, a));
    return a;
  }
  autograd::check_inplace(a);
  const bool grad = is_floating(result) && autograd::any_requires_grad({&a});
  const Tensor before = grad && internal::unary_needs_self_before(name) ? clone(autograd::detach(a)) : Tensor();
  const Tensor in[] = {a};
  Tensor out[] = {a};
  call_op_out(unary_op(info), in, {}, out);
  if (grad) internal::record_unary_inplace(name, a, before);
  return a;
}

}  // namespace plugflow::ops
