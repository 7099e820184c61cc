// CUDA plugin conformance: every op's CUDA result against the CPU plugin's on the same random
// inputs, through the real loader, dispatcher and functional API. Inputs cover odd sizes,
// transposed / gapped / offset / broadcast (stride-0) views, 0-d tensors, strided outputs
// (in-place ops) and sizes large enough for grid-stride loops and chunked reductions.
//
// Without a usable GPU every comparison skips with the reason; the tests that the plugin
// loads (and says "no CUDA device") and registers the same kernels as the CPU plugin run
// everywhere.
//
// PF_CUDA_CONFORMANCE_SELFCHECK=1 runs the comparisons with the CPU as the device under test:
// a check of this harness (layouts, value generators, comparisons) on a machine without GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
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
#include "conformance_harness.h"
#include "opdefs.h"

namespace {

using namespace plugflow;
using namespace cuda_conformance;
namespace ops = plugflow::ops;

// The ops of docs/kernels.md (this plugin's scope; cuDNN ops come later); the elementwise ones
// and the reductions from their definitions (core/opdefs/*.yaml).
#define PF_X(name, ...) name,
const std::vector<std::string> kBinaryOps = {PF_OPDEFS_BINARY(PF_X)};
const std::vector<std::string> kUnaryOps = {PF_OPDEFS_UNARY(PF_X)};
const std::vector<std::string> kActivations = {PF_OPDEFS_ACTIVATION(PF_X)};
const std::vector<std::string> kReductions = {PF_OPDEFS_REDUCTION(PF_X)};
const std::vector<std::string> kIndexedReductions = {PF_OPDEFS_INDEXED(PF_X)};
#undef PF_X
const std::vector<std::string> kOtherOps = {"fill", "copy", "arange", "linspace", "uniform", "normal", "randint", "mm",
                                            "bmm"};

std::vector<std::string> all_ops() {
  std::vector<std::string> v;
  for (const auto* list : {&kBinaryOps, &kUnaryOps, &kActivations, &kReductions, &kIndexedReductions, &kOtherOps})
    v.insert(v.end(), list->begin(), list->end());
  return v;
}

// ---- tests that run everywhere -------------------------------------------------------------------

TEST_F(CudaPlugin, LoadsAndReportsItsDevices) {
  bool loaded = false;
  for (const auto& p : loaded_plugins()) loaded = loaded || p.name == "cuda";
  ASSERT_TRUE(loaded) << "the cuda plugin is not among the loaded plugins";
  DeviceBackend* backend = find_device_backend(DeviceType::CUDA);
  ASSERT_NE(backend, nullptr) << "the cuda plugin must register the cuda device type, GPU or not";
  if (backend->device_count() == 0) {
    // A machine without GPU or driver: the plugin still loads and explains.
    EXPECT_NE(backend->unavailable_reason().find("no CUDA device"), std::string::npos)
        << backend->unavailable_reason();
    try {
      device_backend(Device{DeviceType::CUDA, 0});
      FAIL() << "device_backend(cuda:0) must throw without a GPU";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
    }
    EXPECT_THROW(Tensor::empty({2, 3}, DType::Float32, Device{DeviceType::CUDA, 0}), DeviceError);
  } else {
    EXPECT_EQ(&device_backend(Device{DeviceType::CUDA, 0}), backend);
    EXPECT_TRUE(backend->unavailable_reason().empty());
    EXPECT_NE(backend->current_stream(0), nullptr);
    try {
      device_backend(Device{DeviceType::CUDA, backend->device_count()});
      FAIL() << "an index past the last device must throw";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("available"), std::string::npos) << e.what();
    }
  }
}

// The ops with schemas of their own (`family: kernel` in core/opdefs/*.yaml) declare each
// plugin's dtypes: CUDA's extra half types for autocast on CUDA, `cuda: []` for an op that has no
// CUDA kernel yet (the LAPACK decompositions of linalg.yaml), so the gap is written once, in the
// definition. What CUDA registers for them is checked against it (test_families.cpp,
// RegistersTheDefinedDtypesOfEveryKernelOp); every other op is on CUDA for exactly the CPU's dtypes.
const std::set<std::string> kDefinedPerDevice = {
#define PF_X(name, cpu_dtypes, cuda_dtypes) name,
    PF_OPDEFS_KERNEL_DTYPES(PF_X)
#undef PF_X
};

// The whole registry: every (op, dtype) of the CPU plugin is on CUDA, and CUDA has nothing
// else, except the ops whose definitions declare each plugin's dtypes.
TEST_F(CudaPlugin, RegistersTheSameKernelsAsTheCpuPlugin) {
  const auto cpu = kernels_of("cpu", DeviceType::CPU);
  const auto cuda = kernels_of("cuda", DeviceType::CUDA);
  ASSERT_GT(cpu.size(), 100u) << "the CPU plugin registered too few kernels to compare";
  for (const auto& [op, t] : cpu)
    if (!kDefinedPerDevice.count(op))
      EXPECT_TRUE(cuda.count({op, t}) > 0) << "op '" << op << "' dtype " << dtype_name(t)
                                           << " has a CPU kernel and no CUDA one";
  for (const auto& [op, t] : cuda)
    if (!kDefinedPerDevice.count(op))
      EXPECT_TRUE(cpu.count({op, t}) > 0) << "op '" << op << "' dtype " << dtype_name(t)
                                          << " is on CUDA only (declare it in the op's definition)";
  for (const std::string& op : all_ops()) EXPECT_FALSE(common_dtypes(op).empty()) << "no dtype of '" << op << "' on both devices";
}

// ---- elementwise ------------------------------------------------------------------------------

struct BinaryValues {
  Values a = Values::Any, b = Values::Any;
};
BinaryValues binary_values(const std::string& op, DType dt) {
  const bool integral = !is_floating(dt);
  if (integral && (op == "div" || op == "remainder" || op == "fmod" || op == "floor_divide"))
    return {Values::Any, Values::NonZero};  // integer division by zero raises on the CPU only
  if (op == "pow") return integral ? BinaryValues{Values::Small, Values::Exponent} : BinaryValues{Values::Any, Values::Small};
  return {};
}

TEST_F(CudaVsCpu, BinaryOpsOnEveryLayout) {
  const Shape shape{37, 53};
  const std::pair<View, View> layouts[] = {{View::Contiguous, View::Contiguous},
                                           {View::Transposed, View::Broadcast},
                                           {View::Gapped, View::Transposed},
                                           {View::Broadcast, View::Gapped}};
  for (const std::string& op : kBinaryOps) {
    for (DType dt : common_dtypes(op)) {
      const BinaryValues vals = binary_values(op, dt);
      for (const auto& [va, vb] : layouts) {
        Pair a = make_pair(shape, dt, va, vals.a, rng);
        Pair b = make_pair(shape, dt, vb, vals.b, rng);
        const std::string where = ctx(op, dt, std::string(view_name(va)) + " x " + view_name(vb));
        if (op == "div" && !is_floating(dt)) {  // true division promotes: test the integer modes
          for (const char* mode : {"trunc", "floor"})
            EXPECT_TRUE(matches(ops::div(a.cpu, b.cpu, mode), ops::div(a.dev, b.dev, mode))) << where << " " << mode;
          continue;
        }
        EXPECT_TRUE(matches(ops::binary(op, a.cpu, b.cpu), ops::binary(op, a.dev, b.dev))) << where;
      }
      // 0-d operands.
      Pair a = make_pair({}, dt, View::Contiguous, vals.a, rng), b = make_pair({}, dt, View::Contiguous, vals.b, rng);
      if (!(op == "div" && !is_floating(dt))) {
        EXPECT_TRUE(matches(ops::binary(op, a.cpu, b.cpu), ops::binary(op, a.dev, b.dev))) << ctx(op, dt, "0-d");
      }
    }
  }
}

TEST_F(CudaVsCpu, DivisionModesAlphaAndScalars) {
  for (DType dt : common_dtypes("div")) {
    Pair a = make_pair({29, 31}, dt, View::Gapped, Values::Any, rng);
    Pair b = make_pair({29, 31}, dt, View::Contiguous, Values::NonZero, rng);
    for (const char* mode : {"", "trunc", "floor"}) {
      if (!is_floating(dt) && std::string(mode).empty()) continue;
      EXPECT_TRUE(matches(ops::div(a.cpu, b.cpu, mode), ops::div(a.dev, b.dev, mode))) << ctx("div", dt, mode);
    }
  }
  for (DType dt : common_dtypes("sub")) {
    Pair a = make_pair({17, 9}, dt, View::Transposed, Values::Any, rng);
    Pair b = make_pair({17, 9}, dt, View::Broadcast, Values::Any, rng);
    const Scalar alpha = is_floating(dt) ? Scalar(0.5) : Scalar(int64_t{3});
    EXPECT_TRUE(matches(ops::add(a.cpu, b.cpu, alpha), ops::add(a.dev, b.dev, alpha))) << ctx("add", dt, "alpha");
    EXPECT_TRUE(matches(ops::sub(a.cpu, b.cpu, alpha), ops::sub(a.dev, b.dev, alpha))) << ctx("sub", dt, "alpha");
    const Scalar s = is_floating(dt) ? Scalar(1.75) : Scalar(int64_t{-4});
    EXPECT_TRUE(matches(ops::binary("mul", a.cpu, s), ops::binary("mul", a.dev, s))) << ctx("mul", dt, "scalar");
    EXPECT_TRUE(matches(ops::binary("maximum", s, b.cpu), ops::binary("maximum", s, b.dev))) << ctx("maximum", dt);
  }
}

TEST_F(CudaVsCpu, InPlaceOpsHonourOutputStrides) {
  for (DType dt : {DType::Float32, DType::Int32, DType::Float16}) {
    Pair a = make_pair({23, 19}, dt, View::Gapped, Values::Any, rng);
    Pair b = make_pair({23, 19}, dt, View::Transposed, Values::Any, rng);
    ops::binary_("add", a.cpu, b.cpu);
    ops::binary_("add", a.dev, b.dev);
    EXPECT_TRUE(matches(a.cpu, a.dev)) << ctx("add_", dt, "gapped output");
    ops::unary_("neg", a.cpu);
    ops::unary_("neg", a.dev);
    EXPECT_TRUE(matches(a.cpu, a.dev)) << ctx("neg_", dt, "gapped output");
    Pair t = make_pair({23, 19}, dt, View::Transposed, Values::Any, rng);
    ops::binary_("mul", t.cpu, Scalar(int64_t{3}));
    ops::binary_("mul", t.dev, Scalar(int64_t{3}));
    EXPECT_TRUE(matches(t.cpu, t.dev)) << ctx("mul_", dt, "transposed output");
  }
}

TEST_F(CudaVsCpu, LargeTensorsUseEveryThreadOfTheGrid) {
  // 2.1M elements: several grid-stride iterations per thread; a transposed operand takes the
  // N-d kernel, a contiguous pair the linear one.
  const Shape shape{1031, 2053};
  Pair a = make_pair(shape, DType::Float32, View::Contiguous, Values::Any, rng);
  Pair b = make_pair(shape, DType::Float32, View::Transposed, Values::Any, rng);
  Pair c = make_pair(shape, DType::Float32, View::Contiguous, Values::Any, rng);
  EXPECT_TRUE(matches(ops::binary("add", a.cpu, c.cpu), ops::binary("add", a.dev, c.dev))) << "contiguous add";
  EXPECT_TRUE(matches(ops::binary("mul", a.cpu, b.cpu), ops::binary("mul", a.dev, b.dev))) << "transposed mul";
  EXPECT_TRUE(matches(ops::binary("lt", b.cpu, c.cpu), ops::binary("lt", b.dev, c.dev))) << "transposed lt";
  EXPECT_TRUE(matches(ops::unary("tanh", b.cpu), ops::unary("tanh", b.dev))) << "transposed tanh";
}

Values unary_values(const std::string& op, DType dt) {
  if (!is_floating(dt)) return Values::Any;
  if (op == "asin" || op == "acos" || op == "atanh" || op == "erfinv") return Values::Unit;
  return Values::Any;  // out-of-domain inputs give NaN on both devices, which is compared too
}

TEST_F(CudaVsCpu, UnaryOpsOnEveryLayout) {
  for (const std::string& op : kUnaryOps) {
    for (DType dt : common_dtypes(op)) {
      for (View v : {View::Contiguous, View::Transposed, View::Gapped, View::Broadcast}) {
        Pair a = make_pair({33, 65}, dt, v, unary_values(op, dt), rng);
        if (op == "isnan" || op == "isfinite" || op == "isinf") inject_nans(a, rng, 5);
        EXPECT_TRUE(matches(ops::unary(op, a.cpu), ops::unary(op, a.dev))) << ctx(op, dt, view_name(v));
      }
      Pair s = make_pair({}, dt, View::Contiguous, unary_values(op, dt), rng);
      EXPECT_TRUE(matches(ops::unary(op, s.cpu), ops::unary(op, s.dev))) << ctx(op, dt, "0-d");
    }
  }
}

bool has_dtype(const std::string& op, DType dt) {
  const auto v = common_dtypes(op);
  return std::find(v.begin(), v.end(), dt) != v.end();
}

TEST_F(CudaVsCpu, SpecialFloatValues) {
  const std::vector<double> specials = {0.0, -0.0, 1.0, -1.0, 0.5,  -0.5,  2.5,      -2.5,      3.0,
                                        1e-30, -1e-30, 88.0, -88.0, 1e30, -1e30, INFINITY, -INFINITY, NAN};
  const int64_t n = static_cast<int64_t>(specials.size());
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    const Tensor c = cpu_tensor({n}, dt, specials);
    const Tensor d = ops::to(c, target(), std::nullopt, true);
    for (const std::string& op : kUnaryOps) {
      if (has_dtype(op, dt)) {
        EXPECT_TRUE(matches(ops::unary(op, c), ops::unary(op, d))) << ctx(op, dt, "specials");
      }
    }
    // Every pair of special values: rows against columns.
    const Tensor rc = ops::expand(ops::reshape(c, {n, 1}), {n, n}), cc = ops::expand(ops::reshape(c, {1, n}), {n, n});
    const Tensor rd = ops::expand(ops::reshape(d, {n, 1}), {n, n}), cd = ops::expand(ops::reshape(d, {1, n}), {n, n});
    for (const std::string& op : kBinaryOps) {
      if (has_dtype(op, dt)) {
        EXPECT_TRUE(matches(ops::binary(op, rc, cc), ops::binary(op, rd, cd))) << ctx(op, dt, "specials");
      }
    }
    for (const char* mode : {"trunc", "floor"})
      EXPECT_TRUE(matches(ops::div(rc, cc, mode), ops::div(rd, cd, mode))) << ctx("div", dt, mode);
  }
}

TEST_F(CudaVsCpu, IntegerEdgeValuesWrapLikeTheCpu) {
  // INT_MIN / -1, abs(INT_MIN), overflowing products: wrapping results on both devices.
  for (DType dt : {DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8}) {
    const double lo = dt == DType::UInt8 ? 128 : dt == DType::Int8 ? -128 : dt == DType::Int16 ? -32768
                      : dt == DType::Int32 ? -2147483648.0 : -9223372036854775808.0;
    const double hi = dt == DType::UInt8 ? 255 : dt == DType::Int8 ? 127 : dt == DType::Int16 ? 32767
                      : dt == DType::Int32 ? 2147483647.0 : 4611686018427387904.0;
    // No zeros: the values also serve as divisors (integer division by zero raises on the CPU).
    const std::vector<double> vals = {lo, hi, -1, 1, 2, -2, 7, -7, 3};
    const int64_t n = static_cast<int64_t>(vals.size());
    const Tensor c = cpu_tensor({n}, dt, vals);
    const Tensor d = ops::to(c, target(), std::nullopt, true);
    for (const char* op : {"neg", "abs", "square", "sign"})
      EXPECT_TRUE(matches(ops::unary(op, c), ops::unary(op, d))) << ctx(op, dt, "edge values");
    const Tensor rc = ops::expand(ops::reshape(c, {n, 1}), {n, n}), cc = ops::expand(ops::reshape(c, {1, n}), {n, n});
    const Tensor rd = ops::expand(ops::reshape(d, {n, 1}), {n, n}), cd = ops::expand(ops::reshape(d, {1, n}), {n, n});
    for (const char* op : {"add", "sub", "mul", "remainder", "fmod", "floor_divide", "maximum", "bitwise_xor"})
      EXPECT_TRUE(matches(ops::binary(op, rc, cc), ops::binary(op, rd, cd))) << ctx(op, dt, "edge values");
    EXPECT_TRUE(matches(ops::div(rc, cc, "trunc"), ops::div(rd, cd, "trunc"))) << ctx("div trunc", dt, "edge values");
  }
}

TEST_F(CudaVsCpu, ActivationsWithAttributes) {
  const std::vector<std::pair<std::string, Attrs>> cases = {
      {"gelu", Attrs{{"approximate", std::string("none")}}},
      {"gelu", Attrs{{"approximate", std::string("tanh")}}},
      {"softplus", Attrs{{"beta", 2.0}, {"threshold", 10.0}}},
      {"softplus", Attrs{{"beta", 1.0}, {"threshold", 20.0}}},
      {"leaky_relu", Attrs{{"negative_slope", 0.1}}},
      {"elu", Attrs{{"alpha", 1.25}, {"scale", 1.05}, {"input_scale", 0.9}}},
  };
  for (const auto& [op, attrs] : cases) {
    for (DType dt : common_dtypes(op)) {
      for (View v : {View::Contiguous, View::Gapped}) {
        Pair a = make_pair({41, 27}, dt, v, Values::Any, rng);
        const Tensor in_c[] = {a.cpu}, in_d[] = {a.dev};
        const Tensor rc = call_op(find_op(op), in_c, attrs)[0];
        const Tensor rd = call_op(find_op(op), in_d, attrs)[0];
        EXPECT_TRUE(matches(rc, rd)) << ctx(op, dt, view_name(v));
      }
    }
  }
}

// ---- copies, fills, ranges, random -----------------------------------------------------------

TEST_F(CudaVsCpu, CopyBetweenEveryDtypePairAndLayout) {
  // Fractions, negatives, values out of the narrow types' range, and NaN/inf in the floating
  // sources: casts must truncate, wrap and saturate exactly like the CPU.
  const std::vector<double> extra = {2.75, -2.75, 300.5, -300.5, 70000.0, -1e10, 1e20, INFINITY, -INFINITY, NAN};
  for (DType src_t : kAllDTypes) {
    for (DType dst_t : kAllDTypes) {
      Pair src = make_pair({13, 29}, src_t, View::Gapped, Values::Any, rng, is_floating(src_t) ? extra : std::vector<double>{});
      Pair dst = make_pair({13, 29}, dst_t, View::Transposed, Values::Any, rng);
      ops::copy_(dst.cpu, src.cpu);
      ops::copy_(dst.dev, src.dev);
      EXPECT_TRUE(matches(dst.cpu, dst.dev, Tol{0, 0}))
          << "copy " << dtype_name(src_t) << " -> " << dtype_name(dst_t) << " (casts must be bit-exact)";
    }
  }
  // Same dtype: dense (memcpy), strided (bit moves) and broadcast sources.
  for (DType dt : kAllDTypes) {
    for (View v : {View::Contiguous, View::Transposed, View::Broadcast}) {
      Pair src = make_pair({7, 130}, dt, v, Values::Any, rng);
      Pair dst = make_pair({7, 130}, dt, View::Gapped, Values::Any, rng);
      ops::copy_(dst.cpu, src.cpu);
      ops::copy_(dst.dev, src.dev);
      EXPECT_TRUE(matches(dst.cpu, dst.dev, Tol{0, 0})) << ctx("copy", dt, view_name(v));
    }
  }
}

TEST_F(CudaVsCpu, FillEveryDtypeAndLayout) {
  for (DType dt : common_dtypes("fill")) {
    for (const Scalar& value : {Scalar(int64_t{0}), Scalar(int64_t{-3}), Scalar(2.75), Scalar(true), Scalar(-1e10)}) {
      for (View v : {View::Contiguous, View::Gapped, View::Transposed}) {
        Pair t = make_pair({9, 31}, dt, v, Values::Any, rng);
        // A value the dtype cannot hold (-1e10 in int32) is refused before any kernel runs:
        // the same error on both devices.
        std::string cpu_error;
        try {
          ops::fill_(t.cpu, value);
        } catch (const std::exception& e) {
          cpu_error = e.what();
        }
        if (!cpu_error.empty()) {
          try {
            ops::fill_(t.dev, value);
            ADD_FAILURE() << ctx("fill", dt, view_name(v)) << ": the cpu raised '" << cpu_error << "', the device did not";
          } catch (const std::exception& e) {
            EXPECT_EQ(std::string(e.what()), cpu_error) << ctx("fill", dt, view_name(v));
          }
          continue;
        }
        ops::fill_(t.dev, value);
        EXPECT_TRUE(matches(t.cpu, t.dev, Tol{0, 0})) << ctx("fill", dt, view_name(v)) << " value " << value.to_double();
      }
    }
  }
}

TEST_F(CudaVsCpu, ArangeAndLinspaceAreBitExact) {
  for (DType dt : common_dtypes("arange")) {
    const Scalar start(int64_t{dt == DType::UInt8 ? 1 : -7});  // a start uint8 holds
    EXPECT_TRUE(matches(ops::arange(start, Scalar(int64_t{90}), Scalar(int64_t{3}), dt, kCpu),
                        ops::arange(start, Scalar(int64_t{90}), Scalar(int64_t{3}), dt, target()), Tol{0, 0}))
        << ctx("arange", dt);
    if (is_floating(dt)) {
      EXPECT_TRUE(matches(ops::arange(Scalar(0.1), Scalar(7.3), Scalar(0.37), dt, kCpu),
                          ops::arange(Scalar(0.1), Scalar(7.3), Scalar(0.37), dt, target()), Tol{0, 0}))
          << ctx("arange", dt, "fractional");
    }
  }
  for (DType dt : common_dtypes("linspace")) {
    for (const auto& [start, end, steps] : {std::tuple{-2.0, 7.0, int64_t{17}}, std::tuple{0.0, 1.0, int64_t{1000}},
                                            std::tuple{5.0, -5.0, int64_t{11}}, std::tuple{3.0, 9.0, int64_t{1}}}) {
      if (dt == DType::UInt8 && (start < 0 || end < 0)) continue;  // refused: uint8 cannot hold the bound
      EXPECT_TRUE(matches(ops::linspace(start, end, steps, dt, kCpu), ops::linspace(start, end, steps, dt, target()),
                          Tol{0, 0}))
          << ctx("linspace", dt) << " " << start << ".." << end << " x" << steps;
    }
  }
}

TEST_F(CudaVsCpu, RandomStreamsMatchTheCpu) {
  // Same seed and call sequence: the same numbers on both devices (philox.h).
  for (DType dt : common_dtypes("uniform")) {
    ops::manual_seed(1234);
    const Tensor c = ops::rand({317, 41}, dt, kCpu);
    ops::manual_seed(1234);
    const Tensor d = ops::rand({317, 41}, dt, target());
    EXPECT_TRUE(matches(c, d, Tol{0, 0})) << ctx("rand", dt) << " must be bit-identical";
  }
  for (DType dt : common_dtypes("normal")) {
    ops::manual_seed(99);
    const Tensor c = ops::randn({1001, 3}, dt, kCpu);
    ops::manual_seed(99);
    const Tensor d = ops::randn({1001, 3}, dt, target());
    // log/cos/sqrt may round differently in the last place of a double.
    EXPECT_TRUE(matches(c, d)) << ctx("randn", dt);
  }
  for (DType dt : common_dtypes("randint")) {
    const int64_t lo = dt == DType::UInt8 ? 3 : -50, hi = dt == DType::Int8 ? 100 : 200;
    ops::manual_seed(7);
    const Tensor c = ops::randint(lo, hi, {77, 13}, dt, kCpu);
    ops::manual_seed(7);
    const Tensor d = ops::randint(lo, hi, {77, 13}, dt, target());
    EXPECT_TRUE(matches(c, d)) << ctx("randint", dt);
  }
  // In place on a strided view (filled densely, then copied).
  Pair t = make_pair({19, 23}, DType::Float32, View::Gapped, Values::Any, rng);
  ops::manual_seed(5);
  ops::uniform_(t.cpu, -2.0, 3.0);
  ops::manual_seed(5);
  ops::uniform_(t.dev, -2.0, 3.0);
  EXPECT_TRUE(matches(t.cpu, t.dev, Tol{0, 0})) << "uniform_ on a gapped view";
  ops::manual_seed(6);
  ops::normal_(t.cpu, 1.5, 0.25);
  ops::manual_seed(6);
  ops::normal_(t.dev, 1.5, 0.25);
  EXPECT_TRUE(matches(t.cpu, t.dev)) << "normal_ on a gapped view";
}

// ---- reductions --------------------------------------------------------------------------------

Tol reduce_tolerance(const std::string& op, DType dt, int64_t reduce_size) {
  Tol t = tolerance(dt);
  // All but the exact extremes (amax, amin) accumulate in double (float in f16/bf16), in a
  // different order on each device.
  if (op != "amax" && op != "amin") {
    if (dt == DType::Float16 || dt == DType::BFloat16) t.atol *= std::sqrt(static_cast<double>(reduce_size));
    if (dt == DType::Float64) t.atol = 1e-12 * static_cast<double>(reduce_size);
  }
  return t;
}

TEST_F(CudaVsCpu, ReductionsOverEveryDimSet) {
  const Shape shape{6, 37, 129};
  const std::vector<Shape> dim_sets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1}};
  for (const std::string& op : kReductions) {
    for (DType dt : common_dtypes(op)) {
      const Values kind = op == "prod" ? Values::NearOne : Values::Any;
      for (View v : {View::Contiguous, View::Transposed, View::Gapped, View::Broadcast}) {
        Pair a = make_pair(shape, dt, v, kind, rng);
        if (op == "amax" || op == "amin") inject_nans(a, rng, 3);
        for (const Shape& dims : dim_sets) {
          for (bool keepdim : {false, true}) {
            int64_t r = 1;
            for (int64_t d : dims) r *= shape[static_cast<size_t>(d < 0 ? d + 3 : d)];
            if (dims.empty()) r = shape_numel(shape);
            EXPECT_TRUE(matches(ops::reduce(op, a.cpu, dims, keepdim), ops::reduce(op, a.dev, dims, keepdim),
                                reduce_tolerance(op, dt, r)))
                << ctx(op, dt, view_name(v)) << " dims " << shape_str(dims) << (keepdim ? " keepdim" : "");
          }
        }
      }
      Pair s = make_pair({}, dt, View::Contiguous, kind, rng);
      EXPECT_TRUE(matches(ops::reduce(op, s.cpu, {}, false), ops::reduce(op, s.dev, {}, false))) << ctx(op, dt, "0-d");
    }
  }
}

TEST_F(CudaVsCpu, LongReductionsSplitAcrossBlocks) {
  // Few outputs and long reductions take the chunked two-pass path, inner and outer.
  Pair rows = make_pair({4, 1 << 20}, DType::Float32, View::Contiguous, Values::Any, rng);
  Pair cols = make_pair({1 << 20, 3}, DType::Float32, View::Contiguous, Values::Any, rng);
  Pair ints = make_pair({3 << 20}, DType::Int32, View::Contiguous, Values::Any, rng);
  for (const char* op : {"sum", "mean", "amax", "amin"}) {
    EXPECT_TRUE(matches(ops::reduce(op, rows.cpu, {1}, false), ops::reduce(op, rows.dev, {1}, false),
                        Tol{1e-5, 1e-3}))
        << op << " over 2^20 contiguous elements";
    EXPECT_TRUE(matches(ops::reduce(op, cols.cpu, {0}, false), ops::reduce(op, cols.dev, {0}, false),
                        Tol{1e-5, 1e-3}))
        << op << " over 2^20 strided elements";
    EXPECT_TRUE(matches(ops::reduce(op, rows.cpu, {}, false), ops::reduce(op, rows.dev, {}, false), Tol{1e-5, 1e-3}))
        << op << " over everything";
  }
  EXPECT_TRUE(matches(ops::reduce("sum", ints.cpu, {}, false), ops::reduce("sum", ints.dev, {}, false)))
      << "integer sums are exact";
  EXPECT_TRUE(matches(ops::argmax(rows.cpu, int64_t{1}, false), ops::argmax(rows.dev, int64_t{1}, false)))
      << "argmax over 2^20 elements";
  EXPECT_TRUE(matches(ops::argmin(cols.cpu, int64_t{0}, true), ops::argmin(cols.dev, int64_t{0}, true)))
      << "argmin over 2^20 strided elements";
}

TEST_F(CudaVsCpu, IndexedReductionsPickTheFirstExtremeAndNaN) {
  const Shape shape{5, 33, 70};
#define PF_X(name, Camel, dtypes, n_outputs, torch_name, dim_optional, sig) {name, dim_optional},
  for (const auto& [op, dim_optional] : std::vector<std::pair<std::string, bool>>{PF_OPDEFS_INDEXED(PF_X)}) {
#undef PF_X
    for (DType dt : common_dtypes(op)) {
      for (View v : {View::Contiguous, View::Transposed, View::Gapped}) {
        for (bool with_nan : {false, true}) {
          if (with_nan && !is_floating(dt)) continue;
          Pair a = make_pair(shape, dt, v, Values::Small, rng);  // many ties
          if (with_nan) inject_nans(a, rng, 40);
          std::vector<std::optional<int64_t>> dims = {0, 1, 2, -1};
          if (dim_optional) dims.push_back(std::nullopt);  // over the flattened input
          for (const std::optional<int64_t> dim : dims) {
            for (bool keepdim : {false, true}) {
              const std::string where = ctx(op, dt, view_name(v)) + " dim " + (dim ? std::to_string(*dim) : "None") +
                                        (keepdim ? " keepdim" : "") + (with_nan ? " with NaN" : "");
              const auto c = ops::indexed(op, a.cpu, dim, keepdim), d = ops::indexed(op, a.dev, dim, keepdim);
              ASSERT_EQ(c.size(), d.size()) << where;
              for (size_t i = 0; i < c.size(); ++i) EXPECT_TRUE(matches(c[i], d[i], Tol{0, 0})) << where << " output " << i;
            }
          }
        }
      }
    }
  }
}

// ---- matrix multiply ------------------------------------------------------------------------------

Tol matmul_tolerance(DType dt, int64_t k) {
  const double kk = static_cast<double>(std::max<int64_t>(k, 1));
  switch (dt) {
    case DType::Float16: return {5e-3, 2e-3 * std::sqrt(kk)};
    case DType::BFloat16: return {3e-2, 1e-2 * std::sqrt(kk)};
    case DType::Float32: return {1e-4, 1e-5 * kk};
    case DType::Float64: return {1e-10, 1e-12 * kk};
    default: return {0, 0};
  }
}

TEST_F(CudaVsCpu, MatrixMultiplyOnEveryLayout) {
  const std::vector<std::array<int64_t, 3>> shapes = {{37, 53, 29}, {1, 64, 1}, {128, 256, 64}, {5, 0, 7}, {1, 1, 1}};
  for (DType dt : common_dtypes("mm")) {
    for (const auto& [m, k, n] : shapes) {
      for (View va : {View::Contiguous, View::Transposed, View::Gapped}) {
        for (View vb : {View::Contiguous, View::Transposed, View::Gapped}) {
          Pair a = make_pair({m, k}, dt, va, Values::Any, rng);
          Pair b = make_pair({k, n}, dt, vb, Values::Any, rng);
          EXPECT_TRUE(matches(ops::mm(a.cpu, b.cpu), ops::mm(a.dev, b.dev), matmul_tolerance(dt, k)))
              << ctx("mm", dt, std::string(view_name(va)) + " @ " + view_name(vb)) << " " << m << "x" << k << "x" << n;
        }
      }
    }
  }
}

TEST_F(CudaVsCpu, BatchedMatrixMultiply) {
  for (DType dt : common_dtypes("bmm")) {
    for (View va : {View::Contiguous, View::Transposed, View::Broadcast}) {
      for (View vb : {View::Contiguous, View::Gapped, View::Broadcast}) {
        Pair a = make_pair({6, 19, 33}, dt, va, Values::Any, rng);
        Pair b = make_pair({6, 33, 25}, dt, vb, Values::Any, rng);
        EXPECT_TRUE(matches(ops::bmm(a.cpu, b.cpu), ops::bmm(a.dev, b.dev), matmul_tolerance(dt, 33)))
            << ctx("bmm", dt, std::string(view_name(va)) + " @ " + view_name(vb));
      }
    }
    Pair a = make_pair({4, 10, 8}, dt, View::Contiguous, Values::Any, rng);
    Pair b = make_pair({8, 12}, dt, View::Transposed, Values::Any, rng);
    EXPECT_TRUE(matches(ops::matmul(a.cpu, b.cpu), ops::matmul(a.dev, b.dev), matmul_tolerance(dt, 8)))
        << ctx("matmul", dt, "batched @ matrix");
  }
}

// ---- the device: memory, copies, errors ---------------------------------------------------------------

TEST_F(CudaVsCpu, AllocatorStatisticsFollowTensors) {
  if (selfcheck()) GTEST_SKIP() << "the CUDA allocator has no CPU stand-in";
  DeviceBackend& b = device_backend(target());
  b.synchronize(0);
  const size_t before = b.allocated_bytes(0);
  {
    Tensor t = Tensor::empty({1000, 1000}, DType::Float32, target());
    EXPECT_GE(b.allocated_bytes(0), before + 4'000'000u);
    EXPECT_GE(b.peak_allocated_bytes(0), b.allocated_bytes(0));
  }
  EXPECT_EQ(b.allocated_bytes(0), before) << "a freed tensor's block returns to the cache";
  b.empty_cache(0);
  b.reset_peak(0);
  EXPECT_EQ(b.peak_allocated_bytes(0), b.allocated_bytes(0));
  // Reuse: the same size again comes from the cache and keeps working.
  Pair p = make_pair({1000, 1000}, DType::Float32, View::Contiguous, Values::Any, rng);
  EXPECT_TRUE(matches(ops::unary("exp", p.cpu), ops::unary("exp", p.dev)));
}

TEST_F(CudaVsCpu, HostCopiesOfOddSizesRoundTrip) {
  if (selfcheck()) GTEST_SKIP() << "device copies have no CPU stand-in";
  DeviceBackend& b = device_backend(target());
  for (size_t n : {size_t{1}, size_t{3}, size_t{4097}, size_t{1} << 20}) {
    std::vector<unsigned char> src(n), back(n, 0);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 37 + 11);
    void* d1 = b.allocate(0, n);
    void* d2 = b.allocate(0, n);
    b.copy_from_host(0, d1, src.data(), n);
    b.copy_on_device(0, d2, d1, n);
    b.copy_to_host(0, back.data(), d2, n);
    EXPECT_EQ(src, back) << n << " bytes";
    b.deallocate(0, d1, n);
    b.deallocate(0, d2, n);
  }
}

TEST_F(CudaVsCpu, CrossDeviceCopiesAndEmptyTensors) {
  for (DType dt : kAllDTypes) {
    Pair p = make_pair({11, 7}, dt, View::Gapped, Values::Any, rng);
    Tensor back = ops::to(p.dev, kCpu, std::nullopt);
    EXPECT_TRUE(matches(p.cpu, back, Tol{0, 0})) << ctx("to(cpu)", dt);
    Tensor converted_c = ops::to(p.cpu, std::nullopt, DType::Float32);
    Tensor converted_d = ops::to(p.dev, std::nullopt, DType::Float32);
    EXPECT_TRUE(matches(converted_c, converted_d, Tol{0, 0})) << ctx("to(float32)", dt);
  }
  Tensor empty_c = Tensor::empty({0, 5}, DType::Float32, kCpu);
  Tensor empty_d = Tensor::empty({0, 5}, DType::Float32, target());
  ops::fill_(empty_d, Scalar(1.0));
  EXPECT_TRUE(matches(ops::reduce("sum", empty_c, {0}, false), ops::reduce("sum", empty_d, {0}, false)));
  EXPECT_TRUE(matches(ops::binary("add", empty_c, empty_c), ops::binary("add", empty_d, empty_d)));
}

}  // namespace
