// Autograd from Python: grad mode, Tensor.backward/grad/requires_grad/hooks, autograd.grad,
// grad_fn objects, and the node behind plugflow.autograd.Function.
//
// Backward runs with the GIL held: the engine is single-threaded and Python hooks and custom
// Functions call back into Python from it.
#include <cstdio>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "plugflow/autograd.h"
#include "plugflow/ops.h"

namespace py = pybind11;

namespace plugflow::python {
namespace {

namespace ag = plugflow::autograd;

// A custom autograd.Function's backward: calls the Python callable with the unpacked saved
// tensors and the output gradients; it returns one gradient (or None) per forward input.
class PyFunctionNode : public ag::Node {
 public:
  PyFunctionNode(std::string name, py::function backward) : name_(std::move(name)), backward_(std::move(backward)) {}
  ~PyFunctionNode() override {
    py::gil_scoped_acquire gil;
    backward_ = py::function();
  }
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    py::gil_scoped_acquire gil;
    PF_CHECK(!released_, "Trying to backward through the graph a second time (or directly access saved tensors after "
                         "they have already been freed). Specify retain_graph=True if you need to backward through "
                         "the graph a second time.");
    py::list saved;
    const auto self = shared_from_this();
    for (const auto& s : saved_) {
      Tensor t = s.unpack(self);
      saved.append(t.defined() ? py::cast(t) : py::none());
    }
    py::list g;
    for (auto& t : grads) g.append(t.defined() ? py::cast(t) : py::none());
    py::object result = backward_(saved, *py::tuple(g));
    std::vector<Tensor> out;
    py::tuple items = py::isinstance<py::tuple>(result) ? result.cast<py::tuple>() : py::make_tuple(result);
    for (py::handle h : items) out.push_back(h.is_none() ? Tensor() : h.cast<Tensor>());
    if (out.size() < next_edges.size()) out.resize(next_edges.size());
    PF_CHECK(out.size() == next_edges.size(), "function ", name_, " returned an incorrect number of gradients (expected ",
             next_edges.size(), ", got ", items.size(), ")");
    return out;
  }
  void release_saved() override {
    for (auto& s : saved_) released_ = s.release() || released_;
  }
  std::vector<ag::SavedTensor> saved_;

 private:
  std::string name_;
  py::function backward_;
  bool released_ = false;
};

// grad_fn objects: PyTorch's Node API subset (name, next_functions, hooks, metadata).
struct NodeHandle {
  std::shared_ptr<ag::Node> node;
};

py::object wrap_node(const std::shared_ptr<ag::Node>& n) {
  if (!n) return py::none();
  return py::cast(NodeHandle{n});
}

std::vector<Tensor> tensors_or_empty(py::handle seq) {
  std::vector<Tensor> out;
  if (seq.is_none()) return out;
  if (py::isinstance<Tensor>(seq)) return {seq.cast<Tensor>()};
  for (py::handle h : seq) out.push_back(h.is_none() ? Tensor() : h.cast<Tensor>());
  return out;
}

// Python hook -> GradHook: the hook returns a replacement tensor (same shape and dtype, as
// PyTorch checks) or None.
ag::GradHook make_hook(py::function fn) {
  auto holder = std::make_shared<py::function>(std::move(fn));
  return [holder](const Tensor& g) -> Tensor {
    py::gil_scoped_acquire gil;
    py::object r = (*holder)(g);
    if (r.is_none()) return Tensor();
    if (!py::isinstance<Tensor>(r))
      PF_THROW(TypeError, "expected a Tensor or None from a gradient hook, got ", py::str(py::type::of(r)).cast<std::string>());
    Tensor t = r.cast<Tensor>();
    auto name = [&] { return py::str(py::getattr(*holder, "__name__", py::repr(*holder))).cast<std::string>(); };
    PF_CHECK(t.sizes() == g.sizes(), "hook '", name(), "' has changed the size of value");
    PF_CHECK(t.dtype() == g.dtype(), "hook '", name(), "' has changed the type of value (was ", dtype_name(g.dtype()),
             " got ", dtype_name(t.dtype()), ")");
    return t;
  };
}

struct HookHandle {
  std::weak_ptr<TensorImpl> tensor;
  size_t index;
  void remove() const {
    if (auto impl = tensor.lock()) ag::remove_hook(Tensor(impl), index);
  }
};

}  // namespace

void bind_autograd(py::module_& m) {
  py::class_<NodeHandle>(m, "Node", "A backward function in the autograd graph (Tensor.grad_fn).")
      .def("name", [](const NodeHandle& h) { return h.node->name(); })
      .def_property_readonly("next_functions",
                             [](const NodeHandle& h) {
                               py::list out;
                               for (const auto& e : h.node->next_edges)
                                 out.append(py::make_tuple(wrap_node(e.fn), e.input_nr));
                               return py::tuple(out);
                             })
      .def("__repr__",
           [](const NodeHandle& h) {
             char addr[32];
             std::snprintf(addr, sizeof addr, "%p", static_cast<const void*>(h.node.get()));
             return "<" + h.node->name() + " object at " + addr + ">";
           })
      .def("__eq__", [](const NodeHandle& a, const NodeHandle& b) { return a.node == b.node; })
      .def("__hash__", [](const NodeHandle& h) { return std::hash<const void*>()(h.node.get()); });

  py::class_<HookHandle>(m, "RemovableHandle").def("remove", &HookHandle::remove);

  m.def("is_grad_enabled", &ag::is_grad_enabled);
  m.def("_set_grad_enabled", &ag::set_grad_enabled);
  m.def("is_inference_mode_enabled", &ag::is_inference_mode);
  m.def("_is_checkpoint_valid", &ag::is_checkpoint_valid);
  m.def("_set_inference_mode", &ag::set_inference_mode);

  m.def(
      "_autograd_backward",
      [](py::handle tensors, py::handle grads, bool retain_graph, bool create_graph, py::handle inputs) {
        ag::backward(tensors_or_empty(tensors), tensors_or_empty(grads), retain_graph, create_graph,
                     tensors_or_empty(inputs));
      },
      py::arg("tensors"), py::arg("grad_tensors"), py::arg("retain_graph"), py::arg("create_graph"),
      py::arg("inputs") = py::none());
  m.def(
      "_autograd_grad",
      [](py::handle outputs, py::handle inputs, py::handle grad_outputs, bool retain_graph, bool create_graph,
         bool allow_unused) {
        auto res = ag::grad(tensors_or_empty(outputs), tensors_or_empty(inputs), tensors_or_empty(grad_outputs),
                            retain_graph, create_graph, allow_unused);
        py::list out;
        for (auto& t : res) out.append(t.defined() ? py::cast(t) : py::none());
        return py::tuple(out);
      },
      py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs"), py::arg("retain_graph"), py::arg("create_graph"),
      py::arg("allow_unused"));

  // Records a custom Function's forward: `backward(saved_list, *grads)` computes the inputs'
  // gradients; `saved` are the tensors from ctx.save_for_backward (outputs among them are
  // saved without a reference cycle); outputs marked non-differentiable get no history.
  m.def("_record_function",
        [](const std::string& name, py::function backward, py::handle inputs, py::handle outputs, py::handle saved,
           py::handle non_differentiable) {
          std::vector<Tensor> ins = tensors_or_empty(inputs), outs = tensors_or_empty(outputs);
          auto node = std::make_shared<PyFunctionNode>(name, std::move(backward));
          std::vector<Tensor> diff_outs;
          std::vector<Tensor> non_diff = tensors_or_empty(non_differentiable);
          for (const Tensor& o : outs) {
            bool skip = false;
            for (const Tensor& nd : non_diff) skip = skip || nd.impl() == o.impl();
            diff_outs.push_back(skip ? Tensor() : o);
          }
          for (const Tensor& s : tensors_or_empty(saved)) {
            int nr = -1;
            for (size_t i = 0; i < outs.size(); ++i)
              if (s.defined() && outs[i].impl() == s.impl()) nr = static_cast<int>(i);
            node->saved_.emplace_back(s, nr);
          }
          // record() skips undefined outputs' history but keeps their slot for gradients.
          ag::record(node, ins, {});
          node->output_meta.clear();
          for (size_t i = 0; i < outs.size(); ++i) {
            const Tensor& o = outs[i];
            node->output_meta.push_back({o.sizes(), o.dtype(), o.device()});
            if (!diff_outs[i].defined() || !is_floating(o.dtype())) continue;
            if (!o.impl()->autograd) o.impl()->autograd = std::make_shared<AutogradMeta>();
            o.impl()->autograd->grad_fn = node;
            o.impl()->autograd->output_nr = static_cast<uint32_t>(i);
          }
        });

  // ---- Tensor methods and properties --------------------------------------------------------
  py::object cls = m.attr("Tensor");
  py::object property = py::module_::import("builtins").attr("property");
  auto method = [&](const char* name, py::cpp_function f) { cls.attr(name) = f; };

  cls.attr("requires_grad") = property(
      py::cpp_function([](const Tensor& t) { return ag::requires_grad(t); }),
      py::cpp_function([](const Tensor& t, bool v) { ag::set_requires_grad(t, v); }));
  method("requires_grad_", py::cpp_function(
                               [](py::object self, bool v) {
                                 ag::set_requires_grad(self.cast<const Tensor&>(), v);
                                 return self;
                               },
                               py::name("requires_grad_"), py::is_method(cls), py::arg("requires_grad") = true));
  cls.attr("grad") = property(
      py::cpp_function([](const Tensor& t) -> py::object {
        Tensor g = ag::grad(t);
        return g.defined() ? py::cast(g) : py::none();
      }),
      py::cpp_function([](const Tensor& t, py::handle g) {
        ag::set_grad(t, g.is_none() ? Tensor() : g.cast<Tensor>());
      }));
  cls.attr("grad_fn") = property(py::cpp_function([](const Tensor& t) { return wrap_node(ag::grad_fn(t)); }));
  cls.attr("is_leaf") = property(py::cpp_function([](const Tensor& t) { return ag::is_leaf(t); }));
  cls.attr("retains_grad") = property(py::cpp_function([](const Tensor& t) { return ag::retains_grad(t); }));
  cls.attr("_version") = property(py::cpp_function([](const Tensor& t) { return t.storage()->version(); }));
  cls.attr("data") = property(
      py::cpp_function([](const Tensor& t) { return ag::detach(t); }),
      py::cpp_function([](const Tensor& t, const Tensor& other) {
        // `param.data = x`: the tensor now views x's memory, keeping its autograd identity.
        t.set_(other.storage(), other.sizes(), other.strides(), other.offset(), other.dtype());
      }));
  method("retain_grad", py::cpp_function([](const Tensor& t) { ag::retain_grad(t); }, py::name("retain_grad"),
                                         py::is_method(cls)));
  method("detach", py::cpp_function([](const Tensor& t) { return ag::detach(t); }, py::name("detach"),
                                    py::is_method(cls)));
  method("detach_", py::cpp_function(
                        [](py::object self) {
                          const Tensor& t = self.cast<const Tensor&>();
                          PF_CHECK(!ag::view_base(t).defined() || !ag::requires_grad(t),
                                   "Can't detach views in-place. Use detach() instead.");
                          if (t.impl()->autograd) {
                            t.impl()->autograd->grad_fn.reset();
                            t.impl()->autograd->requires_grad = false;
                          }
                          return self;
                        },
                        py::name("detach_"), py::is_method(cls)));
  method("register_hook", py::cpp_function(
                              [](const Tensor& t, py::function fn) {
                                const size_t idx = ag::register_hook(t, make_hook(std::move(fn)));
                                return HookHandle{t.impl_ptr(), idx};
                              },
                              py::name("register_hook"), py::is_method(cls), py::arg("hook")));
  method("backward", py::cpp_function(
                         [](const Tensor& t, py::handle gradient, py::handle retain_graph, bool create_graph,
                            py::handle inputs) {
                           const bool retain = retain_graph.is_none() ? create_graph : retain_graph.cast<bool>();
                           PF_CHECK(inputs.is_none() || py::len(inputs) > 0,
                                    "'inputs' argument to backward() cannot be empty.");
                           std::vector<Tensor> grads;
                           if (!gradient.is_none()) grads.push_back(gradient.cast<Tensor>());
                           ag::backward({t}, grads, retain, create_graph, tensors_or_empty(inputs));
                         },
                         py::name("backward"), py::is_method(cls), py::arg("gradient") = py::none(),
                         py::arg("retain_graph") = py::none(), py::arg("create_graph") = false,
                         py::arg("inputs") = py::none()));
}

}  // namespace plugflow::python
