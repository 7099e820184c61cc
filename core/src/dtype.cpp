#include "plugflow/dtype.h"

#include <string>

namespace plugflow {

const char* scalar_type_name(DType t) {
  switch (t) {
    case DType::Bool: return "Bool";
    case DType::UInt8: return "Byte";
    case DType::Int8: return "Char";
    case DType::Int16: return "Short";
    case DType::Int32: return "Int";
    case DType::Int64: return "Long";
    case DType::Float16: return "Half";
    case DType::BFloat16: return "BFloat16";
    case DType::Float32: return "Float";
    case DType::Float64: return "Double";
  }
  return "Unknown";
}

const char* cpp_type_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "unsigned char";
    case DType::Int8: return "signed char";
    case DType::Int16: return "short int";
    case DType::Int32: return "int";
    case DType::Int64: return "long int";
    case DType::Float16: return "c10::Half";
    case DType::BFloat16: return "c10::BFloat16";
    case DType::Float32: return "float";
    case DType::Float64: return "double";
  }
  return "unknown";
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "unknown";
}

DType dtype_from_name(std::string_view name) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"bool", DType::Bool},       {"uint8", DType::UInt8},       {"int8", DType::Int8},
      {"int16", DType::Int16},     {"short", DType::Int16},       {"int32", DType::Int32},
      {"int", DType::Int32},       {"int64", DType::Int64},       {"long", DType::Int64},
      {"float16", DType::Float16}, {"half", DType::Float16},      {"bfloat16", DType::BFloat16},
      {"float32", DType::Float32}, {"float", DType::Float32},     {"float64", DType::Float64},
      {"double", DType::Float64},
  };
  for (const auto& a : kAliases)
    if (a.name == name) return a.dtype;
  PF_THROW(TypeError, "unknown dtype '", name,
           "' (expected one of bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)");
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    // float16 and bfloat16 have no common 16-bit type.
    if ((a == DType::Float16 && b == DType::BFloat16) || (a == DType::BFloat16 && b == DType::Float16))
      return DType::Float32;
    return itemsize(a) >= itemsize(b) ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  // Both integral and different. uint8 with a signed type needs the next wider signed type.
  if (a == DType::UInt8 || b == DType::UInt8) {
    const DType other = a == DType::UInt8 ? b : a;
    return other == DType::Int8 ? DType::Int16 : other;
  }
  return itemsize(a) >= itemsize(b) ? a : b;
}

}  // namespace plugflow
