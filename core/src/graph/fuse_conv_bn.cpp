// fuse_conv_bn: batch norm fused with what surrounds it (ONNX Runtime's ConvBNFusion for
// inference; fused bn+relu kernels for training, as cuDNN's and oneDNN's).
//
// Inference graphs (no optimizer): conv2d -> batch_norm in eval mode (running statistics) folds
// into the convolution: w' = w * s, b' = (b - mean) * s + beta with s = gamma / sqrt(var + eps)
// per output channel. The folded weights depend on parameters and buffers that eager code may
// change between calls (an optimizer step, load_state_dict), so a `fold_conv_bn` node computes
// them into buffers the graph owns, marked `cached`: the plan runs it on the first call and
// again only when one of its inputs' storage versions changed. Guards: the sources are
// parameters/buffers (or constants) that no node of the graph writes, the convolution's output
// feeds only the batch norm, and the batch norm's statistics outputs are unused. Under bfloat16 amp
// the convolution reads autocast's bfloat16 copy of the weight (a `copy` node of the float32
// parameter, read by nothing else): the fold then computes from the float32 parameter, that
// copy casts the folded weight instead, and a new copy casts the folded bias, so the weights
// are rounded to bfloat16 once, after folding (the amp pass caches both casts with the fold).
//
// Training graphs: batch_norm -> relu becomes batch_norm_fused (activation relu), and
// batch_norm -> add(z) -> relu (ResNet's residual join) batch_norm_fused with the addend; both
// fused kernels compute exactly what the three ops did. The backward that matches, relu's
// relu_backward feeding batch_norm_backward, becomes batch_norm_relu_backward, which masks the
// gradient on the fly (and writes the masked gradient when the residual branch needs it too).
// Guards: each intermediate value has no other reader, the nodes moved past others commute with
// them (passes::commutes), the tensors are dense in the batch norm input's layout (row-major, or
// channels last: batch norm keeps a channels-last activation's layout; passes::laid_out_as), and
// the device has the fused kernels.
#include <algorithm>
#include <optional>

#include "pass_utils.h"

namespace plugflow::graph {
namespace {

using namespace passes;

bool is_parameter_like(const Graph& g, const Value& v) {
  const BufferKind k = g.buffers[v.buffer].kind;
  return (k == BufferKind::External || k == BufferKind::Constant) && g.writers(v.buffer).empty();
}

int new_external(Graph& g, Device device, size_t nbytes) {
  Buffer b;
  b.kind = BufferKind::External;
  b.device = device;
  b.nbytes = nbytes;
  b.storage = std::make_shared<Storage>(device, std::max<size_t>(nbytes, 1));
  g.buffers.push_back(std::move(b));
  return static_cast<int>(g.buffers.size()) - 1;
}

// The unused statistics outputs of a batch norm at `j`.
bool stats_unused(const Graph& g, int j) {
  const Node& bn = g.nodes[j];
  return !needed_after(g, bn.outputs[1].buffer, j) && !needed_after(g, bn.outputs[2].buffer, j);
}

// ---- inference: fold into the convolution -----------------------------------------------------

// The node that wrote the convolution weight `w` (read at `i`) as autocast's cast of a dense
// parameter-like tensor of the same shape (its only writer, and `i` its only reader), or -1.
// Only a bfloat16 cast: it has float32's range, where float16's could overflow on a folded
// weight that the batch norm scaled up (a tiny running variance).
int weight_cast(const Graph& g, const Value& w, int i) {
  if (w.dtype != DType::BFloat16 || g.buffers[w.buffer].kind != BufferKind::Temporary || !covers_buffer(g, w))
    return -1;
  const std::vector<int> writers = g.writers(w.buffer);
  if (writers.size() != 1 || writers[0] >= i || g.readers(w.buffer) != std::vector<int>{i}) return -1;
  const Node& cast = g.nodes[writers[0]];
  if (cast.kind != NodeKind::Kernel || cast.op->name != "copy" || cast.inputs.size() != 1 ||
      cast.outputs.size() != 1 || !same_elements(cast.outputs[0], w))
    return -1;
  const Value& source = cast.inputs[0];
  if (!is_dense(source) || source.sizes != w.sizes || !is_parameter_like(g, source)) return -1;
  return writers[0];
}

// Folds the batch norm reading conv `i`'s output into it; the number of nodes it put in front
// (the prologue computing the folded weights), 0 when the guards do not hold.
int fold_into_conv(Graph& g, int i, std::string& report) {
  const Node& conv = g.nodes[i];
  if (conv.kind != NodeKind::Kernel || conv.op->name != "conv2d") return false;
  const Value& y = conv.outputs[0];
  if (g.buffers[y.buffer].kind != BufferKind::Temporary) return false;
  const std::vector<int> readers = readers_after(g, y.buffer, i);
  if (readers.size() != 1) return false;
  const int j = readers[0];
  const Node& bn = g.nodes[j];
  if (bn.kind != NodeKind::Kernel || bn.op->name != "batch_norm" || bn.attrs.get<bool>("training") ||
      !same_data(bn.inputs[0], y) || needed_after(g, y.buffer, j) || !stats_unused(g, j))
    return 0;
  const std::optional<Value> out = laid_out_as(bn.outputs[0], y);
  if (!out) return 0;
  const bool has_bias = conv.inputs.size() > 2, has_gamma = bn.attrs.get<bool>("has_weight");
  const bool has_beta = bn.attrs.get<bool>("has_bias");
  // Autocast's weight cast: fold the float32 parameter (a cast bias as well is left alone).
  const int cast = is_parameter_like(g, conv.inputs[1]) || has_bias ? -1 : weight_cast(g, conv.inputs[1], i);
  const Value& w = cast >= 0 ? g.nodes[cast].inputs[0] : conv.inputs[1];
  Node fold;
  fold.op = &find_op("fold_conv_bn");
  fold.inputs.push_back(w);
  if (has_bias) fold.inputs.push_back(conv.inputs[2]);
  if (has_gamma) fold.inputs.push_back(bn.inputs[1]);
  if (has_beta) fold.inputs.push_back(bn.inputs[2]);
  fold.inputs.push_back(bn.inputs[3]);
  fold.inputs.push_back(bn.inputs[4]);
  for (const Value& v : fold.inputs)
    if (!is_parameter_like(g, v) || v.dtype != w.dtype) return 0;
  if (!is_dense(w) || !has_kernel(g, "fold_conv_bn", w)) return 0;
  const Device device = g.buffers[w.buffer].device;
  const int64_t o = w.sizes[0];
  Value w2{new_external(g, device, shape_numel(w.sizes) * itemsize(w.dtype)), w.sizes, contiguous_strides(w.sizes), 0,
           w.dtype};
  Value b2{new_external(g, device, o * itemsize(w.dtype)), {o}, {1}, 0, w.dtype};
  fold.attrs = Attrs{{"eps", bn.attrs.get<double>("eps")}, {"has_bias", has_bias}, {"has_bn_weight", has_gamma},
                     {"has_bn_bias", has_beta}};
  fold.outputs = {w2, b2};
  fold.cached = true;
  fold.scope = bn.scope;
  add_note(fold, "fuse_conv_bn: " + bn.scope + " folded into the weights of " + conv.scope +
                     "; recomputed when they change");
  check_node(g, fold);
  Node fused = conv;
  fused.inputs = {conv.inputs[0], w2, b2};
  std::optional<Node> bias_cast;
  if (cast >= 0) {  // the convolution reads the folded weight and bias in its own dtype
    const Value& low = conv.inputs[1];
    Value b2_low{new_temporary(g, device, o * itemsize(low.dtype)), {o}, {1}, 0, low.dtype};
    bias_cast = g.nodes[cast];
    bias_cast->inputs = {b2};
    bias_cast->outputs = {b2_low};
    add_note(*bias_cast, "fuse_conv_bn: casts the folded bias");
    g.nodes[cast].inputs = {w2};
    add_note(g.nodes[cast], "fuse_conv_bn: casts the folded weight");
    fused.inputs = {conv.inputs[0], low, b2_low};
  }
  fused.outputs = {*out};
  check_node(g, fused);
  add_note(fused, "fuse_conv_bn: batch norm folded in");
  report += std::string(report.empty() ? "" : "\n") + bn.scope + " folded into " + describe(g, i);
  g.nodes[i] = std::move(fused);
  erase_nodes(g, {j});
  // The prologue: the fold, and the bias cast after it (the weight cast, before the
  // convolution, already runs after the fold).
  if (bias_cast) g.nodes.insert(g.nodes.begin(), std::move(*bias_cast));
  g.nodes.insert(g.nodes.begin(), std::move(fold));
  return bias_cast ? 2 : 1;
}

// ---- training: batch norm + relu, batch norm + add + relu -------------------------------------

// The relu at `r` reads all of `v` (the value node `at` wrote) and nothing else reads it.
bool relu_of(const Graph& g, const Value& v, int at, int& r) {
  const std::vector<int> readers = readers_after(g, v.buffer, at);
  if (readers.size() != 1) return false;
  r = readers[0];
  const Node& n = g.nodes[r];
  if (activation_of(n) != "relu" || !same_data(n.inputs[0], v) || !laid_out_as(n.outputs[0], v)) return false;
  // Out of place, the input must die there; in place, the buffer then holds the relu's result.
  return n.outputs[0].buffer == v.buffer || !needed_after(g, v.buffer, r);
}

// The backward of the relu whose output is `out` (written at `at`): relu_backward(grad, out) ->
// masked gradient read by batch_norm_backward of the batch norm with statistics
// `mean`/`invstd`. Replaced by batch_norm_relu_backward in the slot of the relu_backward.
bool fuse_backward(Graph& g, const Value& out, int at, const Value& mean, const Value& invstd) {
  for (int w : readers_after(g, out.buffer, at)) {
    const Node& rb = g.nodes[w];
    if (rb.kind != NodeKind::Kernel || rb.op->name != "relu_backward" || !same_data(rb.inputs[1], out) ||
        rb.outputs[0].dtype != out.dtype)
      continue;
    const Value& masked = rb.outputs[0];
    int bb = -1;
    for (int k : readers_after(g, masked.buffer, w)) {
      const Node& n = g.nodes[k];
      if (n.kind == NodeKind::Kernel && n.op->name == "batch_norm_backward" && same_data(n.inputs[0], masked) &&
          same_elements(n.inputs[3], mean) && same_elements(n.inputs[4], invstd))
        bb = k;
    }
    if (bb < 0 || !has_kernel(g, "batch_norm_relu_backward", out)) continue;
    const Node& back = g.nodes[bb];
    // The masked gradient is still needed when another node reads it (the residual branch).
    bool others = false;
    for (int k : readers_after(g, masked.buffer, w)) others = others || k != bb;
    others = others || g.buffers[masked.buffer].kind != BufferKind::Temporary;
    for (const Value& v : g.outputs) others = others || v.buffer == masked.buffer;
    const Value& x = back.inputs[1];
    const std::optional<Value> grad = laid_out_as(rb.inputs[0], x), relu_out = laid_out_as(out, x),
                               grad_pre = laid_out_as(masked, x);
    if (!grad || !relu_out || !grad_pre) continue;
    Node fused;
    fused.op = &find_op("batch_norm_relu_backward");
    fused.inputs = {*grad, *relu_out, x, back.inputs[2], back.inputs[3], back.inputs[4]};
    fused.outputs = back.outputs;
    if (others) fused.outputs.push_back(*grad_pre);
    fused.attrs = Attrs{{"training", back.attrs.get<bool>("training")},
                        {"has_weight", back.attrs.get<bool>("has_weight")},
                        {"has_grad_pre", others}};
    fused.scope = back.scope;
    // It runs in the slot of the relu_backward (which wrote the masked gradient there already):
    // batch_norm_backward moves earlier.
    Node moved = fused;
    if (others) moved.outputs.pop_back();
    if (!commutes(g, moved, bb, w)) continue;
    check_node(g, fused);
    add_note(fused, "fuse_conv_bn: relu_backward fused into batch_norm_backward");
    g.nodes[w] = std::move(fused);
    erase_nodes(g, {bb});
    return true;
  }
  return false;
}

bool fuse_bn_relu(Graph& g, int j, std::string& report) {
  const Node& bn = g.nodes[j];
  if (bn.kind != NodeKind::Kernel || bn.op->name != "batch_norm" || !has_kernel(g, "batch_norm_fused", bn.inputs[0]))
    return false;
  const Value& y = bn.outputs[0];
  if (g.buffers[y.buffer].kind != BufferKind::Temporary) return false;
  int r = -1, a = -1;
  std::optional<Value> addend;
  // batch_norm -> relu, or batch_norm -> add(z) -> relu.
  if (!relu_of(g, y, j, r)) {
    const std::vector<int> readers = readers_after(g, y.buffer, j);
    if (readers.size() != 1) return false;
    a = readers[0];
    const Node& add = g.nodes[a];
    if (!is_plain_add(add) || !laid_out_as(add.outputs[0], y)) return false;
    const int mine = same_data(add.inputs[0], y) ? 0 : same_data(add.inputs[1], y) ? 1 : -1;
    if (mine < 0 || add.inputs[1 - mine].buffer == y.buffer) return false;
    if (add.outputs[0].buffer != y.buffer && needed_after(g, y.buffer, a)) return false;
    addend = laid_out_as(add.inputs[1 - mine], y);
    if (!addend || !relu_of(g, add.outputs[0], a, r)) return false;
  }
  const Node& relu = g.nodes[r];
  const std::optional<Value> relu_out = laid_out_as(relu.outputs[0], y);
  if (!relu_out) return false;
  Node fused = bn;
  fused.op = &find_op("batch_norm_fused");
  if (addend) fused.inputs.push_back(*addend);
  fused.outputs[0] = *relu_out;
  fused.attrs.set("activation", std::string("relu"));
  fused.attrs.set("has_addend", addend.has_value());
  // The fused node takes the slot of the add (where the addend is ready) or of the batch norm.
  const int slot = addend ? a : j;
  if (!commutes(g, bn, j, slot) || !commutes(g, relu, r, slot)) return false;
  check_node(g, fused);
  add_note(fused, addend ? "fuse_conv_bn: batch norm + add + relu" : "fuse_conv_bn: batch norm + relu");
  report += std::string(report.empty() ? "" : "\n") + bn.scope + (addend ? ": batch norm + add + relu" : ": batch norm + relu") +
            " fused";
  const Value out = relu.outputs[0], mean = bn.outputs[1], invstd = bn.outputs[2];
  std::vector<int> dead{j, r};
  if (addend) dead.push_back(a);
  dead.erase(std::find(dead.begin(), dead.end(), slot));
  g.nodes[slot] = std::move(fused);
  erase_nodes(g, dead);
  const int at = slot - static_cast<int>(std::count_if(dead.begin(), dead.end(), [&](int d) { return d < slot; }));
  if (fuse_backward(g, out, at, mean, invstd)) report += ", and its backward";
  return true;
}

std::string fuse_conv_bn(Graph& g, const PassOptions& options) {
  std::string report;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    if (!options.training) {
      i += fold_into_conv(g, i, report);  // the prologue went in front: the conv moved that far
    } else if (fuse_bn_relu(g, i, report)) {
      --i;  // look at the node that took slot i
    }
  }
  return report;
}

const bool kRegistered = [] {
  register_pass("fuse_conv_bn", fuse_conv_bn);
  return true;
}();

}  // namespace
}  // namespace plugflow::graph
