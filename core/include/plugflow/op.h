// The op catalog: one definition per op (name, inputs, attributes, meta function), shared by
// every device. Kernels live in plugins and are looked up by the dispatcher (dispatch.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "plugflow/error.h"
#include "plugflow/export.h"
#include "plugflow/scalar.h"
#include "plugflow/tensor.h"

namespace plugflow {

using AttrValue = std::variant<bool, int64_t, double, Scalar, DType, Shape, std::string>;

// Named attributes of one call; a handful per op, so a flat list beats a map.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const char*, AttrValue>> items) : items_(items) {}
  void set(const char* name, AttrValue v) {
    for (auto& [n, val] : items_)
      if (std::string_view(n) == name) {
        val = std::move(v);
        return;
      }
    items_.emplace_back(name, std::move(v));
  }
  bool has(std::string_view name) const {
    for (const auto& [n, v] : items_)
      if (n == name) return true;
    return false;
  }
  template <typename T>
  const T& get(std::string_view name) const {
    for (const auto& [n, v] : items_)
      if (n == name) {
        const T* p = std::get_if<T>(&v);
        PF_CHECK(p != nullptr, "attribute '", name, "' has another type than the kernel expects");
        return *p;
      }
    PF_THROW(Error, "missing attribute '", name, "'");
  }
  const std::vector<std::pair<const char*, AttrValue>>& items() const { return items_; }

 private:
  std::vector<std::pair<const char*, AttrValue>> items_;
};

struct TensorMeta {
  Shape sizes;
  DType dtype;
  Device device;
  MemoryFormat memory_format = MemoryFormat::Contiguous;  // of a fresh output
};

// Validates inputs and attributes (throwing the error a user should see) and infers outputs.
using MetaFn = std::vector<TensorMeta> (*)(std::span<const Tensor> inputs, const Attrs& attrs);

struct KernelContext;
using KernelFn = void (*)(KernelContext& ctx);

struct OpDef {
  std::string name;
  std::string signature;  // human-readable, e.g. "add(Tensor self, Tensor other) -> Tensor"
  MetaFn meta = nullptr;
  // Inputs the kernel writes in place besides its outputs (the fused optimizer steps' parameter
  // and state, batch norm's running statistics): nn.Graph tracks these writes.
  std::vector<int> mutated_inputs;
  // Kernel choice cache, [device type][dtype]; filled by the dispatcher, cleared when the
  // registry or the preference changes (generation mismatch).
  mutable std::atomic<KernelFn> cache[kMaxDeviceTypes][kNumDTypes] = {};
  mutable std::atomic<uint64_t> cache_generation{0};
};

// The catalog. register_op is used by the core's op definitions; lookups throw
// NotImplementedError for unknown names.
PF_API const OpDef& register_op(std::string name, std::string signature, MetaFn meta,
                                std::vector<int> mutated_inputs = {});
PF_API const OpDef& find_op(std::string_view name);
PF_API const OpDef* try_find_op(std::string_view name);
PF_API std::vector<std::string> op_names();

}  // namespace plugflow
