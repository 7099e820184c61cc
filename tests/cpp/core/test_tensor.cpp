// Core tensor machinery without any plugin: dtypes, promotion, views, iteration layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "plugflow/layout.h"
#include "plugflow/ops.h"
#include "test_core_support.h"

using namespace plugflow;

TEST(DType, PromotionFollowsPyTorch) {
  // Pairs from torch.promote_types (PyTorch 1.13).
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int8), DType::Int16);
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int32), DType::Int32);
  EXPECT_EQ(promote_types(DType::Bool, DType::UInt8), DType::UInt8);
  EXPECT_EQ(promote_types(DType::Int64, DType::Float16), DType::Float16);
  EXPECT_EQ(promote_types(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(promote_types(DType::BFloat16, DType::Float32), DType::Float32);
  EXPECT_EQ(promote_types(DType::Int32, DType::Int64), DType::Int64);
  EXPECT_EQ(promote_types(DType::Float64, DType::Float32), DType::Float64);
  for (int a = 0; a < kNumDTypes; ++a)
    for (int b = 0; b < kNumDTypes; ++b)
      EXPECT_EQ(promote_types(DType(a), DType(b)), promote_types(DType(b), DType(a)));
}

TEST(DType, NamesRoundTripAndAliases) {
  for (int a = 0; a < kNumDTypes; ++a) EXPECT_EQ(dtype_from_name(dtype_name(DType(a))), DType(a));
  EXPECT_EQ(dtype_from_name("long"), DType::Int64);
  EXPECT_EQ(dtype_from_name("half"), DType::Float16);
  EXPECT_THROW(dtype_from_name("float128"), TypeError);
}

TEST(DType, HalfRoundTripsEveryBitPattern) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float f = Half::to_float(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    EXPECT_EQ(Half::from_float(f), bits) << "bits " << bits;
  }
}

TEST(DType, HalfRoundsToNearestEven) {
  EXPECT_EQ(Half::from_float(65504.0f), 0x7bff);
  EXPECT_EQ(Half::from_float(65520.0f), 0x7c00);  // ties away from max overflow to inf
  EXPECT_EQ(Half::from_float(65519.0f), 0x7bff);
  EXPECT_EQ(Half::from_float(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(Half::from_float(std::ldexp(1.0f, -25)), 0x0000);          // tie to even (0)
  EXPECT_EQ(Half::from_float(std::ldexp(3.0f, -25)), 0x0002);          // 1.5 ulp -> 2
  EXPECT_EQ(Half::from_float(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(Half::from_float(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_EQ(Half::from_float(-2.0f), 0xc000);
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16::from_float(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16::to_float(BFloat16::from_float(1.0f + std::ldexp(1.0f, -8))), 1.0f);  // tie to even
  EXPECT_EQ(BFloat16::to_float(BFloat16::from_float(1.0f + std::ldexp(3.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(BFloat16::to_float(BFloat16::from_float(NAN))));
}

TEST(Device, Parse) {
  EXPECT_EQ(Device::parse("cpu"), (Device{DeviceType::CPU, 0}));
  EXPECT_EQ(Device::parse("cuda:1"), (Device{DeviceType::CUDA, 1}));
  EXPECT_EQ(Device::parse("cuda").index, -1);
  EXPECT_THROW(Device::parse("tpu"), ValueError);
  EXPECT_THROW(Device::parse("cuda:x"), ValueError);
  EXPECT_THROW(Device::parse("cuda:-1"), ValueError);
}

class Views : public ::testing::Test {
 protected:
  void SetUp() override { pf_test::install_test_cpu_device(); }
  Tensor iota(const Shape& s) {
    Tensor t = Tensor::empty(s, DType::Float32, Device{});
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
    return t;
  }
  static float at(const Tensor& t, const Shape& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    return t.data<float>()[off];
  }
};

TEST_F(Views, TransposePermuteShareStorage) {
  Tensor t = iota({2, 3, 4});
  Tensor p = ops::permute(t, {2, 0, 1});
  EXPECT_EQ(p.sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.storage(), t.storage());
  EXPECT_EQ(at(p, {3, 1, 2}), at(t, {1, 2, 3}));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_TRUE(p.is_non_overlapping_and_dense());
  Tensor tr = ops::transpose(t, 0, -1);
  EXPECT_EQ(tr.sizes(), (Shape{4, 3, 2}));
  EXPECT_THROW(ops::permute(t, {0, 0, 1}), Error);
  EXPECT_THROW(ops::transpose(t, 0, 3), IndexError);
}

TEST_F(Views, ViewNeedsCompatibleStrides) {
  Tensor t = iota({4, 6});
  EXPECT_EQ(ops::view(t, {2, -1, 3}).sizes(), (Shape{2, 4, 3}));
  Tensor tt = ops::transpose(t, 0, 1);                   // 6x4, strides (1, 6)
  EXPECT_THROW(ops::view(tt, {24}), Error);              // spans two subspaces
  EXPECT_EQ(ops::view(tt, {6, 2, 2}).strides(), (Shape{1, 12, 6}));  // splitting one dim is fine
  EXPECT_THROW(ops::view(t, {5, 5}), Error);
  EXPECT_THROW(ops::view(t, {-1, -1}), Error);
}

TEST_F(Views, SliceSelectNarrowExpand) {
  Tensor t = iota({5, 4});
  Tensor s = ops::slice(t, 0, 1, std::nullopt, 2);  // rows 1, 3
  EXPECT_EQ(s.sizes(), (Shape{2, 4}));
  EXPECT_EQ(at(s, {1, 2}), at(t, {3, 2}));
  Tensor neg = ops::slice(t, 1, -3, -1, 1);  // cols 1, 2
  EXPECT_EQ(neg.sizes(), (Shape{5, 2}));
  EXPECT_EQ(at(neg, {0, 0}), 1.0f);
  EXPECT_EQ(ops::slice(t, 0, 10, 20, 1).sizes(), (Shape{0, 4}));
  EXPECT_THROW(ops::slice(t, 0, 0, 2, 0), ValueError);
  EXPECT_EQ(at(ops::select(t, 1, -1), {2}), at(t, {2, 3}));
  try {
    ops::select(t, 0, 5);
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    EXPECT_STREQ(e.what(), "index 5 is out of bounds for dimension 0 with size 5");
  }
  EXPECT_EQ(ops::narrow(t, 1, 1, 2).sizes(), (Shape{5, 2}));
  EXPECT_THROW(ops::narrow(t, 1, 3, 2), Error);
  Tensor col = ops::slice(t, 1, 0, 1, 1);  // 5x1
  Tensor e = ops::expand(col, {2, 5, 3});
  EXPECT_EQ(e.strides(), (Shape{0, 4, 0}));
  EXPECT_THROW(ops::expand(t, {5, 5}), Error);
  EXPECT_EQ(ops::unsqueeze(t, -1).sizes(), (Shape{5, 4, 1}));
  EXPECT_EQ(ops::squeeze(ops::unsqueeze(t, 1)).sizes(), (Shape{5, 4}));
  EXPECT_EQ(ops::flatten(iota({2, 3, 4}), 1).sizes(), (Shape{2, 12}));
}

TEST_F(Views, BroadcastShapes) {
  EXPECT_EQ(ops::broadcast_shapes({3, 1}, {4}), (Shape{3, 4}));
  EXPECT_EQ(ops::broadcast_shapes({}, {2, 2}), (Shape{2, 2}));
  EXPECT_EQ(ops::broadcast_shapes({0, 1}, {1, 5}), (Shape{0, 5}));
  EXPECT_THROW(ops::broadcast_shapes({3}, {4}), Error);
}

TEST_F(Views, ResultTypeWrappedNumbers) {
  Tensor i32 = Tensor::empty({3}, DType::Int32, Device{});
  Tensor f16 = Tensor::empty({3}, DType::Float16, Device{});
  Tensor f64_0d = Tensor::empty({}, DType::Float64, Device{});
  Tensor i64_0d = Tensor::empty({}, DType::Int64, Device{});
  EXPECT_EQ(ops::result_type(i32, Scalar(2)), DType::Int32);        // int scalar keeps int32
  EXPECT_EQ(ops::result_type(i32, Scalar(2.5)), DType::Float32);    // float scalar -> default float
  EXPECT_EQ(ops::result_type(f16, Scalar(2.5)), DType::Float16);
  EXPECT_EQ(ops::result_type(f16, f64_0d), DType::Float16);         // 0-d tensor of same kind loses
  EXPECT_EQ(ops::result_type(i32, f64_0d), DType::Float64);         // ...but a higher kind wins
  EXPECT_EQ(ops::result_type(i32, i64_0d), DType::Int32);
  Tensor b = Tensor::empty({3}, DType::Bool, Device{});
  EXPECT_EQ(ops::result_type(b, Scalar(1)), DType::Int64);
  EXPECT_EQ(ops::result_type(b, Scalar(true)), DType::Bool);
}

TEST_F(Views, LayoutCoalescesAndFollowsOutputOrder) {
  Tensor a = iota({4, 5, 6});
  StridedLayout L = make_layout({&a, &a});
  EXPECT_EQ(L.ndim, 1);
  EXPECT_EQ(L.sizes[0], 120);
  // Transposed output: iteration follows the output's memory order.
  Tensor out = ops::transpose(iota({6, 4}), 0, 1);  // 4x6, strides (1, 4)
  Tensor in = iota({4, 6});
  L = make_layout({&out, &in});
  EXPECT_EQ(L.ndim, 2);
  EXPECT_EQ(L.byte_strides[0][1], 4) << "innermost walks the output's stride-1 dim (its dim 0)";
  EXPECT_EQ(L.byte_strides[1][1], 6 * 4) << "the input follows in the same order";
  // Broadcast input keeps stride 0.
  Tensor row = ops::expand(iota({1, 6}), {4, 6});
  Tensor o2 = iota({4, 6});
  L = make_layout({&o2, &row});
  EXPECT_EQ(L.ndim, 2);
  EXPECT_EQ(L.byte_strides[1][0], 0);
  int64_t runs = 0, elems = 0;
  for_each_run(L, 0, num_runs(L), [&](char** p, int64_t n) {
    ++runs;
    elems += n;
  });
  EXPECT_EQ(runs, 4);
  EXPECT_EQ(elems, 24);
}

TEST_F(Views, AsStridedChecksBounds) {
  Tensor t = iota({10});
  EXPECT_EQ(ops::as_strided(t, {3, 3}, {3, 1}, 1).sizes(), (Shape{3, 3}));
  EXPECT_THROW(ops::as_strided(t, {4, 4}, {4, 1}, 0), Error);
  EXPECT_THROW(ops::as_strided(t, {2}, {-1}, 0), ValueError);
}
