// torchvision's C++ operators (plugflow/ops_vision.h): the catalog entries of nms, roi_align and
// roi_pool (+ backward ops) with torchvision 0.14's argument checks, and the functional API with
// autograd nodes.
//
// Kernels (docs/kernels.md, "torchvision operators") see contiguous inputs of one floating
// dtype and write contiguous outputs. The values inside rois (batch indices, coordinates) are
// read by the kernels, which check them: a batch index outside the input or a non-finite
// coordinate raises instead of reading out of bounds as torchvision's kernels would.
// nms writes the kept indices into the first `num` slots of an (N,) output.
#include <cmath>
#include <string>

#include "../autograd/grad_utils.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/op.h"
#include "plugflow/ops.h"

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

// The grad_output of a roi op's backward: the forward output's shape and the rois' dtype.
void check_roi_grad(const Tensor& grad, const Tensor& rois, const Shape& input_size, const Attrs& attrs,
                    const char* from) {
  PF_CHECK(input_size.size() == 4, from, ": input_size must have 4 values, got ", shape_str(input_size));
  for (int64_t s : input_size) PF_CHECK(s >= 0, from, ": negative input size ", shape_str(input_size));
  PF_CHECK(rois.dim() == 2 && rois.sizes()[1] == 5, "rois must have shape as Tensor[K, 5]");
  check_same_type(grad, "grad", rois, "rois", from);
  check_floating(grad, from);
  const Shape expected{rois.sizes()[0], input_size[1], attrs.get<int64_t>("pooled_height"),
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
  check_roi_grad(in[0], in[1], input_size, attrs, "roi_align_backward_kernel");
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
  check_roi_grad(in[0], in[1], input_size, attrs, "roi_pool_backward_kernel");
  PF_CHECK(in[2].dtype() == DType::Int32 && in[2].sizes() == in[0].sizes(),
           "roi_pool_backward_kernel: argmax must be an int32 tensor of grad's shape");
  return {{input_size, in[0].dtype(), in[0].device()}};
}

const bool kVisionOpsRegistered = [] {
  register_op("nms", "nms(Tensor boxes, Tensor scores, float iou_threshold) -> (Tensor keep, Tensor num)",
              nms_meta);
  const std::string pooled = "float spatial_scale, int pooled_height, int pooled_width";
  register_op("roi_align",
              "roi_align(Tensor input, Tensor rois, " + pooled + ", int sampling_ratio, bool aligned) -> Tensor",
              roi_align_meta);
  register_op("roi_align_backward",
              "roi_align_backward(Tensor grad, Tensor rois, " + pooled +
                  ", int sampling_ratio, bool aligned, int[] input_size) -> Tensor grad_input",
              roi_align_backward_meta);
  register_op("roi_pool", "roi_pool(Tensor input, Tensor rois, " + pooled + ") -> (Tensor output, Tensor argmax)",
              roi_pool_meta);
  register_op("roi_pool_backward",
              "roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, int pooled_height, int pooled_width, "
              "int[] input_size) -> Tensor grad_input",
              roi_pool_backward_meta);
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

}  // namespace ops
}  // namespace plugflow
