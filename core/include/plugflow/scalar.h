// A Python number on its way into an op: bool, integer or floating, with its kind kept so
// that promotion follows PyTorch's rules for "wrapped numbers".
#pragma once
#include <cstdint>

#include "plugflow/dtype.h"
#include "plugflow/export.h"

namespace plugflow {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };
  Scalar() : kind_(Kind::Int), i_(0) {}
  Scalar(bool b) : kind_(Kind::Bool), i_(b) {}  // NOLINT(google-explicit-constructor)
  Scalar(int v) : kind_(Kind::Int), i_(v) {}  // NOLINT
  Scalar(int64_t v) : kind_(Kind::Int), i_(v) {}  // NOLINT
  Scalar(double v) : kind_(Kind::Float), d_(v) {}  // NOLINT
  Scalar(float v) : kind_(Kind::Float), d_(v) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  double to_double() const { return kind_ == Kind::Float ? d_ : static_cast<double>(i_); }
  int64_t to_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }
  bool to_bool() const { return kind_ == Kind::Float ? d_ != 0.0 : i_ != 0; }
  // The dtype PyTorch gives a tensor made from this number alone (default float is float32).
  DType default_dtype() const {
    return kind_ == Kind::Float ? default_float_dtype() : kind_ == Kind::Int ? DType::Int64 : DType::Bool;
  }
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) return to_bool();
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(kind_ == Kind::Float ? static_cast<T>(d_) : static_cast<T>(i_));
    else return static_cast<T>(static_cast<float>(to_double()));
  }

 private:
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

template <>
inline double Scalar::to<double>() const { return to_double(); }

// PyTorch's rule for a number that becomes an element of a `dtype` tensor (fill, full,
// masked_fill, where, clamp bounds, a pad value, ...): Error "value cannot be converted to
// type uint8 without overflow" when it does not fit. Integers must lie in the type's range,
// except that an unsigned type also takes -max..-1 (two's complement: -1 -> 255); floating
// values must be finite within the range (infinities into a floating type are kept) and not
// NaN for an integral type; bool takes anything. A number that is an *operand* (t + 300) is
// not checked: it wraps as the kernel's cast does.
PF_API void check_scalar_fits(const Scalar& value, DType dtype);

}  // namespace plugflow
