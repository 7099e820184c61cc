// Core-internal: the elementwise op families and the reductions over dims, shared by the catalog
// (meta.cpp) and the functional layer (elementwise.cpp, reduce.cpp), built from the generated
// definitions (opdefs.h).
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

// The reductions over dims (core/opdefs/reductions.yaml): their dtype rule and their value
// over an empty dim.
enum class ReduceDtype {
  Accumulate,  // integers and bool reduce in int64; dtype= casts first (sum, prod)
  Floating,    // the input or dtype= must be floating (mean)
  Input,       // the input's dtype, no dtype= (amax, amin)
  Logical,     // any input, uncast; bool output (uint8 for uint8, as PyTorch 1.13), no dtype= (all, any)
};
enum class ReduceIdentity { None, Zero, One, NaN };  // None: reducing an empty dim raises

struct ReductionInfo {
  std::string_view name;
  ReduceDtype dtype;
  ReduceIdentity identity;
  std::string_view signature;
};

#define PF_X(name, Camel, dtypes, rule, identity, sig) {name, ReduceDtype::rule, ReduceIdentity::identity, sig},
inline constexpr ReductionInfo kReductions[] = {PF_OPDEFS_REDUCTION(PF_X)};
#undef PF_X

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
inline const ReductionInfo* find_reduction(std::string_view name) {
  for (const auto& r : kReductions)
    if (r.name == name) return &r;
  return nullptr;
}

}  // namespace plugflow::internal
