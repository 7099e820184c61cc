// fuse_model_update: per-parameter optimizer updates of one optimizer group become one
// multi-tensor kernel (multi_sgd_step_ / multi_adam_step_), which runs the single-parameter
// kernels' loops over those parameters in one parallel pass: bit-identical results, one kernel
// call instead of several, small parameters in parallel.
//
// It must not undo schedule_updates' memory win (each update right after its gradient is
// complete, so gradients die early): merging a whole group moves every update down to the
// group's last gradient and keeps the others alive across the backward in between (updates
// left at the end made ResNet-18 training's lower bound 103 MB, scheduled 81). So the updates
// are first scheduled, then each update joins the next update of its group (the run's fused
// node takes the slot of the run's last update) only while the temporaries it reads, kept live
// longer, keep every node in between under the graph's peak of live temporary bytes; otherwise
// a new run starts. Runs of one update stay as they are.
//
// nn.Graph tags each update "opt{o}.group{g}.param{p}" (and Adam's step increment before it
// "<tag>.step"); the fused node is tagged "opt{o}.group{g}.params={p},{q},..." (the parameters it
// updates, in order) and Python sets the group's hyperparameters on it before each call. Adam's
// per-parameter step counts are inputs (the step tensors the increments write), so each
// parameter keeps its own bias corrections; SGD's first-step flags are a per-parameter list
// attribute.
//
// Guards: every update of a run is the same op with the same dtype and device and the same
// structure (momentum buffers or not, amsgrad or not), a kernel exists, and moving the updates
// to the last one's position changes nothing: no node in between reads what an earlier update
// wrote or writes what it read.
#include <algorithm>
#include <optional>
#include <map>
#include <set>
#include <utility>

#include "pass_utils.h"

namespace plugflow::graph {
namespace {

using namespace passes;

struct Group {
  std::string op;            // sgd_step_ | adam_step_ (| mixed)
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

// "3" of "opt0.group1.param3".
std::string param_of(const std::string& tag) { return tag.substr(tag.rfind(".param") + 6); }

// Bytes of temporaries live at each node (from the first node touching a buffer to the last):
// the memory plan's lower bound, position by position.
std::vector<size_t> live_bytes(const Graph& g, std::vector<int>& last_use) {
  const size_t nb = g.buffers.size();
  std::vector<int> first(nb, -1);
  last_use.assign(nb, -1);
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    auto touch = [&](const Value& v) {
      if (first[v.buffer] < 0) first[v.buffer] = i;
      last_use[v.buffer] = i;
    };
    for (const Value& v : g.nodes[i].inputs) touch(v);
    for (const Value& v : g.nodes[i].outputs) touch(v);
  }
  std::vector<size_t> live(g.nodes.size(), 0);
  for (size_t b = 0; b < nb; ++b)
    if (g.buffers[b].kind == BufferKind::Temporary && first[b] >= 0)
      for (int i = first[b]; i <= last_use[b]; ++i) live[i] += g.buffers[b].nbytes;
  return live;
}

// Adam's step increments ("<tag>.step") stay where capture put them, at the end (they write
// their step tensor through an output, which schedule_updates does not move); the fused node
// reads the step tensors, so each increment moves to just before its scheduled update.
void move_step_increments(Graph& g) {
  for (int s = 0; s < static_cast<int>(g.nodes.size()); ++s) {
    const std::string& tag = g.nodes[s].tag;
    if (tag.size() <= 5 || tag.compare(tag.size() - 5, 5, ".step") != 0) continue;
    const std::string update = tag.substr(0, tag.size() - 5);
    int u = -1;
    for (int j = 0; j < s && u < 0; ++j)
      if (g.nodes[j].tag == update) u = j;
    if (u < 0 || !commutes(g, g.nodes[s], s, u - 1)) continue;
    Node increment = std::move(g.nodes[s]);
    g.nodes.erase(g.nodes.begin() + s);
    g.nodes.insert(g.nodes.begin() + u, std::move(increment));
  }
}

std::string fuse_model_update(Graph& g, const PassOptions& options) {
  run_pass(g, "schedule_updates", options);
  move_step_increments(g);
  std::map<std::string, std::vector<int>> groups;  // group tag -> its updates, in order
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Kernel || (n.op->name != "sgd_step_" && n.op->name != "adam_step_")) continue;
    const std::string tag = group_of(n.tag);
    if (!tag.empty()) groups[tag].push_back(i);
  }
  // Each update joins the next run of its group (moves down to the run's last update) while that
  // keeps the temporaries it reads (its gradient) live over nodes that stay under the peak.
  std::vector<int> last_use;
  std::vector<size_t> live = live_bytes(g, last_use);
  const size_t peak = live.empty() ? 0 : *std::max_element(live.begin(), live.end());
  std::vector<std::pair<std::string, Group>> runs;
  for (const auto& [tag, members] : groups) {
    runs.push_back({tag, Group{g.nodes[members[0]].op->name, {members[0]}}});
    for (size_t k = 1; k < members.size(); ++k) {
      Group& run = runs.back().second;
      const int to = members[k];
      // The temporaries whose last use moves to `to`, and from where.
      std::vector<std::pair<int, int>> extended;  // (buffer, old last use)
      size_t extra = 0;
      for (int m : run.members)
        for (const Value& v : g.nodes[m].inputs)
          if (g.buffers[v.buffer].kind == BufferKind::Temporary && last_use[v.buffer] < to &&
              std::none_of(extended.begin(), extended.end(), [&](const auto& e) { return e.first == v.buffer; })) {
            extended.push_back({v.buffer, last_use[v.buffer]});
            extra += g.buffers[v.buffer].nbytes;
          }
      size_t highest = 0;
      for (int j = run.members.front() + 1; j < to; ++j) highest = std::max(highest, live[j]);
      if (highest + extra > peak) {
        runs.push_back({tag, Group{g.nodes[to].op->name, {to}}});
        continue;
      }
      for (const auto& [b, from] : extended) {
        for (int j = from + 1; j < to; ++j) live[j] += g.buffers[b].nbytes;
        last_use[b] = to;
      }
      if (run.op != g.nodes[to].op->name) run.op = "mixed";
      run.members.push_back(to);
    }
  }
  std::string report;
  auto line = [&](const std::string& s) { report += (report.empty() ? "" : "\n") + s; };
  std::vector<int> dead;
  int fused_runs = 0;
  size_t fused_updates = 0, updates = 0;
  for (const auto& [group_tag, run] : runs) {
    updates += run.members.size();
    if (run.members.size() < 2) continue;
    std::string tag = group_tag + ".params=";
    for (size_t k = 0; k < run.members.size(); ++k)
      tag += (k ? "," : "") + param_of(g.nodes[run.members[k]].tag);
    if (run.op == "mixed") {
      line(tag + ": not fused (SGD and Adam updates in one group)");
      continue;
    }
    std::string why;
    std::optional<Node> fused = fuse_group(g, tag, run, why);
    if (!fused) {
      line(tag + ": not fused (" + why + ")");
      continue;
    }
    g.nodes[run.members.back()] = std::move(*fused);
    dead.insert(dead.end(), run.members.begin(), run.members.end() - 1);
    ++fused_runs;
    fused_updates += run.members.size();
  }
  erase_nodes(g, dead);
  if (fused_runs)
    line(std::to_string(fused_updates) + " of " + std::to_string(updates) + " updates fused into " +
         std::to_string(fused_runs) + " multi-tensor updates");
  return report;
}

const bool kRegistered = [] {
  register_pass("fuse_model_update", fuse_model_update);
  return true;
}();

}  // namespace
}  // namespace plugflow::graph
