// nn.Graph's machinery from Python (plugflow/graph.h): _C._GraphCapture records build(),
// _C._GraphIR is the captured graph (dumps, passes), _C._GraphPlan replays it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings.h"
#include "casters.h"
#include "plugflow/graph.h"

namespace py = pybind11;

namespace plugflow::python {

namespace {

// Attribute values Python may set on tagged nodes: numbers, bools and lists of ints.
AttrValue attr_value(py::handle v) {
  if (PyBool_Check(v.ptr())) return v.cast<bool>();
  if (PyLong_Check(v.ptr())) return v.cast<int64_t>();
  if (PyFloat_Check(v.ptr())) return v.cast<double>();
  if (PyList_Check(v.ptr())) return v.cast<Shape>();
  PF_THROW(TypeError, "graph node attributes set per call must be bool, int, float or a list of ints, not ",
           Py_TYPE(v.ptr())->tp_name);
}

}  // namespace

void bind_graph(py::module_& m) {
  using py::arg;
  py::class_<graph::Graph, std::shared_ptr<graph::Graph>>(m, "_GraphIR")
      .def("text", &graph::Graph::text, arg("with_kernels") = false)
      .def("dot", &graph::Graph::dot)
      .def_property_readonly("num_nodes", [](const graph::Graph& g) { return g.nodes.size(); })
      .def("node_ops", [](const graph::Graph& g) {
        std::vector<std::string> out;
        for (const auto& n : g.nodes) out.push_back(graph::node_name(n));
        return out;
      })
      .def("node_tags", [](const graph::Graph& g) {
        std::vector<std::string> out;
        for (const auto& n : g.nodes) out.push_back(n.tag);
        return out;
      })
      .def(
          "run_pass",
          [](graph::Graph& g, const std::string& name, bool training, const std::string& amp,
             const std::string& conv_algo_search) {
            graph::PassOptions o;
            o.training = training;
            o.amp = amp;
            o.conv_algo_search = conv_algo_search;
            return graph::run_pass(g, name, o);
          },
          arg("name"), py::kw_only(), arg("training"), arg("amp") = "off", arg("conv_algo_search") = "heuristic")
      .def("copy", [](const graph::Graph& g) { return std::make_shared<graph::Graph>(g); })
      .def("compile", [](const graph::Graph& g) { return std::make_shared<graph::Plan>(g); });

  py::class_<graph::Capture>(m, "_GraphCapture")
      .def(py::init<const std::vector<Tensor>&>(), arg("inputs"))
      .def("set_tag", &graph::Capture::set_tag, arg("tag"))
      .def("set_scope", &graph::Capture::set_scope, arg("scope"))
      .def(
          "end", [](graph::Capture& c, const std::vector<Tensor>& outputs) {
            return std::make_shared<graph::Graph>(c.end(outputs));
          },
          arg("outputs"));

  py::class_<graph::Plan, std::shared_ptr<graph::Plan>>(m, "_GraphPlan")
      .def("run", [](graph::Plan& p, const std::vector<Tensor>& inputs) {
        py::gil_scoped_release nogil;
        return p.run(inputs);
      })
      .def("run_timed", [](graph::Plan& p, const std::vector<Tensor>& inputs) {
        std::vector<double> seconds;
        std::vector<Tensor> out;
        {
          py::gil_scoped_release nogil;
          out = p.run(inputs, &seconds);
        }
        return py::make_tuple(out, seconds);
      }, "run() that also returns each node's wall time in seconds (synchronizing after each node)")
      .def("node_ops", [](const graph::Plan& p) {
        std::vector<std::string> out;
        for (const auto& n : p.graph().nodes) out.push_back(graph::node_name(n));
        return out;
      })
      .def(
          "set_attr",
          [](graph::Plan& p, const std::string& tag, const std::string& name, py::handle value) {
            // Attrs keep the name pointer of the existing attribute (Plan::set_attr checks it exists).
            p.set_attr(tag, name.c_str(), attr_value(value));
          },
          arg("tag"), arg("name"), arg("value"))
      .def_property_readonly("arena_bytes", &graph::Plan::arena_bytes)
      .def_property_readonly("unplanned_bytes", &graph::Plan::unplanned_bytes)
      .def_property_readonly("peak_live_bytes", &graph::Plan::peak_live_bytes)
      .def("providers", &graph::Plan::providers)
      .def("text", [](const graph::Plan& p) { return p.graph().text(true); });

  m.def("_graph_pass_names", &graph::pass_names);
  m.def("_graph_capturing", &graph::capturing);
}

}  // namespace plugflow::python
