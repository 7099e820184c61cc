#include "plugflow/dispatch.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "plugflow/graph.h"
#include "plugflow/profiler.h"
#include "registry_internal.h"

namespace plugflow {
namespace internal {
const KernelRecord* choose_kernel(const std::vector<KernelRecord>& candidates, const std::vector<std::string>& prefer);
}

namespace {

std::vector<KernelRecord> candidates_for(const OpDef& op, DeviceType device, DType dtype) {
  std::vector<KernelRecord> out;
  for (auto& k : registered_kernels())
    if (k.op == op.name && k.device == device && k.dtype == dtype) out.push_back(std::move(k));
  return out;
}

[[noreturn]] void throw_no_kernel(const OpDef& op, DeviceType device, DType dtype) {
  // List what exists for this op so the user sees whether it is the dtype or the device.
  std::map<std::string, std::string> by_provider;
  for (const auto& k : registered_kernels()) {
    if (k.op != op.name) continue;
    auto& s = by_provider[k.provider + " (" + std::string(device_type_name(k.device)) + ")"];
    if (!s.empty()) s += ", ";
    s += dtype_name(k.dtype);
  }
  std::string registered;
  for (const auto& [p, d] : by_provider) registered += "\n  " + p + ": " + d;
  if (registered.empty()) registered = " none (no loaded plugin implements it)";
  PF_THROW(NotImplementedError, "no kernel for op '", op.name, "' on device type '", device_type_name(device),
           "' with dtype ", dtype_name(dtype), "; registered kernels:", registered);
}

}  // namespace

KernelFn find_kernel(const OpDef& op, DeviceType device, DType dtype) {
  const uint64_t gen = internal::registry_generation();
  if (op.cache_generation.load(std::memory_order_acquire) == gen) {
    if (KernelFn fn = op.cache[static_cast<int>(device)][static_cast<int>(dtype)].load(std::memory_order_relaxed))
      return fn;
  } else {
    for (auto& row : op.cache)
      for (auto& slot : row) slot.store(nullptr, std::memory_order_relaxed);
    op.cache_generation.store(gen, std::memory_order_release);
  }
  const auto candidates = candidates_for(op, device, dtype);
  const KernelRecord* best = internal::choose_kernel(candidates, internal::kernel_preference());
  if (best == nullptr) throw_no_kernel(op, device, dtype);
  op.cache[static_cast<int>(device)][static_cast<int>(dtype)].store(best->fn, std::memory_order_relaxed);
  return best->fn;
}

std::string chosen_provider(const OpDef& op, DeviceType device, DType dtype) {
  const auto candidates = candidates_for(op, device, dtype);
  const KernelRecord* best = internal::choose_kernel(candidates, internal::kernel_preference());
  return best ? best->provider : std::string();
}

namespace {

std::atomic<uint32_t> cpu_fallback_mask{0};  // bit t: device type t falls back to the CPU

struct FallbackCounters {
  std::mutex mutex;
  std::map<std::string, CpuFallbackStats> by_op;
};
FallbackCounters& fallback_counters() {
  static FallbackCounters* c = new FallbackCounters();  // never destroyed: kernels run in static dtors
  return *c;
}

// Runs an op that has no kernel on `device` on the CPU: every storage the call touches is
// mirrored whole into host memory (views keep their offsets and strides, aliases stay aliases,
// and no kernel of the device is needed to move the bytes), the CPU kernel runs on the
// mirrors, and the storages of the outputs and of the inputs the op mutates are written back.
void run_on_cpu(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs, std::span<Tensor> outputs,
                Device device) {
  PF_CHECK_T(!graph::internal::active(), NotImplementedError, "op '", op.name, "' has no kernel on device type '",
             device_type_name(device.type), "': its CPU fallback cannot be captured in an nn.Graph");
  const Device cpu{DeviceType::CPU, 0};
  DeviceBackend& backend = device_backend(device);
  CpuFallbackStats stats;
  stats.calls = 1;
  std::map<Storage*, std::shared_ptr<Storage>> mirrors;
  auto mirror = [&](const Tensor& t) {
    auto [it, fresh] = mirrors.emplace(t.storage().get(), nullptr);
    if (fresh) {
      const size_t n = t.storage()->nbytes();
      it->second = std::make_shared<Storage>(cpu, n);
      if (n > 0) backend.copy_to_host(device.index, it->second->data(), t.storage()->data(), n);
      stats.bytes_to_cpu += static_cast<int64_t>(n);
    }
    return Tensor::view_of(it->second, t.sizes(), t.strides(), t.offset(), t.dtype());
  };
  std::vector<Tensor> in, out;
  for (const auto& t : inputs) in.push_back(mirror(t));
  for (const auto& t : outputs) out.push_back(mirror(t));
  const DType key = inputs.empty() ? outputs[0].dtype() : inputs[0].dtype();
  KernelFn fn = find_kernel(op, DeviceType::CPU, key);
  KernelContext ctx{op, in, out, attrs, cpu, nullptr};
  fn(ctx);
  std::map<Storage*, bool> written;
  for (const auto& t : outputs) written[t.storage().get()] = true;
  for (int i : op.mutated_inputs) written[inputs[i].storage().get()] = true;
  for (const auto& [dev_storage, _] : written) {
    const size_t n = dev_storage->nbytes();
    if (n > 0) backend.copy_from_host(device.index, dev_storage->data(), mirrors.at(dev_storage)->data(), n);
    stats.bytes_from_cpu += static_cast<int64_t>(n);
  }
  FallbackCounters& c = fallback_counters();
  std::lock_guard<std::mutex> lock(c.mutex);
  CpuFallbackStats& s = c.by_op[op.name];
  s.calls += stats.calls;
  s.bytes_to_cpu += stats.bytes_to_cpu;
  s.bytes_from_cpu += stats.bytes_from_cpu;
}

Device common_device(const OpDef& op, std::span<const Tensor> inputs) {
  const Device d = inputs[0].device();
  for (size_t i = 1; i < inputs.size(); ++i) {
    const Device e = inputs[i].device();
    PF_CHECK(e == d, "Expected all tensors to be on the same device, but found at least two devices, ", d.str(),
             " and ", e.str(), "! (in op '", op.name, "')");
  }
  return d;
}

void run_kernel(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs, std::span<Tensor> outputs,
                Device device, bool fresh_outputs) {
  bool all_empty = !outputs.empty();
  for (const auto& o : outputs) all_empty = all_empty && o.numel() == 0;
  if (all_empty) return;
  const DType key = inputs.empty() ? outputs[0].dtype() : inputs[0].dtype();
  KernelFn fn = nullptr;
  if (cpu_fallback_mask.load(std::memory_order_relaxed) & (1u << static_cast<int>(device.type))) {
    try {
      fn = find_kernel(op, device.type, key);
    } catch (const NotImplementedError&) {
      run_on_cpu(op, inputs, attrs, outputs, device);
      return;
    }
  } else {
    fn = find_kernel(op, device.type, key);
  }
  if (graph::internal::active()) {  // an nn.Graph captures: record the call instead of running it
    graph::internal::record_kernel(op, inputs, attrs, outputs);
    return;
  }
  KernelContext ctx{op, inputs, outputs, attrs, device, device_backend(device).current_stream(device.index)};
  if (!profiler::enabled()) {
    fn(ctx);
    return;
  }
  const int64_t start = profiler::now_ns();
  fn(ctx);
  if (!device.is_cpu()) device_backend(device).synchronize(device.index);  // the kernel's own time
  const int64_t end = profiler::now_ns();
  int64_t allocated = 0;
  if (fresh_outputs)
    for (const auto& o : outputs) allocated += static_cast<int64_t>(o.storage()->nbytes());
  profiler::record_kernel(profiler::EventKind::Kernel, op, device, key, inputs, allocated, start, end);
}

}  // namespace

std::vector<Tensor> call_op(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  for (const auto& t : inputs) PF_CHECK(t.defined(), "op '", op.name, "' got an undefined tensor");
  if (!inputs.empty()) common_device(op, inputs);
  std::vector<TensorMeta> metas = op.meta(inputs, attrs);
  std::vector<Tensor> outputs;
  outputs.reserve(metas.size());
  for (const auto& m : metas) outputs.push_back(Tensor::empty(m.sizes, m.dtype, m.device, m.memory_format));
  const Device device = inputs.empty() ? metas.at(0).device : inputs[0].device();
  run_kernel(op, inputs, attrs, outputs, device, /*fresh_outputs=*/true);
  return outputs;
}

void call_op_out(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs, std::span<Tensor> outputs) {
  for (const auto& t : inputs) PF_CHECK(t.defined(), "op '", op.name, "' got an undefined tensor");
  if (!inputs.empty()) common_device(op, inputs);
  std::vector<TensorMeta> metas = op.meta(inputs, attrs);
  // An empty meta result marks ops whose outputs the caller allocates and checks (fill, copy, ...).
  PF_CHECK(metas.empty() || metas.size() == outputs.size(), "op '", op.name, "' produces ", metas.size(), " outputs, got ",
           outputs.size());
  for (size_t i = 0; i < metas.size(); ++i) {
    PF_CHECK(outputs[i].sizes() == metas[i].sizes, "op '", op.name, "': output ", i, " has shape ",
             shape_str(outputs[i].sizes()), " but the result has shape ", shape_str(metas[i].sizes));
    PF_CHECK(outputs[i].dtype() == metas[i].dtype, "op '", op.name, "': result type ", dtype_name(metas[i].dtype),
             " can't be written to an output of type ", dtype_name(outputs[i].dtype()));
    PF_CHECK(outputs[i].device() == metas[i].device, "op '", op.name, "': output ", i, " is on ",
             outputs[i].device().str(), " but the result is on ", metas[i].device.str());
  }
  const Device device = inputs.empty() ? outputs[0].device() : inputs[0].device();
  for (const auto& o : outputs)
    PF_CHECK(o.device() == device, "op '", op.name, "': output on ", o.device().str(), " but inputs on ", device.str());
  run_kernel(op, inputs, attrs, outputs, device, /*fresh_outputs=*/false);
  for (auto& o : outputs) o.storage()->bump_version();
}

void internal::set_cpu_fallback(const std::vector<DeviceType>& types) {
  uint32_t mask = 0;
  for (DeviceType t : types) mask |= 1u << static_cast<int>(t);
  cpu_fallback_mask.store(mask, std::memory_order_relaxed);
}

std::map<std::string, CpuFallbackStats> cpu_fallback_stats() {
  FallbackCounters& c = fallback_counters();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.by_op;
}

void reset_cpu_fallback_stats() {
  FallbackCounters& c = fallback_counters();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.by_op.clear();
}

}  // namespace plugflow
