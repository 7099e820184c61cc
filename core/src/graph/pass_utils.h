// What the fusion passes share: questions about the dataflow of a Graph (who wrote the value a
// node reads, who reads a node's result, whether a buffer is still needed), constant and
// geometry checks, and the rules every rewrite follows (a kernel must exist for the fused op,
// the new node must pass the op's meta function, the change is written into the node's note).
//
// Buffers may be written more than once (in-place ops, a view filled piece by piece), so
// dataflow questions are asked at a position: the value a node reads is the one the last
// earlier writer of that buffer left. The helpers are conservative: any two views of one buffer
// are taken to overlap.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "plugflow/graph.h"

namespace plugflow::graph::passes {

// True when node `n` writes buffer `b` (an output on it or an input it mutates).
bool writes(const Node& n, int b);
// True when node `n` reads buffer `b`.
bool reads(const Node& n, int b);

// The last node before `at` that writes buffer `b`, or -1 (the buffer's value comes from
// outside: an input, external or constant).
int last_writer(const Graph& g, int b, int at);
// Nodes after `at` that read the value buffer `b` holds after node `at`: every reader up to
// and including the next node that writes `b` (which may read it first: an in-place op).
std::vector<int> readers_after(const Graph& g, int b, int at);
// True when the value in buffer `b` after node `at` may still be needed: a later node reads
// the buffer, it is a graph output, or it outlives the call (not a temporary).
bool needed_after(const Graph& g, int b, int at);
// True when no node in (from, to) writes buffer `b`.
bool unwritten_between(const Graph& g, int b, int from, int to);
// True when `n`, the node at index `from` (or a node that reads and writes what it does), may
// run in the slot of node `to` instead: no node strictly between them, other than those in
// `ignore` (nodes the rewrite removes), reads a buffer n writes or writes a buffer n reads or
// writes.
bool commutes(const Graph& g, const Node& n, int from, int to, const std::vector<int>& ignore = {});

// The activation a node applies ("relu", "gelu", "gelu_tanh", "silu" as the fused ops name them),
// or "" for any other node.
std::string activation_of(const Node& n);
// True for add(a, b) with alpha 1.
bool is_plain_add(const Node& n);

// An activation that may join the node producing its input (a fused epilogue).
struct ActivationMatch {
  int node = -1;           // the activation's index
  std::string activation;  // as activation_of names it
  bool input_needed = false;  // its input is still read later (gelu/silu's backward reads it)
};
// The activation that is the first reader of the value `v` node `at` wrote, reading all of it
// densely into a dense output of the same dtype; none when something else reads v first.
std::optional<ActivationMatch> activation_after(const Graph& g, const Value& v, int at);

// A dense row-major view (contiguous strides, any offset).
bool is_dense(const Value& v);
// `v` covers its whole buffer densely from offset 0 (every element of the buffer, in order).
bool covers_buffer(const Graph& g, const Value& v);
// Both views address the same elements in the same order (same buffer, dtype, offset, and
// both dense with the same number of elements, whatever their shapes).
bool same_elements(const Value& a, const Value& b);
// `v` with another shape over the same dense elements.
Value reshaped(const Value& v, const Shape& sizes);

// Channels-last activations (docs/kernels.md, "Memory formats") in the fusion passes: a value
// dense in channels-last order and not row-major (4-d or 5-d).
bool channels_last(const Value& v);
// Both views address the same elements in the same order: same_elements, or identical
// channels-last views.
bool same_data(const Value& a, const Value& b);
// `v` as an operand laid out as `like` (a fused op's operands share one layout): a row-major `v`
// of any shape over as many dense elements, reshaped to like's shape, when `like` is row-major;
// a channels-last `v` of like's shape when `like` is channels last; none otherwise.
std::optional<Value> laid_out_as(const Value& v, const Value& like);

// True when `v` is a view of a constant buffer whose every element equals `x`.
bool constant_equals(const Graph& g, const Value& v, double x);

// True when some provider has a kernel for `op` on the device and dtype of `like`.
bool has_kernel(const Graph& g, const std::string& op, const Value& like);

// Runs the op's meta function on `n`'s operands (shapes and dtypes only) and checks that it
// infers n's outputs: a rewrite that builds an invalid node is a bug of the pass, reported
// before the plan would run it.
void check_node(const Graph& g, const Node& n);

// Appends to a node's note (dumps show it).
void add_note(Node& n, const std::string& what);

// Removes the nodes whose index is in `dead` (sorted or not).
void erase_nodes(Graph& g, std::vector<int> dead);

// A new temporary buffer of `nbytes` on `device`.
int new_temporary(Graph& g, Device device, size_t nbytes);

// "%12 conv2d (layer1.0.conv1)": a node as pass reports name it.
std::string describe(const Graph& g, int node);

}  // namespace plugflow::graph::passes
