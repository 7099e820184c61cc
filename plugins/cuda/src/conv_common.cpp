#include "conv_common.h"

#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "cuda_check.h"
#include "cudnn.h"
#include "launchers.h"
#include "plugflow/runtime.h"

namespace plugflow::cuda {

CudnnTypes cudnn_types(DType t) {
  switch (t) {
    case DType::Float32: return {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT};
    case DType::Float64: return {CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE};
    case DType::Float16: return {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT};
    case DType::BFloat16: return {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT};
    default: PF_THROW(TypeError, "cuda conv: unsupported dtype ", dtype_name(t));
  }
}

int checked_int(int64_t v, const char* what) {
  PF_CHECK(v >= 0 && v <= INT_MAX, "cuda conv: ", what, " ", v, " is beyond cuDNN's 32-bit sizes");
  return static_cast<int>(v);
}

Shape packed_strides(const Shape& s, bool channels_last) {
  const size_t rank = s.size();
  Shape st(rank);
  int64_t step = 1;
  if (channels_last) {
    st[1] = step;
    step *= s[1];
    for (size_t i = rank - 1; i >= 2; --i) {
      st[i] = step;
      step *= s[i];
    }
  } else {
    for (size_t i = rank - 1; i >= 1; --i) {
      st[i] = step;
      step *= s[i];
    }
  }
  st[0] = step;
  return st;
}

bool has_strides(const Tensor& t, const Shape& strides) {
  for (size_t i = 0; i < strides.size(); ++i)
    if (t.sizes()[i] != 1 && t.strides()[i] != strides[i]) return false;
  return true;
}

Image image_layout(const Tensor& t) {
  if (has_strides(t, packed_strides(t.sizes(), false))) return {t, false, false};
  if (has_strides(t, packed_strides(t.sizes(), true))) return {t, true, false};
  return {t, false, true};
}

Image image_operand(const Tensor& t, bool is_output, cudaStream_t stream) {
  Image im = image_layout(t);
  if (im.copied) {
    im.tensor = Tensor::empty(t.sizes(), t.dtype(), t.device());
    if (!is_output) launch_copy(im.tensor, t, stream);
  }
  return im;
}

Image weight_operand(const Tensor& t, bool is_output, cudaStream_t stream) {
  if (has_strides(t, packed_strides(t.sizes(), false))) return {t, false, false};
  Tensor dense = Tensor::empty(t.sizes(), t.dtype(), t.device());
  if (!is_output) launch_copy(dense, t, stream);
  return {dense, false, true};
}

std::string conv_problem_key(const ConvProblem& p, const Image& x, const Image& w, const Image& y,
                             bool weight_layout) {
  std::ostringstream k;
  const auto dims = [&](const Shape& s, size_t from = 0) {
    for (size_t i = from; i < s.size(); ++i) k << (i > from ? "x" : "") << s[i];
  };
  k << dtype_name(p.dtype) << (p.dtype == DType::Float32 && p.allow_tf32 ? " tf32" : "") << " in=";
  dims(x.tensor.sizes());
  k << " out=";
  dims(y.tensor.sizes());
  k << " k=";
  dims(w.tensor.sizes(), 2);
  k << " s=";
  dims(p.stride);
  k << " p=";
  dims(p.padding);
  k << " d=";
  dims(p.dilation);
  k << " g=" << p.groups << (x.nhwc ? " x:nhwc" : "") << (y.nhwc ? " y:nhwc" : "")
    << (weight_layout && w.nhwc ? " w:nhwc" : "") << " ws<=" << (p.workspace_limit >> 20) << "M";
  return k.str();
}

algo_search::AlgoSelector& cudnn_selector(int device) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<algo_search::AlgoSelector>> selectors;
  std::lock_guard lock(mutex);
  auto& s = selectors[device];
  if (!s) {
    cudaDeviceProp prop{};
    PF_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    s = std::make_unique<algo_search::AlgoSelector>("cuda cudnn " + cudnn_version() + " " + prop.name + " sm_" +
                                                    std::to_string(prop.major) + std::to_string(prop.minor));
  }
  return *s;
}

algo_search::Strategy conv_strategy(const KernelContext& ctx) {
  return algo_search::parse_strategy(ctx.attrs.has("algo_search") ? ctx.attr<std::string>("algo_search")
                                                                  : current_config().optimizations.conv_algo_search);
}

}  // namespace plugflow::cuda
