#pragma once
#include <pybind11/pybind11.h>

namespace plugflow::python {
void bind_errors(pybind11::module_& m);       // errors.cpp: exception types and translation
void bind_runtime(pybind11::module_& m);      // runtime_bindings.cpp: init, plugins, info, threads
void bind_tensor(pybind11::module_& m);       // tensor_bindings.cpp: dtype, device, Tensor, ops
void bind_distributed(pybind11::module_& m);  // distributed_bindings.cpp: communicators
void bind_autograd(pybind11::module_& m);     // autograd_bindings.cpp: grad mode, backward, hooks, Function
}  // namespace plugflow::python
