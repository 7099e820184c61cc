#pragma once
#include <pybind11/pybind11.h>

namespace plugflow::python {
void bind_errors(pybind11::module_& m);       // errors.cpp: exception types and translation
void bind_runtime(pybind11::module_& m);      // runtime_bindings.cpp: init, plugins, info, threads
void bind_tensor(pybind11::module_& m);       // tensor_bindings.cpp: dtype, device, Tensor, ops
void bind_distributed(pybind11::module_& m);  // distributed_bindings.cpp: communicators
void bind_autograd(pybind11::module_& m);     // autograd_bindings.cpp: grad mode, backward, hooks, Function
void bind_shape(pybind11::module_& m);        // shape_bindings.cpp: cat, stack, split, sort, topk, unique, pad, ...
void bind_reduction(pybind11::module_& m);    // reduction_bindings.cpp: var, std, logsumexp, norm, cumsum, softmax, ...
void bind_math(pybind11::module_& m);         // math_bindings.cpp: clamp, lerp, addcmul, activations, addmm, einsum, out=
void bind_norm(pybind11::module_& m);         // norm_bindings.cpp: batch_norm, layer_norm, group_norm, embedding, dropout, losses
void bind_indexing(pybind11::module_& m);     // indexing_bindings.cpp: gather, scatter, index_select, where, ...
void bind_conv(pybind11::module_& m);         // conv_bindings.cpp: conv2d, conv_transpose2d, pooling, upsampling
void bind_optim(pybind11::module_& m);        // optim_bindings.cpp: _sgd_step_, _adam_step_ (fused optimizer updates)
void bind_graph(pybind11::module_& m);        // graph_bindings.cpp: capture, passes and plans of nn.Graph
void bind_amp(pybind11::module_& m);          // amp_bindings.cpp: autocast state, GradScaler kernels
void bind_vision(pybind11::module_& m);       // vision_bindings.cpp: torchvision's nms, roi_align, roi_pool
void bind_linalg(pybind11::module_& m);       // vision_bindings.cpp: linalg.lstsq
}  // namespace plugflow::python

namespace plugflow {
class Tensor;
namespace python {
// Advanced indexing for Tensor.__getitem__/__setitem__ (indexing_bindings.cpp): keys that hold
// a tensor, a sequence or a bool go there; ints, slices, None and ... alone stay views.
bool is_advanced_index(pybind11::handle index);
Tensor advanced_getitem(const Tensor& self, pybind11::handle index);
void advanced_setitem(Tensor& self, pybind11::handle index, pybind11::handle value);
// t[index] = tensor onto the view the index selects (tensor_bindings.cpp), PyTorch's copy_to.
void copy_to(Tensor& dst, Tensor src);
}  // namespace python
}  // namespace plugflow
