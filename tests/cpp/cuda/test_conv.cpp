// CUDA conformance of the convolutions (plugins/cuda/src/conv.cpp, cuDNN): conv2d / conv3d,
// their _grad_input and _grad_weight and the transposed convolutions against the CPU plugin
// on the same random inputs, with groups, dilation, padding, strides, odd sizes, bias,
// channels-last and strided operands; float32 with TF32 off (tight) and on (loose), float64,
// and float16 / bfloat16 against the CPU's float32 result rounded to the dtype; both search
// strategies, the exhaustive one persisting its choices in the cache file under the cuDNN
// section.
//
// Without a GPU the comparisons skip; the registration test runs everywhere.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "conformance_harness.h"
#include "plugflow/algo_choice.h"
#include "plugflow/conv_settings.h"
#include "plugflow/dispatch.h"

namespace {

using namespace plugflow;
using namespace cuda_conformance;
namespace ops = plugflow::ops;

const std::vector<std::string> kConvOps = {"conv2d", "conv2d_grad_input", "conv2d_grad_weight",
                                          "conv3d", "conv3d_grad_input", "conv3d_grad_weight"};

struct ConvProblem {
  int64_t N, C, H, W, O, kh, kw;
  Shape stride, padding, dilation;
  int64_t groups;
  bool bias;
};

// Odd sizes, every attribute away from its default at least once, depthwise and grouped.
const std::vector<ConvProblem> kProblems = {
    {2, 3, 9, 11, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {1, 4, 13, 7, 6, 3, 2, {2, 1}, {0, 1}, {1, 2}, 2, false},
    {3, 6, 8, 8, 6, 3, 3, {1, 1}, {2, 2}, {2, 2}, 6, true},  // depthwise, dilated
    {2, 8, 15, 15, 16, 1, 1, {2, 2}, {0, 0}, {1, 1}, 1, true},
    {1, 5, 6, 10, 10, 5, 3, {3, 2}, {2, 1}, {1, 1}, 5, false},
};

// A (N, C, H, W) operand on both devices: packed NCHW, channels-last, or a strided view.
enum class Layout { Nchw, ChannelsLast, Strided };
Pair image_pair(const Shape& s, DType dt, Layout layout, std::mt19937& rng) {
  switch (layout) {
    case Layout::Nchw: return make_pair(s, dt, View::Contiguous, Values::Any, rng);
    case Layout::ChannelsLast: {
      Pair p = make_pair({s[0], s[2], s[3], s[1]}, dt, View::Contiguous, Values::Any, rng);
      return {ops::permute(p.cpu, {0, 3, 1, 2}), ops::permute(p.dev, {0, 3, 1, 2})};
    }
    case Layout::Strided: return make_pair(s, dt, View::Gapped, Values::Any, rng);
  }
  return {};
}
const char* layout_name(Layout l) {
  return l == Layout::Nchw ? "nchw" : l == Layout::ChannelsLast ? "channels_last" : "strided";
}

// The CPU reference of a float16 / bfloat16 problem: computed in float32, rounded to `dt`.
Tensor cpu_reference(const Tensor& f32_result, DType dt) { return ops::to(f32_result, kCpu, dt); }
Tensor as_f32(const Tensor& t) { return ops::to(t, kCpu, DType::Float32); }

class ConvSettingsScope {
 public:
  explicit ConvSettingsScope(bool allow_tf32) : saved_(conv_settings()) {
    ConvSettings s = saved_;
    s.allow_tf32 = allow_tf32;
    set_conv_settings(s);
  }
  ~ConvSettingsScope() { set_conv_settings(saved_); }

 private:
  ConvSettings saved_;
};

// Runs every problem in every layout for `dt` and compares the four convolutions.
void compare_all(DType dt, Tol tol, std::mt19937& rng) {
  const bool half = dt == DType::Float16 || dt == DType::BFloat16;
  for (const ConvProblem& p : kProblems) {
    for (Layout layout : {Layout::Nchw, Layout::ChannelsLast, Layout::Strided}) {
      const std::string where = ctx("conv", dt, layout_name(layout)) + " C=" + std::to_string(p.C) +
                                " O=" + std::to_string(p.O) + " g=" + std::to_string(p.groups);
      Pair x = image_pair({p.N, p.C, p.H, p.W}, dt, layout, rng);
      Pair w = make_pair({p.O, p.C / p.groups, p.kh, p.kw}, dt, layout == Layout::Strided ? View::Gapped : View::Contiguous,
                         Values::Any, rng);
      Pair b = p.bias ? make_pair({p.O}, dt, View::Contiguous, Values::Any, rng) : Pair{};
      const auto fwd = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
        return ops::conv2d(xi, wi, bi, p.stride, p.padding, p.dilation, p.groups);
      };
      const Tensor y_dev = fwd(x.dev, w.dev, b.dev);
      const Tensor y_cpu = half ? cpu_reference(fwd(as_f32(x.cpu), as_f32(w.cpu), p.bias ? as_f32(b.cpu) : Tensor()), dt)
                                : fwd(x.cpu, w.cpu, b.cpu);
      EXPECT_TRUE(matches(y_cpu, y_dev, tol)) << where << " forward";

      Pair g = image_pair(y_cpu.sizes(), dt, layout, rng);
      const auto grad_in = [&](const Tensor& gi, const Tensor& wi) {
        return ops::conv2d_grad_input(gi, wi, {p.H, p.W}, p.stride, p.padding, p.dilation, p.groups);
      };
      const auto grad_w = [&](const Tensor& gi, const Tensor& xi) {
        return ops::conv2d_grad_weight(gi, xi, {p.kh, p.kw}, p.stride, p.padding, p.dilation, p.groups);
      };
      EXPECT_TRUE(matches(half ? cpu_reference(grad_in(as_f32(g.cpu), as_f32(w.cpu)), dt) : grad_in(g.cpu, w.cpu),
                          grad_in(g.dev, w.dev), tol))
          << where << " grad_input";
      EXPECT_TRUE(matches(half ? cpu_reference(grad_w(as_f32(g.cpu), as_f32(x.cpu)), dt) : grad_w(g.cpu, x.cpu),
                          grad_w(g.dev, x.dev), tol))
          << where << " grad_weight";

      // The transposed convolution (the adjoint): weight (C_in, C_out / groups, kh, kw), with an
      // output padding below the stride.
      const Shape out_pad{p.stride[0] - 1, p.stride[1] - 1};
      Pair wt = make_pair({p.C, p.O / p.groups, p.kh, p.kw}, dt, View::Contiguous, Values::Any, rng);
      const auto tconv = [&](const Tensor& xi, const Tensor& wi) {
        return ops::conv_transpose2d(xi, wi, Tensor(), p.stride, p.padding, out_pad, p.groups, p.dilation);
      };
      EXPECT_TRUE(matches(half ? cpu_reference(tconv(as_f32(x.cpu), as_f32(wt.cpu)), dt) : tconv(x.cpu, wt.cpu),
                          tconv(x.dev, wt.dev), tol))
          << where << " conv_transpose2d";
    }
  }
}

// ---- 3-d: the N-d descriptors ----------------------------------------------------------------

struct Conv3dProblem {
  Shape x;  // (N, C, D, H, W)
  int64_t O;
  Shape kernel, stride, padding, dilation;
  int64_t groups;
  bool bias;
};

const std::vector<Conv3dProblem> kProblems3d = {
    {{2, 3, 5, 7, 6}, 4, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 1, true},
    {{1, 4, 6, 5, 9}, 6, {2, 3, 1}, {2, 1, 3}, {0, 1, 1}, {1, 2, 1}, 2, false},
    {{2, 4, 4, 6, 5}, 4, {3, 1, 3}, {1, 2, 1}, {2, 0, 1}, {2, 1, 1}, 4, true},  // depthwise, dilated
};

// (N, C, D, H, W) in NCDHW, NDHWC (channels-last) or a strided view.
Pair volume_pair(const Shape& s, DType dt, Layout layout, std::mt19937& rng) {
  if (layout != Layout::ChannelsLast) return image_pair(s, dt, layout, rng);
  Pair p = make_pair({s[0], s[2], s[3], s[4], s[1]}, dt, View::Contiguous, Values::Any, rng);
  return {ops::permute(p.cpu, {0, 4, 1, 2, 3}), ops::permute(p.dev, {0, 4, 1, 2, 3})};
}

Tensor run_op(const char* op, const Tensor& a, const Tensor& b, Attrs attrs) {
  const Tensor in[] = {a, b};
  return call_op(find_op(op), in, attrs)[0];
}

void compare_all_3d(DType dt, Tol tol, std::mt19937& rng) {
  const bool half = dt == DType::Float16 || dt == DType::BFloat16;
  const auto ref = [&](const std::function<Tensor(const Tensor&, const Tensor&)>& f, const Tensor& a, const Tensor& b) {
    return half ? cpu_reference(f(as_f32(a), as_f32(b)), dt) : f(a, b);
  };
  for (const Conv3dProblem& p : kProblems3d) {
    for (Layout layout : {Layout::Nchw, Layout::ChannelsLast, Layout::Strided}) {
      const std::string where = ctx("conv3d", dt, layout_name(layout)) + " C=" + std::to_string(p.x[1]) +
                                " O=" + std::to_string(p.O) + " g=" + std::to_string(p.groups);
      Pair x = volume_pair(p.x, dt, layout, rng);
      Pair w = make_pair({p.O, p.x[1] / p.groups, p.kernel[0], p.kernel[1], p.kernel[2]}, dt,
                         layout == Layout::Strided ? View::Gapped : View::Contiguous, Values::Any, rng);
      Pair b = p.bias ? make_pair({p.O}, dt, View::Contiguous, Values::Any, rng) : Pair{};
      const auto fwd = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
        return ops::conv3d(xi, wi, bi, p.stride, p.padding, p.dilation, p.groups);
      };
      const Tensor y_dev = fwd(x.dev, w.dev, b.dev);
      const Tensor y_cpu = half ? cpu_reference(fwd(as_f32(x.cpu), as_f32(w.cpu), p.bias ? as_f32(b.cpu) : Tensor()), dt)
                                : fwd(x.cpu, w.cpu, b.cpu);
      EXPECT_TRUE(matches(y_cpu, y_dev, tol)) << where << " forward";

      const Attrs attrs{{"stride", p.stride}, {"padding", p.padding}, {"dilation", p.dilation}, {"groups", p.groups}};
      Pair g = volume_pair(y_cpu.sizes(), dt, layout, rng);
      Attrs gi_attrs = attrs;
      gi_attrs.set("input_size", Shape{p.x[2], p.x[3], p.x[4]});
      const auto grad_in = [&](const Tensor& gi, const Tensor& wi) { return run_op("conv3d_grad_input", gi, wi, gi_attrs); };
      Attrs gw_attrs = attrs;
      gw_attrs.set("kernel_size", p.kernel);
      const auto grad_w = [&](const Tensor& gi, const Tensor& xi) { return run_op("conv3d_grad_weight", gi, xi, gw_attrs); };
      EXPECT_TRUE(matches(ref(grad_in, g.cpu, w.cpu), grad_in(g.dev, w.dev), tol)) << where << " grad_input";
      EXPECT_TRUE(matches(ref(grad_w, g.cpu, x.cpu), grad_w(g.dev, x.dev), tol)) << where << " grad_weight";

      const Shape out_pad{p.stride[0] - 1, p.stride[1] - 1, p.stride[2] - 1};
      Pair wt = make_pair({p.x[1], p.O / p.groups, p.kernel[0], p.kernel[1], p.kernel[2]}, dt, View::Contiguous,
                          Values::Any, rng);
      const auto tconv = [&](const Tensor& xi, const Tensor& wi) {
        return ops::conv_transpose3d(xi, wi, Tensor(), p.stride, p.padding, out_pad, p.groups, p.dilation);
      };
      EXPECT_TRUE(matches(ref(tconv, x.cpu, wt.cpu), tconv(x.dev, wt.dev), tol)) << where << " conv_transpose3d";
    }
  }
}

// ---- runs everywhere --------------------------------------------------------------------------

TEST_F(CudaPlugin, RegistersConvolutionsForTheCpuDtypesAndTheHalfTypes) {
  const auto cpu = kernels_of("cpu", DeviceType::CPU);
  const auto cuda = kernels_of("cuda", DeviceType::CUDA);
  for (const std::string& op : kConvOps) {
    for (DType t : kAllDTypes) {
      // CUDA adds float16 and bfloat16 (cuDNN's tensor cores; AMP): the CPU has no such kernel.
      const bool expected = cpu.count({op, t}) > 0 || t == DType::Float16 || t == DType::BFloat16;
      EXPECT_EQ(cuda.count({op, t}) > 0, expected) << "op '" << op << "' dtype " << dtype_name(t);
    }
  }
}

// ---- comparisons ------------------------------------------------------------------------------

TEST_F(CudaVsCpu, ConvolutionsFloat32WithoutTf32AndFloat64) {
  ConvSettingsScope fma(/*allow_tf32=*/false);
  compare_all(DType::Float32, Tol{1e-4, 1e-4}, rng);
  compare_all(DType::Float64, Tol{1e-10, 1e-10}, rng);
}

TEST_F(CudaVsCpu, Convolutions3dFloat32WithoutTf32AndFloat64) {
  ConvSettingsScope fma(/*allow_tf32=*/false);
  compare_all_3d(DType::Float32, Tol{1e-4, 1e-4}, rng);
  compare_all_3d(DType::Float64, Tol{1e-10, 1e-10}, rng);
}

TEST_F(CudaVsCpu, Convolutions3dHalfTypes) {
  if (selfcheck()) GTEST_SKIP() << "the CPU plugin has no half-precision convolutions";
  compare_all_3d(DType::Float16, Tol{1e-2, 5e-2}, rng);
  compare_all_3d(DType::BFloat16, Tol{3e-2, 2e-1}, rng);
}

TEST_F(CudaVsCpu, ConvolutionsFloat32WithTf32) {
  if (selfcheck()) GTEST_SKIP() << "TF32 has no CPU stand-in";
  ConvSettingsScope tf32(/*allow_tf32=*/true);
  compare_all(DType::Float32, Tol{1e-2, 5e-2}, rng);  // a 10-bit mantissa on the inputs
}

TEST_F(CudaVsCpu, ConvolutionsHalfTypes) {
  if (selfcheck()) GTEST_SKIP() << "the CPU plugin has no half-precision convolutions";
  compare_all(DType::Float16, Tol{1e-2, 5e-2}, rng);
  compare_all(DType::BFloat16, Tol{3e-2, 2e-1}, rng);
}

TEST_F(CudaVsCpu, ExhaustiveSearchMatchesAndPersistsItsChoices) {
  if (selfcheck()) GTEST_SKIP() << "checks the cuDNN section of the cache file";
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("plugflow_cudnn_algos_" + std::to_string(::getpid()) + ".yaml");
  const Config saved = current_config();
  Config exhaustive = saved;
  exhaustive.optimizations.conv_algo_search = "exhaustive";
  exhaustive.optimizations.algo_cache = cache.string();
  init_from_config(exhaustive);
  {
    ConvSettingsScope fma(/*allow_tf32=*/false);
    compare_all(DType::Float32, Tol{1e-4, 1e-4}, rng);
  }
  compare_all(DType::Float16, Tol{1e-2, 5e-2}, rng);
  init_from_config(saved);

  int searched = 0;
  for (const AlgoChoice& c : algo_choices()) {
    if (c.provider != "cuda") continue;
    EXPECT_TRUE(c.source == "search" || c.source == "heuristic" || c.source == "cache") << c.source;
    searched += c.source == "search";
    EXPECT_NE(c.algorithm.find(':'), std::string::npos) << c.algorithm;  // "<algorithm>:<math type>"
  }
  EXPECT_GT(searched, 0);
  std::ifstream in(cache);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("cuda cudnn "), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("conv2d_grad_weight float16"), std::string::npos) << text.str();
  std::filesystem::remove(cache);
}

}  // namespace
