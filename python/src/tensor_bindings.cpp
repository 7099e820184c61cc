// Tensor bindings: plugflow.dtype, plugflow.device, plugflow.Tensor and the functional API
// of ops.h, shaped like PyTorch's Python API.
//
// The per-op path is one pybind11 call straight into the C++ functional API: hot methods
// take their operand as a py::handle and dispatch Tensor vs Python number by hand (one
// overload, no overload resolution), and numbers keep their kind (plugflow::Scalar) so that
// PyTorch's promotion rules for "wrapped numbers" apply in the core. Argument parsing that
// PyTorch does with *args (view(2, 3) vs view((2, 3)), to(...)) is done here too, so that no
// Python frame sits between the user and the op. Creation functions with keyword-heavy
// signatures are thin Python wrappers (plugflow/_creation.py) over the `_`-prefixed
// functions bound here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "opdefs.h"
#include "plugflow/autograd.h"
#include "plugflow/error.h"
#include "plugflow/graph.h"
#include "plugflow/ops.h"
#include "plugflow/runtime.h"
#include "plugflow/tensor.h"

namespace py = pybind11;

namespace plugflow::python {
namespace {

// ============================================================================================
// dtype objects
// ============================================================================================

// The payload of a `plugflow.dtype` object. Only the ten singletons below ever exist.
struct DTypeObject {
  DType value;
};

std::array<PyObject*, kNumDTypes> g_dtype_objects{};

constexpr std::array<DType, kNumDTypes> kAllDTypes = {DType::Bool,    DType::UInt8,  DType::Int8,    DType::Int16,
                                                      DType::Int32,   DType::Int64,  DType::Float16, DType::BFloat16,
                                                      DType::Float32, DType::Float64};

}  // namespace

py::handle dtype_object(DType t) { return g_dtype_objects[static_cast<int>(t)]; }

bool dtype_from_object(py::handle obj, DType& out, bool convert) {
  PyObject* o = obj.ptr();
  for (int i = 0; i < kNumDTypes; ++i) {
    if (o == g_dtype_objects[i]) {
      out = static_cast<DType>(i);
      return true;
    }
  }
  if (!convert) return false;
  // PyTorch accepts the Python types themselves: dtype=float means float64, int int64.
  if (o == reinterpret_cast<PyObject*>(&PyFloat_Type)) return out = DType::Float64, true;
  if (o == reinterpret_cast<PyObject*>(&PyLong_Type)) return out = DType::Int64, true;
  if (o == reinterpret_cast<PyObject*>(&PyBool_Type)) return out = DType::Bool, true;
  if (PyUnicode_Check(o)) {                          // a convenience beyond PyTorch: dtype="float32"
    out = dtype_from_name(obj.cast<std::string>());  // TypeError naming the bad name
    return true;
  }
  return false;
}

namespace {

// ============================================================================================
// Python-side helper classes (plugflow.Size, plugflow.return_types.*). They are written in
// Python, in modules of the package that imports this one; bind_tensor looks them up once.
// ============================================================================================

PyTypeObject* g_size_type = nullptr;
PyObject* g_return_type_max = nullptr;
PyObject* g_return_type_min = nullptr;

py::object make_size(const Shape& sizes) {
  // Size is a tuple subclass without a __dict__: allocate it the way tuple.__new__ does, which
  // skips a Python-level constructor call on every `t.shape`.
  PyObject* obj = g_size_type->tp_alloc(g_size_type, static_cast<Py_ssize_t>(sizes.size()));
  if (obj == nullptr) throw py::error_already_set();
  for (size_t i = 0; i < sizes.size(); ++i) PyTuple_SET_ITEM(obj, i, PyLong_FromLongLong(sizes[i]));
  return py::reinterpret_steal<py::object>(obj);
}

py::object make_return_pair(bool is_max, Tensor a, Tensor b) {
  py::handle type = is_max ? g_return_type_max : g_return_type_min;
  return type(py::make_tuple(py::cast(std::move(a)), py::cast(std::move(b))));
}

// ============================================================================================
// Python values -> Tensor / Scalar / ints
// ============================================================================================

PyTypeObject* g_tensor_type = nullptr;

bool is_tensor(py::handle h) { return PyObject_TypeCheck(h.ptr(), g_tensor_type); }

// The Tensor inside a Python object, or nullptr when it is not a plugflow.Tensor.
const Tensor* as_tensor(py::handle h) {
  if (!is_tensor(h)) return nullptr;
  return &h.cast<const Tensor&>();
}

Tensor& tensor_ref(py::handle h) { return h.cast<Tensor&>(); }

std::string type_name(py::handle h) { return Py_TYPE(h.ptr())->tp_name; }

// numpy.generic when numpy has been imported (no numpy scalar can exist before that).
PyObject* numpy_generic_type() {
  static PyObject* generic = nullptr;
  if (generic == nullptr) {
    PyObject* np = PyImport_GetModule(py::str("numpy").ptr());
    if (np == nullptr) {
      PyErr_Clear();
      return nullptr;
    }
    generic = PyObject_GetAttrString(np, "generic");  // kept
    Py_DECREF(np);
    if (generic == nullptr) PyErr_Clear();
  }
  return generic;
}

bool is_numpy_scalar(py::handle h) {
  PyObject* g = numpy_generic_type();
  return g != nullptr && PyObject_IsInstance(h.ptr(), g) == 1;
}

}  // namespace

// Python bool / int / float (and numpy scalars) -> Scalar, keeping the kind.
bool to_scalar(py::handle h, Scalar& out) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o)) {
    out = Scalar(o == Py_True);
    return true;
  }
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) PF_THROW(Error, "Overflow when unpacking long");
    out = Scalar(static_cast<int64_t>(v));
    return true;
  }
  if (PyFloat_Check(o)) {
    out = Scalar(PyFloat_AS_DOUBLE(o));
    return true;
  }
  if (is_numpy_scalar(h)) {
    py::object item = h.attr("item")();  // a Python bool/int/float (complex stays unsupported)
    if (PyBool_Check(item.ptr()) || PyLong_Check(item.ptr()) || PyFloat_Check(item.ptr())) return to_scalar(item, out);
  }
  return false;
}

namespace {

int64_t to_int(py::handle h, const char* what) {
  PyObject* o = h.ptr();
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) PF_THROW(Error, "Overflow when unpacking long");
    return v;
  }
  if (PyFloat_Check(o) || !PyIndex_Check(o)) PF_THROW(TypeError, what, " must be an int, not ", type_name(h));
  py::object idx = py::reinterpret_steal<py::object>(PyNumber_Index(o));  // numpy ints, 0-d int tensors
  if (!idx) throw py::error_already_set();
  return to_int(idx, what);
}

// Ints from a tuple/list/Size, with PyTorch's message naming the function, the argument and
// the 1-based position of a bad element.
Shape ints_from_sequence(py::handle seq, const char* fn, const char* arg) {
  if (!PyTuple_Check(seq.ptr()) && !PyList_Check(seq.ptr()))
    PF_THROW(TypeError, fn, "(): argument '", arg, "' must be tuple of ints, not ", type_name(seq));
  py::sequence s = py::reinterpret_borrow<py::sequence>(seq);
  Shape out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    py::object v = s[i];
    if (PyFloat_Check(v.ptr()) || (!PyLong_Check(v.ptr()) && !PyIndex_Check(v.ptr())))
      PF_THROW(TypeError, fn, "(): argument '", arg, "' must be tuple of ints, but found element of type ",
               type_name(v), " at pos ", i + 1);
    out.push_back(to_int(v, arg));
  }
  return out;
}

// Sizes given PyTorch's two ways, f(2, 3) or f((2, 3)) / f([2, 3]) / f(t.shape): `args` is
// the tuple of positional arguments.
Shape ints_from_args(py::handle args, const char* fn, const char* arg) {
  if (PyTuple_Check(args.ptr()) && PyTuple_GET_SIZE(args.ptr()) == 1) {
    PyObject* first = PyTuple_GET_ITEM(args.ptr(), 0);
    if (PyTuple_Check(first) || PyList_Check(first)) return ints_from_sequence(first, fn, arg);
  }
  return ints_from_sequence(args, fn, arg);
}

// dim=None (all), dim=1, dim=(0, 2).
Shape dims_from_object(py::handle dim) {
  if (dim.is_none()) return {};
  if (PyTuple_Check(dim.ptr()) || PyList_Check(dim.ptr())) return ints_from_sequence(dim, "reduction", "dim");
  return {to_int(dim, "dim")};
}

// ============================================================================================
// devices
// ============================================================================================

// "cuda" means the current CUDA device; plugflow has one current device per process, index 0.
Device resolve(Device d) {
  if (d.index < 0) d.index = 0;
  return d;
}

Device device_from_object(py::handle h) {
  if (py::isinstance<Device>(h)) return h.cast<Device>();
  if (PyUnicode_Check(h.ptr())) return Device::parse(h.cast<std::string>());
  if (PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr())) {  // torch: an int is a CUDA index
    const int64_t idx = to_int(h, "device");
    PF_CHECK_T(idx >= 0, ValueError, "Device index must not be negative");
    return Device{DeviceType::CUDA, static_cast<int>(idx)};
  }
  PF_THROW(TypeError, "expected a plugflow.device, a string or an int for device, got ", type_name(h));
}

std::string device_repr(const Device& d) {
  std::string s = "device(type='" + std::string(device_type_name(d.type)) + "'";
  if (!d.is_cpu() && d.index >= 0) s += ", index=" + std::to_string(d.index);
  return s + ")";
}

// ============================================================================================
// numpy interop
// ============================================================================================

py::object numpy_dtype_for(DType t) {
  static std::array<PyObject*, kNumDTypes> cache{};
  PyObject*& slot = cache[static_cast<int>(t)];
  if (slot == nullptr) {
    // numpy has no bfloat16; the message is PyTorch's.
    if (t == DType::BFloat16) PF_THROW(TypeError, "Got unsupported ScalarType BFloat16");
    slot = py::module_::import("numpy").attr("dtype")(std::string(dtype_name(t))).release().ptr();
  }
  return py::reinterpret_borrow<py::object>(slot);
}

DType dtype_from_numpy(const py::dtype& dt) {
  const char kind = dt.kind();
  // The itemsize attribute, not py::dtype::itemsize(): pybind11 before 2.12 reads it from numpy
  // 1.x's descriptor struct, whose layout numpy 2 changed (it would read the flags instead).
  const auto size = dt.attr("itemsize").cast<py::ssize_t>();
  if (kind == 'b' && size == 1) return DType::Bool;
  if (kind == 'u' && size == 1) return DType::UInt8;
  if (kind == 'i') {
    switch (size) {
      case 1:
        return DType::Int8;
      case 2:
        return DType::Int16;
      case 4:
        return DType::Int32;
      case 8:
        return DType::Int64;
      default:
        break;
    }
  }
  if (kind == 'f') {
    switch (size) {
      case 2:
        return DType::Float16;
      case 4:
        return DType::Float32;
      case 8:
        return DType::Float64;
      default:
        break;
    }
  }
  PF_THROW(TypeError, "can't convert np.ndarray of type numpy.", py::str(dt.attr("name")).cast<std::string>(),
           ". The only supported types are: float64, float32, float16, int64, int32, int16, int8, uint8, "
           "and bool.");
}

// A CPU tensor sharing the array's memory; the storage keeps the array alive.
Tensor from_numpy(py::handle obj) {
  if (!py::isinstance<py::array>(obj)) PF_THROW(TypeError, "expected np.ndarray (got ", type_name(obj), ")");
  py::array arr = py::reinterpret_borrow<py::array>(obj);
  const DType dtype = dtype_from_numpy(arr.dtype());
  PF_CHECK_T(arr.dtype().attr("isnative").cast<bool>(), ValueError,
             "given numpy array has byte order different from the native byte order. Conversion between "
             "byte orders is currently not supported.");
  const auto isz = static_cast<int64_t>(itemsize(dtype));
  const auto ndim = static_cast<size_t>(arr.ndim());
  Shape sizes(ndim), strides(ndim);
  int64_t extent = isz;  // bytes from the first element to the end of the last one
  bool empty = false;
  for (size_t i = 0; i < ndim; ++i) {
    sizes[i] = arr.shape(i);
    const int64_t sb = arr.strides(i);
    PF_CHECK_T(sb >= 0, ValueError,
               "At least one stride in the given numpy array is negative, and tensors with negative strides "
               "are not currently supported. (You can probably work around this by making a copy of your "
               "array  with array.copy().) ");
    PF_CHECK_T(sb % isz == 0, ValueError,
               "given numpy array strides not a multiple of the element byte size. Copy the numpy array to "
               "reallocate the memory.");
    strides[i] = sb / isz;
    if (sizes[i] == 0) empty = true;
    extent += (sizes[i] - 1) * sb;
  }
  const size_t nbytes = empty ? 0 : static_cast<size_t>(extent);
  PyObject* keep = arr.inc_ref().ptr();
  std::shared_ptr<void> owner(keep, [](void* p) {
    // The last tensor may die on any thread, with or without the GIL, or at exit.
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      Py_DECREF(static_cast<PyObject*>(p));
    }
  });
  auto storage =
      std::make_shared<Storage>(Device{DeviceType::CPU, 0}, const_cast<void*>(arr.data()), nbytes, std::move(owner));
  return Tensor::view_of(std::move(storage), std::move(sizes), std::move(strides), 0, dtype);
}

// An ndarray viewing a CPU tensor's memory; `base` (the Python tensor) keeps it alive.
py::array to_numpy(const Tensor& t, py::handle base) {
  graph::check_host_read("Tensor.numpy()");
  // As PyTorch: writes through the array would bypass autograd.
  PF_CHECK(!(autograd::is_grad_enabled() && autograd::requires_grad(t)),
           "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.");
  if (!t.device().is_cpu())
    PF_THROW(TypeError, "can't convert ", t.device().str(),
             " device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.");
  py::object dt = numpy_dtype_for(t.dtype());
  const auto isz = static_cast<py::ssize_t>(t.itemsize());
  std::vector<py::ssize_t> shape(t.sizes().begin(), t.sizes().end());
  std::vector<py::ssize_t> strides(t.strides().begin(), t.strides().end());
  for (auto& s : strides) s *= isz;
  return py::array(py::reinterpret_borrow<py::dtype>(dt), std::move(shape), std::move(strides), t.data_ptr(), base);
}

// ============================================================================================
// element access: item(), tolist()
// ============================================================================================

PyObject* element_to_py(const char* p, DType t) {
  return visit_dtype(t, [p](auto tag) -> PyObject* {
    using T = typename decltype(tag)::type;
    T v;
    std::memcpy(&v, p, sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
      return PyBool_FromLong(v);
    } else if constexpr (std::is_integral_v<T>) {
      return PyLong_FromLongLong(static_cast<long long>(v));
    } else {
      return PyFloat_FromDouble(static_cast<double>(v));  // Half/BFloat16 via float
    }
  });
}

Tensor on_cpu(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  py::gil_scoped_release nogil;
  return ops::to(t, Device{DeviceType::CPU, 0}, std::nullopt);
}

py::object item(const Tensor& t) {
  graph::check_host_read("Tensor.item() (or bool(), int(), float() of a tensor)");
  const int64_t n = t.numel();
  PF_CHECK(n == 1, "a Tensor with ", n, " elements cannot be converted to Scalar");
  Tensor c = on_cpu(t);
  return py::reinterpret_steal<py::object>(element_to_py(static_cast<const char*>(c.data_ptr()), c.dtype()));
}

PyObject* tolist_rec(const char* p, const Tensor& t, size_t dim, int64_t isz) {
  if (dim == t.sizes().size()) return element_to_py(p, t.dtype());
  const int64_t n = t.sizes()[dim];
  // A size-1 dim's stride is never used and may be anything (a valid view need not bound it).
  const int64_t step = n > 1 ? t.strides()[dim] * isz : 0;
  PyObject* list = PyList_New(n);
  if (list == nullptr) throw py::error_already_set();
  for (int64_t i = 0; i < n; ++i) PyList_SET_ITEM(list, i, tolist_rec(p + i * step, t, dim + 1, isz));
  return list;
}

py::object tolist(const Tensor& t) {
  graph::check_host_read("Tensor.tolist() (or printing a tensor)");
  Tensor c = on_cpu(t);
  return py::reinterpret_steal<py::object>(
      tolist_rec(static_cast<const char*>(c.data_ptr()), c, 0, static_cast<int64_t>(c.itemsize())));
}

// Python number of a one-element tensor for float()/int()/bool().
Scalar single_value(const Tensor& t) {
  PF_CHECK_T(t.numel() == 1, ValueError, "only one element tensors can be converted to Python scalars");
  Scalar s;
  to_scalar(item(t), s);
  return s;
}

// ============================================================================================
// tensor(data): nested sequences of numbers -> Tensor, with PyTorch's dtype inference
// ============================================================================================

struct DataCollector {
  Shape shape;
  std::vector<Scalar> values;
  std::optional<DType> inferred;

  void note(DType t) { inferred = inferred ? promote_types(*inferred, t) : t; }

  // A leaf: a Python number, a numpy scalar (its dtype counts) or a one-element tensor.
  bool leaf(py::handle h) {
    Scalar s;
    PyObject* o = h.ptr();
    if (PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o)) {
      to_scalar(h, s);
      note(s.default_dtype());
    } else if (is_numpy_scalar(h)) {  // before the subclass checks: np.float64 subclasses float
      if (!to_scalar(h, s)) PF_THROW(TypeError, "new(): invalid data type '", type_name(h), "'");
      note(dtype_from_numpy(py::reinterpret_borrow<py::dtype>(h.attr("dtype"))));
    } else if (PyLong_Check(o) || PyFloat_Check(o)) {  // int/float subclasses (IntEnum, ...)
      to_scalar(h, s);
      note(s.default_dtype());
    } else if (const Tensor* t = as_tensor(h)) {
      PF_CHECK_T(t->numel() == 1, ValueError, "only one element tensors can be converted to Python scalars");
      to_scalar(item(*t), s);
      note(t->dtype());
    } else {
      return false;
    }
    values.push_back(s);
    return true;
  }

  static bool is_sequence(py::handle h) {
    return PySequence_Check(h.ptr()) && !PyUnicode_Check(h.ptr()) && !PyBytes_Check(h.ptr()) && !is_tensor(h);
  }

  // The shape follows the first element at each depth, as in PyTorch.
  void infer_shape(py::handle h) {
    py::object cur = py::reinterpret_borrow<py::object>(h);
    while (is_sequence(cur)) {
      const Py_ssize_t n = PySequence_Size(cur.ptr());
      if (n < 0) throw py::error_already_set();
      shape.push_back(n);
      if (n == 0) break;
      cur = py::reinterpret_steal<py::object>(PySequence_GetItem(cur.ptr(), 0));
      if (!cur) throw py::error_already_set();
    }
  }

  void collect(py::handle h, size_t dim) {
    if (dim == shape.size()) {
      if (leaf(h)) return;
      if (is_sequence(h))
        PF_THROW(ValueError, "expected a number at dim ", dim, " (got a sequence of length ", PySequence_Size(h.ptr()),
                 ")");
      PF_THROW(TypeError, "new(): invalid data type '", type_name(h), "'");
    }
    if (!is_sequence(h)) PF_THROW(TypeError, "expected a sequence at dim ", dim, " (got ", type_name(h), ")");
    py::sequence seq = py::reinterpret_borrow<py::sequence>(h);
    const auto n = static_cast<int64_t>(seq.size());
    PF_CHECK_T(n == shape[dim], ValueError, "expected sequence of length ", shape[dim], " at dim ", dim, " (got ", n,
               ")");
    for (int64_t i = 0; i < n; ++i) collect(seq[i], dim + 1);
  }
};

Tensor tensor_from_data(py::handle data, std::optional<DType> dtype, std::optional<Device> device) {
  const Device dev = resolve(device.value_or(Device{DeviceType::CPU, 0}));
  if (const Tensor* t = as_tensor(data)) {  // torch.tensor(t): a copy
    py::gil_scoped_release nogil;
    return ops::to(*t, dev, dtype.value_or(t->dtype()), /*copy=*/true);
  }
  if (py::isinstance<py::array>(data)) {  // numpy arrays keep their dtype
    py::array arr = py::reinterpret_borrow<py::array>(data);
    if (!arr.dtype().attr("isnative").cast<bool>()) arr = arr.attr("astype")(arr.dtype().attr("newbyteorder")("="));
    Tensor view = from_numpy(arr);
    py::gil_scoped_release nogil;
    return ops::to(view, dev, dtype.value_or(view.dtype()), /*copy=*/true);
  }
  if (PyUnicode_Check(data.ptr()) || PyBytes_Check(data.ptr()))
    PF_THROW(TypeError, "new(): invalid data type '", type_name(data), "'");

  DataCollector c;
  c.infer_shape(data);
  c.collect(data, 0);
  const DType dt = dtype.value_or(c.inferred.value_or(default_float_dtype()));  // [] is floating
  // PyTorch checks numbers stored into integral tensors (300 into uint8 raises); floating
  // types take any number (1e40 -> inf).
  if (is_integral(dt, /*include_bool=*/false))
    for (const Scalar& v : c.values) check_scalar_fits(v, dt);
  Tensor out = ops::empty(c.shape, dt, Device{DeviceType::CPU, 0});
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    for (size_t i = 0; i < c.values.size(); ++i) p[i] = c.values[i].template to<T>();
  });
  if (dev.is_cpu()) return out;
  py::gil_scoped_release nogil;
  return ops::to(out, dev, std::nullopt);
}

// ============================================================================================
// indexing: ints, slices (step > 0), None, ..., bools and 0-d integer tensors -> views
// ============================================================================================

// `reported_dim` is the dim the message names: PyTorch counts the position in the index
// expression (t[None, 0, 3] reports dimension 2), not the dim of the partial result.
Tensor select_checked(const Tensor& t, int64_t dim, int64_t index, int64_t reported_dim) {
  PF_CHECK_T(dim >= 0 && dim < t.dim(), IndexError, "too many indices for tensor of dimension ", t.dim());
  const int64_t size = t.sizes()[dim];
  if (index < -size || index >= size)
    PF_THROW(IndexError, "index ", index, " is out of bounds for dimension ", reported_dim, " with size ", size);
  return ops::select(t, dim, index < 0 ? index + size : index);
}

enum class IndexKind { Int, Slice, None, Ellipsis, Bool };

IndexKind classify_index(py::handle h, int64_t& as_int) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o)) return IndexKind::Bool;
  if (PyLong_Check(o)) {
    as_int = to_int(h, "index");
    return IndexKind::Int;
  }
  if (PySlice_Check(o)) return IndexKind::Slice;
  if (o == Py_None) return IndexKind::None;
  if (o == Py_Ellipsis) return IndexKind::Ellipsis;
  if (const Tensor* t = as_tensor(h)) {
    // A 0-d integer tensor indexes like the int it holds (as in PyTorch); any other tensor
    // would be advanced indexing, which needs a gather op that plugflow does not have yet.
    if (t->dim() == 0 && is_integral(t->dtype(), /*include_bool=*/false)) {
      Scalar s;
      to_scalar(item(*t), s);
      as_int = s.to_int();
      return IndexKind::Int;
    }
    PF_THROW(NotImplementedError,
             "indexing with a tensor (advanced indexing) is not supported yet; use integers, slices, None "
             "and ...");
  }
  if (PyList_Check(o) || PyTuple_Check(o) || py::isinstance<py::array>(h))
    PF_THROW(NotImplementedError,
             "indexing with a sequence (advanced indexing) is not supported yet; use integers, slices, None "
             "and ...");
  if (is_numpy_scalar(h) && PyIndex_Check(o)) {
    as_int = to_int(h, "index");
    return IndexKind::Int;
  }
  PF_THROW(IndexError,
           "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid indices "
           "(got ",
           type_name(h), ")");
}

Tensor index_tensor(const Tensor& self, py::handle index) {
  int64_t as_int = 0;
  if (!PyTuple_Check(index.ptr())) {  // fast path: t[i]
    if (PyLong_Check(index.ptr()) && !PyBool_Check(index.ptr())) {
      PF_CHECK_T(self.dim() > 0, IndexError,
                 "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                 "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number");
      return select_checked(self, 0, to_int(index, "index"), 0);
    }
  }
  // Tensors, sequences and bools: advanced indexing (a copy), in indexing_bindings.cpp.
  if (is_advanced_index(index)) return advanced_getitem(self, index);
  py::tuple items = PyTuple_Check(index.ptr()) ? py::reinterpret_borrow<py::tuple>(index) : py::make_tuple(index);

  // Classify once; count the indices that consume a dimension.
  std::vector<std::pair<IndexKind, int64_t>> kinds;
  kinds.reserve(items.size());
  int64_t consuming = 0;
  int ellipses = 0;
  for (py::handle h : items) {
    const IndexKind k = classify_index(h, as_int);
    kinds.emplace_back(k, as_int);
    if (k == IndexKind::Int || k == IndexKind::Slice) ++consuming;
    if (k == IndexKind::Ellipsis) ++ellipses;
  }
  PF_CHECK_T(ellipses <= 1, IndexError, "an index can only have a single ellipsis ('...')");
  if (consuming > self.dim()) PF_THROW(IndexError, "too many indices for tensor of dimension ", self.dim());

  Tensor r = self;
  int64_t dim = 0;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const auto [kind, value] = kinds[i];
    switch (kind) {
      case IndexKind::Int:
        r = select_checked(r, dim, value, static_cast<int64_t>(i));
        break;
      case IndexKind::Slice: {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(items[i].ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
        PF_CHECK_T(step > 0, ValueError, "step must be greater than zero");
        PySlice_AdjustIndices(static_cast<Py_ssize_t>(r.sizes()[dim]), &start, &stop, step);
        r = ops::slice(r, dim, start, std::max(start, stop), step);
        ++dim;
        break;
      }
      case IndexKind::None:
        r = ops::unsqueeze(r, dim);
        ++dim;
        break;
      case IndexKind::Bool:  // like None, and False selects nothing from the new dim
        r = ops::unsqueeze(r, dim);
        if (items[i].ptr() == Py_False) r = ops::slice(r, dim, 0, 0, 1);
        ++dim;
        break;
      case IndexKind::Ellipsis:
        dim += self.dim() - consuming;
        break;
    }
  }
  return r;
}

// t[index] = value: value is a tensor (broadcast), a number, or nested sequences.
void set_index(Tensor& self, py::handle index, py::handle value) {
  if (is_advanced_index(index)) return advanced_setitem(self, index, value);  // index_put_
  Tensor view = index_tensor(self, index);
  Scalar s;
  if (to_scalar(value, s)) {
    ops::fill_(view, s);
    return;
  }
  const Tensor* v = as_tensor(value);
  copy_to(view, v ? *v : tensor_from_data(value, view.dtype(), view.device()));
}

// ============================================================================================
// op helpers
// ============================================================================================

// The names the core's functional API dispatches on, kept as strings so a call copies none.
const std::string kAdd = "add", kSub = "sub", kMul = "mul", kDiv = "div", kPow = "pow", kRemainder = "remainder",
                  kFmod = "fmod", kFloorDivide = "floor_divide", kMaximum = "maximum", kMinimum = "minimum",
                  kAtan2 = "atan2", kBitwiseAnd = "bitwise_and", kBitwiseOr = "bitwise_or", kBitwiseXor = "bitwise_xor",
                  kLogicalAnd = "logical_and", kLogicalOr = "logical_or", kLogicalXor = "logical_xor", kEq = "eq",
                  kNe = "ne", kLt = "lt", kLe = "le", kGt = "gt", kGe = "ge", kNeg = "neg", kAbs = "abs",
                  kBitwiseNot = "bitwise_not", kAmax = "amax", kAmin = "amin";

[[noreturn]] void bad_operand(const char* op, py::handle other) {
  PF_THROW(TypeError, op, "(): argument 'other' (position 1) must be Tensor or Number, not ", type_name(other));
}

// self (op) other, for a method: TypeError for a non-number operand.
Tensor binary_method(const std::string& name, const Tensor& self, py::handle other) {
  if (const Tensor* o = as_tensor(other)) return ops::binary(name, self, *o);
  Scalar s;
  if (to_scalar(other, s)) return ops::binary(name, self, s);
  bad_operand(name.c_str(), other);
}

// self (op) other, for an operator: NotImplemented lets Python try the other operand.
py::object binary_operator(const std::string& name, const Tensor& self, py::handle other) {
  if (const Tensor* o = as_tensor(other)) return py::cast(ops::binary(name, self, *o));
  Scalar s;
  if (to_scalar(other, s)) return py::cast(ops::binary(name, self, s));
  return py::reinterpret_borrow<py::object>(Py_NotImplemented);
}

// other (op) self, for reflected operators (2 - t). A number divided by a tensor and a number
// raised to a tensor are PyTorch's Tensor.__rtruediv__ and __rpow__: reciprocal(t) * number
// (so 1e-30 / subnormal is inf there too), and tensor(number, dtype=result_type) ** t, which
// converts as torch.tensor does: an integer dtype must hold the number, a floating one rounds
// it (1e300 ** t is inf ** t in bfloat16).
py::object reflected_operator(const std::string& name, const Tensor& self, py::handle other) {
  if (const Tensor* o = as_tensor(other)) return py::cast(ops::binary(name, *o, self));
  Scalar s;
  if (!to_scalar(other, s)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  if (name == kDiv) return py::cast(ops::binary(kMul, ops::unary("reciprocal", self), s));
  if (name == kPow) {
    const DType dt = ops::result_type(self, s);
    const Tensor base = is_floating(dt) ? ops::wrapped_scalar_tensor(s, dt, self.device())
                                        : ops::scalar_tensor(s, dt, self.device());
    return py::cast(ops::binary(kPow, base, self));
  }
  return py::cast(ops::binary(name, s, self));
}

// self (op)= other; returns self (the same Python object), or NotImplemented for operators.
py::object inplace_binary(const std::string& name, py::object self, py::handle other, bool is_operator) {
  Tensor& t = tensor_ref(self);
  if (const Tensor* o = as_tensor(other)) {
    ops::binary_(name, t, *o);
  } else if (Scalar s; to_scalar(other, s)) {
    ops::binary_(name, t, s);
  } else {
    if (is_operator) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    bad_operand((name + "_").c_str(), other);
  }
  return self;
}

// A number as a 0-d tensor of the dtype PyTorch would compute `self (op) number` in, so that
// ops taking only tensors (alpha, rounding modes) keep the wrapped-number promotion.
Tensor wrap_scalar(const Tensor& self, Scalar s) {
  return ops::wrapped_scalar_tensor(s, ops::result_type(self, s), self.device());
}

Tensor operand_tensor(const Tensor& self, py::handle other, const char* op) {
  if (const Tensor* o = as_tensor(other)) return *o;
  Scalar s;
  if (to_scalar(other, s)) return wrap_scalar(self, s);
  bad_operand(op, other);
}

Scalar alpha_scalar(py::handle alpha) {
  Scalar a;
  if (!to_scalar(alpha, a)) PF_THROW(TypeError, "alpha must be a Number, not ", type_name(alpha));
  return a;
}

bool is_one(const Scalar& s) { return s.is_floating() ? s.to_double() == 1.0 : s.to_int() == 1; }

// add/sub with alpha: self + alpha * other.
Tensor add_sub(const std::string& name, const Tensor& self, py::handle other, py::handle alpha) {
  // (a bool number subtracted raises there, as PyTorch, which the wrapped 0-d tensor below hides)
  if (alpha.is_none() || (name == kSub && PyBool_Check(other.ptr()))) return binary_method(name, self, other);
  const Scalar a = alpha_scalar(alpha);
  if (is_one(a) && a.is_integral()) return binary_method(name, self, other);
  Tensor b = operand_tensor(self, other, name.c_str());
  return name == kAdd ? ops::add(self, b, a) : ops::sub(self, b, a);
}

py::object add_sub_(const std::string& name, py::object self, py::handle other, py::handle alpha) {
  if (alpha.is_none()) return inplace_binary(name, std::move(self), other, /*is_operator=*/false);
  const Scalar a = alpha_scalar(alpha);
  if (is_one(a) && a.is_integral()) return inplace_binary(name, std::move(self), other, /*is_operator=*/false);
  Tensor& t = tensor_ref(self);
  const Tensor r = add_sub(name, t, other, alpha);
  PF_CHECK(can_cast(r.dtype(), t.dtype()), "result type ", dtype_name(r.dtype()),
           " can't be cast to the desired "
           "output type ",
           dtype_name(t.dtype()));
  ops::copy_(t, r);
  return self;
}

Tensor div_method(const Tensor& self, py::handle other, const std::optional<std::string>& rounding_mode) {
  if (!rounding_mode) return binary_method(kDiv, self, other);
  PF_CHECK_T(*rounding_mode == "trunc" || *rounding_mode == "floor", ValueError,
             "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *rounding_mode, "'");
  return ops::div(self, operand_tensor(self, other, "div"), *rounding_mode);
}

py::object reduce_method(const std::string& name, const Tensor& self, py::handle dim, bool keepdim,
                         std::optional<DType> dtype) {
  Shape dims = dims_from_object(dim);
  py::gil_scoped_release nogil;
  Tensor r = ops::reduce(name, self, dims, keepdim, dtype);
  py::gil_scoped_acquire gil;
  return py::cast(std::move(r));
}

// A reduction with PyTorch's no-dim overload X(input, *, dtype) beside X(input, dim, keepdim=False,
// *, dtype) (sum, mean, prod; prod's dim is one int). An argument left out arrives as Ellipsis:
// keepdim without dim matches no overload (TypeError); a one-int dim reads None as a dimension name.
py::object optional_dim_reduce(const std::string& name, bool one_dim, const Tensor& self, py::handle dim,
                               py::handle keepdim, std::optional<DType> dtype) {
  const bool no_dim = dim.ptr() == Py_Ellipsis, no_keepdim = keepdim.ptr() == Py_Ellipsis;
  PF_CHECK_T(!no_dim || no_keepdim, TypeError, name,
             "() received an invalid combination of arguments - got keepdim without dim (", name,
             "(input, *, dtype) or ", name, "(input, dim, keepdim=False, *, dtype))");
  PF_CHECK_T(no_keepdim || PyBool_Check(keepdim.ptr()), TypeError, name, "(): argument 'keepdim' must be bool, not ",
             type_name(keepdim));
  if (one_dim && !no_dim) {
    PF_CHECK(!dim.is_none(), "Please look up dimensions by name, got: name = None.");
    PF_CHECK_T(!PyBool_Check(dim.ptr()) && (PyLong_Check(dim.ptr()) || PyIndex_Check(dim.ptr())), TypeError, name,
               "(): argument 'dim' must be int, not ", type_name(dim));
  }
  return reduce_method(name, self, no_dim ? py::handle(py::none()) : dim, keepdim.ptr() == Py_True, dtype);
}

// max()/min(): all elements; (dim[, keepdim]) -> (values, indices); (other) -> elementwise. An
// argument left out arrives as Ellipsis: PyTorch refuses keepdim without dim (TypeError) and reads
// dim=None as a dimension name.
py::object max_min(bool is_max, const Tensor& self, py::handle dim_or_other, py::handle keepdim) {
  const char* fn = is_max ? "max" : "min";
  const bool no_keepdim = keepdim.ptr() == Py_Ellipsis;
  if (dim_or_other.ptr() == Py_Ellipsis) {
    PF_CHECK_T(no_keepdim, TypeError, fn, "() received an invalid combination of arguments - got keepdim without dim");
    return py::cast(ops::extreme(self, is_max));
  }
  PF_CHECK(!dim_or_other.is_none(), "Please look up dimensions by name, got: name = None.");
  if (const Tensor* other = as_tensor(dim_or_other)) {
    PF_CHECK_T(no_keepdim, TypeError, fn, "() received an invalid combination of arguments - got (Tensor, Tensor, "
               "keepdim=bool)");
    return py::cast(ops::binary(is_max ? kMaximum : kMinimum, self, *other));
  }
  PF_CHECK_T(no_keepdim || PyBool_Check(keepdim.ptr()), TypeError, fn, "(): argument 'keepdim' must be bool, not ",
             type_name(keepdim));
  const int64_t dim = to_int(dim_or_other, "dim");
  auto [values, indices] = is_max ? ops::max_dim(self, dim, keepdim.ptr() == Py_True)
                                  : ops::min_dim(self, dim, keepdim.ptr() == Py_True);
  return make_return_pair(is_max, std::move(values), std::move(indices));
}

// A reduction over one int dim (all, any): PyTorch's X(input) and X(input, int dim, bool
// keepdim=False); an argument left out arrives as Ellipsis. PyTorch reads dim=None as a dim name.
Tensor one_dim_reduce(const std::string& name, const Tensor& self, py::handle dim, py::handle keepdim) {
  const bool no_dim = dim.ptr() == Py_Ellipsis, no_keepdim = keepdim.ptr() == Py_Ellipsis;
  PF_CHECK_T(!no_dim || no_keepdim, TypeError, name,
             "() received an invalid combination of arguments - got keepdim without dim");
  PF_CHECK(!dim.is_none(), name,
           ": You passed a dimname (string) to this op in place of a dimension index but it does not yet support "
           "this behavior. Please pass a dimension index to work with this op.");
  PF_CHECK_T(!PyBool_Check(dim.ptr()), TypeError, name, "(): argument 'dim' must be int, not bool");
  PF_CHECK_T(no_keepdim || PyBool_Check(keepdim.ptr()), TypeError, name, "(): argument 'keepdim' must be bool, not ",
             type_name(keepdim));
  const Shape dims = no_dim ? Shape{} : Shape{to_int(dim, "dim")};
  py::gil_scoped_release nogil;
  return ops::reduce(name, self, dims, keepdim.ptr() == Py_True);
}

// ============================================================================================
// conversion: to(), cuda(), float(), ...
// ============================================================================================

py::object same_or_new(py::object self, Tensor r) {
  if (r.is_same(tensor_ref(self))) return self;
  return py::cast(std::move(r));
}

py::object convert(py::object self, std::optional<Device> device, std::optional<DType> dtype, bool copy,
                   bool non_blocking = false) {
  const Tensor& t = tensor_ref(self);
  if (device) device = resolve(*device);
  Tensor r;
  {
    py::gil_scoped_release nogil;
    r = ops::to(t, device, dtype, copy, non_blocking);
  }
  return same_or_new(std::move(self), std::move(r));
}

bool to_bool_arg(py::handle h, const char* name) {
  if (!PyBool_Check(h.ptr())) PF_THROW(TypeError, "to(): argument '", name, "' must be bool, not ", type_name(h));
  return h.ptr() == Py_True;
}

// to(dtype, non_blocking=False, copy=False) / to(device=None, dtype=None, non_blocking=False,
// copy=False) / to(other, non_blocking=False, copy=False). non_blocking only matters between
// pinned host memory and a device (ops::copy_).
py::object tensor_to(py::object self, const py::args& args, const py::kwargs& kwargs) {
  std::optional<Device> device;
  std::optional<DType> dtype;
  bool copy = false, non_blocking = false;
  size_t i = 0;
  DType dt;
  if (args.size() > i) {
    py::handle a = args[i];
    if (const Tensor* other = as_tensor(a)) {
      device = other->device();
      dtype = other->dtype();
      ++i;
    } else if (dtype_from_object(a, dt, /*convert=*/false)) {
      dtype = dt;
      ++i;
    } else {
      if (!a.is_none()) device = device_from_object(a);
      ++i;
      if (args.size() > i && (args[i].is_none() || dtype_from_object(args[i], dt, false))) {
        if (!args[i].is_none()) dtype = dt;
        ++i;
      }
    }
  }
  if (args.size() > i) non_blocking = to_bool_arg(args[i++], "non_blocking");
  if (args.size() > i) copy = to_bool_arg(args[i++], "copy");
  PF_CHECK_T(args.size() == i, TypeError, "to() received an invalid combination of arguments");
  for (auto [key, value] : kwargs) {
    const std::string k = key.cast<std::string>();
    if (k == "device") {
      if (!value.is_none()) device = device_from_object(value);
    } else if (k == "dtype") {
      if (!value.is_none()) {
        if (!dtype_from_object(value, dt, true))
          PF_THROW(TypeError, "to(): dtype must be plugflow.dtype, not ", type_name(value));
        dtype = dt;
      }
    } else if (k == "non_blocking") {
      non_blocking = to_bool_arg(value, "non_blocking");
    } else if (k == "copy") {
      copy = to_bool_arg(value, "copy");
    } else {
      PF_THROW(TypeError, "to() got an unexpected keyword argument '", k, "'");
    }
  }
  return convert(std::move(self), device, dtype, copy, non_blocking);
}

// ============================================================================================
// binding helpers
// ============================================================================================

// Names exported at plugflow's top level (torch.add, torch.exp, ...); plugflow/__init__.py reads it.
std::vector<std::string>& public_functions() {
  static std::vector<std::string> names;
  return names;
}

// Binds f as Tensor.name and as the function plugflow.name(input, ...).
template <typename F, typename... Extra>
void def_method_and_function(py::class_<Tensor>& cls, py::module_& m, const char* name, F f, const Extra&... extra) {
  cls.def(name, f, extra...);
  m.def(name, f, py::arg("input"), extra...);
  public_functions().emplace_back(name);
}

template <typename F, typename... Extra>
void def_function(py::module_& m, const char* name, F f, const Extra&... extra) {
  m.def(name, f, extra...);
  public_functions().emplace_back(name);
}

// The elementwise ops' Python exposure, from their definitions (core/opdefs/elementwise.yaml).
struct UnaryExposure {
  std::string name;
  bool function, method, inplace;
  bool nn_functional;  // torch.nn.functional's: bound on _C only, for plugflow.nn.functional
};
const std::vector<UnaryExposure> kUnaryOps = {
#define PF_X(name, function, method, inplace, nn_functional) {name, function, method, inplace, nn_functional},
    PF_OPDEFS_PY_UNARY(PF_X)
#undef PF_X
};

struct BinaryExposure {
  std::string name;
  bool function, method, inplace;
  bool tensor_only;   // no Python number as the other operand (maximum, minimum)
  bool number_input;  // torch.X(number, tensor) too (remainder, bitwise_and, ...)
};
const std::vector<BinaryExposure> kBinaryOps = {
#define PF_X(name, function, method, inplace, tensor_only, number_input) \
  {name, function, method, inplace, tensor_only, number_input},
    PF_OPDEFS_PY_BINARY(PF_X)
#undef PF_X
};

// The reductions over dims (core/opdefs/reductions.yaml): torch.X and Tensor.X(dim, keepdim[, *, dtype]).
struct ReductionExposure {
  std::string name;
  bool dtype_arg;     // takes dtype= (sum, prod, mean)
  bool dim_optional;  // dim defaults to None (PyTorch's no-dim overload), else to ()
  bool one_dim;       // X(input) and X(input, int dim, keepdim=False) (all, any)
};
const std::vector<ReductionExposure> kReductions = {
#define PF_X(name, dtype_arg, dim_optional, one_dim) {name, dtype_arg, dim_optional, one_dim},
    PF_OPDEFS_PY_REDUCTION(PF_X)
#undef PF_X
};

// The reductions to the extreme's index bound from their definitions (core/opdefs/indexed.yaml;
// max_dim and min_dim are bound by hand behind torch.max / torch.min).
struct IndexedExposure {
  std::string name;
  bool dim_optional;  // dim defaults to None: over the flattened input
};
const std::vector<IndexedExposure> kIndexed = {
#define PF_X(name, dim_optional) {name, dim_optional},
    PF_OPDEFS_PY_INDEXED(PF_X)
#undef PF_X
};

struct Alias {
  std::string alias, op;
};
// Aliases of ops bound by the loops below (those of hand-bound ops are bound with them).
const std::vector<Alias> kGenericAliases = [] {
  std::vector<Alias> v;
#define PF_X(alias, op, generic) \
  if (generic) v.push_back({alias, op});
  PF_OPDEFS_PY_ALIASES(PF_X)
#undef PF_X
  return v;
}();

// torch.Generator: a Philox stream (seed + counter offset). Seeds are taken modulo 2^64 like
// PyTorch's. get_state() returns a uint8 tensor in plugflow's own layout (PyTorch's CPU state is
// its mt19937's 5056 bytes, which a Philox stream cannot use): kRngStateBytes bytes, all fields
// little-endian: the magic "PFRG", a uint32 layout version, the uint64 seed, the uint64 offset.
constexpr char kRngStateMagic[4] = {'P', 'F', 'R', 'G'};
constexpr uint32_t kRngStateVersion = 1;
constexpr int64_t kRngStateBytes = 24;

void put_le(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

Tensor rng_state(const Generator& g) {
  const auto [seed, offset] = g.state();
  Tensor t = ops::empty({kRngStateBytes}, DType::UInt8, Device{DeviceType::CPU, 0});
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  std::memcpy(p, kRngStateMagic, 4);
  put_le(p + 4, kRngStateVersion, 4);
  put_le(p + 8, seed, 8);
  put_le(p + 16, offset, 8);
  return t;
}

// Restores a state from rng_state(); a foreign or damaged state raises (PyTorch's types and
// first words for the checks PyTorch also makes) instead of seeding garbage.
void set_rng_state(Generator& g, py::handle state) {
  PF_CHECK_T(py::isinstance<Tensor>(state), TypeError, "expected a torch.ByteTensor, but got ",
             Py_TYPE(state.ptr())->tp_name);
  const Tensor& t = state.cast<const Tensor&>();
  PF_CHECK_T(t.dtype() == DType::UInt8 && t.device().is_cpu(), TypeError, "RNG state must be a torch.ByteTensor");
  PF_CHECK(t.numel() == kRngStateBytes, "Expected a plugflow RNG state of ", kRngStateBytes,
           " bytes (from get_rng_state() or Generator.get_state()) but found the input RNG state size to be ",
           t.numel(), t.numel() == 5056 || t.numel() == 16 ? " (a PyTorch generator state? plugflow's Philox "
                                                             "generator has its own state layout)" : "");
  const Tensor c = ops::contiguous(t);
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  PF_CHECK(std::memcmp(p, kRngStateMagic, 4) == 0,
           "Invalid RNG state: it does not start with plugflow's magic 'PFRG' (not from get_rng_state(), or damaged)");
  const uint64_t version = get_le(p + 4, 4);
  PF_CHECK(version == kRngStateVersion, "Invalid RNG state: layout version ", version, ", this plugflow reads version ",
           kRngStateVersion);
  g.set_state(get_le(p + 8, 8), get_le(p + 16, 8));
}

void bind_generator(py::module_& m) {
  py::class_<Generator>(m, "Generator", "A random number generator (seed and Philox counter offset).")
      .def(py::init([](std::optional<Device> device) {
             PF_CHECK(!device || device->is_cpu() || device->type == DeviceType::CUDA,
                      "Generator: unsupported device ", device->str());
             return std::make_unique<Generator>();
           }),
           py::arg("device") = py::none())
      .def(
          "manual_seed",
          [](py::object self, py::int_ seed) {
            // Negative seeds wrap like PyTorch's (seed & 0xffff_ffff_ffff_ffff).
            const uint64_t s = PyLong_AsUnsignedLongLongMask(seed.ptr());
            if (PyErr_Occurred()) throw py::error_already_set();
            self.cast<Generator&>().manual_seed(s);
            return self;
          },
          py::arg("seed"))
      .def("initial_seed", &Generator::initial_seed)
      .def("seed",
           [](Generator& g) {
             std::random_device rd;
             const uint64_t s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
             g.manual_seed(s);
             return s;
           })
      .def("get_state", &rng_state)
      .def(
          "set_state",
          [](py::object self, py::handle state) {
            set_rng_state(self.cast<Generator&>(), state);
            return self;
          },
          py::arg("new_state"))
      .def_property_readonly("device", [](const Generator&) { return Device{DeviceType::CPU, 0}; });
  m.attr("default_generator") = py::cast(&default_generator(), py::return_value_policy::reference);
  def_function(
      m, "manual_seed",
      [](py::int_ seed) {
        const uint64_t s = PyLong_AsUnsignedLongLongMask(seed.ptr());
        if (PyErr_Occurred()) throw py::error_already_set();
        default_generator().manual_seed(s);
        return py::module_::import("plugflow._C").attr("default_generator");
      },
      py::arg("seed"));
}

}  // namespace

// PyTorch's copy_to: a 0-d value of another shape fills the view as a number would (so it must
// fit the view's dtype); otherwise its leading size-1 dims are dropped (t[0] = row[None]
// works) and it broadcasts.
void copy_to(Tensor& dst, Tensor src) {
  if (src.dim() == 0 && dst.dim() != 0 && src.device().is_cpu()) {
    Scalar s;
    to_scalar(item(src), s);
    check_scalar_fits(s, dst.dtype());
  }
  while (src.dim() > 0 && src.sizes()[0] == 1) src = ops::squeeze(src, 0);
  ops::copy_(dst, src);
}

void bind_tensor(py::module_& m) {
  // Importing submodules of the (still initializing) plugflow package is fine: they depend on
  // nothing but the standard library. Kept for the process's life.
  g_size_type =
      reinterpret_cast<PyTypeObject*>(py::object(py::module_::import("plugflow._size").attr("Size")).release().ptr());
  py::module_ return_types = py::module_::import("plugflow.return_types");
  g_return_type_max = py::object(return_types.attr("max")).release().ptr();
  g_return_type_min = py::object(return_types.attr("min")).release().ptr();

  // ---- dtype ----------------------------------------------------------------------------------
  py::class_<DTypeObject>(m, "dtype", "An element type: plugflow.float32, plugflow.int64, ...")
      .def_property_readonly("is_floating_point", [](const DTypeObject& d) { return is_floating(d.value); })
      .def_property_readonly("is_complex", [](const DTypeObject&) { return false; })
      .def_property_readonly("is_signed",
                             [](const DTypeObject& d) { return d.value != DType::Bool && d.value != DType::UInt8; })
      .def_property_readonly("itemsize", [](const DTypeObject& d) { return itemsize(d.value); })
      .def("__repr__", [](const DTypeObject& d) { return "plugflow." + std::string(dtype_name(d.value)); })
      // Pickling and copy.copy return the singleton: the name of the module-level global.
      .def("__reduce__", [](const DTypeObject& d) { return std::string(dtype_name(d.value)); });
  for (DType t : kAllDTypes) {
    PyObject* obj = py::cast(DTypeObject{t}).release().ptr();
    g_dtype_objects[static_cast<int>(t)] = obj;
    m.attr(std::string(dtype_name(t)).c_str()) = py::handle(obj);
  }
  m.def(
      "promote_types", [](DType a, DType b) { return promote_types(a, b); }, py::arg("type1"), py::arg("type2"));
  m.def("can_cast", &can_cast, py::arg("from_"), py::arg("to"));

  // ---- device ---------------------------------------------------------------------------------
  py::class_<Device>(m, "device", "A device: plugflow.device('cuda:0'), plugflow.device('cuda', 0).")
      .def(py::init([](py::handle spec) {
             if (py::isinstance<Device>(spec)) return spec.cast<Device>();
             return device_from_object(spec);
           }),
           py::arg("type"))
      .def(py::init([](const std::string& type, std::optional<int64_t> index) {
             Device d = Device::parse(type);
             PF_CHECK_T(type.find(':') == std::string::npos || !index, ValueError,
                        "type (string) must not include an index because index was passed explicitly: ", type);
             if (index) {
               PF_CHECK_T(*index >= 0, ValueError, "Device index must not be negative");
               d.index = static_cast<int>(*index);
             }
             return d;
           }),
           py::arg("type"), py::arg("index"))
      .def_property_readonly("type", [](const Device& d) { return std::string(device_type_name(d.type)); })
      .def_property_readonly("index",
                             [](const Device& d) -> py::object {
                               if (d.is_cpu() || d.index < 0) return py::none();
                               return py::int_(d.index);
                             })
      .def("__repr__", &device_repr)
      .def("__str__",
           [](const Device& d) { return d.index < 0 || d.is_cpu() ? std::string(device_type_name(d.type)) : d.str(); })
      .def("__eq__",
           [](const Device& a, py::handle b) -> py::object {
             if (!py::isinstance<Device>(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             return py::bool_(a == b.cast<Device>());
           })
      .def("__hash__", [](const Device& d) { return static_cast<int64_t>(d.type) * 1000003 + d.index; })
      .def("__reduce__", [](py::handle self) {
        const Device& d = self.cast<const Device&>();
        const std::string s = d.index < 0 || d.is_cpu() ? std::string(device_type_name(d.type)) : d.str();
        return py::make_tuple(py::type::of(self), py::make_tuple(s));
      });
  py::implicitly_convertible<py::str, Device>();

  // ---- Tensor -----------------------------------------------------------------------------------
  // dynamic_attr: tensors carry arbitrary attributes in PyTorch (hooks, flags), and Python
  // subclasses (nn.Parameter) get a __dict__ anyway.
  py::class_<Tensor> cls(m, "Tensor", py::dynamic_attr(), "A multi-dimensional strided array on a device.");
  g_tensor_type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  cls.attr("__array_priority__") = 1000;  // numpy defers to Tensor's reflected operators

  // Tensor(): empty; Tensor(*sizes): uninitialized; Tensor(sequence | ndarray): a copy of the data,
  // all in the default floating dtype (float32 unless set_default_dtype changed it); Tensor(other): a new tensor sharing other's storage (what nn.Parameter uses).
  cls.def(py::init([](const py::args& args) {
    const Device cpu{DeviceType::CPU, 0};
    if (args.size() == 0) return ops::empty({0}, default_float_dtype(), cpu);
    if (args.size() == 1) {
      if (const Tensor* t = as_tensor(args[0]))
        return Tensor::view_of(t->storage(), t->sizes(), t->strides(), t->offset(), t->dtype());
      if (!PyLong_Check(args[0].ptr())) return tensor_from_data(args[0], default_float_dtype(), cpu);
    }
    return ops::empty(ints_from_args(args, "Tensor", "size"), default_float_dtype(), cpu);
  }));

  // -- metadata
  cls.def_property_readonly("shape", [](const Tensor& t) { return make_size(t.sizes()); })
      .def_property_readonly("dtype", [](const Tensor& t) { return t.dtype(); })
      .def_property_readonly("device", [](const Tensor& t) { return t.device(); })
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("is_cuda", [](const Tensor& t) { return t.device().type == DeviceType::CUDA; })
      .def_property_readonly("is_cpu", [](const Tensor& t) { return t.device().is_cpu(); })
      .def_property_readonly("itemsize", &Tensor::itemsize)
      .def_property_readonly("nbytes", [](const Tensor& t) { return t.numel() * static_cast<int64_t>(t.itemsize()); })
      .def_property_readonly("T",
                             [](const Tensor& t) {
                               Shape dims(t.dim());
                               for (int64_t i = 0; i < t.dim(); ++i) dims[i] = t.dim() - 1 - i;
                               return ops::permute(t, dims);
                             })
      .def(
          "size",
          [](const Tensor& t, py::handle dim) -> py::object {
            if (dim.is_none()) return make_size(t.sizes());
            return py::int_(t.size(ops::wrap_dim_no_scalar(to_int(dim, "dim"), t.dim())));
          },
          py::arg("dim") = py::none())
      .def(
          "stride",
          [](const Tensor& t, py::handle dim) -> py::object {
            if (dim.is_none()) return py::tuple(py::cast(t.strides()));
            return py::int_(t.stride(ops::wrap_dim_no_scalar(to_int(dim, "dim"), t.dim())));
          },
          py::arg("dim") = py::none())
      .def("dim", &Tensor::dim)
      .def("ndimension", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("nelement", &Tensor::numel)
      .def("element_size", &Tensor::itemsize)
      .def("storage_offset", &Tensor::offset)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); })
      .def("get_device", [](const Tensor& t) { return t.device().is_cpu() ? -1 : t.device().index; })
      .def("is_contiguous", [](const Tensor& t) { return t.is_contiguous(); })
      .def("is_floating_point", [](const Tensor& t) { return is_floating(t.dtype()); })
      .def("is_complex", [](const Tensor&) { return false; })
      .def("__len__",
           [](const Tensor& t) {
             PF_CHECK_T(t.dim() > 0, TypeError, "len() of a 0-d tensor");
             return t.sizes()[0];
           })
      // Identity hash, as PyTorch: tensors are dict keys and set members (optimizers, hooks).
      .def("__hash__", [](py::handle self) { return reinterpret_cast<intptr_t>(self.ptr()); });
  m.def("numel", &Tensor::numel, py::arg("input"));
  public_functions().emplace_back("numel");
  m.def(
      "is_floating_point", [](const Tensor& t) { return is_floating(t.dtype()); }, py::arg("input"));
  public_functions().emplace_back("is_floating_point");

  // -- Python values
  cls.def("item", &item)
      .def("tolist", &tolist)
      .def(
          "numpy",
          [](py::object self, bool force) {
            // force=True (PyTorch 1.13): the values of any tensor, detached and on the CPU; it
            // shares memory with the tensor when that is already on the CPU.
            if (force) {
              const Tensor detached = on_cpu(autograd::detach(tensor_ref(self)));
              return to_numpy(detached, py::cast(detached));
            }
            return to_numpy(tensor_ref(self), self);
          },
          py::kw_only(), py::arg("force") = false)
      .def(
          "__array__",
          [](py::object self, py::handle dtype) -> py::object {
            py::object arr = to_numpy(on_cpu(tensor_ref(self)), self);
            if (!dtype.is_none()) return arr.attr("astype")(dtype);
            return arr;
          },
          py::arg("dtype") = py::none())
      .def("__bool__",
           [](const Tensor& t) {
             PF_CHECK(t.numel() != 0, "Boolean value of Tensor with no values is ambiguous");
             PF_CHECK(t.numel() == 1, "Boolean value of Tensor with more than one value is ambiguous");
             return single_value(t).to_bool();
           })
      .def("__float__", [](const Tensor& t) { return single_value(t).to_double(); })
      .def("__int__",
           [](const Tensor& t) -> py::object {
             const Scalar s = single_value(t);
             if (s.is_floating()) {
               const double d = s.to_double();
               PF_CHECK_T(std::isfinite(d), ValueError, "cannot convert float ", d, " to integer");
               return py::reinterpret_steal<py::object>(PyLong_FromDouble(d));
             }
             return py::int_(s.to_int());
           })
      .def("__index__", [](const Tensor& t) {
        PF_CHECK_T(t.numel() == 1 && is_integral(t.dtype(), /*include_bool=*/true), TypeError,
                   "only integer tensors of a single element can be converted to an index");
        return single_value(t).to_int();
      });

  // -- conversion and copies
  cls.def("to", &tensor_to)
      .def("cpu",
           [](py::object self) {
             return convert(std::move(self), Device{DeviceType::CPU, 0}, std::nullopt, false);
           })
      .def(
          "cuda",
          [](py::object self, py::handle device, bool non_blocking) {
            Device d{DeviceType::CUDA, 0};
            if (!device.is_none()) d = device_from_object(device);
            PF_CHECK_T(d.type == DeviceType::CUDA, ValueError, "Invalid device, must be cuda device");
            return convert(std::move(self), d, std::nullopt, false, non_blocking);
          },
          py::arg("device") = py::none(), py::arg("non_blocking") = false)
      .def(
          "type_as",
          [](py::object self, const Tensor& other) {
            return convert(std::move(self), std::nullopt, other.dtype(), false);
          },
          py::arg("other"))
      .def("contiguous",
           [](py::object self) {
             const Tensor& t = tensor_ref(self);
             if (t.is_contiguous()) return self;
             return same_or_new(self, ops::contiguous(t));
           })
      .def(
          "clone", [](const Tensor& t) { return ops::clone(t); }, py::call_guard<py::gil_scoped_release>())
      .def(
          "_clone_channels_last", [](const Tensor& t) { return ops::clone(t, MemoryFormat::ChannelsLast); },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "copy_",
          [](py::object self, const Tensor& src, bool non_blocking) {
            Tensor& t = tensor_ref(self);
            {
              py::gil_scoped_release nogil;
              ops::copy_(t, src, non_blocking);
            }
            return self;
          },
          py::arg("src"), py::arg("non_blocking") = false)
      .def(
          "pin_memory",
          [](py::object self, py::handle device) {
            // PyTorch 1.13's optional device names the accelerator; every backend's pinned memory
            // serves all devices here.
            (void)device;
            const Tensor& t = tensor_ref(self);
            Tensor r = ops::pin_memory(t);
            return same_or_new(std::move(self), std::move(r));
          },
          py::arg("device") = py::none())
      .def(
          "is_pinned", [](const Tensor& t, py::handle) { return ops::is_pinned(t); },
          py::arg("device") = py::none())
      .def(
          "fill_",
          [](py::object self, py::handle value) {
            Scalar s;
            if (const Tensor* v = as_tensor(value)) {
              PF_CHECK(v->dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", v->dim(),
                       " dimensions.");
              to_scalar(item(*v), s);
            } else if (!to_scalar(value, s)) {
              PF_THROW(TypeError, "fill_(): argument 'value' must be Number, not ", type_name(value));
            }
            ops::fill_(tensor_ref(self), s);
            return self;
          },
          py::arg("value"))
      .def("zero_",
           [](py::object self) {
             ops::zero_(tensor_ref(self));
             return self;
           })
      .def(
          "uniform_",
          [](py::object self, double low, double high, Generator* generator) {
            ops::uniform_(tensor_ref(self), low, high, generator);
            return self;
          },
          py::arg("from") = 0.0, py::arg("to") = 1.0, py::kw_only(), py::arg("generator") = nullptr)
      .def(
          "normal_",
          [](py::object self, double mean, double std, Generator* generator) {
            ops::normal_(tensor_ref(self), mean, std, generator);
            return self;
          },
          py::arg("mean") = 0.0, py::arg("std") = 1.0, py::kw_only(), py::arg("generator") = nullptr);
  m.def(
      "clone", [](const Tensor& t) { return ops::clone(t); }, py::arg("input"),
      py::call_guard<py::gil_scoped_release>());
  public_functions().emplace_back("clone");

  struct Cast {
    const char* name;
    DType dtype;
  };
  for (Cast c : {Cast{"float", DType::Float32}, Cast{"double", DType::Float64}, Cast{"half", DType::Float16},
                 Cast{"bfloat16", DType::BFloat16}, Cast{"long", DType::Int64}, Cast{"int", DType::Int32},
                 Cast{"short", DType::Int16}, Cast{"char", DType::Int8}, Cast{"byte", DType::UInt8},
                 Cast{"bool", DType::Bool}}) {
    const DType dt = c.dtype;
    cls.def(c.name, [dt](py::object self) { return convert(std::move(self), std::nullopt, dt, false); });
  }

  // -- indexing
  cls.def("__getitem__", [](const Tensor& t, py::handle index) { return index_tensor(t, index); })
      .def("__setitem__", [](Tensor& t, py::handle index, py::handle value) { set_index(t, index, value); })
      .def("__iter__",
           [](const Tensor& t) {
             PF_CHECK_T(t.dim() > 0, TypeError, "iteration over a 0-d tensor");
             py::list rows(t.sizes()[0]);
             for (int64_t i = 0; i < t.sizes()[0]; ++i) rows[i] = py::cast(ops::select(t, 0, i));
             return rows.attr("__iter__")();
           })
      .def("__contains__", [](const Tensor& t, py::handle element) {
        Tensor eq;
        if (const Tensor* e = as_tensor(element)) {
          eq = ops::binary(kEq, t, *e);
        } else if (Scalar s; to_scalar(element, s)) {
          eq = ops::binary(kEq, t, s);
        } else {
          PF_THROW(Error, "Tensor.__contains__ only supports Tensor or scalar, but you passed in a ",
                   py::str(py::type::of(element)).cast<std::string>(), ".");
        }
        return ops::any(eq);
      });

  // -- arithmetic: methods, functions, operators
  def_method_and_function(
      cls, m, "add",
      [](const Tensor& self, py::handle other, py::handle alpha) { return add_sub(kAdd, self, other, alpha); },
      py::arg("other"), py::kw_only(), py::arg("alpha") = py::none());
  def_method_and_function(
      cls, m, "sub",
      [](const Tensor& self, py::handle other, py::handle alpha) { return add_sub(kSub, self, other, alpha); },
      py::arg("other"), py::kw_only(), py::arg("alpha") = py::none());
  def_method_and_function(
      cls, m, "subtract",
      [](const Tensor& self, py::handle other, py::handle alpha) { return add_sub(kSub, self, other, alpha); },
      py::arg("other"), py::kw_only(), py::arg("alpha") = py::none());
  cls.def(
      "add_",
      [](py::object self, py::handle other, py::handle alpha) { return add_sub_(kAdd, std::move(self), other, alpha); },
      py::arg("other"), py::kw_only(), py::arg("alpha") = py::none());
  cls.def(
      "sub_",
      [](py::object self, py::handle other, py::handle alpha) { return add_sub_(kSub, std::move(self), other, alpha); },
      py::arg("other"), py::kw_only(), py::arg("alpha") = py::none());

  for (const char* name : {"div", "divide", "true_divide"}) {
    def_method_and_function(
        cls, m, name,
        [](const Tensor& self, py::handle other, const std::optional<std::string>& rounding_mode) {
          return div_method(self, other, rounding_mode);
        },
        py::arg("other"), py::kw_only(), py::arg("rounding_mode") = py::none());
  }
  cls.def(
      "div_",
      [](py::object self, py::handle other, const std::optional<std::string>& rounding_mode) {
        if (!rounding_mode) return inplace_binary(kDiv, std::move(self), other, false);
        Tensor& t = tensor_ref(self);
        const Tensor r = div_method(t, other, rounding_mode);
        PF_CHECK(can_cast(r.dtype(), t.dtype()), "result type ", dtype_name(r.dtype()),
                 " can't be cast to the desired output type ", dtype_name(t.dtype()));
        ops::copy_(t, r);
        return self;
      },
      py::arg("other"), py::kw_only(), py::arg("rounding_mode") = py::none());

  for (const BinaryExposure& op : kBinaryOps) {
    const std::string* n = &op.name;
    const char* name = n->c_str();
    if (op.tensor_only) {
      const auto f = [n](const Tensor& self, const Tensor& other) { return ops::binary(*n, self, other); };
      if (op.method) cls.def(name, f, py::arg("other"));
      if (op.function) def_function(m, name, f, py::arg("input"), py::arg("other"));
      if (op.inplace)
        cls.def((op.name + "_").c_str(),
                [n](py::object self, const Tensor& other) {
                  ops::binary_(*n, tensor_ref(self), other);
                  return self;
                },
                py::arg("other"));
      continue;
    }
    const auto f = [n](const Tensor& self, py::handle other) { return binary_method(*n, self, other); };
    if (op.method) cls.def(name, f, py::arg("other"));
    if (op.function) def_function(m, name, f, py::arg("input"), py::arg("other"));
    if (op.inplace)
      cls.def((op.name + "_").c_str(),
              [n](py::object self, py::handle other) { return inplace_binary(*n, std::move(self), other, false); },
              py::arg("other"));
  }
  // torch.pow(2, t): a number as the base.
  m.def(
      "pow",
      [](py::handle self, py::handle exponent) -> Tensor {
        if (const Tensor* base = as_tensor(self)) return binary_method(kPow, *base, exponent);
        Scalar s;
        const Tensor* e = as_tensor(exponent);
        if (!to_scalar(self, s) || e == nullptr)
          PF_THROW(TypeError, "pow() expects a Tensor and a Tensor or Number, got ", type_name(self), " and ",
                   type_name(exponent));
        return ops::binary(kPow, s, *e);
      },
      py::arg("input"), py::arg("exponent"));

  struct Operator {
    const char* name;
    const std::string* op;
  };
  for (Operator o :
       {Operator{"__add__", &kAdd}, Operator{"__sub__", &kSub}, Operator{"__mul__", &kMul},
        Operator{"__truediv__", &kDiv}, Operator{"__floordiv__", &kFloorDivide}, Operator{"__mod__", &kRemainder},
        Operator{"__pow__", &kPow}, Operator{"__and__", &kBitwiseAnd}, Operator{"__or__", &kBitwiseOr},
        Operator{"__xor__", &kBitwiseXor}, Operator{"__eq__", &kEq}, Operator{"__ne__", &kNe}, Operator{"__lt__", &kLt},
        Operator{"__le__", &kLe}, Operator{"__gt__", &kGt}, Operator{"__ge__", &kGe}}) {
    const std::string* op = o.op;
    cls.def(
        o.name, [op](const Tensor& self, py::handle other) { return binary_operator(*op, self, other); },
        py::is_operator());
  }
  for (Operator o : {Operator{"__radd__", &kAdd}, Operator{"__rsub__", &kSub}, Operator{"__rmul__", &kMul},
                     Operator{"__rtruediv__", &kDiv}, Operator{"__rfloordiv__", &kFloorDivide},
                     Operator{"__rmod__", &kRemainder}, Operator{"__rpow__", &kPow}, Operator{"__rand__", &kBitwiseAnd},
                     Operator{"__ror__", &kBitwiseOr}, Operator{"__rxor__", &kBitwiseXor}}) {
    const std::string* op = o.op;
    cls.def(
        o.name, [op](const Tensor& self, py::handle other) { return reflected_operator(*op, self, other); },
        py::is_operator());
  }
  for (Operator o : {Operator{"__iadd__", &kAdd}, Operator{"__isub__", &kSub}, Operator{"__imul__", &kMul},
                     Operator{"__itruediv__", &kDiv}, Operator{"__ifloordiv__", &kFloorDivide},
                     Operator{"__imod__", &kRemainder}, Operator{"__ipow__", &kPow}, Operator{"__iand__", &kBitwiseAnd},
                     Operator{"__ior__", &kBitwiseOr}, Operator{"__ixor__", &kBitwiseXor}}) {
    const std::string* op = o.op;
    cls.def(
        o.name, [op](py::object self, py::handle other) { return inplace_binary(*op, std::move(self), other, true); },
        py::is_operator());
  }
  cls.def("__neg__", [](const Tensor& t) { return ops::unary(kNeg, t); })
      .def("__pos__", [](py::object self) { return self; })
      .def("__abs__", [](const Tensor& t) { return ops::unary(kAbs, t); })
      .def("__invert__", [](const Tensor& t) { return ops::unary(kBitwiseNot, t); })
      .def(
          "__matmul__",
          [](const Tensor& a, py::handle b) -> py::object {
            const Tensor* o = as_tensor(b);
            if (o == nullptr) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
            Tensor r;
            {
              py::gil_scoped_release nogil;
              r = ops::matmul(a, *o);
            }
            return py::cast(std::move(r));
          },
          py::is_operator())
      .def(
          "__rmatmul__",
          [](const Tensor& a, py::handle b) -> py::object {
            const Tensor* o = as_tensor(b);
            if (o == nullptr) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
            return py::cast(ops::matmul(*o, a));
          },
          py::is_operator());

  // -- unary math
  for (const UnaryExposure& op : kUnaryOps) {
    const std::string* n = &op.name;
    const char* name = n->c_str();
    const std::string inplace_name = op.name + "_";
    if (op.nn_functional) {
      m.def(name, [n](const Tensor& t) { return ops::unary(*n, t); }, py::arg("input"));
      if (op.inplace)
        m.def(inplace_name.c_str(), [n](Tensor& t) -> Tensor& { return ops::unary_(*n, t); }, py::arg("input"));
      continue;
    }
    const auto f = [n](const Tensor& t) { return ops::unary(*n, t); };
    if (op.method) cls.def(name, f);
    if (op.function) def_function(m, name, f, py::arg("input"));
    if (op.inplace)
      cls.def(inplace_name.c_str(), [n](py::object self) {
        ops::unary_(*n, tensor_ref(self));
        return self;
      });
  }
  for (const Alias& a : kGenericAliases) {
    const std::string* op = &a.op;
    const bool unary = std::any_of(kUnaryOps.begin(), kUnaryOps.end(), [&](const auto& u) { return u.name == a.op; });
    if (unary)
      def_method_and_function(cls, m, a.alias.c_str(), [op](const Tensor& t) { return ops::unary(*op, t); });
    else
      def_method_and_function(
          cls, m, a.alias.c_str(), [op](const Tensor& self, py::handle other) { return binary_method(*op, self, other); },
          py::arg("other"));
  }

  // torch.X(number, tensor): PyTorch takes a Python number as the input of these functions, as
  // a 0-d tensor of the dtype `tensor (op) number` computes in (no reciprocal trick for div, unlike
  // the reflected operator). An overload after the tensor-input one, which it calls.
  std::vector<std::string> number_input_functions = {"add", "sub", "subtract", "div", "divide", "true_divide"};
  for (const BinaryExposure& op : kBinaryOps)
    if (op.number_input) number_input_functions.push_back(op.name);
  for (const Alias& a : kGenericAliases)
    for (const BinaryExposure& op : kBinaryOps)
      if (op.number_input && op.name == a.op) number_input_functions.push_back(a.alias);
  // Ops whose integer operands promote to float32 (the definitions' `dtype: float`).
  std::vector<std::string> float_ops;
#define PF_X(name, kind, integral_only, float_only, signature) \
  if (float_only) float_ops.push_back(name);
  PF_OPDEFS_BINARY(PF_X)
#undef PF_X
  for (const std::string& name : number_input_functions) {
    py::object tensor_input_form = m.attr(name.c_str());
    const bool division = name == "div" || name == "divide" || name == "true_divide";
    const bool float_op = std::find(float_ops.begin(), float_ops.end(), name) != float_ops.end();
    m.def(
        name.c_str(),
        [tensor_input_form, division, float_op](py::handle input, const Tensor& other, const py::kwargs& kwargs) {
          Scalar s;
          if (!to_scalar(input, s))
            PF_THROW(TypeError, "argument 'input' (position 1) must be Tensor or Number, not ", type_name(input));
          // A bool stays a bool tensor, so sub(True, t) raises as PyTorch's does; a true
          // division and the float ops compute in float32 when both are integers (2**40 / int32
          // is not 0, xlogy(-1, uint8) is not xlogy(255, ...)).
          DType dt = s.is_bool() ? DType::Bool : ops::result_type(other, s);
          const bool true_division = division && (!kwargs.contains("rounding_mode") || kwargs["rounding_mode"].is_none());
          if ((true_division || float_op) && !s.is_bool() && !is_floating(dt)) dt = default_float_dtype();
          const Tensor wrapped = s.is_bool() ? ops::scalar_tensor(s, dt, other.device())
                                             : ops::wrapped_scalar_tensor(s, dt, other.device());
          return tensor_input_form(wrapped, other, **kwargs);
        },
        py::arg("input"), py::arg("other"));
  }

  // -- reductions
  for (const ReductionExposure& r : kReductions) {
    const std::string* name = &r.name;
    const py::object dim_default = r.dim_optional ? py::object(py::none()) : py::object(py::tuple());
    if (r.dtype_arg && r.dim_optional)  // X(input, *, dtype) and X(input, dim, keepdim=False, *, dtype)
      def_method_and_function(
          cls, m, name->c_str(),
          [name, one_dim = r.one_dim](const Tensor& t, py::handle dim, py::handle keepdim, std::optional<DType> dtype) {
            return optional_dim_reduce(*name, one_dim, t, dim, keepdim, dtype);
          },
          py::arg("dim") = py::ellipsis(), py::arg("keepdim") = py::ellipsis(), py::kw_only(),
          py::arg("dtype") = py::none());
    else if (r.one_dim)
      def_method_and_function(
          cls, m, name->c_str(),
          [name](const Tensor& t, py::handle dim, py::handle keepdim) { return one_dim_reduce(*name, t, dim, keepdim); },
          py::arg("dim") = py::ellipsis(), py::arg("keepdim") = py::ellipsis());
    else if (r.dtype_arg)
      def_method_and_function(
          cls, m, name->c_str(),
          [name](const Tensor& t, py::handle dim, bool keepdim, std::optional<DType> dtype) {
            return reduce_method(*name, t, dim, keepdim, dtype);
          },
          py::arg("dim") = dim_default, py::arg("keepdim") = false, py::kw_only(), py::arg("dtype") = py::none());
    else
      def_method_and_function(
          cls, m, name->c_str(),
          [name](const Tensor& t, py::handle dim, bool keepdim) {
            return reduce_method(*name, t, dim, keepdim, std::nullopt);
          },
          py::arg("dim") = dim_default, py::arg("keepdim") = false);
  }
  def_method_and_function(
      cls, m, "max", [](const Tensor& t, py::handle dim, py::handle keepdim) { return max_min(true, t, dim, keepdim); },
      py::arg("dim") = py::ellipsis(), py::arg("keepdim") = py::ellipsis());
  def_method_and_function(
      cls, m, "min", [](const Tensor& t, py::handle dim, py::handle keepdim) { return max_min(false, t, dim, keepdim); },
      py::arg("dim") = py::ellipsis(), py::arg("keepdim") = py::ellipsis());
  // The reductions to the extreme's index (core/opdefs/indexed.yaml): torch.X / Tensor.X(dim, keepdim=False),
  // dim None (the default where optional): over the flattened input.
  for (const IndexedExposure& r : kIndexed) {
    const std::string* name = &r.name;
    auto f = [name](const Tensor& t, py::handle dim, bool keepdim) {
      PF_CHECK_T(!PyBool_Check(dim.ptr()), TypeError, *name, "(): argument 'dim' must be int, not bool");
      const std::optional<int64_t> d = dim.is_none() ? std::nullopt : std::optional<int64_t>(to_int(dim, "dim"));
      py::gil_scoped_release nogil;
      return ops::indexed(*name, t, d, keepdim)[0];
    };
    if (r.dim_optional)
      def_method_and_function(cls, m, name->c_str(), f, py::arg("dim") = py::none(), py::arg("keepdim") = false);
    else
      def_method_and_function(cls, m, name->c_str(), f, py::arg("dim"), py::arg("keepdim") = false);
  }

  // -- linear algebra (the GIL is released: these run long enough for other threads to matter)
  def_method_and_function(
      cls, m, "matmul", [](const Tensor& a, const Tensor& b) { return ops::matmul(a, b); }, py::arg("other"),
      py::call_guard<py::gil_scoped_release>());
  def_method_and_function(
      cls, m, "mm", [](const Tensor& a, const Tensor& b) { return ops::mm(a, b); }, py::arg("mat2"),
      py::call_guard<py::gil_scoped_release>());
  def_method_and_function(
      cls, m, "bmm", [](const Tensor& a, const Tensor& b) { return ops::bmm(a, b); }, py::arg("mat2"),
      py::call_guard<py::gil_scoped_release>());

  // -- views: methods take sizes as *args (t.view(2, 3)), functions as one sequence.
  cls.def("view",
          [](const Tensor& t, const py::args& shape, const py::kwargs& kwargs) {
            // view(dtype) / view(dtype=...): the same bytes as another dtype; else sizes
            py::handle as_dtype = shape.size() == 1 && !kwargs.contains("dtype") ? shape[0]
                                  : kwargs.contains("dtype") && shape.size() == 0 ? kwargs["dtype"]
                                                                                  : py::handle();
            DType dt;
            if (as_dtype && !py::isinstance<py::int_>(as_dtype) && dtype_from_object(as_dtype, dt, false))
              return ops::view_dtype(t, dt);
            PF_CHECK_T(kwargs.empty(), TypeError, "view() got an unexpected keyword argument '",
                       py::str(kwargs.begin()->first).cast<std::string>(), "'");
            return ops::view(t, ints_from_args(shape, "view", "size"));
          })
      .def("reshape", [](const Tensor& t,
                         const py::args& shape) { return ops::reshape(t, ints_from_args(shape, "reshape", "shape")); })
      .def("permute", [](const Tensor& t,
                         const py::args& dims) { return ops::permute(t, ints_from_args(dims, "permute", "dims")); })
      .def("expand", [](const Tensor& t,
                        const py::args& sizes) { return ops::expand(t, ints_from_args(sizes, "expand", "size")); })
      // resize_: what out= arguments get; PyTorch's warning for a resized out tensor names it.
      .def("resize_",
           [](py::object self, const py::args& sizes) {
             Tensor& t = tensor_ref(self);
             PF_CHECK(!autograd::requires_grad(t), "cannot resize variables that require grad");
             ops::resize_(t, ints_from_args(sizes, "resize_", "size"));
             return self;
           })
      .def(
          "resize_as_",
          [](py::object self, const Tensor& other) {
            Tensor& t = tensor_ref(self);
            PF_CHECK(!autograd::requires_grad(t), "cannot resize variables that require grad");
            ops::resize_(t, other.sizes());
            return self;
          },
          py::arg("the_template"))
      .def(
          "view_as", [](const Tensor& t, const Tensor& other) { return ops::view(t, other.sizes()); }, py::arg("other"))
      .def(
          "reshape_as", [](const Tensor& t, const Tensor& other) { return ops::reshape(t, other.sizes()); },
          py::arg("other"))
      .def(
          "expand_as", [](const Tensor& t, const Tensor& other) { return ops::expand(t, other.sizes()); },
          py::arg("other"));
  m.def(
      "reshape",
      [](const Tensor& t, py::handle shape) { return ops::reshape(t, ints_from_sequence(shape, "reshape", "shape")); },
      py::arg("input"), py::arg("shape"));
  m.def(
      "permute",
      [](const Tensor& t, py::handle dims) { return ops::permute(t, ints_from_sequence(dims, "permute", "dims")); },
      py::arg("input"), py::arg("dims"));
  m.def(
      "as_strided",
      [](const Tensor& t, py::handle size, py::handle stride, std::optional<int64_t> offset) {
        return ops::as_strided(t, ints_from_sequence(size, "as_strided", "size"),
                               ints_from_sequence(stride, "as_strided", "stride"), offset.value_or(t.offset()));
      },
      py::arg("input"), py::arg("size"), py::arg("stride"), py::arg("storage_offset") = py::none());
  for (const char* name : {"reshape", "permute", "as_strided"}) public_functions().emplace_back(name);
  cls.def(
      "as_strided",
      [](const Tensor& t, py::handle size, py::handle stride, std::optional<int64_t> offset) {
        return ops::as_strided(t, ints_from_sequence(size, "as_strided", "size"),
                               ints_from_sequence(stride, "as_strided", "stride"), offset.value_or(t.offset()));
      },
      py::arg("size"), py::arg("stride"), py::arg("storage_offset") = py::none());

  for (const char* name : {"transpose", "swapaxes", "swapdims"}) {
    def_method_and_function(
        cls, m, name, [](const Tensor& t, int64_t d0, int64_t d1) { return ops::transpose(t, d0, d1); },
        py::arg("dim0"), py::arg("dim1"));
  }
  def_method_and_function(cls, m, "t", [](const Tensor& t) {
    PF_CHECK(t.dim() <= 2, "t() expects a tensor with <= 2 dimensions, but self is ", t.dim(), "D");
    return t.dim() < 2 ? ops::view(t, t.sizes()) : ops::transpose(t, 0, 1);
  });
  def_method_and_function(
      cls, m, "squeeze", [](const Tensor& t, std::optional<int64_t> dim) { return ops::squeeze(t, dim); },
      py::arg("dim") = py::none());
  def_method_and_function(
      cls, m, "unsqueeze", [](const Tensor& t, int64_t dim) { return ops::unsqueeze(t, dim); }, py::arg("dim"));
  def_method_and_function(
      cls, m, "flatten", [](const Tensor& t, int64_t start, int64_t end) { return ops::flatten(t, start, end); },
      py::arg("start_dim") = 0, py::arg("end_dim") = -1);
  def_method_and_function(
      cls, m, "narrow",
      [](const Tensor& t, int64_t dim, int64_t start, int64_t length) { return ops::narrow(t, dim, start, length); },
      py::arg("dim"), py::arg("start"), py::arg("length"));
  def_method_and_function(
      cls, m, "select",
      [](const Tensor& t, int64_t dim, int64_t index) { return ops::select(t, dim, index); },
      py::arg("dim"), py::arg("index"));

  // -- type promotion
  def_function(
      m, "result_type",
      [](py::handle a, py::handle b) {
        const Tensor* ta = as_tensor(a);
        const Tensor* tb = as_tensor(b);
        Scalar s;
        if (ta && tb) return ops::result_type(*ta, *tb);
        if (ta && to_scalar(b, s)) return ops::result_type(*ta, s);
        if (tb && to_scalar(a, s)) return ops::result_type(*tb, s);
        PF_THROW(TypeError, "result_type() expects a Tensor and a Tensor or Number, got ", type_name(a), " and ",
                 type_name(b));
      },
      py::arg("tensor1"), py::arg("tensor2"));

  // -- creation primitives behind plugflow/_creation.py, which resolves dtype and device
  // defaults. `size` is the tuple of the caller's positional sizes: (2, 3) or ((2, 3),).
  const auto dev = [](std::optional<Device> d) { return resolve(d.value_or(Device{DeviceType::CPU, 0})); };
  m.def(
      "_empty",
      [dev](py::handle size, DType dtype, std::optional<Device> device) {
        return ops::empty(ints_from_args(size, "empty", "size"), dtype, dev(device));
      },
      py::arg("size"), py::arg("dtype"), py::arg("device") = py::none());
  m.def(
      "_zeros",
      [dev](py::handle size, DType dtype, std::optional<Device> device) {
        return ops::zeros(ints_from_args(size, "zeros", "size"), dtype, dev(device));
      },
      py::arg("size"), py::arg("dtype"), py::arg("device") = py::none());
  m.def(
      "_ones",
      [dev](py::handle size, DType dtype, std::optional<Device> device) {
        return ops::ones(ints_from_args(size, "ones", "size"), dtype, dev(device));
      },
      py::arg("size"), py::arg("dtype"), py::arg("device") = py::none());
  m.def(
      "_full",
      [dev](py::handle size, py::handle value, std::optional<DType> dtype, std::optional<Device> device) {
        Scalar s;
        if (const Tensor* t = as_tensor(value)) {
          PF_CHECK(t->numel() == 1, "full(): fill_value must be a number or a one-element tensor");
          to_scalar(item(*t), s);
        } else if (!to_scalar(value, s)) {
          PF_THROW(TypeError, "full(): argument 'fill_value' must be Number, not ", type_name(value));
        }
        return ops::full(ints_from_args(size, "full", "size"), s, dtype.value_or(s.default_dtype()), dev(device));
      },
      py::arg("size"), py::arg("fill_value"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "_arange",
      [dev](Scalar start, Scalar end, Scalar step, std::optional<DType> dtype, std::optional<Device> device) {
        return ops::arange(start, end, step, dtype, dev(device));
      },
      py::arg("start"), py::arg("end"), py::arg("step"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "_linspace",
      [dev](double start, double end, int64_t steps, DType dtype, std::optional<Device> device) {
        PF_CHECK(steps >= 0, "number of steps must be non-negative");
        return ops::linspace(start, end, steps, dtype, dev(device));
      },
      py::arg("start"), py::arg("end"), py::arg("steps"), py::arg("dtype"), py::arg("device") = py::none());
  m.def(
      "_rand",
      [dev](py::handle size, DType dtype, std::optional<Device> device, Generator* generator) {
        return ops::rand(ints_from_args(size, "rand", "size"), dtype, dev(device), generator);
      },
      py::arg("size"), py::arg("dtype"), py::arg("device") = py::none(), py::arg("generator") = nullptr);
  m.def(
      "_randn",
      [dev](py::handle size, DType dtype, std::optional<Device> device, Generator* generator) {
        return ops::randn(ints_from_args(size, "randn", "size"), dtype, dev(device), generator);
      },
      py::arg("size"), py::arg("dtype"), py::arg("device") = py::none(), py::arg("generator") = nullptr);
  m.def(
      "_randint",
      [dev](int64_t low, int64_t high, py::handle size, DType dtype, std::optional<Device> device,
            Generator* generator) {
        return ops::randint(low, high, ints_from_args(size, "randint", "size"), dtype, dev(device), generator);
      },
      py::arg("low"), py::arg("high"), py::arg("size"), py::arg("dtype"), py::arg("device") = py::none(),
      py::arg("generator") = nullptr);
  m.def(
      "_randperm",
      [dev](int64_t n, DType dtype, std::optional<Device> device, Generator* generator) {
        return ops::randperm(n, dtype, dev(device), generator);
      },
      py::arg("n"), py::arg("dtype"), py::arg("device") = py::none(), py::arg("generator") = nullptr);
  // For Python-composed ops that store a number into a tensor (threshold, index_fill).
  m.def("_check_scalar_fits", &check_scalar_fits, py::arg("value"), py::arg("dtype"));
  m.def("_tensor", &tensor_from_data, py::arg("data"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("_device_from_object", &device_from_object, py::arg("device"));
  def_function(m, "from_numpy", &from_numpy, py::arg("ndarray"),
               "A CPU tensor sharing the array's memory (the tensor keeps the array alive).");
  def_function(m, "initial_seed", [] { return ops::initial_seed(); });
  bind_generator(m);

  // torch.special's functions stay on _C for plugflow.special, out of plugflow's top level.
  std::vector<std::string> special_functions = {
#define PF_X(name) name,
      PF_OPDEFS_PY_SPECIAL(PF_X)
#undef PF_X
  };
  std::erase_if(public_functions(), [&](const std::string& name) {
    return std::find(special_functions.begin(), special_functions.end(), name) != special_functions.end();
  });
  m.attr("_special_functions") = special_functions;
  m.attr("_public_functions") = public_functions();
}

}  // namespace plugflow::python
