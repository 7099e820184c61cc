// torchvision's C++ operators (plugflow/ops_vision.h) as private functions _C._nms,
// _C._roi_align and _C._roi_pool, which plugflow's torch.ops.torchvision namespace
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
