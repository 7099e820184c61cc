// Factory functions.
#include <cmath>

#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace plugflow::ops {

Tensor empty(const Shape& sizes, DType dtype, Device device) { return Tensor::empty(sizes, dtype, device); }

Tensor full(const Shape& sizes, Scalar value, DType dtype, Device device) {
  Tensor t = Tensor::empty(sizes, dtype, device);
  fill_(t, value);
  return t;
}

Tensor& resize_(Tensor& t, const Shape& sizes) {
  if (t.sizes() == sizes) return t;
  for (int64_t s : sizes) PF_CHECK(s >= 0, "Trying to resize to a negative size ", s, ": ", shape_str(sizes));
  const size_t need = storage_nbytes(sizes, t.dtype());
  const size_t used = static_cast<size_t>(t.offset()) * t.itemsize();
  if (t.storage()->nbytes() >= used && t.storage()->nbytes() - used >= need) {
    t.set_(t.storage(), sizes, contiguous_strides(sizes), t.offset(), t.dtype());
  } else {
    Tensor fresh = Tensor::empty(sizes, t.dtype(), t.device());
    t.set_(fresh.storage(), sizes, fresh.strides(), 0, t.dtype());
  }
  return t;
}

Tensor zeros(const Shape& sizes, DType dtype, Device device) { return full(sizes, Scalar(int64_t{0}), dtype, device); }
Tensor ones(const Shape& sizes, DType dtype, Device device) { return full(sizes, Scalar(int64_t{1}), dtype, device); }
Tensor scalar_tensor(Scalar value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor arange(Scalar start, Scalar end, Scalar step, std::optional<DType> dtype_opt, Device device) {
  const bool any_float = start.is_floating() || end.is_floating() || step.is_floating();
  const DType dtype = dtype_opt.value_or(any_float ? default_float_dtype() : DType::Int64);
  PF_CHECK(dtype != DType::Bool, "\"arange_cpu\" not implemented for 'Bool'");
  // PyTorch converts the bounds to the accumulate type first (checked): int64 for integral
  // dtypes, which truncates (arange(0, 3, 0.5, dtype=int32) has a zero step), float for the
  // 16-bit floats, double otherwise.
  const bool integral = is_integral(dtype, false);
  const DType acc = integral ? DType::Int64
                  : (dtype == DType::Float16 || dtype == DType::BFloat16) ? DType::Float32
                                                                           : DType::Float64;
  for (const Scalar* v : {&start, &end, &step}) check_scalar_fits(*v, acc);
  auto acc_value = [&](Scalar v) { return integral ? static_cast<double>(v.to_int()) : v.to_double(); };
  const double s = acc_value(start), e = acc_value(end), st = acc_value(step);
  PF_CHECK(st != 0.0, "step must be nonzero");
  PF_CHECK(std::isfinite(s) && std::isfinite(e), "unsupported range: ", s, " -> ", e);
  PF_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "upper bound and larger bound inconsistent with step sign");
  double n_double;
  if (dtype == DType::Int64) {  // exact integer arithmetic, as PyTorch's int64 case
    // In 128 bits: end - start overflows int64 for ranges near its limits.
    const __int128 a = start.to_int(), b = end.to_int(), c = step.to_int();
    n_double = static_cast<double>((b - a + c + (c > 0 ? -1 : 1)) / c);
  } else {  // the unconverted bounds in double, as PyTorch
    n_double = std::ceil((end.to_double() - start.to_double()) / step.to_double());
  }
  PF_CHECK(n_double >= 0 && n_double < 9.2e18, "invalid size, possible overflow?");
  const auto n = static_cast<int64_t>(n_double);
  Tensor out = Tensor::empty({n}, dtype, device);
  static const OpDef& op = find_op("arange");
  Tensor outs[] = {out};
  call_op_out(op, {}, Attrs{{"start", start}, {"step", step}}, outs);
  return out;
}

Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device) {
  PF_CHECK(steps >= 0, "number of steps must be non-negative");
  // As PyTorch: one step is fill_(start); more convert both ends to the dtype, checked.
  if (steps == 1) return full({1}, Scalar(start), dtype, device);
  if (steps > 1) {
    PF_CHECK(dtype != DType::Bool, "\"linspace_cpu\" not implemented for 'Bool'");
    check_scalar_fits(Scalar(start), dtype);
    check_scalar_fits(Scalar(end), dtype);
  }
  Tensor out = Tensor::empty({steps}, dtype, device);
  static const OpDef& op = find_op("linspace");
  Tensor outs[] = {out};
  call_op_out(op, {}, Attrs{{"start", start}, {"end", end}}, outs);
  return out;
}

}  // namespace plugflow::ops
