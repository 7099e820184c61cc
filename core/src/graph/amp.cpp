// The `amp` pass. Mixed precision itself comes from capture: nn.Graph runs build() under
// autocast when its config enables amp, so the graph holds exactly the casts and low-precision
// kernels eager autocast runs (docs/graph.md, "amp"). What this pass adds is for inference
// graphs: the nodes that read only parameters (and constants) -- autocast's weight casts, and
// what other passes compute from weights -- run once per parameter version instead of every
// call. Their outputs leave the arena for memory the plan keeps, and the plan skips them while
// none of their inputs' versions changed (an eager optimizer step or any in-place write to a
// parameter bumps its version, so the next call recomputes). Results are unchanged: the same
// kernels compute the same values, only not again.
#include <algorithm>

#include "plugflow/graph.h"

namespace plugflow::graph {
namespace {

std::string amp(Graph& g, const PassOptions& o) {
  if (o.amp == "off" || o.training) return "";
  std::vector<int> writers(g.buffers.size(), 0);
  for (const Node& n : g.nodes)
    for (const Value& v : n.outputs) ++writers[v.buffer];
  int cached = 0;
  for (Node& n : g.nodes) {
    if (n.kind != NodeKind::Kernel || n.rng != nullptr || !n.op->mutated_inputs.empty() || n.inputs.empty()) continue;
    const bool from_parameters = std::all_of(n.inputs.begin(), n.inputs.end(), [&](const Value& v) {
      const BufferKind k = g.buffers[v.buffer].kind;
      return k == BufferKind::External || k == BufferKind::Constant;
    });
    const bool private_outputs = std::all_of(n.outputs.begin(), n.outputs.end(), [&](const Value& v) {
      return g.buffers[v.buffer].kind == BufferKind::Temporary && writers[v.buffer] == 1;
    });
    if (!from_parameters || !private_outputs) continue;
    for (const Value& v : n.outputs) {
      Buffer& b = g.buffers[v.buffer];
      b.kind = BufferKind::External;  // later nodes reading only it and parameters qualify too
      b.storage = std::make_shared<Storage>(b.device, std::max<size_t>(b.nbytes, 1));
    }
    n.cached = true;
    n.note = "runs when its inputs change";
    ++cached;
  }
  return cached ? std::to_string(cached) + " nodes computed from parameters run once per parameter version" : "";
}

const bool kRegistered = [] {
  register_pass("amp", amp);
  return true;
}();

}  // namespace
}  // namespace plugflow::graph
