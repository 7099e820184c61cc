// blocked_layout: float32 image activations that flow only between convolutions, batch norms and
// elementwise ops stay in the channel-blocked layout oneDNN's convolutions compute in (nChw16c:
// KernelContext::blocked_input), so the convolutions read and write them without reordering
// to and from row-major on every call (docs/graph.md, "Channel-blocked activations").
//
// A blocked buffer holds the same number of bytes as its row-major twin: only the order of its
// elements changes, so the memory plan and in-place reuse are untouched. What makes it safe is
// that every op touching the buffer knows the order:
//   - conv2d / conv2d_fused (image in; output and addend), conv2d_grad_input (gradient in;
//     gradient out), conv2d_grad_weight (gradient and image in) read the `blocked_inputs` /
//     `blocked_outputs` attributes; their weights, biases and weight gradients stay row-major;
//   - batch_norm, batch_norm_fused, batch_norm_backward, batch_norm_relu_backward read them too,
//     with all their image operands in one layout;
//   - unary and binary elementwise ops need no attribute: operands of one shape, dense, in one
//     layout are the same elements in the same places (a broadcast scalar operand may join).
// The convolution and batch norm nodes must run on a kernel of the built-in CPU plugin (the one
// that reads the attributes); an op bound to another provider keeps its operands row-major.
//
// The rule is a union of buffers: each op joins the image operands that must share a layout
// (a convolution's input side and output side are separate: it converts between them). A group
// is blocked when every buffer in it is a temporary that every node views as one dense float32
// (N, C, H, W) tensor with C a multiple of 16, every node touching it is one of the ops above,
// and a convolution reads or writes it (else nothing would be saved). Graph inputs and outputs,
// parameters, views with another shape (a flatten), and anything read by another op keep
// row-major, so nothing outside the graph ever sees a blocked buffer.
#include <numeric>

#include "../ops/op_tables.h"
#include "pass_utils.h"
#include "plugflow/dispatch.h"
#include "plugflow/kernel.h"

namespace plugflow::graph {
namespace {

constexpr int64_t kBlock = KernelContext::kChannelBlock;

struct UnionFind {
  std::vector<int> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void join(int a, int b) { parent[find(a)] = find(b); }
};

// A value a blocked buffer could hold: dense row-major float32 (N, C, H, W), C a multiple of 16,
// covering its whole buffer.
bool blockable_view(const Graph& g, const Value& v) {
  return v.dtype == DType::Float32 && v.sizes.size() == 4 && v.sizes[1] % kBlock == 0 && v.sizes[0] > 0 &&
         v.sizes[2] > 0 && v.sizes[3] > 0 && passes::covers_buffer(g, v);
}

bool is_conv(const Node& n) {
  const std::string& name = n.op->name;
  return name == "conv2d" || name == "conv2d_fused" || name == "conv2d_grad_input" || name == "conv2d_grad_weight";
}

bool is_batch_norm(const Node& n) {
  const std::string& name = n.op->name;
  return name == "batch_norm" || name == "batch_norm_fused" || name == "batch_norm_backward" ||
         name == "batch_norm_relu_backward";
}

bool has_true(const Node& n, const char* attr) { return n.attrs.has(attr) && n.attrs.get<bool>(attr); }

// One operand of a node: input (false) or output (true), and its index.
struct Operand {
  bool output;
  size_t index;
};

// The image operands of a convolution or batch norm, in groups that share a layout.
std::vector<std::vector<Operand>> layout_groups(const Node& n) {
  const std::string& name = n.op->name;
  const size_t last_input = n.inputs.size() - 1;
  if (name == "conv2d" || name == "conv2d_fused") {
    std::vector<Operand> out{{true, 0}};
    if (has_true(n, "has_addend")) out.push_back({false, last_input});
    return {{{false, 0}}, out};
  }
  if (name == "conv2d_grad_input") return {{{false, 0}}, {{true, 0}}};
  if (name == "conv2d_grad_weight") return {{{false, 0}}, {{false, 1}}};
  if (name == "batch_norm" || name == "batch_norm_fused") {
    std::vector<Operand> g{{false, 0}, {true, 0}};
    if (has_true(n, "has_addend")) g.push_back({false, last_input});
    return {g};
  }
  if (name == "batch_norm_backward") return {{{false, 0}, {false, 1}, {true, 0}}};
  // batch_norm_relu_backward(grad, out, x, ...) -> grad_x, grad_weight, grad_bias (, grad_pre)
  std::vector<Operand> g{{false, 0}, {false, 1}, {false, 2}, {true, 0}};
  if (has_true(n, "has_grad_pre")) g.push_back({true, 3});
  return {g};
}

bool elementwise(const Node& n) {
  return plugflow::internal::find_unary(n.op->name) != nullptr || plugflow::internal::find_binary(n.op->name) != nullptr;
}

bool broadcast_scalar(const Value& v) {
  for (int64_t s : v.strides)
    if (s != 0) return false;
  return true;
}

// The buffer's canonical (N, C, H, W) seen as (N, C/16, 16, H, W): row-major, or over the
// channel-blocked order. A copy between the two converts a buffer (the copy kernel's strided loop).
Value five_d(const Value& canonical, int buffer, bool blocked) {
  const Shape& s = canonical.sizes;
  const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  Value v;
  v.buffer = buffer;
  v.dtype = canonical.dtype;
  v.sizes = {n, c / kBlock, kBlock, h, w};
  v.strides = blocked ? Shape{c * h * w, kBlock * h * w, 1, w * kBlock, kBlock} : Shape{c * h * w, kBlock * h * w, h * w, w, 1};
  return v;
}

std::string blocked_layout(Graph& g, const PassOptions&) {
  const size_t nb = g.buffers.size();
  // Per buffer: can it be blocked at all; its canonical view; uses by convolutions (the reorders a
  // blocked buffer saves) and by other ops (each costs a conversion).
  std::vector<bool> eligible(nb, true);
  std::vector<const Value*> canonical(nb, nullptr);
  std::vector<int> conv_uses(nb, 0), foreign_uses(nb, 0);
  UnionFind groups(nb);
  for (size_t b = 0; b < nb; ++b)
    if (g.buffers[b].kind != BufferKind::Temporary || !g.buffers[b].device.is_cpu()) eligible[b] = false;
  // A use by an op that reads the layout (or an elementwise op): the full (N, C, H, W) view.
  auto layout_use = [&](const Value& v) {
    if (!blockable_view(g, v)) {
      eligible[v.buffer] = false;
      return;
    }
    const Value*& first = canonical[v.buffer];
    if (first == nullptr) first = &v;
    else if (first->sizes != v.sizes) eligible[v.buffer] = false;
  };
  // A use by any other op: a read is converted to row-major before it, a write of the whole
  // buffer converted back after it; a partial write, or one that also reads, cannot be.
  auto foreign_use = [&](const Node& n, const Value& v, bool write) {
    ++foreign_uses[v.buffer];
    if (!write) return;
    bool also_read = false;
    for (const Value& in : n.inputs) also_read |= in.buffer == v.buffer;
    if (also_read || !passes::covers_buffer(g, v)) eligible[v.buffer] = false;
  };
  auto foreign_node = [&](const Node& n) {
    for (const Value& v : n.inputs) foreign_use(n, v, false);
    for (const Value& v : n.outputs) foreign_use(n, v, true);
    if (n.kind == NodeKind::Kernel)
      for (int i : n.op->mutated_inputs) eligible[n.inputs[i].buffer] = false;
  };

  std::vector<std::vector<bool>> image_inputs(g.nodes.size()), image_outputs(g.nodes.size());
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    std::vector<bool>& image_in = image_inputs[ni];
    std::vector<bool>& image_out = image_outputs[ni];
    image_in.assign(n.inputs.size(), false);
    image_out.assign(n.outputs.size(), false);
    if (n.kind != NodeKind::Kernel) {
      foreign_node(n);
      continue;
    }
    if (is_conv(n) || is_batch_norm(n)) {
      // Only the built-in CPU plugin's kernels read the layout attributes.
      if (chosen_provider(*n.op, DeviceType::CPU, DType::Float32) != "cpu" || n.inputs[0].dtype != DType::Float32) {
        foreign_node(n);
        continue;
      }
      for (const auto& group : layout_groups(n)) {
        const Operand& head = group.front();
        const int hb = (head.output ? n.outputs : n.inputs)[head.index].buffer;
        for (const Operand& o : group) {
          const Value& v = (o.output ? n.outputs : n.inputs)[o.index];
          (o.output ? image_out : image_in)[o.index] = true;
          layout_use(v);
          groups.join(v.buffer, hb);
          if (is_conv(n)) ++conv_uses[v.buffer];
        }
      }
      // Weights, biases, statistics: row-major.
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (!image_in[i]) foreign_use(n, n.inputs[i], false);
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (!image_out[i]) foreign_use(n, n.outputs[i], true);
      for (int i : n.op->mutated_inputs)
        if (!image_in[i]) eligible[n.inputs[i].buffer] = false;
      continue;
    }
    if (elementwise(n) && n.outputs.size() == 1 && n.op->mutated_inputs.empty()) {
      const Value& out = n.outputs[0];
      bool uniform = out.dtype == DType::Float32;  // every operand: out's shape and dtype, or a broadcast scalar
      for (const Value& v : n.inputs) uniform &= (v.sizes == out.sizes && v.dtype == out.dtype) || broadcast_scalar(v);
      if (uniform) {
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          const Value& v = n.inputs[i];
          if (broadcast_scalar(v)) {
            foreign_use(n, v, false);  // one value read everywhere: the same in any order
            continue;
          }
          image_in[i] = true;
          layout_use(v);
          groups.join(v.buffer, out.buffer);
        }
        image_out[0] = true;
        layout_use(out);
        continue;
      }
    }
    foreign_node(n);
  }

  // A group is blocked when every buffer in it can be, and convolutions use it more often than
  // other ops (each of which costs a conversion about as dear as the reorder a convolution saves).
  std::vector<bool> group_ok(nb, true);
  std::vector<int> group_conv(nb, 0), group_foreign(nb, 0);
  for (size_t b = 0; b < nb; ++b) {
    const int r = groups.find(static_cast<int>(b));
    group_ok[r] = group_ok[r] && eligible[b] && canonical[b] != nullptr;
    group_conv[r] += conv_uses[b];
    group_foreign[r] += foreign_uses[b];
  }
  std::vector<bool> blocked(nb, false);
  std::vector<Value> canon(nb);
  size_t buffers = 0, bytes = 0;
  for (size_t b = 0; b < nb; ++b) {
    const int r = groups.find(static_cast<int>(b));
    if (canonical[b] != nullptr && group_ok[r] && group_conv[r] > group_foreign[r]) {
      blocked[b] = true;
      canon[b] = *canonical[b];
      ++buffers;
      bytes += g.buffers[b].nbytes;
    }
  }
  if (buffers == 0) return "";

  // Rewrite: layout attributes on the convolutions and batch norms; conversions around the
  // other ops' uses of blocked buffers.
  int attributed = 0, conversions = 0;
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  std::vector<int> row_major_copy(nb, -1);  // a blocked buffer's converted copy, while current
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    Node n = std::move(g.nodes[ni]);
    if (n.kind == NodeKind::Kernel && (is_conv(n) || is_batch_norm(n))) {
      Shape in, out;
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (image_inputs[ni][i] && blocked[n.inputs[i].buffer]) in.push_back(static_cast<int64_t>(i));
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (image_outputs[ni][i] && blocked[n.outputs[i].buffer]) out.push_back(static_cast<int64_t>(i));
      if (!in.empty()) n.attrs.set("blocked_inputs", in);
      if (!out.empty()) n.attrs.set("blocked_outputs", out);
      if (!in.empty() || !out.empty()) {
        passes::add_note(n, "blocked_layout: nChw16c operands");
        ++attributed;
      }
    }
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      Value& v = n.inputs[i];
      if (static_cast<size_t>(v.buffer) >= nb || !blocked[v.buffer] || image_inputs[ni][i]) continue;
      int& copy = row_major_copy[v.buffer];
      if (copy < 0) {
        copy = passes::new_temporary(g, g.buffers[v.buffer].device, g.buffers[v.buffer].nbytes);
        Node convert;
        convert.op = &find_op("copy");
        convert.inputs = {five_d(canon[v.buffer], v.buffer, true)};
        convert.outputs = {five_d(canon[v.buffer], copy, false)};
        convert.scope = n.scope;
        convert.note = "blocked_layout: nChw16c to row-major for " + node_name(n);
        nodes.push_back(std::move(convert));
        ++conversions;
      }
      v.buffer = copy;
    }
    std::vector<Node> after;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      Value& v = n.outputs[i];
      if (!blocked[v.buffer] || image_outputs[ni][i]) continue;
      const int target = v.buffer;
      v.buffer = passes::new_temporary(g, g.buffers[target].device, g.buffers[target].nbytes);
      Node convert;
      convert.op = &find_op("copy");
      convert.inputs = {five_d(canon[target], v.buffer, false)};
      convert.outputs = {five_d(canon[target], target, true)};
      convert.scope = n.scope;
      convert.note = "blocked_layout: row-major to nChw16c";
      after.push_back(std::move(convert));
      ++conversions;
    }
    // A write invalidates the converted copy of what it overwrites (new buffers are never blocked).
    auto written = [&](const Value& v) {
      if (static_cast<size_t>(v.buffer) < nb) row_major_copy[v.buffer] = -1;
    };
    for (const Value& v : n.outputs) written(v);
    if (n.kind == NodeKind::Kernel)
      for (int i : n.op->mutated_inputs) written(n.inputs[i]);
    for (const Node& c : after) written(c.outputs[0]);
    nodes.push_back(std::move(n));
    for (Node& c : after) nodes.push_back(std::move(c));
  }
  g.nodes = std::move(nodes);
  return std::to_string(buffers) + " activations (" + std::to_string(bytes >> 20) + " MiB) kept channel-blocked "
         "(nChw16c) across " + std::to_string(attributed) + " convolutions and batch norms, " +
         std::to_string(conversions) + " conversions for other ops";
}

const bool kRegistered = [] {
  register_pass("blocked_layout", blocked_layout);
  return true;
}();

}  // namespace
}  // namespace plugflow::graph
