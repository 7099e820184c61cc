// Capture mode: the dispatcher, storages, generators and cross-device copies report here
// instead of computing, and the calls become a Graph (plugflow/graph.h).
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "plugflow/autocast.h"
#include "plugflow/graph.h"

namespace plugflow::graph {

struct Capture::State {
  // Autocast's weight casts made while capturing are virtual tensors: they live in their own
  // cache, dropped when capture ends, and the eager region's cache comes back.
  std::optional<autocast::CacheStash> autocast_cache{std::in_place};
  Graph graph;
  std::unordered_map<const Storage*, int> buffer_of;
  std::unordered_set<const Storage*> born;  // created during capture
  std::vector<char> written;                // per buffer: some node wrote it already
  std::vector<char> read_unwritten;         // per buffer: read by a node before any node wrote it
  Generator* pending_rng = nullptr;
  uint64_t pending_count = 0;
  // Each generator's state before capture: restored at the end, so the first replay draws the
  // numbers an eager call in its place would (capture itself computes nothing).
  std::unordered_map<Generator*, std::pair<uint64_t, uint64_t>> rng_before;

  void restore_generators() {
    for (const auto& [gen, state] : rng_before) gen->set_state(state.first, state.second);
    rng_before.clear();
  }
  std::string next_tag, scope;

  int buffer_for(const Tensor& t) {
    const std::shared_ptr<Storage>& s = t.storage();
    if (auto it = buffer_of.find(s.get()); it != buffer_of.end()) return it->second;
    Buffer b;
    b.kind = born.count(s.get()) ? BufferKind::Temporary : BufferKind::External;
    b.device = s->device();
    b.nbytes = s->nbytes();
    b.storage = s;  // kept alive while capturing, so no other storage takes its address
    graph.buffers.push_back(std::move(b));
    written.push_back(0);
    read_unwritten.push_back(0);
    const int id = static_cast<int>(graph.buffers.size()) - 1;
    buffer_of.emplace(s.get(), id);
    return id;
  }

  Value value_of(const Tensor& t) {
    return Value{buffer_for(t), t.sizes(), t.strides(), t.offset(), t.dtype()};
  }

  void note_read(const Value& v) {
    if (!written[v.buffer]) read_unwritten[v.buffer] = 1;
  }

  void note_write(const Value& v, const char* what) {
    const Buffer& b = graph.buffers[v.buffer];
    if (b.kind == BufferKind::Input)
      PF_THROW(graph::CaptureError, what, " writes in place into input ", b.input_index,
               " of the graph call: a static graph may not modify its arguments (clone the input first)");
    written[v.buffer] = 1;
  }

  Node& push(Node n) {
    n.scope = scope;
    n.tag = std::move(next_tag);
    next_tag.clear();
    graph.nodes.push_back(std::move(n));
    return graph.nodes.back();
  }
};

namespace {
thread_local Capture::State* g_state = nullptr;

bool all_empty(std::span<Tensor> outputs) {
  if (outputs.empty()) return false;
  for (const auto& o : outputs)
    if (o.numel() != 0) return false;
  return true;
}

}  // namespace

Capture::Capture(const std::vector<Tensor>& inputs) : state_(std::make_unique<State>()) {
  PF_CHECK(g_state == nullptr, "an nn.Graph is already capturing on this thread (graphs cannot be nested)");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    PF_CHECK(t.defined(), "graph input ", i, " is undefined");
    PF_CHECK_T(!state_->buffer_of.count(t.storage().get()), graph::CaptureError, "graph inputs ", i,
               " and an earlier one share memory; pass separate tensors (clone one of them)");
    const int id = state_->buffer_for(t);
    Buffer& b = state_->graph.buffers[id];
    b.kind = BufferKind::Input;
    b.input_index = static_cast<int>(i);
    state_->written[id] = 1;  // holds the caller's values
    state_->graph.inputs.push_back(id);
    state_->graph.input_values.push_back(state_->value_of(t));
  }
  g_state = state_.get();
}

Capture::~Capture() {
  if (g_state == state_.get()) g_state = nullptr;
  state_->restore_generators();
}

void Capture::set_tag(std::string tag) { state_->next_tag = std::move(tag); }
void Capture::set_scope(std::string scope) { state_->scope = std::move(scope); }

Graph Capture::end(const std::vector<Tensor>& outputs) {
  PF_CHECK(g_state == state_.get(), "graph capture ended twice");
  g_state = nullptr;
  State& s = *state_;
  s.restore_generators();
  s.autocast_cache.reset();
  for (const Tensor& t : outputs) {
    PF_CHECK(t.defined(), "a graph output is undefined");
    s.graph.outputs.push_back(s.value_of(t));
  }
  for (size_t i = 0; i < s.graph.buffers.size(); ++i) {
    Buffer& b = s.graph.buffers[i];
    if (b.kind != BufferKind::Temporary) continue;
    // Written by host code during capture (or foreign memory) and read as it is: a constant.
    if (s.read_unwritten[i] && !b.storage->is_virtual()) b.kind = BufferKind::Constant;
  }
  for (const Value& v : s.graph.outputs) {
    Buffer& b = s.graph.buffers[v.buffer];
    if (b.kind == BufferKind::Temporary) b.kind = BufferKind::Output;
  }
  // Only inputs' shapes, externals' and constants' memory outlive the capture.
  for (Buffer& b : s.graph.buffers)
    if (b.kind == BufferKind::Temporary || b.kind == BufferKind::Output || b.kind == BufferKind::Input)
      b.storage.reset();
  return std::move(s.graph);
}

bool capturing() { return g_state != nullptr; }

long capture_references(const Storage* s) { return g_state != nullptr && g_state->buffer_of.count(s) ? 1 : 0; }

void check_host_read(const char* what) {
  if (g_state != nullptr)
    PF_THROW(graph::CaptureError, what, " reads tensor values on the host while an nn.Graph captures build(): a static "
             "graph cannot depend on data (no .item(), printing, numpy or Python control flow on tensor values)");
}

void record_host_call(std::shared_ptr<const HostCall> call, std::span<const Tensor> inputs,
                      std::span<Tensor> outputs) {
  PF_CHECK(g_state != nullptr, "record_host_call: no nn.Graph is capturing on this thread");
  Capture::State& s = *g_state;
  Node n;
  n.kind = NodeKind::Host;
  for (const Tensor& t : inputs) {
    n.inputs.push_back(s.value_of(t));
    s.note_read(n.inputs.back());
  }
  const std::string what = "'" + call->name + "'";
  for (const Tensor& t : outputs) {
    n.outputs.push_back(s.value_of(t));
    s.note_write(n.outputs.back(), what.c_str());
  }
  n.host = std::move(call);
  s.push(std::move(n));
}

namespace internal {

bool active() { return g_state != nullptr; }

void note_storage(Storage* s) { g_state->born.insert(s); }

void note_rng(Generator* gen, uint64_t count) {
  g_state->rng_before.try_emplace(gen, gen->state());
  g_state->pending_rng = gen;
  g_state->pending_count = count;
}

void record_kernel(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs, std::span<Tensor> outputs) {
  Capture::State& s = *g_state;
  if (all_empty(outputs)) return;  // the dispatcher skips these kernels too
  Node n;
  n.op = &op;
  n.attrs = attrs;
  for (const Tensor& t : inputs) {
    n.inputs.push_back(s.value_of(t));
    s.note_read(n.inputs.back());
  }
  for (const Tensor& t : outputs) n.outputs.push_back(s.value_of(t));
  const std::string what = "op '" + op.name + "'";
  for (const Value& v : n.outputs) s.note_write(v, what.c_str());
  for (int i : op.mutated_inputs) s.note_write(n.inputs.at(i), what.c_str());
  if (s.pending_rng != nullptr && attrs.has("seed") && attrs.has("offset")) {
    n.rng = s.pending_rng;
    n.rng_count = s.pending_count;
    s.pending_rng = nullptr;
  }
  s.push(std::move(n));
}

void record_device_copy(const Tensor& dst, const Tensor& src) {
  Capture::State& s = *g_state;
  Node n;
  n.kind = NodeKind::DeviceCopy;
  n.inputs.push_back(s.value_of(src));
  s.note_read(n.inputs.back());
  n.outputs.push_back(s.value_of(dst));
  s.note_write(n.outputs.back(), "a copy between devices");
  s.push(std::move(n));
}

}  // namespace internal
}  // namespace plugflow::graph
