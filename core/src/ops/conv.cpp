// The conv family (plugflow/ops_conv.h): catalog entries with PyTorch's argument checks and
// output sizes, the functional API, and backward formulas written with the family's own ops.
//
// Kernels (docs/kernels.md, "Conv family") see 4-d (N, C, H, W) float inputs with any strides
// and write contiguous outputs. The functional layer handles unbatched inputs, string padding,
// conv_transpose2d (= the input gradient of conv2d, plus a broadcast bias add), empty inputs
// (never sent to a kernel) and autograd:
//   * conv2d, conv2d_grad_input and conv2d_grad_weight are one bilinear map seen from its three
//     sides, so each one's backward is written with the other two (double backward works);
//   * pooling-by-average and upsampling are linear: each forward op and its `_backward` op
//     are adjoints, and each records the other as its backward;
//   * max pooling returns int64 indices into the input plane; its backward scatters through
//     them with the shape family's scatter-add (whose backward is the matching gather).
#include <algorithm>
#include <cmath>

#include "../autograd/grad_utils.h"
#include "plugflow/autocast.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/op.h"
#include "plugflow/ops.h"

namespace plugflow {
namespace {

using Tensors = std::vector<Tensor>;

// ---- shared checks and sizes ------------------------------------------------------------------

const Shape& pair_attr(const Attrs& attrs, const char* name) {
  const Shape& v = attrs.get<Shape>(name);
  PF_CHECK_T(v.size() == 2, ValueError, "attribute '", name, "' must hold two values (height, width), got ",
             shape_str(v));
  return v;
}

void check_4d(const Tensor& t, const char* op, const char* what) {
  PF_CHECK_T(t.dim() == 4, ValueError, op, ": expected a 4-d ", what,
             " (the functional layer batches 3-d inputs), got ",
             shape_str(t.sizes()));
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* what_a, const char* what_b) {
  PF_CHECK(a.dtype() == b.dtype(), what_a, " type (", dtype_name(a.dtype()), ") and ", what_b, " type (",
           dtype_name(b.dtype()), ") should be the same");
}

// An output's meta, refusing shapes whose element count overflows int64 (a huge size from a
// user's argument must not wrap around to a small allocation).
TensorMeta out_meta(const Shape& sizes, DType dtype, Device device) {
  int64_t n = 1;
  for (int64_t s : sizes)
    PF_CHECK(s >= 0 && !__builtin_mul_overflow(n, s, &n), "Storage size calculation overflowed with sizes=",
             shape_str(sizes));
  return {sizes, dtype, device};
}

// The spatial output size of a convolution or pooling window sweep.
int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// PyTorch's pooling_output_shape: with ceil_mode, a last window must start inside the input
// or its left padding.
int64_t pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // floor division (span may be negative when the window does not fit)
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// ---- convolution ------------------------------------------------------------------------------

struct ConvAttrs {
  Shape stride, padding, dilation;
  int64_t groups;
};

ConvAttrs conv_attrs(const Attrs& attrs) {
  ConvAttrs c{pair_attr(attrs, "stride"), pair_attr(attrs, "padding"), pair_attr(attrs, "dilation"),
              attrs.get<int64_t>("groups")};
  PF_CHECK(c.groups > 0, "non-positive groups is not supported");
  for (int i = 0; i < 2; ++i) {
    PF_CHECK(c.padding[i] >= 0, "negative padding is not supported");
    PF_CHECK(c.stride[i] > 0, "non-positive stride is not supported");
    PF_CHECK(c.dilation[i] > 0, "non-positive dilation is not supported");
  }
  return c;
}

void check_weight(const Tensor& w, int64_t groups) {
  PF_CHECK(w.dim() == 4, "Expected 4-dimensional weight for conv2d, but got weight of size ", shape_str(w.sizes()));
  PF_CHECK(w.sizes()[2] > 0 && w.sizes()[3] > 0, "Expected a non-empty kernel, but got weight of size ",
           shape_str(w.sizes()));
  PF_CHECK(w.sizes()[0] >= groups, "Given groups=", groups, ", expected weight to be at least ", groups,
           " at dimension 0, but got weight of size ", shape_str(w.sizes()), " instead");
  PF_CHECK(w.sizes()[0] % groups == 0, "Given groups=", groups, ", expected weight to be divisible by ", groups,
           " at dimension 0, but got weight of size ", shape_str(w.sizes()), " instead");
}

std::vector<TensorMeta> conv2d_meta(std::span<const Tensor> in, const Attrs& attrs) {
  PF_CHECK_T(in.size() == 2 || in.size() == 3, ValueError, "conv2d takes (input, weight) or (input, weight, bias)");
  const Tensor &x = in[0], &w = in[1];
  const ConvAttrs c = conv_attrs(attrs);
  check_4d(x, "conv2d", "input");
  check_weight(w, c.groups);
  check_same_dtype(x, w, "Input", "weight");
  PF_CHECK(x.sizes()[1] == w.sizes()[1] * c.groups, "Given groups=", c.groups, ", weight of size ",
           shape_str(w.sizes()),
           ", expected input", shape_str(x.sizes()), " to have ", w.sizes()[1] * c.groups, " channels, but got ",
           x.sizes()[1], " channels instead");
  if (in.size() == 3) {
    const Tensor& b = in[2];
    PF_CHECK(b.dim() == 1 && b.sizes()[0] == w.sizes()[0], "Given weight of size ", shape_str(w.sizes()),
             ", expected bias to be 1-dimensional with ", w.sizes()[0], " elements, but got bias of size ",
             shape_str(b.sizes()), " instead");
    check_same_dtype(x, b, "Input", "bias");
  }
  Shape out{x.sizes()[0], w.sizes()[0], 0, 0};
  bool fits = true;
  for (int i = 0; i < 2; ++i) {
    const int64_t padded = x.sizes()[2 + i] + 2 * c.padding[i];
    const int64_t extent = c.dilation[i] * (w.sizes()[2 + i] - 1) + 1;
    fits = fits && padded >= extent;
    out[2 + i] = conv_out_size(x.sizes()[2 + i], w.sizes()[2 + i], c.stride[i], c.padding[i], c.dilation[i]);
  }
  PF_CHECK(fits, "Calculated padded input size per channel: (", x.sizes()[2] + 2 * c.padding[0], " x ",
           x.sizes()[3] + 2 * c.padding[1], "). Kernel size: (", c.dilation[0] * (w.sizes()[2] - 1) + 1, " x ",
           c.dilation[1] * (w.sizes()[3] - 1) + 1, "). Kernel size can't be greater than actual input size");
  return {out_meta(out, x.dtype(), x.device())};
}

std::vector<TensorMeta> conv2d_grad_input_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor &g = in[0], &w = in[1];
  const ConvAttrs c = conv_attrs(attrs);
  const Shape& hw = pair_attr(attrs, "input_size");
  check_4d(g, "conv2d_grad_input", "grad_output");
  check_weight(w, c.groups);
  check_same_dtype(g, w, "Input", "weight");
  PF_CHECK(g.sizes()[1] == w.sizes()[0], "conv2d_grad_input: grad_output has ", g.sizes()[1],
           " channels but the weight ", shape_str(w.sizes()), " produces ", w.sizes()[0]);
  PF_CHECK(hw[0] >= 0 && hw[1] >= 0, "conv2d_grad_input: negative input size ", shape_str(hw));
  return {out_meta({g.sizes()[0], w.sizes()[1] * c.groups, hw[0], hw[1]}, g.dtype(), g.device())};
}

std::vector<TensorMeta> conv2d_grad_weight_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor &g = in[0], &x = in[1];
  const ConvAttrs c = conv_attrs(attrs);
  const Shape& k = pair_attr(attrs, "kernel_size");
  check_4d(g, "conv2d_grad_weight", "grad_output");
  check_4d(x, "conv2d_grad_weight", "input");
  check_same_dtype(g, x, "Input", "grad_output");
  PF_CHECK(g.sizes()[0] == x.sizes()[0], "conv2d_grad_weight: batch sizes differ: grad_output ", shape_str(g.sizes()),
           ", input ", shape_str(x.sizes()));
  PF_CHECK(g.sizes()[1] % c.groups == 0 && x.sizes()[1] % c.groups == 0, "conv2d_grad_weight: groups=", c.groups,
           " must divide the channels of grad_output ", shape_str(g.sizes()), " and input ", shape_str(x.sizes()));
  PF_CHECK(k[0] > 0 && k[1] > 0, "conv2d_grad_weight: non-positive kernel size ", shape_str(k));
  return {out_meta({g.sizes()[1], x.sizes()[1] / c.groups, k[0], k[1]}, g.dtype(), g.device())};
}

// ---- pooling ----------------------------------------------------------------------------------

struct PoolAttrs {
  Shape kernel, stride, padding, dilation;
  bool ceil_mode;
};

// pool2d_shape_check: window, stride, dilation and padding limits, and a non-empty output.
Shape pool_out_shape(const Tensor& x, const PoolAttrs& p) {
  PF_CHECK(p.kernel[0] > 0 && p.kernel[1] > 0, "kernel size should be greater than zero, but got kH: ", p.kernel[0],
           " kW: ", p.kernel[1]);
  PF_CHECK(p.stride[0] > 0 && p.stride[1] > 0, "stride should be greater than zero, but got dH: ", p.stride[0],
           " dW: ", p.stride[1]);
  PF_CHECK(p.dilation[0] > 0 && p.dilation[1] > 0, "dilation should be greater than zero, but got dilationH: ",
           p.dilation[0], " dilationW: ", p.dilation[1]);
  for (int i = 0; i < 2; ++i) {
    PF_CHECK(p.padding[i] >= 0, "pad must be non-negative, but got pad: ", p.padding[i]);
    PF_CHECK(p.kernel[i] / 2 >= p.padding[i], "pad should be at most half of kernel size, but got pad=", p.padding[i],
             " and kernel_size=", p.kernel[i]);
  }
  PF_CHECK(x.sizes()[1] != 0 && x.sizes()[2] != 0 && x.sizes()[3] != 0,
           "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but got:",
           shape_str(x.sizes()));
  Shape out{x.sizes()[0], x.sizes()[1], 0, 0};
  for (int i = 0; i < 2; ++i)
    out[2 + i] = pool_out_size(x.sizes()[2 + i], p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], p.ceil_mode);
  PF_CHECK(out[2] >= 1 && out[3] >= 1, "Given input size: (", x.sizes()[1], "x", x.sizes()[2], "x", x.sizes()[3],
           "). Calculated output size: (", x.sizes()[1], "x", out[2], "x", out[3], "). Output size is too small");
  return out;
}

std::vector<TensorMeta> max_pool2d_meta(std::span<const Tensor> in, const Attrs& attrs) {
  check_4d(in[0], "max_pool2d", "input");
  const PoolAttrs p{pair_attr(attrs, "kernel_size"), pair_attr(attrs, "stride"), pair_attr(attrs, "padding"),
                    pair_attr(attrs, "dilation"), attrs.get<bool>("ceil_mode")};
  const Shape out = pool_out_shape(in[0], p);
  return {out_meta(out, in[0].dtype(), in[0].device()), out_meta(out, DType::Int64, in[0].device())};
}

PoolAttrs avg_pool_attrs(const Attrs& attrs) {
  attrs.get<bool>("count_include_pad");
  PF_CHECK(attrs.get<int64_t>("divisor") >= 0, "avg_pool2d: divisor (0 = none) must not be negative");
  return {pair_attr(attrs, "kernel_size"), pair_attr(attrs, "stride"), pair_attr(attrs, "padding"), Shape{1, 1},
          attrs.get<bool>("ceil_mode")};
}

std::vector<TensorMeta> avg_pool2d_meta(std::span<const Tensor> in, const Attrs& attrs) {
  check_4d(in[0], "avg_pool2d", "input");
  return {out_meta(pool_out_shape(in[0], avg_pool_attrs(attrs)), in[0].dtype(), in[0].device())};
}

// The backward of an (N, C, H, W) -> (N, C, OH, OW) op: grad_output must have the forward's
// output shape for an input of `input_size`; the result has the input's shape.
std::vector<TensorMeta> backward_meta(const Tensor& g, const Attrs& attrs, const char* op, const Shape& expected_hw) {
  check_4d(g, op, "grad_output");
  const Shape& hw = pair_attr(attrs, "input_size");
  PF_CHECK(g.sizes()[2] == expected_hw[0] && g.sizes()[3] == expected_hw[1], op, ": grad_output ",
           shape_str(g.sizes()), " does not match the forward output size ", shape_str(expected_hw));
  return {out_meta({g.sizes()[0], g.sizes()[1], hw[0], hw[1]}, g.dtype(), g.device())};
}

Tensor meta_input(const Tensor& g, const Attrs& attrs) {
  const Shape& hw = pair_attr(attrs, "input_size");
  PF_CHECK(hw[0] > 0 && hw[1] > 0, "input_size must be positive, got ", shape_str(hw));
  // A stand-in with the forward input's shape: the forward meta checks only sizes.
  return Tensor::view_of(g.storage(), {g.sizes()[0], g.sizes()[1], hw[0], hw[1]}, {0, 0, 0, 0}, 0, g.dtype());
}

std::vector<TensorMeta> avg_pool2d_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Shape out = pool_out_shape(meta_input(in[0], attrs), avg_pool_attrs(attrs));
  return backward_meta(in[0], attrs, "avg_pool2d_backward", {out[2], out[3]});
}

std::vector<TensorMeta> adaptive_meta(std::span<const Tensor> in, const Attrs& attrs, bool with_indices) {
  const Tensor& x = in[0];
  check_4d(x, "adaptive pooling", "input");
  const Shape& os = pair_attr(attrs, "output_size");
  PF_CHECK(os[0] >= 0 && os[1] >= 0, "adaptive pooling: elements of output_size must be greater than or equal to 0 "
           "but received {", os[0], ", ", os[1], "}");
  for (int64_t d = 1; d < 4; ++d)
    PF_CHECK(x.sizes()[d] > 0, "adaptive pooling: Expected input to have non-zero size for non-batch dimensions, but "
             "input has sizes ", shape_str(x.sizes()), " with dimension ", d, " being empty");
  const Shape out{x.sizes()[0], x.sizes()[1], os[0], os[1]};
  if (with_indices) return {out_meta(out, x.dtype(), x.device()), out_meta(out, DType::Int64, x.device())};
  return {out_meta(out, x.dtype(), x.device())};
}

std::vector<TensorMeta> adaptive_avg_pool2d_meta(std::span<const Tensor> in, const Attrs& attrs) {
  return adaptive_meta(in, attrs, false);
}
std::vector<TensorMeta> adaptive_max_pool2d_meta(std::span<const Tensor> in, const Attrs& attrs) {
  return adaptive_meta(in, attrs, true);
}
std::vector<TensorMeta> adaptive_avg_pool2d_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  meta_input(in[0], attrs);
  return backward_meta(in[0], attrs, "adaptive_avg_pool2d_backward", pair_attr(attrs, "output_size"));
}

// ---- upsampling ---------------------------------------------------------------------------------

std::vector<TensorMeta> upsample_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[0];
  check_4d(x, "upsample", "input");
  const Shape& os = pair_attr(attrs, "output_size");
  attrs.get<double>("scale_h");
  attrs.get<double>("scale_w");
  PF_CHECK(x.sizes()[2] > 0 && x.sizes()[3] > 0 && os[0] > 0 && os[1] > 0,
           "Input and output sizes should be greater than 0, but got input (H: ", x.sizes()[2], ", W: ", x.sizes()[3],
           ") output (H: ", os[0], ", W: ", os[1], ")");
  if (attrs.has("align_corners")) attrs.get<bool>("align_corners");
  return {out_meta({x.sizes()[0], x.sizes()[1], os[0], os[1]}, x.dtype(), x.device())};
}

std::vector<TensorMeta> upsample_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor x = meta_input(in[0], attrs);
  upsample_meta(std::span<const Tensor>(&x, 1), attrs);
  return backward_meta(in[0], attrs, "upsample_backward", pair_attr(attrs, "output_size"));
}

const bool kConvOpsRegistered = [] {
  const char* conv_attrs = "int[2] stride, int[2] padding, int[2] dilation, int groups";
  register_op("conv2d", std::string("conv2d(Tensor input, Tensor weight, Tensor? bias, ") + conv_attrs + ") -> Tensor",
              conv2d_meta);
  register_op("conv2d_grad_input",
              std::string("conv2d_grad_input(Tensor grad_output, Tensor weight, int[2] input_size, ") + conv_attrs +
                  ") -> Tensor",
              conv2d_grad_input_meta);
  register_op("conv2d_grad_weight",
              std::string("conv2d_grad_weight(Tensor grad_output, Tensor input, int[2] kernel_size, ") + conv_attrs +
                  ") -> Tensor",
              conv2d_grad_weight_meta);
  register_op("max_pool2d",
              "max_pool2d(Tensor input, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, "
              "bool ceil_mode) -> (Tensor values, Tensor indices)",
              max_pool2d_meta);
  const char* avg_attrs = "int[2] kernel_size, int[2] stride, int[2] padding, bool ceil_mode, bool count_include_pad, "
                          "int divisor";
  register_op("avg_pool2d", std::string("avg_pool2d(Tensor input, ") + avg_attrs + ") -> Tensor", avg_pool2d_meta);
  register_op("avg_pool2d_backward",
              std::string("avg_pool2d_backward(Tensor grad_output, int[2] input_size, ") + avg_attrs + ") -> Tensor",
              avg_pool2d_backward_meta);
  register_op("adaptive_avg_pool2d", "adaptive_avg_pool2d(Tensor input, int[2] output_size) -> Tensor",
              adaptive_avg_pool2d_meta);
  register_op("adaptive_avg_pool2d_backward",
              "adaptive_avg_pool2d_backward(Tensor grad_output, int[2] input_size, int[2] output_size) -> Tensor",
              adaptive_avg_pool2d_backward_meta);
  register_op("adaptive_max_pool2d",
              "adaptive_max_pool2d(Tensor input, int[2] output_size) -> (Tensor values, Tensor indices)",
              adaptive_max_pool2d_meta);
  register_op("upsample_nearest2d",
              "upsample_nearest2d(Tensor input, int[2] output_size, float scale_h, float scale_w) -> Tensor",
              upsample_meta);
  register_op("upsample_nearest2d_backward",
              "upsample_nearest2d_backward(Tensor grad_output, int[2] input_size, int[2] output_size, float scale_h, "
              "float scale_w) -> Tensor",
              upsample_backward_meta);
  register_op("upsample_bilinear2d",
              "upsample_bilinear2d(Tensor input, int[2] output_size, bool align_corners, float scale_h, "
              "float scale_w) -> Tensor",
              upsample_meta);
  register_op("upsample_bilinear2d_backward",
              "upsample_bilinear2d_backward(Tensor grad_output, int[2] input_size, int[2] output_size, "
              "bool align_corners, float scale_h, float scale_w) -> Tensor",
              upsample_backward_meta);
  return true;
}();

}  // namespace

namespace ops {
namespace {

// Runs op, or (when an input is empty, which kernels never see) returns zeros of the meta
// function's outputs: an empty sum is zero, e.g. a weight gradient over a batch of 0.
Tensors call_or_zeros(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs) {
  for (const Tensor& t : in) {
    if (t.numel() != 0) continue;
    Tensors outs;
    for (const TensorMeta& m : op.meta(in, attrs)) outs.push_back(zeros(m.sizes, m.dtype, m.device));
    return outs;
  }
  return call_op(op, in, attrs);
}

void check_float(const Tensor& t, const char* op) {
  PF_CHECK(is_floating(t.dtype()), "\"", op, "\" not implemented for '", dtype_name(t.dtype()),
           "' (floating inputs only)");
}

// A 3-d (unbatched) input as a batch of one; `batched` tells the caller to squeeze it back.
Tensor batch_input(const Tensor& x, const char* op, bool& batched) {
  PF_CHECK(x.dim() == 3 || x.dim() == 4, "Expected 3D (unbatched) or 4D (batched) input to ", op,
           ", but got input of size: ", shape_str(x.sizes()));
  batched = x.dim() == 4;
  return batched ? x : unsqueeze(x, 0);
}

Tensor unbatch(const Tensor& out, bool batched) { return batched ? out : squeeze(out, 0); }

Shape check_pair(const Shape& v, const char* name) {
  PF_CHECK(v.size() == 2, "expected ", name, " to be a single integer value or a list of 2 values to match the "
           "convolution dimensions, but got ", name, "=", shape_str(v));
  return v;
}

Attrs make_conv_attrs(const Shape& stride, const Shape& padding, const Shape& dilation, int64_t groups) {
  return Attrs{{"stride", check_pair(stride, "stride")},
               {"padding", check_pair(padding, "padding")},
               {"dilation", check_pair(dilation, "dilation")},
               {"groups", groups}};
}

// ---- convolution: three sides of one bilinear map ------------------------------------------------
// With y = conv2d(x, w): <g, y> = <grad_input(g, w), x> = <grad_weight(g, x), w>. Each
// function's backward follows from that identity and uses the other two.

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Attrs& attrs);
Tensor conv_grad_input(const Tensor& g, const Tensor& w, const Shape& hw, const Attrs& attrs);
Tensor conv_grad_weight(const Tensor& g, const Tensor& x, const Shape& khw, const Attrs& attrs);

// conv2d(x, w) cropped or zero-extended to `hw` output positions: the adjoint of a
// grad_input/grad_weight whose image size is not conv2d's inverse size (a transposed
// convolution's output_padding, or a caller's input_size) covers the positions that exist.
Tensor conv_forward_to(const Tensor& x, const Tensor& w, const Attrs& attrs, const Shape& hw) {
  Tensor y = conv_forward(x, w, Tensor(), attrs);
  const int64_t extra_h = hw[0] - y.sizes()[2], extra_w = hw[1] - y.sizes()[3];
  if (extra_h == 0 && extra_w == 0) return y;
  return constant_pad_nd(y, {0, extra_w, 0, extra_h});  // negative pads crop
}

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Attrs& attrs) {
  static const OpDef& op = find_op("conv2d");
  Tensor out;
  if (bias.defined()) {
    const Tensor in[] = {x, w, bias};
    out = call_or_zeros(op, in, attrs)[0];
    if (x.numel() == 0 || w.numel() == 0) out = binary("add", out, reshape(bias, {1, -1, 1, 1}));
  } else {
    const Tensor in[] = {x, w};
    out = call_or_zeros(op, in, attrs)[0];
  }
  const bool need_x = autograd::requires_grad(x), need_w = autograd::requires_grad(w);
  const bool has_bias = bias.defined(), need_b = has_bias && autograd::requires_grad(bias);
  if (autograd::is_grad_enabled() && (need_x || need_w || need_b)) {
    auto node = autograd::make_node(
        "ConvolutionBackward0",
        [attrs, need_x, need_w, need_b, has_bias](const Tensors& g, const Tensors& s) -> Tensors {
          const Tensor &x = s[0], &w = s[1];
          Tensors r(has_bias ? 3 : 2);
          if (need_x) r[0] = conv_grad_input(g[0], w, {x.sizes()[2], x.sizes()[3]}, attrs);
          if (need_w) r[1] = conv_grad_weight(g[0], x, {w.sizes()[2], w.sizes()[3]}, attrs);
          if (need_b) r[2] = reduce("sum", g[0], {0, 2, 3}, false);
          return r;
        });
    node->save(x);
    node->save(w);
    if (has_bias) {
      autograd::record(node, {x, w, bias}, {out});
    } else {
      autograd::record(node, {x, w}, {out});
    }
  }
  return out;
}

Tensor conv_grad_input(const Tensor& g, const Tensor& w, const Shape& hw, const Attrs& attrs) {
  static const OpDef& op = find_op("conv2d_grad_input");
  Attrs a = attrs;
  a.set("input_size", hw);
  const Tensor in[] = {g, w};
  Tensor out = call_or_zeros(op, in, a)[0];
  if (autograd::any_requires_grad({&g, &w})) {
    const bool need_g = autograd::requires_grad(g), need_w = autograd::requires_grad(w);
    auto node = autograd::make_node(
        "ConvolutionBackward0", [attrs, need_g, need_w](const Tensors& h, const Tensors& s) -> Tensors {
          const Tensor &g = s[0], &w = s[1];
          Tensors r(2);
          if (need_g) r[0] = conv_forward_to(h[0], w, attrs, {g.sizes()[2], g.sizes()[3]});
          if (need_w) r[1] = conv_grad_weight(g, h[0], {w.sizes()[2], w.sizes()[3]}, attrs);
          return r;
        });
    node->save(g);
    node->save(w);
    autograd::record(node, {g, w}, {out});
  }
  return out;
}

Tensor conv_grad_weight(const Tensor& g, const Tensor& x, const Shape& khw, const Attrs& attrs) {
  static const OpDef& op = find_op("conv2d_grad_weight");
  Attrs a = attrs;
  a.set("kernel_size", khw);
  const Tensor in[] = {g, x};
  Tensor out = call_or_zeros(op, in, a)[0];
  if (autograd::any_requires_grad({&g, &x})) {
    const bool need_g = autograd::requires_grad(g), need_x = autograd::requires_grad(x);
    auto node = autograd::make_node(
        "ConvolutionBackwardBackward0", [attrs, need_g, need_x](const Tensors& h, const Tensors& s) -> Tensors {
          const Tensor &g = s[0], &x = s[1];
          Tensors r(2);
          if (need_g) r[0] = conv_forward_to(x, h[0], attrs, {g.sizes()[2], g.sizes()[3]});
          if (need_x) r[1] = conv_grad_input(g, h[0], {x.sizes()[2], x.sizes()[3]}, attrs);
          return r;
        });
    node->save(g);
    node->save(x);
    autograd::record(node, {g, x}, {out});
  }
  return out;
}

// ---- linear maps with an adjoint op (average pooling, upsampling) ---------------------------------

struct LinearOp {
  const char* op;
  const char* node;  // the autograd node's name
};

// y = A x with A = `fwd`; its backward is A^T = `adj` (with attrs `adj_attrs`), whose own
// backward is A again: gradients of every order.
Tensor run_linear(const LinearOp& fwd, const LinearOp& adj, const Tensor& x, const Attrs& attrs,
                  const Attrs& adj_attrs) {
  const Tensor in[] = {x};
  Tensor out = call_or_zeros(find_op(fwd.op), in, attrs)[0];
  if (autograd::any_requires_grad({&x})) {
    auto node = autograd::make_node(fwd.node,
                                    [fwd, adj, attrs, adj_attrs](const Tensors& g, const Tensors&) -> Tensors {
                                      return {run_linear(adj, fwd, g[0], adj_attrs, attrs)};
                                    });
    autograd::record(node, {x}, {out});
  }
  return out;
}

// Runs the linear (N, C, H, W) -> (N, C, OH, OW) op `op` with `op`_backward as its adjoint,
// whose attrs are op's plus the input size.
Tensor run_linear_pair(const char* op, const char* node, const char* backward_node, const Tensor& x, Attrs attrs) {
  Attrs back = attrs;
  back.set("input_size", Shape{x.sizes()[2], x.sizes()[3]});
  const OpDef& backward_op = find_op(std::string(op) + "_backward");  // catalog names live forever
  return run_linear({op, node}, {backward_op.name.c_str(), backward_node}, x, attrs, back);
}

// ---- max pooling ------------------------------------------------------------------------------------

// values and indices (into each H*W input plane); the backward scatters through the indices.
std::pair<Tensor, Tensor> run_max_pool(const char* op_name, const char* node_name, const Tensor& x,
                                       const Attrs& attrs) {
  const Tensor in[] = {x};
  Tensors outs = call_or_zeros(find_op(op_name), in, attrs);
  if (autograd::any_requires_grad({&x})) {
    auto node = autograd::make_node(node_name, [shape = x.sizes()](const Tensors& g, const Tensors& s) -> Tensors {
      const Tensor& idx = s[0];
      const int64_t n = shape[0], c = shape[1];
      const Shape flat{n, c, idx.sizes()[2] * idx.sizes()[3]};  // no -1: the batch may be 0
      const Tensor flat_g = reshape(g[0], flat);
      const Tensor flat_i = reshape(idx, flat);
      return {reshape(scatter_add_internal(flat_g, 2, flat_i, {n, c, shape[2] * shape[3]}), shape)};
    });
    node->save(outs[1]);
    autograd::record(node, {x}, {outs[0], outs[1]});
  }
  return {outs[0], outs[1]};
}

Shape pool_stride(const Shape& stride, const Shape& kernel) { return stride.empty() ? kernel : stride; }

Shape check_pool_pair(const Shape& v, const char* op, const char* name) {
  PF_CHECK(v.size() == 2, op, ": ", name, " must be two values (height, width), got ", shape_str(v));
  return v;
}

}  // namespace

// ---- public API ------------------------------------------------------------------------------------

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride, const Shape& padding,
              const Shape& dilation, int64_t groups) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"conv2d", {input, weight, bias}})
      return conv2d(cast[0], cast[1], cast[2], stride, padding, dilation, groups);
  bool batched;
  const Tensor x = batch_input(input, "conv2d", batched);
  check_float(x, "conv2d");
  const Attrs attrs = make_conv_attrs(stride, padding, dilation, groups);
  return unbatch(conv_forward(x, weight, bias, attrs), batched);
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
              const std::string& padding, const Shape& dilation, int64_t groups) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"conv2d", {input, weight, bias}})
      return conv2d(cast[0], cast[1], cast[2], stride, padding, dilation, groups);
  if (padding == "valid") return conv2d(input, weight, bias, stride, Shape{0, 0}, dilation, groups);
  PF_CHECK(padding == "same", "Invalid padding string: '", padding, "'");
  check_pair(stride, "stride");
  check_pair(dilation, "dilation");
  PF_CHECK(stride[0] == 1 && stride[1] == 1, "padding='same' is not supported for strided convolutions");
  PF_CHECK(weight.dim() == 4, "Expected 4-dimensional weight for conv2d, but got weight of size ",
           shape_str(weight.sizes()));
  // total = dilation * (k - 1) per dim; the smaller half goes before, the rest after. An odd
  // total pads the input's bottom/right by one more row/column first (PyTorch's rule).
  Shape pad(2), extra(2);
  for (int i = 0; i < 2; ++i) {
    const int64_t total = dilation[i] * (weight.sizes()[2 + i] - 1);
    pad[i] = total / 2;
    extra[i] = total - 2 * pad[i];
  }
  if (extra[0] == 0 && extra[1] == 0) return conv2d(input, weight, bias, stride, pad, dilation, groups);
  PF_CHECK(input.dim() == 3 || input.dim() == 4, "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got "
           "input of size: ", shape_str(input.sizes()));
  const Tensor padded = constant_pad_nd(input, {0, extra[1], 0, extra[0]});
  return conv2d(padded, weight, bias, stride, pad, dilation, groups);
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                        const Shape& padding, const Shape& output_padding, int64_t groups, const Shape& dilation) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"conv_transpose2d", {input, weight, bias}})
      return conv_transpose2d(cast[0], cast[1], cast[2], stride, padding, output_padding, groups, dilation);
  bool batched;
  const Tensor x = batch_input(input, "conv_transpose2d", batched);
  check_float(x, "conv_transpose2d");
  const Attrs attrs = make_conv_attrs(stride, padding, dilation, groups);
  check_pair(output_padding, "output_padding");
  PF_CHECK(groups > 0, "non-positive groups is not supported");
  for (int i = 0; i < 2; ++i) {
    PF_CHECK(padding[i] >= 0, "negative padding is not supported");
    PF_CHECK(output_padding[i] >= 0, "negative output_padding is not supported");
    PF_CHECK(stride[i] > 0, "non-positive stride is not supported");
    PF_CHECK(dilation[i] > 0, "non-positive dilation is not supported");
  }
  PF_CHECK((output_padding[0] < stride[0] || output_padding[0] < dilation[0]) &&
               (output_padding[1] < stride[1] || output_padding[1] < dilation[1]),
           "output padding must be smaller than either stride or dilation, but got output_padding_height: ",
           output_padding[0], " output_padding_width: ", output_padding[1], " stride_height: ", stride[0],
           " stride_width: ", stride[1], " dilation_height: ", dilation[0], " dilation_width: ", dilation[1]);
  PF_CHECK(weight.dim() == 4, "Expected 4-dimensional weight for conv_transpose2d, but got weight of size ",
           shape_str(weight.sizes()));
  PF_CHECK(weight.sizes()[0] % groups == 0, "Given groups=", groups, ", expected weight to be divisible by ", groups,
           " at dimension 0, but got weight of size ", shape_str(weight.sizes()), " instead");
  PF_CHECK(x.sizes()[1] == weight.sizes()[0], "Given transposed=1, weight of size ", shape_str(weight.sizes()),
           ", expected input", shape_str(x.sizes()), " to have ", weight.sizes()[0], " channels, but got ",
           x.sizes()[1], " channels instead");
  const int64_t c_out = weight.sizes()[1] * groups;
  if (bias.defined())
    PF_CHECK(bias.dim() == 1 && bias.sizes()[0] == c_out, "Given transposed=1, weight of size ",
             shape_str(weight.sizes()), ", expected bias to be 1-dimensional with ", c_out,
             " elements, but got bias of size ", shape_str(bias.sizes()), " instead");
  Shape hw(2);
  for (int i = 0; i < 2; ++i) {
    hw[i] = (x.sizes()[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (weight.sizes()[2 + i] - 1) +
            output_padding[i] + 1;
  }
  PF_CHECK(hw[0] > 0 && hw[1] > 0, "Given input size per channel: (", x.sizes()[2], " x ", x.sizes()[3],
           "). Calculated output size per channel: (", hw[0], " x ", hw[1], "). Output size is too small");
  Tensor out = conv_grad_input(x, weight, hw, attrs);
  if (bias.defined()) {
    check_same_dtype(x, bias, "Input", "bias");
    out = binary("add", out, reshape(bias, {1, -1, 1, 1}));
  }
  return unbatch(out, batched);
}

Tensor conv2d_grad_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_hw, const Shape& stride,
                         const Shape& padding, const Shape& dilation, int64_t groups) {
  return conv_grad_input(grad_output, weight, check_pair(input_hw, "input_size"),
                         make_conv_attrs(stride, padding, dilation, groups));
}

Tensor conv2d_grad_weight(const Tensor& grad_output, const Tensor& input, const Shape& kernel_hw, const Shape& stride,
                          const Shape& padding, const Shape& dilation, int64_t groups) {
  return conv_grad_weight(grad_output, input, check_pair(kernel_hw, "kernel_size"),
                          make_conv_attrs(stride, padding, dilation, groups));
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const Shape& kernel_size, const Shape& stride,
                                                  const Shape& padding, const Shape& dilation, bool ceil_mode) {
  PF_CHECK(input.dim() == 3 || input.dim() == 4, "non-empty 3D or 4D (batch mode) tensor expected for input, but got ",
           shape_str(input.sizes()));
  check_float(input, "max_pool2d");
  const bool batched = input.dim() == 4;
  const Tensor x = batched ? input : unsqueeze(input, 0);
  const Shape k = check_pool_pair(kernel_size, "max_pool2d", "kernel_size");
  const Attrs attrs{{"kernel_size", k},
                    {"stride", check_pool_pair(pool_stride(stride, k), "max_pool2d", "stride")},
                    {"padding", check_pool_pair(padding, "max_pool2d", "padding")},
                    {"dilation", check_pool_pair(dilation, "max_pool2d", "dilation")},
                    {"ceil_mode", ceil_mode}};
  auto [values, indices] = run_max_pool("max_pool2d", "MaxPool2DWithIndicesBackward0", x, attrs);
  return {unbatch(values, batched), unbatch(indices, batched)};
}

Tensor max_pool2d(const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding,
                  const Shape& dilation, bool ceil_mode) {
  return max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode).first;
}

Tensor avg_pool2d(const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  PF_CHECK(input.dim() == 3 || input.dim() == 4, "non-empty 3D or 4D (batch mode) tensor expected for input, but got ",
           shape_str(input.sizes()));
  check_float(input, "avg_pool2d");
  PF_CHECK(!divisor_override || *divisor_override != 0, "divisor must be not zero");
  const bool batched = input.dim() == 4;
  const Tensor x = batched ? input : unsqueeze(input, 0);
  const Shape k = check_pool_pair(kernel_size, "avg_pool2d", "kernel_size");
  const Attrs attrs{{"kernel_size", k},
                    {"stride", check_pool_pair(pool_stride(stride, k), "avg_pool2d", "stride")},
                    {"padding", check_pool_pair(padding, "avg_pool2d", "padding")},
                    {"ceil_mode", ceil_mode},
                    {"count_include_pad", count_include_pad},
                    {"divisor", divisor_override.value_or(0)}};
  return unbatch(run_linear_pair("avg_pool2d", "AvgPool2DBackward0", "AvgPool2DBackwardBackward0", x, attrs), batched);
}

Tensor adaptive_avg_pool2d(const Tensor& input, const Shape& output_size) {
  PF_CHECK(input.dim() == 3 || input.dim() == 4, "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got ",
           shape_str(input.sizes()));
  check_float(input, "adaptive_avg_pool2d");
  const Shape os = check_pool_pair(output_size, "adaptive_avg_pool2d", "output_size");
  const bool batched = input.dim() == 4;
  const Tensor x = batched ? input : unsqueeze(input, 0);
  const Shape out{os[0] == -1 ? x.sizes()[2] : os[0], os[1] == -1 ? x.sizes()[3] : os[1]};
  return unbatch(run_linear_pair("adaptive_avg_pool2d", "AdaptiveAvgPool2DBackward0",
                                 "AdaptiveAvgPool2DBackwardBackward0", x, Attrs{{"output_size", out}}),
                 batched);
}

std::pair<Tensor, Tensor> adaptive_max_pool2d(const Tensor& input, const Shape& output_size) {
  PF_CHECK(input.dim() == 3 || input.dim() == 4, "adaptive_max_pool2d(): Expected 3D or 4D tensor, but got: ",
           shape_str(input.sizes()));
  check_float(input, "adaptive_max_pool2d");
  const Shape os = check_pool_pair(output_size, "adaptive_max_pool2d", "output_size");
  const bool batched = input.dim() == 4;
  const Tensor x = batched ? input : unsqueeze(input, 0);
  const Shape out{os[0] == -1 ? x.sizes()[2] : os[0], os[1] == -1 ? x.sizes()[3] : os[1]};
  auto [values, indices] =
      run_max_pool("adaptive_max_pool2d", "AdaptiveMaxPool2DBackward0", x, Attrs{{"output_size", out}});
  return {unbatch(values, batched), unbatch(indices, batched)};
}

namespace {
Attrs upsample_attrs(const Tensor& x, const Shape& output_size, const std::vector<double>& scales) {
  PF_CHECK(x.dim() == 4, "upsampling expects a 4-d input (N, C, H, W), got ", shape_str(x.sizes()));
  check_float(x, "upsample");
  PF_CHECK(output_size.size() == 2, "upsampling: output_size must be two values, got ", shape_str(output_size));
  PF_CHECK(scales.empty() || scales.size() == 2, "upsampling: expected 0 or 2 scale factors, got ", scales.size());
  // 0 means "no scale given" (PyTorch uses a scale only when it is > 0)
  return Attrs{{"output_size", output_size},
               {"scale_h", scales.empty() ? 0.0 : scales[0]},
               {"scale_w", scales.empty() ? 0.0 : scales[1]}};
}
}  // namespace

Tensor upsample_nearest2d(const Tensor& input, const Shape& output_size, const std::vector<double>& scales) {
  return run_linear_pair("upsample_nearest2d", "UpsampleNearest2DBackward0", "UpsampleNearest2DBackwardBackward0",
                         input, upsample_attrs(input, output_size, scales));
}

Tensor upsample_bilinear2d(const Tensor& input, const Shape& output_size, bool align_corners,
                           const std::vector<double>& scales) {
  Attrs attrs = upsample_attrs(input, output_size, scales);
  attrs.set("align_corners", align_corners);
  return run_linear_pair("upsample_bilinear2d", "UpsampleBilinear2DBackward0", "UpsampleBilinear2DBackwardBackward0",
                         input, attrs);
}

}  // namespace ops
}  // namespace plugflow
