// Generators and the random ops: each call reserves a counter range of its generator and
// passes (seed, offset) to the device's Philox kernel (plugflow/philox.h).
#include <cstdint>
#include <limits>

#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/generator.h"
#include "plugflow/graph.h"
#include "plugflow/ops.h"

namespace plugflow {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::initial_seed() const {
  std::lock_guard lock(mutex_);
  return seed_;
}

std::pair<uint64_t, uint64_t> Generator::reserve(uint64_t n) {
  // A captured random op reserves its counters again on every replay.
  if (graph::internal::active()) graph::internal::note_rng(this, n);
  std::lock_guard lock(mutex_);
  const uint64_t first = offset_;
  offset_ += n;
  return {seed_, first};
}

std::pair<uint64_t, uint64_t> Generator::state() const {
  std::lock_guard lock(mutex_);
  return {seed_, offset_};
}

void Generator::set_state(uint64_t seed, uint64_t offset) {
  std::lock_guard lock(mutex_);
  seed_ = seed;
  offset_ = offset;
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

}  // namespace plugflow

namespace plugflow::ops {
namespace {

void run_random(const char* name, Tensor& t, Attrs attrs, Generator* gen) {
  PF_CHECK(t.is_contiguous(), name, ": random fills need a contiguous tensor");  // callers make one
  const auto [seed, offset] = (gen ? *gen : default_generator()).reserve(static_cast<uint64_t>(t.numel()));
  attrs.set("seed", static_cast<int64_t>(seed));
  attrs.set("offset", static_cast<int64_t>(offset));
  const OpDef& op = find_op(name);
  Tensor outs[] = {t};
  call_op_out(op, {}, attrs, outs);
}

// Runs fill(dense) then copies into t when t is not contiguous.
template <typename F>
Tensor& fill_random(Tensor& t, F&& f) {
  if (t.is_contiguous()) {
    f(t);
  } else {
    Tensor dense = Tensor::empty(t.sizes(), t.dtype(), t.device());
    f(dense);
    copy_(t, dense);
  }
  return t;
}
}  // namespace

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }
uint64_t initial_seed() { return default_generator().initial_seed(); }

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  PF_CHECK(is_floating(t.dtype()), "uniform_ expects a floating point tensor, got ", dtype_name(t.dtype()));
  PF_CHECK(low <= high, "uniform_ expects to return a [from, to) range, but found from=", low, " > to=", high);
  return fill_random(t, [&](Tensor& d) { run_random("uniform", d, Attrs{{"low", low}, {"high", high}}, gen); });
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  PF_CHECK(is_floating(t.dtype()), "normal_ expects a floating point tensor, got ", dtype_name(t.dtype()));
  PF_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  return fill_random(t, [&](Tensor& d) { run_random("normal", d, Attrs{{"mean", mean}, {"std", std}}, gen); });
}

Tensor rand(const Shape& sizes, DType dtype, Device device, Generator* gen) {
  PF_CHECK(is_floating(dtype), "\"check_uniform_bounds\" not implemented for '", dtype_name(dtype), "'");
  Tensor t = Tensor::empty(sizes, dtype, device);
  return uniform_(t, 0.0, 1.0, gen);
}

Tensor randn(const Shape& sizes, DType dtype, Device device, Generator* gen) {
  PF_CHECK(is_floating(dtype), "\"normal_kernel\" not implemented for '", dtype_name(dtype), "'");
  Tensor t = Tensor::empty(sizes, dtype, device);
  return normal_(t, 0.0, 1.0, gen);
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, DType dtype, Device device, Generator* gen) {
  PF_CHECK(low < high, "random_ expects 'from' to be less than 'to', but got from=", low, " >= to=", high);
  Tensor t = Tensor::empty(sizes, dtype, device);
  run_random("randint", t, Attrs{{"low", low}, {"high", high}}, gen);
  return t;
}

Tensor randperm(int64_t n, DType dtype, Device device, Generator* gen) {
  PF_CHECK(n >= 0, "n must be non-negative, got", n);
  // The largest n whose values 0..n-1 the dtype holds exactly (PyTorch's check).
  const int64_t limit = [&]() -> int64_t {
    switch (dtype) {
      case DType::UInt8: return 256;
      case DType::Int8: return 128;
      case DType::Int16: return 32768;
      case DType::Int32: return int64_t{1} << 31;
      case DType::Float16: return 2048;
      case DType::BFloat16: return 256;
      case DType::Float32: return int64_t{1} << 24;
      case DType::Float64: return int64_t{1} << 53;
      case DType::Bool: return 0;
      default: return std::numeric_limits<int64_t>::max();
    }
  }();
  PF_CHECK(n <= limit, "n must be representable by ", dtype_name(dtype), ", got ", n);
  // A stable argsort of uniform float64 keys: a uniformly random permutation (ties, with
  // probability ~n^2/2^54, keep index order), computed by kernels every device has.
  Tensor keys = rand({n}, DType::Float64, device, gen);
  return to(argsort(keys, 0, false, true), std::nullopt, dtype);
}

}  // namespace plugflow::ops
