// The conv family (plugflow/ops_conv.h) as private _C functions behind
// plugflow.nn.functional (python/plugflow/nn/_functional_conv.py), which parses PyTorch's
// argument forms (an int or a tuple, None, strings) and passes two- or three-value lists here.
// Arguments are plain C++ types, so the GIL is released while the op runs. Also binds
// PyTorch's top-level aliases (plugflow.conv2d, plugflow.max_pool1d, ...) and grid sampling
// (plugflow.grid_sampler, plugflow.affine_grid_generator, behind F.grid_sample / F.affine_grid).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace py = pybind11;

namespace plugflow::python {

void bind_conv(py::module_& m) {
  const auto nogil = py::call_guard<py::gil_scoped_release>();
  py::object public_names = m.attr("_public_functions");
  using Padding = std::variant<Shape, std::string>;

  m.def(
      "_conv2d",
      [](const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias, const Shape& stride,
         const Padding& padding, const Shape& dilation, int64_t groups) {
        const Tensor b = bias.value_or(Tensor());
        if (const auto* mode = std::get_if<std::string>(&padding))
          return ops::conv2d(input, weight, b, stride, *mode, dilation, groups);
        return ops::conv2d(input, weight, b, stride, std::get<Shape>(padding), dilation, groups);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"), py::arg("dilation"),
      py::arg("groups"), nogil);
  m.def(
      "_conv3d",
      [](const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias, const Shape& stride,
         const Padding& padding, const Shape& dilation, int64_t groups) {
        const Tensor b = bias.value_or(Tensor());
        if (const auto* mode = std::get_if<std::string>(&padding))
          return ops::conv3d(input, weight, b, stride, *mode, dilation, groups);
        return ops::conv3d(input, weight, b, stride, std::get<Shape>(padding), dilation, groups);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"), py::arg("dilation"),
      py::arg("groups"), nogil);
  m.def(
      "_conv_transpose3d",
      [](const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias, const Shape& stride,
         const Shape& padding, const Shape& output_padding, int64_t groups, const Shape& dilation) {
        return ops::conv_transpose3d(input, weight, bias.value_or(Tensor()), stride, padding, output_padding, groups,
                                     dilation);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
      py::arg("output_padding"), py::arg("groups"), py::arg("dilation"), nogil);
  m.def(
      "_linear",
      [](const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias) {
        return ops::linear(input, weight, bias.value_or(Tensor()));
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), nogil);
  m.def(
      "_conv_transpose2d",
      [](const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias, const Shape& stride,
         const Shape& padding, const Shape& output_padding, int64_t groups, const Shape& dilation) {
        return ops::conv_transpose2d(input, weight, bias.value_or(Tensor()), stride, padding, output_padding, groups,
                                     dilation);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
      py::arg("output_padding"), py::arg("groups"), py::arg("dilation"), nogil);
  m.def(
      "_conv2d_grad_input",
      [](const Tensor& grad_output, const Tensor& weight, const Shape& input_hw, const Shape& stride,
         const Shape& padding, const Shape& dilation, int64_t groups) {
        return ops::conv2d_grad_input(grad_output, weight, input_hw, stride, padding, dilation, groups);
      },
      py::arg("grad_output"), py::arg("weight"), py::arg("input_size"), py::arg("stride"), py::arg("padding"),
      py::arg("dilation"), py::arg("groups"), nogil);
  m.def(
      "_conv2d_grad_weight",
      [](const Tensor& grad_output, const Tensor& input, const Shape& kernel_hw, const Shape& stride,
         const Shape& padding, const Shape& dilation, int64_t groups) {
        return ops::conv2d_grad_weight(grad_output, input, kernel_hw, stride, padding, dilation, groups);
      },
      py::arg("grad_output"), py::arg("input"), py::arg("kernel_size"), py::arg("stride"), py::arg("padding"),
      py::arg("dilation"), py::arg("groups"), nogil);

  m.def(
      "_max_pool2d_with_indices",
      [](const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding,
         const Shape& dilation, bool ceil_mode) {
        return ops::max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride"), py::arg("padding"), py::arg("dilation"),
      py::arg("ceil_mode"), nogil);
  m.def(
      "_avg_pool2d",
      [](const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding, bool ceil_mode,
         bool count_include_pad, std::optional<int64_t> divisor_override) {
        return ops::avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride"), py::arg("padding"), py::arg("ceil_mode"),
      py::arg("count_include_pad"), py::arg("divisor_override"), nogil);
  m.def(
      "_adaptive_avg_pool2d",
      [](const Tensor& input, const Shape& output_size) { return ops::adaptive_avg_pool2d(input, output_size); },
      py::arg("input"), py::arg("output_size"), nogil);
  m.def(
      "_adaptive_max_pool2d",
      [](const Tensor& input, const Shape& output_size) { return ops::adaptive_max_pool2d(input, output_size); },
      py::arg("input"), py::arg("output_size"), nogil);

  m.def(
      "_max_pool3d_with_indices",
      [](const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding,
         const Shape& dilation, bool ceil_mode) {
        return ops::max_pool3d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride"), py::arg("padding"), py::arg("dilation"),
      py::arg("ceil_mode"), nogil);
  m.def(
      "_avg_pool3d",
      [](const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding, bool ceil_mode,
         bool count_include_pad, std::optional<int64_t> divisor_override) {
        return ops::avg_pool3d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride"), py::arg("padding"), py::arg("ceil_mode"),
      py::arg("count_include_pad"), py::arg("divisor_override"), nogil);
  m.def(
      "_adaptive_avg_pool3d",
      [](const Tensor& input, const Shape& output_size) { return ops::adaptive_avg_pool3d(input, output_size); },
      py::arg("input"), py::arg("output_size"), nogil);
  m.def(
      "_adaptive_max_pool3d",
      [](const Tensor& input, const Shape& output_size) { return ops::adaptive_max_pool3d(input, output_size); },
      py::arg("input"), py::arg("output_size"), nogil);

  m.def(
      "_upsample_nearest2d",
      [](const Tensor& input, const Shape& output_size, const std::vector<double>& scales) {
        return ops::upsample_nearest2d(input, output_size, scales);
      },
      py::arg("input"), py::arg("output_size"), py::arg("scales"), nogil);
  m.def(
      "_upsample_bilinear2d",
      [](const Tensor& input, const Shape& output_size, bool align_corners, const std::vector<double>& scales) {
        return ops::upsample_bilinear2d(input, output_size, align_corners, scales);
      },
      py::arg("input"), py::arg("output_size"), py::arg("align_corners"), py::arg("scales"), nogil);
  m.def(
      "_upsample_bicubic2d",
      [](const Tensor& input, const Shape& output_size, bool align_corners, const std::vector<double>& scales) {
        return ops::upsample_bicubic2d(input, output_size, align_corners, scales);
      },
      py::arg("input"), py::arg("output_size"), py::arg("align_corners"), py::arg("scales"), nogil);

  m.def(
      "grid_sampler",
      [](const Tensor& input, const Tensor& grid, int64_t interpolation_mode, int64_t padding_mode,
         bool align_corners) {
        // torch.grid_sampler's enum values
        static const char* const modes[] = {"bilinear", "nearest", "bicubic"};
        static const char* const paddings[] = {"zeros", "border", "reflection"};
        PF_CHECK(interpolation_mode >= 0 && interpolation_mode < 3, "grid_sampler(): unknown interpolation mode ",
                 interpolation_mode);
        PF_CHECK(padding_mode >= 0 && padding_mode < 3, "grid_sampler(): unknown padding mode ", padding_mode);
        return ops::grid_sample(input, grid, modes[interpolation_mode], paddings[padding_mode], align_corners);
      },
      py::arg("input"), py::arg("grid"), py::arg("interpolation_mode"), py::arg("padding_mode"),
      py::arg("align_corners"), nogil);
  m.def(
      "affine_grid_generator",
      [](const Tensor& theta, const Shape& size, bool align_corners) {
        return ops::affine_grid(theta, size, align_corners);
      },
      py::arg("theta"), py::arg("size"), py::arg("align_corners"), nogil);
  public_names.attr("append")("grid_sampler");
  public_names.attr("append")("affine_grid_generator");

  // torch.conv2d & co.: PyTorch's top-level aliases of nn.functional ops run the Python
  // implementations (one argument parser), looked up per call because that module imports _C.
  // torch.adaptive_max_pool1d returns (values, indices), hence its target.
  const std::pair<const char*, const char*> aliases[] = {
      {"conv1d", "conv1d"},
      {"conv2d", "conv2d"},
      {"conv3d", "conv3d"},
      {"conv_transpose1d", "conv_transpose1d"},
      {"conv_transpose2d", "conv_transpose2d"},
      {"conv_transpose3d", "conv_transpose3d"},
      {"max_pool1d", "max_pool1d"},
      {"max_pool2d", "max_pool2d"},
      {"max_pool3d", "max_pool3d"},
      {"max_pool1d_with_indices", "max_pool1d_with_indices"},
      {"avg_pool1d", "avg_pool1d"},
      {"adaptive_avg_pool1d", "adaptive_avg_pool1d"},
      {"adaptive_max_pool1d", "adaptive_max_pool1d_with_indices"},
  };
  for (const auto& [name, target] : aliases) {
    m.attr(name) = py::cpp_function(
        [target = target](const py::args& args, const py::kwargs& kwargs) {
          return py::module_::import("plugflow.nn._functional_conv").attr(target)(*args, **kwargs);
        },
        py::name(name));
    public_names.attr("append")(name);
  }
}

}  // namespace plugflow::python
