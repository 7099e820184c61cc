// The reduction family (plugflow/ops_reduction.h) as plugflow.X functions and Tensor methods:
// norm, the composite ops of core/opdefs/composite.yaml (logsumexp), the variants of
// core/opdefs/moments.yaml (var, std, var_mean, std_mean) and the ops along one dim of
// core/opdefs/along_dim.yaml (cumsum(_), cumprod(_), softmax, log_softmax).
// (all/any are bound with the other reductions in tensor_bindings.cpp.) Runs after
// bind_tensor: methods are added to the existing class.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
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

// var/std's overloads in PyTorch 1.13: (unbiased=True), (dim, unbiased=True, keepdim=False) and
// (dim, *, correction, keepdim=False), dim None included. An argument left out arrives as
// Ellipsis (`absent`): the first overload takes neither keepdim nor correction.
struct VarArgs {
  Shape dims;
  double correction = 1;
  bool keepdim = false;
};

const py::handle absent = Py_Ellipsis;

VarArgs var_args(const char* fn, py::handle dim, py::handle unbiased, py::handle keepdim, py::handle correction) {
  VarArgs r;
  const bool unbiased_overload = dim.is(absent) || PyBool_Check(dim.ptr());  // var(), var(True)
  if (unbiased_overload) {
    PF_CHECK_T(keepdim.is(absent) && correction.is(absent) && !(PyBool_Check(dim.ptr()) && !unbiased.is(absent)),
               TypeError, fn, "() received an invalid combination of arguments (", fn,
               "(input, unbiased) takes no dim, keepdim or correction)");
    if (PyBool_Check(dim.ptr())) unbiased = dim;
  }
  if (!unbiased.is(absent)) {
    PF_CHECK_T(correction.is(absent), TypeError, fn,
               "() received an invalid combination of arguments - got both 'unbiased' and 'correction'");
    PF_CHECK_T(PyBool_Check(unbiased.ptr()), TypeError, fn, "(): argument 'unbiased' must be bool, not ",
               type_name(unbiased));
    r.correction = unbiased.ptr() == Py_True ? 1 : 0;
  }
  if (!correction.is(absent))
    r.correction = static_cast<double>(to_int(correction, fn, "correction"));  // PyTorch 1.13's is an int
  if (!keepdim.is(absent)) {
    PF_CHECK_T(PyBool_Check(keepdim.ptr()), TypeError, fn, "(): argument 'keepdim' must be bool, not ",
               type_name(keepdim));
    r.keepdim = keepdim.ptr() == Py_True;
  }
  if (!unbiased_overload) r.dims = dims_arg(dim, fn);
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

// The Python arguments of a composite op after its input (core/opdefs/composite.yaml), each
// passed to the op as the attribute of its name.
enum class ArgType {
  IntList,  // an int or a tuple/list of ints, as a Shape
  Int,
  Bool,
  Float,
};
struct CompositeArg {
  const char* name;
  ArgType type;
  std::optional<AttrValue> fallback = std::nullopt;  // the default; none: required
};

AttrValue composite_arg(const char* fn, const CompositeArg& arg, py::handle v) {
  switch (arg.type) {
    case ArgType::IntList:  // (None selects PyTorch's named-dims overload, which plugflow has not)
      PF_CHECK(!v.is_none(), "Please look up dimensions by name, got: name = None.");
      return dims_arg(v, fn);
    case ArgType::Int: return to_int(v, fn, arg.name);
    case ArgType::Bool:
      PF_CHECK_T(PyBool_Check(v.ptr()), TypeError, fn, "(): argument '", arg.name, "' must be bool, not ",
                 type_name(v));
      return v.ptr() == Py_True;
    case ArgType::Float:
      PF_CHECK_T(!PyBool_Check(v.ptr()) && (PyFloat_Check(v.ptr()) || PyLong_Check(v.ptr())), TypeError, fn,
                 "(): argument '", arg.name, "' must be float, not ", type_name(v));
      return v.cast<double>();
  }
  PF_THROW(Error, "unknown argument type");
}

// Python's matching of positional and keyword arguments against the declared ones.
Attrs composite_attrs(const char* fn, const std::vector<CompositeArg>& spec, const py::args& args,
                      const py::kwargs& kwargs) {
  PF_CHECK_T(args.size() <= spec.size(), TypeError, fn, "() takes at most ", spec.size() + 1, " arguments (",
             args.size() + 1, " given)");
  for (const auto& [key, value] : kwargs) {
    const std::string k = py::str(key);
    const auto it = std::find_if(spec.begin(), spec.end(), [&](const CompositeArg& a) { return k == a.name; });
    PF_CHECK_T(it != spec.end(), TypeError, fn, "() got an unexpected keyword argument '", k, "'");
    PF_CHECK_T(static_cast<size_t>(it - spec.begin()) >= args.size(), TypeError, fn,
               "() got multiple values for argument '", k, "'");
  }
  Attrs attrs;
  for (size_t i = 0; i < spec.size(); ++i) {
    const CompositeArg& a = spec[i];
    if (i < args.size()) attrs.set(a.name, composite_arg(fn, a, args[i]));
    else if (kwargs.contains(a.name)) attrs.set(a.name, composite_arg(fn, a, kwargs[a.name]));
    else if (a.fallback) attrs.set(a.name, *a.fallback);
    else PF_THROW(TypeError, fn, "() missing required argument '", a.name, "'");
  }
  return attrs;
}

// One output as a tensor, several as a tuple.
py::object tuple_or_tensor(std::vector<Tensor> r) {
  if (r.size() == 1) return py::cast(std::move(r[0]));
  py::tuple t(r.size());
  for (size_t i = 0; i < r.size(); ++i) t[i] = py::cast(std::move(r[i]));
  return t;
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

  // ---- the reductions with several outputs (core/opdefs/moments.yaml) ------------------------------
  // Each variant: torch.X and/or Tensor.X with PyTorch's var/std arguments; a tuple when it
  // returns several outputs.
  struct MomentsVariant {
    const char* name;
    bool function, method;
  };
#define PF_X(name, kernel, fixed, mask, node, function, method) MomentsVariant{name, function, method},
  for (const MomentsVariant& v : {PF_OPDEFS_MOMENT_VARIANTS(PF_X)}) {
#undef PF_X
    const char* name = v.name;
    auto f = [name](const Tensor& t, py::handle dim, py::handle unbiased, py::handle keepdim, py::handle correction) {
      const VarArgs a = var_args(name, dim, unbiased, keepdim, correction);
      return tuple_or_tensor(ops::moments(name, t, a.dims, a.correction, a.keepdim));
    };
    auto bind = [&](auto... self_arg) {
      return py::cpp_function(f, py::name(name), self_arg..., py::arg("dim") = absent, py::arg("unbiased") = absent,
                              py::arg("keepdim") = absent, py::kw_only(), py::arg("correction") = absent);
    };
    if (v.method) cls.attr(name) = bind(py::is_method(cls));
    if (v.function) {
      m.attr(name) = bind(py::arg("input"));
      public_names.attr("append")(name);
    }
  }

  // ---- norm --------------------------------------------------------------------------------------
  // ---- the composite ops (core/opdefs/composite.yaml): torch.X(input, ...) / Tensor.X(...) ------------
  struct PyComposite {
    const char* name;
    bool function, method;
    std::vector<CompositeArg> args;
  };
#define PF_X(name, function, method, args) PyComposite{name, function, method, args},
  for (const PyComposite& c : {PF_OPDEFS_PY_COMPOSITE(PF_X)}) {
#undef PF_X
    auto f = [name = c.name, args = c.args](const Tensor& t, const py::args& a, const py::kwargs& kw) {
      return ops::composite(name, t, composite_attrs(name, args, a, kw));
    };
    if (c.method) cls.attr(c.name) = py::cpp_function(f, py::name(c.name), py::is_method(cls));
    if (c.function) {
      m.attr(c.name) = py::cpp_function(f, py::name(c.name), py::arg("input"));
      public_names.attr("append")(c.name);
    }
  }
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
