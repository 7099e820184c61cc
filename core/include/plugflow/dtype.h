// Element types, PyTorch's promotion lattice, and a visitor that maps a runtime DType to
// its C++ type for kernels.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

#include "plugflow/error.h"
#include "plugflow/export.h"

namespace plugflow {

enum class DType : uint8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};
inline constexpr int kNumDTypes = 10;

// IEEE binary16 stored as bits; arithmetic goes through float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}  // NOLINT(google-explicit-constructor)
  operator float() const { return to_float(bits); }  // NOLINT

  static uint16_t from_float(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u);  // nan/inf
    if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
    if (abs < 0x38800000u) {  // subnormal half (or zero): round to nearest even at 2^-24
      float af;
      std::memcpy(&af, &abs, 4);
      const float scaled = af * 16777216.0f;  // 2^24: exact, then round-to-nearest-even
      uint32_t m = static_cast<uint32_t>(scaled);
      const float rem = scaled - static_cast<float>(m);
      if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
      return static_cast<uint16_t>(sign | m);
    }
    uint32_t r = abs + 0xc8000fffu + ((abs >> 13) & 1u);  // rebias exponent, round to nearest even
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  static float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
      float f = static_cast<float>(man) * 5.9604644775390625e-8f;  // man * 2^-24
      std::memcpy(&x, &f, 4);
      x |= sign;
    } else if (exp == 31) {
      x = sign | 0x7f800000u | (man << 13);
    } else {
      x = sign | ((exp + 112) << 23) | (man << 13);
    }
    float out;
    std::memcpy(&out, &x, 4);
    return out;
  }
};

// bfloat16: the high half of a float32, round to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT(google-explicit-constructor)
  operator float() const { return to_float(bits); }  // NOLINT

  static uint16_t from_float(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // nan
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
  }
  static float to_float(uint16_t b) {
    uint32_t x = static_cast<uint32_t>(b) << 16;
    float out;
    std::memcpy(&out, &x, 4);
    return out;
  }
};

PF_API std::string_view dtype_name(DType t);  // "float32", "int64", ...
PF_API DType dtype_from_name(std::string_view name);  // accepts PyTorch aliases (float, long, half, ...); throws TypeError
// PyTorch's ScalarType names ("Float", "Long", ...), as its error messages quote them.
PF_API const char* scalar_type_name(DType t);
// The C++ element type names some PyTorch dtype checks print ("float", "long int", ...).
PF_API const char* cpp_type_name(DType t);

constexpr size_t itemsize(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8: return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::Float64: return 8;
  }
  return 0;
}
constexpr bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}
constexpr bool is_integral(DType t, bool include_bool) {
  return (t == DType::Bool && include_bool) || t == DType::UInt8 || t == DType::Int8 ||
         t == DType::Int16 || t == DType::Int32 || t == DType::Int64;
}

// PyTorch's torch.promote_types.
PF_API DType promote_types(DType a, DType b);
// The floating dtype of tensors made from Python floats, of integers promoted by float-only ops
// and of factories given no dtype: float32 unless torch.set_default_dtype changed it (one
// process-wide setting, as PyTorch's; a floating dtype).
PF_API DType default_float_dtype();
PF_API void set_default_float_dtype(DType dtype);
// PyTorch's torch.can_cast (canCast): no floating -> integral or bool, no non-bool -> bool.
PF_API bool can_cast(DType from, DType to);

// C++ type <-> DType.
template <DType> struct dtype_cpp;
template <> struct dtype_cpp<DType::Bool> { using type = bool; };
template <> struct dtype_cpp<DType::UInt8> { using type = uint8_t; };
template <> struct dtype_cpp<DType::Int8> { using type = int8_t; };
template <> struct dtype_cpp<DType::Int16> { using type = int16_t; };
template <> struct dtype_cpp<DType::Int32> { using type = int32_t; };
template <> struct dtype_cpp<DType::Int64> { using type = int64_t; };
template <> struct dtype_cpp<DType::Float16> { using type = Half; };
template <> struct dtype_cpp<DType::BFloat16> { using type = BFloat16; };
template <> struct dtype_cpp<DType::Float32> { using type = float; };
template <> struct dtype_cpp<DType::Float64> { using type = double; };
template <DType D> using cpp_t = typename dtype_cpp<D>::type;

template <typename T> struct cpp_dtype;
template <> struct cpp_dtype<bool> { static constexpr DType value = DType::Bool; };
template <> struct cpp_dtype<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct cpp_dtype<int8_t> { static constexpr DType value = DType::Int8; };
template <> struct cpp_dtype<int16_t> { static constexpr DType value = DType::Int16; };
template <> struct cpp_dtype<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct cpp_dtype<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct cpp_dtype<Half> { static constexpr DType value = DType::Float16; };
template <> struct cpp_dtype<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct cpp_dtype<float> { static constexpr DType value = DType::Float32; };
template <> struct cpp_dtype<double> { static constexpr DType value = DType::Float64; };

template <typename T> struct type_tag { using type = T; };

// visit_dtype(t, [&](auto tag) { using T = typename decltype(tag)::type; ... });
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f(type_tag<bool>{});
    case DType::UInt8: return f(type_tag<uint8_t>{});
    case DType::Int8: return f(type_tag<int8_t>{});
    case DType::Int16: return f(type_tag<int16_t>{});
    case DType::Int32: return f(type_tag<int32_t>{});
    case DType::Int64: return f(type_tag<int64_t>{});
    case DType::Float16: return f(type_tag<Half>{});
    case DType::BFloat16: return f(type_tag<BFloat16>{});
    case DType::Float32: return f(type_tag<float>{});
    case DType::Float64: return f(type_tag<double>{});
  }
  PF_THROW(TypeError, "unknown dtype");
}

}  // namespace plugflow
