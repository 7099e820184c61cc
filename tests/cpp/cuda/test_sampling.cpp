// CUDA conformance of grid sampling and torchvision's operators (plugins/cuda/src/grid_sample.cu,
// vision.cu) against the CPU plugin on the same random inputs, op by op through the dispatcher:
// grid_sampler_2d (bilinear, nearest, bicubic) and grid_sampler_3d (bilinear, nearest) under
// every padding mode and align_corners, on strided inputs and grids with points outside the
// image, forward and backward (with and without the input gradient); roi_align (adaptive and
// fixed sampling, aligned or not, malformed rois), roi_pool, ps_roi_align and ps_roi_pool with
// their backwards; deform_conv2d and its backward (groups, offset groups, stride, padding,
// dilation, with and without mask and bias, offsets reaching outside the image and NaN); nms
// over more boxes than one 64-bit mask block holds, with tied scores; and the errors a bad roi
// or argmax raises.
//
// The roi forwards are meant to equal the CPU's bit for bit (same arithmetic, no FMA
// contraction); the input gradients are summed with atomics on the GPU, and deform_conv2d's
// GEMMs are cuBLAS's, so those are compared within rounding. Without a GPU every comparison skips; PF_CUDA_CONFORMANCE_SELFCHECK=1 runs them
// with the CPU as the device under test.
#include "conformance_harness.h"
#include "opdefs.h"
#include "plugflow/dispatch.h"

namespace {

using namespace plugflow;
using namespace cuda_conformance;

using Tensors = std::vector<Tensor>;

// Grid sampling's and torchvision's ops, from their definitions (core/opdefs/grid_sample.yaml,
// vision.yaml).
const std::vector<std::string> kOps = {
#define PF_X(name, ...) name,
    PF_OPDEFS_GRID_SAMPLE(PF_X) PF_OPDEFS_VISION(PF_X)
#undef PF_X
};

Tensors run(const std::string& op, const Tensors& in, const Attrs& attrs) { return call_op(find_op(op), in, attrs); }

// The backwards' tolerance: atomics add in another order than the CPU's loop.
Tol sum_tolerance(DType dt) { return dt == DType::Float64 ? Tol{1e-10, 1e-10} : Tol{1e-5, 1e-5}; }

// deform_conv2d's: cuBLAS and the CPU's BLAS sum up to a few hundred products of N(0, 2) values
// (the weight gradient: one per image and position) in different orders.
Tol deform_tolerance(DType dt) { return dt == DType::Float64 ? Tol{1e-9, 1e-9} : Tol{1e-4, 5e-4}; }

void compare(const std::string& op, const Tensors& cpu_in, const Tensors& dev_in, const Attrs& attrs,
             const std::string& where, Tol tol) {
  const Tensors c = run(op, cpu_in, attrs), d = run(op, dev_in, attrs);
  ASSERT_EQ(c.size(), d.size()) << where;
  for (size_t i = 0; i < c.size(); ++i) EXPECT_TRUE(matches(c[i], d[i], tol)) << where << ": output " << i;
}

Tensor to_dev(const Tensor& t) { return ops::to(t, target(), std::nullopt, /*copy=*/true); }

Pair pair_of(const Shape& s, DType dt, const std::vector<double>& v) {
  const Tensor c = cpu_tensor(s, dt, v);
  return {c, to_dev(c)};
}

std::vector<double> uniform(int64_t n, double lo, double hi, std::mt19937& rng) {
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::uniform_real_distribution<double>(lo, hi)(rng);
  return v;
}

TEST_F(CudaPlugin, SamplingOpsHaveDtypesOnBothDevices) {
  for (const std::string& op : kOps) EXPECT_FALSE(common_dtypes(op).empty()) << op;
}

// ---- grid sampling ------------------------------------------------------------------------------

void compare_grid_sampler(int S, const std::vector<std::string>& modes, std::mt19937& rng) {
  const std::string op = S == 2 ? "grid_sampler_2d" : "grid_sampler_3d";
  const Shape in_shape = S == 2 ? Shape{2, 3, 5, 7} : Shape{2, 3, 4, 5, 6};
  const Shape grid_shape = S == 2 ? Shape{2, 4, 6, 2} : Shape{2, 3, 4, 5, 3};
  for (DType dt : common_dtypes(op)) {
    for (const std::string& mode : modes)
      for (const char* padding : {"zeros", "border", "reflection"})
        for (bool align : {false, true}) {
          const std::string where = ctx(op, dt, mode + " " + padding + (align ? " align_corners" : ""));
          // a gapped input; a transposed grid (the coordinate dim strided) reaching 30% outside
          Pair input = make_pair(in_shape, dt, View::Gapped, Values::Any, rng);
          Shape reversed(grid_shape.rbegin(), grid_shape.rend());
          Pair base = pair_of(reversed, dt, uniform(shape_numel(grid_shape), -1.3, 1.3, rng));
          Shape perm;
          for (int64_t d = S + 1; d >= 0; --d) perm.push_back(d);
          Pair grid{ops::permute(base.cpu, perm), ops::permute(base.dev, perm)};
          const Attrs attrs{{"mode", mode}, {"padding_mode", std::string(padding)}, {"align_corners", align}};
          compare(op, {input.cpu, grid.cpu}, {input.dev, grid.dev}, attrs, where, tolerance(dt));

          const Tensor out = run(op, {input.cpu, grid.cpu}, attrs)[0];
          Pair g = make_pair(out.sizes(), dt, View::Transposed, Values::Any, rng);
          for (bool input_grad : {true, false}) {
            Attrs battrs = attrs;
            battrs.set("input_grad", input_grad);
            compare(op + "_backward", {g.cpu, input.cpu, grid.cpu}, {g.dev, input.dev, grid.dev}, battrs,
                    where + (input_grad ? " backward" : " backward (grid only)"), sum_tolerance(dt));
          }
        }
  }
}

TEST_F(CudaVsCpu, GridSampler2dEveryModeAndPadding) {
  compare_grid_sampler(2, {"bilinear", "nearest", "bicubic"}, rng);
}

TEST_F(CudaVsCpu, GridSampler3dEveryModeAndPadding) { compare_grid_sampler(3, {"bilinear", "nearest"}, rng); }

// ---- rois ---------------------------------------------------------------------------------------------

// K rois (batch index, x1, y1, x2, y2) over a batch of 2 images of width x height (in input
// pixels / scale), one of them malformed (x2 < x1).
std::vector<double> random_rois(int64_t K, double width, double height, std::mt19937& rng) {
  std::vector<double> v;
  for (int64_t k = 0; k < K; ++k) {
    const double x1 = std::uniform_real_distribution<double>(-2, width)(rng);
    const double y1 = std::uniform_real_distribution<double>(-2, height)(rng);
    const double w = std::uniform_real_distribution<double>(k == 0 ? -3 : 0.5, width / 2)(rng);
    const double h = std::uniform_real_distribution<double>(0.5, height / 2)(rng);
    v.insert(v.end(), {static_cast<double>(rng() % 2), x1, y1, x1 + w, y1 + h});
  }
  return v;
}

TEST_F(CudaVsCpu, RoiAlignForwardAndBackward) {
  for (DType dt : common_dtypes("roi_align")) {
    const Shape in_shape{2, 3, 10, 12};
    Pair input = make_pair(in_shape, dt, View::Contiguous, Values::Any, rng);
    for (double scale : {1.0, 0.5})
      for (int64_t sampling : {0, 2})
        for (bool aligned : {false, true}) {
          const std::string where = ctx("roi_align", dt,
                                        "scale " + std::to_string(scale) + " sampling " + std::to_string(sampling) +
                                            (aligned ? " aligned" : ""));
          Pair rois = pair_of({7, 5}, dt, random_rois(7, 12 / scale, 10 / scale, rng));
          const Attrs attrs{{"spatial_scale", scale},
                            {"pooled_height", int64_t{3}},
                            {"pooled_width", int64_t{4}},
                            {"sampling_ratio", sampling},
                            {"aligned", aligned}};
          compare("roi_align", {input.cpu, rois.cpu}, {input.dev, rois.dev}, attrs, where, tolerance(dt));
          Pair g = make_pair({7, 3, 3, 4}, dt, View::Contiguous, Values::Any, rng);
          Attrs battrs = attrs;
          battrs.set("input_size", in_shape);
          compare("roi_align_backward", {g.cpu, rois.cpu}, {g.dev, rois.dev}, battrs, where + " backward",
                  sum_tolerance(dt));
        }
  }
}

TEST_F(CudaVsCpu, RoiPoolForwardAndBackward) {
  for (DType dt : common_dtypes("roi_pool")) {
    const Shape in_shape{2, 3, 9, 11};
    for (double scale : {1.0, 0.5}) {
      const std::string where = ctx("roi_pool", dt, "scale " + std::to_string(scale));
      Pair input = make_pair(in_shape, dt, View::Contiguous, Values::Small, rng);  // ties in the max
      Pair rois = pair_of({6, 5}, dt, random_rois(6, 11 / scale, 9 / scale, rng));
      const Attrs attrs{{"spatial_scale", scale}, {"pooled_height", int64_t{2}}, {"pooled_width", int64_t{3}}};
      compare("roi_pool", {input.cpu, rois.cpu}, {input.dev, rois.dev}, attrs, where, tolerance(dt));
      const Tensor argmax = run("roi_pool", {input.cpu, rois.cpu}, attrs)[1];
      Pair g = make_pair({6, 3, 2, 3}, dt, View::Contiguous, Values::Any, rng);
      const Attrs battrs{{"pooled_height", int64_t{2}}, {"pooled_width", int64_t{3}}, {"input_size", in_shape}};
      compare("roi_pool_backward", {g.cpu, rois.cpu, argmax}, {g.dev, rois.dev, to_dev(argmax)}, battrs,
              where + " backward", sum_tolerance(dt));
    }
  }
}

TEST_F(CudaVsCpu, PsRoiAlignAndPsRoiPoolForwardAndBackward) {
  const int64_t PH = 2, PW = 3, K = 7;
  const Shape in_shape{2, 12, 10, 12};  // 2 output channels of 2 x 3 bins
  for (DType dt : common_dtypes("ps_roi_align")) {
    Pair input = make_pair(in_shape, dt, View::Contiguous, Values::Any, rng);
    for (double scale : {1.0, 0.5}) {
      const std::string where = ctx("ps_roi", dt, "scale " + std::to_string(scale));
      Pair rois = pair_of({K, 5}, dt, random_rois(K, 12 / scale, 10 / scale, rng));
      Pair g = make_pair({K, 2, PH, PW}, dt, View::Contiguous, Values::Any, rng);
      for (int64_t sampling : {0, 2}) {
        const Attrs attrs{{"spatial_scale", scale},
                          {"pooled_height", PH},
                          {"pooled_width", PW},
                          {"sampling_ratio", sampling}};
        const std::string align_where = where + " ps_roi_align sampling " + std::to_string(sampling);
        compare("ps_roi_align", {input.cpu, rois.cpu}, {input.dev, rois.dev}, attrs, align_where, tolerance(dt));
        Attrs battrs = attrs;
        battrs.set("input_size", in_shape);
        compare("ps_roi_align_backward", {g.cpu, rois.cpu}, {g.dev, rois.dev}, battrs, align_where + " backward",
                sum_tolerance(dt));
      }
      const Attrs pool{{"spatial_scale", scale}, {"pooled_height", PH}, {"pooled_width", PW}};
      compare("ps_roi_pool", {input.cpu, rois.cpu}, {input.dev, rois.dev}, pool, where + " ps_roi_pool", tolerance(dt));
      Attrs pool_back = pool;
      pool_back.set("input_size", in_shape);
      compare("ps_roi_pool_backward", {g.cpu, rois.cpu}, {g.dev, rois.dev}, pool_back, where + " ps_roi_pool backward",
              sum_tolerance(dt));
    }
  }
}

// ---- deform_conv2d --------------------------------------------------------------------------------

struct DeformCase {
  int64_t N, C, H, W, O, kh, kw, stride, pad, dilation, groups, offset_groups;
  bool mask, bias;
};

TEST_F(CudaVsCpu, DeformConv2dForwardAndBackward) {
  const DeformCase cases[] = {
      {2, 3, 7, 9, 4, 3, 3, 1, 1, 1, 1, 1, false, true},
      {1, 4, 8, 6, 6, 3, 2, 2, 0, 1, 2, 2, true, false},
      {2, 6, 9, 9, 4, 2, 3, 1, 2, 2, 2, 3, true, true},
  };
  for (DType dt : common_dtypes("deform_conv2d")) {
    for (const DeformCase& c : cases) {
      const int64_t OH = (c.H + 2 * c.pad - c.dilation * (c.kh - 1) - 1) / c.stride + 1;
      const int64_t OW = (c.W + 2 * c.pad - c.dilation * (c.kw - 1) - 1) / c.stride + 1;
      const int64_t taps = c.kh * c.kw;
      const std::string where = ctx("deform_conv2d", dt,
                                    shape_str({c.N, c.C, c.H, c.W}) + " groups " + std::to_string(c.groups) +
                                        " offset groups " + std::to_string(c.offset_groups) +
                                        (c.mask ? " mask" : "") + (c.bias ? " bias" : ""));
      Pair input = make_pair({c.N, c.C, c.H, c.W}, dt, View::Contiguous, Values::Any, rng);
      Pair weight = make_pair({c.O, c.C / c.groups, c.kh, c.kw}, dt, View::Contiguous, Values::Any, rng);
      // offsets of up to 3 pixels: samples across the border and outside the image; one NaN
      std::vector<double> off = uniform(c.N * 2 * c.offset_groups * taps * OH * OW, -3, 3, rng);
      off[off.size() / 2] = std::nan("");
      Pair offset = pair_of({c.N, 2 * c.offset_groups * taps, OH, OW}, dt, off);
      Pair mask = pair_of({c.N, c.offset_groups * taps, OH, OW}, dt,
                          uniform(c.N * c.offset_groups * taps * OH * OW, 0, 1, rng));
      Pair bias = make_pair({c.O}, dt, View::Contiguous, Values::Any, rng);
      const Attrs attrs{{"stride", Shape{c.stride, c.stride}},
                        {"padding", Shape{c.pad, c.pad}},
                        {"dilation", Shape{c.dilation, c.dilation}},
                        {"groups", c.groups},
                        {"offset_groups", c.offset_groups},
                        {"has_mask", c.mask}};
      Tensors cpu_in{input.cpu, weight.cpu, offset.cpu}, dev_in{input.dev, weight.dev, offset.dev};
      if (c.mask) cpu_in.push_back(mask.cpu), dev_in.push_back(mask.dev);
      Tensors cpu_fwd = cpu_in, dev_fwd = dev_in;
      if (c.bias) cpu_fwd.push_back(bias.cpu), dev_fwd.push_back(bias.dev);
      Attrs fattrs = attrs;
      fattrs.set("has_bias", c.bias);
      compare("deform_conv2d", cpu_fwd, dev_fwd, fattrs, where, deform_tolerance(dt));
      Pair g = make_pair({c.N, c.O, OH, OW}, dt, View::Contiguous, Values::Any, rng);
      cpu_in.insert(cpu_in.begin(), g.cpu);
      dev_in.insert(dev_in.begin(), g.dev);
      compare("deform_conv2d_backward", cpu_in, dev_in, attrs, where + " backward", deform_tolerance(dt));
    }
  }
}

TEST_F(CudaVsCpu, BadRoisAndArgmaxRaiseAsOnTheCpu) {
  const DType dt = DType::Float32;
  Pair input = make_pair({1, 2, 6, 6}, dt, View::Contiguous, Values::Any, rng);
  Pair bad_batch = pair_of({1, 5}, dt, {1, 0, 0, 3, 3});
  Pair bad_coord = pair_of({1, 5}, dt, {0, 0, std::nan(""), 3, 3});
  const Attrs align{{"spatial_scale", 1.0},
                    {"pooled_height", int64_t{2}},
                    {"pooled_width", int64_t{2}},
                    {"sampling_ratio", int64_t{0}},
                    {"aligned", false}};
  EXPECT_THROW(run("roi_align", {input.dev, bad_batch.dev}, align), IndexError);
  EXPECT_THROW(run("roi_align", {input.dev, bad_coord.dev}, align), Error);
  const Attrs pool{{"spatial_scale", 1.0}, {"pooled_height", int64_t{2}}, {"pooled_width", int64_t{2}}};
  EXPECT_THROW(run("roi_pool", {input.dev, bad_batch.dev}, pool), IndexError);
  Pair ps_input = make_pair({1, 4, 6, 6}, dt, View::Contiguous, Values::Any, rng);  // one channel per bin
  Attrs ps_align = pool;
  ps_align.set("sampling_ratio", int64_t{0});
  EXPECT_THROW(run("ps_roi_align", {ps_input.dev, bad_batch.dev}, ps_align), IndexError);
  EXPECT_THROW(run("ps_roi_align", {ps_input.dev, bad_coord.dev}, ps_align), Error);
  EXPECT_THROW(run("ps_roi_pool", {ps_input.dev, bad_batch.dev}, pool), IndexError);
  Pair huge = pair_of({1, 5}, dt, {0, 0, 0, 1e30, 1e30});
  EXPECT_THROW(run("ps_roi_pool", {ps_input.dev, huge.dev}, pool), Error);
  Pair ps_grad = make_pair({1, 1, 2, 2}, dt, View::Contiguous, Values::Any, rng);
  Attrs ps_pool_back = pool;
  ps_pool_back.set("input_size", Shape{1, 4, 6, 6});
  EXPECT_THROW(run("ps_roi_pool_backward", {ps_grad.dev, bad_batch.dev}, ps_pool_back), IndexError);
  ps_align.set("input_size", Shape{1, 4, 6, 6});
  EXPECT_THROW(run("ps_roi_align_backward", {ps_grad.dev, bad_coord.dev}, ps_align), Error);
  Pair rois = pair_of({1, 5}, dt, {0, 0, 0, 3, 3});
  Pair g = make_pair({1, 2, 2, 2}, dt, View::Contiguous, Values::Any, rng);
  Tensor argmax = ops::to(cpu_tensor({1, 2, 2, 2}, DType::Int32, {0, 1, 2, 36, 4, 5, 6, 7}), target(), std::nullopt);
  const Attrs pool_back{{"pooled_height", int64_t{2}}, {"pooled_width", int64_t{2}}, {"input_size", Shape{1, 2, 6, 6}}};
  try {
    run("roi_pool_backward", {g.dev, rois.dev, argmax}, pool_back);
    ADD_FAILURE() << "an argmax outside the plane must raise";
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("argmax 36"), std::string::npos) << e.what();
  }
}

// ---- nms ----------------------------------------------------------------------------------------------

TEST_F(CudaVsCpu, NmsKeepsTheCpusBoxes) {
  for (DType dt : common_dtypes("nms")) {
    for (int64_t n : {1, 7, 150}) {
      std::vector<double> boxes;
      for (int64_t i = 0; i < n; ++i) {
        const double x = std::uniform_real_distribution<double>(0, 40)(rng);
        const double y = std::uniform_real_distribution<double>(0, 40)(rng);
        boxes.insert(boxes.end(), {x, y, x + std::uniform_real_distribution<double>(1, 15)(rng),
                                   y + std::uniform_real_distribution<double>(1, 15)(rng)});
      }
      Pair b = pair_of({n, 4}, dt, boxes);
      Pair s = make_pair({n}, dt, View::Contiguous, Values::Small, rng);  // tied scores
      for (double threshold : {0.2, 0.5, 0.8})
        compare("nms", {b.cpu, s.cpu}, {b.dev, s.dev}, Attrs{{"iou_threshold", threshold}},
                ctx("nms", dt, std::to_string(n) + " boxes, threshold " + std::to_string(threshold)), Tol{0, 0});
    }
  }
}

}  // namespace
