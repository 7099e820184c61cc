// The grid sampling arithmetic the CPU and CUDA kernels share (plugins/common/grid_sample_math.h),
// on the CPU: the forward and the grid gradient of every mode, padding and align_corners against
// the values PyTorch 1.13's F.grid_sample (and its backward) gives for four points (some outside
// the image) of a 3 x 4 image and a 2 x 3 x 4 volume of i^1.5; the backward's input gradient as
// the forward's adjoint; the integer conversion's NaN and overflow results.
#include "grid_sample_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace {

using namespace plugflow::grid_sample_math;

struct Expected {
  Mode mode;
  Padding padding;
  bool align;
  std::vector<double> values;
};

// F.grid_sample(arange(12.).pow(1.5).view(1, 1, 3, 4), grid of kPoints2d, ...).
const double kPoints2d[4][2] = {{-0.9, 0.3}, {0.25, -1.2}, {1.3, 0.7}, {0.05, 0.55}};
// F.grid_sample(arange(24.).pow(1.5).view(1, 1, 2, 3, 4), grid of kPoints3d, ...).
const double kPoints3d[4][3] = {{-0.9, 0.3, 0.2}, {0.25, -1.2, 0.9}, {1.3, 0.7, -0.4}, {0.05, 0.55, -1.5}};
const std::vector<Expected> k2d = {
    {Mode::Bilinear, Padding::Zeros, false, {10.207636354360401, 0.56568542494923824, 0, 26.889076747911808}},
    {Mode::Bilinear, Padding::Zeros, true, {12.918927022669617, 2.0798989873223332, 17.10174875143473, 22.253025929437559}},
    {Mode::Bilinear, Padding::Border, false, {14.582337649086288, 2.8284271247461903, 36.4828726939094, 26.889076747911808}},
    {Mode::Bilinear, Padding::Border, true, {12.918927022669617, 2.5998737341529163, 31.094088638972217, 22.253025929437559}},
    {Mode::Bilinear, Padding::Reflection, false, {14.582337649086288, 2.8284271247461903, 35.996863084686844, 26.889076747911808}},
    {Mode::Bilinear, Padding::Reflection, true, {12.918927022669617, 4.9313717144321432, 29.047010072619489, 22.253025929437559}},
    {Mode::Nearest, Padding::Zeros, false, {8, 0, 0, 31.622776601683793}},
    {Mode::Nearest, Padding::Zeros, true, {8, 2.8284271247461903, 36.4828726939094, 31.622776601683793}},
    {Mode::Nearest, Padding::Border, false, {8, 2.8284271247461903, 36.4828726939094, 31.622776601683793}},
    {Mode::Nearest, Padding::Border, true, {8, 2.8284271247461903, 36.4828726939094, 31.622776601683793}},
    {Mode::Nearest, Padding::Reflection, false, {8, 2.8284271247461903, 36.4828726939094, 31.622776601683793}},
    {Mode::Nearest, Padding::Reflection, true, {8, 2.8284271247461903, 36.4828726939094, 31.622776601683793}},
    {Mode::Bicubic, Padding::Zeros, false, {11.926466683433146, 0.21295890198847353, -2.1661361392113947, 29.981564144749147}},
    {Mode::Bicubic, Padding::Zeros, true, {15.617716116736483, 0.92704580637431933, 20.619598960523419, 26.177234825788219}},
    {Mode::Bicubic, Padding::Border, false, {14.875069638954136, 2.5435828527793327, 37.090794895106967, 27.335632022114382}},
    {Mode::Bicubic, Padding::Border, true, {13.38476856300456, 1.3631167204979735, 32.574543020691038, 23.162521684496205}},
    {Mode::Bicubic, Padding::Reflection, false, {14.68927926718675, 1.4042057649118498, 36.752703984126875, 27.335632022114382}},
    {Mode::Bicubic, Padding::Reflection, true, {13.772700893223979, 3.0045213306517553, 32.83395978412571, 24.841908376882945}},
};
const std::vector<Expected> k3d = {
    {Mode::Bilinear, Padding::Zeros, false, {40.032410467856266, 6.285984409780224, 0, 0}},
    {Mode::Bilinear, Padding::Zeros, true, {48.714473375443035, 39.391681045429536, 28.810895024084559, 16.68976944707817}},
    {Mode::Bilinear, Padding::Border, false, {57.189157811223239, 52.38320341483518, 43.864997928137711, 26.889076747911808}},
    {Mode::Bilinear, Padding::Border, true, {48.714473375443035, 49.239601306786923, 52.383445498335533, 22.253025929437559}},
    {Mode::Bilinear, Padding::Reflection, false, {57.189157811223239, 52.38320341483518, 43.356439496636639, 26.889076747911808}},
    {Mode::Bilinear, Padding::Reflection, true, {48.714473375443035, 53.895060834332611, 50.01683737449676, 38.763177511361533}},
    {Mode::Nearest, Padding::Zeros, false, {64, 0, 0, 0}},
    {Mode::Nearest, Padding::Zeros, true, {64, 52.38320341483518, 36.4828726939094, 31.622776601683793}},
    {Mode::Nearest, Padding::Border, false, {64, 52.38320341483518, 36.4828726939094, 31.622776601683793}},
    {Mode::Nearest, Padding::Border, true, {64, 52.38320341483518, 36.4828726939094, 31.622776601683793}},
    {Mode::Nearest, Padding::Reflection, false, {64, 52.38320341483518, 36.4828726939094, 31.622776601683793}},
    {Mode::Nearest, Padding::Reflection, true, {64, 52.38320341483518, 36.4828726939094, 31.622776601683793}},
};

// The grid gradients of k2d's calls with grad_output 1 (point by point, x then y).
const std::vector<std::vector<double>> k2dGridGrad = {
    {29.164675298172575, 15.358787847867998, 0.94709011918417696, 4.2426406871192857, 0, 0, 8.8583908919982992, 24.725050397986884},
    {5.3070192327876118, 14.806253465149252, 2.1941125496954283, 2.5998737341529163, -46.641132958458329, 9.8794374340515017, 6.1874947305992096, 16.455712481179162},
    {0, 21.941125496954285, 4.7354505959208835, 0, -0, -0, 8.8583908919982992, 24.725050397986884},
    {5.3070192327876118, 14.806253465149252, 2.7426406871192857, 0, -0, 17.962613516457267, 6.1874947305992096, 16.455712481179162},
    {0, 21.941125496954285, 4.7354505959208835, 0, -9.7201921844512142, -0, 8.8583908919982992, 24.725050397986884},
    {5.3070192327876118, 14.806253465149252, 3.2490921204554644, -11.657489901396138, -6.8235952211757667, 17.496064599294623, 6.1874947305992096, 16.455712481179162},
    {0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0},
    {37.084400328098717, 21.529336754221191, 0.99460863237368557, 0.4616332106829375, -33.69545105439974, 1.7389339453197579, 7.729125794058171, 7.5655886794151961},
    {11.86468079598388, 23.634387221976702, 2.8174060817193292, 5.2392962117752244, -61.87535185758972, 7.7904244504324582, 5.5040381161772105, 20.253925144490438},
    {0.41286749281647606, 22.699971064001893, 6.1810530268390789, -3.7385810695651527, -5.8037697422871705e-14, 16.317911716356633, 7.0779929334665068, 20.62343551839205},
    {4.2500556525819082, 16.156775652082491, 3.4747899071794244, 2.7863973198296765, -1.0047661139334225, 15.908415116560651, 4.9565963123823522, 15.990694439632991},
    {2.3592428160938557, 22.627535678519841, 5.7283505979555729, -8.0112451490681771, -7.4788882807635702, 18.108627945687221, 7.0779929334665068, 20.62343551839205},
    {2.312260714631539, 19.674317849024618, 3.9069198269985743, -5.1903991610727642, -7.5390093856553051, 14.712477370451278, 5.0847201755334108, 18.365584711695078},
};
// The grid gradients of k3d's calls with grad_output 1 (point by point, x, y, z).
const std::vector<std::vector<double>> k3dGridGrad = {
    {114.37831562244648, 23.308034892854216, 42.606820162136948, 1.3707712267862586, 47.144883073351664, -10.476640682967039, 0, 0, 0, 0, 0, 26.889076747911812},
    {7.7949389768820634, 21.251004583326939, 29.829621960644509, 6.392287618020557, 49.239601306786923, 19.637780030582739, -78.575168247503299, 11.450638646807814, 19.515243787749721, 4.6406210479494092, 12.341784360884372, 11.126512964718779},
    {0, 33.297192704077453, 60.866885945909928, 11.423093556552146, 0, -0, -0, -0, 73.821252342283145, 8.8583908919983045, 24.725050397986884, 0},
    {7.7949389768820634, 21.251004583326939, 29.829621960644509, 7.9903595225256936, 0, 24.547225038228426, -0, 20.81934299419601, 35.482261432272196, 6.1874947305992096, 16.455712481179162, 0},
    {0, 33.297192704077453, 60.866885945909928, 11.423093556552146, -0, -0, -10.171168630021505, -0, 73.595764119498, 8.8583908919983045, 24.725050397986884, -0},
    {7.7949389768820634, 21.251004583326939, 29.829621960644509, 8.2333365653629329, -23.277297637728488, 25.770362694684462, -7.8886937461292845, 20.403195599453717, 34.94971216979544, 7.1339634030049019, 18.974903906503133, -33.020303163847956},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};

std::vector<double> image(int n) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = std::pow(static_cast<double>(i), 1.5);
  return v;
}

Sampler2d<double> sampler2d(const Expected& e) { return Sampler2d<double>(3, 4, 4, 1, e.mode, e.padding, e.align); }
Sampler3d<double> sampler3d(const Expected& e) {
  return make_sampler_3d<double>(2, 3, 4, 12, 4, 1, e.mode, e.padding, e.align);
}
double forward2d(const Sampler2d<double>& sm, const std::vector<double>& img, double x, double y) {
  double out = 0;
  forward_2d_point(sm, x, y, img.data(), 12, 1, &out, 1);
  return out;
}
double forward3d(const Sampler3d<double>& sm, const std::vector<double>& vol, const double (&g)[3]) {
  double out = 0;
  forward_3d_point(sm, g, vol.data(), 24, 1, &out, 1);
  return out;
}
void add(double* where, double v) { *where += v; }

TEST(GridSampleMath, Forward2dMatchesPyTorch) {
  const std::vector<double> img = image(12);
  for (const Expected& e : k2d)
    for (int k = 0; k < 4; ++k)
      EXPECT_NEAR(forward2d(sampler2d(e), img, kPoints2d[k][0], kPoints2d[k][1]), e.values[k],
                  1e-12 * (1 + std::abs(e.values[k])))
          << "mode " << static_cast<int>(e.mode) << " padding " << static_cast<int>(e.padding) << " align "
          << e.align << " point " << k;
}

TEST(GridSampleMath, Forward3dMatchesPyTorch) {
  const std::vector<double> vol = image(24);
  for (const Expected& e : k3d)
    for (int k = 0; k < 4; ++k)
      EXPECT_NEAR(forward3d(sampler3d(e), vol, kPoints3d[k]), e.values[k], 1e-12 * (1 + std::abs(e.values[k])))
          << "mode " << static_cast<int>(e.mode) << " padding " << static_cast<int>(e.padding) << " align "
          << e.align << " point " << k;
}

// The forward is linear in the image: with grad_output 1, <grad_input, image> is the output.
TEST(GridSampleMath, Backward2dMatchesPyTorchAndIsTheForwardsAdjoint) {
  const std::vector<double> img = image(12);
  for (size_t e = 0; e < k2d.size(); ++e) {
    const Sampler2d<double> sm = sampler2d(k2d[e]);
    for (int k = 0; k < 4; ++k) {
      const double x = kPoints2d[k][0], y = kPoints2d[k][1], one = 1.0;
      std::vector<double> gi(12, 0.0);
      double gg[2];
      backward_2d_point(sm, x, y, &one, 1, img.data(), 12, 1, gi.data(), gg, add);
      double dot = 0;
      for (int i = 0; i < 12; ++i) dot += gi[i] * img[i];
      const double out = forward2d(sm, img, x, y);
      EXPECT_NEAR(dot, out, 1e-12 * (1 + std::abs(out))) << "case " << e << " point " << k;
      for (int d = 0; d < 2; ++d) {
        const double want = k2dGridGrad[e][2 * k + d];
        EXPECT_NEAR(gg[d], want, 1e-12 * (1 + std::abs(want))) << "case " << e << " point " << k << " dim " << d;
      }
    }
  }
}

TEST(GridSampleMath, Backward3dMatchesPyTorchAndIsTheForwardsAdjoint) {
  const std::vector<double> vol = image(24);
  for (size_t e = 0; e < k3d.size(); ++e) {
    const Sampler3d<double> sm = sampler3d(k3d[e]);
    for (int k = 0; k < 4; ++k) {
      const double one = 1.0;
      std::vector<double> gi(24, 0.0);
      double gg[3];
      backward_3d_point(sm, kPoints3d[k], &one, 1, vol.data(), 24, 1, gi.data(), gg, add);
      double dot = 0;
      for (int i = 0; i < 24; ++i) dot += gi[i] * vol[i];
      const double out = forward3d(sm, vol, kPoints3d[k]);
      EXPECT_NEAR(dot, out, 1e-12 * (1 + std::abs(out))) << "case " << e << " point " << k;
      for (int d = 0; d < 3; ++d) {
        const double want = k3dGridGrad[e][3 * k + d];
        EXPECT_NEAR(gg[d], want, 1e-12 * (1 + std::abs(want))) << "case " << e << " point " << k << " dim " << d;
      }
    }
  }
}

TEST(GridSampleMath, IndexConversionGivesTheMinimumForNanAndOverflow) {
  EXPECT_EQ(to_index<int32_t>(std::nan("")), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(to_index<int32_t>(3e9), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(to_index<int32_t>(-2.7), -2);
  EXPECT_EQ(to_index<int64_t>(1e300), std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(std::isnan(nan_min(1.0, std::nan(""))));
  EXPECT_FALSE(std::signbit(nan_min(0.0, -0.0)));  // std::min's choice: the first of equals
}

}  // namespace
