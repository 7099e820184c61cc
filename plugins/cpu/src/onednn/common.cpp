#include "common.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace plugflow::cpu::onednn {

namespace {

// True when two elements share memory: with the dims of size > 1 ordered by stride, some
// stride does not step past everything the smaller ones reach (stride 0 included).
bool overlapping(const Dims& dims, const Dims& strides) {
  std::vector<size_t> order;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] > 1) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t reach = 0;  // the largest offset the smaller-stride dims address
  for (size_t i : order) {
    if (strides[i] <= reach) return true;
    reach += (dims[i] - 1) * strides[i];
  }
  return false;
}

}  // namespace

Operand operand(const Tensor& t, const Dims& dims) {
  Operand op{dims, Dims(t.strides().begin(), t.strides().end())};
  if (dims.size() != op.strides.size()) {  // grouped weights: (O, C/g, k...) seen as (g, O/g, C/g, k...)
    op.strides.insert(op.strides.begin(), op.strides[0] * dims[1]);
  }
  op.copy = overlapping(op.dims, op.strides);
  int64_t dense = 1;
  for (size_t i = op.dims.size(); i-- > 0;) {
    if (op.dims[i] == 1) op.strides[i] = dense;
    dense *= op.dims[i];
  }
  if (op.copy) {
    dense = 1;
    for (size_t i = op.dims.size(); i-- > 0;) {
      op.strides[i] = dense;
      dense *= op.dims[i];
    }
  }
  return op;
}

memory temporary_memory(const memory::desc& desc, Tensor& owner) {
  owner = Tensor::empty({static_cast<int64_t>(desc.get_size())}, DType::UInt8, Device{});
  return memory(desc, engine(), owner.data_ptr());
}

void append_activation(dnnl::post_ops& ops, const std::string& activation) {
  if (activation == "none") return;
  if (activation == "relu") ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  else if (activation == "gelu") ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
  else if (activation == "gelu_tanh") ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
  else if (activation == "silu") ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
  else PF_THROW(ValueError, "fused op: unsupported activation '", activation, "'");
}

std::unique_ptr<float[]> dense_copy(const Tensor& t) {
  const Shape& size = t.sizes();
  const Shape& stride = t.strides();
  std::unique_ptr<float[]> out(new float[t.numel()]);
  const float* src = t.data<float>();
  Shape index(size.size(), 0);
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    int64_t offset = 0;
    for (size_t d = 0; d < size.size(); ++d) offset += index[d] * stride[d];
    out[i] = src[offset];
    for (size_t d = size.size(); d-- > 0;) {  // next index, last dim fastest
      if (++index[d] < size[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

dnnl::primitive cached_primitive(const std::string& key, const std::function<dnnl::primitive()>& build) {
  static std::mutex mutex;
  static std::unordered_map<std::string, dnnl::primitive> cache;
  const std::string full = std::to_string(omp_get_max_threads()) + "|" + key;
  {
    std::lock_guard lock(mutex);
    if (const auto it = cache.find(full); it != cache.end()) return it->second;
  }
  // Built outside the lock; two threads racing on a new key both build, the first stored wins.
  dnnl::primitive p = build();
  std::lock_guard lock(mutex);
  return cache.emplace(full, p).first->second;
}

}  // namespace plugflow::cpu::onednn
