// plugflow._C: the binding module. Each area binds itself in its own file.
#include <pybind11/pybind11.h>

#include "bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "plugflow core bindings";
  plugflow::python::bind_errors(m);
  plugflow::python::bind_runtime(m);
  plugflow::python::bind_tensor(m);
  plugflow::python::bind_distributed(m);
  plugflow::python::bind_autograd(m);  // after bind_tensor: adds to the Tensor class
  plugflow::python::bind_shape(m);     // after bind_tensor: adds to the Tensor class
  plugflow::python::bind_indexing(m);  // after bind_tensor: adds to the Tensor class
  plugflow::python::bind_reduction(m);  // after bind_tensor: adds to the Tensor class
  plugflow::python::bind_norm(m);
  plugflow::python::bind_conv(m);
  plugflow::python::bind_optim(m);
  plugflow::python::bind_graph(m);
  plugflow::python::bind_amp(m);
  plugflow::python::bind_vision(m);
  plugflow::python::bind_linalg(m);
  plugflow::python::bind_math(m);      // keep last: also adds out= to the functions bound before it
}
