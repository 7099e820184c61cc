// Autocast state, PyTorch 1.13's op lists and the cast policies (plugflow/autocast.h).
#include "plugflow/autocast.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "plugflow/autograd.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"
#include "opdefs.h"

namespace plugflow::autocast {
namespace {

struct CacheEntry {
  std::weak_ptr<TensorImpl> source;  // the entry is stale once the source is gone
  Tensor cast;
};
using Cache = std::unordered_map<const TensorImpl*, CacheEntry>;

struct State {
  bool enabled[kMaxDeviceTypes] = {};
  DType dtype[kMaxDeviceTypes];  // PyTorch's defaults: bfloat16 on the CPU, float16 elsewhere
  bool cache_enabled = true;
  int nesting = 0;
  bool any_enabled = false;
  Cache cache;

  State() {
    std::fill(std::begin(dtype), std::end(dtype), DType::Float16);
    dtype[static_cast<int>(DeviceType::CPU)] = DType::BFloat16;
  }

  void refresh() {
    any_enabled = false;
    for (bool e : enabled) any_enabled = any_enabled || e;
  }
};

thread_local State t_state;

int index_of(DeviceType t) { return static_cast<int>(t); }

// PyTorch 1.13's lists (the ops registered for AutocastCPU and AutocastCUDA), restricted to the
// ops plugflow has. {cpu policy, cuda policy}.
using P = Policy;
const std::unordered_map<std::string_view, std::pair<Policy, Policy>>& table() {
  static const std::unordered_map<std::string_view, std::pair<Policy, Policy>> t = {
      // lower precision
      {"conv1d", {P::Lower, P::Lower}},
      {"conv2d", {P::Lower, P::Lower}},
      {"conv3d", {P::Lower, P::Lower}},
      {"mm", {P::Lower, P::Lower}},
      {"bmm", {P::Lower, P::Lower}},
      {"matmul", {P::Lower, P::Lower}},
      {"addmm", {P::Lower, P::Lower}},
      {"baddbmm", {P::Lower, P::Lower}},
      {"addbmm", {P::Lower, P::Lower}},
      {"linear", {P::Lower, P::Lower}},
      {"conv_transpose1d", {P::Float32, P::Lower}},
      {"conv_transpose2d", {P::Float32, P::Lower}},
      {"conv_transpose3d", {P::Float32, P::Lower}},
      {"prelu", {P::None, P::Lower}},
      {"mv", {P::Native, P::Lower}},
      {"addmv", {P::Native, P::Lower}},
      {"einsum", {P::None, P::Lower}},
      // float32
      {"cdist", {P::Float32, P::Float32}},
      {"trace", {P::Float32, P::None}},
      {"quantile", {P::Float32, P::None}},
      {"nanquantile", {P::Float32, P::None}},
      {"reflection_pad", {P::Float32, P::None}},
      {"replication_pad", {P::Float32, P::None}},
      {"mse_loss", {P::Float32, P::Float32}},
      {"l1_loss", {P::Float32, P::Float32}},
      {"smooth_l1_loss", {P::Float32, P::Float32}},
      {"huber_loss", {P::Float32, P::Float32}},
      {"nll_loss", {P::Float32, P::Float32}},
      {"cross_entropy", {P::Float32, P::Float32}},
      {"kl_div", {P::Float32, P::Float32}},
      {"binary_cross_entropy_with_logits", {P::Float32, P::Float32}},
      {"binary_cross_entropy", {P::Float32, P::Banned}},
      {"layer_norm", {P::None, P::Float32}},
      {"group_norm", {P::None, P::Float32}},
      {"norm", {P::None, P::Float32}},
      {"cosine_similarity", {P::None, P::Float32}},
      // promote
      {"cat", {P::Promote, P::None}},
      {"stack", {P::Promote, P::None}},
      {"bilinear", {P::None, P::Promote}},
      {"cross", {P::None, P::Promote}},
      {"dot", {P::Native, P::Promote}},
      {"tensordot", {P::None, P::Promote}},
      {"index_put", {P::None, P::Promote}},
      {"scatter_add", {P::None, P::Promote}},
  // the defined ops' entries come from their definitions (core/opdefs/*.yaml)
#define PF_X(name, cpu, cuda) {name, {P::cpu, P::cuda}},
      PF_OPDEFS_AUTOCAST(PF_X)
#undef PF_X
  };
  return t;
}

bool eligible(const Tensor& t, DeviceType device) {
  return t.defined() && t.device().type == device && is_floating(t.dtype()) && t.dtype() != DType::Float64;
}

// The cast of `t` to `to`; parameters' lower-precision casts come from the region's cache.
Tensor cached_cast(const Tensor& t, DType to, DeviceType device) {
  State& s = t_state;
  const bool cacheable = s.cache_enabled && to == s.dtype[index_of(device)] && t.dtype() == DType::Float32 &&
                         autograd::requires_grad(t) && autograd::is_leaf(t) && !autograd::view_base(t).defined();
  if (!cacheable) return ops::to(t, std::nullopt, to);
  auto it = s.cache.find(t.impl());
  if (it != s.cache.end() && it->second.source.lock().get() == t.impl()) return it->second.cast;
  Tensor cast = ops::to(t, std::nullopt, to);
  s.cache[t.impl()] = CacheEntry{t.impl_ptr(), cast};
  return cast;
}

}  // namespace

bool is_enabled(DeviceType t) { return t_state.enabled[index_of(t)]; }

void set_enabled(DeviceType t, bool enabled) {
  t_state.enabled[index_of(t)] = enabled;
  t_state.refresh();
}

DType lower_dtype(DeviceType t) { return t_state.dtype[index_of(t)]; }

void set_lower_dtype(DeviceType t, DType dtype) {
  PF_CHECK_T(dtype == DType::BFloat16 || dtype == DType::Float16, TypeError,
             "autocast: the lower-precision dtype must be bfloat16 or float16, got ", dtype_name(dtype));
  t_state.dtype[index_of(t)] = dtype;
}

bool is_cache_enabled() { return t_state.cache_enabled; }
void set_cache_enabled(bool enabled) { t_state.cache_enabled = enabled; }
int increment_nesting() { return ++t_state.nesting; }
int decrement_nesting() { return --t_state.nesting; }
void clear_cache() { t_state.cache.clear(); }
bool active() { return t_state.any_enabled; }

Policy policy(std::string_view name, DeviceType t) {
  const auto& lists = table();
  const auto it = lists.find(name);
  if (it == lists.end()) return Policy::None;
  return t == DeviceType::CPU ? it->second.first : it->second.second;
}

OpScope::OpScope(std::string_view name, std::initializer_list<Tensor> args) : args_(args) { apply(name); }
OpScope::OpScope(std::string_view name, std::vector<Tensor> args) : args_(std::move(args)) { apply(name); }

void OpScope::apply(std::string_view name) {
  const Tensor* first = nullptr;
  for (const Tensor& t : args_)
    if (t.defined()) {
      first = &t;
      break;
    }
  if (first == nullptr) return;
  device_ = first->device().type;
  State& s = t_state;
  if (!s.enabled[index_of(device_)]) return;
  const Policy p = policy(name, device_);
  if (p == Policy::None) return;
  if (p == Policy::Banned)
    PF_THROW(Error,
             "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
             "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
             "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
             "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
             "safe to autocast.");
  const DType lower = s.dtype[index_of(device_)];
  DType to = p == Policy::Float32 ? DType::Float32 : lower;
  if (p == Policy::Promote) {
    for (const Tensor& t : args_) {
      if (!eligible(t, device_)) continue;
      if (t.dtype() == DType::Float32) to = DType::Float32;
      else PF_CHECK(t.dtype() == lower, "Unexpected floating ScalarType in at::autocast::prioritize");
    }
  }
  // Off for this device type while the op runs: its recursive call and inner ops see no autocast.
  s.enabled[index_of(device_)] = false;
  s.refresh();
  applied_ = true;
  if (p == Policy::Native) return;
  try {
    for (Tensor& t : args_)
      if (eligible(t, device_) && t.dtype() != to) t = cached_cast(t, to, device_);
  } catch (...) {
    restore();  // a constructor that throws gets no destructor call
    throw;
  }
}

void OpScope::restore() {
  if (!applied_) return;
  applied_ = false;
  t_state.enabled[index_of(device_)] = true;
  t_state.refresh();
}

OpScope::~OpScope() { restore(); }

DisabledGuard::DisabledGuard() {
  for (int i = 0; i < kMaxDeviceTypes; ++i) {
    prev_[i] = t_state.enabled[i];
    t_state.enabled[i] = false;
  }
  t_state.refresh();
}

DisabledGuard::~DisabledGuard() {
  for (int i = 0; i < kMaxDeviceTypes; ++i) t_state.enabled[i] = prev_[i];
  t_state.refresh();
}

struct CacheStash::Saved {
  Cache cache;
};

CacheStash::CacheStash() : saved_(new Saved{std::move(t_state.cache)}) { t_state.cache.clear(); }

CacheStash::~CacheStash() {
  t_state.cache = std::move(saved_->cache);
  delete saved_;
}

}  // namespace plugflow::autocast
