// The backward engine: runs a graph's nodes in dependency order, single-threaded, highest
// sequence number (most recently created) first among the ready ones.
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "../autograd/grad_utils.h"
#include "plugflow/autocast.h"
#include "plugflow/autograd.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace plugflow::autograd {

bool is_accumulate_grad(const Node& n);  // autograd_meta.cpp

namespace {

struct CompareSeq {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

struct GraphTask {
  bool retain_graph = false;
  bool create_graph = false;
  bool capture_only = false;  // autograd.grad: gradients go to `captured`, not to .grad
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::unordered_map<Node*, std::vector<std::pair<uint32_t, size_t>>> captures;  // node -> (input_nr, slot)
  std::unordered_set<Node*> needed;  // when restricted to some inputs: nodes that lead to them
  bool restricted = false;
  std::vector<Tensor> captured;
  // The root nodes, kept alive until the task ends: a leaf's accumulator is held only weakly by the
  // leaf, so backward called on a leaf itself (`x.backward()`) would otherwise free it at once.
  std::vector<std::shared_ptr<Node>> roots;
};

// Whether `shape` broadcasts to `target` (PyTorch's is_expandable_to).
bool expandable_to(const Shape& shape, const Shape& target) {
  if (shape.size() > target.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t s = shape[shape.size() - 1 - i], t = target[target.size() - 1 - i];
    if (s != t && s != 1) return false;
  }
  return true;
}

// Adds `g` into input `nr` of `fn`'s buffer, checking it against what the node produced.
void accumulate(GraphTask& task, Node* fn, uint32_t nr, Tensor g, const Node* producer) {
  const TensorMeta& m = fn->output_meta.at(nr);
  if (g.sizes() != m.sizes) {
    // A gradient with broadcast dims is summed back (PyTorch's validate_outputs); anything
    // else is an error.
    PF_CHECK(expandable_to(m.sizes, g.sizes()), "Function ", producer ? producer->name() : std::string("backward"),
             " returned an invalid gradient at index ", nr, " - got ", shape_str(g.sizes()),
             " but expected shape compatible with ", shape_str(m.sizes));
    g = sum_to(g, m.sizes);
  }
  if (g.dtype() != m.dtype) g = ops::to(g, std::nullopt, m.dtype);
  PF_CHECK(g.device() == m.device, "Function ", producer ? producer->name() : std::string("backward"),
           " returned a gradient on ", g.device().str(), " but expected ", m.device.str());
  auto& buf = task.buffers[fn];
  if (buf.empty()) buf.resize(fn->output_meta.size());
  if (!buf[nr].defined()) buf[nr] = std::move(g);
  else buf[nr] = ops::add(buf[nr], g);
}

// Marks nodes that can reach a capture/target node (only those run in a restricted task).
bool mark_needed(GraphTask& task, Node* n, std::unordered_map<Node*, bool>& memo) {
  if (auto it = memo.find(n); it != memo.end()) return it->second;
  memo[n] = false;  // graphs are acyclic; this only guards re-entry
  bool needed = task.captures.count(n) > 0;
  for (const Edge& e : n->next_edges)
    if (e.valid() && mark_needed(task, e.fn.get(), memo)) needed = true;
  memo[n] = needed;
  if (needed) task.needed.insert(n);
  return needed;
}

void count_dependencies(GraphTask& task, const std::vector<Node*>& roots) {
  std::vector<Node*> stack(roots.begin(), roots.end());
  std::unordered_set<Node*> seen(roots.begin(), roots.end());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      Node* c = e.fn.get();
      if (task.restricted && !task.needed.count(c)) continue;
      ++task.dependencies[c];
      if (seen.insert(c).second) stack.push_back(c);
    }
  }
}

// Tensor hooks and retain_grad of the node's outputs, in registration order.
void run_pre_hooks(Node* n, std::vector<Tensor>& grads) {
  for (auto& [nr, hook] : n->pre_hooks) {
    if (nr >= grads.size() || !grads[nr].defined()) continue;
    Tensor r = hook(grads[nr]);
    if (r.defined()) grads[nr] = r;
  }
}

// The innermost graph task running on this thread (backward may run inside a node's backward).
thread_local const GraphTask* t_current_task = nullptr;

void execute(GraphTask& task, const std::vector<Node*>& roots) {
  struct CurrentTask {
    const GraphTask* outer = t_current_task;
    explicit CurrentTask(const GraphTask* task) { t_current_task = task; }
    ~CurrentTask() { t_current_task = outer; }
  } current(&task);
  count_dependencies(task, roots);
  std::priority_queue<Node*, std::vector<Node*>, CompareSeq> ready;
  std::unordered_set<Node*> queued;
  for (Node* r : roots)
    if (task.dependencies[r] == 0 && queued.insert(r).second) ready.push(r);
  // Every node stays alive while it may still run: task.roots holds the roots, edges the rest.

  GradModeGuard mode(task.create_graph);
  // Backward ops run in the types the forward ops chose: no autocast inside backward (a listed
  // op in a backward formula, e.g. a transposed convolution's conv2d, must not recast).
  autocast::DisabledGuard no_autocast;
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(task.buffers[n]);
    task.buffers.erase(n);
    grads.resize(n->output_meta.size());
    // autograd.grad captures before the tensors' hooks run (PyTorch 1.13).
    if (auto it = task.captures.find(n); it != task.captures.end())
      for (auto [nr, slot] : it->second)
        if (nr < grads.size()) task.captured[slot] = grads[nr];
    run_pre_hooks(n, grads);

    std::vector<Tensor> out;
    const bool skip = (task.capture_only && is_accumulate_grad(*n)) ||
                      (task.restricted && task.capture_only && !task.needed.count(n));
    bool leads_further = false;
    for (const Edge& e : n->next_edges)
      if (e.valid() && (!task.restricted || task.needed.count(e.fn.get()))) leads_further = true;
    if (!skip && (leads_further || is_accumulate_grad(*n))) {
      out = n->apply(std::move(grads));
      if (!task.retain_graph) n->release_saved();  // only what ran is freed (PyTorch)
    }

    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.valid()) continue;
      Node* c = e.fn.get();
      if (task.restricted && !task.needed.count(c)) continue;
      if (i < out.size() && out[i].defined()) accumulate(task, c, e.input_nr, out[i], n);
      if (--task.dependencies[c] == 0 && queued.insert(c).second) ready.push(c);
    }
  }
}

// Root edges and their initial gradients; PyTorch's checks and messages.
std::vector<Node*> seed_roots(GraphTask& task, const std::vector<Tensor>& tensors, const std::vector<Tensor>& grads) {
  PF_CHECK(grads.empty() || grads.size() == tensors.size(), "grad can be implicitly created only for scalar outputs; "
           "got ", grads.size(), " gradients for ", tensors.size(), " tensors");
  std::vector<Node*> roots;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    Edge e = gradient_edge(t);
    PF_CHECK(e.valid(), "element ", i, " of tensors does not require grad and does not have a grad_fn");
    Tensor g = i < grads.size() ? grads[i] : Tensor();
    if (!g.defined()) {
      PF_CHECK(t.numel() == 1, "grad can be implicitly created only for scalar outputs");
      g = ops::ones(t.sizes(), t.dtype(), t.device());
    } else {
      PF_CHECK(g.sizes() == t.sizes(), "Mismatch in shape: grad_output[", i, "] has a shape of ", shape_str(g.sizes()),
               " and output[", i, "] has a shape of ", shape_str(t.sizes()), ".");
    }
    accumulate(task, e.fn.get(), e.input_nr, g, nullptr);
    roots.push_back(e.fn.get());
    task.roots.push_back(e.fn);
  }
  return roots;
}

}  // namespace

void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors, bool retain_graph,
              bool create_graph, const std::vector<Tensor>& inputs) {
  GraphTask task;
  task.retain_graph = retain_graph || create_graph;
  task.create_graph = create_graph;
  std::vector<std::shared_ptr<Node>> keep;
  std::vector<Node*> roots = seed_roots(task, tensors, grad_tensors);
  if (!inputs.empty()) {
    // backward(inputs=...): accumulate only into these tensors' .grad.
    task.restricted = true;
    task.captured.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      Edge e = gradient_edge(inputs[i]);
      PF_CHECK(e.valid(), "One of the differentiated Tensors does not require grad");
      keep.push_back(e.fn);
      task.captures[e.fn.get()].emplace_back(e.input_nr, i);
    }
    std::unordered_map<Node*, bool> memo;
    for (Node* r : roots) mark_needed(task, r, memo);
    // Non-leaf inputs: retain their gradient like retain_grad does.
    for (const Tensor& t : inputs)
      if (!is_leaf(t)) retain_grad(t);
  }
  execute(task, roots);
}

bool is_checkpoint_valid() { return t_current_task == nullptr || !t_current_task->restricted; }

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  PF_CHECK(!inputs.empty(), "grad requires at least one input");
  GraphTask task;
  task.retain_graph = retain_graph || create_graph;
  task.create_graph = create_graph;
  task.capture_only = true;
  task.restricted = true;
  task.captured.resize(inputs.size());
  std::vector<std::shared_ptr<Node>> keep;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Edge e = gradient_edge(inputs[i]);
    PF_CHECK(e.valid(), "One of the differentiated Tensors does not require grad");
    keep.push_back(e.fn);
    task.captures[e.fn.get()].emplace_back(e.input_nr, i);
  }
  std::vector<Node*> roots = seed_roots(task, outputs, grad_outputs);
  std::unordered_map<Node*, bool> memo;
  for (Node* r : roots) mark_needed(task, r, memo);
  execute(task, roots);
  for (size_t i = 0; i < inputs.size(); ++i)
    PF_CHECK(allow_unused || task.captured[i].defined(),
             "One of the differentiated Tensors appears to not have been used in the graph. Set allow_unused=True if "
             "this is the desired behavior.");
  return task.captured;
}

}  // namespace plugflow::autograd
