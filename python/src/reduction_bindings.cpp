// The reduction family (plugflow/ops_reduction.h) as plugflow.X functions and Tensor methods:
// var, std, var_mean, std_mean, logsumexp, norm, and the ops along one dim of
// core/opdefs/along_dim.yaml (cumsum(_), cumprod(_), softmax, log_softmax).
// (all/any are bound with the other reductions in tensor_bindings.cpp.) Runs after
// bind_tensor: methods are added to the existing class.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "bindings.h"
#include "casters.h"
#include "opdefs.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace py = pybind11;

namespace plugflow::python {
namespace {

std::string type_name(py::handle h) { return Py_TYPE(h.ptr())->tp_name; }

bool is_int(py::handle h) { return !PyBool_Check(h.ptr()) && !PyFloat_Check(h.ptr()) && PyIndex_Check(h.ptr()); }

int64_t to_int(py::handle h, const char* fn, const char* arg) {
  if (!is_int(h)) PF_THROW(TypeError, fn, "(): argument '", arg, "' must be int, not ", type_name(h));
  return py::cast<int64_t>(py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr())));
}

// dim=None (every dim), an int, or a tuple/list of ints.
Shape dims_arg(py::handle h, const char* fn) {
  if (h.is_none()) return {};
  if (PyTuple_Check(h.ptr()) || PyList_Check(h.ptr())) {
    Shape out;
    py::sequence s = py::reinterpret_borrow<py::sequence>(h);
    for (size_t i = 0; i < s.size(); ++i) {
      py::object v = s[i];
      if (!is_int(v))
        PF_THROW(TypeError, fn, "(): argument 'dim' must be tuple of ints, but found element of type ", type_name(v),
                 " at pos ", i + 1);
      out.push_back(to_int(v, fn, "dim"));
    }
    return out;
  }
  if (!is_int(h)) PF_THROW(TypeError, fn, "(): argument 'dim' must be tuple of ints, not ", type_name(h));
  return {to_int(h, fn, "dim")};
}

// var/std's overloads: (unbiased: bool), (dim, unbiased=True, keepdim=False) and
// (dim=None, *, correction=None, keepdim=False).
struct VarArgs {
  Shape dims;
  double correction = 1;
};

VarArgs var_args(const char* fn, py::handle dim, py::handle unbiased, py::handle correction) {
  VarArgs r;
  py::handle d = dim;
  if (PyBool_Check(dim.ptr())) {  // var(True): the first positional is `unbiased`
    PF_CHECK_T(unbiased.is_none() && correction.is_none(), TypeError, fn,
               "() received an invalid combination of arguments");
    r.correction = dim.ptr() == Py_True ? 1 : 0;
    d = py::none();
  }
  if (!unbiased.is_none()) {
    PF_CHECK_T(correction.is_none(), TypeError, fn,
               "() received an invalid combination of arguments - got both 'unbiased' and 'correction'");
    PF_CHECK_T(PyBool_Check(unbiased.ptr()), TypeError, fn, "(): argument 'unbiased' must be bool, not ",
               type_name(unbiased));
    r.correction = unbiased.ptr() == Py_True ? 1 : 0;
  }
  if (!correction.is_none()) {
    PF_CHECK_T(!PyBool_Check(correction.ptr()) && (PyLong_Check(correction.ptr()) || PyFloat_Check(correction.ptr())),
               TypeError, fn, "(): argument 'correction' must be int, not ", type_name(correction));
    r.correction = correction.cast<double>();
  }
  r.dims = dims_arg(d, fn);
  return r;
}

std::optional<DType> dtype_arg(py::handle h, const char* fn) {
  if (h.is_none()) return std::nullopt;
  DType dt;
  if (!dtype_from_object(h, dt, /*convert=*/true))
    PF_THROW(TypeError, fn, "(): argument 'dtype' must be plugflow.dtype, not ", type_name(h));
  return dt;
}

// torch.norm's p: 'fro' (2 over the dims), a number, inf; 'nuc' is not supported.
double norm_p(py::handle p, py::handle dtype) {
  if (p.is_none()) return 2;
  if (PyUnicode_Check(p.ptr())) {
    const std::string s = p.cast<std::string>();
    if (s == "fro") {
      PF_CHECK_T(dtype.is_none(), ValueError, "dtype argument is not supported in frobenius norm");
      return 2;
    }
    PF_CHECK_T(s != "nuc", NotImplementedError, "norm(): the nuclear norm (p='nuc') is not supported");
    PF_THROW(Error, "only valid string values are 'fro' and 'nuc', found ", s);
  }
  if (PyBool_Check(p.ptr()) || !(PyLong_Check(p.ptr()) || PyFloat_Check(p.ptr()) || PyIndex_Check(p.ptr())))
    PF_THROW(TypeError, "norm(): argument 'p' must be Number or str, not ", type_name(p));
  const double v = PyFloat_AsDouble(p.ptr());  // ints, floats, numpy numbers, __index__ objects
  if (v == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

// p='fro' is PyTorch's frobenius_norm over at most 2 dims.
void check_frobenius_dims(py::handle p, py::handle dim) {
  if (!PyUnicode_Check(p.ptr()) || p.cast<std::string>() != "fro") return;
  if (!PyTuple_Check(dim.ptr()) && !PyList_Check(dim.ptr())) return;
  const auto n = static_cast<int64_t>(py::len(dim));
  PF_CHECK(n <= 2, "Expected at most 2 dimensions, but got ", n, " dimensions instead.");
}

py::object pair(std::pair<Tensor, Tensor> r) {
  return py::make_tuple(py::cast(std::move(r.first)), py::cast(std::move(r.second)));
}

}  // namespace

void bind_reduction(py::module_& m) {
  py::object cls = m.attr("Tensor");
  py::object public_names = m.attr("_public_functions");
  // f as Tensor.name(self, ...) and plugflow.name(input, ...).
  auto both = [&](const char* name, auto f, auto... extra) {
    cls.attr(name) = py::cpp_function(f, py::name(name), py::is_method(cls), extra...);
    m.attr(name) = py::cpp_function(f, py::name(name), py::arg("input"), extra...);
    public_names.attr("append")(name);
  };
  auto function = [&](const char* name, auto f, auto... extra) {
    m.attr(name) = py::cpp_function(f, py::name(name), py::arg("input"), extra...);
    public_names.attr("append")(name);
  };

  // ---- statistics ---------------------------------------------------------------------------
  both(
      "var",
      [](const Tensor& t, py::handle dim, py::handle unbiased, bool keepdim, py::handle correction) {
        const VarArgs a = var_args("var", dim, unbiased, correction);
        return ops::var(t, a.dims, a.correction, keepdim);
      },
      py::arg("dim") = py::none(), py::arg("unbiased") = py::none(), py::arg("keepdim") = false, py::kw_only(),
      py::arg("correction") = py::none());
  both(
      "std",
      [](const Tensor& t, py::handle dim, py::handle unbiased, bool keepdim, py::handle correction) {
        const VarArgs a = var_args("std", dim, unbiased, correction);
        return ops::std_dev(t, a.dims, a.correction, keepdim);
      },
      py::arg("dim") = py::none(), py::arg("unbiased") = py::none(), py::arg("keepdim") = false, py::kw_only(),
      py::arg("correction") = py::none());
  function(
      "var_mean",
      [](const Tensor& t, py::handle dim, py::handle unbiased, bool keepdim, py::handle correction) {
        const VarArgs a = var_args("var_mean", dim, unbiased, correction);
        return pair(ops::var_mean(t, a.dims, a.correction, keepdim));
      },
      py::arg("dim") = py::none(), py::arg("unbiased") = py::none(), py::arg("keepdim") = false, py::kw_only(),
      py::arg("correction") = py::none());
  function(
      "std_mean",
      [](const Tensor& t, py::handle dim, py::handle unbiased, bool keepdim, py::handle correction) {
        const VarArgs a = var_args("std_mean", dim, unbiased, correction);
        return pair(ops::std_mean(t, a.dims, a.correction, keepdim));
      },
      py::arg("dim") = py::none(), py::arg("unbiased") = py::none(), py::arg("keepdim") = false, py::kw_only(),
      py::arg("correction") = py::none());

  // ---- logsumexp, norm --------------------------------------------------------------------------
  both(
      "logsumexp",
      [](const Tensor& t, py::handle dim, bool keepdim) {
        // dim=() reduces every dim, as PyTorch's
        PF_CHECK_T(!dim.is_none(), TypeError, "logsumexp(): argument 'dim' must be tuple of ints, not NoneType");
        return ops::logsumexp(t, dims_arg(dim, "logsumexp"), keepdim);
      },
      py::arg("dim"), py::arg("keepdim") = false);
  cls.attr("norm") = py::cpp_function(
      [](const Tensor& t, py::handle p, py::handle dim, bool keepdim, py::handle dtype) {
        check_frobenius_dims(p, dim);
        return ops::norm(t, norm_p(p, dtype), dims_arg(dim, "norm"), keepdim, dtype_arg(dtype, "norm"));
      },
      py::name("norm"), py::is_method(cls), py::arg("p") = "fro", py::arg("dim") = py::none(),
      py::arg("keepdim") = false, py::arg("dtype") = py::none());
  function(
      "norm",
      [](const Tensor& t, py::handle p, py::handle dim, bool keepdim, py::handle out, py::handle dtype) -> py::object {
        check_frobenius_dims(p, dim);
        Tensor r = ops::norm(t, norm_p(p, dtype), dims_arg(dim, "norm"), keepdim, dtype_arg(dtype, "norm"));
        if (out.is_none()) return py::cast(std::move(r));
        Tensor& o = out.cast<Tensor&>();
        PF_CHECK(o.sizes() == r.sizes(), "norm(): out has shape ", shape_str(o.sizes()), " but the result has shape ",
                 shape_str(r.sizes()));
        ops::copy_(o, r);
        return py::reinterpret_borrow<py::object>(out);
      },
      py::arg("p") = "fro", py::arg("dim") = py::none(), py::arg("keepdim") = false, py::arg("out") = py::none(),
      py::arg("dtype") = py::none());

  // ---- the ops along one dim (core/opdefs/along_dim.yaml) -------------------------------------------
#define PF_X(name, ...) name,
  // scans: torch.X / Tensor.X(dim, *, dtype) and Tensor.X_
  for (const char* name : {PF_OPDEFS_SCAN(PF_X)}) {
    both(
        name,
        [name](const Tensor& t, py::handle dim, py::handle dtype) {
          const int64_t d = to_int(dim, name, "dim");
          return ops::along_dim(name, t, d, dtype_arg(dtype, name));
        },
        py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none());
    const std::string inplace = std::string(name) + "_";
    cls.attr(inplace.c_str()) = py::cpp_function(
        [name](py::object self, py::handle dim, py::handle dtype) {
          Tensor& t = self.cast<Tensor&>();
          const int64_t d = to_int(dim, name, "dim");
          const auto dt = dtype_arg(dtype, name);
          PF_CHECK(!dt || *dt == t.dtype(), "Bad in-place call: input tensor dtype ", cpp_type_name(t.dtype()),
                   " and output tensor dtype ", cpp_type_name(*dt), " should match");
          const Tensor r = ops::along_dim(name, t, d, dt);
          PF_CHECK(!is_floating(r.dtype()) || is_floating(t.dtype()), "result type ", dtype_name(r.dtype()),
                   " can't be cast to the desired output type ", dtype_name(t.dtype()));
          ops::copy_(t, r);
          return self;
        },
        py::name(inplace.c_str()), py::is_method(cls), py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none());
  }
  // the softmax family: torch.X / Tensor.X(dim, dtype)
  for (const char* name : {PF_OPDEFS_SOFTMAX(PF_X)}) {
    both(
        name,
        [name](const Tensor& t, py::handle dim, py::handle dtype) {
          PF_CHECK(!dim.is_none(), "Please look up dimensions by name, got: name = None.");
          const int64_t d = to_int(dim, name, "dim");
          return ops::along_dim(name, t, d, dtype_arg(dtype, name));
        },
        py::arg("dim"), py::arg("dtype") = py::none());
  }
#undef PF_X
}

}  // namespace plugflow::python
