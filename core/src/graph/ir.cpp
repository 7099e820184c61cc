// The graph IR's dumps (text and Graphviz) and the pass registry.
#include <map>
#include <mutex>
#include <sstream>

#include "plugflow/dispatch.h"
#include "plugflow/graph.h"

namespace plugflow::graph {

std::string node_name(const Node& n) {
  switch (n.kind) {
    case NodeKind::DeviceCopy: return "device_copy";
    case NodeKind::Host: return "host:" + n.host->name;
    case NodeKind::Kernel: break;
  }
  return n.op->name;
}

std::string_view buffer_kind_name(BufferKind k) {
  switch (k) {
    case BufferKind::Input: return "input";
    case BufferKind::External: return "external";
    case BufferKind::Temporary: return "temp";
    case BufferKind::Constant: return "constant";
    case BufferKind::Output: return "output";
  }
  return "?";
}

namespace {

std::string attr_str(const AttrValue& v) {
  std::ostringstream os;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) os << (x ? "true" : "false");
        else if constexpr (std::is_same_v<T, Scalar>) os << (x.is_floating() ? x.to_double() : static_cast<double>(x.to_int()));
        else if constexpr (std::is_same_v<T, DType>) os << dtype_name(x);
        else if constexpr (std::is_same_v<T, Shape>) os << shape_str(x);
        else if constexpr (std::is_same_v<T, std::string>) os << '"' << x << '"';
        else os << x;
      },
      v);
  return os.str();
}

std::string value_str(const Value& v) {
  std::string s = "b" + std::to_string(v.buffer) + ":" + std::string(dtype_name(v.dtype)) + shape_str(v.sizes);
  if (v.offset != 0 || v.strides != contiguous_strides(v.sizes))
    s += "@" + std::to_string(v.offset) + shape_str(v.strides);
  return s;
}


std::string node_line(const Node& n, const std::string& provider) {
  std::string s;
  for (size_t i = 0; i < n.outputs.size(); ++i) s += (i ? ", " : "") + value_str(n.outputs[i]);
  s += " = " + node_name(n) + "(";
  for (size_t i = 0; i < n.inputs.size(); ++i) s += (i ? ", " : "") + value_str(n.inputs[i]);
  s += ")";
  if (!n.attrs.items().empty()) {
    s += " {";
    bool first = true;
    for (const auto& [name, v] : n.attrs.items()) {
      s += (first ? "" : ", ") + std::string(name) + "=" + attr_str(v);
      first = false;
    }
    s += "}";
  }
  if (!provider.empty()) s += "  [" + provider + "]";
  if (!n.scope.empty()) s += "  # " + n.scope;
  if (!n.note.empty()) s += "  (" + n.note + ")";
  return s;
}

}  // namespace

std::string Graph::text(bool with_kernels) const {
  std::ostringstream os;
  os << "graph: " << inputs.size() << " inputs, " << nodes.size() << " nodes, " << outputs.size() << " outputs\n";
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    os << "  b" << i << ": " << buffer_kind_name(b.kind) << " " << b.device.str() << " " << b.nbytes << " bytes";
    if (b.kind == BufferKind::Input) os << " (argument " << b.input_index << ")";
    os << "\n";
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    std::string provider;
    if (with_kernels && n.kind == NodeKind::Kernel) {
      const DType key = n.inputs.empty() ? n.outputs[0].dtype : n.inputs[0].dtype;
      provider = chosen_provider(*n.op, buffers[(n.inputs.empty() ? n.outputs : n.inputs)[0].buffer].device.type, key);
    }
    os << "  %" << i << ": " << node_line(n, provider) << "\n";
  }
  os << "  return";
  for (size_t i = 0; i < outputs.size(); ++i) os << (i ? ", " : " ") << value_str(outputs[i]);
  os << "\n";
  return os.str();
}

std::string Graph::dot() const {
  std::ostringstream os;
  os << "digraph plugflow {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    if (b.kind == BufferKind::Temporary) continue;
    os << "  b" << i << " [shape=ellipse, label=\"b" << i << " " << buffer_kind_name(b.kind) << "\"];\n";
  }
  std::map<int, int> last_writer;  // buffer -> node
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    os << "  n" << i << " [shape=box, label=\"%" << i << " " << node_name(n);
    if (!n.scope.empty()) os << "\\n" << n.scope;
    if (!n.note.empty()) os << "\\n(" << n.note << ")";
    os << "\"];\n";
    for (const Value& v : n.inputs) {
      auto it = last_writer.find(v.buffer);
      if (it != last_writer.end()) os << "  n" << it->second << " -> n" << i << " [label=\"b" << v.buffer << "\"];\n";
      else os << "  b" << v.buffer << " -> n" << i << ";\n";
    }
    for (const Value& v : n.outputs) {
      last_writer[v.buffer] = static_cast<int>(i);
      const BufferKind k = buffers[v.buffer].kind;
      if (k == BufferKind::External || k == BufferKind::Output) os << "  n" << i << " -> b" << v.buffer << ";\n";
    }
  }
  os << "}\n";
  return os.str();
}

std::vector<int> Graph::readers(int buffer) const {
  std::vector<int> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value& v : nodes[i].inputs)
      if (v.buffer == buffer) {
        out.push_back(static_cast<int>(i));
        break;
      }
  return out;
}

std::vector<int> Graph::writers(int buffer) const {
  std::vector<int> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value& v : nodes[i].outputs)
      if (v.buffer == buffer) {
        out.push_back(static_cast<int>(i));
        break;
      }
  return out;
}

// ---- passes ------------------------------------------------------------------------------------

namespace {
std::mutex g_pass_mutex;
std::map<std::string, PassFn>& pass_table() {
  static std::map<std::string, PassFn> table;
  return table;
}
}  // namespace

void register_pass(std::string name, PassFn fn) {
  std::lock_guard<std::mutex> lock(g_pass_mutex);
  pass_table()[std::move(name)] = std::move(fn);
}

std::vector<std::string> pass_names() {
  std::lock_guard<std::mutex> lock(g_pass_mutex);
  std::vector<std::string> out;
  for (const auto& [name, fn] : pass_table()) out.push_back(name);
  return out;
}

std::string run_pass(Graph& g, std::string_view name, const PassOptions& options) {
  PassFn fn;
  {
    std::lock_guard<std::mutex> lock(g_pass_mutex);
    auto it = pass_table().find(std::string(name));
    PF_CHECK_T(it != pass_table().end(), ValueError, "unknown graph pass '", name, "'");
    fn = it->second;
  }
  return fn(g, options);
}

}  // namespace plugflow::graph
