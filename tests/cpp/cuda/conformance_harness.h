// The CUDA conformance harness shared by the CUDA-vs-CPU suites (test_conformance.cpp,
// test_families.cpp): plugin setup, random inputs in every memory layout on both devices, and
// result comparison. Each suite is its own executable, run by `meson test --suite cuda`.
#pragma once
#include <gtest/gtest.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>
#include "plugflow/dispatch.h"
#include "plugflow/kernel.h"
#include "plugflow/ops.h"
#include "plugflow/runtime.h"
#include "plugflow/tensor.h"
#include "plugin_path.h"

#ifndef PF_CPU_PLUGIN_PATH
#error "PF_CPU_PLUGIN_PATH must name the built libplugflow_cpu.so (tests/cpp/cuda/meson.build)"
#endif
#ifndef PF_CUDA_PLUGIN_PATH
#error "PF_CUDA_PLUGIN_PATH must name the built libplugflow_cuda.so (tests/cpp/cuda/meson.build)"
#endif

namespace cuda_conformance {

using namespace plugflow;
namespace ops = plugflow::ops;

constexpr DType kAllDTypes[] = {DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int16,   DType::Int32,
                                DType::Int64,   DType::Float16,  DType::BFloat16, DType::Float32, DType::Float64};

const Device kCpu{DeviceType::CPU, 0};

inline void init_plugins() {
  static const bool done = [] {
    Config config;
    config.source = "<cuda conformance tests>";
    config.plugins = {{cuda_test::plugin_path(PF_CPU_PLUGIN_PATH), false},
                      {cuda_test::plugin_path(PF_CUDA_PLUGIN_PATH), false}};
    config.kernel_prefer = {"cuda", "cpu"};
    config.threads = 2;
    init_from_config(config);
    return true;
  }();
  (void)done;
}

inline bool selfcheck() {
  const char* v = std::getenv("PF_CUDA_CONFORMANCE_SELFCHECK");
  return v != nullptr && std::string(v) == "1";
}

// The device under test.
inline Device target() { return selfcheck() ? kCpu : Device{DeviceType::CUDA, 0}; }

// Why the comparisons cannot run here, or empty when a GPU is usable.
inline std::string why_no_gpu() {
  if (selfcheck()) return {};
  DeviceBackend* b = find_device_backend(DeviceType::CUDA);
  if (b == nullptr) return "the cuda plugin registered no device backend";
  if (b->device_count() == 0) return b->unavailable_reason().empty() ? "no CUDA device" : b->unavailable_reason();
  return {};
}

// ---- registered kernels ---------------------------------------------------------------------

inline std::set<std::pair<std::string, DType>> kernels_of(const std::string& provider, DeviceType device) {
  std::set<std::pair<std::string, DType>> out;
  for (const auto& k : registered_kernels())
    if (k.provider == provider && k.device == device) out.emplace(k.op, k.dtype);
  return out;
}

// Dtypes for which both the CPU and the CUDA plugin implement `op`.
inline std::vector<DType> common_dtypes(const std::string& op) {
  const auto cpu = kernels_of("cpu", DeviceType::CPU);
  const auto cuda = kernels_of("cuda", DeviceType::CUDA);
  std::vector<DType> out;
  for (DType t : kAllDTypes)
    if (cpu.count({op, t}) && cuda.count({op, t})) out.push_back(t);
  return out;
}


// ---- inputs ---------------------------------------------------------------------------------

enum class Values {
  Any,       // floats ~ N(0, 2); ints in [-20, 20] ([0, 40] unsigned); random bools
  NonZero,   // like Any without zeros (integer divisors)
  Small,     // integers in [-3, 3] as any dtype: ties for max/argmax, small powers and products
  Exponent,  // integers in [0, 4] (integer pow exponents)
  Unit,      // floats in [-0.99, 0.99] (asin, atanh, erfinv)
  NearOne,   // floats in [0.9, 1.1] (long products)
};

// Host values for a tensor of dtype dt, as doubles exactly representable in dt.
inline std::vector<double> random_values(int64_t n, DType dt, Values kind, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 2.0);
  std::vector<double> v(static_cast<size_t>(n));
  const bool unsigned_t = dt == DType::UInt8;
  auto uniform_int = [&](int lo, int hi) { return static_cast<double>(lo + static_cast<int>(rng() % (hi - lo + 1))); };
  for (auto& x : v) {
    if (dt == DType::Bool) {
      x = kind == Values::NonZero ? 1.0 : static_cast<double>(rng() % 2);
      continue;
    }
    switch (kind) {
      case Values::Any:
        x = is_floating(dt) ? normal(rng) : unsigned_t ? uniform_int(0, 40) : uniform_int(-20, 20);
        break;
      case Values::NonZero:
        do x = is_floating(dt) ? normal(rng) : unsigned_t ? uniform_int(1, 40) : uniform_int(-20, 20);
        while (x == 0.0);
        break;
      case Values::Small: x = unsigned_t ? uniform_int(0, 6) : uniform_int(-3, 3); break;
      case Values::Exponent: x = uniform_int(0, 4); break;
      case Values::Unit: x = std::uniform_real_distribution<double>(-0.99, 0.99)(rng); break;
      case Values::NearOne: x = is_floating(dt) ? std::uniform_real_distribution<double>(0.9, 1.1)(rng) : uniform_int(-1, 2); break;
    }
  }
  return v;
}

// A contiguous CPU tensor of dtype dt holding `values` (cast by the CPU copy kernel).
inline Tensor cpu_tensor(const Shape& sizes, DType dt, const std::vector<double>& values) {
  Tensor d = Tensor::empty(sizes, DType::Float64, kCpu);
  std::copy(values.begin(), values.end(), d.data<double>());
  return ops::to(d, kCpu, dt);
}

// Memory layouts; each holds the same logical values on both devices.
enum class View { Contiguous, Transposed, Gapped, Broadcast };
inline const char* view_name(View v) {
  switch (v) {
    case View::Contiguous: return "contiguous";
    case View::Transposed: return "transposed";
    case View::Gapped: return "gapped";
    case View::Broadcast: return "broadcast";
  }
  return "?";
}

// The base tensor shape a view of `sizes` is cut from.
inline Shape base_shape(const Shape& sizes, View v) {
  Shape b = sizes;
  if (sizes.empty()) return b;
  switch (v) {
    case View::Contiguous: break;
    case View::Transposed: std::reverse(b.begin(), b.end()); break;
    case View::Gapped:  // every other element of the last dim, rows offset by one
      b.back() = 2 * sizes.back() + 1;
      b.front() += 1;
      break;
    case View::Broadcast: b.front() = 1; break;
  }
  return b;
}

inline Tensor apply_view(const Tensor& base, const Shape& sizes, View v) {
  if (sizes.empty()) return base;
  const int64_t n = static_cast<int64_t>(sizes.size());
  switch (v) {
    case View::Contiguous: return base;
    case View::Transposed: {
      Shape perm(n);
      for (int64_t d = 0; d < n; ++d) perm[d] = n - 1 - d;
      return ops::permute(base, perm);
    }
    case View::Gapped: {
      Tensor t = ops::slice(base, n - 1, 0, 2 * sizes.back(), 2);
      return ops::narrow(t, 0, 1, sizes.front());
    }
    case View::Broadcast: return ops::expand(base, sizes);
  }
  return base;
}

// One operand on both devices: same values, same view.
struct Pair {
  Tensor cpu, dev;
};

// `specials`, when given, replace every 7th base value (before the cast to dt).
inline Pair make_pair(const Shape& sizes, DType dt, View v, Values kind, std::mt19937& rng,
               const std::vector<double>& specials = {}) {
  const Shape bs = base_shape(sizes, v);
  std::vector<double> values = random_values(shape_numel(bs), dt, kind, rng);
  for (size_t i = 0; i < specials.size() && i * 7 < values.size(); ++i) values[i * 7] = specials[i];
  const Tensor base = cpu_tensor(bs, dt, values);
  const Tensor base_dev = ops::to(base, target(), std::nullopt, /*copy=*/true);
  return {apply_view(base, sizes, v), apply_view(base_dev, sizes, v)};
}

// Sets `count` random elements of a floating pair to NaN, on both devices alike. Elements are
// reached through select() views, so any layout (transposed, gapped, broadcast) is written
// in place.
inline void inject_nans(Pair& p, std::mt19937& rng, int count) {
  if (!is_floating(p.cpu.dtype()) || p.cpu.numel() == 0) return;
  for (int i = 0; i < count; ++i) {
    Tensor c = p.cpu, d = p.dev;
    while (c.dim() > 0) {
      const int64_t k = static_cast<int64_t>(rng() % static_cast<uint32_t>(c.sizes()[0]));
      c = ops::select(c, 0, k);
      d = ops::select(d, 0, k);
    }
    ops::fill_(c, Scalar(std::nan("")));
    ops::fill_(d, Scalar(std::nan("")));
  }
}

// ---- comparison ------------------------------------------------------------------------------

struct Tol {
  double rtol, atol;
};
inline Tol tolerance(DType dt) {
  switch (dt) {
    case DType::Float16: return {4e-3, 1e-3};
    case DType::BFloat16: return {3e-2, 1e-2};
    case DType::Float32: return {2e-5, 1e-6};
    case DType::Float64: return {1e-10, 1e-12};
    default: return {0, 0};
  }
}

// Expects the device result to match the CPU result: same shape and dtype, integers and bools
// exactly, floats within `tol` (NaN where the CPU has NaN, infinities equal).
inline ::testing::AssertionResult matches(const Tensor& expected, const Tensor& actual_dev, Tol tol) {
  if (expected.sizes() != actual_dev.sizes())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual_dev.sizes()) << ", expected "
                                         << shape_str(expected.sizes());
  if (expected.dtype() != actual_dev.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(actual_dev.dtype()) << ", expected "
                                         << dtype_name(expected.dtype());
  const Tensor actual = ops::to(actual_dev, kCpu, std::nullopt);
  const bool fp = is_floating(expected.dtype());
  const Tensor e = ops::contiguous(ops::to(expected, kCpu, fp ? DType::Float64 : DType::Int64));
  const Tensor a = ops::contiguous(ops::to(actual, kCpu, fp ? DType::Float64 : DType::Int64));
  int bad = 0;
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  for (int64_t i = 0; i < e.numel(); ++i) {
    bool ok;
    std::string got, want;
    if (fp) {
      const double x = a.data<double>()[i], y = e.data<double>()[i];
      if (std::isnan(y)) ok = std::isnan(x);
      else if (std::isinf(y)) ok = x == y;
      else ok = std::isfinite(x) && std::abs(x - y) <= tol.rtol * std::abs(y) + tol.atol;
      got = std::to_string(x), want = std::to_string(y);
    } else {
      ok = a.data<int64_t>()[i] == e.data<int64_t>()[i];
      got = std::to_string(a.data<int64_t>()[i]), want = std::to_string(e.data<int64_t>()[i]);
    }
    if (!ok && bad++ < 6) r << "\n  [" << i << "] device " << got << ", cpu " << want;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return r << "\n  " << bad << " of " << e.numel() << " elements differ (" << dtype_name(expected.dtype())
           << ", rtol " << tol.rtol << ", atol " << tol.atol << ")";
}
inline ::testing::AssertionResult matches(const Tensor& expected, const Tensor& actual_dev) {
  return matches(expected, actual_dev, tolerance(expected.dtype()));
}

inline std::string ctx(const std::string& op, DType dt, const std::string& detail = "") {
  return op + " " + std::string(dtype_name(dt)) + (detail.empty() ? "" : " " + detail);
}

// ---- fixtures ------------------------------------------------------------------------------

class CudaPlugin : public ::testing::Test {
 protected:
  void SetUp() override { init_plugins(); }
};

// Fresh random inputs on every run; PF_TEST_SEED=N replays the run a failure names.
inline uint32_t test_seed() {
  const char* v = std::getenv("PF_TEST_SEED");
  return v != nullptr ? static_cast<uint32_t>(std::strtoul(v, nullptr, 10)) : std::random_device{}();
}

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    init_plugins();
    const std::string why = why_no_gpu();
    if (!why.empty()) GTEST_SKIP() << "CUDA-vs-CPU comparison needs a GPU; skipped: " << why;
    RecordProperty("seed", std::to_string(seed));
    std::printf("[   seed   ] PF_TEST_SEED=%u\n", seed);
  }
  const uint32_t seed = test_seed();
  std::mt19937 rng{seed};
};

}  // namespace cuda_conformance
