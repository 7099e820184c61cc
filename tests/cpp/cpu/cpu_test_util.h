// Helpers for the CPU plugin tests: load the plugin through the real loader, build tensors of
// any dtype and memory layout from double values, read them back in logical order, and
// compare with per-dtype tolerances. Values are written and read through plain loops here,
// never through plugflow kernels, so the tests check the kernels against independent code.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "plugflow/dispatch.h"
#include "plugflow/dtype.h"
#include "plugflow/op.h"
#include "plugflow/ops.h"
#include "plugflow/runtime.h"
#include "plugflow/tensor.h"

#ifndef PF_CPU_PLUGIN_PATH
#error "PF_CPU_PLUGIN_PATH must name the built libplugflow_cpu.so (tests/cpp/cpu/meson.build)"
#endif

namespace cpu_test {

using plugflow::Attrs;
using plugflow::DType;
using plugflow::Shape;
using plugflow::Tensor;

inline constexpr DType kAllDTypes[] = {DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int16,   DType::Int32,
                                       DType::Int64,   DType::Float16,  DType::BFloat16, DType::Float32, DType::Float64};
inline constexpr DType kFloatDTypes[] = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
inline constexpr DType kIntDTypes[] = {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64};

// Loads the plugin from its build-tree path with a config of its own, once per process.
inline void init_cpu_plugin() {
  static const bool done = [] {
    plugflow::Config config;
    config.source = "<cpu plugin tests>";
    config.plugins = {{PF_CPU_PLUGIN_PATH, false}};
    config.kernel_prefer = {"cpu"};
    config.threads = 2;
    plugflow::init_from_config(config);
    return true;
  }();
  (void)done;
}

class CpuTest : public ::testing::Test {
 protected:
  void SetUp() override { init_cpu_plugin(); }
};

inline plugflow::Device cpu() { return plugflow::Device{plugflow::DeviceType::CPU, 0}; }

// Memory layouts a test tensor can have; all hold the same logical values.
enum class Layout {
  Contiguous,
  Transposed,  // dims in reverse memory order (a permuted view)
  Gapped,      // every dim strided by 2 elements apart, plus a storage offset
};
inline const char* layout_name(Layout l) {
  return l == Layout::Contiguous ? "contiguous" : l == Layout::Transposed ? "transposed" : "gapped";
}
inline constexpr Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Gapped};

// An uninitialized tensor of `sizes` with the given memory layout.
inline Tensor empty_with_layout(const Shape& sizes, DType dt, Layout layout) {
  const int64_t n = static_cast<int64_t>(sizes.size());
  if (layout == Layout::Contiguous) return Tensor::empty(sizes, dt, cpu());
  Shape strides(n);
  int64_t storage_elems = 1, offset = 0;
  if (layout == Layout::Transposed) {
    int64_t s = 1;
    for (int64_t d = 0; d < n; ++d) {  // dim 0 innermost
      strides[d] = s;
      s *= std::max<int64_t>(sizes[d], 1);
    }
    storage_elems = s;
  } else {
    int64_t s = 2;
    for (int64_t d = n - 1; d >= 0; --d) {
      strides[d] = s;
      s *= std::max<int64_t>(sizes[d], 1) + 1;
    }
    offset = 1;
    storage_elems = s + 1;
  }
  Tensor base = Tensor::empty({storage_elems}, dt, cpu());
  return Tensor::view_of(base.storage(), sizes, strides, offset, dt);
}

// Element pointer of logical (row-major) index `flat`.
inline char* element_ptr(const Tensor& t, int64_t flat) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t size = t.sizes()[d];
    off += (flat % size) * t.strides()[d];
    flat /= size;
  }
  return static_cast<char*>(t.data_ptr()) + off * static_cast<int64_t>(t.itemsize());
}

// The test's own value conversion: exact for values representable in the target type (the
// tests only store such values), with float16/bfloat16 rounded by the SDK's converters.
inline void store(DType dt, char* p, double v) {
  plugflow::visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) *reinterpret_cast<T*>(p) = v != 0;
    else if constexpr (std::is_same_v<T, plugflow::Half> || std::is_same_v<T, plugflow::BFloat16>)
      *reinterpret_cast<T*>(p) = T(static_cast<float>(v));
    else if constexpr (std::is_integral_v<T>) *reinterpret_cast<T*>(p) = static_cast<T>(static_cast<int64_t>(v));
    else *reinterpret_cast<T*>(p) = static_cast<T>(v);
  });
}
inline double load(DType dt, const char* p) {
  return plugflow::visit_dtype(dt, [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, plugflow::Half> || std::is_same_v<T, plugflow::BFloat16>)
      return static_cast<float>(*reinterpret_cast<const T*>(p));
    else return static_cast<double>(*reinterpret_cast<const T*>(p));
  });
}
inline int64_t load_int(DType dt, const char* p) {
  return plugflow::visit_dtype(dt, [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) return static_cast<int64_t>(*reinterpret_cast<const T*>(p));
    else return static_cast<int64_t>(static_cast<double>(static_cast<float>(*reinterpret_cast<const T*>(p))));
  });
}

inline void set_values(const Tensor& t, const std::vector<double>& v) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) store(t.dtype(), element_ptr(t, i), v[i]);
}
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = load(t.dtype(), element_ptr(t, i));
  return v;
}
inline std::vector<int64_t> int_values(const Tensor& t) {
  std::vector<int64_t> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = load_int(t.dtype(), element_ptr(t, i));
  return v;
}

inline Tensor make(const Shape& sizes, DType dt, const std::vector<double>& v, Layout layout = Layout::Contiguous) {
  Tensor t = empty_with_layout(sizes, dt, layout);
  set_values(t, v);
  return t;
}

// A stride-0 view of a 1-element tensor holding v, with shape `sizes` (a broadcast scalar).
inline Tensor broadcast_scalar(const Shape& sizes, DType dt, double v) {
  Tensor one = make({1}, dt, {v});
  return Tensor::view_of(one.storage(), sizes, Shape(sizes.size(), 0), 0, dt);
}

// The value v as dtype dt would hold it (rounded to float16/bfloat16/float32, wrapped to ints).
inline double representable(DType dt, double v) {
  alignas(8) char buf[8];
  store(dt, buf, v);
  return load(dt, buf);
}

// Random values exactly representable in every dtype of `dts` with |v| <= range: integers,
// or (for float-only ops) multiples of 1/8 when `fractions` is set.
inline std::vector<double> random_values(int64_t n, double lo, double hi, uint32_t seed, bool fractions = false) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = fractions ? std::round(dist(gen) * 8.0) / 8.0 : std::round(dist(gen));
  return v;
}

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Relative tolerance of one rounding to dt (a few ulps), for results computed in double.
inline double rel_tol(DType dt) {
  switch (dt) {
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    case DType::Float32: return 2e-6;
    case DType::Float64: return 1e-12;
    default: return 0;
  }
}

// Compares actual with expected element by element: NaN matches NaN, infinities must match,
// finite values within rtol * |expected| + atol. Reports the first few mismatches.
inline ::testing::AssertionResult all_close(const std::vector<double>& actual, const std::vector<double>& expected,
                                            double rtol, double atol = 0.0) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " != expected " << expected.size();
  int bad = 0;
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    bool ok;
    if (std::isnan(e)) ok = std::isnan(a);
    else if (std::isinf(e)) ok = a == e;
    else ok = std::isfinite(a) && std::abs(a - e) <= rtol * std::abs(e) + atol;
    if (!ok && bad++ < 5) r << "\n  [" << i << "] got " << a << ", expected " << e;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return r << "\n  " << bad << " of " << actual.size() << " elements differ (rtol " << rtol << ", atol " << atol
           << ")";
}

inline ::testing::AssertionResult all_equal(const std::vector<int64_t>& actual, const std::vector<int64_t>& expected) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " != expected " << expected.size();
  int bad = 0;
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  for (size_t i = 0; i < actual.size(); ++i)
    if (actual[i] != expected[i] && bad++ < 5) r << "\n  [" << i << "] got " << actual[i] << ", expected " << expected[i];
  if (bad == 0) return ::testing::AssertionSuccess();
  return r << "\n  " << bad << " of " << actual.size() << " elements differ";
}

// Runs a catalog op with the given inputs and attributes (outputs allocated by the core).
inline std::vector<Tensor> run(const std::string& op, std::vector<Tensor> inputs, const Attrs& attrs = {}) {
  return plugflow::call_op(plugflow::find_op(op), inputs, attrs);
}
// Runs a catalog op into caller-provided outputs.
inline void run_out(const std::string& op, std::vector<Tensor> inputs, const Attrs& attrs, std::vector<Tensor> outputs) {
  plugflow::call_op_out(plugflow::find_op(op), inputs, attrs, outputs);
}

inline std::string dtype_str(DType dt) { return std::string(plugflow::dtype_name(dt)); }

}  // namespace cpu_test
