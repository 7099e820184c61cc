// The indexing family from Python (plugflow/ops_indexing.h): gather, scatter(_add), index_select,
// index_add, masked_fill, masked_select, where, nonzero/argwhere, take, index_put, as plugflow.X
// functions and Tensor methods (in-place variants too), with PyTorch's names, defaults and out=.
//
// Also advanced indexing for Tensor.__getitem__/__setitem__ (tensor_bindings.cpp hands over any
// key that holds a tensor, a sequence or a bool): PyTorch's applySlicing, i.e. ints, slices, None
// and ... become views first and the tensor indices then go to ops::index / ops::index_put_.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "plugflow/autograd.h"
#include "plugflow/error.h"
#include "plugflow/graph.h"
#include "plugflow/ops.h"

namespace py = pybind11;

namespace plugflow::python {
namespace {

namespace ag = plugflow::autograd;
using Tensors = std::vector<Tensor>;

// _C._tensor(data, dtype=None, device=None); a kept reference (never released: no Python
// object may be destroyed after the interpreter finalizes).
PyObject* g_tensor_from_data = nullptr;

std::string type_name(py::handle h) { return Py_TYPE(h.ptr())->tp_name; }
const Tensor* as_tensor(py::handle h) { return py::isinstance<Tensor>(h) ? &h.cast<const Tensor&>() : nullptr; }

bool is_numpy_array(py::handle h) {
  static PyObject* ndarray = nullptr;
  if (ndarray == nullptr) {
    PyObject* np = PyImport_GetModule(py::str("numpy").ptr());
    if (np == nullptr) {
      PyErr_Clear();
      return false;
    }
    ndarray = PyObject_GetAttrString(np, "ndarray");  // kept
    Py_DECREF(np);
    if (ndarray == nullptr) {
      PyErr_Clear();
      return false;
    }
  }
  return PyObject_IsInstance(h.ptr(), ndarray) == 1;
}

// PyTorch's THPUtils_checkLong: Python ints (not bools) and numpy integers, 0-d integer arrays.
bool is_int_like(py::handle h) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o)) return false;
  if (PyLong_Check(o)) return true;
  if (PyFloat_Check(o) || PyUnicode_Check(o) || py::isinstance<Tensor>(h)) return false;
  if (!PyIndex_Check(o)) return false;
  if (is_numpy_array(h)) return py::cast<int>(h.attr("ndim")) == 0;
  return true;  // numpy integer scalars and other __index__ types
}

int64_t int_value(py::handle h) {
  py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr()));
  if (!i) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow != 0) PF_THROW(Error, "Overflow when unpacking long");
  return v;
}

bool is_sequence(py::handle h) {
  PyObject* o = h.ptr();
  return PySequence_Check(o) && !PyUnicode_Check(o) && !PyBytes_Check(o) && !py::isinstance<Tensor>(h);
}

// NumPy's heuristic, as PyTorch applies it: a short non-tuple sequence is a tuple of indices
// when it holds a tensor, a sequence, a slice, ... or None, and an index tensor otherwise.
bool treat_sequence_as_tuple(py::handle index) {
  PyObject* o = index.ptr();
  if (PyTuple_Check(o)) return true;
  if (!is_sequence(index)) return false;
  const Py_ssize_t n = PySequence_Size(o);
  if (n < 0) {
    PyErr_Clear();
    return false;
  }
  if (n >= 32) return false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    py::object item = py::reinterpret_steal<py::object>(PySequence_GetItem(o, i));
    if (!item) {
      PyErr_Clear();
      return false;
    }
    if (py::isinstance<Tensor>(item) || PySequence_Check(item.ptr()) || PySlice_Check(item.ptr()) ||
        item.ptr() == Py_Ellipsis || item.ptr() == Py_None)
      return true;
  }
  return false;
}

py::tuple wrap_tuple(py::handle index) {
  if (treat_sequence_as_tuple(index)) {
    PyObject* t = PySequence_Tuple(index.ptr());
    if (t == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::tuple>(t);
  }
  return py::make_tuple(index);
}

// One element of an index tuple that makes the indexing advanced.
bool is_advanced_item(py::handle h) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o)) return true;
  if (const Tensor* t = as_tensor(h))
    return !(t->dim() == 0 && is_integral(t->dtype(), /*include_bool=*/false) && t->dtype() != DType::UInt8);
  if (is_int_like(h)) return false;
  return is_sequence(h);  // lists, nested tuples, ndarrays
}

// An index given as data (a list, an ndarray): an int64 tensor, or a mask when it holds bools.
Tensor sequence_to_index(py::handle seq, Device device) {
  Tensor t = py::handle(g_tensor_from_data)(seq).cast<Tensor>();
  if (t.dtype() != DType::Bool && t.dtype() != DType::UInt8) t = ops::to(t, std::nullopt, DType::Int64);
  return t.device() == device ? t : ops::to(t, device, std::nullopt);
}

// A Python bool (or 0-d bool/uint8 tensor) as an index of a new size-1 dim: [0] or [].
Tensor bool_index(bool value, Device device) {
  return value ? ops::zeros({1}, DType::Int64, device) : ops::empty({0}, DType::Int64, device);
}

Tensor select_at(const Tensor& t, int64_t dim, int64_t index, int64_t reported_dim) {
  PF_CHECK_T(t.dim() > dim, IndexError, "too many indices for tensor of dimension ", t.dim());
  const int64_t size = t.sizes()[dim];
  if (index < -size || index >= size)
    PF_THROW(IndexError, "index ", index, " is out of bounds for dimension ", reported_dim, " with size ", size);
  return ops::select(t, dim, index < 0 ? index + size : index);
}

int64_t scalar_item(const Tensor& t) {
  graph::check_host_read("indexing with a 0-d tensor");
  const Tensor c = ops::to(t, Device{DeviceType::CPU, 0}, DType::Int64, /*copy=*/true);
  return c.data<int64_t>()[0];
}

struct Sliced {
  Tensor view;     // self after the basic indices (views)
  Tensors indices;  // per dim of `view`: the tensor index, or undefined
};

// PyTorch's applySlicing: basic items become views of self; tensor items are recorded at the
// dim they index (a mask records once and is expanded over its dims by ops::index).
Sliced apply_slicing(const Tensor& self, py::handle index) {
  py::tuple items = wrap_tuple(index);
  // Dims the index consumes (masks: their dims; None, ... and bools: none).
  int64_t specified = 0;
  for (py::handle h : items) {
    if (const Tensor* t = as_tensor(h)) {
      specified += t->dtype() == DType::Bool || t->dtype() == DType::UInt8 ? t->dim() : 1;
    } else if (h.ptr() != Py_None && h.ptr() != Py_Ellipsis && !PyBool_Check(h.ptr())) {
      ++specified;
    }
  }
  PF_CHECK_T(specified <= self.dim(), IndexError, "too many indices for tensor of dimension ", self.dim());

  Sliced out{self, {}};
  Tensor& r = out.view;
  int64_t dim = 0;
  bool seen_ellipsis = false;
  auto record = [&](Tensor t) {
    out.indices.resize(dim + 1);
    out.indices[dim] = std::move(t);
    ++dim;
  };
  for (size_t i = 0; i < items.size(); ++i) {
    py::handle h = items[i];
    PyObject* o = h.ptr();
    if (is_int_like(h)) {
      r = select_at(r, dim, int_value(h), static_cast<int64_t>(i));
    } else if (PySlice_Check(o)) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(o, &start, &stop, &step) < 0) throw py::error_already_set();
      PF_CHECK_T(step > 0, ValueError, "step must be greater than zero");
      PF_CHECK_T(r.dim() > dim, IndexError, "too many indices for tensor of dimension ", self.dim());
      PySlice_AdjustIndices(static_cast<Py_ssize_t>(r.sizes()[dim]), &start, &stop, step);
      r = ops::slice(r, dim, start, std::max(start, stop), step);
      ++dim;
    } else if (o == Py_Ellipsis) {
      PF_CHECK_T(!seen_ellipsis, IndexError, "an index can only have a single ellipsis ('...')");
      seen_ellipsis = true;
      dim += self.dim() - specified;
    } else if (o == Py_None) {
      r = ops::unsqueeze(r, dim);
      ++dim;
    } else if (PyBool_Check(o)) {
      r = ops::unsqueeze(r, dim);
      record(bool_index(o == Py_True, self.device()));
    } else if (const Tensor* t = as_tensor(h)) {
      if (t->dim() == 0 && is_integral(t->dtype(), /*include_bool=*/true)) {
        if (t->dtype() != DType::UInt8 && t->dtype() != DType::Bool) {
          r = select_at(r, dim, scalar_item(*t), static_cast<int64_t>(i));
        } else {
          r = ops::unsqueeze(r, dim);
          record(bool_index(scalar_item(*t) != 0, self.device()));
        }
      } else {
        record(*t);
      }
    } else if (is_sequence(h)) {
      record(sequence_to_index(h, self.device()));
    } else {
      PF_THROW(IndexError,
               "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid indices "
               "(got ",
               type_name(h), ")");
    }
  }
  return out;
}

bool any_defined(const Tensors& ts) {
  for (const Tensor& t : ts)
    if (t.defined()) return true;
  return false;
}

// ---- out= -----------------------------------------------------------------------------------

// Writes `result` into `out` (PyTorch's out= rules: same dtype; resized when its shape differs).
py::object write_out(const char* fn, py::object out, const Tensor& result) {
  if (!py::isinstance<Tensor>(out)) PF_THROW(TypeError, fn, "(): argument 'out' must be Tensor, not ", type_name(out));
  Tensor& o = out.cast<Tensor&>();
  PF_CHECK(!(ag::is_grad_enabled() && (ag::requires_grad(result) || ag::requires_grad(o))), fn,
           "(): functions with out=... arguments don't support automatic differentiation, but one of the arguments "
           "requires grad.");
  PF_CHECK(o.dtype() == result.dtype(), "Expected out tensor to have dtype ", dtype_name(result.dtype()), ", but got ",
           dtype_name(o.dtype()), " instead");
  PF_CHECK(o.device() == result.device(), "Expected out tensor to have device ", result.device().str(), ", but got ",
           o.device().str(), " instead");
  ops::resize_(o, result.sizes());
  ops::copy_(o, result);
  return out;
}

py::object maybe_out(const char* fn, py::object out, Tensor result) {
  if (out.is_none()) return py::cast(std::move(result));
  return write_out(fn, std::move(out), result);
}

// ---- argument helpers -------------------------------------------------------------------------

Scalar number_arg(py::handle h, const char* fn, const char* arg) {
  Scalar s;
  if (!to_scalar(h, s)) PF_THROW(TypeError, fn, "(): argument '", arg, "' must be Number, not ", type_name(h));
  return s;
}

void check_no_reduce(py::handle reduce, const char* fn) {
  if (!reduce.is_none())
    PF_THROW(NotImplementedError, fn, "(): the reduce= argument is not supported; use scatter_add / index_add");
}

// scatter's fourth argument: a tensor (src) or a number (value), positionally or by keyword.
Tensor scatter_out_of_place(const Tensor& self, int64_t dim, const Tensor& index, py::handle src, py::handle value,
                            py::handle reduce) {
  check_no_reduce(reduce, "scatter");
  PF_CHECK_T(src.is_none() != value.is_none(), TypeError,
             "scatter() expects exactly one of 'src' (a Tensor) and 'value' (a Number)");
  py::handle v = src.is_none() ? value : src;
  if (const Tensor* t = as_tensor(v)) return ops::scatter(self, dim, index, *t);
  return ops::scatter(self, dim, index, number_arg(v, "scatter", "value"));
}

void scatter_in_place(Tensor& self, int64_t dim, const Tensor& index, py::handle src, py::handle value,
                      py::handle reduce) {
  check_no_reduce(reduce, "scatter_");
  PF_CHECK_T(src.is_none() != value.is_none(), TypeError,
             "scatter_() expects exactly one of 'src' (a Tensor) and 'value' (a Number)");
  py::handle v = src.is_none() ? value : src;
  if (const Tensor* t = as_tensor(v)) ops::scatter_(self, dim, index, *t);
  else ops::scatter_(self, dim, index, number_arg(v, "scatter_", "value"));
}

Tensor masked_fill_value(const Tensor& self, const Tensor& mask, py::handle value) {
  if (const Tensor* v = as_tensor(value)) return ops::masked_fill(self, mask, *v);
  Scalar s;
  if (!to_scalar(value, s))
    PF_THROW(TypeError, "masked_fill(): argument 'value' must be Number or Tensor, not ", type_name(value));
  return ops::masked_fill(self, mask, s);
}

// where(condition, input, other): numbers count as wrapped Python numbers.
Tensor where3(const Tensor& condition, py::handle input, py::handle other) {
  const Tensor* a = as_tensor(input);
  const Tensor* b = as_tensor(other);
  if (a && b) return ops::where(condition, *a, *b);
  if (a) return ops::where(condition, *a, number_arg(other, "where", "other"));
  if (b) return ops::where(condition, number_arg(input, "where", "input"), *b);
  return ops::where(condition, number_arg(input, "where", "input"), number_arg(other, "where", "other"));
}

py::tuple tensor_tuple(const Tensors& ts) {
  py::tuple out(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) out[i] = py::cast(ts[i]);
  return out;
}

// index_put's indices: a tuple/list of tensors (PyTorch's Python API takes no None here).
Tensors index_list(py::handle indices, const char* fn) {
  if (!PyTuple_Check(indices.ptr()) && !PyList_Check(indices.ptr()))
    PF_THROW(TypeError, fn, "(): argument 'indices' must be tuple of Tensors, not ", type_name(indices));
  py::sequence s = py::reinterpret_borrow<py::sequence>(indices);
  Tensors out;
  for (size_t i = 0; i < s.size(); ++i) {
    py::object v = s[i];
    if (!py::isinstance<Tensor>(v))
      PF_THROW(TypeError, "expected Tensor as element ", i, " in argument 0, but got ", type_name(v));
    out.push_back(v.cast<Tensor>());
  }
  return out;
}

}  // namespace

// ============================================================================================
// advanced __getitem__ / __setitem__ (called from tensor_bindings.cpp)
// ============================================================================================

bool is_advanced_index(py::handle index) {
  if (PyTuple_Check(index.ptr())) {
    for (py::handle h : py::reinterpret_borrow<py::tuple>(index))
      if (is_advanced_item(h)) return true;
    return false;
  }
  // Any other sequence is either an index tensor or (NumPy's heuristic) a tuple of indices;
  // advanced_getitem handles both, returning a view when no tensor index results.
  return is_sequence(index) || is_advanced_item(index);
}

Tensor advanced_getitem(const Tensor& self, py::handle index) {
  Sliced s = apply_slicing(self, index);
  if (!any_defined(s.indices)) return s.view;
  return ops::index(s.view, s.indices);
}

void advanced_setitem(Tensor& self, py::handle index, py::handle value) {
  // The value becomes a tensor first, so a number must fit self's dtype even where the index
  // selects nothing (PyTorch's valueToTensor).
  Tensor v;
  Scalar number;
  if (const Tensor* t = as_tensor(value)) v = *t;
  else if (to_scalar(value, number)) v = ops::scalar_tensor(number, self.dtype(), self.device());
  else v = py::handle(g_tensor_from_data)(value, self.dtype(), self.device()).cast<Tensor>();
  if (index.ptr() == Py_False) return;  // selects nothing (PyTorch's shortcut)
  if (index.ptr() == Py_True) {  // a lone True writes self[None] (a view), as PyTorch
    Tensor view = ops::unsqueeze(self, 0);
    copy_to(view, v);
    return;
  }
  Sliced s = apply_slicing(self, index);
  if (!any_defined(s.indices)) {
    copy_to(s.view, v);
    return;
  }
  // As PyTorch: leading size-1 dims of the value are dropped (t[idx] = row[None] works).
  Shape vs = v.sizes();
  size_t lead = 0;
  while (lead < vs.size() && vs[lead] == 1) ++lead;
  if (lead > 0) v = ops::view(v, Shape(vs.begin() + static_cast<std::ptrdiff_t>(lead), vs.end()));
  ops::index_put_(s.view, s.indices, v, /*accumulate=*/false);
}

// ============================================================================================
// functions and methods
// ============================================================================================

void bind_indexing(py::module_& m) {
  g_tensor_from_data = py::object(m.attr("_tensor")).release().ptr();
  py::object cls = m.attr("Tensor");
  py::list public_names = m.attr("_public_functions");
  // Binds Tensor.<name>(self, ...) and, when `function` is set, plugflow.<name>(input, ...).
  auto method = [&](const char* name, auto f, auto... extra) {
    cls.attr(name) = py::cpp_function(f, py::name(name), py::is_method(cls), extra...);
  };
  auto function = [&](const char* name, auto f, auto... extra) {
    m.attr(name) = py::cpp_function(f, py::name(name), extra...);
    public_names.append(name);
  };
  using py::arg;
  const auto none = py::none();

  // ---- gather / scatter -------------------------------------------------------------------------
  method("gather", [](const Tensor& t, int64_t dim, const Tensor& index, bool) { return ops::gather(t, dim, index); },
         arg("dim"), arg("index"), py::kw_only(), arg("sparse_grad") = false);
  function(
      "gather",
      [](const Tensor& t, int64_t dim, const Tensor& index, bool, py::object out) {
        return maybe_out("gather", std::move(out), ops::gather(t, dim, index));
      },
      arg("input"), arg("dim"), arg("index"), py::kw_only(), arg("sparse_grad") = false, arg("out") = none);

  method(
      "scatter",
      [](const Tensor& t, int64_t dim, const Tensor& index, py::handle src, py::handle value, py::handle reduce) {
        return scatter_out_of_place(t, dim, index, src, value, reduce);
      },
      arg("dim"), arg("index"), arg("src") = none, py::kw_only(), arg("value") = none, arg("reduce") = none);
  function(
      "scatter",
      [](const Tensor& t, int64_t dim, const Tensor& index, py::handle src, py::handle value, py::handle reduce,
         py::object out) {
        return maybe_out("scatter", std::move(out), scatter_out_of_place(t, dim, index, src, value, reduce));
      },
      arg("input"), arg("dim"), arg("index"), arg("src") = none, py::kw_only(), arg("value") = none,
      arg("reduce") = none, arg("out") = none);
  method(
      "scatter_",
      [](py::object self, int64_t dim, const Tensor& index, py::handle src, py::handle value, py::handle reduce) {
        scatter_in_place(self.cast<Tensor&>(), dim, index, src, value, reduce);
        return self;
      },
      arg("dim"), arg("index"), arg("src") = none, py::kw_only(), arg("value") = none, arg("reduce") = none);

  method(
      "scatter_add",
      [](const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src) {
        return ops::scatter_add(t, dim, index, src);
      },
      arg("dim"), arg("index"), arg("src"));
  function(
      "scatter_add",
      [](const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src, py::object out) {
        return maybe_out("scatter_add", std::move(out), ops::scatter_add(t, dim, index, src));
      },
      arg("input"), arg("dim"), arg("index"), arg("src"), py::kw_only(), arg("out") = none);
  method(
      "scatter_add_",
      [](py::object self, int64_t dim, const Tensor& index, const Tensor& src) {
        ops::scatter_add_(self.cast<Tensor&>(), dim, index, src);
        return self;
      },
      arg("dim"), arg("index"), arg("src"));

  // ---- index_select / index_add / take ------------------------------------------------------------
  method(
      "index_select", [](const Tensor& t, int64_t dim, const Tensor& index) { return ops::index_select(t, dim, index); },
      arg("dim"), arg("index"));
  function(
      "index_select",
      [](const Tensor& t, int64_t dim, const Tensor& index, py::object out) {
        return maybe_out("index_select", std::move(out), ops::index_select(t, dim, index));
      },
      arg("input"), arg("dim"), arg("index"), py::kw_only(), arg("out") = none);

  method(
      "index_add",
      [](const Tensor& t, int64_t dim, const Tensor& index, const Tensor& source, py::handle alpha) {
        return ops::index_add(t, dim, index, source, number_arg(alpha, "index_add", "alpha"));
      },
      arg("dim"), arg("index"), arg("source"), py::kw_only(), arg("alpha") = 1);
  function(
      "index_add",
      [](const Tensor& t, int64_t dim, const Tensor& index, const Tensor& source, py::handle alpha, py::object out) {
        return maybe_out("index_add", std::move(out),
                         ops::index_add(t, dim, index, source, number_arg(alpha, "index_add", "alpha")));
      },
      arg("input"), arg("dim"), arg("index"), arg("source"), py::kw_only(), arg("alpha") = 1, arg("out") = none);
  method(
      "index_add_",
      [](py::object self, int64_t dim, const Tensor& index, const Tensor& source, py::handle alpha) {
        ops::index_add_(self.cast<Tensor&>(), dim, index, source, number_arg(alpha, "index_add_", "alpha"));
        return self;
      },
      arg("dim"), arg("index"), arg("source"), py::kw_only(), arg("alpha") = 1);

  method("take", [](const Tensor& t, const Tensor& index) { return ops::take(t, index); }, arg("index"));
  function(
      "take",
      [](const Tensor& t, const Tensor& index, py::object out) {
        return maybe_out("take", std::move(out), ops::take(t, index));
      },
      arg("input"), arg("index"), py::kw_only(), arg("out") = none);

  // ---- masked ops --------------------------------------------------------------------------------
  method(
      "masked_fill",
      [](const Tensor& t, const Tensor& mask, py::handle value) { return masked_fill_value(t, mask, value); },
      arg("mask"), arg("value"));
  function(
      "masked_fill",
      [](const Tensor& t, const Tensor& mask, py::handle value) { return masked_fill_value(t, mask, value); },
      arg("input"), arg("mask"), arg("value"));
  method(
      "masked_fill_",
      [](py::object self, const Tensor& mask, py::handle value) {
        Tensor& t = self.cast<Tensor&>();
        if (const Tensor* v = as_tensor(value)) {
          ops::masked_fill_(t, mask, *v);
        } else {
          Scalar s;
          if (!to_scalar(value, s))
            PF_THROW(TypeError, "masked_fill_(): argument 'value' must be Number or Tensor, not ", type_name(value));
          ops::masked_fill_(t, mask, s);
        }
        return self;
      },
      arg("mask"), arg("value"));

  method("masked_select", [](const Tensor& t, const Tensor& mask) { return ops::masked_select(t, mask); }, arg("mask"));
  function(
      "masked_select",
      [](const Tensor& t, const Tensor& mask, py::object out) {
        return maybe_out("masked_select", std::move(out), ops::masked_select(t, mask));
      },
      arg("input"), arg("mask"), py::kw_only(), arg("out") = none);

  // ---- where / nonzero ---------------------------------------------------------------------------
  function(
      "where",
      [](const Tensor& condition, py::handle input, py::handle other, py::object out) -> py::object {
        if (input.is_none() && other.is_none()) {
          PF_CHECK_T(out.is_none(), TypeError, "where(condition) takes no out= argument");
          return tensor_tuple(ops::nonzero_numpy(condition));
        }
        PF_CHECK_T(!input.is_none() && !other.is_none(), TypeError,
                   "where() takes either only a condition or a condition, an input and an other");
        return maybe_out("where", std::move(out), where3(condition, input, other));
      },
      arg("condition"), arg("input") = none, arg("other") = none, py::kw_only(), arg("out") = none);
  // Tensor.where(condition, other) is where(condition, self, other).
  method(
      "where", [](py::handle self, const Tensor& condition, py::handle other) { return where3(condition, self, other); },
      arg("condition"), arg("other"));

  const auto nonzero = [](const Tensor& t, py::object out, bool as_tuple) -> py::object {
    if (as_tuple) {
      PF_CHECK_T(out.is_none(), TypeError, "nonzero(as_tuple=True) takes no out= argument");
      return tensor_tuple(ops::nonzero_numpy(t));
    }
    return maybe_out("nonzero", std::move(out), ops::nonzero(t));
  };
  method(
      "nonzero", [nonzero](const Tensor& t, bool as_tuple) { return nonzero(t, py::none(), as_tuple); }, py::kw_only(),
      arg("as_tuple") = false);
  function("nonzero", nonzero, arg("input"), py::kw_only(), arg("out") = none, arg("as_tuple") = false);
  method("argwhere", [](const Tensor& t) { return ops::nonzero(t); });
  function("argwhere", [](const Tensor& t) { return ops::nonzero(t); }, arg("input"));

  // ---- index_put -----------------------------------------------------------------------------------
  method(
      "index_put",
      [](const Tensor& t, py::handle indices, const Tensor& values, bool accumulate) {
        return ops::index_put(t, index_list(indices, "index_put"), values, accumulate);
      },
      arg("indices"), arg("values"), arg("accumulate") = false);
  function(
      "index_put",
      [](const Tensor& t, py::handle indices, const Tensor& values, bool accumulate) {
        return ops::index_put(t, index_list(indices, "index_put"), values, accumulate);
      },
      arg("input"), arg("indices"), arg("values"), arg("accumulate") = false);
  method(
      "index_put_",
      [](py::object self, py::handle indices, const Tensor& values, bool accumulate) {
        ops::index_put_(self.cast<Tensor&>(), index_list(indices, "index_put_"), values, accumulate);
        return self;
      },
      arg("indices"), arg("values"), arg("accumulate") = false);
}

}  // namespace plugflow::python
