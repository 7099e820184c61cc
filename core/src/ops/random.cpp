// The global generator: a Philox key (the seed) and a counter offset. Each random call takes
// a fresh counter range, so results depend only on the seed and the call sequence, the same
// on every device (plugflow/philox.h).
#include <atomic>

#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace plugflow::ops {
namespace {
constexpr uint64_t kDefaultSeed = 67280421310721ull;  // PyTorch's default
std::atomic<uint64_t> g_seed{kDefaultSeed};
std::atomic<uint64_t> g_offset{0};

// Reserves `n` counters and returns the first.
int64_t take_offset(int64_t n) { return static_cast<int64_t>(g_offset.fetch_add(static_cast<uint64_t>(n))); }

void run_random(const char* name, Tensor& t, Attrs attrs) {
  PF_CHECK(t.is_contiguous(), name, ": random fills need a contiguous tensor");  // callers make one
  attrs.set("seed", static_cast<int64_t>(g_seed.load()));
  attrs.set("offset", take_offset(t.numel()));
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

void manual_seed(uint64_t seed) {
  g_seed.store(seed);
  g_offset.store(0);
}
uint64_t initial_seed() { return g_seed.load(); }

Tensor& uniform_(Tensor& t, double low, double high) {
  PF_CHECK(is_floating(t.dtype()), "uniform_ expects a floating point tensor, got ", dtype_name(t.dtype()));
  PF_CHECK(low <= high, "uniform_ expects to return a [from, to) range, but found from=", low, " > to=", high);
  return fill_random(t, [&](Tensor& d) { run_random("uniform", d, Attrs{{"low", low}, {"high", high}}); });
}

Tensor& normal_(Tensor& t, double mean, double std) {
  PF_CHECK(is_floating(t.dtype()), "normal_ expects a floating point tensor, got ", dtype_name(t.dtype()));
  PF_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  return fill_random(t, [&](Tensor& d) { run_random("normal", d, Attrs{{"mean", mean}, {"std", std}}); });
}

Tensor rand(const Shape& sizes, DType dtype, Device device) {
  PF_CHECK(is_floating(dtype), "\"check_uniform_bounds\" not implemented for '", dtype_name(dtype), "'");
  Tensor t = Tensor::empty(sizes, dtype, device);
  return uniform_(t, 0.0, 1.0);
}

Tensor randn(const Shape& sizes, DType dtype, Device device) {
  PF_CHECK(is_floating(dtype), "\"normal_kernel\" not implemented for '", dtype_name(dtype), "'");
  Tensor t = Tensor::empty(sizes, dtype, device);
  return normal_(t, 0.0, 1.0);
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, DType dtype, Device device) {
  PF_CHECK(low < high, "random_ expects 'from' to be less than 'to', but got from=", low, " >= to=", high);
  Tensor t = Tensor::empty(sizes, dtype, device);
  run_random("randint", t, Attrs{{"low", low}, {"high", high}});
  return t;
}

}  // namespace plugflow::ops
