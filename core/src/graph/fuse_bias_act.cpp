// fuse_bias_act: a convolution or matrix product with the bias add and the activation that
// follow it as one fused op (conv2d_fused, mm_fused), which the device runs with the epilogue
// on the product while it is in registers (oneDNN's post-ops on the CPU).
//
// Patterns: conv2d(x, w[, b]) -> act, and mm(a, b) -> add(., bias) [-> act] or mm -> act, with
// act one of relu, gelu (erf or tanh) and silu. Linear records mm then an in-place add of its
// bias (addmm), or matmul's mm then add for batched inputs; the bias is a vector of the
// product's columns (broadcast over the rows).
//
// Guards: each value of the chain has exactly one reader, the next op of the chain, and is not
// needed later (a graph output, a buffer outliving the call) unless the next op writes it in
// place; all of one dtype, dense; the fused node runs in the slot of the chain's last op, so no
// other node in between may write the product's operands or touch what the fused node writes
// (passes::commutes); a kernel for the fused op exists on the device. The backward of a training graph must still find what it
// reads: relu's backward reads the activation's output, which the fused op writes; gelu's and
// silu's read the activation's input: mm_fused then writes that value too (save_pre), and a
// convolution keeps its activation (as whenever something else reads the value before it).
#include <optional>

#include "pass_utils.h"

namespace plugflow::graph {
namespace {

using namespace passes;

// `v` as a bias of `n` columns: n elements along the last dimension, broadcast (stride 0) over
// the others.
std::optional<Value> as_bias(const Value& v, int64_t n) {
  if (v.sizes.empty() || v.sizes.back() != n || (n > 1 && v.strides.back() != 1)) return std::nullopt;
  for (size_t d = 0; d + 1 < v.sizes.size(); ++d)
    if (v.sizes[d] != 1 && v.strides[d] != 0) return std::nullopt;
  return Value{v.buffer, {n}, {1}, v.offset, v.dtype};
}

void append(std::string& report, const std::string& line) { report += (report.empty() ? "" : "\n") + line; }

// Replaces the chain `nodes` (in order) by `fused` in the slot of the last one, if that commutes.
bool replace_chain(Graph& g, Node fused, const std::vector<int>& nodes, const std::string& note) {
  const int first = nodes.front(), last = nodes.back();
  if (!commutes(g, fused, last, first, nodes)) return false;
  check_node(g, fused);
  add_note(fused, note);
  g.nodes[last] = std::move(fused);
  erase_nodes(g, std::vector<int>(nodes.begin(), nodes.end() - 1));
  return true;
}

bool fuse_conv(Graph& g, int i, std::string& report) {
  const Node& conv = g.nodes[i];
  if (conv.kind != NodeKind::Kernel || conv.op->name != "conv2d") return false;
  const Value& y = conv.outputs[0];
  if ((!is_dense(y) && !channels_last(y)) || !has_kernel(g, "conv2d_fused", y)) return false;
  const std::optional<ActivationMatch> act = activation_after(g, y, i);
  if (!act || act->input_needed) return false;  // conv2d_fused has no pre-activation output
  Node fused = conv;
  fused.op = &find_op("conv2d_fused");
  fused.attrs.set("has_bias", conv.inputs.size() > 2);
  fused.attrs.set("has_addend", false);
  fused.attrs.set("activation", act->activation);
  fused.outputs = {*laid_out_as(g.nodes[act->node].outputs[0], y)};  // activation_after checked it
  const std::string what = act->activation + " fused into " + describe(g, i);
  if (!replace_chain(g, std::move(fused), {i, act->node}, "fuse_bias_act: " + act->activation)) return false;
  append(report, what);
  return true;
}

bool fuse_mm(Graph& g, int i, std::string& report) {
  const Node& mm = g.nodes[i];
  if (mm.kind != NodeKind::Kernel || mm.op->name != "mm") return false;
  const Value& p = mm.outputs[0];
  if (!is_dense(p) || !has_kernel(g, "mm_fused", p)) return false;
  std::vector<int> chain{i};
  std::optional<Value> bias;
  Value pre = p;  // the value the activation reads
  const std::vector<int> readers = readers_after(g, p.buffer, i);
  if (readers.size() == 1 && is_plain_add(g.nodes[readers[0]])) {
    const int a = readers[0];
    const Node& add = g.nodes[a];
    const int mine = same_elements(add.inputs[0], p) ? 0 : same_elements(add.inputs[1], p) ? 1 : -1;
    const Value& out = add.outputs[0];
    // (matmul of a batch: the add sees the product as (B, T, N), the same elements)
    if (mine >= 0 && add.inputs[1 - mine].buffer != p.buffer && add.inputs[1 - mine].dtype == p.dtype &&
        out.dtype == p.dtype && shape_numel(out.sizes) == shape_numel(p.sizes) && is_dense(out) &&
        (out.buffer == p.buffer ? same_elements(out, p) : !needed_after(g, p.buffer, a)))
      bias = as_bias(add.inputs[1 - mine], p.sizes[1]);
    if (bias) {
      chain.push_back(a);
      pre = reshaped(out, p.sizes);
    }
  }
  const std::optional<ActivationMatch> act = activation_after(g, pre, chain.back());
  if (!bias && !act) return false;
  // The pre-activation value still read later (gelu's and silu's backward): written too.
  const bool save_pre = act && act->input_needed;
  Node fused;
  fused.op = &find_op("mm_fused");
  fused.inputs = {mm.inputs[0], mm.inputs[1]};
  if (bias) fused.inputs.push_back(*bias);
  fused.attrs = Attrs{{"has_bias", bias.has_value()},
                      {"has_addend", false},
                      {"activation", act ? act->activation : std::string("none")},
                      {"save_pre", save_pre}};
  fused.scope = mm.scope;
  if (act) {
    chain.push_back(act->node);
    fused.outputs = {reshaped(g.nodes[act->node].outputs[0], p.sizes)};
    if (save_pre) fused.outputs.push_back(pre);
  } else {
    fused.outputs = {pre};
  }
  std::string what = std::string(bias ? "bias" : "") + (bias && act ? " + " : "") + (act ? act->activation : "");
  const std::string line = what + " fused into " + describe(g, i) + (save_pre ? " (keeping the pre-activation)" : "");
  if (!replace_chain(g, std::move(fused), chain, "fuse_bias_act: " + what)) return false;
  append(report, line);
  return true;
}

std::string fuse_bias_act(Graph& g, const PassOptions&) {
  std::string report;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (fuse_conv(g, i, report) || fuse_mm(g, i, report)) --i;  // slot i now holds the next node
  return report;
}

const bool kRegistered = [] {
  register_pass("fuse_bias_act", fuse_bias_act);
  return true;
}();

}  // namespace
}  // namespace plugflow::graph
