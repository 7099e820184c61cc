// conv2d / conv3d, their _grad_input and _grad_weight (docs/kernels.md, "Conv family") on
// cuDNN 9 for float32, float64, float16 and bfloat16. The transposed convolution needs nothing
// more: the core computes it as convNd_grad_input (the adjoint of convNd).
//
// Each op is one call of cuDNN's convolution API: cudnnConvolutionForward, ...BackwardData,
// ...BackwardFilter (cross-correlation, as PyTorch), with groups, dilation, padding and
// strides in the convolution descriptor and the bias added by cudnnAddTensor. Both spatial
// ranks go through cuDNN's N-d descriptors (cudnnSetTensorNdDescriptor, ...FilterNd...,
// ...ConvolutionNd...), so one code path, search and cache serve 2-d and 3-d. Images are read
// and written in place when they are packed NC(D)HW or N(D)HWC (channels-last); other strides,
// and a weight that is not packed NC(D)HW, go through a contiguous copy.
//
// Data and compute types follow PyTorch: float16 and bfloat16 data with float accumulation
// (cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configurations), float32 in float, float64 in
// double. Math types too: float16 may use tensor cores, float32 only when
// plugflow.backends.cudnn.allow_tf32 is set (PyTorch's default; otherwise cuDNN is held to
// FMA math), and each algorithm runs with the math type cuDNN reported for it.
//
// The algorithm is a strategy of optimizations.conv_algo_search, decided by the plugins'
// shared AlgoSelector (plugins/common/algo_search.h): `heuristic` takes the first algorithm of
// cudnnGetConvolution*Algorithm_v7 that succeeds within the workspace limit; `exhaustive`
// runs cudnnFindConvolution*AlgorithmEx on the call's own buffers (every algorithm that fits
// the limit, timed by cuDNN) and keeps the fastest. Choices are cached per problem key in
// memory and, for `exhaustive`, in optimizations.algo_cache under a section named after the
// cuDNN release and the GPU model; each is reported to the core for `plugflow.info --algos`.
// The workspace comes from the caching allocator, at most ConvSettings::workspace_limit_bytes.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "conv_common.h"
#include "cudnn.h"
#include "kernel_common.h"
#include "launchers.h"
#include "plugflow/algo_choice.h"
#include "plugflow/conv_settings.h"
#include "plugflow/runtime.h"
#include "plugflow/tensor.h"

namespace plugflow::cuda {
namespace {

enum class Kind { Forward, BackwardData, BackwardFilter };

// "conv2d_grad_input": the op of a kind at spatial rank `rank` (2 or 3).
std::string op_name(Kind k, int rank) {
  const std::string conv = "conv" + std::to_string(rank) + "d";
  switch (k) {
    case Kind::Forward: return conv;
    case Kind::BackwardData: return conv + "_grad_input";
    case Kind::BackwardFilter: return conv + "_grad_weight";
  }
  return conv;
}

// ---- descriptors ----------------------------------------------------------------------------

class TensorDesc {
 public:
  TensorDesc() { PF_CUDNN_CHECK(cudnn().cudnnCreateTensorDescriptor(&d_)); }
  ~TensorDesc() { cudnn().cudnnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDesc {
 public:
  FilterDesc() { PF_CUDNN_CHECK(cudnn().cudnnCreateFilterDescriptor(&d_)); }
  ~FilterDesc() { cudnn().cudnnDestroyFilterDescriptor(d_); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvDesc {
 public:
  ConvDesc() { PF_CUDNN_CHECK(cudnn().cudnnCreateConvolutionDescriptor(&d_)); }
  ~ConvDesc() { cudnn().cudnnDestroyConvolutionDescriptor(d_); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

// The descriptor's math type before an algorithm is chosen (as PyTorch): the search then only
// offers algorithms this math type permits.
cudnnMathType_t base_math(DType t, bool allow_tf32) {
  if (t == DType::Float16) return CUDNN_TENSOR_OP_MATH;
  if (t == DType::Float32 && !allow_tf32) return CUDNN_FMA_MATH;
  return CUDNN_DEFAULT_MATH;
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor_op_conversion";
    case CUDNN_FMA_MATH: return "fma";
  }
  return "?";
}

// ---- operands -------------------------------------------------------------------------------

// cuDNN's int arrays of a shape.
std::vector<int> int_dims(const Shape& s, const char* what) {
  std::vector<int> v;
  for (int64_t d : s) v.push_back(checked_int(d, what));
  return v;
}

void set_tensor_desc(const TensorDesc& d, cudnnDataType_t type, const Shape& sizes, const Shape& strides) {
  const std::vector<int> dims = int_dims(sizes, "size"), st = int_dims(strides, "stride");
  PF_CUDNN_CHECK(cudnn().cudnnSetTensorNdDescriptor(d.get(), type, static_cast<int>(dims.size()), dims.data(),
                                                    st.data()));
}

void set_image_desc(const TensorDesc& d, const Image& im, cudnnDataType_t type) {
  set_tensor_desc(d, type, im.tensor.sizes(), packed_strides(im.tensor.sizes(), im.nhwc));
}

// ---- one call ---------------------------------------------------------------------------------

// Everything a cuDNN call of one kind needs, set up from the kernel's tensors.
struct Call {
  Kind kind;
  int rank;  // spatial dims: 2 or 3
  DType dtype;
  CudnnTypes types;
  bool allow_tf32;
  size_t workspace_limit;
  Shape stride, padding, dilation;
  int64_t groups;
  Image x, w, y;  // image, weight, output (or their gradients, by kind)
  TensorDesc x_desc, y_desc;
  FilterDesc w_desc;
  ConvDesc conv;
  cudnnHandle_t handle = nullptr;

  // The problem key of the cache and of `plugflow.info --algos`.
  std::string key() const {
    return conv_problem_key({dtype, allow_tf32, workspace_limit, stride, padding, dilation, groups}, x, w, y);
  }
};

// The image, weight and output tensors of a kernel call, by kind: forward (x, w) -> y;
// backward data (dy, w) -> dx; backward filter (dy, x) -> dw.
struct Roles {
  const Tensor *x, *w, *y;
};
Roles roles(Kind kind, const KernelContext& ctx) {
  switch (kind) {
    case Kind::Forward: return {&ctx.input(0), &ctx.input(1), &ctx.output(0)};
    case Kind::BackwardData: return {&ctx.output(0), &ctx.input(1), &ctx.input(0)};
    case Kind::BackwardFilter: return {&ctx.input(1), &ctx.output(0), &ctx.input(0)};
  }
  PF_THROW(Error, "cuda conv: bad kind");
}

void describe(Call& c) {
  const cudnnDataType_t t = c.types.data;
  set_image_desc(c.x_desc, c.x, t);
  set_image_desc(c.y_desc, c.y, t);
  const std::vector<int> filter = int_dims(c.w.tensor.sizes(), "filter size");
  PF_CUDNN_CHECK(cudnn().cudnnSetFilterNdDescriptor(c.w_desc.get(), t, CUDNN_TENSOR_NCHW,
                                                    static_cast<int>(filter.size()), filter.data()));
  const std::vector<int> padding = int_dims(c.padding, "padding"), stride = int_dims(c.stride, "stride"),
                         dilation = int_dims(c.dilation, "dilation");
  PF_CUDNN_CHECK(cudnn().cudnnSetConvolutionNdDescriptor(c.conv.get(), c.rank, padding.data(), stride.data(),
                                                         dilation.data(), CUDNN_CROSS_CORRELATION,
                                                         c.types.compute));
  PF_CUDNN_CHECK(cudnn().cudnnSetConvolutionGroupCount(c.conv.get(), checked_int(c.groups, "groups")));
  PF_CUDNN_CHECK(cudnn().cudnnSetConvolutionMathType(c.conv.get(), base_math(c.dtype, c.allow_tf32)));
}

// alpha = 1 and beta = 0 in the compute type's C type (double for float64, else float).
struct Scaling {
  float f1 = 1.0f, f0 = 0.0f;
  double d1 = 1.0, d0 = 0.0;
  const void* one(const Call& c) const { return c.dtype == DType::Float64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(const Call& c) const { return c.dtype == DType::Float64 ? static_cast<const void*>(&d0) : &f0; }
};

// ---- the three kinds: cuDNN's entry points and algorithm names ------------------------------

template <Kind K>
struct Api;

template <>
struct Api<Kind::Forward> {
  using Algo = cudnnConvolutionFwdAlgo_t;
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static const char* name(Algo a) {
    switch (a) {
      case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "implicit_gemm";
      case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "implicit_precomp_gemm";
      case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "gemm";
      case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "direct";
      case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "fft";
      case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "fft_tiling";
      case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "winograd";
      case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "winograd_nonfused";
      default: return nullptr;
    }
  }
  static int max_count(const Call& c) {
    int n = 0;
    PF_CUDNN_CHECK(cudnn().cudnnGetConvolutionForwardAlgorithmMaxCount(c.handle, &n));
    return n;
  }
  static void heuristics(const Call& c, int capacity, int* n, Perf* out) {
    PF_CUDNN_CHECK(cudnn().cudnnGetConvolutionForwardAlgorithm_v7(c.handle, c.x_desc.get(), c.w_desc.get(),
                                                                  c.conv.get(), c.y_desc.get(), capacity, n, out));
  }
  static void find(const Call& c, int capacity, int* n, Perf* out, void* ws, size_t ws_size) {
    PF_CUDNN_CHECK(cudnn().cudnnFindConvolutionForwardAlgorithmEx(
        c.handle, c.x_desc.get(), c.x.tensor.data_ptr(), c.w_desc.get(), c.w.tensor.data_ptr(), c.conv.get(),
        c.y_desc.get(), c.y.tensor.data_ptr(), capacity, n, out, ws, ws_size));
  }
  static size_t workspace(const Call& c, Algo a) {
    size_t bytes = 0;
    PF_CUDNN_CHECK(cudnn().cudnnGetConvolutionForwardWorkspaceSize(c.handle, c.x_desc.get(), c.w_desc.get(),
                                                                   c.conv.get(), c.y_desc.get(), a, &bytes));
    return bytes;
  }
  static void run(const Call& c, Algo a, void* ws, size_t ws_size) {
    const Scaling s;
    PF_CUDNN_CHECK(cudnn().cudnnConvolutionForward(c.handle, s.one(c), c.x_desc.get(), c.x.tensor.data_ptr(),
                                                   c.w_desc.get(), c.w.tensor.data_ptr(), c.conv.get(), a, ws,
                                                   ws_size, s.zero(c), c.y_desc.get(), c.y.tensor.data_ptr()));
  }
};

template <>
struct Api<Kind::BackwardData> {
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static const char* name(Algo a) {
    switch (a) {
      case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "algo_0";
      case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "algo_1";
      case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "fft";
      case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return "fft_tiling";
      case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "winograd";
      case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return "winograd_nonfused";
      default: return nullptr;
    }
  }
  // Here x is dx (written) and y is dy (read).
  static int max_count(const Call& c) {
    int n = 0;
    PF_CUDNN_CHECK(cudnn().cudnnGetConvolutionBackwardDataAlgorithmMaxCount(c.handle, &n));
    return n;
  }
  static void heuristics(const Call& c, int capacity, int* n, Perf* out) {
    PF_CUDNN_CHECK(cudnn().cudnnGetConvolutionBackwardDataAlgorithm_v7(
        c.handle, c.w_desc.get(), c.y_desc.get(), c.conv.get(), c.x_desc.get(), capacity, n, out));
  }
  static void find(const Call& c, int capacity, int* n, Perf* out, void* ws, size_t ws_size) {
    PF_CUDNN_CHECK(cudnn().cudnnFindConvolutionBackwardDataAlgorithmEx(
        c.handle, c.w_desc.get(), c.w.tensor.data_ptr(), c.y_desc.get(), c.y.tensor.data_ptr(), c.conv.get(),
        c.x_desc.get(), c.x.tensor.data_ptr(), capacity, n, out, ws, ws_size));
  }
  static size_t workspace(const Call& c, Algo a) {
    size_t bytes = 0;
    PF_CUDNN_CHECK(cudnn().cudnnGetConvolutionBackwardDataWorkspaceSize(c.handle, c.w_desc.get(), c.y_desc.get(),
                                                                        c.conv.get(), c.x_desc.get(), a, &bytes));
    return bytes;
  }
  static void run(const Call& c, Algo a, void* ws, size_t ws_size) {
    const Scaling s;
    PF_CUDNN_CHECK(cudnn().cudnnConvolutionBackwardData(c.handle, s.one(c), c.w_desc.get(), c.w.tensor.data_ptr(),
                                                        c.y_desc.get(), c.y.tensor.data_ptr(), c.conv.get(), a, ws,
                                                        ws_size, s.zero(c), c.x_desc.get(), c.x.tensor.data_ptr()));
  }
};

template <>
struct Api<Kind::BackwardFilter> {
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static const char* name(Algo a) {
    switch (a) {
      case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return "algo_0";
      case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return "algo_1";
      case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return "fft";
      case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return "algo_3";
      case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD: return "winograd";
      case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: return "winograd_nonfused";
      case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return "fft_tiling";
      default: return nullptr;
    }
  }
  // Here w is dw (written), x is read and y is dy (read).
  static int max_count(const Call& c) {
    int n = 0;
    PF_CUDNN_CHECK(cudnn().cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(c.handle, &n));
    return n;
  }
  static void heuristics(const Call& c, int capacity, int* n, Perf* out) {
    PF_CUDNN_CHECK(cudnn().cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        c.handle, c.x_desc.get(), c.y_desc.get(), c.conv.get(), c.w_desc.get(), capacity, n, out));
  }
  static void find(const Call& c, int capacity, int* n, Perf* out, void* ws, size_t ws_size) {
    PF_CUDNN_CHECK(cudnn().cudnnFindConvolutionBackwardFilterAlgorithmEx(
        c.handle, c.x_desc.get(), c.x.tensor.data_ptr(), c.y_desc.get(), c.y.tensor.data_ptr(), c.conv.get(),
        c.w_desc.get(), c.w.tensor.data_ptr(), capacity, n, out, ws, ws_size));
  }
  static size_t workspace(const Call& c, Algo a) {
    size_t bytes = 0;
    PF_CUDNN_CHECK(cudnn().cudnnGetConvolutionBackwardFilterWorkspaceSize(c.handle, c.x_desc.get(), c.y_desc.get(),
                                                                          c.conv.get(), c.w_desc.get(), a, &bytes));
    return bytes;
  }
  static void run(const Call& c, Algo a, void* ws, size_t ws_size) {
    const Scaling s;
    PF_CUDNN_CHECK(cudnn().cudnnConvolutionBackwardFilter(c.handle, s.one(c), c.x_desc.get(), c.x.tensor.data_ptr(),
                                                          c.y_desc.get(), c.y.tensor.data_ptr(), c.conv.get(), a, ws,
                                                          ws_size, s.zero(c), c.w_desc.get(), c.w.tensor.data_ptr()));
  }
};

// "implicit_precomp_gemm:tensor_op": an algorithm and the math type it runs with, as the cache
// file and `plugflow.info --algos` show it.
template <Kind K>
std::string algo_name(typename Api<K>::Algo a, cudnnMathType_t m) {
  const char* n = Api<K>::name(a);
  return std::string(n ? n : "algo" + std::to_string(static_cast<int>(a))) + ":" + math_name(m);
}

// The algorithm and math type of a name algo_name<K> made; nothing for another name.
template <Kind K>
std::optional<std::pair<typename Api<K>::Algo, cudnnMathType_t>> parse_algo_name(const std::string& name) {
  for (int a = 0; a < Api<K>::kCount; ++a)
    for (cudnnMathType_t m : {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
                              CUDNN_FMA_MATH}) {
      const auto algo = static_cast<typename Api<K>::Algo>(a);
      if (algo_name<K>(algo, m) == name) return std::pair(algo, m);
    }
  return std::nullopt;
}

bool math_allowed(const Call& c, cudnnMathType_t m) {
  return c.dtype != DType::Float32 || c.allow_tf32 || m == CUDNN_FMA_MATH;
}

// Whether cuDNN's result is one this call may run: it succeeded, fits the workspace limit, and
// keeps float32 off TF32 unless allowed (the check PyTorch asserts).
template <typename Perf>
bool acceptable(const Call& c, const Perf& p) {
  return p.status == CUDNN_STATUS_SUCCESS && p.memory <= c.workspace_limit && math_allowed(c, p.mathType);
}

// Chooses the algorithm of `c` and runs it.
template <Kind K>
void run_call(Call& c, const KernelContext& ctx, const KernelScope& scope) {
  using A = Api<K>;
  using Perf = typename A::Perf;
  // The result arrays hold cudnnGetConvolution*AlgorithmMaxCount entries, which the cuDNN API
  // documents as the most _v7 and Find*Ex return: it counts each algorithm's tensor-core variant
  // apart, so *_ALGO_COUNT entries could cut the list short (and a cached choice missing from a
  // cut list would be searched again on every run).
  const int capacity = A::max_count(c);
  // cuDNN's heuristic list: what the heuristic strategy picks from and what a cached entry must
  // still be in.
  std::optional<std::vector<Perf>> listed;
  const auto heuristic_list = [&]() -> const std::vector<Perf>& {
    if (!listed) {
      std::vector<Perf> perf(static_cast<size_t>(capacity));
      int n = 0;
      A::heuristics(c, capacity, &n, perf.data());
      listed.emplace();
      for (int i = 0; i < n; ++i)
        if (acceptable(c, perf[i])) listed->push_back(perf[i]);
    }
    return *listed;
  };
  std::map<std::string, double> measured;  // seconds, from cudnnFind*AlgorithmEx
  algo_search::AlgoSource source;
  source.heuristic = [&]() -> std::optional<std::string> {
    const auto& list = heuristic_list();
    if (list.empty()) return std::nullopt;
    return algo_name<K>(list[0].algo, list[0].mathType);
  };
  // A cached name is usable while cuDNN still lists its algorithm as runnable here.
  source.usable = [&](const std::string& name) {
    const auto parsed = parse_algo_name<K>(name);
    if (!parsed || !math_allowed(c, parsed->second)) return false;
    return std::any_of(heuristic_list().begin(), heuristic_list().end(),
                       [&](const Perf& p) { return p.algo == parsed->first; });
  };
  source.candidates = [&] {
    // One workspace that fits every listed algorithm (all within the limit); when the device
    // cannot spare it, cuDNN times only the algorithms that need none.
    size_t ws_size = 0;
    for (const Perf& p : heuristic_list()) ws_size = std::max(ws_size, p.memory);
    std::unique_ptr<Workspace> ws;
    try {
      ws = std::make_unique<Workspace>(scope.device, ws_size);
    } catch (const DeviceError&) {
      ws_size = 0;
    }
    std::vector<Perf> perf(static_cast<size_t>(capacity));
    int n = 0;
    A::find(c, capacity, &n, perf.data(), ws ? ws->template as<void>() : nullptr, ws_size);
    std::vector<std::string> names;  // cuDNN's order: fastest first
    for (int i = 0; i < n; ++i) {
      if (!acceptable(c, perf[i])) continue;
      const std::string name = algo_name<K>(perf[i].algo, perf[i].mathType);
      if (measured.count(name)) continue;
      names.push_back(name);
      measured[name] = perf[i].time / 1000.0;  // cuDNN reports milliseconds
    }
    return names;
  };
  source.time = [&](const std::string& name) -> std::optional<double> {
    const auto it = measured.find(name);
    if (it == measured.end()) return std::nullopt;
    return it->second;
  };
  source.repetitions = 1;  // cuDNN measured each algorithm itself
  source.warm_up = false;

  const std::string key = c.key();
  const auto choice = cudnn_selector(scope.device)
                          .choose(conv_strategy(ctx), op_name(K, c.rank) + " " + key,
                                  current_config().optimizations.algo_cache, source);
  if (!choice)
    PF_THROW(DeviceError, "cuda ", op_name(K, c.rank), ": cuDNN offers no algorithm for ", key, " within the workspace limit of ",
             c.workspace_limit >> 20, " MiB (plugflow.backends.cudnn.workspace_limit_mb)");
  const auto algo = parse_algo_name<K>(choice->algorithm);
  PF_CHECK(algo, "cuda ", op_name(K, c.rank), ": unknown cuDNN algorithm '", choice->algorithm, "'");
  if (choice->fresh)
    report_algo_choice(AlgoChoice{"cuda", op_name(K, c.rank), key, choice->algorithm, "cudnn " + cudnn_version(),
                                  choice->source});

  // The algorithm runs with the math type cuDNN measured or proposed it with.
  PF_CUDNN_CHECK(cudnn().cudnnSetConvolutionMathType(c.conv.get(), algo->second));
  const size_t ws_size = A::workspace(c, algo->first);
  Workspace ws(scope.device, ws_size);
  A::run(c, algo->first, ws.template as<void>(), ws_size);
}

template <Kind K>
void conv_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Roles r = roles(K, ctx);
  const Tensor& out = ctx.output(0);
  const int rank = static_cast<int>(out.dim()) - 2;
  for (const Tensor& t : ctx.inputs)
    PF_CHECK(t.dtype() == out.dtype(), "cuda ", op_name(K, rank), ": expected one dtype, got ", dtype_name(t.dtype()), " and ",
             dtype_name(out.dtype()));
  if (out.numel() == 0) return;
  const size_t out_bytes = static_cast<size_t>(out.numel()) * out.itemsize();
  const bool has_bias = K == Kind::Forward && ctx.inputs.size() > 2;
  // An empty reduction (no batch, no input channels): zeros, plus the bias.
  const bool empty = K == Kind::BackwardData ? (r.y->numel() == 0 || r.w->numel() == 0)
                                             : (r.x->numel() == 0 || (K == Kind::Forward ? r.w->numel() == 0
                                                                                          : r.y->numel() == 0));

  const ConvSettings settings = conv_settings();
  Call c{K,
         rank,
         out.dtype(),
         cudnn_types(out.dtype()),
         settings.allow_tf32,
         settings.workspace_limit_bytes,
         ctx.attr<Shape>("stride"),
         ctx.attr<Shape>("padding"),
         ctx.attr<Shape>("dilation"),
         ctx.attr<int64_t>("groups"),
         image_operand(*r.x, K == Kind::BackwardData, scope.stream),
         weight_operand(*r.w, K == Kind::BackwardFilter, scope.stream),
         image_operand(*r.y, K == Kind::Forward, scope.stream),
         {},
         {},
         {},
         {},
         nullptr};
  Image& result = K == Kind::Forward ? c.y : K == Kind::BackwardData ? c.x : c.w;
  CudnnLease lease(scope.device, scope.stream);
  c.handle = lease.get();
  if (empty) {
    PF_CUDA_CHECK(cudaMemsetAsync(result.tensor.data_ptr(), 0, out_bytes, scope.stream));
  } else {
    describe(c);
    run_call<K>(c, ctx, scope);
  }
  if (has_bias) {
    Tensor bias = ctx.input(2);
    if (bias.numel() > 1 && bias.strides()[0] != 1) {  // an expanded or strided view
      Tensor dense = Tensor::empty(bias.sizes(), bias.dtype(), bias.device());
      launch_copy(dense, bias, scope.stream);
      bias = dense;
    }
    // (1, C, 1, ...): broadcast over the batch and every spatial position
    Shape bias_sizes(out.dim(), 1), bias_strides(out.dim(), 1);
    bias_sizes[1] = bias.numel();
    bias_strides[0] = bias.numel();
    TensorDesc bias_desc;
    set_tensor_desc(bias_desc, c.types.data, bias_sizes, bias_strides);
    if (empty) set_image_desc(c.y_desc, c.y, c.types.data);
    const Scaling s;
    PF_CUDNN_CHECK(cudnn().cudnnAddTensor(c.handle, s.one(c), bias_desc.get(), bias.data_ptr(), s.one(c),
                                          c.y_desc.get(), c.y.tensor.data_ptr()));
  }
  if (result.copied) launch_copy(out, result.tensor, scope.stream);
}

}  // namespace

std::vector<KernelDef> conv_kernels() {
  const std::vector<DType> floating{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  // One kernel per kind serves both ranks: it reads the rank from its output.
  return {{"conv2d", floating, &conv_kernel<Kind::Forward>},
          {"conv2d_grad_input", floating, &conv_kernel<Kind::BackwardData>},
          {"conv2d_grad_weight", floating, &conv_kernel<Kind::BackwardFilter>},
          {"conv3d", floating, &conv_kernel<Kind::Forward>},
          {"conv3d_grad_input", floating, &conv_kernel<Kind::BackwardData>},
          {"conv3d_grad_weight", floating, &conv_kernel<Kind::BackwardFilter>}};
}

}  // namespace plugflow::cuda
