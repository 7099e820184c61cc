// Automatic mixed precision (torch.autocast): a per-thread state saying which device types
// autocast and to which lower-precision dtype, and the cast policy each listed op applies to
// its floating inputs at its entry.
//
// The lists are PyTorch 1.13's (the AutocastCPU / Autocast kernels it registers): on the CPU,
// convolutions and matrix products run in bfloat16, losses, transposed convolutions, prod,
// cdist, reflection/replication padding run in float32, cat and stack promote to the widest
// input type, and everything else (activations, norms, pooling, reductions) runs in the type
// it receives. CUDA's lists are longer (exp, log, pow, softmax, sums, layer/group norm in
// float32; more promote ops). docs/graph.md ("amp") lists them.
//
// An op in a list starts with one thread-local test, so autocast costs nothing when off:
//
//   Tensor mm(const Tensor& a, const Tensor& b) {
//     if (autocast::active()) [[unlikely]]
//       if (autocast::OpScope cast{"mm", {a, b}}) return mm(cast[0], cast[1]);
//     ...
//
// While the scope lives, autocast is off for its device type on this thread (PyTorch excludes
// the autocast dispatch key inside a listed op), so the recursive call and the ops it is made
// of run as they are. Casts are ordinary `to` calls: autograd and nn.Graph capture see them.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "plugflow/device.h"
#include "plugflow/dtype.h"
#include "plugflow/export.h"
#include "plugflow/tensor.h"

namespace plugflow::autocast {

enum class Policy : uint8_t {
  None,     // not listed: the op runs in its inputs' types
  Lower,    // floating inputs cast to the device's autocast dtype
  Float32,  // floating inputs cast to float32 (softmax/sum/cumsum/prod and norm only when the
            // caller gave no dtype: PyTorch's fp32_set_opt_dtype / fp32_append_dtype)
  Promote,  // floating inputs cast to the widest floating type among them
  Banned,   // RuntimeError (binary_cross_entropy on CUDA)
  Native,   // nothing cast, but autocast off inside: plugflow composes the op from listed ops
            // where PyTorch has one unlisted kernel (dot, mv, addmv on the CPU)
};

// ---- the calling thread's state (torch.set_autocast_enabled & co.) ------------------------
PF_API bool is_enabled(DeviceType t);
PF_API void set_enabled(DeviceType t, bool enabled);
// The lower-precision dtype: bfloat16 on the CPU, float16 on CUDA unless set.
PF_API DType lower_dtype(DeviceType t);
PF_API void set_lower_dtype(DeviceType t, DType dtype);
PF_API bool is_cache_enabled();
PF_API void set_cache_enabled(bool enabled);
// Nesting of autocast regions; the cache is cleared when the outermost one exits.
PF_API int increment_nesting();
PF_API int decrement_nesting();
PF_API void clear_cache();
// True while autocast is enabled for some device type on this thread: the one test a listed op
// makes before anything else.
PF_API bool active();

// The policy of op `name` on device type t (None for ops in no list). Names are the functional
// API's ("mm", "conv2d", "softmax", "mse_loss", "reflection_pad", ...).
PF_API Policy policy(std::string_view name, DeviceType t);

// Applies op `name`'s policy to its tensor arguments (undefined ones stay undefined). The
// device type is the first defined argument's. True (operator bool) when autocast is enabled
// there and the op is listed: then tensors() are the cast arguments and autocast stays off for
// that device type on this thread until the scope ends. A Banned op throws here.
//
// Lower-precision casts of float32 leaf tensors that require grad (parameters) are cached for
// the autocast region when the cache is enabled, as PyTorch does, so a weight used by several
// ops, or on every step of a loop inside one region, is cast once.
class PF_API OpScope {
 public:
  OpScope(std::string_view name, std::initializer_list<Tensor> args);
  OpScope(std::string_view name, std::vector<Tensor> args);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

  explicit operator bool() const { return applied_; }
  const Tensor& operator[](size_t i) const { return args_[i]; }
  const std::vector<Tensor>& tensors() const { return args_; }

 private:
  void apply(std::string_view name);
  void restore();

  std::vector<Tensor> args_;
  DeviceType device_ = DeviceType::CPU;
  bool applied_ = false;
};

// Autocast off for every device type on this thread while alive (the autograd engine runs
// backward under it: backward ops run in the types their forward ops chose).
class PF_API DisabledGuard {
 public:
  DisabledGuard();
  ~DisabledGuard();
  DisabledGuard(const DisabledGuard&) = delete;
  DisabledGuard& operator=(const DisabledGuard&) = delete;

 private:
  bool prev_[kMaxDeviceTypes];
};

// Sets the thread's weight-cast cache aside while alive and restores it after: nn.Graph
// capture casts into virtual tensors that must neither reach nor come from eager code.
class PF_API CacheStash {
 public:
  CacheStash();
  ~CacheStash();
  CacheStash(const CacheStash&) = delete;
  CacheStash& operator=(const CacheStash&) = delete;

 private:
  struct Saved;
  Saved* saved_;
};

}  // namespace plugflow::autocast
