#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "plugflow/op.h"

namespace plugflow {
namespace {
struct Catalog {
  std::shared_mutex mutex;
  std::map<std::string, std::unique_ptr<OpDef>, std::less<>> ops;
};
Catalog& catalog() {
  static Catalog c;
  return c;
}
}  // namespace

const OpDef& register_op(std::string name, std::string signature, MetaFn meta, std::vector<int> mutated_inputs) {
  auto& c = catalog();
  std::unique_lock lock(c.mutex);
  PF_CHECK(c.ops.find(name) == c.ops.end(), "op '", name, "' is defined twice in the catalog");
  auto def = std::make_unique<OpDef>();
  def->name = name;
  def->signature = std::move(signature);
  def->meta = meta;
  def->mutated_inputs = std::move(mutated_inputs);
  const OpDef& ref = *def;
  c.ops.emplace(std::move(name), std::move(def));
  return ref;
}

const OpDef* try_find_op(std::string_view name) {
  auto& c = catalog();
  std::shared_lock lock(c.mutex);
  auto it = c.ops.find(name);
  return it == c.ops.end() ? nullptr : it->second.get();
}

const OpDef& find_op(std::string_view name) {
  const OpDef* op = try_find_op(name);
  PF_CHECK_T(op != nullptr, NotImplementedError, "unknown op '", name, "'");
  return *op;
}

std::vector<std::string> op_names() {
  auto& c = catalog();
  std::shared_lock lock(c.mutex);
  std::vector<std::string> names;
  for (const auto& [n, _] : c.ops) names.push_back(n);
  return names;
}

}  // namespace plugflow
