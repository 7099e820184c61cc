// conv2d_fused's cuDNN operation graph against the cuDNN library itself, on any machine where
// cuDNN loads (no GPU needed: backend descriptors are host objects). Every descriptor the fused
// convolution builds (tensors, virtual tensors, the convolution, the pointwise ops, the graph)
// must finalize, so an attribute with a wrong name, type or element count fails here rather
// than on the first GPU run. The plugin's host code is compiled into this test
// (plugins/cuda/src/cudnn_fused_conv.h); tensors live on the CPU, whose memory cuDNN never
// reads here. Planning and running a plan need a GPU: tests/cpp/cuda/test_conv.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../../plugins/cuda/src/cudnn.h"
#include "../../../plugins/cuda/src/cudnn_fused_conv.h"
#include "plugflow/dispatch.h"
#include "plugflow/op.h"
#include "plugflow/runtime.h"
#include "plugflow/tensor.h"
#include "plugin_path.h"

#ifndef PF_CPU_PLUGIN_PATH
#error "PF_CPU_PLUGIN_PATH must name the built libplugflow_cpu.so (tests/cpp/cuda/meson.build)"
#endif

namespace {

using namespace plugflow;

class CudnnGraph : public ::testing::Test {
 protected:
  void SetUp() override {
    static const bool done = [] {
      Config config;
      config.source = "<cudnn graph tests>";
      config.plugins = {{cuda_test::plugin_path(PF_CPU_PLUGIN_PATH), false}};  // CPU tensors for the operands
      config.kernel_prefer = {"cpu"};
      init_from_config(config);
      return true;
    }();
    (void)done;
    try {
      cuda::cudnn();
    } catch (const DeviceError& e) {
      GTEST_SKIP() << "cuDNN does not load here: " << e.what();
    }
  }
};

struct Case {
  DType dtype;
  bool channels_last;
  int64_t groups;
  const char* activation;
  bool bias, addend;
};

// Checks the graph of act(conv2d(x, w) + bias + addend) for an (N=2, C=8, 9x11) image and 16
// output channels, 3x3, padding 1 (a strided, dilated variant when `strided`).
std::optional<std::string> check(const Case& c, bool strided = false) {
  const Device cpu{DeviceType::CPU, 0};
  const MemoryFormat fmt = c.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  const Shape stride = strided ? Shape{2, 1} : Shape{1, 1}, dilation = strided ? Shape{1, 2} : Shape{1, 1};
  const int64_t oh = strided ? 5 : 9, ow = strided ? 9 : 11;
  std::vector<Tensor> in{Tensor::empty({2, 8, 9, 11}, c.dtype, cpu, fmt),
                         Tensor::empty({16, 8 / c.groups, 3, 3}, c.dtype, cpu, fmt)};
  if (c.bias) in.push_back(Tensor::empty({16}, c.dtype, cpu));
  if (c.addend) in.push_back(Tensor::empty({2, 16, oh, ow}, c.dtype, cpu, fmt));
  std::vector<Tensor> out{Tensor::empty({2, 16, oh, ow}, c.dtype, cpu, fmt)};
  const Attrs attrs{{"stride", stride},     {"padding", Shape{1, 1}}, {"dilation", dilation},
                    {"groups", c.groups},   {"has_bias", c.bias},     {"has_addend", c.addend},
                    {"activation", std::string(c.activation)}};
  const KernelContext ctx{find_op("conv2d_fused"), in, out, attrs, cpu, nullptr};
  return cuda::check_conv2d_fused_graph(ctx);
}

std::string name(const Case& c) {
  return std::string(dtype_name(c.dtype)) + (c.channels_last ? " nhwc" : " nchw") + " g=" + std::to_string(c.groups) +
         " act=" + c.activation + (c.bias ? " bias" : "") + (c.addend ? " addend" : "");
}

TEST_F(CudnnGraph, EveryFusedEpilogueFinalizesInEveryDtypeLayoutAndGrouping) {
  const std::vector<std::tuple<const char*, bool, bool>> epilogues = {
      {"relu", true, false}, {"relu", false, true}, {"relu", true, true}, {"relu", false, false},
      {"silu", true, false}, {"silu", false, true}, {"silu", true, true}, {"silu", false, false},
      {"none", true, false}, {"none", false, true}, {"none", true, true}};
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float32})
    for (bool channels_last : {true, false})
      for (int64_t groups : {1, 4})
        for (const auto& [act, bias, addend] : epilogues) {
          const Case c{t, channels_last, groups, act, bias, addend};
          const auto refused = check(c);
          EXPECT_FALSE(refused) << name(c) << ": " << *refused;
        }
}

TEST_F(CudnnGraph, StridedAndDilatedConvolutionsFinalize) {
  const Case c{DType::Float16, true, 1, "relu", true, true};
  const auto refused = check(c, /*strided=*/true);
  EXPECT_FALSE(refused) << name(c) << " strided: " << *refused;
}

}  // namespace
