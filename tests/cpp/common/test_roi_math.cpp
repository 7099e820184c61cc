// torchvision's operator arithmetic the CPU and CUDA kernels share (plugins/common/roi_math.h),
// on the CPU: roi_align and roi_pool of one channel computed with it against torchvision 0.14's
// roi_align / roi_pool on a (2, 1, 6, 7) input of i^1.5 (rois inside, across the border and
// malformed; adaptive and fixed sampling, aligned or not), nms's overlap test against the IoU
// written out, the order of scores with ties and NaN, and the checks of rois.
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

void expect_close(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * std::abs(want[i])) << what << " " << i;
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
