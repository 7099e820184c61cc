// Static graphs (nn.Graph): capture, an IR of kernel calls, named passes, and a compiled plan
// that replays the calls with bound kernels and planned memory, with no Python in the loop.
//
// Capture runs the user's build() once through the ordinary functional API with the
// dispatcher in *capture mode*: every kernel call is recorded instead of executed, tensors
// created meanwhile get virtual storages (no memory until host code writes them), autograd's
// backward formulas and the optimizer update are recorded the same way. So the graph is made
// of the op catalog's own ops (typed attributes, the same meta functions) and the eager
// backward formulas, and capturing has no side effect on parameters or statistics.
//
// Buffers are storages the graph touches: the call's inputs, external storages that outlive a
// call (parameters, buffers, optimizer state; updated in place by replays), temporaries
// (planned into one arena per device by liveness), constants (data written by host code
// during capture, e.g. torch.tensor([...]) in build), and outputs (fresh memory per call).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "plugflow/error.h"
#include "plugflow/export.h"
#include "plugflow/generator.h"
#include "plugflow/kernel.h"
#include "plugflow/op.h"
#include "plugflow/tensor.h"

namespace plugflow::graph {

// Something build() does that a static graph cannot replay: a tensor value read on the host
// (.item(), printing, a Python `if` on a tensor), a data-dependent output shape, an in-place
// write into an input that shares memory with a parameter. -> plugflow.nn.GraphCaptureError
class PF_API CaptureError : public Error {
 public:
  using Error::Error;
};

enum class BufferKind : uint8_t { Input, External, Temporary, Constant, Output };
PF_API std::string_view buffer_kind_name(BufferKind k);

struct Buffer {
  BufferKind kind = BufferKind::Temporary;
  Device device;
  size_t nbytes = 0;
  // The captured storage: inputs' and externals' real ones (kept alive), constants' data.
  std::shared_ptr<Storage> storage;
  int input_index = -1;  // Input: which argument of the call
};

// A tensor of the graph: a view of a buffer.
struct Value {
  int buffer = -1;
  Shape sizes, strides;
  int64_t offset = 0;
  DType dtype = DType::Float32;
};

enum class NodeKind : uint8_t { Kernel, DeviceCopy, Host };

// Host code the graph calls without seeing into it: a process group's collective, which the
// core knows only as a function. `run` gets the node's inputs and outputs bound to the memory
// of the running replay, and runs at the node's place in the plan.
struct HostCall {
  std::string name;  // for dumps: "all_reduce.start"
  std::function<void(std::span<Tensor> inputs, std::span<Tensor> outputs)> run;
};

struct Node {
  NodeKind kind = NodeKind::Kernel;
  const OpDef* op = nullptr;  // Kernel
  std::shared_ptr<const HostCall> host;  // Host: never dead, never folded, never moved by a pass
  Attrs attrs;
  std::vector<Value> inputs, outputs;  // DeviceCopy: inputs[0] -> outputs[0] (dense, same bytes)
  std::string scope;  // the module path at capture ("layer1.0.conv1"), for dumps
  std::string tag;    // set from Python for attributes that change per call (optimizer groups)
  Generator* rng = nullptr;  // a random op: `rng_count` counters reserved from it per run
  uint64_t rng_count = 0;
  std::string note;  // what a pass did to this node, for dumps
  // Runs only when the storage of one of its inputs changed (version) since its last run: a
  // node computing from parameters alone (folded weights, the amp pass's weight casts) into
  // external buffers it owns.
  bool cached = false;
};

// The node's op name ("device_copy", "host:<name>" for the other kinds).
PF_API std::string node_name(const Node& n);

struct Graph {
  std::vector<Buffer> buffers;
  std::vector<Node> nodes;
  std::vector<int> inputs;         // the buffer of each call argument
  std::vector<Value> input_values;  // each argument as captured (shape, dtype, layout)
  std::vector<Value> outputs;

  // One line per buffer and node (kernel provider where `with_kernels`).
  PF_API std::string text(bool with_kernels = false) const;
  // Graphviz: nodes as boxes, buffers' values as edges.
  PF_API std::string dot() const;
  // Nodes reading / writing a buffer, for passes.
  PF_API std::vector<int> readers(int buffer) const;
  PF_API std::vector<int> writers(int buffer) const;
};

// ---- capture --------------------------------------------------------------------------------

// Capture mode for the calling thread while alive; end() returns the graph. Nested captures
// are an error. The inputs become the graph's Input buffers (they must not share memory).
class PF_API Capture {
 public:
  explicit Capture(const std::vector<Tensor>& inputs);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  // Ends capture mode; `outputs` are the graph's results.
  Graph end(const std::vector<Tensor>& outputs);
  // The next recorded node gets this tag / scope.
  void set_tag(std::string tag);
  void set_scope(std::string scope);

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// True while the calling thread captures.
PF_API bool capturing();
// References to `s` that the running capture holds itself (0 or 1), so code that checks whether
// a buffer is shared (autograd's gradient accumulation) can discount them.
PF_API long capture_references(const Storage* s);
// Records a Host node calling `call` with these tensors (while capturing). The node reads
// `inputs` and writes `outputs`: a collective started on a tensor and the wait that completes it
// both list it, so the tensor stays live (and unread by others) in between.
PF_API void record_host_call(std::shared_ptr<const HostCall> call, std::span<const Tensor> inputs,
                             std::span<Tensor> outputs);
// Host code is about to read a tensor's values (item(), printing, numpy, a data-dependent
// size): a CaptureError naming `what` while capturing.
PF_API void check_host_read(const char* what);

// ---- passes ---------------------------------------------------------------------------------

struct PassOptions {
  bool training = true;
  std::string amp;  // "off" | "bf16" | "fp16"
  std::string conv_algo_search = "heuristic";
};

// A pass rewrites the graph and returns what it changed ("" when nothing): one line per change.
using PassFn = std::function<std::string(Graph&, const PassOptions&)>;
PF_API void register_pass(std::string name, PassFn fn);
PF_API std::vector<std::string> pass_names();
PF_API std::string run_pass(Graph& g, std::string_view name, const PassOptions& options);

// ---- compiled plan ----------------------------------------------------------------------------

// Kernels bound once, temporaries placed in one arena per device by liveness, then run()
// replays the nodes in order. A plan is not reentrant: one run at a time.
class PF_API Plan {
 public:
  explicit Plan(Graph graph);
  ~Plan();
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // The call's inputs must have the captured shapes, dtypes and devices (any strides: a
  // non-dense one is copied into a dense buffer of the captured layout).
  // With `node_seconds`, each node's wall time is added to it (one entry per node).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, std::vector<double>* node_seconds = nullptr);
  // Sets attribute `name` on every node tagged `tag` (optimizer learning rates, step counts).
  void set_attr(std::string_view tag, const char* name, AttrValue value);

  const Graph& graph() const;
  size_t arena_bytes() const;       // temporaries, all devices
  size_t unplanned_bytes() const;   // what the temporaries would take without reuse
  size_t peak_live_bytes() const;   // the most temporary bytes live at one node (the arena's lower bound)
  std::vector<std::string> providers() const;  // per node: the provider whose kernel runs it

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace plugflow::graph

namespace plugflow::graph::internal {
// Hooks for the dispatcher, storages, generators and copies (capture mode only).
struct CaptureHooks;
PF_API bool active();
void note_storage(Storage* s);
void note_rng(Generator* gen, uint64_t count);
void record_kernel(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs, std::span<Tensor> outputs);
void record_device_copy(const Tensor& dst, const Tensor& src);
}  // namespace plugflow::graph::internal
