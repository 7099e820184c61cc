// torchvision's C++ operators (plugflow/ops_vision.h) as private functions _C._nms,
// _C._roi_align, _C._roi_pool, _C._ps_roi_align, _C._ps_roi_pool and _C._deform_conv2d, which
// plugflow's torch.ops.torchvision namespace
// (python/plugflow/_ops.py) exposes under torchvision's signatures, and torch.linalg's solvers
// and decompositions as _C._linalg_lstsq, _linalg_solve_ex, _linalg_solve_triangular, _linalg_inv_ex, _linalg_cholesky_ex,
// _linalg_slogdet, _linalg_qr, _linalg_svd and _linalg_eigh (tuples; python/plugflow/linalg.py
// wraps them in torch.linalg's signatures and return types).
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
  // Each releases the GIL around the op and returns its result's tensors as a tuple.
  auto pair = [](const Tensor& first, const Tensor& second) { return py::make_tuple(first, second); };
  m.def("_linalg_solve_ex", [=](const Tensor& a, const Tensor& b, bool left, bool check_errors) {
    ops::SolveResult r;
    {
      py::gil_scoped_release nogil;
      r = ops::linalg_solve_ex(a, b, left, check_errors);
    }
    return pair(r.result, r.info);
  });
  m.def("_linalg_solve_triangular", &ops::linalg_solve_triangular, arg("A"), arg("B"), arg("upper"), arg("left"),
        arg("unitriangular"), py::call_guard<py::gil_scoped_release>());
  m.def("_linalg_inv_ex", [=](const Tensor& a, bool check_errors) {
    ops::InvResult r;
    {
      py::gil_scoped_release nogil;
      r = ops::linalg_inv_ex(a, check_errors);
    }
    return pair(r.inverse, r.info);
  });
  m.def("_linalg_cholesky_ex", [=](const Tensor& a, bool upper, bool check_errors) {
    ops::CholeskyResult r;
    {
      py::gil_scoped_release nogil;
      r = ops::linalg_cholesky_ex(a, upper, check_errors);
    }
    return pair(r.L, r.info);
  });
  m.def("_linalg_slogdet", [=](const Tensor& a) {
    ops::SlogdetResult r;
    {
      py::gil_scoped_release nogil;
      r = ops::linalg_slogdet(a);
    }
    return pair(r.sign, r.logabsdet);
  });
  m.def("_linalg_qr", [=](const Tensor& a, const std::string& mode) {
    ops::QrResult r;
    {
      py::gil_scoped_release nogil;
      r = ops::linalg_qr(a, mode);
    }
    return pair(r.Q, r.R);
  });
  m.def("_linalg_svd", [](const Tensor& a, bool full_matrices, bool compute_uv) {
    ops::SvdResult r;
    {
      py::gil_scoped_release nogil;
      r = ops::linalg_svd(a, full_matrices, compute_uv);
    }
    return py::make_tuple(r.U, r.S, r.Vh);
  });
  m.def("_linalg_eigh", [=](const Tensor& a, const std::string& uplo, bool compute_v) {
    ops::EighResult r;
    {
      py::gil_scoped_release nogil;
      r = ops::linalg_eigh(a, uplo, compute_v);
    }
    return pair(r.eigenvalues, r.eigenvectors);
  });
}

}  // namespace plugflow::python
