// The norm family (plugflow/ops_norm.h) as plugflow functions with torch's signatures:
// batch_norm, layer_norm, group_norm, embedding, embedding_renorm_, dropout(_),
// feature_dropout(_), alpha_dropout(_), feature_alpha_dropout(_); and the losses as
// _C._nll_loss / _C._cross_entropy. plugflow.nn.functional (_functional_norm.py) adds
// torch.nn.functional's argument handling on top.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "casters.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace py = pybind11;

namespace plugflow::python {
namespace {

std::string type_name(py::handle h) { return Py_TYPE(h.ptr())->tp_name; }

// An optional tensor argument: None -> undefined.
Tensor optional_tensor(py::handle h, const char* fn, const char* arg) {
  if (h.is_none()) return Tensor();
  if (!py::isinstance<Tensor>(h))
    PF_THROW(TypeError, fn, "(): argument '", arg, "' must be Tensor, not ", type_name(h));
  return h.cast<Tensor>();
}

// A shape argument: a tuple/list of ints (torch.Size included), as torch's int[] parser.
Shape shape_arg(py::handle h, const char* fn, const char* arg) {
  if (!(PyTuple_Check(h.ptr()) || PyList_Check(h.ptr())))
    PF_THROW(TypeError, fn, "(): argument '", arg, "' must be tuple of ints, not ", type_name(h));
  Shape out;
  for (py::handle v : h) {
    if (PyBool_Check(v.ptr()) || PyFloat_Check(v.ptr()) || !PyIndex_Check(v.ptr()))
      PF_THROW(TypeError, fn, "(): argument '", arg, "' must be tuple of ints, but found element of type ",
               type_name(v));
    out.push_back(py::cast<int64_t>(py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()))));
  }
  return out;
}

}  // namespace

void bind_norm(py::module_& m) {
  py::list public_names = m.attr("_public_functions");
  auto function = [&](const char* name, auto f, auto... extra) {
    m.attr(name) = py::cpp_function(f, py::name(name), extra...);
    public_names.append(name);
  };
  using py::arg;
  const auto none = py::none();

  // ---- normalization ----------------------------------------------------------------------------
  function(
      "batch_norm",
      [](const Tensor& input, py::handle weight, py::handle bias, py::handle running_mean, py::handle running_var,
         bool training, double momentum, double eps, bool /*cudnn_enabled*/) {
        return ops::batch_norm(input, optional_tensor(running_mean, "batch_norm", "running_mean"),
                               optional_tensor(running_var, "batch_norm", "running_var"),
                               optional_tensor(weight, "batch_norm", "weight"),
                               optional_tensor(bias, "batch_norm", "bias"), training, momentum, eps);
      },
      arg("input"), arg("weight"), arg("bias"), arg("running_mean"), arg("running_var"), arg("training"),
      arg("momentum"), arg("eps"), arg("cudnn_enabled") = true);
  function(
      "layer_norm",
      [](const Tensor& input, py::handle normalized_shape, py::handle weight, py::handle bias, double eps,
         bool /*cudnn_enable*/) {
        return ops::layer_norm(input, shape_arg(normalized_shape, "layer_norm", "normalized_shape"),
                               optional_tensor(weight, "layer_norm", "weight"),
                               optional_tensor(bias, "layer_norm", "bias"), eps);
      },
      arg("input"), arg("normalized_shape"), arg("weight") = none, arg("bias") = none, arg("eps") = 1e-5,
      arg("cudnn_enable") = true);
  function(
      "group_norm",
      [](const Tensor& input, int64_t num_groups, py::handle weight, py::handle bias, double eps,
         bool /*cudnn_enabled*/) {
        return ops::group_norm(input, num_groups, optional_tensor(weight, "group_norm", "weight"),
                               optional_tensor(bias, "group_norm", "bias"), eps);
      },
      arg("input"), arg("num_groups"), arg("weight") = none, arg("bias") = none, arg("eps") = 1e-5,
      arg("cudnn_enabled") = true);

  // ---- embedding ----------------------------------------------------------------------------------
  // torch.embedding: padding_idx -1 means none (F.embedding wraps negative values first).
  function(
      "embedding",
      [](const Tensor& weight, const Tensor& indices, int64_t padding_idx, bool scale_grad_by_freq, bool sparse) {
        PF_CHECK_T(!sparse, NotImplementedError,
                   "embedding(): sparse=True (sparse gradients) is not supported by plugflow; use sparse=False");
        std::optional<int64_t> pad;
        if (padding_idx >= 0) pad = padding_idx;
        return ops::embedding(weight, indices, pad, scale_grad_by_freq);
      },
      arg("weight"), arg("indices"), arg("padding_idx") = -1, arg("scale_grad_by_freq") = false,
      arg("sparse") = false);
  function(
      "embedding_renorm_",
      [](py::object weight, const Tensor& indices, double max_norm, double norm_type) {
        ops::embedding_renorm_(weight.cast<Tensor&>(), indices, max_norm, norm_type);
        return weight;
      },
      arg("input"), arg("indices"), arg("max_norm"), arg("norm_type"));

  // ---- dropout ------------------------------------------------------------------------------------
  // Out of place, but the input itself comes back when nothing is dropped (eval, p = 0, empty),
  // as in torch: return the caller's object then, not a second wrapper of the same tensor.
  auto same_or_new = [](const py::object& input, Tensor result) -> py::object {
    if (result.is_same(input.cast<const Tensor&>())) return input;
    return py::cast(std::move(result));
  };
  function(
      "dropout",
      [same_or_new](py::object t, double p, bool train) {
        return same_or_new(t, ops::dropout(t.cast<const Tensor&>(), p, train));
      },
      arg("input"), arg("p"), arg("train"));
  function(
      "feature_dropout",
      [same_or_new](py::object t, double p, bool train) {
        return same_or_new(t, ops::feature_dropout(t.cast<const Tensor&>(), p, train));
      },
      arg("input"), arg("p"), arg("train"));
  function(
      "alpha_dropout",
      [same_or_new](py::object t, double p, bool train) {
        return same_or_new(t, ops::alpha_dropout(t.cast<const Tensor&>(), p, train, false));
      },
      arg("input"), arg("p"), arg("train"));
  function(
      "feature_alpha_dropout",
      [same_or_new](py::object t, double p, bool train) {
        return same_or_new(t, ops::alpha_dropout(t.cast<const Tensor&>(), p, train, true));
      },
      arg("input"), arg("p"), arg("train"));
  // In place: return the very object passed in (identity matters to callers, as in torch).
  function(
      "dropout_",
      [](py::object self, double p, bool train) {
        ops::dropout_(self.cast<Tensor&>(), p, train);
        return self;
      },
      arg("input"), arg("p"), arg("train"));
  function(
      "feature_dropout_",
      [](py::object self, double p, bool train) {
        ops::feature_dropout_(self.cast<Tensor&>(), p, train);
        return self;
      },
      arg("input"), arg("p"), arg("train"));
  function(
      "alpha_dropout_",
      [](py::object self, double p, bool train) {
        ops::alpha_dropout_(self.cast<Tensor&>(), p, train, false);
        return self;
      },
      arg("input"), arg("p"), arg("train"));
  function(
      "feature_alpha_dropout_",
      [](py::object self, double p, bool train) {
        ops::alpha_dropout_(self.cast<Tensor&>(), p, train, true);
        return self;
      },
      arg("input"), arg("p"), arg("train"));

  // ---- losses (internal: plugflow.nn.functional resolves the legacy arguments) ----------------
  m.def(
      "_nll_loss",
      [](const Tensor& input, const Tensor& target, py::handle weight, const std::string& reduction,
         int64_t ignore_index) {
        return ops::nll_loss(input, target, optional_tensor(weight, "nll_loss", "weight"), reduction, ignore_index);
      },
      arg("input"), arg("target"), arg("weight"), arg("reduction"), arg("ignore_index"));
  m.def(
      "_cross_entropy",
      [](const Tensor& input, const Tensor& target, py::handle weight, const std::string& reduction,
         int64_t ignore_index, double label_smoothing) {
        return ops::cross_entropy(input, target, optional_tensor(weight, "cross_entropy", "weight"), reduction,
                                  ignore_index, label_smoothing);
      },
      arg("input"), arg("target"), arg("weight"), arg("reduction"), arg("ignore_index"), arg("label_smoothing"));
}

}  // namespace plugflow::python
