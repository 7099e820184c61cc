// fuse_pad_conv: a constant-zero F.pad whose only consumers are convolutions folds into their
// padding (ONNX Runtime's PadFusion, for plugflow's IR).
//
// F.pad(x, (l, r, t, b)) in constant mode is composed, not a kernel: `fill` of the padded
// buffer P with the value, then `copy` of x into P's interior view. The convolutions read all of
// P (conv2d's input; in training conv2d_grad_weight's input too). With the value 0, no padding
// of N and C, symmetric spatial padding (t = b, l = r: conv2d's padding is symmetric) and no
// other reader of P, each of them reads x directly with its padding grown by (t, l), and the
// fill and copy disappear. In training the pad's backward, a crop `copy` of the padded input
// gradient that a conv2d_grad_input produced, becomes that conv2d_grad_input with the same
// grown padding and x's size. Not fused: reflect/replicate/circular pads (the `pad` kernel),
// any other value, negative pads (crops), and a P that anything else reads (an avg_pool with
// count_include_pad, a residual add, a graph output).
#include <algorithm>
#include <optional>

#include "pass_utils.h"

namespace plugflow::graph {
namespace {

using namespace passes;

struct PadMatch {
  int fill, copy;  // the two writers of P
  Value source;    // x
  int64_t top, left;
  std::vector<int> convs;  // readers of P
};

Shape grown(const Shape& padding, int64_t top, int64_t left) { return {padding[0] + top, padding[1] + left}; }

// The pad whose fill is node `i`, when every guard holds.
std::optional<PadMatch> match_pad(const Graph& g, int i) {
  const Node& fill = g.nodes[i];
  if (fill.kind != NodeKind::Kernel || fill.op->name != "fill" || fill.outputs.size() != 1) return std::nullopt;
  const Value& padded = fill.outputs[0];
  const int p = padded.buffer;
  if (g.buffers[p].kind != BufferKind::Temporary || padded.sizes.size() != 4 || !covers_buffer(g, padded))
    return std::nullopt;
  const Scalar& value = fill.attrs.get<Scalar>("value");
  if (!(value.is_floating() ? value.to_double() == 0.0 : value.to_int() == 0)) return std::nullopt;
  // Exactly one more writer: the copy of x into the interior.
  std::vector<int> writers = g.writers(p);
  if (writers.size() != 2 || writers[0] != i) return std::nullopt;
  const int c = writers[1];
  const Node& copy = g.nodes[c];
  if (copy.kind != NodeKind::Kernel || copy.op->name != "copy" || reads(copy, p)) return std::nullopt;
  const Value& interior = copy.outputs[0];
  const Value& source = copy.inputs[0];
  if (source.dtype != padded.dtype || interior.strides != padded.strides || interior.sizes.size() != 4) return std::nullopt;
  const Shape &outer = padded.sizes, &inner = interior.sizes;
  if (inner[0] != outer[0] || inner[1] != outer[1] || interior.offset >= outer[2] * outer[3]) return std::nullopt;
  const int64_t top = interior.offset / outer[3], left = interior.offset % outer[3];
  const int64_t bottom = outer[2] - inner[2] - top, right = outer[3] - inner[3] - left;
  if (bottom != top || right != left) return std::nullopt;  // conv2d pads symmetrically
  // Every reader of P (after the copy) is a convolution reading all of it.
  PadMatch m{i, c, source, top, left, {}};
  for (int r : g.readers(p)) {
    const Node& n = g.nodes[r];
    if (r < c || n.kind != NodeKind::Kernel) return std::nullopt;
    const bool as_image = (n.op->name == "conv2d" && n.inputs[0].buffer == p) ||
                          (n.op->name == "conv2d_grad_weight" && n.inputs[1].buffer == p);
    int uses = 0;
    for (const Value& v : n.inputs) uses += v.buffer == p;
    const Value& read = n.op->name == "conv2d" ? n.inputs[0] : n.inputs[1];
    if (!as_image || uses != 1 || read.sizes != padded.sizes || read.strides != padded.strides || read.offset != 0)
      return std::nullopt;
    m.convs.push_back(r);
  }
  if (m.convs.empty()) return std::nullopt;
  // The convolutions now read x where they are, so x must still hold the copied values there.
  if (!unwritten_between(g, source.buffer, c, m.convs.back() + 1)) return std::nullopt;
  for (const Value& v : g.outputs)
    if (v.buffer == p) return std::nullopt;
  return m;
}

// The pad's backward: crop copies of P's gradient, each of the whole gradient that a
// conv2d_grad_input of one of the fused convolutions' weights produced and nothing else reads.
int fold_crop(Graph& g, const PadMatch& m, const Value& padded, const std::vector<int>& weights) {
  int folded = 0;
  std::vector<int> dead;
  for (int c = 0; c < static_cast<int>(g.nodes.size()); ++c) {
    const Node& crop = g.nodes[c];
    if (crop.kind != NodeKind::Kernel || crop.op->name != "copy") continue;
    const Value& in = crop.inputs[0];
    const Value& out = crop.outputs[0];
    if (in.sizes != m.source.sizes || in.strides != padded.strides || in.offset != m.top * padded.sizes[3] + m.left ||
        in.dtype != padded.dtype || out.dtype != in.dtype || !is_dense(out))
      continue;
    const int k = last_writer(g, in.buffer, c);
    if (k < 0) continue;
    Node& grad = g.nodes[k];
    if (grad.kind != NodeKind::Kernel || grad.op->name != "conv2d_grad_input" || g.writers(in.buffer).size() != 1 ||
        grad.outputs[0].sizes != padded.sizes || !covers_buffer(g, grad.outputs[0]) ||
        std::find(weights.begin(), weights.end(), grad.inputs[1].buffer) == weights.end())
      continue;
    const std::vector<int> readers = readers_after(g, in.buffer, k);
    if (readers != std::vector<int>{c} || needed_after(g, in.buffer, c)) continue;
    // grad_input now writes the crop's destination earlier: nothing in between may touch it.
    bool touched = false;
    for (int j = k + 1; j < c; ++j) touched = touched || reads(g.nodes[j], out.buffer) || writes(g.nodes[j], out.buffer);
    if (touched) continue;
    Node fused = grad;
    fused.attrs.set("padding", grown(grad.attrs.get<Shape>("padding"), m.top, m.left));
    fused.attrs.set("input_size", Shape{m.source.sizes[2], m.source.sizes[3]});
    fused.outputs[0] = out;
    check_node(g, fused);
    add_note(fused, "fuse_pad_conv: writes the unpadded gradient (the pad's crop folded in)");
    grad = std::move(fused);
    dead.push_back(c);
    ++folded;
  }
  erase_nodes(g, dead);
  return folded;
}

std::string fuse_pad_conv(Graph& g, const PassOptions&) {
  std::string report;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const auto m = match_pad(g, i);
    if (!m) continue;
    const Value padded = g.nodes[i].outputs[0];
    std::vector<int> weights;
    const std::string pad = "[" + std::to_string(m->top) + ", " + std::to_string(m->left) + "]";
    for (int r : m->convs) {
      Node& n = g.nodes[r];
      if (n.op->name == "conv2d") weights.push_back(n.inputs[1].buffer);
      Node fused = n;
      (n.op->name == "conv2d" ? fused.inputs[0] : fused.inputs[1]) = m->source;
      fused.attrs.set("padding", grown(n.attrs.get<Shape>("padding"), m->top, m->left));
      check_node(g, fused);
      add_note(fused, "fuse_pad_conv: zero pad " + pad + " folded into the padding");
      n = std::move(fused);
    }
    report += std::string(report.empty() ? "" : "\n") + "zero pad " + pad + " of " + describe(g, m->copy) + " folded into " + std::to_string(m->convs.size()) +
              " convolution(s)";
    erase_nodes(g, {m->fill, m->copy});
    const int crops = fold_crop(g, *m, padded, weights);
    if (crops) report += ", and " + std::to_string(crops) + " backward crop(s) into conv2d_grad_input";
    --i;  // the fill at i is gone: look at the node that took its place
  }
  return report;
}

const bool kRegistered = [] {
  register_pass("fuse_pad_conv", fuse_pad_conv);
  return true;
}();

}  // namespace
}  // namespace plugflow::graph
