// A compiled graph: kernels bound once, temporaries placed in one arena per device by
// liveness, and a replay loop over prebuilt kernel contexts.
#include <algorithm>
#include <chrono>
#include <map>

#include "../ops/op_tables.h"
#include "plugflow/device.h"
#include "plugflow/dispatch.h"
#include "plugflow/graph.h"
#include "plugflow/ops.h"
#include "plugflow/profiler.h"

namespace plugflow::graph {

namespace {

constexpr size_t kAlign = 64;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

Device node_device(const Graph& g, const Node& n) {
  const std::vector<Value>& vs = n.inputs.empty() ? n.outputs : n.inputs;
  return g.buffers[vs[0].buffer].device;
}

// A tensor viewing buffer memory that the plan binds later (inputs, outputs) or now.
Tensor make_view(const Value& v, std::shared_ptr<Storage> storage) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = v.sizes;
  impl->strides = v.strides;
  impl->offset = v.offset;
  impl->dtype = v.dtype;
  return Tensor(std::move(impl));
}

struct Interval {
  int buffer;
  int first, last;
  size_t size;
  size_t offset = 0;
};

// Greedy placement (largest first) at the lowest offset that no buffer live at the same time
// occupies: the classic liveness-based arena plan. Returns the arena size.
size_t place(std::vector<Interval>& items) {
  std::sort(items.begin(), items.end(), [](const Interval& a, const Interval& b) {
    return a.size != b.size ? a.size > b.size : a.first < b.first;
  });
  std::vector<const Interval*> placed;
  size_t total = 0;
  for (Interval& it : items) {
    std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of overlapping-in-time ones
    for (const Interval* p : placed)
      if (p->first <= it.last && it.first <= p->last) busy.emplace_back(p->offset, p->offset + p->size);
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [b, e] : busy) {
      if (offset + it.size <= b) break;
      offset = std::max(offset, e);
    }
    it.offset = offset;
    total = std::max(total, offset + it.size);
    placed.push_back(&it);
  }
  return total;
}

bool same_geometry(const Value& a, const Value& b) {
  return a.sizes == b.sizes && a.strides == b.strides && a.offset == b.offset &&
         itemsize(a.dtype) == itemsize(b.dtype);
}

// Elementwise kernels read each element before writing the same position, so their output may
// take the place of an input that dies at that node when both have the same layout.
bool elementwise(const Node& n) {
  return n.kind == NodeKind::Kernel && n.outputs.size() == 1 &&
         (plugflow::internal::find_unary(n.op->name) != nullptr || plugflow::internal::find_binary(n.op->name) != nullptr);
}

// In-place reuse: buffer `root[b]` holds b. Returns the root of each buffer (itself unless an
// elementwise node writes b over an input buffer whose last use it is).
std::vector<int> inplace_roots(const Graph& g, std::vector<int>& first, std::vector<int>& last) {
  std::vector<int> root(g.buffers.size());
  for (size_t b = 0; b < root.size(); ++b) root[b] = static_cast<int>(b);
  auto find = [&](int b) {
    while (root[b] != b) b = root[b];
    return b;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!elementwise(n)) continue;
    const Value& out = n.outputs[0];
    const int ob = out.buffer;
    if (g.buffers[ob].kind != BufferKind::Temporary || first[ob] != static_cast<int>(i) || root[ob] != ob) continue;
    for (const Value& in : n.inputs) {
      const int ib = in.buffer;
      // The memory is free after this node: its last use (by ib or an earlier value in it) is here.
      if (ib == ob || g.buffers[ib].kind != BufferKind::Temporary || last[find(ib)] != static_cast<int>(i)) continue;
      if (!same_geometry(in, out) || g.buffers[ob].nbytes > g.buffers[ib].nbytes) continue;
      bool other_view = false;  // the node must not read the input buffer through another layout
      for (const Value& other : n.inputs)
        if (&other != &in && other.buffer == ib && !same_geometry(other, in)) other_view = true;
      if (other_view) continue;
      const int r = find(ib);
      if (g.buffers[ob].nbytes > g.buffers[r].nbytes) continue;
      root[ob] = r;
      last[r] = std::max(last[r], last[ob]);
      break;
    }
  }
  for (size_t b = 0; b < root.size(); ++b) root[b] = find(static_cast<int>(b));
  return root;
}

}  // namespace

struct Plan::Impl {
  Graph graph;
  struct Step {
    const Node* node;
    KernelFn fn = nullptr;
    Device device;
    std::vector<Tensor> in, out;
    std::vector<TensorImpl*> written;  // outputs and inputs written in place: versions bumped per run
    Attrs attrs;
    std::vector<uint32_t> input_versions;  // a cached node's inputs' versions at its last run
  };
  std::vector<Step> steps;
  std::vector<std::shared_ptr<Storage>> storage;         // per buffer (inputs/outputs: per run)
  std::vector<std::vector<TensorImpl*>> bound_per_run;   // per buffer: views to rebind each run
  std::vector<std::shared_ptr<Storage>> arenas;
  size_t arena_bytes = 0, unplanned_bytes = 0, peak_live_bytes = 0;
  std::vector<std::string> providers;

  void bind(int buffer, const std::shared_ptr<Storage>& s) {
    storage[buffer] = s;
    for (TensorImpl* impl : bound_per_run[buffer]) impl->storage = s;
  }
};

Plan::Plan(Graph graph) : impl_(std::make_unique<Impl>()) {
  Impl& p = *impl_;
  p.graph = std::move(graph);
  const Graph& g = p.graph;
  const size_t nb = g.buffers.size();
  p.storage.resize(nb);
  p.bound_per_run.resize(nb);

  // Liveness of temporaries, in node order.
  std::vector<int> first(nb, -1), last(nb, -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto touch = [&](const Value& v) {
      if (first[v.buffer] < 0) first[v.buffer] = static_cast<int>(i);
      last[v.buffer] = static_cast<int>(i);
    };
    for (const Value& v : g.nodes[i].inputs) touch(v);
    for (const Value& v : g.nodes[i].outputs) touch(v);
  }
  const std::vector<int> root = inplace_roots(g, first, last);
  std::map<Device, std::vector<Interval>, bool (*)(const Device&, const Device&)> per_device(
      [](const Device& a, const Device& b) { return a.type != b.type ? a.type < b.type : a.index < b.index; });
  for (size_t b = 0; b < nb; ++b) {
    const Buffer& buf = g.buffers[b];
    switch (buf.kind) {
      case BufferKind::External:
      case BufferKind::Constant: p.storage[b] = buf.storage; break;
      case BufferKind::Temporary:
        if (first[b] >= 0 && root[b] == static_cast<int>(b)) {
          per_device[buf.device].push_back({static_cast<int>(b), first[b], last[b], align_up(std::max<size_t>(buf.nbytes, 1))});
          p.unplanned_bytes += align_up(std::max<size_t>(buf.nbytes, 1));
        }
        break;
      case BufferKind::Input:
      case BufferKind::Output: break;
    }
  }
  for (auto& [device, items] : per_device) {
    // The lower bound any placement has: the most bytes live at one node.
    std::vector<size_t> live(g.nodes.size() + 1, 0);
    for (const Interval& it : items)
      for (int i = it.first; i <= it.last; ++i) live[i] += it.size;
    p.peak_live_bytes += *std::max_element(live.begin(), live.end());
    const size_t bytes = place(items);
    auto arena = std::make_shared<Storage>(device, std::max<size_t>(bytes, 1));
    p.arenas.push_back(arena);
    p.arena_bytes += bytes;
    char* base = static_cast<char*>(arena->data());
    for (const Interval& it : items)
      p.storage[it.buffer] = std::make_shared<Storage>(device, base + it.offset, g.buffers[it.buffer].nbytes, arena);
  }
  // Buffers written in place of another share its memory (each keeps its own Storage object:
  // versions and caches keyed by storage stay per value).
  for (size_t b = 0; b < nb; ++b)
    if (root[b] != static_cast<int>(b) && p.storage[root[b]])
      p.storage[b] = std::make_shared<Storage>(g.buffers[b].device, p.storage[root[b]]->data(), g.buffers[b].nbytes,
                                               p.storage[root[b]]);

  // Steps: kernels bound once; views prebuilt.
  auto view = [&](const Value& v) {
    Tensor t = make_view(v, p.storage[v.buffer]);
    const BufferKind k = g.buffers[v.buffer].kind;
    if (k == BufferKind::Input || k == BufferKind::Output) p.bound_per_run[v.buffer].push_back(t.impl());
    return t;
  };
  p.steps.reserve(g.nodes.size());
  for (const Node& n : g.nodes) {
    Impl::Step s;
    s.node = &n;
    s.device = node_device(g, n);
    s.attrs = n.attrs;
    for (const Value& v : n.inputs) s.in.push_back(view(v));
    for (const Value& v : n.outputs) s.out.push_back(view(v));
    for (const Tensor& o : s.out) s.written.push_back(o.impl());
    if (n.kind == NodeKind::Kernel) {
      for (int i : n.op->mutated_inputs) s.written.push_back(s.in.at(i).impl());
      const DType key = n.inputs.empty() ? n.outputs[0].dtype : n.inputs[0].dtype;
      s.fn = find_kernel(*n.op, s.device.type, key);
      p.providers.push_back(chosen_provider(*n.op, s.device.type, key));
    } else {
      p.providers.push_back(n.kind == NodeKind::Host ? "host" : "copy");
    }
    p.steps.push_back(std::move(s));
  }
}

Plan::~Plan() = default;

std::vector<Tensor> Plan::run(const std::vector<Tensor>& inputs, std::vector<double>* node_seconds) {
  Impl& p = *impl_;
  const Graph& g = p.graph;
  PF_CHECK(inputs.size() == g.inputs.size(), "the graph takes ", g.inputs.size(), " tensor inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    const Value& want = g.input_values[i];
    const int b = g.inputs[i];
    PF_CHECK(t.defined() && t.sizes() == want.sizes && t.dtype() == want.dtype && t.device() == g.buffers[b].device,
             "graph input ", i, " must be a ", dtype_name(want.dtype), " tensor of shape ", shape_str(want.sizes), " on ",
             g.buffers[b].device.str(), " (the captured signature)");
    if (t.strides() == want.strides && t.offset() == want.offset && t.storage()->nbytes() >= g.buffers[b].nbytes) {
      p.bind(b, t.storage());
    } else {  // another layout: a dense copy in the captured one
      auto s = std::make_shared<Storage>(g.buffers[b].device, g.buffers[b].nbytes);
      Tensor dst = make_view(want, s);
      ops::copy_(dst, t);
      p.bind(b, s);
    }
  }
  for (size_t b = 0; b < g.buffers.size(); ++b)
    if (g.buffers[b].kind == BufferKind::Output)
      p.bind(static_cast<int>(b), std::make_shared<Storage>(g.buffers[b].device, std::max<size_t>(g.buffers[b].nbytes, 1)));

  if (node_seconds) node_seconds->resize(p.steps.size(), 0.0);
  for (size_t si = 0; si < p.steps.size(); ++si) {
    Impl::Step& s = p.steps[si];
    const Node& n = *s.node;
    std::vector<uint32_t> versions;
    if (n.cached) {
      for (const Tensor& t : s.in) versions.push_back(t.storage()->version());
      if (versions == s.input_versions) continue;
    }
    const auto start = node_seconds ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    if (n.rng != nullptr) {
      const auto [seed, offset] = n.rng->reserve(n.rng_count);
      s.attrs.set("seed", static_cast<int64_t>(seed));
      s.attrs.set("offset", static_cast<int64_t>(offset));
    }
    if (n.kind == NodeKind::Kernel) {
      KernelContext ctx{*n.op, s.in, s.out, s.attrs, s.device,
                        device_backend(s.device).current_stream(s.device.index)};
      if (!profiler::enabled()) {
        s.fn(ctx);
      } else {  // the arena's buffers are not allocations of the call: allocated 0
        const int64_t t0 = profiler::now_ns();
        s.fn(ctx);
        if (!s.device.is_cpu()) device_backend(s.device).synchronize(s.device.index);
        const DType key = s.in.empty() ? s.out[0].dtype() : s.in[0].dtype();
        profiler::record_kernel(profiler::EventKind::GraphKernel, *n.op, s.device, key, s.in, 0, t0,
                                profiler::now_ns());
      }
    } else if (n.kind == NodeKind::Host) {
      n.host->run(s.in, s.out);
    } else {
      const Tensor& src = s.in[0];
      const Tensor& dst = s.out[0];
      const size_t nbytes = static_cast<size_t>(src.numel()) * src.itemsize();
      const Device sd = src.device(), dd = dst.device();
      if (sd.is_cpu()) device_backend(dd).copy_from_host(dd.index, dst.data_ptr(), src.data_ptr(), nbytes);
      else if (dd.is_cpu()) device_backend(sd).copy_to_host(sd.index, dst.data_ptr(), src.data_ptr(), nbytes);
      else PF_THROW(NotImplementedError, "a graph copy between two accelerators is not supported");
    }
    // Version counters tell eager caches (oneDNN's reordered weights) and autograd that the
    // memory changed, as call_op_out does.
    for (TensorImpl* w : s.written) w->storage->bump_version();
    if (n.cached) s.input_versions = std::move(versions);
    if (node_seconds) {
      device_backend(s.device).synchronize(s.device.index);
      (*node_seconds)[si] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }

  std::vector<Tensor> out;
  out.reserve(g.outputs.size());
  for (const Value& v : g.outputs) out.push_back(Tensor::view_of(p.storage[v.buffer], v.sizes, v.strides, v.offset, v.dtype));
  // The plan keeps neither the caller's inputs nor the returned outputs alive.
  for (size_t b = 0; b < g.buffers.size(); ++b)
    if (g.buffers[b].kind == BufferKind::Input || g.buffers[b].kind == BufferKind::Output) p.bind(static_cast<int>(b), nullptr);
  return out;
}

void Plan::set_attr(std::string_view tag, const char* name, AttrValue value) {
  bool found = false;
  for (Impl::Step& s : impl_->steps)
    if (s.node->tag == tag) {
      // Attrs keep their names' pointers: only attributes the op already has can change, and
      // they keep their type (a Python int for a float attribute becomes a double).
      const AttrValue* old = nullptr;
      for (const auto& [n, v] : s.attrs.items())
        if (std::string_view(n) == name) old = &v;
      PF_CHECK(old != nullptr, "op '", s.node->op ? s.node->op->name : "copy", "' tagged '", tag,
               "' has no attribute '", name, "'");
      if (std::holds_alternative<double>(*old) && std::holds_alternative<int64_t>(value))
        value = static_cast<double>(std::get<int64_t>(value));
      PF_CHECK(old->index() == value.index(), "attribute '", name, "' of op '", s.node->op->name,
               "' cannot change its type");
      s.attrs.set(name, value);
      found = true;
    }
  PF_CHECK(found, "no node of the graph is tagged '", tag, "'");
}

const Graph& Plan::graph() const { return impl_->graph; }
size_t Plan::arena_bytes() const { return impl_->arena_bytes; }
size_t Plan::unplanned_bytes() const { return impl_->unplanned_bytes; }
size_t Plan::peak_live_bytes() const { return impl_->peak_live_bytes; }
std::vector<std::string> Plan::providers() const { return impl_->providers; }

}  // namespace plugflow::graph
