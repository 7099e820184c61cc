#include "plugflow/dtype.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <string>

#include "plugflow/scalar.h"

namespace plugflow {

namespace {

// The range of an integral or floating dtype, as doubles (exact for every bound but int64's
// max, which rounds up to 2^63: compared with < below).
struct Range {
  double lowest, max;
};

Range dtype_range(DType t) {
  switch (t) {
    case DType::UInt8: return {0, 255};
    case DType::Int8: return {-128, 127};
    case DType::Int16: return {-32768, 32767};
    case DType::Int32: return {-2147483648.0, 2147483647.0};
    case DType::Int64: return {-9223372036854775808.0, 9223372036854775808.0};
    case DType::Float16: return {-65504.0, 65504.0};
    case DType::BFloat16: return {-3.3895313892515355e38, 3.3895313892515355e38};
    case DType::Float32: return {-3.4028234663852886e38, 3.4028234663852886e38};
    default: return {-std::numeric_limits<double>::max(), std::numeric_limits<double>::max()};
  }
}

bool integer_fits(int64_t v, DType t) {
  switch (t) {
    case DType::UInt8: return v <= 255 && v >= -255;  // two's complement: -1 -> 255 (PyTorch)
    case DType::Int8: return v >= -128 && v <= 127;
    case DType::Int16: return v >= -32768 && v <= 32767;
    case DType::Int32: return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
    case DType::Float16: return v >= -65504 && v <= 65504;
    default: return true;  // int64 holds every int64; bool, float32/64 and bfloat16 every int64 magnitude
  }
}

bool floating_fits(double v, DType t) {
  if (std::isnan(v)) return is_floating(t);
  if (std::isinf(v) && is_floating(t)) return true;
  const Range r = dtype_range(t);
  // int64's upper bound 2^63 is exclusive (no int64 equals it); the others are inclusive.
  return v >= r.lowest && (t == DType::Int64 ? v < r.max : v <= r.max);
}

}  // namespace

void check_scalar_fits(const Scalar& value, DType dtype) {
  if (dtype == DType::Bool || value.is_bool() || dtype == DType::Float64) return;
  const bool fits = value.is_floating() ? floating_fits(value.to_double(), dtype) : integer_fits(value.to_int(), dtype);
  PF_CHECK(fits, "value cannot be converted to type ", dtype_name(dtype), " without overflow");
}

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

namespace {
std::atomic<DType> g_default_float_dtype{DType::Float32};
}  // namespace

DType default_float_dtype() { return g_default_float_dtype.load(std::memory_order_relaxed); }

void set_default_float_dtype(DType dtype) {
  PF_CHECK_T(is_floating(dtype), TypeError, "only floating-point types are supported as the default type");
  g_default_float_dtype.store(dtype, std::memory_order_relaxed);
}

bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
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
