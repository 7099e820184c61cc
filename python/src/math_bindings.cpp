// Bindings of the `math` family (plugflow/ops_math.h) plus `out=` and the in-place aliases the
// Tensor API was missing. Runs after bind_tensor: it adds methods to the existing Tensor class
// (as autograd_bindings.cpp does), appends its public names to _C._public_functions, and wraps
// already-bound functions (add, mm, sum, ...) to accept PyTorch's `out=` keyword.
//
// The private _C._gelu, _C._softplus, ... back plugflow.nn.functional (python/plugflow/nn).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "opdefs.h"
#include "plugflow/autocast.h"
#include "plugflow/autograd.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace py = pybind11;

namespace plugflow::python {
namespace {

namespace ag = plugflow::autograd;

const Tensor* as_tensor(py::handle h) {
  if (!py::isinstance<Tensor>(h)) return nullptr;
  return &h.cast<const Tensor&>();
}
Tensor& tensor_ref(py::handle h) { return h.cast<Tensor&>(); }
std::string type_name(py::handle h) { return Py_TYPE(h.ptr())->tp_name; }

Scalar number_arg(py::handle h, const char* fn, const char* arg) {
  Scalar s;
  if (!to_scalar(h, s)) PF_THROW(TypeError, fn, "(): argument '", arg, "' must be Number, not ", type_name(h));
  return s;
}

// ============================================================================================
// out=
// ============================================================================================

int category(DType t) { return t == DType::Bool ? 0 : is_floating(t) ? 2 : 1; }

// Resizes `out` in place to `shape` (contiguous), as PyTorch's resize_ does for out=
// arguments, warning when a non-empty tensor changes shape.
void resize_out(const Tensor& out, const Shape& shape) {
  if (out.sizes() == shape) return;
  if (out.numel() != 0) {
    const std::string msg = "An output with one or more elements was resized since it had shape " +
                            shape_str(out.sizes()) + ", which does not match the required output shape " +
                            shape_str(shape) +
                            ". This behavior is deprecated, and in a future PyTorch release outputs will not be "
                            "resized unless they have zero elements. You can explicitly reuse an out tensor t by "
                            "resizing it, inplace, to zero elements with t.resize_(0).";
    if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) != 0) throw py::error_already_set();
  }
  Tensor o = out;
  ops::resize_(o, shape);
}

// How a function treats out's dtype.
enum class OutKind {
  Cast,        // the result is cast to out's dtype when PyTorch's can_cast allows (elementwise)
  SameDtype,   // out must have the result's dtype (PyTorch's unary ops that keep their dtype)
  SameDtypeForNumber,  // SameDtype when the second operand is a number, else Cast (pow, clamp_min)
  Exact,       // out must have the result's dtype (matrix products)
  SameAsInput, // amax/amin: out must have the input's dtype
  Accumulate,  // sum/prod: computed in out's dtype (the dtype argument defaults to it)
  Mean,        // mean: computed in out's dtype when it is floating
  Floating,    // logsumexp: out must be floating; the input is cast to its dtype first
  Logical,     // all/any: out must be bool or uint8
};

// Writes `result` into `out` with PyTorch's out= rules.
void write_out(const std::string& fn, const Tensor& out, const Tensor& result, OutKind kind) {
  // (PyTorch 1.13's floor_divide has no derivative, so its out= accepts inputs that require grad)
  PF_CHECK(!(ag::is_grad_enabled() && ag::requires_grad(result)) || fn == "floor_divide", fn,
           "(): functions with out=... arguments don't support automatic differentiation, but one of the arguments "
           "requires grad.");
  PF_CHECK(out.device() == result.device(), "Expected out tensor to have device ", result.device().str(),
           ", but got ", out.device().str(), " instead");
  ops::check_no_internal_overlap(out);  // before any resize, as PyTorch's TensorIterator
  if (kind == OutKind::SameDtype)
    PF_CHECK(out.dtype() == result.dtype(), "Found dtype ", scalar_type_name(out.dtype()), " but expected ",
             scalar_type_name(result.dtype()));
  else if (kind == OutKind::Exact)
    PF_CHECK(out.dtype() == result.dtype(), "Expected out tensor to have dtype ", cpp_type_name(result.dtype()),
             ", but got ", cpp_type_name(out.dtype()), " instead");
  else if (kind == OutKind::Logical)
    PF_CHECK(out.dtype() == DType::Bool || out.dtype() == DType::UInt8, fn,
             " only supports bool tensor for result, got: ", scalar_type_name(out.dtype()));
  else if (kind == OutKind::SameAsInput)
    PF_CHECK(out.dtype() == result.dtype(), "Expected the dtype for input and out to match, but got ",
             scalar_type_name(result.dtype()), " for input's dtype and ", scalar_type_name(out.dtype()),
             " for out's dtype.");
  else
    PF_CHECK(category(result.dtype()) <= category(out.dtype()), "result type ", scalar_type_name(result.dtype()),
             " can't be cast to the desired output type ", scalar_type_name(out.dtype()));
  resize_out(out, result.sizes());
  Tensor dst = out;
  ops::copy_(dst, result);
}

// The out= path: the original computes, the result is written into out, and out (the same
// Python object) is returned.
py::cpp_function out_path(py::object orig, std::string fn, OutKind kind, bool needs_dim) {
  return py::cpp_function(
      [orig, fn, kind, needs_dim](py::args args, py::kwargs kwargs) -> py::object {
        py::object out = kwargs["out"];
        // sum/prod/mean's no-dim overload X(input, *, dtype) and var/std's X(input, unbiased) have no
        // out=: only the overloads with a dim (None included) have
        const bool dim_given = (args.size() >= 2 && !PyBool_Check(args[1].ptr())) || kwargs.contains("dim");
        if (needs_dim && !dim_given)
          PF_THROW(TypeError, fn, "() received an invalid combination of arguments - got out= without dim (only ",
                   fn, "'s overloads with a dim take out=)");
        py::dict rest = py::reinterpret_steal<py::dict>(PyDict_Copy(kwargs.ptr()));
        PyDict_DelItemString(rest.ptr(), "out");
        const Tensor* out_t = as_tensor(out);
        if (out_t && PyDict_GetItemString(rest.ptr(), "dtype") == nullptr &&
            (kind == OutKind::Accumulate || (kind == OutKind::Mean && is_floating(out_t->dtype()))))
          rest["dtype"] = py::cast(out_t->dtype());
        py::tuple call_args = args;
        if (out_t && kind == OutKind::Floating) {
          PF_CHECK(is_floating(out_t->dtype()), fn, "(): Expected floating point type for result tensor, but got: ",
                   scalar_type_name(out_t->dtype()));
          const char* input_key = PyDict_GetItemString(rest.ptr(), "input") != nullptr ? "input" : nullptr;
          const py::handle input = input_key ? rest[input_key] : (args.size() > 0 ? args[0] : py::handle());
          if (const Tensor* in = input ? as_tensor(input) : nullptr) {
            py::object cast = py::cast(ops::to(*in, std::nullopt, out_t->dtype()));
            if (input_key) {
              rest[input_key] = cast;
            } else {
              call_args = py::tuple(args.size());
              call_args[0] = cast;
              for (size_t i = 1; i < args.size(); ++i) call_args[i] = args[i];
            }
          }
        }
        PyObject* r;
        {
          autocast::DisabledGuard no_autocast;  // PyTorch autocasts no out= variant
          r = PyObject_Call(orig.ptr(), call_args.ptr(), rest.ptr());
        }
        if (r == nullptr) throw py::error_already_set();
        py::object result = py::reinterpret_steal<py::object>(r);
        if (out.is_none()) return result;
        if (!out_t) PF_THROW(TypeError, fn, "(): argument 'out' must be Tensor, not ", type_name(out));
        OutKind k = kind;
        if (k == OutKind::SameDtypeForNumber) {
          py::handle second = args.size() > 1 ? args[1] : py::handle();
          for (const char* name : {"exponent", "other", "min", "max"})
            if (!second && rest.contains(name)) second = rest[name];
          k = second && as_tensor(second) ? OutKind::Cast : OutKind::SameDtype;
        }
        write_out(fn, *out_t, result.cast<const Tensor&>(), k);
        return out;
      },
      py::name(fn.c_str()));
}

// The function that replaces m.<name>: a vectorcall straight into the original unless an
// `out` keyword is present (self = (original, out path)); costs a few ns per call.
PyObject* out_dispatch(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  if (kwnames != nullptr) {
    const Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; ++i)
      if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "out") == 0)
        return PyObject_Vectorcall(PyTuple_GET_ITEM(self, 1), args, nargsf, kwnames);
  }
  return PyObject_Vectorcall(PyTuple_GET_ITEM(self, 0), args, nargsf, kwnames);
}

// Rebinds m.<name> so that it accepts PyTorch's `out=`.
void add_out_param(py::module_& m, const char* name, OutKind kind) {
  if (!py::hasattr(m, name)) return;
  // The reductions with PyTorch's no-dim overload (core/opdefs/reductions.yaml, dim_optional;
  // the variants of core/opdefs/moments.yaml).
  static const std::set<std::string> kDimOptional = [] {
    std::set<std::string> names;
#define PF_X(op, dtype_arg, dim_optional, one_dim) \
  if (dim_optional) names.insert(op);
    PF_OPDEFS_PY_REDUCTION(PF_X)
#undef PF_X
#define PF_X(op, ...) names.insert(op);
    PF_OPDEFS_MOMENT_VARIANTS(PF_X)
#undef PF_X
    return names;
  }();
  py::object orig = m.attr(name);
  py::object slow = out_path(orig, name, kind, kDimOptional.count(name) > 0);
  py::tuple data = py::make_tuple(orig, slow);
  // The method table entry must outlive the function: one per wrapped name, kept forever.
  auto* def = new PyMethodDef{};
  def->ml_name = (new std::string(name))->c_str();
  def->ml_meth = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&out_dispatch));
  def->ml_flags = METH_FASTCALL | METH_KEYWORDS;
  def->ml_doc = nullptr;
  PyObject* f = PyCFunction_NewEx(def, data.ptr(), m.attr("__name__").ptr());
  if (f == nullptr) throw py::error_already_set();
  m.attr(name) = py::reinterpret_steal<py::object>(f);
}

// ============================================================================================
// argument helpers
// ============================================================================================

// clamp's bounds: None, numbers, or tensors (a number beside a tensor bound becomes a 0-d
// tensor, which keeps the tensor's dtype in promotion).
Tensor clamp_dispatch(const Tensor& t, py::handle min, py::handle max, const char* fn) {
  const Tensor* tmin = as_tensor(min);
  const Tensor* tmax = as_tensor(max);
  if (tmin || tmax) {
    auto bound = [&](py::handle h, const Tensor* tb, const char* arg) -> Tensor {
      if (tb) return *tb;
      if (h.is_none()) return Tensor();
      const Scalar s = number_arg(h, fn, arg);
      return ops::scalar_tensor(s, s.default_dtype(), t.device());
    };
    return ops::clamp(t, bound(min, tmin, "min"), bound(max, tmax, "max"));
  }
  std::optional<Scalar> lo, hi;
  if (!min.is_none()) lo = number_arg(min, fn, "min");
  if (!max.is_none()) hi = number_arg(max, fn, "max");
  return ops::clamp(t, lo, hi);
}

void clamp_dispatch_(Tensor& t, py::handle min, py::handle max, const char* fn) {
  const Tensor* tmin = as_tensor(min);
  const Tensor* tmax = as_tensor(max);
  if (tmin || tmax) {
    auto bound = [&](py::handle h, const Tensor* tb, const char* arg) -> Tensor {
      if (tb) return *tb;
      if (h.is_none()) return Tensor();
      const Scalar s = number_arg(h, fn, arg);
      return ops::scalar_tensor(s, s.default_dtype(), t.device());
    };
    ops::clamp_(t, bound(min, tmin, "min"), bound(max, tmax, "max"));
    return;
  }
  std::optional<Scalar> lo, hi;
  if (!min.is_none()) lo = number_arg(min, fn, "min");
  if (!max.is_none()) hi = number_arg(max, fn, "max");
  ops::clamp_(t, lo, hi);
}

Tensor lerp_dispatch(const Tensor& t, const Tensor& end, py::handle weight) {
  if (const Tensor* w = as_tensor(weight)) return ops::lerp(t, end, *w);
  return ops::lerp(t, end, number_arg(weight, "lerp", "weight"));
}

void lerp_dispatch_(Tensor& t, const Tensor& end, py::handle weight) {
  if (const Tensor* w = as_tensor(weight)) ops::lerp_(t, end, *w);
  else ops::lerp_(t, end, number_arg(weight, "lerp_", "weight"));
}

// The einsum operands: einsum(eq, a, b), einsum(eq, [a, b]), or the sublist format
// einsum(a, [0, 1], b, [1, 2], [0, 2]) (ints in [0, 52) and Ellipsis).
std::string sublist_to_equation(py::handle sub) {
  std::string eq;
  for (py::handle item : sub) {
    if (item.ptr() == Py_Ellipsis) {
      eq += "...";
      continue;
    }
    const int64_t n = item.cast<int64_t>();
    PF_CHECK_T(n >= 0 && n < 52, ValueError, "einsum(): subscript in subscript list is not within the valid range [0, 52)");
    eq += static_cast<char>(n < 26 ? 'A' + n : 'a' + (n - 26));
  }
  return eq;
}

Tensor einsum_dispatch(const py::args& args) {
  PF_CHECK_T(args.size() >= 2, ValueError,
             "einsum(): must specify the equation string and at least one operand, or at least one operand and its "
             "subscripts list");
  std::vector<Tensor> operands;
  if (PyUnicode_Check(args[0].ptr())) {
    const std::string eq = args[0].cast<std::string>();
    if (args.size() == 2 && !as_tensor(args[1])) {  // einsum(eq, [a, b])
      for (py::handle h : args[1]) {
        const Tensor* t = as_tensor(h);
        PF_CHECK_T(t, TypeError, "einsum(): expected Tensor as operand, but got ", type_name(h));
        operands.push_back(*t);
      }
    } else {
      for (size_t i = 1; i < args.size(); ++i) {
        const Tensor* t = as_tensor(args[i]);
        PF_CHECK_T(t, TypeError, "expected Tensor as element ", i - 1, " in argument 1, but got ",
                   type_name(args[i]));
        operands.push_back(*t);
      }
    }
    py::gil_scoped_release nogil;
    return ops::einsum(eq, operands);
  }
  // Sublist format.
  std::string eq;
  const size_t n = args.size();
  const size_t pairs = n / 2;
  for (size_t i = 0; i < pairs; ++i) {
    const Tensor* t = as_tensor(args[2 * i]);
    PF_CHECK_T(t, TypeError, "einsum(): expected Tensor as operand ", i, ", but got ", type_name(args[2 * i]));
    operands.push_back(*t);
    if (i > 0) eq += ",";
    eq += sublist_to_equation(args[2 * i + 1]);
  }
  if (n % 2 == 1) eq += "->" + sublist_to_equation(args[n - 1]);
  py::gil_scoped_release nogil;
  return ops::einsum(eq, operands);
}

Tensor tensordot_dispatch(const Tensor& a, const Tensor& b, py::handle dims) {
  if (const Tensor* d = as_tensor(dims)) {  // a 0-d int tensor, or a (2, k) tensor of dims
    if (d->dim() == 0) return ops::tensordot(a, b, py::int_(py::cast(*d)).cast<int64_t>());
    py::list rows = py::cast(*d).attr("tolist")();
    return tensordot_dispatch(a, b, rows);
  }
  if (PyLong_Check(dims.ptr())) return ops::tensordot(a, b, dims.cast<int64_t>());
  if (PyTuple_Check(dims.ptr()) || PyList_Check(dims.ptr())) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(dims);
    PF_CHECK(seq.size() == 2, "tensordot expects dims to be a pair of dimension lists, got ", seq.size(), " items");
    auto dim_list = [](py::handle h, const char* arg) {
      if (PyLong_Check(h.ptr())) PF_THROW(TypeError, "tensordot(): argument '", arg,
                                          "' (position 3) must be tuple of ints, not int");
      return h.cast<Shape>();
    };
    return ops::tensordot(a, b, dim_list(seq[0], "dims_self"), dim_list(seq[1], "dims_other"));
  }
  PF_THROW(TypeError, "tensordot(): dims must be an int, a pair of dimension lists or a tensor, not ", type_name(dims));
}

Attrs attrs_with(std::initializer_list<std::pair<const char*, AttrValue>> items) { return Attrs(items); }

// f(input, inplace): the in-place form returns the input object itself.
py::object maybe_inplace(py::object input, bool inplace, const std::string& name, const Attrs& attrs) {
  Tensor& t = tensor_ref(input);
  if (inplace) {
    ops::activation_(name, t, attrs);
    return input;
  }
  return py::cast(ops::activation(name, t, attrs));
}

constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

Attrs celu_attrs(double alpha) {
  PF_CHECK(alpha != 0.0, "ZeroDivisionError: alpha cannot be 0 for CELU");
  return attrs_with({{"alpha", alpha}, {"scale", 1.0}, {"input_scale", 1.0 / alpha}});
}

}  // namespace

void bind_math(py::module_& m) {
  // out= of the functions written in Python (plugflow/_composite.py): the result's dtype, resized.
  m.def("_write_out", [](const std::string& fn, const Tensor& out, const Tensor& result) {
    write_out(fn, out, result, OutKind::Exact);
  });

  py::object cls = m.attr("Tensor");
  std::vector<std::string> names;
  // Tensor.<name> = f (a method: self first).
  auto method = [&](const char* name, py::cpp_function f) { cls.attr(name) = f; };
  auto function = [&](const char* name, py::cpp_function f) {
    m.attr(name) = f;
    names.emplace_back(name);
  };
  using py::arg;

  // ---- clamp ----------------------------------------------------------------------------------
  for (const char* name : {"clamp", "clip"}) {
    auto f = [name](const Tensor& t, py::handle min, py::handle max) { return clamp_dispatch(t, min, max, name); };
    function(name, py::cpp_function(f, py::name(name), arg("input"), arg("min") = py::none(), arg("max") = py::none()));
    method(name, py::cpp_function(f, py::name(name), py::is_method(cls), arg("min") = py::none(),
                                  arg("max") = py::none()));
    const std::string inplace = std::string(name) + "_";
    method(inplace.c_str(), py::cpp_function(
                                [name](py::object self, py::handle min, py::handle max) {
                                  clamp_dispatch_(tensor_ref(self), min, max, name);
                                  return self;
                                },
                                py::name(inplace.c_str()), py::is_method(cls), arg("min") = py::none(),
                                arg("max") = py::none()));
    function(inplace.c_str(), py::cpp_function(
                                  [name](py::object self, py::handle min, py::handle max) {
                                    clamp_dispatch_(tensor_ref(self), min, max, name);
                                    return self;
                                  },
                                  py::name(inplace.c_str()), arg("input"), arg("min") = py::none(),
                                  arg("max") = py::none()));
  }
  {
    // PyTorch's clamp_min / clamp_max fill NaN for a NaN number bound where clamp(min=NaN)
    // ignores it: the bound given twice is clamp's both-bounds rule, which fills NaN.
    auto other_bound = [](py::handle bound) -> py::object {
      return PyFloat_Check(bound.ptr()) && std::isnan(PyFloat_AsDouble(bound.ptr())) ? py::reinterpret_borrow<py::object>(bound)
                                                                                     : py::none();
    };
    auto lo = [other_bound](const Tensor& t, py::handle min) {
      PF_CHECK_T(!min.is_none(), TypeError, "clamp_min(): argument 'min' must be Number, not NoneType");
      return clamp_dispatch(t, min, other_bound(min), "clamp_min");
    };
    auto hi = [other_bound](const Tensor& t, py::handle max) {
      PF_CHECK_T(!max.is_none(), TypeError, "clamp_max(): argument 'max' must be Number, not NoneType");
      return clamp_dispatch(t, other_bound(max), max, "clamp_max");
    };
    auto lo_ = [other_bound](py::object self, py::handle min) {
      PF_CHECK_T(!min.is_none(), TypeError, "clamp_min_(): argument 'min' must be Number, not NoneType");
      clamp_dispatch_(tensor_ref(self), min, other_bound(min), "clamp_min_");
      return self;
    };
    auto hi_ = [other_bound](py::object self, py::handle max) {
      PF_CHECK_T(!max.is_none(), TypeError, "clamp_max_(): argument 'max' must be Number, not NoneType");
      clamp_dispatch_(tensor_ref(self), other_bound(max), max, "clamp_max_");
      return self;
    };
    function("clamp_min", py::cpp_function(lo, py::name("clamp_min"), arg("input"), arg("min")));
    function("clamp_max", py::cpp_function(hi, py::name("clamp_max"), arg("input"), arg("max")));
    function("clamp_min_", py::cpp_function(lo_, py::name("clamp_min_"), arg("input"), arg("min")));
    function("clamp_max_", py::cpp_function(hi_, py::name("clamp_max_"), arg("input"), arg("max")));
    method("clamp_min", py::cpp_function(lo, py::name("clamp_min"), py::is_method(cls), arg("min")));
    method("clamp_max", py::cpp_function(hi, py::name("clamp_max"), py::is_method(cls), arg("max")));
    method("clamp_min_", py::cpp_function(lo_, py::name("clamp_min_"), py::is_method(cls), arg("min")));
    method("clamp_max_", py::cpp_function(hi_, py::name("clamp_max_"), py::is_method(cls), arg("max")));
  }

  // ---- lerp, addcmul, addcdiv -----------------------------------------------------------------
  function("lerp", py::cpp_function(&lerp_dispatch, py::name("lerp"), arg("input"), arg("end"), arg("weight")));
  method("lerp", py::cpp_function(&lerp_dispatch, py::name("lerp"), py::is_method(cls), arg("end"), arg("weight")));
  method("lerp_", py::cpp_function(
                      [](py::object self, const Tensor& end, py::handle weight) {
                        lerp_dispatch_(tensor_ref(self), end, weight);
                        return self;
                      },
                      py::name("lerp_"), py::is_method(cls), arg("end"), arg("weight")));
  for (const bool is_div : {false, true}) {
    const char* name = is_div ? "addcdiv" : "addcmul";
    const char* name_ = is_div ? "addcdiv_" : "addcmul_";
    auto f = [is_div, name](const Tensor& self, const Tensor& t1, const Tensor& t2, py::handle value) {
      const Scalar v = number_arg(value, name, "value");
      return is_div ? ops::addcdiv(self, t1, t2, v) : ops::addcmul(self, t1, t2, v);
    };
    auto f_ = [is_div, name_](py::object self, const Tensor& t1, const Tensor& t2, py::handle value) {
      const Scalar v = number_arg(value, name_, "value");
      Tensor& t = tensor_ref(self);
      if (is_div) ops::addcdiv_(t, t1, t2, v);
      else ops::addcmul_(t, t1, t2, v);
      return self;
    };
    function(name, py::cpp_function(f, py::name(name), arg("input"), arg("tensor1"), arg("tensor2"), py::kw_only(),
                                    arg("value") = 1));
    method(name, py::cpp_function(f, py::name(name), py::is_method(cls), arg("tensor1"), arg("tensor2"),
                                  py::kw_only(), arg("value") = 1));
    method(name_, py::cpp_function(f_, py::name(name_), py::is_method(cls), arg("tensor1"), arg("tensor2"),
                                   py::kw_only(), arg("value") = 1));
  }

  // ---- activations ------------------------------------------------------------------------------
  // relu through ops::activation (PyTorch refuses bool inputs).
  {
    auto relu = [](const Tensor& t) { return ops::activation("relu", t); };
    auto relu_ = [](py::object self) {
      ops::activation_("relu", tensor_ref(self));
      return self;
    };
    function("relu", py::cpp_function(relu, py::name("relu"), arg("input")));
    method("relu", py::cpp_function(relu, py::name("relu"), py::is_method(cls)));
    method("relu_", py::cpp_function(relu_, py::name("relu_"), py::is_method(cls)));
  }
  for (const char* name : {"relu", "sigmoid", "tanh"}) {
    const std::string inplace = std::string(name) + "_";
    const std::string n = name;
    function(inplace.c_str(), py::cpp_function(
                                  [n](py::object self) {
                                    ops::activation_(n, tensor_ref(self));
                                    return self;
                                  },
                                  py::name(inplace.c_str()), arg("input")));
  }
  {
    auto selu = [](const Tensor& t) {
      return ops::activation("elu", t, attrs_with({{"alpha", kSeluAlpha}, {"scale", kSeluScale}, {"input_scale", 1.0}}));
    };
    auto selu_ = [](py::object self) {
      ops::activation_("elu", tensor_ref(self),
                       attrs_with({{"alpha", kSeluAlpha}, {"scale", kSeluScale}, {"input_scale", 1.0}}));
      return self;
    };
    auto celu = [](const Tensor& t, double alpha) { return ops::activation("elu", t, celu_attrs(alpha)); };
    auto celu_ = [](py::object self, double alpha) {
      ops::activation_("elu", tensor_ref(self), celu_attrs(alpha));
      return self;
    };
    function("selu", py::cpp_function(selu, py::name("selu"), arg("input")));
    function("selu_", py::cpp_function(selu_, py::name("selu_"), arg("input")));
    function("celu", py::cpp_function(celu, py::name("celu"), arg("input"), arg("alpha") = 1.0));
    function("celu_", py::cpp_function(celu_, py::name("celu_"), arg("input"), arg("alpha") = 1.0));
  }
  // Private backends of plugflow.nn.functional.
  m.def(
      "_activation",
      [](py::object input, const std::string& name, bool inplace) { return maybe_inplace(input, inplace, name, {}); },
      arg("input"), arg("name"), arg("inplace") = false);
  m.def(
      "_gelu",
      [](const Tensor& t, const std::string& approximate) {
        return ops::activation("gelu", t, attrs_with({{"approximate", approximate}}));
      },
      arg("input"), arg("approximate") = "none");
  m.def(
      "_softplus",
      [](const Tensor& t, double beta, double threshold) {
        return ops::activation("softplus", t, attrs_with({{"beta", beta}, {"threshold", threshold}}));
      },
      arg("input"), arg("beta") = 1.0, arg("threshold") = 20.0);
  m.def(
      "_leaky_relu",
      [](py::object input, double slope, bool inplace) {
        return maybe_inplace(input, inplace, "leaky_relu", attrs_with({{"negative_slope", slope}}));
      },
      arg("input"), arg("negative_slope") = 0.01, arg("inplace") = false);
  m.def(
      "_elu",
      [](py::object input, double alpha, double scale, double input_scale, bool inplace) {
        return maybe_inplace(input, inplace, "elu",
                             attrs_with({{"alpha", alpha}, {"scale", scale}, {"input_scale", input_scale}}));
      },
      arg("input"), arg("alpha") = 1.0, arg("scale") = 1.0, arg("input_scale") = 1.0, arg("inplace") = false);
  m.def(
      "_hardtanh",
      [](py::object input, py::handle min_val, py::handle max_val, bool inplace) -> py::object {
        const Scalar lo = number_arg(min_val, "hardtanh", "min_val"), hi = number_arg(max_val, "hardtanh", "max_val");
        Tensor& t = tensor_ref(input);
        if (inplace) {
          ops::hardtanh_(t, lo, hi);
          return input;
        }
        return py::cast(ops::hardtanh(t, lo, hi));
      },
      arg("input"), arg("min_val") = -1.0, arg("max_val") = 1.0, arg("inplace") = false);

  // ---- linear algebra -----------------------------------------------------------------------------
  struct AddProduct {
    const char* name;
    const char* a;
    const char* b;
    Tensor (*fn)(const Tensor&, const Tensor&, const Tensor&, Scalar, Scalar);
  };
  for (AddProduct p : {AddProduct{"addmm", "mat1", "mat2", &ops::addmm}, AddProduct{"addmv", "mat", "vec", &ops::addmv},
                       AddProduct{"baddbmm", "batch1", "batch2", &ops::baddbmm},
                       AddProduct{"addbmm", "batch1", "batch2", &ops::addbmm}}) {
    auto fn = p.fn;
    const std::string name = p.name, name_ = name + "_";
    auto f = [fn, name](const Tensor& self, const Tensor& a, const Tensor& b, py::handle beta, py::handle alpha) {
      const Scalar be = number_arg(beta, name.c_str(), "beta"), al = number_arg(alpha, name.c_str(), "alpha");
      py::gil_scoped_release nogil;
      return fn(self, a, b, be, al);
    };
    auto f_ = [fn, name_](py::object self, const Tensor& a, const Tensor& b, py::handle beta, py::handle alpha) {
      const Scalar be = number_arg(beta, name_.c_str(), "beta"), al = number_arg(alpha, name_.c_str(), "alpha");
      Tensor& t = tensor_ref(self);
      {
        py::gil_scoped_release nogil;
        autocast::DisabledGuard no_autocast;  // in-place variants are not autocast (PyTorch's)
        const Tensor r = fn(t, a, b, be, al);
        PF_CHECK(r.sizes() == t.sizes(), "output with shape ", shape_str(t.sizes()),
                 " doesn't match the broadcast shape ", shape_str(r.sizes()));
        ops::copy_(t, r);
      }
      return self;
    };
    function(p.name, py::cpp_function(f, py::name(p.name), arg("input"), arg(p.a), arg(p.b), py::kw_only(),
                                      arg("beta") = 1, arg("alpha") = 1));
    method(p.name, py::cpp_function(f, py::name(p.name), py::is_method(cls), arg(p.a), arg(p.b), py::kw_only(),
                                    arg("beta") = 1, arg("alpha") = 1));
    method(name_.c_str(), py::cpp_function(f_, py::name(name_.c_str()), py::is_method(cls), arg(p.a), arg(p.b),
                                           py::kw_only(), arg("beta") = 1, arg("alpha") = 1));
  }
  struct Product {
    const char* name;
    const char* other;
    Tensor (*fn)(const Tensor&, const Tensor&);
  };
  for (Product p : {Product{"mv", "vec", &ops::mv}, Product{"dot", "tensor", &ops::dot},
                    Product{"vdot", "other", &ops::vdot}, Product{"outer", "vec2", &ops::outer},
                    Product{"ger", "vec2", &ops::outer}}) {
    auto fn = p.fn;
    auto f = [fn](const Tensor& a, const Tensor& b) {
      py::gil_scoped_release nogil;
      return fn(a, b);
    };
    function(p.name, py::cpp_function(f, py::name(p.name), arg("input"), arg(p.other)));
    method(p.name, py::cpp_function(f, py::name(p.name), py::is_method(cls), arg(p.other)));
  }
  function("einsum", py::cpp_function(&einsum_dispatch, py::name("einsum")));
  function("tensordot", py::cpp_function(&tensordot_dispatch, py::name("tensordot"), arg("a"), arg("b"),
                                         arg("dims") = 2));

  // ---- in-place aliases PyTorch has (core/opdefs/*.yaml's `aliases`) ---------------------------------
#define PF_X(alias, op, generic)                                     \
  if (!py::hasattr(cls, alias "_") && py::hasattr(cls, op "_")) \
    cls.attr(alias "_") = cls.attr(op "_");
  PF_OPDEFS_PY_ALIASES(PF_X)
#undef PF_X

  // ---- out= --------------------------------------------------------------------------------------------
  // The defined ops' from their definitions (`out:`, core/opdefs/*.yaml), then the others'.
#define PF_X(name, kind) add_out_param(m, name, OutKind::kind);
  PF_OPDEFS_PY_OUT(PF_X)
#undef PF_X
  for (const char* name : {"outer", "ger", "tensordot"}) add_out_param(m, name, OutKind::Cast);
  for (const char* name : {"clamp_min", "clamp_max"}) add_out_param(m, name, OutKind::SameDtypeForNumber);
  for (const char* name : {"matmul", "mm", "bmm", "addmm", "addmv", "mv", "baddbmm", "addbmm", "dot", "vdot"})
    add_out_param(m, name, OutKind::Exact);

  py::list public_names = m.attr("_public_functions");
  for (const auto& n : names) public_names.append(n);
}

}  // namespace plugflow::python
