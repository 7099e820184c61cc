// Core-internal: the elementwise op families, shared by the catalog (meta.cpp) and the
// functional layer (elementwise.cpp), built from the generated definitions (opdefs.h).
#pragma once
#include <string_view>

#include "opdefs.h"

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
  std::string_view signature;
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
  std::string_view signature;
};

// Activations with attributes (docs/kernels.md): float inputs only, output = input dtype.
struct ActivationInfo {
  std::string_view name;
  std::string_view signature;
};

// The lists come from the op definitions (core/opdefs/elementwise.yaml, docs/opdefs.md).
#define PF_X(name, kind, integral_only, float_only, sig) {name, BinaryKind::kind, integral_only, float_only, sig},
inline constexpr BinaryInfo kBinaryOps[] = {PF_OPDEFS_BINARY(PF_X)};
#undef PF_X
#define PF_X(name, kind, sig) {name, UnaryKind::kind, sig},
inline constexpr UnaryInfo kUnaryOps[] = {PF_OPDEFS_UNARY(PF_X)};
#undef PF_X
#define PF_X(name, sig) {name, sig},
inline constexpr ActivationInfo kParamActivations[] = {PF_OPDEFS_ACTIVATION(PF_X)};
#undef PF_X

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
