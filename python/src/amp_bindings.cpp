// Automatic mixed precision: the autocast state functions of torch 1.13's top level
// (torch.set_autocast_enabled, get_autocast_cpu_dtype, ...), the hook through which the Python
// ops on the autocast lists cast their arguments, and GradScaler's kernels.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "casters.h"
#include "plugflow/autocast.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace py = pybind11;

namespace plugflow::python {
namespace {

// The tensors of a call's arguments (top level, and inside lists and tuples) in order, so
// that they can be put back after the casts.
void collect(py::handle obj, std::vector<Tensor>& out) {
  if (py::isinstance<Tensor>(obj)) {
    out.push_back(obj.cast<Tensor>());
  } else if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    for (py::handle item : obj) collect(item, out);
  }
}

py::object replace(py::handle obj, const std::vector<Tensor>& cast, size_t& next) {
  if (py::isinstance<Tensor>(obj)) {
    const Tensor& t = cast[next++];
    return t.is_same(obj.cast<const Tensor&>()) ? py::reinterpret_borrow<py::object>(obj) : py::cast(t);
  }
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    py::list items;
    for (py::handle item : obj) items.append(replace(item, cast, next));
    if (py::isinstance<py::list>(obj)) return items;
    return py::tuple(items);
  }
  return py::reinterpret_borrow<py::object>(obj);
}

}  // namespace

void bind_amp(py::module_& m) {
  using autocast::lower_dtype;
  using autocast::set_enabled;
  using autocast::set_lower_dtype;
  const DeviceType cpu = DeviceType::CPU, cuda = DeviceType::CUDA;
  py::list public_names = m.attr("_public_functions");
  auto function = [&](const char* name, auto&& f, auto... extra) {
    m.def(name, std::forward<decltype(f)>(f), extra...);
    public_names.append(name);
  };

  function("is_autocast_enabled", [cuda] { return autocast::is_enabled(cuda); });
  function("set_autocast_enabled", [cuda](bool enabled) { set_enabled(cuda, enabled); });
  function("is_autocast_cpu_enabled", [cpu] { return autocast::is_enabled(cpu); });
  function("set_autocast_cpu_enabled", [cpu](bool enabled) { set_enabled(cpu, enabled); });
  function("get_autocast_gpu_dtype", [cuda] { return lower_dtype(cuda); });
  function("set_autocast_gpu_dtype", [cuda](DType dtype) { set_lower_dtype(cuda, dtype); });
  function("get_autocast_cpu_dtype", [cpu] { return lower_dtype(cpu); });
  function("set_autocast_cpu_dtype", [cpu](DType dtype) {
    PF_CHECK(dtype == DType::BFloat16, "Currently, AutocastCPU only support Bfloat16 as the autocast_cpu_dtype");
    set_lower_dtype(cpu, dtype);
  });
  function("is_autocast_cache_enabled", &autocast::is_cache_enabled);
  function("set_autocast_cache_enabled", &autocast::set_cache_enabled);
  function("autocast_increment_nesting", &autocast::increment_nesting);
  function("autocast_decrement_nesting", &autocast::decrement_nesting);
  function("clear_autocast_cache", &autocast::clear_cache);

  m.def("_autocast_active", &autocast::active,
        "True while autocast is enabled for some device type on this thread (the one test the listed "
        "Python ops make when it is off).");
  m.def(
      "_autocast_call",
      [](const std::string& name, py::handle fn, py::tuple args, py::dict kwargs) -> py::object {
        std::vector<Tensor> tensors;
        collect(args, tensors);
        for (auto item : kwargs) collect(item.second, tensors);
        autocast::OpScope cast(name, std::move(tensors));
        if (!cast) return fn(*args, **kwargs);
        size_t next = 0;
        py::object new_args = replace(args, cast.tensors(), next);
        py::dict new_kwargs;
        for (auto item : kwargs) new_kwargs[item.first] = replace(item.second, cast.tensors(), next);
        return fn(*new_args, **new_kwargs);
      },
      py::arg("name"), py::arg("fn"), py::arg("args"), py::arg("kwargs"),
      "Calls fn(*args, **kwargs) under op `name`'s autocast policy: its tensor arguments cast, autocast "
      "off for the device type inside.");

  m.def(
      "_amp_foreach_non_finite_check_and_unscale_",
      [](std::vector<Tensor> grads, Tensor& found_inf, const Tensor& inv_scale) {
        py::gil_scoped_release nogil;
        ops::non_finite_check_and_unscale_(grads, found_inf, inv_scale);
      },
      py::arg("self"), py::arg("found_inf"), py::arg("inv_scale"));
  m.def(
      "_amp_update_scale_",
      [](Tensor& self, Tensor& growth_tracker, const Tensor& found_inf, double scale_growth_factor,
         double scale_backoff_factor, int64_t growth_interval) {
        {
          py::gil_scoped_release nogil;
          ops::amp_update_scale_(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor,
                                 growth_interval);
        }
        return self;
      },
      py::arg("self"), py::arg("growth_tracker"), py::arg("found_inf"), py::arg("scale_growth_factor"),
      py::arg("scale_backoff_factor"), py::arg("growth_interval"));
  public_names.append("_amp_foreach_non_finite_check_and_unscale_");
  public_names.append("_amp_update_scale_");
}

}  // namespace plugflow::python
