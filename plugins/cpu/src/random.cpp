// Random generators on Philox4x32 (plugflow/philox.h), exactly as docs/kernels.md specifies,
// so that CPU and CUDA draw the same numbers for the same (seed, offset): element i of the
// output (row-major) depends only on (seed, offset, i), which also lets threads split freely.
#include "kernels.h"
#include "loops.h"
#include "opdefs.h"
#include "plugflow/philox.h"

namespace plugflow::cpu {
namespace {

// Philox costs ~40 integer ops per element: parallelize earlier than for plain arithmetic.
constexpr int64_t kRandomGrain = kGrainSize / 8;

template <typename T>
struct FloatOnly {
  static constexpr bool supported = is_float_v<T>;
};
template <typename T>
struct NumericOnly {
  static constexpr bool supported = !std::is_same_v<T, bool>;
};

struct RandomState {
  uint64_t seed, offset;
  explicit RandomState(const KernelContext& ctx)
      : seed(static_cast<uint64_t>(ctx.attr<int64_t>("seed"))), offset(static_cast<uint64_t>(ctx.attr<int64_t>("offset"))) {}
};

void uniform_kernel(KernelContext& ctx) {
  const Tensor& out = ctx.output(0);
  const double low = ctx.attr<double>("low"), high = ctx.attr<double>("high");
  const RandomState rs(ctx);
  dispatch_supported<FloatOnly>(ctx, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const double range = high - low;
    generate_indexed<T>(out, [&](int64_t i) {
      // float64 gets 53 random bits, the narrower types 24 (all a float can hold).
      const double u = std::is_same_v<T, double> ? Philox4x32::uniform_double(rs.seed, rs.offset, i)
                                                 : static_cast<double>(Philox4x32::uniform_float(rs.seed, rs.offset, i));
      return convert<T>(low + range * u);
    }, kRandomGrain);
  });
}

void normal_kernel(KernelContext& ctx) {
  const Tensor& out = ctx.output(0);
  const double mean = ctx.attr<double>("mean"), stddev = ctx.attr<double>("std");
  const RandomState rs(ctx);
  dispatch_supported<FloatOnly>(ctx, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    generate_indexed<T>(out, [&](int64_t i) {
      return convert<T>(mean + stddev * Philox4x32::normal(rs.seed, rs.offset, i));
    }, kRandomGrain);
  });
}

void randint_kernel(KernelContext& ctx) {
  const Tensor& out = ctx.output(0);
  const int64_t low = ctx.attr<int64_t>("low"), high = ctx.attr<int64_t>("high");
  PF_CHECK_T(high > low, ValueError, "randint: expected low < high, got low=", low, ", high=", high);
  const RandomState rs(ctx);
  // high - low can exceed INT64_MAX (e.g. the full int64 range): compute it unsigned.
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  dispatch_supported<NumericOnly>(ctx, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    generate_indexed<T>(out, [&](int64_t i) {
      uint32_t w[4];
      Philox4x32::generate(rs.seed, rs.offset + static_cast<uint64_t>(i), w);
      const uint64_t bits = (static_cast<uint64_t>(w[0]) << 32) | w[1];
      return convert<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + bits % range));
    }, kRandomGrain);
  });
}

}  // namespace

void register_random_kernels(Registrar& reg) {
  // core/opdefs/random.yaml names each op's kernel function and dtypes.
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) reg.kernel(name, DeviceType::CPU, {PF_OPDEFS_UNPAREN cpu_dtypes}, fn);
  PF_OPDEFS_RANDOM_KERNELS(PF_X)
#undef PF_X
}

}  // namespace plugflow::cpu
