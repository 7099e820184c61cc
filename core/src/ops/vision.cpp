// torchvision's C++ operators (plugflow/ops_vision.h): the catalog entries of nms, roi_align,
// roi_pool, ps_roi_align, ps_roi_pool and deform_conv2d (+ backward ops), defined in
// core/opdefs/vision.yaml, with torchvision 0.14's argument checks (their meta functions), and the
// functional API with autograd nodes.
//
// Kernels (docs/kernels.md, "torchvision operators") see contiguous inputs of one floating
// dtype and write contiguous outputs. The values inside rois (batch indices, coordinates) are
// read by the kernels, which check them: a batch index outside the input or a non-finite
// coordinate raises instead of reading out of bounds as torchvision's kernels would. Every size
// deform_conv2d's kernels index with (offset, mask, weight, bias) is checked here.
// nms writes the kept indices into the first `num` slots of an (N,) output.
#include <cmath>
#include <string>

#include "../autograd/grad_utils.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/op.h"
#include "plugflow/ops.h"
#include "opdefs.h"

namespace plugflow {
namespace {

using Tensors = std::vector<Tensor>;

std::string tensor_type_name(const Tensor& t) {
  return t.dtype() == DType::Float64 ? "torch.DoubleTensor"
         : t.dtype() == DType::Float32 ? "torch.FloatTensor"
                                       : "torch." + std::string(dtype_name(t.dtype())) + " tensor";
}

// ATen's checkAllSameType, as torchvision's kernels call it.
void check_same_type(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name, const char* from) {
  PF_CHECK(a.dtype() == b.dtype(), "Expected tensor for argument #1 '", a_name,
           "' to have the same type as tensor for argument #2 '", b_name, "'; but type ", tensor_type_name(b),
           " does not equal ", tensor_type_name(a), " (while checking arguments for ", from, ")");
  PF_CHECK(a.device() == b.device(), from, ": expected '", a_name, "' and '", b_name,
           "' on the same device, got ", a.device().str(), " and ", b.device().str());
}

void check_floating(const Tensor& t, const char* op) {
  PF_CHECK(is_floating(t.dtype()) && t.dtype() != DType::Float16 && t.dtype() != DType::BFloat16,
           "\"", op, "\" not implemented for '", dtype_name(t.dtype()), "'");
}

std::vector<TensorMeta> nms_meta(std::span<const Tensor> in, const Attrs& attrs) {
  attrs.get<double>("iou_threshold");
  const Tensor &boxes = in[0], &scores = in[1];
  PF_CHECK(boxes.dim() == 2, "boxes should be a 2d tensor, got ", boxes.dim(), "D");
  PF_CHECK(boxes.sizes()[1] == 4, "boxes should have 4 elements in dimension 1, got ", boxes.sizes()[1]);
  PF_CHECK(scores.dim() == 1, "scores should be a 1d tensor, got ", scores.dim(), "D");
  PF_CHECK(boxes.sizes()[0] == scores.sizes()[0], "boxes and scores should have same number of elements in ",
           "dimension 0, got ", boxes.sizes()[0], " and ", scores.sizes()[0]);
  PF_CHECK(boxes.dtype() == scores.dtype(), "dets should have the same type as scores");
  PF_CHECK(boxes.device() == scores.device(), "nms: boxes and scores must be on the same device");
  check_floating(boxes, "nms_kernel");
  return {{{boxes.sizes()[0]}, DType::Int64, boxes.device()}, {{1}, DType::Int64, boxes.device()}};
}

// Input (N, C, H, W) and rois (K, 5) of one floating dtype; pooled sizes >= 0.
void check_roi_op(const Tensor& input, const Tensor& rois, const Attrs& attrs, const char* from) {
  PF_CHECK(rois.dim() == 2 && rois.sizes()[1] == 5, "rois must have shape as Tensor[K, 5]");
  PF_CHECK(input.dim() == 4, from, ": expected a 4-d input (N, C, H, W), got ", shape_str(input.sizes()));
  check_same_type(input, "input", rois, "rois", from);
  check_floating(input, from);
  const int64_t ph = attrs.get<int64_t>("pooled_height"), pw = attrs.get<int64_t>("pooled_width");
  PF_CHECK(ph >= 0 && pw >= 0, from, ": output size must be non-negative, got (", ph, ", ", pw, ")");
  const double scale = attrs.get<double>("spatial_scale");
  PF_CHECK(std::isfinite(scale), from, ": spatial_scale must be finite, got ", scale);
}

Shape pooled_shape(const Tensor& input, const Tensor& rois, const Attrs& attrs) {
  return {rois.sizes()[0], input.sizes()[1], attrs.get<int64_t>("pooled_height"),
          attrs.get<int64_t>("pooled_width")};
}

// The grad_output of a roi op's backward: the forward output's shape and the rois' dtype. The
// output has input_size[1] / channels_per_output channels (a position-sensitive op pools
// pooled_height * pooled_width input channels into one output channel).
void check_roi_grad(const Tensor& grad, const Tensor& rois, const Shape& input_size, int64_t channels_per_output,
                    const Attrs& attrs, const char* from) {
  PF_CHECK(input_size.size() == 4, from, ": input_size must have 4 values, got ", shape_str(input_size));
  for (int64_t s : input_size) PF_CHECK(s >= 0, from, ": negative input size ", shape_str(input_size));
  PF_CHECK(rois.dim() == 2 && rois.sizes()[1] == 5, "rois must have shape as Tensor[K, 5]");
  check_same_type(grad, "grad", rois, "rois", from);
  check_floating(grad, from);
  PF_CHECK(input_size[1] % channels_per_output == 0, from, ": input channels must be a multiple of pooling height * ",
           "pooling width, got ", input_size[1]);
  const Shape expected{rois.sizes()[0], input_size[1] / channels_per_output, attrs.get<int64_t>("pooled_height"),
                       attrs.get<int64_t>("pooled_width")};
  PF_CHECK(grad.sizes() == expected, from, ": grad ", shape_str(grad.sizes()), " does not match the output ",
           shape_str(expected));
}

std::vector<TensorMeta> roi_align_meta(std::span<const Tensor> in, const Attrs& attrs) {
  check_roi_op(in[0], in[1], attrs, "roi_align_forward_kernel");
  attrs.get<int64_t>("sampling_ratio");
  attrs.get<bool>("aligned");
  return {{pooled_shape(in[0], in[1], attrs), in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> roi_align_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Shape& input_size = attrs.get<Shape>("input_size");
  check_roi_grad(in[0], in[1], input_size, 1, attrs, "roi_align_backward_kernel");
  attrs.get<int64_t>("sampling_ratio");
  attrs.get<bool>("aligned");
  attrs.get<double>("spatial_scale");
  return {{input_size, in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> roi_pool_meta(std::span<const Tensor> in, const Attrs& attrs) {
  check_roi_op(in[0], in[1], attrs, "roi_pool_forward_kernel");
  const Shape out = pooled_shape(in[0], in[1], attrs);
  return {{out, in[0].dtype(), in[0].device()}, {out, DType::Int32, in[0].device()}};
}

std::vector<TensorMeta> roi_pool_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Shape& input_size = attrs.get<Shape>("input_size");
  check_roi_grad(in[0], in[1], input_size, 1, attrs, "roi_pool_backward_kernel");
  PF_CHECK(in[2].dtype() == DType::Int32 && in[2].sizes() == in[0].sizes(),
           "roi_pool_backward_kernel: argmax must be an int32 tensor of grad's shape");
  return {{input_size, in[0].dtype(), in[0].device()}};
}

// ---- position-sensitive roi ops: output channel c pools input channel c * PH * PW + bin ----------

// PH * PW, the input channels behind one output channel: positive, and dividing `channels`.
int64_t position_bins(int64_t channels, const Attrs& attrs, const char* from) {
  const int64_t ph = attrs.get<int64_t>("pooled_height"), pw = attrs.get<int64_t>("pooled_width");
  int64_t bins = 0;
  PF_CHECK(ph > 0 && pw > 0 && !__builtin_mul_overflow(ph, pw, &bins), from,
           ": output size must be positive, got (", ph, ", ", pw, ")");
  PF_CHECK(channels % bins == 0, from, ": input channels must be a multiple of pooling height * pooling width, got ",
           channels, " channels for a ", ph, " x ", pw, " output");
  return bins;
}

// (output (K, C / (PH * PW), PH, PW), channel_mapping (int32, the input channel of each output)).
std::vector<TensorMeta> ps_roi_metas(const Tensor& input, const Tensor& rois, const Attrs& attrs, const char* from) {
  check_roi_op(input, rois, attrs, from);
  const int64_t bins = position_bins(input.sizes()[1], attrs, from);
  const Shape out{rois.sizes()[0], input.sizes()[1] / bins, attrs.get<int64_t>("pooled_height"),
                  attrs.get<int64_t>("pooled_width")};
  return {{out, input.dtype(), input.device()}, {out, DType::Int32, input.device()}};
}

std::vector<TensorMeta> ps_roi_align_meta(std::span<const Tensor> in, const Attrs& attrs) {
  attrs.get<int64_t>("sampling_ratio");
  return ps_roi_metas(in[0], in[1], attrs, "ps_roi_align_forward_kernel");
}

std::vector<TensorMeta> ps_roi_pool_meta(std::span<const Tensor> in, const Attrs& attrs) {
  return ps_roi_metas(in[0], in[1], attrs, "ps_roi_pool_forward_kernel");
}

// The backward ops take no channel_mapping: it is a function of the output position (output
// channel c, bin b -> input channel c * PH * PW + b), which the kernels derive.
std::vector<TensorMeta> ps_roi_backward_meta(std::span<const Tensor> in, const Attrs& attrs, const char* from) {
  const Shape& input_size = attrs.get<Shape>("input_size");
  PF_CHECK(input_size.size() == 4, from, ": input_size must have 4 values, got ", shape_str(input_size));
  check_roi_grad(in[0], in[1], input_size, position_bins(input_size[1], attrs, from), attrs, from);
  attrs.get<double>("spatial_scale");
  return {{input_size, in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> ps_roi_align_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  attrs.get<int64_t>("sampling_ratio");
  return ps_roi_backward_meta(in, attrs, "ps_roi_align_backward_kernel");
}

std::vector<TensorMeta> ps_roi_pool_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  return ps_roi_backward_meta(in, attrs, "ps_roi_pool_backward_kernel");
}

// ---- deform_conv2d ------------------------------------------------------------------------------

// The output (N, O, OH, OW) of deform_conv2d's operands input (N, C, H, W), weight (O, C / groups,
// KH, KW), offset (N, 2 * offset_groups * KH * KW, OH, OW), [mask (N, offset_groups * KH * KW, OH,
// OW)], [bias (O)], with torchvision's checks (and messages where it has its own).
Shape deform_conv2d_output(std::span<const Tensor> in, const Attrs& attrs) {
  const bool has_mask = attrs.get<bool>("has_mask");
  const size_t expected = 3u + has_mask + (attrs.has("has_bias") && attrs.get<bool>("has_bias"));
  PF_CHECK(in.size() == expected, "deform_conv2d: expected ", expected, " operands, got ", in.size());
  const Tensor &input = in[0], &weight = in[1], &offset = in[2];
  const char* names[] = {"input", "weight", "offset", has_mask ? "mask" : "bias", "bias"};
  for (size_t i = 0; i < 3u + has_mask; ++i)
    PF_CHECK(in[i].dim() == 4, "deform_conv2d: expected a 4-d ", names[i], ", got ", shape_str(in[i].sizes()));
  check_floating(input, "deform_conv2d");
  for (size_t i = 1; i < in.size(); ++i)
    PF_CHECK(in[i].dtype() == input.dtype() && in[i].device() == input.device(), "deform_conv2d: expected ",
             names[i], " of the input's type (", dtype_name(input.dtype()), " on ",
             input.device().str(), "), got ", dtype_name(in[i].dtype()), " on ", in[i].device().str());
  const Shape &stride = attrs.get<Shape>("stride"), &pad = attrs.get<Shape>("padding"),
              &dilation = attrs.get<Shape>("dilation");
  for (const Shape* v : {&stride, &pad, &dilation})
    PF_CHECK_T(v->size() == 2, ValueError, "deform_conv2d: stride, padding and dilation hold 2 values each");
  const int64_t groups = attrs.get<int64_t>("groups"), offset_groups = attrs.get<int64_t>("offset_groups");
  const int64_t N = input.sizes()[0], C = input.sizes()[1], O = weight.sizes()[0];
  const int64_t kh = weight.sizes()[2], kw = weight.sizes()[3];
  PF_CHECK(kh > 0 && kw > 0, "weight_h: ", kh, " weight_w: ", kw);
  PF_CHECK(stride[0] > 0 && stride[1] > 0, "stride_h: ", stride[0], " stride_w: ", stride[1]);
  PF_CHECK(pad[0] >= 0 && pad[1] >= 0, "pad_h: ", pad[0], " pad_w: ", pad[1]);
  PF_CHECK(dilation[0] > 0 && dilation[1] > 0, "dilation_h: ", dilation[0], " dilation_w: ", dilation[1]);
  PF_CHECK(groups > 0 && offset_groups > 0, "deform_conv2d: groups and offset groups must be positive, got ", groups,
           " and ", offset_groups);
  // every product below fits in int64 or is refused (huge attrs must not wrap around)
  const auto product = [](std::initializer_list<int64_t> factors) {
    int64_t r = 1;
    for (int64_t f : factors)
      PF_CHECK(!__builtin_mul_overflow(r, f, &r), "deform_conv2d: sizes too large (integer overflow)");
    return r;
  };
  PF_CHECK(product({weight.sizes()[1], groups}) == C, "deform_conv2d: weight ", shape_str(weight.sizes()), " with ",
           groups, " groups expects ", weight.sizes()[1] * groups, " input channels, got ", C);
  PF_CHECK(O % groups == 0, "deform_conv2d: ", O, " output channels are not divisible by ", groups, " groups");
  PF_CHECK(C % offset_groups == 0, "deform_conv2d: ", C, " input channels are not divisible by ", offset_groups,
           " offset groups");
  const int64_t taps = product({kh, kw});
  PF_CHECK(offset.sizes()[1] == product({offset_groups, 2, taps}), "offset.shape[1] is not valid: got: ",
           offset.sizes()[1], " expected: ", offset_groups * 2 * taps);
  if (has_mask)
    PF_CHECK(in[3].sizes()[1] == offset_groups * taps, "mask.shape[1] is not valid: got: ", in[3].sizes()[1],
             " expected: ", offset_groups * taps);
  const auto out_size = [&](int64_t size, int64_t k, int i) {
    const int64_t span = product({dilation[i], k - 1});  // the kernel's extent - 1
    int64_t padded = 0;
    PF_CHECK(!__builtin_add_overflow(size, product({2, pad[i]}), &padded),
             "deform_conv2d: sizes too large (integer overflow)");
    return (padded - span - 1) / stride[i] + 1;
  };
  const int64_t out_h = out_size(input.sizes()[2], kh, 0), out_w = out_size(input.sizes()[3], kw, 1);
  PF_CHECK(offset.sizes()[0] == N, "invalid batch size of offset");
  PF_CHECK(offset.sizes()[2] == out_h && offset.sizes()[3] == out_w, "offset output dims: (", offset.sizes()[2], ", ",
           offset.sizes()[3], ") - computed output dims: (", out_h, ", ", out_w, ")");
  if (has_mask) {
    PF_CHECK(in[3].sizes()[0] == N, "invalid batch size of mask");
    PF_CHECK(in[3].sizes()[2] == out_h && in[3].sizes()[3] == out_w, "mask output dims: (", in[3].sizes()[2], ", ",
             in[3].sizes()[3], ") - computed output dims: (", out_h, ", ", out_w, ")");
  }
  PF_CHECK(out_h > 0 && out_w > 0, "Calculated output size too small - out_h: ", out_h, " out_w: ", out_w);
  if (in.size() > 3u + has_mask) {
    const Tensor& bias = in.back();
    PF_CHECK(bias.dim() == 1 && bias.sizes()[0] == O, "deform_conv2d: bias must have shape [", O, "], got ",
             shape_str(bias.sizes()));
  }
  return {N, O, out_h, out_w};
}

std::vector<TensorMeta> deform_conv2d_meta(std::span<const Tensor> in, const Attrs& attrs) {
  return {{deform_conv2d_output(in, attrs), in[0].dtype(), in[0].device()}};
}

// grad_output, input, weight, offset, [mask] -> grad_input, grad_weight, grad_offset, [grad_mask]
// (the bias gradient is grad_output summed over N, OH, OW: the core composes it).
std::vector<TensorMeta> deform_conv2d_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  PF_CHECK(!in.empty(), "deform_conv2d_backward: expected grad_output and the forward's operands");
  const Shape out = deform_conv2d_output(in.subspan(1), attrs);
  const Tensor& grad = in[0];
  PF_CHECK(grad.sizes() == out, "deform_conv2d_backward: grad_output ", shape_str(grad.sizes()),
           " does not match the output ", shape_str(out));
  PF_CHECK(grad.dtype() == in[1].dtype() && grad.device() == in[1].device(),
           "deform_conv2d_backward: grad_output must have the input's type");
  std::vector<TensorMeta> metas;
  for (size_t i = 1; i < in.size(); ++i) metas.push_back({in[i].sizes(), in[i].dtype(), in[i].device()});
  return metas;
}

// The catalog entries of core/opdefs/vision.yaml, with the meta functions above.
const bool kVisionOpsRegistered = [] {
#define PF_X(name, signature, meta, mutated) register_op(name, signature, meta, {PF_OPDEFS_UNPAREN mutated});
  PF_OPDEFS_VISION(PF_X)
#undef PF_X
  return true;
}();

}  // namespace

namespace ops {
namespace {

// Results of a backward op computed under create_graph: differentiating them again raises
// torchvision's error.
void record_no_double_backward(const char* op, const Tensors& inputs, const Tensor& output) {
  if (!autograd::any_requires_grad(inputs)) return;
  auto node = autograd::make_node("NotImplemented", [op = std::string(op)](const Tensors&, const Tensors&) -> Tensors {
    PF_THROW(Error, "double backwards on ", op, " not supported");
  });
  autograd::record(node, inputs, std::vector<Tensor>{output});
}

bool is_empty(const Shape& s) { return shape_numel(s) == 0; }

Attrs roi_attrs(double spatial_scale, int64_t pooled_height, int64_t pooled_width) {
  return Attrs{{"spatial_scale", spatial_scale}, {"pooled_height", pooled_height}, {"pooled_width", pooled_width}};
}

}  // namespace

Tensor nms(const Tensor& boxes, const Tensor& scores, double iou_threshold) {
  static const OpDef& op = find_op("nms");
  const Attrs attrs{{"iou_threshold", iou_threshold}};
  nms_meta(std::vector<Tensor>{boxes, scores}, attrs);
  if (boxes.numel() == 0) return empty({0}, DType::Int64, boxes.device());
  autograd::GradModeGuard no_grad(false);
  const Tensor in[] = {contiguous(boxes), contiguous(scores)};
  auto outs = call_op(op, in, attrs);
  const int64_t kept = item(outs[1]).to_int();
  return clone(narrow(outs[0], 0, 0, kept));
}

Tensor roi_align(const Tensor& input, const Tensor& rois, double spatial_scale, int64_t pooled_height,
                 int64_t pooled_width, int64_t sampling_ratio, bool aligned) {
  static const OpDef& op = find_op("roi_align");
  Attrs attrs = roi_attrs(spatial_scale, pooled_height, pooled_width);
  attrs.set("sampling_ratio", sampling_ratio);
  attrs.set("aligned", aligned);
  const Shape out_shape = roi_align_meta(std::vector<Tensor>{input, rois}, attrs)[0].sizes;
  Tensor out;
  {
    autograd::GradModeGuard no_grad(false);
    const Tensor in[] = {contiguous(input), contiguous(rois)};
    out = is_empty(out_shape) ? zeros(out_shape, input.dtype(), input.device()) : call_op(op, in, attrs)[0];
  }
  if (autograd::is_grad_enabled() && autograd::requires_grad(input)) {
    auto node = autograd::make_node("ROIAlignBackward", [attrs, input_size = input.sizes()](
                                                            const Tensors& g, const Tensors& s) -> Tensors {
      static const OpDef& backward = find_op("roi_align_backward");
      Attrs a = attrs;
      a.set("input_size", input_size);
      const Tensor& rois = s[0];
      Tensor grad_input;
      {
        autograd::GradModeGuard no_grad(false);
        const Tensor in[] = {contiguous(g[0]), contiguous(rois)};
        grad_input = g[0].numel() == 0 || is_empty(input_size) ? zeros(input_size, g[0].dtype(), g[0].device())
                                                               : call_op(backward, in, a)[0];
      }
      record_no_double_backward("roi_align", {g[0]}, grad_input);
      return {grad_input};
    });
    node->save(rois);
    autograd::record(node, {input}, {out});
  }
  return out;
}

std::pair<Tensor, Tensor> roi_pool(const Tensor& input, const Tensor& rois, double spatial_scale,
                                   int64_t pooled_height, int64_t pooled_width) {
  static const OpDef& op = find_op("roi_pool");
  const Attrs attrs = roi_attrs(spatial_scale, pooled_height, pooled_width);
  const Shape out_shape = roi_pool_meta(std::vector<Tensor>{input, rois}, attrs)[0].sizes;
  Tensor out, argmax;
  {
    autograd::GradModeGuard no_grad(false);
    const Tensor in[] = {contiguous(input), contiguous(rois)};
    if (is_empty(out_shape)) {
      out = zeros(out_shape, input.dtype(), input.device());
      argmax = zeros(out_shape, DType::Int32, input.device());
    } else {
      auto outs = call_op(op, in, attrs);
      out = outs[0];
      argmax = outs[1];
    }
  }
  if (autograd::is_grad_enabled() && autograd::requires_grad(input)) {
    auto node = autograd::make_node("ROIPoolBackward", [attrs, input_size = input.sizes()](
                                                           const Tensors& g, const Tensors& s) -> Tensors {
      static const OpDef& backward = find_op("roi_pool_backward");
      Attrs a = attrs;
      a.set("input_size", input_size);
      Tensor grad_input;
      {
        autograd::GradModeGuard no_grad(false);
        const Tensor in[] = {contiguous(g[0]), contiguous(s[0]), s[1]};
        grad_input = g[0].numel() == 0 || is_empty(input_size) ? zeros(input_size, g[0].dtype(), g[0].device())
                                                               : call_op(backward, in, a)[0];
      }
      record_no_double_backward("roi_pool", {g[0]}, grad_input);
      return {grad_input};
    });
    node->save(rois);
    node->save(argmax);
    autograd::record(node, {input}, {out});
  }
  return {out, argmax};
}

namespace {

// ps_roi_align / ps_roi_pool: the forward op, and a node running the backward op on the rois.
std::pair<Tensor, Tensor> ps_roi(const char* name, const char* node_name, const Tensor& input, const Tensor& rois,
                                 const Attrs& attrs) {
  const OpDef& op = find_op(name);
  const std::vector<TensorMeta> metas = op.meta(std::vector<Tensor>{input, rois}, attrs);
  Tensor out, channel_mapping;
  {
    autograd::GradModeGuard no_grad(false);
    if (is_empty(metas[0].sizes)) {
      out = zeros(metas[0].sizes, input.dtype(), input.device());
      channel_mapping = zeros(metas[1].sizes, DType::Int32, input.device());
    } else {
      const Tensor in[] = {contiguous(input), contiguous(rois)};
      auto outs = call_op(op, in, attrs);
      out = outs[0];
      channel_mapping = outs[1];
    }
  }
  if (autograd::is_grad_enabled() && autograd::requires_grad(input)) {
    auto node = autograd::make_node(node_name, [attrs, name = std::string(name), input_size = input.sizes()](
                                                   const Tensors& g, const Tensors& s) -> Tensors {
      const OpDef& backward = find_op(name + "_backward");
      Attrs a = attrs;
      a.set("input_size", input_size);
      Tensor grad_input;
      {
        autograd::GradModeGuard no_grad(false);
        const Tensor in[] = {contiguous(g[0]), contiguous(s[0])};
        grad_input = g[0].numel() == 0 || is_empty(input_size) ? zeros(input_size, g[0].dtype(), g[0].device())
                                                               : call_op(backward, in, a)[0];
      }
      record_no_double_backward(name.c_str(), {g[0]}, grad_input);
      return {grad_input};
    });
    node->save(rois);
    autograd::record(node, {input}, {out});
  }
  return {out, channel_mapping};
}

}  // namespace

std::pair<Tensor, Tensor> ps_roi_align(const Tensor& input, const Tensor& rois, double spatial_scale,
                                       int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio) {
  Attrs attrs = roi_attrs(spatial_scale, pooled_height, pooled_width);
  attrs.set("sampling_ratio", sampling_ratio);
  return ps_roi("ps_roi_align", "PSROIAlignBackward", input, rois, attrs);
}

std::pair<Tensor, Tensor> ps_roi_pool(const Tensor& input, const Tensor& rois, double spatial_scale,
                                      int64_t pooled_height, int64_t pooled_width) {
  return ps_roi("ps_roi_pool", "PSROIPoolBackward", input, rois, roi_attrs(spatial_scale, pooled_height, pooled_width));
}

Tensor deform_conv2d(const Tensor& input, const Tensor& weight, const Tensor& offset, const Tensor& mask,
                     const Tensor& bias, const Shape& stride, const Shape& padding, const Shape& dilation,
                     int64_t groups, int64_t offset_groups) {
  static const OpDef& op = find_op("deform_conv2d");
  const bool has_mask = mask.defined(), has_bias = bias.defined();
  // the backward op's attrs; the forward's also say whether a bias follows
  const Attrs backward_attrs{{"stride", stride}, {"padding", padding},   {"dilation", dilation},
                             {"groups", groups}, {"offset_groups", offset_groups}, {"has_mask", has_mask}};
  Attrs attrs = backward_attrs;
  attrs.set("has_bias", has_bias);
  Tensors operands{input, weight, offset};
  if (has_mask) operands.push_back(mask);
  if (has_bias) operands.push_back(bias);
  const Shape out_shape = deform_conv2d_meta(operands, attrs)[0].sizes;
  Tensor out;
  {
    autograd::GradModeGuard no_grad(false);
    Tensors in;
    for (const Tensor& t : operands) in.push_back(contiguous(t));
    // an empty operand (a batch of 0, no channels, an image of 0 pixels: every sample reads 0)
    // leaves the bias alone, which the kernel never sees
    bool empty_operand = false;
    for (size_t i = 0; i < 3; ++i) empty_operand = empty_operand || in[i].numel() == 0;
    if (empty_operand) {
      out = zeros(out_shape, input.dtype(), input.device());
      if (has_bias && !is_empty(out_shape)) out = add(out, reshape(in.back(), {1, -1, 1, 1}));
    } else {
      out = call_op(op, in, attrs)[0];
    }
  }
  if (autograd::is_grad_enabled() && autograd::any_requires_grad(operands)) {
    auto node = autograd::make_node(
        "DeformConv2dFunctionBackward",
        [backward_attrs, has_bias](const Tensors& g, const Tensors& s) -> Tensors {
          static const OpDef& backward = find_op("deform_conv2d_backward");
          Tensors grads;
          {
            autograd::GradModeGuard no_grad(false);
            Tensors in{contiguous(g[0])};
            for (const Tensor& t : s) in.push_back(contiguous(t));
            bool empty_operand = g[0].numel() == 0;
            for (size_t i = 1; i < 4; ++i) empty_operand = empty_operand || in[i].numel() == 0;
            if (empty_operand) {
              for (size_t i = 1; i < in.size(); ++i)
                grads.push_back(zeros(in[i].sizes(), in[i].dtype(), in[i].device()));
            } else {
              grads = call_op(backward, in, backward_attrs);
            }
            if (has_bias) grads.push_back(reduce("sum", g[0], {0, 2, 3}, false));
          }
          for (const Tensor& grad : grads) record_no_double_backward("deform_conv2d", {g[0]}, grad);
          return grads;
        });
    node->save(input);
    node->save(weight);
    node->save(offset);
    if (has_mask) node->save(mask);
    autograd::record(node, operands, std::span<const Tensor>(&out, 1));
  }
  return out;
}

}  // namespace ops
}  // namespace plugflow
