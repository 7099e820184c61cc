// The decisions of conv2d_fused on cuDNN's fused runtime that need no GPU
// (plugins/cuda/src/conv_fusion.h): which calls try a fused graph, which engines a call may run
// (PyTorch's TF32 rule), and the names engine configurations get in the algorithm cache.
#include <gtest/gtest.h>

#include "conv_fusion.h"

namespace {

using namespace plugflow;
using namespace plugflow::cuda::conv_fusion;

TEST(ConvFusion, TriesTheGraphForReluSiluAndNoneInTheSixteenBitTypesAndFloat32) {
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float32}) {
    for (const char* act : {"relu", "silu"}) {
      for (bool bias : {false, true})
        for (bool addend : {false, true})
          EXPECT_FALSE(refusal({t, act, bias, addend})) << dtype_name(t) << " " << act << " " << bias << addend;
    }
    EXPECT_FALSE(refusal({t, "none", true, false}));
    EXPECT_FALSE(refusal({t, "none", false, true}));
    EXPECT_FALSE(refusal({t, "none", true, true}));
  }
}

TEST(ConvFusion, RunsComposedWhatCudnnCannotOrShouldNotFuse) {
  // float64: no runtime-fused engines; composed is bit-identical to the unfused graph.
  const auto f64 = refusal({DType::Float64, "relu", true, false});
  ASSERT_TRUE(f64);
  EXPECT_NE(f64->find("float64"), std::string::npos) << *f64;
  // gelu (erf) and gelu_tanh: cuDNN's GELU modes are not checked against PyTorch's yet.
  for (const char* act : {"gelu", "gelu_tanh"}) {
    const auto r = refusal({DType::BFloat16, act, true, true});
    ASSERT_TRUE(r) << act;
    EXPECT_NE(r->find(act), std::string::npos) << *r;
  }
  // A conv2d_fused with nothing to fuse is the plain convolution.
  const auto plain = refusal({DType::Float16, "none", false, false});
  ASSERT_TRUE(plain);
  EXPECT_EQ(*plain, "nothing to fuse");
}

TEST(ConvFusion, EnginesFollowPytorchsTf32RuleAndAccumulateInFloat) {
  const EngineNotes plain{}, tensor_core{true, false, false}, down_convert{false, true, false},
      reduced{false, false, true};
  // float32 without TF32: no tensor cores, no down-converted inputs.
  EXPECT_TRUE(engine_permitted(DType::Float32, false, plain));
  EXPECT_FALSE(engine_permitted(DType::Float32, false, tensor_core));
  EXPECT_FALSE(engine_permitted(DType::Float32, false, down_convert));
  // float32 with TF32 allowed (PyTorch's default): both.
  EXPECT_TRUE(engine_permitted(DType::Float32, true, tensor_core));
  EXPECT_TRUE(engine_permitted(DType::Float32, true, down_convert));
  // 16-bit data runs on tensor cores whatever the TF32 flag says.
  for (DType t : {DType::Float16, DType::BFloat16})
    for (bool tf32 : {false, true}) EXPECT_TRUE(engine_permitted(t, tf32, tensor_core)) << dtype_name(t) << tf32;
  // Reduced-precision accumulation never.
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float32})
    for (bool tf32 : {false, true}) EXPECT_FALSE(engine_permitted(t, tf32, reduced)) << dtype_name(t) << tf32;
}

TEST(ConvFusion, NamesEngineConfigurationsByEngineAndKnobs) {
  EXPECT_EQ(engine_config_name(12, {}), "eng12");
  EXPECT_EQ(engine_config_name(3, {{2, 1}, {11, 3}}), "eng3:k2=1,k11=3");
  EXPECT_EQ(engine_config_name(3, {{2, -1}}), "eng3:k2=-1");
  EXPECT_NE(engine_config_name(3, {{2, 1}}), engine_config_name(3, {{2, 2}}));
}

}  // namespace
