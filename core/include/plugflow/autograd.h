// Reverse-mode automatic differentiation.
//
// Ops record a Node when grad mode is on and an input requires grad. A Node computes the
// gradients of its inputs from the gradients of its outputs, written with ordinary ops
// (plugflow/ops.h) so that, under create_graph, backward itself is differentiable. Leaves
// accumulate into `.grad` through an AccumulateGrad node. The engine runs nodes in reverse
// creation order once all their gradients have arrived.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "plugflow/export.h"
#include "plugflow/op.h"
#include "plugflow/tensor.h"

namespace plugflow::autograd {

class Node;

// Where a gradient goes: input `input_nr` of node `fn` (a null fn: nowhere).
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// ---- grad mode --------------------------------------------------------------------------

PF_API bool is_grad_enabled();
PF_API void set_grad_enabled(bool enabled);
PF_API bool is_inference_mode();
// Inference mode implies no grad; leaving it restores nothing (use the guard for scopes).
PF_API void set_inference_mode(bool enabled);

class PF_API GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

class PF_API InferenceModeGuard {
 public:
  explicit InferenceModeGuard(bool enabled = true);
  ~InferenceModeGuard();
  InferenceModeGuard(const InferenceModeGuard&) = delete;
  InferenceModeGuard& operator=(const InferenceModeGuard&) = delete;

 private:
  bool prev_inference_, prev_grad_;
};

// A hook on a tensor's gradient: returns a replacement, or an undefined tensor to keep it.
using GradHook = std::function<Tensor(const Tensor&)>;

}  // namespace plugflow::autograd

namespace plugflow {
// Per-tensor autograd state (TensorImpl::autograd).
struct PF_API AutogradMeta {
  using Node = autograd::Node;
  using GradHook = autograd::GradHook;
  bool requires_grad = false;  // for leaves; non-leaves require grad iff grad_fn is set
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;
  bool retains_grad = false;
  // register_hook's hooks, by handle (a removed one is emptied). Leaf hooks run in
  // AccumulateGrad; a non-leaf's are also installed as pre-hooks of its grad_fn.
  std::vector<std::shared_ptr<GradHook>> hooks;
  // View tracking: an in-place op on a view rewrites its base's history (CopySlices).
  std::shared_ptr<TensorImpl> view_base;  // the root base, null when not a view
  // The storage version when this view's grad_fn was set. An in-place write to the base (or
  // another view of it) bumps the version; the view's history is then rebuilt from the
  // base's current one on next use (AsStridedBackward0), as PyTorch does.
  uint32_t view_version = 0;
};

}  // namespace plugflow

namespace plugflow::autograd {

// ---- tensor-level queries and updates -----------------------------------------------------

PF_API bool requires_grad(const Tensor& t);
PF_API bool is_leaf(const Tensor& t);
PF_API std::shared_ptr<Node> grad_fn(const Tensor& t);
// Sets requires_grad on a leaf (RuntimeError for non-leaves asked to stop, and for
// non-floating dtypes: "only Tensors of floating point dtype can require gradients").
PF_API void set_requires_grad(const Tensor& t, bool value);
PF_API Tensor grad(const Tensor& t);
PF_API void set_grad(const Tensor& t, const Tensor& g);
PF_API void retain_grad(const Tensor& t);
PF_API bool retains_grad(const Tensor& t);
// Registers a gradient hook; returns a handle for remove_hook.
PF_API size_t register_hook(const Tensor& t, GradHook hook);
PF_API void remove_hook(const Tensor& t, size_t handle);
// A new tensor sharing storage (and version counter) without history.
PF_API Tensor detach(const Tensor& t);
// The tensor's own history edge: grad_fn/output_nr, or its leaf accumulator when it requires grad.
PF_API Edge gradient_edge(const Tensor& t);
// The base a view tracks (undefined when t is not a view).
PF_API Tensor view_base(const Tensor& t);

// ---- nodes ---------------------------------------------------------------------------------

// A tensor saved for backward with the version it had, so that a later in-place change is
// caught. An op's own output is saved without its grad_fn (that would be a reference cycle)
// and rebuilt on unpack.
class PF_API SavedTensor {
 public:
  SavedTensor() = default;
  // `output_nr` >= 0 marks the saving node's own output `output_nr`.
  SavedTensor(const Tensor& t, int output_nr);
  // Throws when the tensor was modified in place since it was saved, or was freed by an
  // earlier backward without retain_graph. `owner` is the node that saved it.
  Tensor unpack(const std::shared_ptr<Node>& owner) const;
  // Frees the tensor; false for an undefined placeholder (nothing was saved).
  bool release();

 private:
  Tensor tensor_;  // inputs: the tensor itself; outputs: an alias without autograd state
  int output_nr_ = -1;
  uint32_t version_ = 0;
  bool released_ = false;
  bool defined_ = false;
};

class PF_API Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();
  // PyTorch's class name, e.g. "MulBackward0"; shown in errors and grad_fn's repr.
  virtual std::string name() const = 0;
  // grads[i]: the gradient of forward output i (undefined = no gradient flowed there).
  // Returns one gradient per next edge (undefined where none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  uint64_t sequence_nr;
  // Metadata of each forward output, to check and materialize incoming gradients.
  std::vector<TensorMeta> output_meta;
  // Hooks of non-leaf outputs (register_hook, and retain_grad's), keyed by output_nr, run
  // before apply in registration order.
  std::vector<std::pair<uint32_t, GradHook>> pre_hooks;
};

// A node whose backward is a closure; most ops use this.
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads,
                                                     const std::vector<Tensor>& saved)>;

class PF_API FunctionNode : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  void release_saved() override;
  // Saves an input (or any tensor the formula needs) / the node's own output `nr`; the
  // backward closure receives them unpacked, in saving order.
  void save(const Tensor& t) { saved_.emplace_back(t, -1); }
  // Sizes the saved list once when the caller knows how many tensors it will save.
  void reserve_saved(size_t n) { saved_.reserve(n); }
  void save_output(const Tensor& t, uint32_t nr) { saved_.emplace_back(t, static_cast<int>(nr)); }

 private:
  std::string name_;
  BackwardFn fn_;
  std::vector<SavedTensor> saved_;
  bool released_ = false;
};

// ---- recording -----------------------------------------------------------------------------

// True when grad mode is on and any input requires grad: the op must record.
PF_API bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
PF_API bool any_requires_grad(const std::vector<Tensor>& inputs);

// Records an out-of-place op: the node gets the inputs' history edges (in order, an empty
// edge for inputs that do not require grad) and becomes the grad_fn of each floating output.
// Save what backward needs with node->save / save_output before or after calling this.
PF_API void record(const std::shared_ptr<Node>& node, std::span<const Tensor> inputs,
                   std::span<const Tensor> outputs);
// Braced lists (`record(node, {a, b}, {out})`) stay on the stack: no vector per call.
inline void record(const std::shared_ptr<Node>& node, std::initializer_list<Tensor> inputs,
                   std::initializer_list<Tensor> outputs) {
  record(node, std::span<const Tensor>(inputs.begin(), inputs.size()),
         std::span<const Tensor>(outputs.begin(), outputs.size()));
}
// Convenience: record when needed, with a closure. Returns the node (null when not recorded).
PF_API std::shared_ptr<FunctionNode> make_node(std::string name, BackwardFn fn);

// Before an in-place op on `self`: checks that self may be modified (a leaf requiring grad
// may not, while grad mode is on).
PF_API void check_inplace(const Tensor& self);
// After an in-place op wrote into `self`: rewrites its history so that gradients flow through
// `node` (whose first next edge is self's previous history). Views rewrite their base.
PF_API void record_inplace(const std::shared_ptr<Node>& node, const Tensor& self,
                           const std::vector<Tensor>& other_inputs);

// Marks `view` as a view of `base` for autograd (call for every view op).
// `node` may be null when nothing requires grad (the view relation is kept regardless, so a
// later in-place write through the view reaches the base's history).
PF_API void record_view(const Tensor& base, const Tensor& view, const std::shared_ptr<Node>& node);

// ---- running backward ------------------------------------------------------------------------

// Tensor.backward / autograd.backward. grad_tensors may be undefined for scalar outputs.
PF_API void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors,
                     bool retain_graph, bool create_graph, const std::vector<Tensor>& inputs = {});
// autograd.grad: returns the gradients of `inputs` (undefined for unused inputs when
// allow_unused, else an error).
PF_API std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                                const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                                bool allow_unused);
// False while this thread runs a backward restricted to some inputs (autograd.grad, or
// backward(inputs=...)): a node that itself runs a full backward (reentrant activation
// checkpointing) would then accumulate into .grad outside that restriction. PyTorch's
// torch.autograd._is_checkpoint_valid.
PF_API bool is_checkpoint_valid();

}  // namespace plugflow::autograd
