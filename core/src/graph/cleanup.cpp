// Passes that never change results and always run: constant folding (nodes whose inputs are
// all constants run once at compile time) and dead-node elimination.
#include <algorithm>

#include "plugflow/device.h"
#include "plugflow/dispatch.h"
#include "plugflow/graph.h"

namespace plugflow::graph {
namespace {

Tensor view_of_buffer(const Buffer& b, const Value& v) {
  return Tensor::view_of(b.storage, v.sizes, v.strides, v.offset, v.dtype);
}

// Whether a node has an effect beyond the temporaries it writes (a host call talks to peers).
bool writes_externally(const Graph& g, const Node& n) {
  if (n.kind == NodeKind::Host) return true;
  for (const Value& v : n.outputs)
    if (g.buffers[v.buffer].kind != BufferKind::Temporary) return true;
  return n.kind == NodeKind::Kernel && !n.op->mutated_inputs.empty();
}

// A node whose inputs are all constants, that draws no random numbers and is the only writer of
// its temporary outputs, computes the same every call: run it now, keep its outputs as constants.
std::string fold_constants(Graph& g, const PassOptions&) {
  std::vector<int> writer_count(g.buffers.size(), 0);
  for (const Node& n : g.nodes)
    for (const Value& v : n.outputs) ++writer_count[v.buffer];
  int folded = 0;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (Node& n : g.nodes) {
    bool foldable = n.kind == NodeKind::Kernel && n.rng == nullptr && !writes_externally(g, n);
    for (const Value& v : n.inputs) foldable = foldable && g.buffers[v.buffer].kind == BufferKind::Constant;
    for (const Value& v : n.outputs) foldable = foldable && writer_count[v.buffer] == 1;
    if (!foldable) {
      kept.push_back(std::move(n));
      continue;
    }
    std::vector<Tensor> in, out;
    for (const Value& v : n.inputs) in.push_back(view_of_buffer(g.buffers[v.buffer], v));
    for (const Value& v : n.outputs) {
      Buffer& b = g.buffers[v.buffer];
      b.storage = std::make_shared<Storage>(b.device, std::max<size_t>(b.nbytes, 1));
      b.kind = BufferKind::Constant;
      out.push_back(view_of_buffer(b, v));
    }
    const Device device = g.buffers[(n.inputs.empty() ? n.outputs : n.inputs)[0].buffer].device;
    const DType key = n.inputs.empty() ? n.outputs[0].dtype : n.inputs[0].dtype;
    KernelContext ctx{*n.op, in, out, n.attrs, device, device_backend(device).current_stream(device.index)};
    find_kernel(*n.op, device.type, key)(ctx);
    device_backend(device).synchronize(device.index);
    ++folded;
  }
  g.nodes = std::move(kept);
  return folded ? std::to_string(folded) + " nodes computed once at compile time" : "";
}

// Nodes whose outputs nobody reads (and that write nothing outside the call) are dropped,
// repeatedly, as dropping one can free its producers.
std::string eliminate_dead(Graph& g, const PassOptions&) {
  int removed = 0;
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<char> read(g.buffers.size(), 0);
    for (const Node& n : g.nodes)
      for (const Value& v : n.inputs) read[v.buffer] = 1;
    for (const Value& v : g.outputs) read[v.buffer] = 1;
    std::vector<Node> kept;
    kept.reserve(g.nodes.size());
    for (Node& n : g.nodes) {
      bool dead = !writes_externally(g, n);
      for (const Value& v : n.outputs) dead = dead && !read[v.buffer];
      if (dead) {
        ++removed;
        changed = true;
      } else {
        kept.push_back(std::move(n));
      }
    }
    g.nodes = std::move(kept);
  }
  return removed ? std::to_string(removed) + " nodes whose results nobody reads removed" : "";
}

// The graph's convolution algorithm strategy (graph.config.set_conv_algo_search, default the
// config's) as the `algo_search` attribute of every convolution; a plugin's convolution kernels
// search (or ask the library) per problem on the first replay, through the same persistent cache
// as eager calls.
std::string set_conv_algo_search(Graph& g, const PassOptions& o) {
  int n = 0;
  for (Node& node : g.nodes) {
    if (node.kind != NodeKind::Kernel || node.op->name.rfind("conv", 0) != 0) continue;
    node.attrs.set("algo_search", o.conv_algo_search);
    ++n;
  }
  return n ? std::to_string(n) + " convolutions use the " + o.conv_algo_search + " algorithm search" : "";
}

// Nodes that write external storages in place (the optimizer updates) move up to just after the
// last node touching any buffer they touch: a parameter is updated as soon as its gradient is
// complete and nothing reads the old value any more, so gradients (and update temporaries) die
// early instead of all living until the end of the step. The order of dependent nodes, and so
// every result, is unchanged.
std::string schedule_updates(Graph& g, const PassOptions&) {
  int moved = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    // Pure in-place updates only: no outputs, writes only through mutated inputs.
    if (n.kind != NodeKind::Kernel || n.op->mutated_inputs.empty() || !n.outputs.empty() || n.rng != nullptr) continue;
    std::vector<int> touched;
    for (const Value& v : n.inputs) touched.push_back(v.buffer);
    for (const Value& v : n.outputs) touched.push_back(v.buffer);
    size_t target = 0;  // insert before this index
    for (size_t j = i; j-- > 0;) {
      bool depends = false;
      for (const Value& v : g.nodes[j].inputs) depends |= std::find(touched.begin(), touched.end(), v.buffer) != touched.end();
      for (const Value& v : g.nodes[j].outputs) depends |= std::find(touched.begin(), touched.end(), v.buffer) != touched.end();
      if (depends) {
        target = j + 1;
        break;
      }
    }
    if (target >= i) continue;
    Node node = std::move(g.nodes[i]);
    g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(i));
    g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(target), std::move(node));
    ++moved;
  }
  return moved ? std::to_string(moved) + " in-place updates moved up to right after their inputs are ready" : "";
}

const bool kRegistered = [] {
  register_pass("schedule_updates", schedule_updates);
  register_pass("fold_constants", fold_constants);
  register_pass("eliminate_dead", eliminate_dead);
  register_pass("conv_algo_search", set_conv_algo_search);
  return true;
}();

}  // namespace
}  // namespace plugflow::graph
