// Shape ops (plugflow/ops_shape.h) as plugflow.X functions and Tensor methods: cat, stack,
// split, chunk, unbind, flip, roll, repeat, tile, repeat_interleave, movedim, unflatten,
// meshgrid, tril/triu, sort, argsort, topk, unique, and _C.pad / _C.one_hot for
// plugflow.nn.functional. Runs after bind_tensor: methods are added to the existing class.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace py = pybind11;

namespace plugflow::python {
namespace {

std::string type_name(py::handle h) { return Py_TYPE(h.ptr())->tp_name; }

bool is_tensor(py::handle h) { return py::isinstance<Tensor>(h); }

int64_t to_int(py::handle h, const char* fn, const char* arg) {
  if (PyBool_Check(h.ptr()) || PyFloat_Check(h.ptr()) || !PyIndex_Check(h.ptr()))
    PF_THROW(TypeError, fn, "(): argument '", arg, "' must be int, not ", type_name(h));
  return py::cast<int64_t>(py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr())));
}

// An int or a tuple/list of ints (PyTorch's int[] arguments accept a single int).
Shape int_list(py::handle h, const char* fn, const char* arg) {
  if (PyTuple_Check(h.ptr()) || PyList_Check(h.ptr())) {
    Shape out;
    py::sequence s = py::reinterpret_borrow<py::sequence>(h);
    for (size_t i = 0; i < s.size(); ++i) {
      py::object v = s[i];
      if (PyBool_Check(v.ptr()) || PyFloat_Check(v.ptr()) || !PyIndex_Check(v.ptr()))
        PF_THROW(TypeError, fn, "(): argument '", arg, "' must be tuple of ints, but found element of type ",
                 type_name(v), " at pos ", i + 1);
      out.push_back(to_int(v, fn, arg));
    }
    return out;
  }
  if (PyBool_Check(h.ptr()) || PyFloat_Check(h.ptr()) || !PyIndex_Check(h.ptr()))
    PF_THROW(TypeError, fn, "(): argument '", arg, "' must be tuple of ints, not ", type_name(h));
  return {to_int(h, fn, arg)};
}

// Sizes given as f(2, 3) or f((2, 3)): `args` is the tuple of positional arguments.
Shape int_args(const py::args& args, const char* fn, const char* arg) {
  if (args.size() == 1 && (PyTuple_Check(args[0].ptr()) || PyList_Check(args[0].ptr())))
    return int_list(args[0], fn, arg);
  Shape out;
  for (size_t i = 0; i < args.size(); ++i) {
    py::handle v = args[i];
    if (PyBool_Check(v.ptr()) || PyFloat_Check(v.ptr()) || !PyIndex_Check(v.ptr()))
      PF_THROW(TypeError, fn, "(): argument '", arg, "' must be tuple of ints, but found element of type ",
               type_name(v), " at pos ", i + 1);
    out.push_back(to_int(v, fn, arg));
  }
  return out;
}

// A tuple/list of tensors, with PyTorch's messages.
std::vector<Tensor> tensor_list(py::handle seq, const char* fn, const char* arg = "tensors") {
  if (!PyTuple_Check(seq.ptr()) && !PyList_Check(seq.ptr()))
    PF_THROW(TypeError, fn, "(): argument '", arg, "' (position 1) must be tuple of Tensors, not ", type_name(seq));
  py::sequence s = py::reinterpret_borrow<py::sequence>(seq);
  std::vector<Tensor> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    py::object v = s[i];
    if (!is_tensor(v)) PF_THROW(TypeError, "expected Tensor as element ", i, " in argument 0, but got ", type_name(v));
    out.push_back(v.cast<Tensor>());
  }
  return out;
}

// f(t1, t2, ...) or f([t1, t2, ...]).
std::vector<Tensor> tensor_args(const py::args& args, const char* fn) {
  if (args.size() == 1 && !is_tensor(args[0])) return tensor_list(args[0], fn);
  return tensor_list(args, fn);
}

py::tuple tensor_tuple(const std::vector<Tensor>& ts) {
  py::tuple out(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) out[i] = py::cast(ts[i]);
  return out;
}

std::optional<int64_t> opt_dim(py::handle dim, const char* fn) {
  if (dim.is_none()) return std::nullopt;
  return to_int(dim, fn, "dim");
}

// A join (stack, hstack, ...) into an out= tensor: cat's rules (PyTorch's are cat_out), each
// input converted straight to out's dtype; out is resized when its shape differs.
py::object join_out(py::object out, ops::Join join, const std::vector<Tensor>& tensors, int64_t dim = 0) {
  Tensor& o = out.cast<Tensor&>();
  {
    py::gil_scoped_release nogil;
    ops::join_out(o, join, tensors, dim);
  }
  return out;
}

PyObject* g_sort_type = nullptr;
PyObject* g_topk_type = nullptr;

py::object named_pair(PyObject* type, std::pair<Tensor, Tensor> p) {
  return py::handle(type)(py::make_tuple(py::cast(std::move(p.first)), py::cast(std::move(p.second))));
}

py::object unique_result(const ops::UniqueResult& r, bool return_inverse, bool return_counts) {
  if (!return_inverse && !return_counts) return py::cast(r.values);
  py::list out;
  out.append(py::cast(r.values));
  if (return_inverse) out.append(py::cast(r.inverse));
  if (return_counts) out.append(py::cast(r.counts));
  return py::tuple(out);
}

py::object split_impl(const Tensor& t, py::handle split, int64_t dim) {
  if (PyTuple_Check(split.ptr()) || PyList_Check(split.ptr()))
    return tensor_tuple(ops::split_with_sizes(t, int_list(split, "split", "split_size"), dim));
  return tensor_tuple(ops::split(t, to_int(split, "split", "split_size"), dim));
}

// torch.tensor_split: n sections, or the indices where sections start.
py::object tensor_split_impl(const Tensor& t, py::handle spec, int64_t dim) {
  PF_CHECK(t.dim() > 0, "tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims");
  const int64_t d = ops::wrap_dim(dim, t.dim());
  const int64_t n = t.sizes()[d];
  std::vector<Tensor> parts;
  if (PyTuple_Check(spec.ptr()) || PyList_Check(spec.ptr())) {
    const Shape idx = int_list(spec, "tensor_split", "indices");
    int64_t start = 0;
    for (int64_t i : idx) {
      const int64_t end = std::clamp<int64_t>(i < 0 ? i + n : i, 0, n);
      parts.push_back(ops::slice(t, d, start, std::max(start, end), 1));
      start = end;
    }
    parts.push_back(ops::slice(t, d, start, n, 1));
  } else {
    const int64_t sections = to_int(spec, "tensor_split", "sections");
    PF_CHECK(sections > 0, "number of sections must be larger than 0, got ", sections);
    const int64_t base = n / sections, extra = n % sections;
    int64_t start = 0;
    for (int64_t i = 0; i < sections; ++i) {
      const int64_t len = base + (i < extra ? 1 : 0);
      parts.push_back(ops::slice(t, d, start, start + len, 1));
      start += len;
    }
  }
  return tensor_tuple(parts);
}

py::object atleast(const py::args& args, Tensor (*f)(const Tensor&), const char* fn) {
  if (args.size() == 1 && is_tensor(args[0])) return py::cast(f(args[0].cast<Tensor>()));
  std::vector<Tensor> ts = tensor_args(args, fn);
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(f(t));
  return tensor_tuple(out);
}

Tensor repeat_interleave_impl(const Tensor& t, py::handle repeats, py::handle dim) {
  const std::optional<int64_t> d = opt_dim(dim, "repeat_interleave");
  if (is_tensor(repeats)) return ops::repeat_interleave(t, repeats.cast<Tensor>(), d);
  return ops::repeat_interleave(t, to_int(repeats, "repeat_interleave", "repeats"), d);
}

}  // namespace

void bind_shape(py::module_& m) {
  py::module_ return_types = py::module_::import("plugflow.return_types");
  g_sort_type = py::object(return_types.attr("sort")).release().ptr();
  g_topk_type = py::object(return_types.attr("topk")).release().ptr();

  py::object cls = m.attr("Tensor");
  py::object public_names = m.attr("_public_functions");
  auto method = [&](const char* name, py::cpp_function f) { cls.attr(name) = f; };
  auto function = [&](const char* name, py::cpp_function f) {
    m.attr(name) = f;
    public_names.attr("append")(name);
  };

  // ---- joining -----------------------------------------------------------------------------
  for (const char* name : {"cat", "concat", "concatenate"}) {
    function(name, py::cpp_function(
                       [](py::handle tensors, py::handle dim, py::object out) -> py::object {
                         std::vector<Tensor> ts = tensor_list(tensors, "cat");
                         const int64_t d = to_int(dim, "cat", "dim");
                         if (!out.is_none()) {
                           Tensor& o = out.cast<Tensor&>();
                           py::gil_scoped_release nogil;
                           ops::cat_out(o, ts, d);
                           return out;
                         }
                         Tensor r;
                         {
                           py::gil_scoped_release nogil;
                           r = ops::cat(ts, d);
                         }
                         return py::cast(std::move(r));
                       },
                       py::name(name), py::arg("tensors"), py::arg("dim") = 0, py::kw_only(),
                       py::arg("out") = py::none()));
  }
  function("stack", py::cpp_function(
                        [](py::handle tensors, py::handle dim, py::object out) -> py::object {
                          const std::vector<Tensor> ts = tensor_list(tensors, "stack");
                          const int64_t d = to_int(dim, "stack", "dim");
                          if (!out.is_none()) return join_out(out, ops::Join::Stack, ts, d);
                          return py::cast(ops::stack(ts, d));
                        },
                        py::name("stack"), py::arg("tensors"), py::arg("dim") = 0, py::kw_only(),
                        py::arg("out") = py::none()));
  struct Joiner {
    const char* name;
    Tensor (*fn)(const std::vector<Tensor>&);
    ops::Join join;
  };
  for (Joiner j : {Joiner{"hstack", &ops::hstack, ops::Join::HStack}, Joiner{"vstack", &ops::vstack, ops::Join::VStack},
                   Joiner{"row_stack", &ops::vstack, ops::Join::VStack},
                   Joiner{"dstack", &ops::dstack, ops::Join::DStack},
                   Joiner{"column_stack", &ops::column_stack, ops::Join::ColumnStack}}) {
    function(j.name, py::cpp_function(
                         [j](py::handle tensors, py::object out) -> py::object {
                           const std::vector<Tensor> ts = tensor_list(tensors, j.name);
                           if (!out.is_none()) return join_out(out, j.join, ts);
                           return py::cast(j.fn(ts));
                         },
                         py::name(j.name), py::arg("tensors"), py::kw_only(), py::arg("out") = py::none()));
  }
  function("atleast_1d", py::cpp_function([](const py::args& a) { return atleast(a, &ops::atleast_1d, "atleast_1d"); },
                                          py::name("atleast_1d")));
  function("atleast_2d", py::cpp_function([](const py::args& a) { return atleast(a, &ops::atleast_2d, "atleast_2d"); },
                                          py::name("atleast_2d")));
  function("atleast_3d", py::cpp_function([](const py::args& a) { return atleast(a, &ops::atleast_3d, "atleast_3d"); },
                                          py::name("atleast_3d")));

  // ---- splitting -----------------------------------------------------------------------------
  method("split", py::cpp_function([](const Tensor& t, py::handle split_size, int64_t dim) {
           return split_impl(t, split_size, dim);
         }, py::name("split"), py::is_method(cls), py::arg("split_size"), py::arg("dim") = 0));
  function("split", py::cpp_function([](const Tensor& t, py::handle split_size, int64_t dim) {
             return split_impl(t, split_size, dim);
           }, py::name("split"), py::arg("tensor"), py::arg("split_size_or_sections"), py::arg("dim") = 0));
  const auto split_sizes = [](const Tensor& t, py::handle sizes, int64_t dim) {
    return tensor_tuple(ops::split_with_sizes(t, int_list(sizes, "split_with_sizes", "split_sizes"), dim));
  };
  method("split_with_sizes", py::cpp_function(split_sizes, py::name("split_with_sizes"), py::is_method(cls),
                                              py::arg("split_sizes"), py::arg("dim") = 0));
  function("split_with_sizes", py::cpp_function(split_sizes, py::name("split_with_sizes"), py::arg("input"),
                                                py::arg("split_sizes"), py::arg("dim") = 0));
  // PyTorch's three overloads: indices_or_sections, or by name indices (a list) or sections (an int).
  const auto tensor_split = [](const Tensor& t, py::object spec, int64_t dim, py::object indices, py::object sections) {
    PF_CHECK_T(spec.is_none() + indices.is_none() + sections.is_none() == 2, TypeError,
               "tensor_split() takes exactly one of indices_or_sections, indices and sections");
    if (!indices.is_none())
      PF_CHECK_T(PyTuple_Check(indices.ptr()) || PyList_Check(indices.ptr()), TypeError,
                 "tensor_split(): argument 'indices' must be a tuple of ints");
    if (!sections.is_none())
      PF_CHECK_T(!PyTuple_Check(sections.ptr()) && !PyList_Check(sections.ptr()), TypeError,
                 "tensor_split(): argument 'sections' must be an int");
    return tensor_split_impl(t, !spec.is_none() ? spec : !indices.is_none() ? indices : sections, dim);
  };
  method("tensor_split", py::cpp_function(tensor_split, py::name("tensor_split"), py::is_method(cls),
                                          py::arg("indices_or_sections") = py::none(), py::arg("dim") = 0, py::kw_only(),
                                          py::arg("indices") = py::none(), py::arg("sections") = py::none()));
  function("tensor_split", py::cpp_function(tensor_split, py::name("tensor_split"), py::arg("input"),
                                            py::arg("indices_or_sections") = py::none(), py::arg("dim") = 0,
                                            py::kw_only(), py::arg("indices") = py::none(),
                                            py::arg("sections") = py::none()));
  const auto chunk = [](const Tensor& t, int64_t chunks, int64_t dim) { return tensor_tuple(ops::chunk(t, chunks, dim)); };
  method("chunk", py::cpp_function(chunk, py::name("chunk"), py::is_method(cls), py::arg("chunks"), py::arg("dim") = 0));
  function("chunk",
           py::cpp_function(chunk, py::name("chunk"), py::arg("input"), py::arg("chunks"), py::arg("dim") = 0));
  const auto unbind = [](const Tensor& t, int64_t dim) { return tensor_tuple(ops::unbind(t, dim)); };
  method("unbind", py::cpp_function(unbind, py::name("unbind"), py::is_method(cls), py::arg("dim") = 0));
  function("unbind", py::cpp_function(unbind, py::name("unbind"), py::arg("input"), py::arg("dim") = 0));

  // ---- rearranging ------------------------------------------------------------------------------
  method("flip", py::cpp_function([](const Tensor& t, const py::args& dims) {
           return ops::flip(t, int_args(dims, "flip", "dims"));
         }, py::name("flip"), py::is_method(cls)));
  function("flip", py::cpp_function([](const Tensor& t, py::handle dims) {
             return ops::flip(t, int_list(dims, "flip", "dims"));
           }, py::name("flip"), py::arg("input"), py::arg("dims")));
  const auto fliplr = [](const Tensor& t) {
    PF_CHECK(t.dim() >= 2, "Input must be >= 2-d.");
    return ops::flip(t, {1});
  };
  const auto flipud = [](const Tensor& t) {
    PF_CHECK(t.dim() >= 1, "Input must be >= 1-d.");
    return ops::flip(t, {0});
  };
  method("fliplr", py::cpp_function(fliplr, py::name("fliplr"), py::is_method(cls)));
  function("fliplr", py::cpp_function(fliplr, py::name("fliplr"), py::arg("input")));
  method("flipud", py::cpp_function(flipud, py::name("flipud"), py::is_method(cls)));
  function("flipud", py::cpp_function(flipud, py::name("flipud"), py::arg("input")));

  const auto roll = [](const Tensor& t, py::handle shifts, py::handle dims) {
    return ops::roll(t, int_list(shifts, "roll", "shifts"), dims.is_none() ? Shape{} : int_list(dims, "roll", "dims"));
  };
  method("roll", py::cpp_function(roll, py::name("roll"), py::is_method(cls), py::arg("shifts"),
                                  py::arg("dims") = py::none()));
  function("roll", py::cpp_function(roll, py::name("roll"), py::arg("input"), py::arg("shifts"),
                                    py::arg("dims") = py::none()));

  method("repeat", py::cpp_function([](const Tensor& t, const py::args& sizes) {
           PF_CHECK_T(sizes.size() > 0, TypeError, "repeat() missing 1 required positional arguments: \"repeats\"");
           return ops::repeat(t, int_args(sizes, "repeat", "repeats"));
         }, py::name("repeat"), py::is_method(cls)));
  method("tile", py::cpp_function([](const Tensor& t, const py::args& dims) {
           return ops::tile(t, int_args(dims, "tile", "dims"));
         }, py::name("tile"), py::is_method(cls)));
  function("tile", py::cpp_function([](const Tensor& t, py::handle dims) {
             return ops::tile(t, int_list(dims, "tile", "dims"));
           }, py::name("tile"), py::arg("input"), py::arg("dims")));

  method("repeat_interleave", py::cpp_function(
                                  [](const Tensor& t, py::handle repeats, py::handle dim, py::handle) {
                                    return repeat_interleave_impl(t, repeats, dim);
                                  },
                                  py::name("repeat_interleave"), py::is_method(cls), py::arg("repeats"),
                                  py::arg("dim") = py::none(), py::kw_only(), py::arg("output_size") = py::none()));
  function("repeat_interleave",
           py::cpp_function(
               [](const Tensor& t, py::handle repeats, py::handle dim, py::handle) {
                 // torch.repeat_interleave(repeats): the index form.
                 if (repeats.is_none()) return ops::repeat_interleave(t);
                 return repeat_interleave_impl(t, repeats, dim);
               },
               py::name("repeat_interleave"), py::arg("input"), py::arg("repeats") = py::none(),
               py::arg("dim") = py::none(), py::kw_only(), py::arg("output_size") = py::none()));

  for (const char* name : {"movedim", "moveaxis"}) {
    const auto f = [](const Tensor& t, py::handle source, py::handle destination) {
      return ops::movedim(t, int_list(source, "movedim", "source"), int_list(destination, "movedim", "destination"));
    };
    method(name, py::cpp_function(f, py::name(name), py::is_method(cls), py::arg("source"), py::arg("destination")));
    function(name, py::cpp_function(f, py::name(name), py::arg("input"), py::arg("source"), py::arg("destination")));
  }
  const auto unflatten = [](const Tensor& t, int64_t dim, py::handle sizes) {
    return ops::unflatten(t, dim, int_list(sizes, "unflatten", "sizes"));
  };
  method("unflatten", py::cpp_function(unflatten, py::name("unflatten"), py::is_method(cls), py::arg("dim"),
                                       py::arg("sizes")));
  function("unflatten", py::cpp_function(unflatten, py::name("unflatten"), py::arg("input"), py::arg("dim"),
                                         py::arg("sizes")));

  function("meshgrid", py::cpp_function(
                           [](const py::args& args, py::handle indexing) {
                             std::string ix = "ij";
                             if (indexing.is_none()) {
                               if (PyErr_WarnEx(PyExc_UserWarning,
                                                "torch.meshgrid: in an upcoming release, it will be required to pass "
                                                "the indexing argument.",
                                                1) < 0)
                                 throw py::error_already_set();
                             } else {
                               ix = indexing.cast<std::string>();
                             }
                             return tensor_tuple(ops::meshgrid(tensor_args(args, "meshgrid"), ix));
                           },
                           py::name("meshgrid"), py::kw_only(), py::arg("indexing") = py::none()));

  // ---- triangles ------------------------------------------------------------------------------------
  method("tril", py::cpp_function([](const Tensor& t, int64_t k) { return ops::tril(t, k); }, py::name("tril"),
                                  py::is_method(cls), py::arg("diagonal") = 0));
  method("triu", py::cpp_function([](const Tensor& t, int64_t k) { return ops::triu(t, k); }, py::name("triu"),
                                  py::is_method(cls), py::arg("diagonal") = 0));
  function("tril", py::cpp_function([](const Tensor& t, int64_t k) { return ops::tril(t, k); }, py::name("tril"),
                                    py::arg("input"), py::arg("diagonal") = 0));
  function("triu", py::cpp_function([](const Tensor& t, int64_t k) { return ops::triu(t, k); }, py::name("triu"),
                                    py::arg("input"), py::arg("diagonal") = 0));
  method("tril_", py::cpp_function(
                      [](py::object self, int64_t k) {
                        Tensor& t = self.cast<Tensor&>();
                        ops::copy_(t, ops::tril(t, k));
                        return self;
                      },
                      py::name("tril_"), py::is_method(cls), py::arg("diagonal") = 0));
  method("triu_", py::cpp_function(
                      [](py::object self, int64_t k) {
                        Tensor& t = self.cast<Tensor&>();
                        ops::copy_(t, ops::triu(t, k));
                        return self;
                      },
                      py::name("triu_"), py::is_method(cls), py::arg("diagonal") = 0));

  // ---- ordering --------------------------------------------------------------------------------------
  const auto sort = [](const Tensor& t, int64_t dim, bool descending, bool stable) {
    std::pair<Tensor, Tensor> r;
    {
      py::gil_scoped_release nogil;
      r = ops::sort(t, dim, descending, stable);
    }
    return named_pair(g_sort_type, std::move(r));
  };
  method("sort", py::cpp_function(sort, py::name("sort"), py::is_method(cls), py::arg("dim") = -1,
                                  py::arg("descending") = false, py::kw_only(), py::arg("stable") = false));
  function("sort", py::cpp_function(sort, py::name("sort"), py::arg("input"), py::arg("dim") = -1,
                                    py::arg("descending") = false, py::kw_only(), py::arg("stable") = false));
  const auto argsort = [](const Tensor& t, int64_t dim, bool descending, bool stable) {
    return ops::argsort(t, dim, descending, stable);
  };
  method("argsort", py::cpp_function(argsort, py::name("argsort"), py::is_method(cls), py::arg("dim") = -1,
                                     py::arg("descending") = false, py::kw_only(), py::arg("stable") = false));
  function("argsort", py::cpp_function(argsort, py::name("argsort"), py::arg("input"), py::arg("dim") = -1,
                                       py::arg("descending") = false, py::kw_only(), py::arg("stable") = false));
  const auto msort = [](const Tensor& t) { return ops::sort(t, 0, false, false).first; };
  method("msort", py::cpp_function(msort, py::name("msort"), py::is_method(cls)));
  function("msort", py::cpp_function(msort, py::name("msort"), py::arg("input")));
  const auto topk = [](const Tensor& t, int64_t k, int64_t dim, bool largest, bool sorted) {
    std::pair<Tensor, Tensor> r;
    {
      py::gil_scoped_release nogil;
      r = ops::topk(t, k, dim, largest, sorted);
    }
    return named_pair(g_topk_type, std::move(r));
  };
  method("topk", py::cpp_function(topk, py::name("topk"), py::is_method(cls), py::arg("k"), py::arg("dim") = -1,
                                  py::arg("largest") = true, py::arg("sorted") = true));
  function("topk", py::cpp_function(topk, py::name("topk"), py::arg("input"), py::arg("k"), py::arg("dim") = -1,
                                    py::arg("largest") = true, py::arg("sorted") = true));
  const auto unique = [](const Tensor& t, bool sorted, bool return_inverse, bool return_counts, py::handle dim) {
    return unique_result(ops::unique(t, sorted, opt_dim(dim, "unique")), return_inverse, return_counts);
  };
  method("unique", py::cpp_function(unique, py::name("unique"), py::is_method(cls), py::arg("sorted") = true,
                                    py::arg("return_inverse") = false, py::arg("return_counts") = false,
                                    py::arg("dim") = py::none()));
  function("unique", py::cpp_function(unique, py::name("unique"), py::arg("input"), py::arg("sorted") = true,
                                      py::arg("return_inverse") = false, py::arg("return_counts") = false,
                                      py::arg("dim") = py::none()));
  const auto unique_consecutive = [](const Tensor& t, bool return_inverse, bool return_counts, py::handle dim) {
    return unique_result(ops::unique_consecutive(t, opt_dim(dim, "unique_consecutive")), return_inverse,
                         return_counts);
  };
  method("unique_consecutive",
         py::cpp_function(unique_consecutive, py::name("unique_consecutive"), py::is_method(cls),
                          py::arg("return_inverse") = false, py::arg("return_counts") = false,
                          py::arg("dim") = py::none()));
  function("unique_consecutive",
           py::cpp_function(unique_consecutive, py::name("unique_consecutive"), py::arg("input"),
                            py::arg("return_inverse") = false, py::arg("return_counts") = false,
                            py::arg("dim") = py::none()));

  // ---- padding and encodings (plugflow.nn.functional re-exports pad and one_hot) -------------------------
  m.def(
      "pad",
      [](const Tensor& t, py::handle pad, const std::string& mode, std::optional<double> value) {
        return ops::pad(t, int_list(pad, "pad", "pad"), mode, value);
      },
      py::arg("input"), py::arg("pad"), py::arg("mode") = "constant", py::arg("value") = py::none());
  m.def(
      "one_hot", [](const Tensor& t, int64_t num_classes) { return ops::one_hot(t, num_classes); }, py::arg("tensor"),
      py::arg("num_classes") = -1);
  function("constant_pad_nd", py::cpp_function(
                                  [](const Tensor& t, py::handle pad, Scalar value) {
                                    return ops::constant_pad_nd(t, int_list(pad, "constant_pad_nd", "pad"), value);
                                  },
                                  py::name("constant_pad_nd"), py::arg("input"), py::arg("pad"),
                                  py::arg("value") = 0));
}

}  // namespace plugflow::python
