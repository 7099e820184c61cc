// Random fills on Philox4x32 (plugflow/philox.h), exactly as docs/kernels.md specifies and
// as the CPU plugin computes them: element i of the (contiguous, row-major) output depends
// only on (seed, offset, i), so CPU and CUDA draw the same numbers for the same generator
// state. Values are formed in double, without FMA contraction (uniform is then bit-identical
// to the CPU's; normal differs only by the last-place rounding of log/cos/sqrt), and cast
// like a tensor copy.
#include "dmath.cuh"
#include "elementwise.cuh"
#include "launchers.h"
#include "opdefs.h"
#include "plugflow/philox.h"

namespace plugflow::cuda {
namespace {

struct RandomState {
  uint64_t seed, offset;
  explicit RandomState(const KernelContext& ctx)
      : seed(static_cast<uint64_t>(ctx.attr<int64_t>("seed"))),
        offset(static_cast<uint64_t>(ctx.attr<int64_t>("offset"))) {}
};

template <bool DoubleBits>
struct UniformFn {
  RandomState rs;
  double low, range;
  __device__ double operator()(int64_t i) const {
    // float64 gets 53 random bits, the narrower types 24 (all a float can hold).
    const double u = DoubleBits ? Philox4x32::uniform_double(rs.seed, rs.offset, static_cast<uint64_t>(i))
                                : static_cast<double>(Philox4x32::uniform_float(rs.seed, rs.offset, static_cast<uint64_t>(i)));
    return dm::add_rn(low, dm::mul_rn(range, u));
  }
};

struct NormalFn {
  RandomState rs;
  double mean, stddev;
  __device__ double operator()(int64_t i) const {
    return dm::add_rn(mean, dm::mul_rn(stddev, Philox4x32::normal(rs.seed, rs.offset, static_cast<uint64_t>(i))));
  }
};

struct RandintFn {
  RandomState rs;
  uint64_t low, range;  // range = high - low, unsigned: it may exceed INT64_MAX
  __device__ int64_t operator()(int64_t i) const {
    uint32_t w[4];
    Philox4x32::generate(rs.seed, rs.offset + static_cast<uint64_t>(i), w);
    const uint64_t bits = (static_cast<uint64_t>(w[0]) << 32) | w[1];
    return static_cast<int64_t>(low + bits % range);
  }
};

void uniform_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& out = ctx.output(0);
  const double low = ctx.attr<double>("low"), high = ctx.attr<double>("high");
  const RandomState rs(ctx);
  dispatch_supported<FloatTypes>(ctx, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) launch_indexed<double>(out, scope, UniformFn<true>{rs, low, high - low});
    else launch_indexed<dev_t<T>>(out, scope, UniformFn<false>{rs, low, high - low});
  });
}

void normal_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& out = ctx.output(0);
  const RandomState rs(ctx);
  const NormalFn fn{rs, ctx.attr<double>("mean"), ctx.attr<double>("std")};
  dispatch_supported<FloatTypes>(ctx, out.dtype(), [&](auto tag) {
    launch_indexed<dev_t<typename decltype(tag)::type>>(out, scope, fn);
  });
}

void randint_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& out = ctx.output(0);
  const int64_t low = ctx.attr<int64_t>("low"), high = ctx.attr<int64_t>("high");
  PF_CHECK_T(high > low, ValueError, "randint: expected low < high, got low=", low, ", high=", high);
  const RandintFn fn{RandomState(ctx), static_cast<uint64_t>(low),
                     static_cast<uint64_t>(high) - static_cast<uint64_t>(low)};
  dispatch_supported<NumericTypes>(ctx, out.dtype(), [&](auto tag) {
    launch_indexed<dev_t<typename decltype(tag)::type>>(out, scope, fn);
  });
}

}  // namespace

std::vector<KernelDef> random_kernels() {
  // core/opdefs/random.yaml names each op's kernel function and dtypes.
  return {
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) {name, {PF_OPDEFS_UNPAREN cuda_dtypes}, fn},
      PF_OPDEFS_RANDOM_KERNELS(PF_X)
#undef PF_X
  };
}

}  // namespace plugflow::cuda
