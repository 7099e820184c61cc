// torchvision's operator arithmetic the CPU and CUDA kernels share (plugins/common/roi_math.h),
// on the CPU: roi_align, roi_pool, ps_roi_align and ps_roi_pool of one plane computed with it
// against torchvision 0.14's ops on a (2, 1, 6, 7) input of i^1.5 (its plane repeated over the
// channels for the position-sensitive ops; rois inside, across the border and malformed;
// adaptive and fixed sampling, aligned or not), ps_roi_pool's backward bins, the
// position-sensitive channel mapping, deform_conv2d's bilinear samples, their offset and mask
// gradients and a whole deformable convolution against torchvision's deform_conv2d, nms's
// overlap test against the IoU written out, the order of scores with ties and NaN, and the
// checks of rois.
#include "roi_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

using namespace plugflow;
using namespace plugflow::roi_math;

const std::vector<double> kRois = {0, 0.5, 1.2, 4.3, 3.9, 1, -1.0, 2.0, 8.5, 5.5, 0, 3.0, 3.0, 2.0, 2.5};
constexpr int64_t kH = 6, kW = 7, kRoiCount = 3;

std::vector<double> input() {
  std::vector<double> v(2 * kH * kW);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::pow(static_cast<double>(i), 1.5);
  return v;
}

// roi_align of every roi into (2, 3) bins, one channel, in the kernels' order.
std::vector<double> roi_align(double scale, int64_t sampling, bool aligned) {
  const std::vector<double> in = input();
  const RoiAlignParams p{1, kH, kW, 2, 3, sampling, scale, aligned};
  std::vector<double> out;
  for (int64_t n = 0; n < kRoiCount; ++n) {
    const double* roi = kRois.data() + 5 * n;
    const RoiAlignBox<double> box(roi, p);
    const double* plane = in.data() + static_cast<int64_t>(roi[0]) * kH * kW;
    for (int64_t ph = 0; ph < 2; ++ph)
      for (int64_t pw = 0; pw < 3; ++pw) {
        double val = 0;
        for (int64_t iy = 0; iy < box.grid_h; ++iy)
          for (int64_t ix = 0; ix < box.grid_w; ++ix) val += Taps<double>(box.y(ph, iy), box.x(pw, ix), kH, kW).value(plane);
        out.push_back(val / static_cast<double>(std::max<int64_t>(box.grid_h * box.grid_w, 1)));
      }
  }
  return out;
}

// Equal to 1e-12 relative (NaN where torchvision has NaN).
void expect_close(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << what << " " << i << ": " << got[i];
    else EXPECT_NEAR(got[i], want[i], 1e-12 * std::abs(want[i])) << what << " " << i;
  }
}

TEST(RoiMath, RoiAlignMatchesTorchvision) {
  // torchvision.ops.roi_align(input, rois, (2, 3), spatial_scale, sampling_ratio, aligned)
  expect_close(roi_align(1.0, 0, false),
               {55.460403707565234, 62.714794725398285, 70.288150298193514, 116.54598254802804, 125.88651982095605,
                135.47338766523518, 499.37811992760612, 535.66224519220782, 280.77913043121669, 648.63764222495786,
                688.17971127053681, 358.16154786092255, 132.61064279276241, 135.16831927403305, 137.7259957553037,
                160.20608228896631, 162.92945016850663, 165.65281804804695},
               "scale 1, adaptive");
  expect_close(roi_align(0.5, 2, true),
               {8.3680438141138982, 9.7541804726687591, 11.442493376964356, 23.2389593694183, 25.733123764268392,
                28.512259587940122, 339.96957942139551, 353.46489252736103, 370.37881704775259, 405.92440879039827,
                420.23499055106583, 438.14303101036018, 20.949623397535174, 20.297463321412664, 19.645303245290155,
                18.278562500086039, 17.691134878557641, 17.103707257029246},
               "scale 0.5, 2 samples, aligned");
  expect_close(roi_align(1.0, 2, false),
               {55.460403707565234, 62.714794725398285, 70.288150298193514, 116.54598254802804, 125.88651982095605,
                135.47338766523518, 498.82157037144339, 535.65400124543635, 281.61385044583989, 648.02982793837964,
                688.17214544443505, 359.06778229292081, 132.61064279276241, 135.16831927403308, 137.7259957553037,
                160.20608228896631, 162.92945016850663, 165.65281804804692},
               "scale 1, 2 samples");
}

TEST(RoiMath, TapsWeighInsideSamplesToOneAndScatterIsTheirAdjoint) {
  const std::vector<double> in = input();
  for (double y : {-0.5, 0.0, 2.3, 5.0, 5.9})
    for (double x : {-0.9, 1.5, 6.0, 6.7}) {
      const Taps<double> t(y, x, kH, kW);
      ASSERT_TRUE(t.inside);
      EXPECT_NEAR(t.w[0] + t.w[1] + t.w[2] + t.w[3], 1.0, 1e-15);
      std::vector<double> grad(kH * kW, 0.0);
      t.scatter(grad.data(), 3.0, 2.0, [](double* where, double v) { *where += v; });
      double dot = 0;
      for (int64_t i = 0; i < kH * kW; ++i) dot += grad[i] * in[i];
      EXPECT_NEAR(dot, 1.5 * t.value(in.data()), 1e-12 * dot);
    }
  EXPECT_FALSE(Taps<double>(-1.5, 2, kH, kW).inside);
  EXPECT_FALSE(Taps<double>(2, std::nan(""), kH, kW).inside);
}

TEST(RoiMath, RoiPoolMatchesTorchvision) {
  const std::vector<double> in = input();
  std::vector<double> out;
  for (int64_t n = 0; n < kRoiCount; ++n) {
    const double* roi = kRois.data() + 5 * n;
    const RoiPoolBox<double> box(roi, 1.0, 2, 3);
    for (int64_t ph = 0; ph < 2; ++ph)
      for (int64_t pw = 0; pw < 3; ++pw) {
        int64_t h0, h1, w0, w1;
        int32_t argmax;
        box.window(ph, pw, kH, kW, h0, h1, w0, w1);
        out.push_back(pool_max(in.data() + static_cast<int64_t>(roi[0]) * kH * kW, kW, h0, h1, w0, w1, argmax));
        EXPECT_EQ(argmax >= 0, h1 > h0 && w1 > w0);
      }
  }
  // torchvision.ops.roi_pool(input, rois, (2, 3), 1.0)
  expect_close(out,
               {64, 70.092795635500224, 76.367532368147138, 164.31676725154983, 172.60069524773067, 181.01933598375615,
                610.94025894517711, 662.55263941818237, 662.55263941818237, 702.16735896793148, 756.16598706897685,
                756.16598706897685, 117.57550765359255, 117.57550765359255, 117.57550765359255, 117.57550765359255,
                117.57550765359255, 117.57550765359255},
               "roi_pool");
}

// ---- ps_roi_align / ps_roi_pool ----------------------------------------------------------------------

TEST(RoiMath, PsBinInvertsTorchvisionsChannelMapping) {
  // torchvision: input channel (c_out * PH + ph) * PW + pw feeds output channel c_out's bin (ph, pw)
  for (int64_t PH : {1, 2, 3})
    for (int64_t PW : {1, 2, 4})
      for (int64_t c_out = 0; c_out < 3; ++c_out)
        for (int64_t ph = 0; ph < PH; ++ph)
          for (int64_t pw = 0; pw < PW; ++pw) {
            const PsBin bin = ps_bin((c_out * PH + ph) * PW + pw, PH, PW);
            EXPECT_EQ(bin.ph, ph);
            EXPECT_EQ(bin.pw, pw);
          }
}

// ps_roi_align of every roi into (2, 3) bins of one output channel, over 6 channels that each
// hold the plane of input(), in the kernels' order.
std::vector<double> ps_roi_align(double scale, int64_t sampling) {
  const std::vector<double> in = input();
  const RoiAlignParams p{6, kH, kW, 2, 3, sampling, scale, true};
  std::vector<double> out;
  for (int64_t n = 0; n < kRoiCount; ++n) {
    const double* roi = kRois.data() + 5 * n;
    const RoiAlignBox<double> box(roi, p);
    const double* plane = in.data() + static_cast<int64_t>(roi[0]) * kH * kW;
    for (int64_t c = 0; c < 6; ++c) {
      const PsBin bin = ps_bin(c, 2, 3);
      double val = 0;
      for (int64_t iy = 0; iy < box.grid_h; ++iy)
        for (int64_t ix = 0; ix < box.grid_w; ++ix)
          val += Taps<double>(box.y(bin.ph, iy), box.x(bin.pw, ix), kH, kW).value(plane);
      out.push_back(val / ps_align_count(box));
    }
  }
  return out;
}

TEST(RoiMath, PsRoiAlignMatchesTorchvision) {
  // torch.ops.torchvision.ps_roi_align(input.expand(2, 6, 6, 7), rois, spatial_scale, 2, 3,
  // sampling_ratio)[0]; the malformed third roi has an empty adaptive grid: 0 / 0
  expect_close(ps_roi_align(1.0, 0), {34.20110559693281, 40.404825935545304, 46.96370623923862,
                                      88.61201918855467, 97.15161797684465, 105.94947434706589,
                                      342.2404655656044, 487.4524604032521, 387.8345264557456,
                                      453.7474384428586, 639.1290866302537, 503.6599320116068, NAN, NAN, NAN,
                                      NAN, NAN, NAN}, "scale 1, adaptive");
  expect_close(ps_roi_align(0.5, 2), {8.3680438141139, 9.754180472668759, 11.442493376964356,
                                      23.238959369418303, 25.73312376426839, 28.51225958794012,
                                      339.9695794213955, 353.46489252736103, 370.3788170477526,
                                      405.9244087903983, 420.23499055106583, 438.1430310103602,
                                      20.949623397535174, 20.297463321412664, 19.645303245290158,
                                      18.27856250008604, 17.69113487855764, 17.103707257029246}, "scale 0.5, 2 samples");
}

// ps_roi_pool's bin means of every roi into (2, 3) bins as its forward clips them, or as its
// backward does (then the mean is the gradient's dot product with the plane).
std::vector<double> ps_roi_pool_means(bool backward) {
  const std::vector<double> in = input();
  std::vector<double> out;
  for (int64_t n = 0; n < kRoiCount; ++n) {
    const double* roi = kRois.data() + 5 * n;
    const PsPoolRoi<double> box(roi, 1.0, 2, 3, backward);
    const double* plane = in.data() + static_cast<int64_t>(roi[0]) * kH * kW;
    for (int64_t c = 0; c < 6; ++c) {
      const PsBin bin = ps_bin(c, 2, 3);
      out.push_back(ps_pool_mean(plane, kW, box.bin(bin.ph, bin.pw, backward ? kH : kH - 1, backward ? kW : kW - 1)));
    }
  }
  return out;
}

TEST(RoiMath, PsRoiPoolMatchesTorchvision) {
  // torch.ops.torchvision.ps_roi_pool(input.expand(2, 6, 6, 7), rois, 1.0, 2, 3)[0]
  expect_close(ps_roi_pool_means(false), {40.361083595540386, 45.5, 50.85778611859201, 80.64194845461336,
                                          87.15206251809627, 93.83415164454638, 471.2024636166391,
                                          500.6849950230482, 518.5837976571538, 598.2863038048504,
                                          630.18591373821, 649.519052838329, 117.57550765359255,
                                          117.57550765359255, 117.57550765359255, 117.57550765359255,
                                          117.57550765359255, 117.57550765359255}, "forward");
  // for each output element e: the input gradient of torchvision's backward for a gradient of
  // one at e, dotted with the input
  expect_close(ps_roi_pool_means(true), {40.361083595540386, 45.5, 50.85778611859201, 80.64194845461336,
                                         87.15206251809627, 93.83415164454638, 471.20246361663897,
                                         500.68499502304815, 524.6282825110968, 643.5959792975414,
                                         676.2492935059965, 702.6948151631891, 117.57550765359255,
                                         117.57550765359255, 117.57550765359255, 117.57550765359255,
                                         117.57550765359255, 117.57550765359255}, "backward");
}

// ---- deform_conv2d -----------------------------------------------------------------------------------

TEST(RoiMath, DeformSamplesAndTheirGradientsMatchTorchvision) {
  const std::vector<double> in = input();  // its first plane
  // torchvision.ops.deform_conv2d(plane, offset, ones(1, 1, 1, 1)) at output (0, 0) with offset
  // (dy, dx) there: the sample at (dy, dx), and its offset gradient; the -1 edges, the far edges
  // and beyond, between the last row or column and the border
  const double points[][2] = {{-1.0, 2.0}, {-0.5, -0.25}, {0.0, 0.0}, {2.3, 4.6}, {5.5, 3.0},
                              {5.0, 6.0},  {2.0, -1.0},   {4.9, 6.5}, {6.0, 1.0}, {3.0, 7.0}};
  const std::vector<double> value = {0.0, 0.0, 0.0, 95.03033395614999, 117.12386605641055, 262.5280937347468,
                                     0.0, 128.0502604018731, 0.0, 0.0};
  const std::vector<double> dy = {2.8284271247461903, 0.0, 18.520259177452136, 49.306243508424906,
                                  -234.2477321128211, -262.5280937347468, 0.0, 32.137864655003284, 0.0, 0.0};
  const std::vector<double> dx = {0.0, 0.0, 1.0, 6.78843549741168, 4.653594912358216, -262.5280937347468,
                                  52.38320341483518, -256.1005208037462, 0.0, 0.0};
  for (size_t i = 0; i < value.size(); ++i) {
    const DeformSample<double> s(points[i][0], points[i][1], kH, kW);
    const double v = s.value(in.data(), kW);
    EXPECT_NEAR(v, value[i], 1e-12 * (1 + std::abs(value[i]))) << i;
    double gy = 0, gx = 0, gm = 0;
    s.add_coordinate_grads(in.data(), kW, 0.5, 2.0, true, gy, gx, gm);  // mask 0.5, column gradient 2
    EXPECT_NEAR(gy, dy[i], 1e-12 * (1 + std::abs(dy[i]))) << i;
    EXPECT_NEAR(gx, dx[i], 1e-12 * (1 + std::abs(dx[i]))) << i;
    EXPECT_NEAR(gm, 2.0 * v, 1e-12 * (1 + std::abs(v))) << i;
    // the input gradient is the adjoint of the sample
    std::vector<double> grad(kH * kW, 0.0);
    s.scatter(grad.data(), kW, 0.5, 2.0, [](double* where, double g) { *where += g; });
    double dot = 0;
    for (int64_t k = 0; k < kH * kW; ++k) dot += grad[k] * in[k];
    EXPECT_NEAR(dot, v, 1e-12 * (1 + std::abs(v))) << i;
  }
  EXPECT_FALSE(DeformSample<double>(std::nan(""), 1.0, kH, kW).corners);
  EXPECT_FALSE(DeformSample<double>(-1.5, 1.0, kH, kW).sampled);
}

TEST(RoiMath, DeformConvolutionMatchesTorchvision) {
  // torchvision.ops.deform_conv2d(plane, offset, ones(1, 1, 2, 2), stride=2, padding=1,
  // dilation=(1, 2), mask=mask): offset[k] = 1.7 sin(k), mask[k] = 0.5 + 0.4 cos(k), 4 x 4 outputs
  const DeformGeometry g{1, kH, kW, 1, 2, 2, 4, 4, 2, 2, 1, 1, 1, 2, 1, 1, true};
  const int64_t P = g.P();
  std::vector<double> offset(static_cast<size_t>(2 * g.taps() * P)), mask(static_cast<size_t>(g.taps() * P));
  for (size_t k = 0; k < offset.size(); ++k) offset[k] = 1.7 * std::sin(static_cast<double>(k));
  for (size_t k = 0; k < mask.size(); ++k) mask[k] = 0.5 + 0.4 * std::cos(static_cast<double>(k));
  const std::vector<double> in = input();
  std::vector<double> out;
  for (int64_t p = 0; p < P; ++p) {
    double sum = 0;
    for (int64_t t = 0; t < g.taps(); ++t) {
      const int64_t r = g.mask_row(0, t);
      sum += mask[r * P + p] * deform_sample(g, offset.data(), r, p).value(in.data(), kW);
    }
    out.push_back(sum);
  }
  expect_close(out, {4.904076881217376, 37.14749497722952, 13.000504533604111, 0.30131355031544155,
                     18.01320411955601, 55.679991460703825, 157.72367644823453, 238.0502345066311,
                     226.11250385370795, 213.06133772884624, 131.2133478579256, 154.7109462223747,
                     82.71186140802583, 44.51073742265746, 14.94965773024295, 17.12822273893622}, "deform_conv2d");
}

TEST(RoiMath, NmsSuppressesAboveTheIntersectionOverUnion) {
  const double a[4] = {0, 0, 2, 2}, b[4] = {1, 1, 3, 3}, far[4] = {5, 5, 6, 6};
  // intersection 1, union 4 + 4 - 1 = 7
  EXPECT_TRUE(suppresses(a, box_area(a), b, box_area(b), 1.0 / 7 - 1e-9));
  EXPECT_FALSE(suppresses(a, box_area(a), b, box_area(b), 1.0 / 7 + 1e-9));
  EXPECT_FALSE(suppresses(a, box_area(a), far, box_area(far), 0.0));
  const float scores[6] = {0.5f, std::nanf(""), 0.9f, 0.5f, -1.0f, 0.9f};
  EXPECT_EQ(nms_order(scores, 6), (std::vector<int64_t>{1, 2, 5, 0, 3, 4}));
}

TEST(RoiMath, ChecksRaiseForBadRois) {
  const double bad_batch[5] = {2, 0, 0, 1, 1}, nan_coord[5] = {0, 0, NAN, 1, 1}, ok[5] = {1.5, 0, 0, 1, 1};
  EXPECT_THROW(check_rois(bad_batch, 1, 2, "roi_align"), IndexError);
  EXPECT_THROW(check_rois(nan_coord, 1, 2, "roi_align"), Error);
  EXPECT_NO_THROW(check_rois(ok, 1, 2, "roi_align"));
  const double huge[5] = {0, 0, 0, 1e300, 1e300};
  const RoiAlignParams adaptive{1, kH, kW, 1, 1, 0, 1.0, false};
  EXPECT_THROW(check_roi_align_grids(huge, 1, adaptive), Error);
  EXPECT_THROW(check_rounded_coordinates(huge, 1, 1.0, false, "roi_pool"), Error);
}

}  // namespace
