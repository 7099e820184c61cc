// Random generators on Philox4x32 (plugflow/philox.h), exactly as docs/kernels.md specifies,
// so that CPU and CUDA draw the same numbers for the same (seed, offset): element i of the
// output (row-major) depends only on (seed, offset, i), which also lets threads split freely.
#include "kernels.h"
#include "loops.h"
#include "opdefs.h"
#include "philox_block.h"
#include "plugflow/philox.h"

namespace plugflow::cpu {

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void philox_block(
    uint64_t seed, uint64_t ctr0, uint32_t* words) {
  uint32_t c0[kPhiloxLanes], c1[kPhiloxLanes], c2[kPhiloxLanes], c3[kPhiloxLanes];
  for (int l = 0; l < kPhiloxLanes; ++l) {
    const uint64_t c = ctr0 + static_cast<uint64_t>(l);
    c0[l] = static_cast<uint32_t>(c);
    c1[l] = static_cast<uint32_t>(c >> 32);
    c2[l] = c3[l] = 0;
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < Philox4x32::kRounds; ++r) {  // Philox4x32::generate's rounds, lane by lane
#pragma omp simd
    for (int l = 0; l < kPhiloxLanes; ++l) Philox4x32::round(c0[l], c1[l], c2[l], c3[l], k0, k1);
    Philox4x32::bump_key(k0, k1);
  }
  for (int l = 0; l < kPhiloxLanes; ++l) {
    words[4 * l] = c0[l];
    words[4 * l + 1] = c1[l];
    words[4 * l + 2] = c2[l];
    words[4 * l + 3] = c3[l];
  }
}

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

// out[i] = f(words of counter offset + i), i in row-major order: the counters of kPhiloxLanes
// elements at a time from philox_block (generate_indexed's layout handling).
template <typename T, typename F>
void generate_from_counters(const Tensor& out, const RandomState& rs, const F& f) {
  const int64_t numel = out.numel();
  if (numel == 0) return;
  if (!out.is_contiguous()) {
    Tensor tmp = Tensor::empty(out.sizes(), out.dtype(), out.device());
    generate_from_counters<T>(tmp, rs, f);
    copy_tensor(out, tmp);
    return;
  }
  T* o = out.data<T>();
  const int64_t blocks = (numel + kPhiloxLanes - 1) / kPhiloxLanes;
  parallel_for(blocks, std::max<int64_t>(1, kRandomGrain / kPhiloxLanes), [&](int64_t b0, int64_t b1) {
    uint32_t words[4 * kPhiloxLanes];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t base = b * kPhiloxLanes, n = std::min<int64_t>(kPhiloxLanes, numel - base);
      philox_block(rs.seed, rs.offset + static_cast<uint64_t>(base), words);
      for (int64_t l = 0; l < n; ++l) o[base + l] = f(words + 4 * l);
    }
  });
}

void uniform_kernel(KernelContext& ctx) {
  const Tensor& out = ctx.output(0);
  const double low = ctx.attr<double>("low"), high = ctx.attr<double>("high");
  const RandomState rs(ctx);
  dispatch_supported<FloatOnly>(ctx, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const double range = high - low;
    generate_from_counters<T>(out, rs, [&](const uint32_t* w) {
      // float64 gets 53 random bits, the narrower types 24 (all a float can hold).
      const double u = std::is_same_v<T, double> ? Philox4x32::uniform_double_of(w)
                                                 : static_cast<double>(Philox4x32::uniform_float_of(w[0]));
      return convert<T>(low + range * u);
    });
  });
}

void normal_kernel(KernelContext& ctx) {
  const Tensor& out = ctx.output(0);
  const double mean = ctx.attr<double>("mean"), stddev = ctx.attr<double>("std");
  const RandomState rs(ctx);
  dispatch_supported<FloatOnly>(ctx, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    generate_from_counters<T>(out, rs, [&](const uint32_t* w) {
      return convert<T>(mean + stddev * Philox4x32::normal_of(w));
    });
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
    generate_from_counters<T>(out, rs, [&](const uint32_t* w) {
      const uint64_t bits = (static_cast<uint64_t>(w[0]) << 32) | w[1];
      return convert<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + bits % range));
    });
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
