// fuse_model_update: the per-parameter optimizer updates of one optimizer group become one
// multi-tensor kernel (multi_sgd_step_ / multi_adam_step_), which runs the single-parameter
// kernels' loops over all of the group's parameters in one parallel pass: bit-identical
// results, one kernel call instead of one per parameter, small parameters in parallel.
//
// nn.Graph tags each update "opt{o}.group{g}.param{p}" (and Adam's step increment before it
// "<tag>.step"); the fused node is tagged "opt{o}.group{g}" and Python sets the group's
// hyperparameters on it before each call. Adam's per-parameter step counts are inputs (the
// step tensors the increments write), so each parameter keeps its own bias corrections; SGD's
// first-step flags are a per-parameter list attribute.
//
// Guards: every update of the group is the same op with the same dtype and device and the same
// structure (momentum buffers or not, amsgrad or not), a kernel exists, and moving the updates
// to the last one's position changes nothing: no node in between reads what an earlier update
// wrote or writes what it read.
#include <map>
#include <optional>
#include <set>

#include "pass_utils.h"

namespace plugflow::graph {
namespace {

using namespace passes;

struct Group {
  std::string op;            // sgd_step_ | adam_step_
  std::vector<int> members;  // node indices, in order
};

// "opt0.group1" of "opt0.group1.param7"; empty for other tags.
std::string group_of(const std::string& tag) {
  const auto dot = tag.rfind(".param");
  if (tag.rfind("opt", 0) != 0 || dot == std::string::npos) return "";
  if (tag.find('.', dot + 1) != std::string::npos) return "";  // "<tag>.step"
  return tag.substr(0, dot);
}

// The buffers an update reads and writes.
void update_buffers(const Node& n, std::set<int>& reads_set, std::set<int>& writes_set) {
  for (const Value& v : n.inputs) reads_set.insert(v.buffer);
  for (int i : n.op->mutated_inputs) writes_set.insert(n.inputs.at(i).buffer);
}

// Moving every member to the last member's position is safe.
bool movable(const Graph& g, const Group& grp, const std::vector<int>& steps) {
  std::set<int> member_set(grp.members.begin(), grp.members.end());
  std::set<int> r, w;
  size_t next = 0;
  for (int j = grp.members.front(); j <= grp.members.back(); ++j) {
    if (next < grp.members.size() && grp.members[next] == j) {
      update_buffers(g.nodes[j], r, w);
      if (!steps.empty()) r.insert(g.nodes[steps[next]].outputs[0].buffer);
      ++next;
      continue;
    }
    const Node& n = g.nodes[j];
    for (int b : w)
      if (reads(n, b) || writes(n, b)) return false;
    for (int b : r)
      if (writes(n, b)) return false;
  }
  return true;
}

std::optional<Node> fuse_group(const Graph& g, const std::string& tag, const Group& grp, std::string& why) {
  const Node& first = g.nodes[grp.members.front()];
  const Value& p0 = first.inputs[0];
  const bool sgd = grp.op == "sgd_step_";
  const std::string fused_op = sgd ? "multi_sgd_step_" : "multi_adam_step_";
  if (!has_kernel(g, fused_op, p0)) {
    why = "no " + fused_op + " kernel for " + std::string(dtype_name(p0.dtype));
    return std::nullopt;
  }
  const bool momentum = sgd && first.inputs[2].buffer != p0.buffer;  // else a placeholder
  const bool amsgrad = !sgd && first.attrs.get<bool>("amsgrad");
  std::vector<int> steps;  // Adam: the step increment of each member
  for (int m : grp.members) {
    const Node& n = g.nodes[m];
    const Value& p = n.inputs[0];
    if (p.dtype != p0.dtype || g.buffers[p.buffer].device != g.buffers[p0.buffer].device) {
      why = "parameters of several dtypes or devices";
      return std::nullopt;
    }
    if (sgd ? (n.inputs[2].buffer != p.buffer) != momentum : n.attrs.get<bool>("amsgrad") != amsgrad) {
      why = "updates of different structure";
      return std::nullopt;
    }
    if (!sgd) {
      int step = -1;
      for (int j = m - 1; j >= 0 && step < 0; --j)
        if (g.nodes[j].tag == n.tag + ".step") step = j;
      if (step < 0 || g.nodes[step].outputs.size() != 1) {
        why = "no step counter for " + n.tag;
        return std::nullopt;
      }
      steps.push_back(step);
    }
  }
  if (!movable(g, grp, steps)) {
    why = "other nodes between the updates use their tensors";
    return std::nullopt;
  }
  const int64_t count = static_cast<int64_t>(grp.members.size());
  Node fused;
  fused.op = &find_op(fused_op);
  fused.tag = tag;
  // Inputs grouped by operand: all params, all grads, then the state tensors (and Adam's steps);
  // outputs: the tensors updated in place, the same views as the inputs holding them.
  const std::vector<int> state = sgd ? (momentum ? std::vector<int>{2} : std::vector<int>{})
                                     : (amsgrad ? std::vector<int>{2, 3, 4} : std::vector<int>{2, 3});
  for (int k : std::vector<int>{0, 1})
    for (int m : grp.members) fused.inputs.push_back(g.nodes[m].inputs[k]);
  for (int k : state)
    for (int m : grp.members) fused.inputs.push_back(g.nodes[m].inputs[k]);
  for (int s : steps) fused.inputs.push_back(g.nodes[s].outputs[0]);
  for (int m : grp.members) fused.outputs.push_back(g.nodes[m].inputs[0]);
  for (int k : state)
    for (int m : grp.members) fused.outputs.push_back(g.nodes[m].inputs[k]);
  // The capture's hyperparameters; nn.Graph sets the group's current ones before every call.
  const Attrs& a = first.attrs;
  fused.attrs.set("count", count);
  if (sgd) {
    fused.attrs.set("has_momentum", momentum);
    for (const char* name : {"lr", "momentum", "dampening", "weight_decay"}) fused.attrs.set(name, a.get<double>(name));
    for (const char* name : {"nesterov", "maximize"}) fused.attrs.set(name, a.get<bool>(name));
    Shape first_step;
    for (int m : grp.members) first_step.push_back(g.nodes[m].attrs.get<bool>("first_step"));
    fused.attrs.set("first_step", first_step);
  } else {
    fused.attrs.set("amsgrad", amsgrad);
    // adam_step_'s attributes were made for step 1: step_size = lr / (1 - beta1).
    fused.attrs.set("lr", a.get<double>("step_size") * (1 - a.get<double>("beta1")));
    for (const char* name : {"beta1", "beta2", "eps", "weight_decay"}) fused.attrs.set(name, a.get<double>(name));
    for (const char* name : {"maximize", "decoupled_weight_decay"}) fused.attrs.set(name, a.get<bool>(name));
  }
  check_node(g, fused);
  add_note(fused, "fuse_model_update: " + std::to_string(count) + " " + grp.op + " updates in one kernel");
  return fused;
}

std::string fuse_model_update(Graph& g, const PassOptions&) {
  std::map<std::string, Group> groups;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Kernel || (n.op->name != "sgd_step_" && n.op->name != "adam_step_")) continue;
    const std::string tag = group_of(n.tag);
    if (tag.empty()) continue;
    Group& grp = groups[tag];
    if (grp.op.empty()) grp.op = n.op->name;
    if (grp.op != n.op->name) grp.op = "mixed";
    grp.members.push_back(i);
  }
  std::string report;
  auto line = [&](const std::string& s) { report += (report.empty() ? "" : "\n") + s; };
  std::vector<int> dead;
  for (const auto& [tag, grp] : groups) {
    if (grp.op == "mixed") {
      line(tag + ": not fused (SGD and Adam updates in one group)");
      continue;
    }
    std::string why;
    std::optional<Node> fused = fuse_group(g, tag, grp, why);
    if (!fused) {
      line(tag + ": not fused (" + why + ")");
      continue;
    }
    g.nodes[grp.members.back()] = std::move(*fused);
    dead.insert(dead.end(), grp.members.begin(), grp.members.end() - 1);
    line(tag + ": " + std::to_string(grp.members.size()) + " " + grp.op + " updates fused into one " +
         g.nodes[grp.members.back()].op->name);
  }
  erase_nodes(g, dead);
  return report;
}

const bool kRegistered = [] {
  register_pass("fuse_model_update", fuse_model_update);
  return true;
}();

}  // namespace
}  // namespace plugflow::graph
