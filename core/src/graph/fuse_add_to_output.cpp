// fuse_add_to_output: a residual add folded into the convolution or matrix product that
// produces one of its operands (ONNX Runtime's Conv+Add fusion, oneDNN's sum post-op): the
// fused op starts from the other operand in its output and accumulates the product into it,
// out = act(product + bias + addend), so the product is never written alone and read back.
//
// Patterns: add(P, Z) or add(Z, P) with P the output of conv2d (any groups: grouped and
// depthwise too), mm, or an mm_fused without activation (fuse_bias_act's bias), optionally
// followed by an activation that joins the epilogue (ResNet's relu after the join).
//
// Guards (ONNX Runtime's): the add has alpha 1, P has no reader but the add and dies there,
// Z has P's shape and dtype and is a different buffer, dense, and the add's output too; the
// fused node runs in the slot of the add (or of the activation), so Z is the value the add read,
// and no node in between may write the product's operands or touch what the fused node writes
// (passes::commutes). The fused kernel copies Z into its output first unless the output is
// Z itself, so Z read later (the residual kept for another block, an in-place add into Z) sees
// what it saw before. The activation joins under fuse_bias_act's rule: no later reader of the
// sum before it (relu's backward reads its output; gelu's and silu's read the sum, which
// mm_fused then writes too, and a convolution keeps its activation).
#include <optional>

#include "pass_utils.h"

namespace plugflow::graph {
namespace {

using namespace passes;

// The producer at `i`, as its fused op: conv2d / mm / mm_fused with activation none.
std::optional<Node> as_fused(const Node& n) {
  if (n.kind != NodeKind::Kernel) return std::nullopt;
  Node fused = n;
  fused.note.clear();
  if (n.op->name == "conv2d") {
    fused.op = &find_op("conv2d_fused");
    fused.attrs.set("has_bias", n.inputs.size() > 2);
  } else if (n.op->name == "mm") {
    fused.op = &find_op("mm_fused");
    fused.attrs = Attrs{{"has_bias", false}, {"save_pre", false}};
  } else if (n.op->name == "mm_fused" && n.attrs.get<std::string>("activation") == "none" &&
             !n.attrs.get<bool>("has_addend")) {
    fused.note = n.note;
  } else {
    return std::nullopt;
  }
  fused.attrs.set("has_addend", true);
  fused.attrs.set("activation", std::string("none"));
  return fused;
}

bool fuse_add(Graph& g, int i, std::string& report) {
  std::optional<Node> fused = as_fused(g.nodes[i]);
  if (!fused) return false;
  const Value& p = g.nodes[i].outputs[0];
  if ((!is_dense(p) && !channels_last(p)) || !has_kernel(g, fused->op->name, p)) return false;
  const std::vector<int> readers = readers_after(g, p.buffer, i);
  if (readers.size() != 1 || !is_plain_add(g.nodes[readers[0]])) return false;
  const int a = readers[0];
  const Node& add = g.nodes[a];
  const int mine = same_data(add.inputs[0], p) ? 0 : same_data(add.inputs[1], p) ? 1 : -1;
  if (mine < 0) return false;
  // Shapes may differ where the elements agree (a matmul of a batch: the add sees (B, T, N)).
  const Value& z = add.inputs[1 - mine];
  const Value& out = add.outputs[0];
  const std::optional<Value> addend = laid_out_as(z, p), sum = laid_out_as(out, p);
  if (z.buffer == p.buffer || z.sizes != add.inputs[mine].sizes || z.dtype != p.dtype || !addend || !sum ||
      out.dtype != p.dtype)
    return false;
  // The sum lands where the add wrote it: over P (P dies there), over Z (exactly Z's elements:
  // the kernel then accumulates in place) or in its own buffer (P must die at the add).
  if (out.buffer == p.buffer ? !same_data(out, p)
                             : needed_after(g, p.buffer, a) || (out.buffer == z.buffer && !same_data(out, z)))
    return false;
  fused->inputs.push_back(*addend);
  fused->outputs = {*sum};
  std::vector<int> chain{i, a};
  std::string what = "residual add";
  const std::optional<ActivationMatch> act = activation_after(g, out, a);
  const bool mm = fused->op->name == "mm_fused";
  if (act && out.buffer != z.buffer && (!act->input_needed || mm)) {
    fused->attrs.set("activation", act->activation);
    if (mm) fused->attrs.set("save_pre", act->input_needed);
    fused->outputs = {*laid_out_as(g.nodes[act->node].outputs[0], p)};  // activation_after checked it
    if (mm && act->input_needed) fused->outputs.push_back(*sum);
    chain.push_back(act->node);
    what += " + " + act->activation;
  }
  if (!commutes(g, *fused, chain.back(), i, chain)) return false;
  check_node(g, *fused);
  add_note(*fused, "fuse_add_to_output: " + what);
  report += (report.empty() ? "" : "\n") + what + " fused into " + describe(g, i);
  g.nodes[chain.back()] = std::move(*fused);
  erase_nodes(g, std::vector<int>(chain.begin(), chain.end() - 1));
  return true;
}

std::string fuse_add_to_output(Graph& g, const PassOptions&) {
  std::string report;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (fuse_add(g, i, report)) --i;  // slot i now holds the next node
  return report;
}

const bool kRegistered = [] {
  register_pass("fuse_add_to_output", fuse_add_to_output);
  return true;
}();

}  // namespace
}  // namespace plugflow::graph
