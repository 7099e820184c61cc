// The decisions of conv2d_fused on cuDNN's fused runtime (cudnn_fused_conv.cpp) that need no
// cuDNN and no GPU: which calls are worth a fused graph, which engines a call may run, and how
// an engine configuration is named in the algorithm cache. Pure functions, tested on any
// machine (tests/cpp/cuda/test_conv_fusion.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plugflow/dtype.h"

namespace plugflow::cuda::conv_fusion {

// The parts of a conv2d_fused call that decide whether a fused graph is tried.
struct Request {
  DType dtype;
  std::string activation;  // the op's attribute: none, relu, gelu, gelu_tanh, silu
  bool has_bias = false;
  bool has_addend = false;
};

// Why the call runs composed (the plain kernels in sequence) without asking cuDNN, or nothing
// when a fused graph is worth building:
// - float64: cuDNN's runtime fusion has no double engines, and the composed path is
//   bit-identical to the unfused graph;
// - gelu and gelu_tanh: cuDNN's GELU_FWD / GELU_APPROX_TANH_FWD are not checked against
//   PyTorch's formulas on a GPU yet;
// - nothing to fuse: no bias, no addend and no activation is the plain convolution.
std::optional<std::string> refusal(const Request& r);

// The numerical notes of a cuDNN engine that matter here.
struct EngineNotes {
  bool tensor_core = false;                  // CUDNN_NUMERICAL_NOTE_TENSOR_CORE
  bool down_convert_inputs = false;          // CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS
  bool reduced_precision_reduction = false;  // CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION
};

// Whether an engine with these notes may run a call of `dtype`, as PyTorch filters cuDNN's
// engines: never one that accumulates in reduced precision (16-bit data accumulates in float),
// and for float32 none on tensor cores or with down-converted inputs (TF32) unless
// `allow_tf32` (plugflow.backends.cudnn.allow_tf32).
bool engine_permitted(DType dtype, bool allow_tf32, const EngineNotes& notes);

// "eng12:k2=1,k11=3": an engine configuration as the algorithm cache stores it, from cuDNN's
// global engine index and its knob choices (knob type, value), in the order given.
std::string engine_config_name(int64_t engine, const std::vector<std::pair<int64_t, int64_t>>& knobs);

// The exhaustive search times at most this many engine configurations, the first of cuDNN's
// heuristic list whose plans finalize: runtime-fused engines compile their kernel while the plan
// finalizes (NVRTC, a noticeable time each), and the list can be long.
inline constexpr size_t kMaxTimedPlans = 8;

}  // namespace plugflow::cuda::conv_fusion
