// torchvision's C++ operators (plugflow/ops_vision.h) as private functions _C._nms,
// _C._roi_align, _C._roi_pool, _C._ps_roi_align, _C._ps_roi_pool and _C._deform_conv2d, which
// plugflow's torch.ops.torchvision namespace
// (python/plugflow/_ops.py) exposes under torchvision's signatures, and torch.linalg.lstsq as
// _C._linalg_lstsq (python/plugflow/linalg.py).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "casters.h"
#include "plugflow/ops.h"

namespace py = pybind11;

namespace plugflow::python {

void bind_vision(py::module_& m) {
  using py::arg;
  const auto nogil = py::call_guard<py::gil_scoped_release>();
  m.def("_nms", &ops::nms, arg("boxes"), arg("scores"), arg("iou_threshold"), nogil);
  m.def("_roi_align", &ops::roi_align, arg("input"), arg("rois"), arg("spatial_scale"), arg("pooled_height"),
        arg("pooled_width"), arg("sampling_ratio"), arg("aligned"), nogil);
  m.def("_roi_pool", &ops::roi_pool, arg("input"), arg("rois"), arg("spatial_scale"), arg("pooled_height"),
        arg("pooled_width"), nogil);
  m.def("_ps_roi_align", &ops::ps_roi_align, arg("input"), arg("rois"), arg("spatial_scale"), arg("pooled_height"),
        arg("pooled_width"), arg("sampling_ratio"), nogil);
  m.def("_ps_roi_pool", &ops::ps_roi_pool, arg("input"), arg("rois"), arg("spatial_scale"), arg("pooled_height"),
        arg("pooled_width"), nogil);
  m.def(
      "_deform_conv2d",
      [](const Tensor& input, const Tensor& weight, const Tensor& offset, const std::optional<Tensor>& mask,
         const std::optional<Tensor>& bias, const Shape& stride, const Shape& padding, const Shape& dilation,
         int64_t groups, int64_t offset_groups) {
        return ops::deform_conv2d(input, weight, offset, mask.value_or(Tensor()), bias.value_or(Tensor()), stride,
                                  padding, dilation, groups, offset_groups);
      },
      arg("input"), arg("weight"), arg("offset"), arg("mask"), arg("bias"), arg("stride"), arg("padding"),
      arg("dilation"), arg("groups"), arg("offset_groups"), nogil);
}

void bind_linalg(py::module_& m) {
  using py::arg;
  m.def(
      "_linalg_lstsq",
      [](const Tensor& a, const Tensor& b, std::optional<double> rcond, std::optional<std::string> driver) {
        ops::LstsqResult r;
        {
          py::gil_scoped_release nogil;
          r = ops::linalg_lstsq(a, b, rcond, driver);
        }
        return py::make_tuple(r.solution, r.residuals, r.rank, r.singular_values);
      },
      arg("input"), arg("b"), arg("rcond") = py::none(), arg("driver") = py::none());
}

}  // namespace plugflow::python
