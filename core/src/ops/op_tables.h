// Core-internal: the elementwise op families, shared by the catalog (meta.cpp) and the
// functional layer (elementwise.cpp). docs/kernels.md documents the same lists for plugins.
#pragma once
#include <string_view>

namespace plugflow::internal {

enum class BinaryKind {
  Arithmetic,  // output dtype = the common dtype
  Compare,     // output bool
  Logical,     // output bool, computed on the common dtype
};

struct BinaryInfo {
  std::string_view name;
  BinaryKind kind;
  bool integral_only = false;  // bitwise ops
  bool float_only = false;     // integers are promoted to float first (atan2)
};

inline constexpr BinaryInfo kBinaryOps[] = {
    {"add", BinaryKind::Arithmetic},          {"sub", BinaryKind::Arithmetic},
    {"mul", BinaryKind::Arithmetic},          {"div", BinaryKind::Arithmetic},
    {"pow", BinaryKind::Arithmetic},          {"maximum", BinaryKind::Arithmetic},
    {"minimum", BinaryKind::Arithmetic},      {"remainder", BinaryKind::Arithmetic},
    {"fmod", BinaryKind::Arithmetic},         {"floor_divide", BinaryKind::Arithmetic},
    {"atan2", BinaryKind::Arithmetic, false, true},
    {"bitwise_and", BinaryKind::Arithmetic, true}, {"bitwise_or", BinaryKind::Arithmetic, true},
    {"bitwise_xor", BinaryKind::Arithmetic, true},
    // relu_backward(grad, result): grad where result > 0, else 0 (PyTorch's threshold_backward
    // at 0: a NaN result passes the gradient). One pass instead of gt + where.
    {"relu_backward", BinaryKind::Arithmetic},
    {"logical_and", BinaryKind::Logical},     {"logical_or", BinaryKind::Logical},
    {"logical_xor", BinaryKind::Logical},
    {"eq", BinaryKind::Compare}, {"ne", BinaryKind::Compare}, {"lt", BinaryKind::Compare},
    {"le", BinaryKind::Compare}, {"gt", BinaryKind::Compare}, {"ge", BinaryKind::Compare},
};

enum class UnaryKind {
  FloatMath,    // integers promote to float32; output = input dtype
  AnyDtype,     // output = input dtype
  BoolOut,      // output bool (logical_not, isnan, ...)
  IntegralOnly  // bitwise_not
};

struct UnaryInfo {
  std::string_view name;
  UnaryKind kind;
};

inline constexpr UnaryInfo kUnaryOps[] = {
    {"exp", UnaryKind::FloatMath},   {"exp2", UnaryKind::FloatMath},    {"expm1", UnaryKind::FloatMath},
    {"log", UnaryKind::FloatMath},   {"log2", UnaryKind::FloatMath},    {"log10", UnaryKind::FloatMath},
    {"log1p", UnaryKind::FloatMath}, {"sqrt", UnaryKind::FloatMath},    {"rsqrt", UnaryKind::FloatMath},
    {"sin", UnaryKind::FloatMath},   {"cos", UnaryKind::FloatMath},     {"tan", UnaryKind::FloatMath},
    {"asin", UnaryKind::FloatMath},  {"acos", UnaryKind::FloatMath},    {"atan", UnaryKind::FloatMath},
    {"sinh", UnaryKind::FloatMath},  {"cosh", UnaryKind::FloatMath},    {"tanh", UnaryKind::FloatMath},
    {"asinh", UnaryKind::FloatMath}, {"acosh", UnaryKind::FloatMath},   {"atanh", UnaryKind::FloatMath},
    {"sigmoid", UnaryKind::FloatMath}, {"erf", UnaryKind::FloatMath},   {"erfc", UnaryKind::FloatMath},
    {"erfinv", UnaryKind::FloatMath}, {"reciprocal", UnaryKind::FloatMath}, {"silu", UnaryKind::FloatMath},
    {"mish", UnaryKind::FloatMath},  {"hardswish", UnaryKind::FloatMath}, {"hardsigmoid", UnaryKind::FloatMath},
    {"neg", UnaryKind::AnyDtype},    {"abs", UnaryKind::AnyDtype},      {"square", UnaryKind::AnyDtype},
    {"sign", UnaryKind::AnyDtype},   {"relu", UnaryKind::AnyDtype},     {"floor", UnaryKind::AnyDtype},
    {"ceil", UnaryKind::AnyDtype},   {"round", UnaryKind::AnyDtype},    {"trunc", UnaryKind::AnyDtype},
    {"frac", UnaryKind::AnyDtype},
    {"logical_not", UnaryKind::BoolOut}, {"isnan", UnaryKind::BoolOut}, {"isinf", UnaryKind::BoolOut},
    {"isfinite", UnaryKind::BoolOut},
    {"bitwise_not", UnaryKind::IntegralOnly},
};

// Activations with attributes (docs/kernels.md): float inputs only, output = input dtype.
inline constexpr std::string_view kParamActivations[] = {"gelu", "softplus", "leaky_relu", "elu"};

inline constexpr std::string_view kReduceOps[] = {"sum", "prod", "mean", "amax", "amin"};

inline const BinaryInfo* find_binary(std::string_view name) {
  for (const auto& b : kBinaryOps)
    if (b.name == name) return &b;
  return nullptr;
}
inline const UnaryInfo* find_unary(std::string_view name) {
  for (const auto& u : kUnaryOps)
    if (u.name == name) return &u;
  return nullptr;
}

}  // namespace plugflow::internal
