#include "pass_utils.h"

#include <algorithm>

#include "plugflow/dispatch.h"

namespace plugflow::graph::passes {

bool writes(const Node& n, int b) {
  for (const Value& v : n.outputs)
    if (v.buffer == b) return true;
  if (n.kind == NodeKind::Kernel)
    for (int i : n.op->mutated_inputs)
      if (n.inputs.at(i).buffer == b) return true;
  return false;
}

bool reads(const Node& n, int b) {
  for (const Value& v : n.inputs)
    if (v.buffer == b) return true;
  return false;
}

int last_writer(const Graph& g, int b, int at) {
  for (int i = at - 1; i >= 0; --i)
    if (writes(g.nodes[i], b)) return i;
  return -1;
}

std::vector<int> readers_after(const Graph& g, int b, int at) {
  std::vector<int> out;
  for (int i = at + 1; i < static_cast<int>(g.nodes.size()); ++i) {
    if (reads(g.nodes[i], b)) out.push_back(i);
    if (writes(g.nodes[i], b)) break;
  }
  return out;
}

bool needed_after(const Graph& g, int b, int at) {
  if (g.buffers[b].kind != BufferKind::Temporary) return true;
  for (const Value& v : g.outputs)
    if (v.buffer == b) return true;
  for (int i = at + 1; i < static_cast<int>(g.nodes.size()); ++i)
    if (reads(g.nodes[i], b)) return true;
  return false;
}

bool unwritten_between(const Graph& g, int b, int from, int to) {
  for (int i = from + 1; i < to; ++i)
    if (writes(g.nodes[i], b)) return false;
  return true;
}

bool commutes(const Graph& g, const Node& n, int from, int to, const std::vector<int>& ignore) {
  std::vector<int> r, w;
  for (const Value& v : n.inputs) r.push_back(v.buffer);
  for (int b = 0; b < static_cast<int>(g.buffers.size()); ++b)
    if (writes(n, b)) w.push_back(b);
  for (int k = std::min(from, to) + 1; k < std::max(from, to); ++k) {
    if (std::find(ignore.begin(), ignore.end(), k) != ignore.end()) continue;
    const Node& other = g.nodes[k];
    for (int b : w)
      if (reads(other, b) || writes(other, b)) return false;
    for (int b : r)
      if (writes(other, b)) return false;
  }
  return true;
}

std::string activation_of(const Node& n) {
  if (n.kind != NodeKind::Kernel || n.inputs.size() != 1 || n.outputs.size() != 1) return "";
  const std::string& op = n.op->name;
  if (op == "relu" || op == "silu") return op;
  if (op == "gelu") return n.attrs.get<std::string>("approximate") == "tanh" ? "gelu_tanh" : "gelu";
  return "";
}

bool is_plain_add(const Node& n) {
  if (n.kind != NodeKind::Kernel || n.op->name != "add" || n.inputs.size() != 2) return false;
  const Scalar& alpha = n.attrs.get<Scalar>("alpha");
  return alpha.is_floating() ? alpha.to_double() == 1.0 : alpha.to_int() == 1;
}

std::optional<ActivationMatch> activation_after(const Graph& g, const Value& v, int at) {
  const std::vector<int> readers = readers_after(g, v.buffer, at);
  if (readers.empty()) return std::nullopt;
  const int r = readers[0];
  const Node& n = g.nodes[r];
  const std::string activation = activation_of(n);
  if (activation.empty() || !same_data(n.inputs[0], v) || !laid_out_as(n.outputs[0], v) ||
      n.outputs[0].dtype != v.dtype)
    return std::nullopt;
  // In place the buffer holds the activation's result afterwards (and it was the only reader);
  // out of place the input may live on (its later readers read the value before the activation).
  const bool in_place = n.outputs[0].buffer == v.buffer;
  if (in_place && !same_data(n.outputs[0], v)) return std::nullopt;
  return ActivationMatch{r, activation, !in_place && (readers.size() > 1 || needed_after(g, v.buffer, r))};
}

bool is_dense(const Value& v) {
  int64_t expected = 1;
  for (size_t d = v.sizes.size(); d-- > 0;) {
    if (v.sizes[d] != 1 && v.strides[d] != expected) return false;
    expected *= v.sizes[d];
  }
  return true;
}

bool covers_buffer(const Graph& g, const Value& v) {
  return v.offset == 0 && is_dense(v) &&
         static_cast<size_t>(shape_numel(v.sizes)) * itemsize(v.dtype) == g.buffers[v.buffer].nbytes;
}

bool same_elements(const Value& a, const Value& b) {
  return a.buffer == b.buffer && a.dtype == b.dtype && a.offset == b.offset && is_dense(a) && is_dense(b) &&
         shape_numel(a.sizes) == shape_numel(b.sizes);
}

Value reshaped(const Value& v, const Shape& sizes) {
  Value out = v;
  out.sizes = sizes;
  out.strides = contiguous_strides(sizes);
  return out;
}

bool channels_last(const Value& v) {
  if ((v.sizes.size() != 4 && v.sizes.size() != 5) || is_dense(v)) return false;
  const Shape want = format_strides(v.sizes, MemoryFormat::ChannelsLast);
  for (size_t d = 0; d < want.size(); ++d)
    if (v.sizes[d] != 1 && v.strides[d] != want[d]) return false;
  return true;
}

bool same_data(const Value& a, const Value& b) {
  return same_elements(a, b) || (channels_last(a) && channels_last(b) && a.buffer == b.buffer &&
                                 a.dtype == b.dtype && a.offset == b.offset && a.sizes == b.sizes);
}

std::optional<Value> laid_out_as(const Value& v, const Value& like) {
  if (channels_last(like))
    return channels_last(v) && v.sizes == like.sizes ? std::optional<Value>(v) : std::nullopt;
  if (!is_dense(v) || shape_numel(v.sizes) != shape_numel(like.sizes)) return std::nullopt;
  return reshaped(v, like.sizes);
}

bool constant_equals(const Graph& g, const Value& v, double x) {
  const Buffer& b = g.buffers[v.buffer];
  if (b.kind != BufferKind::Constant || !b.storage || !b.device.is_cpu()) return false;
  const int64_t n = shape_numel(v.sizes);
  const char* base = static_cast<const char*>(b.storage->data());
  return visit_dtype(v.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = reinterpret_cast<const T*>(base) + v.offset;
    Shape index(v.sizes.size(), 0);
    for (int64_t e = 0; e < n; ++e) {
      int64_t off = 0;
      for (size_t d = 0; d < index.size(); ++d) off += index[d] * v.strides[d];
      if (static_cast<double>(p[off]) != x) return false;
      for (size_t d = index.size(); d-- > 0;) {  // next index, row-major
        if (++index[d] < v.sizes[d]) break;
        index[d] = 0;
      }
    }
    return true;
  });
}

bool has_kernel(const Graph& g, const std::string& op, const Value& like) {
  const OpDef* def = try_find_op(op);
  return def != nullptr && !chosen_provider(*def, g.buffers[like.buffer].device.type, like.dtype).empty();
}

namespace {

// A tensor with a value's geometry on a storage with no memory: enough for meta functions.
Tensor meta_tensor(const Graph& g, const Value& v) {
  const Buffer& b = g.buffers[v.buffer];
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(b.device, nullptr, b.nbytes, nullptr);
  impl->sizes = v.sizes;
  impl->strides = v.strides;
  impl->offset = v.offset;
  impl->dtype = v.dtype;
  return Tensor(std::move(impl));
}

}  // namespace

void check_node(const Graph& g, const Node& n) {
  std::vector<Tensor> in;
  for (const Value& v : n.inputs) in.push_back(meta_tensor(g, v));
  const std::vector<TensorMeta> out = n.op->meta(in, n.attrs);
  PF_CHECK(out.size() == n.outputs.size(), "graph pass built an invalid '", n.op->name, "' node: ", n.outputs.size(),
           " outputs, the op infers ", out.size());
  for (size_t i = 0; i < out.size(); ++i)
    PF_CHECK(out[i].sizes == n.outputs[i].sizes && out[i].dtype == n.outputs[i].dtype, "graph pass built an invalid '",
             n.op->name, "' node: output ", i, " is ", dtype_name(n.outputs[i].dtype), shape_str(n.outputs[i].sizes),
             ", the op infers ", dtype_name(out[i].dtype), shape_str(out[i].sizes));
}

void add_note(Node& n, const std::string& what) { n.note += (n.note.empty() ? "" : "; ") + what; }

void erase_nodes(Graph& g, std::vector<int> dead) {
  std::sort(dead.begin(), dead.end());
  dead.erase(std::unique(dead.begin(), dead.end()), dead.end());
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  size_t next = 0;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    if (next < dead.size() && dead[next] == i) {
      ++next;
      continue;
    }
    kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
}

int new_temporary(Graph& g, Device device, size_t nbytes) {
  Buffer b;
  b.kind = BufferKind::Temporary;
  b.device = device;
  b.nbytes = nbytes;
  g.buffers.push_back(std::move(b));
  return static_cast<int>(g.buffers.size()) - 1;
}

std::string describe(const Graph& g, int node) {
  const Node& n = g.nodes[node];
  std::string s = node_name(n);
  if (!n.scope.empty()) s += " (" + n.scope + ")";
  return s;
}

}  // namespace plugflow::graph::passes
