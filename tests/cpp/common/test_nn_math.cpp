// The nn index and coefficient formulas the CPU and CUDA kernels share
// (plugins/common/nn_math.h), on the CPU: sample positions, cubic weights and windows against
// values PyTorch 1.13 computes (F.interpolate, F.avg_pool2d, F.adaptive_avg_pool2d on a row of
// 5 or 7 values), the dropout threshold against its definition, and the norm helpers.
#include "nn_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

namespace nm = plugflow::nn_math;

TEST(NnMath, NearestIndexMatchesPyTorch) {
  // F.interpolate(arange(5), size=7) and scale_factor=1.7 (8 outputs), mode='nearest'.
  const std::vector<int64_t> by_size = {0, 0, 1, 2, 2, 3, 4}, by_scale = {0, 0, 1, 1, 2, 2, 3, 4};
  for (int64_t o = 0; o < 7; ++o) EXPECT_EQ(nm::nearest_index(o, 5, 7, 0.0), by_size[o]) << o;
  for (int64_t o = 0; o < 8; ++o) EXPECT_EQ(nm::nearest_index(o, 5, 8, 1.7), by_scale[o]) << o;
}

// out[o] of a linear interpolation of in[i] = i.
double interpolate_arange(int64_t o, int64_t in, int64_t out, bool align_corners) {
  const auto t = nm::linear_tap<float>(o, in, out, align_corners, 0.0);
  EXPECT_GE(t.i0, 0);
  EXPECT_LT(t.i1, in);
  EXPECT_FLOAT_EQ(t.w0 + t.w1, 1.0f);
  return t.w0 * static_cast<float>(t.i0) + t.w1 * static_cast<float>(t.i1);
}

TEST(NnMath, LinearTapsMatchPyTorch) {
  // F.interpolate(arange(5), size=8, mode='bilinear') with align_corners False and True.
  const std::vector<double> no_ac = {0.0, 0.4375, 1.0625, 1.6875, 2.3125, 2.9375, 3.5625, 4.0};
  for (int64_t o = 0; o < 8; ++o) EXPECT_NEAR(interpolate_arange(o, 5, 8, false), no_ac[o], 1e-6) << o;
  for (int64_t o = 0; o < 8; ++o) EXPECT_NEAR(interpolate_arange(o, 5, 8, true), o * 4.0 / 7.0, 1e-6) << o;
  const auto single = nm::linear_tap<double>(0, 5, 1, true, 0.0);  // one output: the first input
  EXPECT_EQ(single.i0, 0);
  EXPECT_EQ(single.w0, 1.0);
}

// out[o] of a cubic interpolation of in[i] = i^2 (5 values).
double cubic_of_squares(int64_t o, int64_t out, bool align_corners, double scale) {
  const auto t = nm::cubic_tap<double>(o, 5, out, align_corners, scale);
  double weights = 0;
  for (int j = 0; j < 4; ++j) {
    EXPECT_GE(t.i[j], 0);
    EXPECT_LT(t.i[j], 5);
    weights += t.w[j];
  }
  EXPECT_NEAR(weights, 1.0, 1e-12);
  const double v[4] = {static_cast<double>(t.i[0] * t.i[0]), static_cast<double>(t.i[1] * t.i[1]),
                       static_cast<double>(t.i[2] * t.i[2]), static_cast<double>(t.i[3] * t.i[3])};
  return nm::cubic_sum(t, v);
}

TEST(NnMath, CubicTapsMatchPyTorch) {
  // F.interpolate(tensor([0., 1, 4, 9, 16]).view(1, 1, 1, 5), mode='bicubic', float64): size 8
  // with align_corners False and True, and scale_factor 1.3 (6 outputs, taps placed by 1/1.3).
  const std::vector<double> no_ac = {-0.09283447265625, 0.18756103515625, 1.176513671875, 2.619384765625,
                                     5.441650390625,    8.471435546875,   13.39508056640625, 16.64984130859375};
  const std::vector<double> ac = {0.0, 0.26530612244897966, 1.3760932944606452, 2.7055393586005816,
                                  5.341107871720127, 7.883381924198245, 12.463556851311946, 16.0};
  const std::vector<double> by_scale = {-0.06772018661811563, 0.33828800637232725, 1.9594333181611252,
                                        4.967512517068738, 8.666875284478829, 14.472931838871187};
  for (int64_t o = 0; o < 8; ++o) EXPECT_NEAR(cubic_of_squares(o, 8, false, 0.0), no_ac[o], 1e-12) << o;
  for (int64_t o = 0; o < 8; ++o) EXPECT_NEAR(cubic_of_squares(o, 8, true, 0.0), ac[o], 1e-12) << o;
  for (int64_t o = 0; o < 6; ++o) EXPECT_NEAR(cubic_of_squares(o, 6, false, 1.3), by_scale[o], 1e-12) << o;
}

TEST(NnMath, BicubicUpsamplingOfAPlaneMatchesPyTorch) {
  // F.interpolate(in, size=(5, 6), mode='bicubic', align_corners=False / True) of the 3 x 4 plane
  // in[h][w] = sqrt(5h + w + 1), float64: the kernels' separable sums
  const std::vector<double> want[2] = {{0.8230766796749415, 1.0474037669750305, 1.3764234753473938,
                                        1.5628127729092711, 1.7964130351806589, 1.928062614486123,
                                        1.4710480979728089, 1.6413896206724732, 1.896517202999531,
                                        2.048525736861583, 2.243205295168057, 2.354835806031639,
                                        2.432453148314306, 2.5304946693912345, 2.686026571931278,
                                        2.7907236027365463, 2.931339419905745, 3.0148934787546713,
                                        3.0714569483703538, 3.1460478668992944, 3.2670533926363956,
                                        3.3519761223325477, 3.468278427585115, 3.5383012756434464,
                                        3.387474486744692, 3.4583766293501705, 3.572487311373715,
                                        3.651382396412454, 3.7593957151939557, 3.824375706144809}, {1.0, 1.219172277691189,
                                                                                                    1.5034866388970218, 1.660329455437986,
                                                                                                    1.870341516713296, 2.0,
                                                                                                    1.6434509606816932, 1.8056102553381284,
                                                                                                    2.0223752803553703, 2.148677403432523,
                                                                                                    2.321386081679175, 2.430469619989943,
                                                                                                    2.449489742783178, 2.5498728346937884,
                                                                                                    2.6926256158214747, 2.784515463152618,
                                                                                                    2.9147263882222796, 3.0,
                                                                                                    3.0189469299552116, 3.095491616469371,
                                                                                                    3.207738578928823, 3.283214865977353,
                                                                                                    3.3920927807988477, 3.4645786933869704,
                                                                                                    3.3166247903554, 3.3916040438069657,
                                                                                                    3.4998879838628367, 3.5711293923555942,
                                                                                                    3.6736370099674818, 3.7416573867739413}};
  for (bool ac : {false, true})
    for (int64_t oh = 0; oh < 5; ++oh)
      for (int64_t ow = 0; ow < 6; ++ow) {
        const auto th = nm::cubic_tap<double>(oh, 3, 5, ac, 0.0), tw = nm::cubic_tap<double>(ow, 4, 6, ac, 0.0);
        double rows[4];
        for (int j = 0; j < 4; ++j) {
          double row[4];
          for (int i = 0; i < 4; ++i) row[i] = std::sqrt(static_cast<double>(5 * th.i[j] + tw.i[i] + 1));
          rows[j] = nm::cubic_sum(tw, row);
        }
        const double v = nm::cubic_sum(th, rows);
        EXPECT_NEAR(v, want[ac][oh * 6 + ow], 1e-12) << oh << " " << ow << (ac ? " align_corners" : "");
      }
}

TEST(NnMath, CubicTapsAreNonDecreasingInTheOutput) {
  // The CUDA backward finds the outputs whose taps read an input as one range per dim.
  for (int64_t in : {1, 2, 3, 5, 8})
    for (int64_t out : {1, 2, 4, 7, 13})
      for (bool ac : {false, true})
        for (double scale : {0.0, 0.4, 1.7})
          for (int64_t o = 1; o < out; ++o) {
            const auto prev = nm::cubic_tap<double>(o - 1, in, out, ac, scale);
            const auto t = nm::cubic_tap<double>(o, in, out, ac, scale);
            for (int j = 0; j < 4; ++j) {
              EXPECT_LE(prev.i[j], t.i[j]) << in << " -> " << out << " o " << o << " tap " << j;
              if (j > 0) EXPECT_LE(t.i[j - 1], t.i[j]);
            }
          }
}

TEST(NnMath, PoolingWindowsMatchPyTorch) {
  const double row[7] = {1, 5, 2, 0, -1, 3, 7};
  // F.adaptive_avg_pool2d(row, (1, 3)).
  const double adaptive[3] = {8.0 / 3, 1.0 / 3, 3.0};
  for (int64_t o = 0; o < 3; ++o) {
    double sum = 0;
    const int64_t lo = nm::adaptive_start(o, 3, 7), hi = nm::adaptive_end(o, 3, 7);
    for (int64_t i = lo; i < hi; ++i) sum += row[i];
    EXPECT_NEAR(sum / static_cast<double>(hi - lo), adaptive[o], 1e-12) << o;
  }
  // F.avg_pool2d(row, (1, 3), stride (1, 2), padding (0, 1), ceil_mode=True), with and without
  // count_include_pad: 4 outputs, the last window half outside.
  const double with_pad[4] = {2.0, 7.0 / 3, 2.0 / 3, 10.0 / 3}, without_pad[4] = {3.0, 7.0 / 3, 2.0 / 3, 5.0};
  for (bool include : {true, false}) {
    const nm::AvgPoolGeometry geo{{1, 1, 3}, {1, 1, 2}, {0, 0, 1}, 0, include};
    for (int64_t o = 0; o < 4; ++o) {
      const nm::AvgWindow w = geo.window(0, 0, o, 1, 1, 7);
      ASSERT_FALSE(w.empty());
      double sum = 0;
      for (int64_t i = w.lo[2]; i < w.hi[2]; ++i) sum += row[i];
      EXPECT_NEAR(sum / static_cast<double>(w.divisor), (include ? with_pad : without_pad)[o], 1e-12) << o;
    }
  }
  const nm::AvgPoolGeometry override_geo{{1, 2, 2}, {1, 2, 2}, {0, 1, 1}, 3, false};
  EXPECT_EQ(override_geo.window(0, 0, 0, 1, 4, 4).divisor, 3);
  // Max pooling's fallback index: the first tap at or after 0.
  EXPECT_EQ(nm::max_pool_first_tap(2, 3), 2);
  EXPECT_EQ(nm::max_pool_first_tap(-2, 1), 0);
  EXPECT_EQ(nm::max_pool_first_tap(-2, 3), 1);
  EXPECT_EQ(nm::max_pool_first_tap(-3, 3), 0);
}

TEST(NnMath, DropoutThresholdIsTheCeiling) {
  for (double p : {0.0, 1.0, 0.5, 0.1, 0.2, 0.3, 1.0 / 3, 0.9999999, 1e-9}) {
    const uint32_t t = nm::dropout_threshold(p);
    EXPECT_EQ(t, static_cast<uint32_t>(std::ceil((1.0 - p) * 16777216.0))) << p;
  }
  EXPECT_TRUE(nm::dropout_keeps(0xffffffffu, nm::dropout_threshold(0.0)));  // p = 0 keeps the largest draw
  EXPECT_FALSE(nm::dropout_keeps(0u, nm::dropout_threshold(1.0)));          // p = 1 keeps nothing
  EXPECT_TRUE(nm::dropout_keeps(0x7fffffffu, nm::dropout_threshold(0.5)));  // k = 2^23 - 1 < 2^23
  EXPECT_FALSE(nm::dropout_keeps(0x80000000u, nm::dropout_threshold(0.5)));
}

TEST(NnMath, NormHelpers) {
  EXPECT_EQ(nm::assumed_mean(2.5), 2.5);
  EXPECT_EQ(nm::assumed_mean(std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_EQ(nm::assumed_mean(std::nan("")), 0.0);
  // Shifted sums of {1e8 + 1, 1e8 + 2, 1e8 + 3} with the first element as shift.
  double mean, var;
  nm::moments(0 + 1 + 2, 0 + 1 + 4, 1e8 + 1, 3, mean, var);
  EXPECT_DOUBLE_EQ(mean, 1e8 + 2);
  EXPECT_DOUBLE_EQ(var, 2.0 / 3);
  const nm::SplitMean<float> split(1e8 + 2.25);
  EXPECT_EQ(split.centre(1e8f), -2.25f);  // exact, where 1e8f - float(mean) gives 0
  EXPECT_NEAR(static_cast<double>(split.hi) + split.lo, 1e8 + 2.25, 1e-6);
  const auto eval = nm::batch_norm_grad_coefs(false, 2.0, 0.5, 3.0, 4.0, 10);
  EXPECT_EQ(eval.a, 1.0);
  EXPECT_EQ(eval.b, 0.0);
  EXPECT_EQ(eval.c, 0.0);
  const auto train = nm::batch_norm_grad_coefs(true, 2.0, 0.5, 3.0, 4.0, 10);
  EXPECT_DOUBLE_EQ(train.b, -1.0 * 0.25 * 4.0 / 10);
  EXPECT_DOUBLE_EQ(train.c, -1.0 * 3.0 / 10);
  EXPECT_DOUBLE_EQ(nm::running_mean_update(1.0, 3.0, 0.1), 1.2);
  EXPECT_DOUBLE_EQ(nm::running_var_update(1.0, 2.0, 5, 0.1), 0.1 * 2.5 + 0.9);
}

}  // namespace
