// CUDA conformance of the convolutions (plugins/cuda/src/conv.cpp, cuDNN): conv2d / conv3d,
// their _grad_input and _grad_weight and the transposed convolutions against the CPU plugin
// on the same random inputs, with groups, dilation, padding, strides, odd sizes, bias,
// channels-last and strided operands; float32 with TF32 off (tight) and on (loose), float64,
// and float16 / bfloat16 against the CPU's float32 result rounded to the dtype; both search
// strategies, the exhaustive one persisting its choices in the cache file under the cuDNN
// section. conv2d_fused (plugins/cuda/src/cudnn_fused_conv.cpp, cuDNN's fused runtime) against
// the composed ops on the device and against the CPU for every epilogue it fuses, and on a GPU
// the proof that the 16-bit channels-last case ran as a cuDNN graph.
//
// Without a GPU the comparisons skip; the registration tests run everywhere.
// PF_CUDA_CONFORMANCE_SELFCHECK=1 runs the comparisons with the CPU as the device under test.
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

// ---- conv2d_fused: cuDNN's fused runtime against the composed path and the CPU ----------------

// A conv2d_fused call: act(conv2d(x, w) + bias + addend) with the optional terms present or not.
struct Epilogue {
  const char* activation;
  bool bias, addend;
};
// Every epilogue the cuDNN graph takes (conv_fusion::refusal): relu, silu and none, each with
// the bias, the addend or both, and the activations alone.
const std::vector<Epilogue> kEpilogues = {
    {"relu", true, false}, {"relu", false, true}, {"relu", true, true}, {"relu", false, false},
    {"silu", true, false}, {"silu", false, true}, {"silu", true, true}, {"silu", false, false},
    {"none", true, false}, {"none", false, true}, {"none", true, true}};

Tensor call(const char* op, std::vector<Tensor> in, const Attrs& attrs) { return call_op(find_op(op), in, attrs)[0]; }

// The fused op's attributes for problem `p`.
Attrs fused_attrs(const ConvProblem& p, const Epilogue& e) {
  return {{"stride", p.stride},       {"padding", p.padding},     {"dilation", p.dilation},
          {"groups", p.groups},       {"has_bias", e.bias},       {"has_addend", e.addend},
          {"activation", std::string(e.activation)}};
}

Tensor conv2d_fused(const ConvProblem& p, const Epilogue& e, const Tensor& x, const Tensor& w, const Tensor& b,
                    const Tensor& z) {
  std::vector<Tensor> in{x, w};
  if (e.bias) in.push_back(b);
  if (e.addend) in.push_back(z);
  return call("conv2d_fused", in, fused_attrs(p, e));
}

// The unfused ops in the graph's order: conv2d (with the bias), add, activation.
Tensor composed(const ConvProblem& p, const Epilogue& e, const Tensor& x, const Tensor& w, const Tensor& b,
                const Tensor& z) {
  Tensor y = ops::conv2d(x, w, e.bias ? b : Tensor(), p.stride, p.padding, p.dilation, p.groups);
  if (e.addend) y = call("add", {y, z}, {{"alpha", Scalar(1)}});
  if (std::string(e.activation) != "none") y = call(e.activation, {y}, {});
  return y;
}

// conv2d_fused on the device against the composed ops on the device and against the CPU
// (16-bit types: the CPU's float32 result rounded to the dtype), for `epilogues` of problem `p`
// in `layout` (the weight channels-last too when the images are).
void compare_fused(const ConvProblem& p, Layout layout, DType dt, const std::vector<Epilogue>& epilogues, Tol tol,
                   std::mt19937& rng) {
  const bool half = dt == DType::Float16 || dt == DType::BFloat16;
  Pair x = image_pair({p.N, p.C, p.H, p.W}, dt, layout, rng);
  const Layout w_layout = layout == Layout::ChannelsLast ? layout : Layout::Nchw;
  Pair w = image_pair({p.O, p.C / p.groups, p.kh, p.kw}, dt, w_layout, rng);
  Pair b = make_pair({p.O}, dt, View::Contiguous, Values::Any, rng);
  const auto out_size = [&](int64_t in, int64_t k, int i) {
    return (in + 2 * p.padding[i] - p.dilation[i] * (k - 1) - 1) / p.stride[i] + 1;
  };
  Pair z = image_pair({p.N, p.O, out_size(p.H, p.kh, 0), out_size(p.W, p.kw, 1)}, dt, layout, rng);
  for (const Epilogue& e : epilogues) {
    const std::string where = ctx("conv2d_fused", dt, layout_name(layout)) + " C=" + std::to_string(p.C) +
                              " O=" + std::to_string(p.O) + " g=" + std::to_string(p.groups) + " act=" + e.activation +
                              (e.bias ? " bias" : "") + (e.addend ? " addend" : "");
    const Tensor fused = conv2d_fused(p, e, x.dev, w.dev, b.dev, z.dev);
    const Tensor cpu = half ? cpu_reference(composed(p, e, as_f32(x.cpu), as_f32(w.cpu), as_f32(b.cpu),
                                                     as_f32(z.cpu)), dt)
                            : composed(p, e, x.cpu, w.cpu, b.cpu, z.cpu);
    EXPECT_TRUE(matches(cpu, fused, tol)) << where << ": fused against the CPU";
    // The composed path rounds after every step (16-bit types), the fused graph once.
    EXPECT_TRUE(matches(ops::to(composed(p, e, x.dev, w.dev, b.dev, z.dev), kCpu, std::nullopt), fused, tol))
        << where << ": fused against the composed ops on the device";
  }
}

// What the fused runtime is made for (NHWC, channel counts that are multiples of 8), a strided
// 1x1, and a grouped one with odd sizes that cuDNN may send back to the composed path.
const std::vector<ConvProblem> kFusedProblems = {
    {2, 8, 9, 11, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {2, 16, 8, 8, 8, 1, 1, {2, 2}, {0, 0}, {1, 1}, 1, true},
    {1, 6, 7, 9, 6, 3, 3, {1, 2}, {1, 1}, {2, 1}, 3, true},
};

// Every epilogue on the first problem channels-last; the others with the full epilogue only,
// channels-last and row-major.
void compare_fused_all(DType dt, Tol tol, std::mt19937& rng) {
  compare_fused(kFusedProblems[0], Layout::ChannelsLast, dt, kEpilogues, tol, rng);
  const std::vector<Epilogue> full = {{"relu", true, true}};
  for (const ConvProblem& p : kFusedProblems)
    for (Layout layout : {Layout::ChannelsLast, Layout::Nchw}) compare_fused(p, layout, dt, full, tol, rng);
  compare_fused(kFusedProblems[0], Layout::Strided, dt, {{"silu", true, true}}, tol, rng);
}

// The conv2d_fused choices the cuda plugin reported (none in the self-check).
std::vector<AlgoChoice> fused_choices() {
  std::vector<AlgoChoice> out;
  for (const AlgoChoice& c : algo_choices())
    if (c.provider == "cuda" && c.op == "conv2d_fused") out.push_back(c);
  return out;
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
    if (c.provider != "cuda" || c.op == "conv2d_fused") continue;  // the fused graph names engines
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

TEST_F(CudaPlugin, RegistersConv2dFusedForTheCpuDtypesAndFloat16) {
  const auto cuda = kernels_of("cuda", DeviceType::CUDA);
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64})
    EXPECT_EQ(cuda.count({"conv2d_fused", t}), 1u) << dtype_name(t);
}

TEST_F(CudaVsCpu, Conv2dFusedFloat32WithoutTf32) {
  ConvSettingsScope fma(/*allow_tf32=*/false);
  compare_fused_all(DType::Float32, Tol{1e-4, 1e-4}, rng);
}

TEST_F(CudaVsCpu, Conv2dFusedHalfTypesRunOnCudnnsFusedRuntime) {
  if (selfcheck()) {
    // The CPU's bfloat16 conv2d_fused (oneDNN) against its own composed ops; it has no float16 one.
    if (!kernels_of("cpu", DeviceType::CPU).count({"conv2d_fused", DType::BFloat16}))
      GTEST_SKIP() << "the CPU plugin has no bfloat16 conv2d_fused";
    compare_fused_all(DType::BFloat16, Tol{3e-2, 2e-1}, rng);
    return;
  }
  compare_fused_all(DType::Float16, Tol{1e-2, 5e-2}, rng);
  compare_fused_all(DType::BFloat16, Tol{3e-2, 2e-1}, rng);
  // The problem cuDNN's runtime fusion is made for (16-bit, NHWC, channels a multiple of 8) ran
  // as a cuDNN graph, not composed; every decision is listed on failure.
  std::string listed;
  bool fused_nhwc = false;
  for (const AlgoChoice& c : fused_choices()) {
    listed += "\n  " + c.key + ": " + c.algorithm + " (" + c.implementation + ", " + c.source + ")";
    fused_nhwc |= c.key.find("in=2x8x9x11") != std::string::npos && c.key.find("x:nhwc") != std::string::npos &&
                  c.algorithm.rfind("eng", 0) == 0;
  }
  EXPECT_TRUE(fused_nhwc) << "no channels-last 16-bit conv2d_fused ran on cuDNN's fused runtime:" << listed;
}

TEST_F(CudaVsCpu, Conv2dFusedExhaustiveSearchTimesThePlansAndPersistsTheChoice) {
  if (selfcheck()) GTEST_SKIP() << "checks the cuDNN section of the cache file";
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("plugflow_cudnn_fused_" + std::to_string(::getpid()) + ".yaml");
  const Config saved = current_config();
  Config exhaustive = saved;
  exhaustive.optimizations.conv_algo_search = "exhaustive";
  exhaustive.optimizations.algo_cache = cache.string();
  init_from_config(exhaustive);
  compare_fused(kFusedProblems[0], Layout::ChannelsLast, DType::Float16, {{"relu", true, true}}, Tol{1e-2, 5e-2}, rng);
  init_from_config(saved);
  bool searched = false;
  for (const AlgoChoice& c : fused_choices())
    searched |= c.source == "search" && c.algorithm.rfind("eng", 0) == 0;
  EXPECT_TRUE(searched);
  std::ifstream in(cache);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("conv2d_fused float16"), std::string::npos) << text.str();
  std::filesystem::remove(cache);
}

}  // namespace
