// Grad mode, per-tensor autograd state, saved tensors and history recording.
#include <atomic>

#include "plugflow/autograd.h"
#include "plugflow/error.h"
#include "plugflow/graph.h"
#include "plugflow/ops.h"

namespace plugflow::autograd {

// ---- grad mode --------------------------------------------------------------------------

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_inference_mode = false;
std::atomic<uint64_t> g_next_sequence_nr{0};
}  // namespace

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }
bool is_inference_mode() { return t_inference_mode; }
void set_inference_mode(bool enabled) {
  t_inference_mode = enabled;
  if (enabled) t_grad_enabled = false;
}

GradModeGuard::GradModeGuard(bool enabled) : prev_(t_grad_enabled) { t_grad_enabled = enabled; }
GradModeGuard::~GradModeGuard() { t_grad_enabled = prev_; }

InferenceModeGuard::InferenceModeGuard(bool enabled) : prev_inference_(t_inference_mode), prev_grad_(t_grad_enabled) {
  t_inference_mode = enabled;
  if (enabled) t_grad_enabled = false;
}
InferenceModeGuard::~InferenceModeGuard() {
  t_inference_mode = prev_inference_;
  t_grad_enabled = prev_grad_;
}

// ---- nodes --------------------------------------------------------------------------------

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1)) {}
Node::~Node() = default;

namespace {

// Accumulates into a leaf's .grad; leaves hold it weakly, the graph strongly.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
    sequence_nr = UINT64_MAX;  // runs as soon as its gradient is complete
    output_meta.push_back({leaf_->sizes, leaf_->dtype, leaf_->storage->device()});
  }
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

AutogradMeta& meta(const Tensor& t) {
  PF_CHECK(t.defined(), "autograd: undefined tensor");
  auto& m = t.impl()->autograd;
  if (!m) m = std::make_shared<AutogradMeta>();
  return *m;
}
bool differentiable(DType t) { return is_floating(t); }

// The storage extent (in elements) that a dense buffer needs so that both geometries fit.
int64_t storage_extent(const Shape& sizes, const Shape& strides, int64_t offset, const Shape& vsizes,
                       const Shape& vstrides, int64_t voffset) {
  auto last = [](const Shape& sz, const Shape& st, int64_t off) {
    for (size_t d = 0; d < sz.size(); ++d) {
      if (sz[d] == 0) return off;  // empty: touches nothing
      off += (sz[d] - 1) * st[d];
    }
    return off;
  };
  return std::max(last(sizes, strides, offset), last(vsizes, vstrides, voffset)) + 1;
}

// The backward of "view = as_strided(base)": the gradient is scattered into zeros laid out
// like the base, through the view's geometry relative to the same storage.
std::shared_ptr<FunctionNode> as_strided_backward(const Tensor& base, const Tensor& view) {
  return make_node("AsStridedBackward0",
                   [sizes = base.sizes(), dtype = base.dtype(), dev = base.device(), vs = view.sizes(),
                    vst = view.strides(), vo = view.offset(), bst = base.strides(),
                    bo = base.offset()](const std::vector<Tensor>& g, const std::vector<Tensor>&) -> std::vector<Tensor> {
                     Tensor storage = ops::zeros({storage_extent(sizes, bst, bo, vs, vst, vo)}, dtype, dev);
                     Tensor gb = ops::as_strided(storage, sizes, bst, bo);
                     Tensor gv = ops::as_strided(storage, vs, vst, vo);
                     ops::copy_(gv, g[0]);
                     return {gb};
                   });
}

// A pre-hook calling a registered hook (a no-op once removed).
GradHook call_hook(std::shared_ptr<GradHook> hook) {
  return [hook = std::move(hook)](const Tensor& g) { return *hook ? (*hook)(g) : Tensor(); };
}

// retain_grad's pre-hook: accumulates the gradient into the tensor's .grad (with history
// under create_graph, else a private copy), and leaves the gradient flowing on unchanged.
// `owner` is the node it is installed on: once an in-place op gives the tensor a new grad_fn,
// the hook moves there (PyTorch: .grad is the gradient of the tensor's current value).
GradHook retain_hook(std::weak_ptr<TensorImpl> weak, const Node* owner) {
  return [weak = std::move(weak), owner](const Tensor& g) -> Tensor {
    auto impl = weak.lock();
    if (!impl || !impl->autograd || impl->autograd->grad_fn.get() != owner) return {};
    const Tensor t(impl);
    const bool create_graph = is_grad_enabled();
    Tensor mine = create_graph ? g : ops::clone(detach(g));
    Tensor old = grad(t);
    set_grad(t, !old.defined() ? mine : create_graph ? ops::add(old, mine) : ops::binary_("add", old, mine));
    return {};
  };
}

// Moves a non-leaf's hooks onto its new grad_fn (after an in-place op or a view refresh).
void install_hooks(Node& fn, const AutogradMeta& m, const Tensor& t) {
  for (const auto& h : m.hooks) fn.pre_hooks.emplace_back(0, call_hook(h));
  if (m.retains_grad) fn.pre_hooks.emplace_back(0, retain_hook(t.impl_ptr(), &fn));
}

// A view whose storage was written since its history was set (an in-place op on the base or
// on another view of it) gets a new grad_fn reading from the base's current history.
void refresh_view(const Tensor& t, AutogradMeta& m) {
  m.view_version = t.storage()->version();
  if (m.requires_grad || !differentiable(t.dtype())) return;  // a leaf made from a view keeps being one
  const Tensor base(m.view_base);
  const AutogradMeta* bm = base.impl()->autograd.get();  // a root: never a view itself
  if (!bm || (!bm->requires_grad && !bm->grad_fn)) return;
  auto fn = as_strided_backward(base, t);
  fn->next_edges = {gradient_edge(base)};
  fn->output_meta = {{t.sizes(), t.dtype(), t.device()}};
  install_hooks(*fn, m, t);
  m.grad_fn = std::move(fn);
  m.output_nr = 0;
}

const AutogradMeta* meta_if(const Tensor& t) {
  if (!t.defined()) return nullptr;
  AutogradMeta* m = t.impl()->autograd.get();
  if (m && m->view_base && m->view_version != t.storage()->version()) refresh_view(t, *m);
  return m;
}

// PyTorch's legacy type names in messages: "plugflow.FloatTensor", "plugflow.cuda.LongTensor".
std::string legacy_type_name(const Tensor& t) {
  const char* base = "Tensor";
  switch (t.dtype()) {
    case DType::Bool: base = "BoolTensor"; break;
    case DType::UInt8: base = "ByteTensor"; break;
    case DType::Int8: base = "CharTensor"; break;
    case DType::Int16: base = "ShortTensor"; break;
    case DType::Int32: base = "IntTensor"; break;
    case DType::Int64: base = "LongTensor"; break;
    case DType::Float16: base = "HalfTensor"; break;
    case DType::BFloat16: base = "BFloat16Tensor"; break;
    case DType::Float32: base = "FloatTensor"; break;
    case DType::Float64: base = "DoubleTensor"; break;
  }
  const Device d = t.device();
  return std::string("plugflow.") + (d.is_cpu() ? "" : std::string(device_type_name(d.type)) + ".") + base;
}

}  // namespace

// Used by the engine: whether a node is a leaf accumulator, and accumulate-in-place semantics.
bool is_accumulate_grad(const Node& n) { return dynamic_cast<const AccumulateGrad*>(&n) != nullptr; }

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads[0]);
  if (!g.defined()) return {};
  Tensor leaf(leaf_);
  AutogradMeta& m = meta(leaf);
  // The leaf may have changed since this node's graph was recorded (module.double() while an
  // older graph is alive): its gradient always takes the leaf's current dtype and device.
  PF_CHECK(g.sizes() == leaf.sizes(), "the gradient of a leaf of shape ", shape_str(leaf.sizes()), " has shape ",
           shape_str(g.sizes()), ": the tensor's data was replaced after this graph was recorded");
  if (g.dtype() != leaf.dtype() || g.device() != leaf.device()) g = ops::to(g, leaf.device(), leaf.dtype());
  for (const auto& hook : m.hooks) {
    if (!*hook) continue;  // removed
    Tensor r = (*hook)(g);
    if (r.defined()) g = r;
  }
  if (!is_grad_enabled()) {  // plain backward: .grad never carries history
    if (!m.grad.defined()) {
      // Keep the incoming buffer when nothing else references it; otherwise a private copy,
      // so that later in-place accumulation never writes into another tensor's gradient. The
      // gradient takes the leaf's layout (row-major or channels last: PyTorch's layout contract).
      const MemoryFormat format = leaf.suggest_memory_format();
      const bool unique = g.impl_ptr().use_count() == 1 &&
                          g.storage().use_count() - graph::capture_references(g.storage().get()) == 1 &&
                          g.is_contiguous(format) && g.impl()->autograd == nullptr;
      m.grad = unique ? g : ops::clone(detach(g), format);
    } else {
      ops::binary_("add", m.grad, detach(g));
    }
  } else {  // create_graph: the accumulated gradient is itself differentiable
    m.grad = m.grad.defined() ? ops::add(m.grad, g) : g;
  }
  return {};
}

// ---- tensor-level state -------------------------------------------------------------------

bool requires_grad(const Tensor& t) {
  const AutogradMeta* m = meta_if(t);
  return m && (m->requires_grad || m->grad_fn);
}
bool is_leaf(const Tensor& t) {
  const AutogradMeta* m = meta_if(t);
  return !m || !m->grad_fn;
}
std::shared_ptr<Node> grad_fn(const Tensor& t) {
  const AutogradMeta* m = meta_if(t);
  return m ? m->grad_fn : nullptr;
}

void set_requires_grad(const Tensor& t, bool value) {
  if (!value && !requires_grad(t)) return;
  if (value && !is_leaf(t)) return;  // a non-leaf already requires grad
  PF_CHECK(is_leaf(t), "you can only change requires_grad flags of leaf variables.",
           value ? "" : " If you want to use a computed variable in a subgraph that doesn't require differentiation "
                        "use var_no_grad = var.detach().");
  PF_CHECK(!value || differentiable(t.dtype()),
           "only Tensors of floating point and complex dtype can require gradients");
  meta(t).requires_grad = value;
}

Tensor grad(const Tensor& t) {
  const AutogradMeta* m = meta_if(t);
  return m ? m->grad : Tensor();
}

void set_grad(const Tensor& t, const Tensor& g) {
  if (g.defined()) {
    PF_CHECK(g.sizes() == t.sizes(), "assigned grad has data of a different size");
    PF_CHECK(g.dtype() == t.dtype(), "assigned grad has data of a different type");
    PF_CHECK(g.device() == t.device(), "assigned grad has data located on a different device");
  }
  meta(t).grad = g;
}

void retain_grad(const Tensor& t) {
  PF_CHECK(requires_grad(t), "can't retain_grad on Tensor that has requires_grad=False");
  if (is_leaf(t)) return;  // leaves keep .grad anyway
  AutogradMeta& m = meta(t);
  if (m.retains_grad) return;
  m.retains_grad = true;
  m.grad_fn->pre_hooks.emplace_back(m.output_nr, retain_hook(t.impl_ptr(), m.grad_fn.get()));
}

bool retains_grad(const Tensor& t) {
  const AutogradMeta* m = meta_if(t);
  return m && m->retains_grad;
}

size_t register_hook(const Tensor& t, GradHook hook) {
  PF_CHECK(requires_grad(t), "cannot register a hook on a tensor that doesn't require gradient");
  AutogradMeta& m = meta(t);
  auto holder = std::make_shared<GradHook>(std::move(hook));
  m.hooks.push_back(holder);
  if (m.grad_fn) m.grad_fn->pre_hooks.emplace_back(m.output_nr, call_hook(holder));
  return m.hooks.size() - 1;
}

void remove_hook(const Tensor& t, size_t handle) {
  AutogradMeta& m = meta(t);
  if (handle >= m.hooks.size()) return;
  *m.hooks[handle] = nullptr;  // every copy installed on a node sees it gone; handles stay stable
}

Tensor detach(const Tensor& t) {
  return Tensor::view_of(t.storage(), t.sizes(), t.strides(), t.offset(), t.dtype());
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = const_cast<AutogradMeta*>(meta_if(t));
  if (!m) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (!m->requires_grad) return {};
  std::shared_ptr<Node> acc = m->grad_accumulator.lock();
  // A leaf whose data changed dtype, device or shape (`param.data = x`, module.double()) gets a
  // fresh accumulator: the one a still-alive older graph holds describes the old metadata.
  const TensorMeta* old = acc ? &acc->output_meta[0] : nullptr;
  if (old && (old->dtype != t.dtype() || old->device != t.device() || old->sizes != t.sizes())) acc = nullptr;
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m->grad_accumulator = acc;
  }
  return {acc, 0};
}

Tensor view_base(const Tensor& t) {
  const AutogradMeta* m = meta_if(t);
  return m && m->view_base ? Tensor(m->view_base) : Tensor();
}

// ---- saved tensors --------------------------------------------------------------------------

SavedTensor::SavedTensor(const Tensor& t, int output_nr) : output_nr_(output_nr), defined_(t.defined()) {
  if (!defined_) return;
  version_ = t.storage()->version();
  // An output keeps no autograd state here: its grad_fn is the saving node itself.
  tensor_ = output_nr >= 0 ? detach(t) : t;
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& owner) const {
  if (!defined_) return {};
  PF_CHECK(!released_, "Trying to backward through the graph a second time (or directly access saved tensors after "
                       "they have already been freed). Saved intermediate values of the graph are freed when you call "
                       ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
                       "graph a second time or if you need to access saved tensors after calling backward.");
  const uint32_t now = tensor_.storage()->version();
  if (now != version_) {
    std::string produced;
    if (output_nr_ >= 0) produced = ", which is output " + std::to_string(output_nr_) + " of " + owner->name() + ",";
    else if (auto fn = grad_fn(tensor_))  // its current grad_fn, as PyTorch reports it
      produced = ", which is output " + std::to_string(meta_if(tensor_)->output_nr) + " of " + fn->name() + ",";
    PF_THROW(Error, "one of the variables needed for gradient computation has been modified by an inplace "
                    "operation: [", legacy_type_name(tensor_), " ", shape_str(tensor_.sizes()), "]", produced,
             " is at version ", now, "; expected version ", version_,
             " instead. Hint: the operation that failed to compute its gradient was ", owner->name(), ".");
  }
  if (output_nr_ < 0) return tensor_;
  Tensor out = detach(tensor_);
  if (is_grad_enabled() && differentiable(out.dtype())) {  // create_graph: reattach the history
    AutogradMeta& m = meta(out);
    m.grad_fn = owner;
    m.output_nr = static_cast<uint32_t>(output_nr_);
  }
  return out;
}

bool SavedTensor::release() {
  if (!defined_) return false;  // a placeholder: nothing to free, nothing to complain about later
  tensor_ = Tensor();
  released_ = true;
  return true;
}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grads) {
  PF_CHECK(!released_, "Trying to backward through the graph a second time (or directly access saved tensors after "
                       "they have already been freed). Saved intermediate values of the graph are freed when you "
                       "call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward "
                       "through the graph a second time or if you need to access saved tensors after calling "
                       "backward.");
  bool any = false;
  for (const auto& g : grads) any = any || g.defined();
  if (!any) return std::vector<Tensor>(next_edges.size());
  // Outputs that received no gradient contribute zeros.
  for (size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined() && i < output_meta.size())
      grads[i] = ops::zeros(output_meta[i].sizes, output_meta[i].dtype, output_meta[i].device);
  std::vector<Tensor> saved;
  saved.reserve(saved_.size());
  const auto self = shared_from_this();
  for (const auto& s : saved_) saved.push_back(s.unpack(self));
  std::vector<Tensor> out = fn_(grads, saved);
  PF_CHECK(out.size() == next_edges.size(), name(), " returned ", out.size(), " gradients but expected ",
           next_edges.size());
  return out;
}

void FunctionNode::release_saved() {
  for (auto& s : saved_) released_ = s.release() || released_;
}

// ---- recording ------------------------------------------------------------------------------

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && requires_grad(*t)) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && requires_grad(t)) return true;
  return false;
}

std::shared_ptr<FunctionNode> make_node(std::string name, BackwardFn fn) {
  return std::make_shared<FunctionNode>(std::move(name), std::move(fn));
}

void record(const std::shared_ptr<Node>& node, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  node->next_edges.clear();
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  node->output_meta.clear();
  node->output_meta.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    node->output_meta.push_back({o.sizes(), o.dtype(), o.device()});
    if (!differentiable(o.dtype())) continue;
    AutogradMeta& m = meta(o);
    m.grad_fn = node;
    m.output_nr = static_cast<uint32_t>(i);
  }
}

void check_inplace(const Tensor& self) {
  if (!t_grad_enabled) return;
  const AutogradMeta* m = meta_if(self);
  if (!m) return;
  if (m->view_base) {
    const Tensor base(m->view_base);
    PF_CHECK(!(is_leaf(base) && requires_grad(base)),
             "a view of a leaf Variable that requires grad is being used in an in-place operation.");
  }
  PF_CHECK(!(m->requires_grad && !m->grad_fn),
           "a leaf Variable that requires grad is being used in an in-place operation.");
}

void record_view(const Tensor& base, const Tensor& view, const std::shared_ptr<Node>& node) {
  const AutogradMeta* bm = meta_if(base);
  std::shared_ptr<TensorImpl> root = bm && bm->view_base ? bm->view_base : base.impl_ptr();
  if (node) record(node, {base}, {view});
  AutogradMeta& vm = meta(view);
  vm.view_base = std::move(root);
  vm.view_version = view.storage()->version();
}

namespace {

// The gradient of an in-place op applied to a view, expressed on the base: the base's
// gradient passes through unchanged outside the view, and through the op inside it.
class CopySlices : public Node {
 public:
  CopySlices(const Tensor& base, const Tensor& view, std::shared_ptr<Node> fn)
      : sizes_(view.sizes()), strides_(view.strides()), offset_(view.offset()), fn_(std::move(fn)) {
    output_meta.push_back({base.sizes(), base.dtype(), base.device()});
    base_strides_ = base.strides();
    base_offset_ = base.offset();
  }
  std::string name() const override { return "CopySlices"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> out(next_edges.size());
    if (!grads[0].defined()) return out;
    // A dense copy of the base's gradient laid out like the base, so the view's geometry
    // (relative to the storage) addresses the same elements.
    const int64_t extent = storage_extent(output_meta[0].sizes, base_strides_, base_offset_, sizes_, strides_, offset_);
    Tensor result = ops::as_strided(ops::zeros({extent}, output_meta[0].dtype, output_meta[0].device),
                                    output_meta[0].sizes, base_strides_, base_offset_);
    ops::copy_(result, grads[0]);
    Tensor grad_slice = ops::as_strided(result, sizes_, strides_, offset_);
    std::vector<Tensor> res = fn_->apply({ops::clone(grad_slice)});
    if (res[0].defined()) ops::copy_(grad_slice, res[0]);
    else ops::zero_(grad_slice);
    out[0] = result;
    for (size_t i = 1; i < res.size() && i < out.size(); ++i) out[i] = res[i];
    return out;
  }
  void release_saved() override { fn_->release_saved(); }

 private:
  Shape sizes_, strides_;
  int64_t offset_;
  Shape base_strides_;
  int64_t base_offset_ = 0;
  std::shared_ptr<Node> fn_;
};

}  // namespace

void record_inplace(const std::shared_ptr<Node>& node, const Tensor& self, const std::vector<Tensor>& other_inputs) {
  AutogradMeta* sm = self.impl()->autograd.get();
  if (sm && sm->view_base) {
    Tensor base(sm->view_base);
    // fn's edges: the view's previous value (reached through the base), then the others.
    std::vector<Tensor> inputs{Tensor()};
    inputs.insert(inputs.end(), other_inputs.begin(), other_inputs.end());
    record(node, inputs, {});
    node->output_meta = {{self.sizes(), self.dtype(), self.device()}};
    auto slices = std::make_shared<CopySlices>(base, self, node);
    slices->next_edges.push_back(gradient_edge(base));
    for (size_t i = 1; i < node->next_edges.size(); ++i) slices->next_edges.push_back(node->next_edges[i]);
    AutogradMeta& bm = meta(base);
    bm.grad_fn = slices;
    bm.output_nr = 0;
    // The view now reads from the rewritten base.
    auto view_fn = as_strided_backward(base, self);
    view_fn->next_edges = {Edge{slices, 0}};
    view_fn->output_meta = {{self.sizes(), self.dtype(), self.device()}};
    install_hooks(*view_fn, *sm, self);
    sm->grad_fn = view_fn;
    sm->output_nr = 0;
    sm->view_version = self.storage()->version();
    return;
  }
  std::vector<Tensor> inputs{self};
  inputs.insert(inputs.end(), other_inputs.begin(), other_inputs.end());
  // Edges are taken from self's history *before* this op, then self gets the new node.
  node->next_edges.clear();
  for (const Tensor& t : inputs) node->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  node->output_meta = {{self.sizes(), self.dtype(), self.device()}};
  AutogradMeta& m = meta(self);
  m.grad_fn = node;
  m.output_nr = 0;
  // Hooks stay with the old value's node (PyTorch); retain_grad follows the new value.
  if (m.retains_grad) node->pre_hooks.emplace_back(0, retain_hook(self.impl_ptr(), node.get()));
}

}  // namespace plugflow::autograd
