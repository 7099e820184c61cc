// conv2d_fused on cuDNN 9's graph ("backend") API: the operation graph
//
//   y = act(conv(x, w) + bias + z)      (each term only when the call has it)
//
// is one CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR followed by
// CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTORs (CUDNN_POINTWISE_ADD of the bias, broadcast as
// (1, O, 1, 1), CUDNN_POINTWISE_ADD of the addend, then CUDNN_POINTWISE_RELU_FWD or
// CUDNN_POINTWISE_SWISH_FWD), chained through virtual float tensors, so the epilogue runs in
// the convolution's kernel and the intermediate values never reach memory. cuDNN's engine
// heuristics (CUDNN_HEUR_MODE_A) list engine configurations; each becomes an execution plan
// when it finalizes (runtime-fused engines compile their kernel then), and runs with a variant
// pack of the call's pointers and a workspace from the caching allocator.
//
// Choice of the configuration, through the plugins' AlgoSelector (plugins/common/algo_search.h)
// as for the plain convolutions (conv.cpp), under the call's conv_algo_search strategy:
// `heuristic` takes the first configuration (in cuDNN's order) whose plan finalizes within the
// workspace limit; `exhaustive` times the plans of the first conv_fusion::kMaxTimedPlans such
// configurations on the call's own buffers and keeps the fastest (persisted in algo_cache under
// the cuDNN section, by engine and knob choices). Engines are filtered as PyTorch filters them
// (conv_fusion::engine_permitted: float32 off TF32 unless allowed). The finalized plan, or the
// decision to run composed, is kept per problem key (shapes, layouts, pointer alignments,
// dtype, TF32, workspace limit, epilogue, strategy) for the process's life, and reported once
// through report_algo_choice.
//
// Operands are passed with their real layouts (packed NCHW or NHWC; other strides through a
// contiguous copy, as conv.cpp does), and cuDNN's finalize decides what its engines take:
// runtime fusion generally wants NHWC and 16-bit data. A graph cuDNN does not support
// (a CUDNN_STATUS_NOT_SUPPORTED* status from the graph or the heuristics, or no plan that
// finalizes) sends the problem to the composed path; any other cuDNN error is a DeviceError
// naming the step and cuDNN's status.
#include "cudnn_fused_conv.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "conv_common.h"
#include "conv_fusion.h"
#include "cudnn.h"
#include "kernel_common.h"
#include "launchers.h"
#include "plugflow/algo_choice.h"
#include "plugflow/conv_settings.h"
#include "plugflow/runtime.h"

namespace plugflow::cuda {
namespace {

[[noreturn]] void throw_status(cudnnStatus_t st, const std::string& what) {
  PF_THROW(DeviceError, "cuda conv2d_fused: cuDNN error ", cudnn().cudnnGetErrorString(st), " (",
           static_cast<int>(st), ") ", what);
}

// A problem cuDNN's graph API does not take: the call runs composed.
struct Unsupported {
  std::string why;
};

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    const cudnnStatus_t st = cudnn().cudnnBackendCreateDescriptor(type, &d_);
    if (st != CUDNN_STATUS_SUCCESS) throw_status(st, "creating a backend descriptor of type " + std::to_string(type));
  }
  ~Desc() {
    if (d_ != nullptr) cudnn().cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& other) noexcept : d_(std::exchange(other.d_, nullptr)) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values,
           const char* what) {
    const cudnnStatus_t st = cudnn().cudnnBackendSetAttribute(d_, name, type, count, values);
    if (st != CUDNN_STATUS_SUCCESS) throw_status(st, std::string("setting ") + what);
  }
  // Sets the cuDNN handle where the release still takes one (CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
  // CUDNN_ATTR_EXECUTION_PLAN_HANDLE): marked deprecated in recent cuDNN 9 headers (the handle
  // comes with cudnnBackendExecute, the device is the current one), needed by earlier cuDNN 9
  // releases. A release that refuses it is no error; one that needed it fails to finalize.
  void set_handle(cudnnBackendAttributeName_t name, cudnnHandle_t handle) {
    cudnn().cudnnBackendSetAttribute(d_, name, CUDNN_TYPE_HANDLE, 1, &handle);
  }
  // Finalizes a descriptor of the graph: a NOT_SUPPORTED status means the problem runs composed,
  // any other failure is an error.
  void finalize(const char* what) {
    const cudnnStatus_t st = cudnn().cudnnBackendFinalize(d_);
    if (st == CUDNN_STATUS_SUCCESS) return;
    if (CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED)
      throw Unsupported{std::string(what) + ": " + cudnn().cudnnGetErrorString(st)};
    throw_status(st, std::string("finalizing ") + what);
  }
  // Finalizes and returns the status (an execution plan that does not finalize is skipped).
  cudnnStatus_t try_finalize() { return cudnn().cudnnBackendFinalize(d_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// desc.set(ATTRIBUTE, ...) with the attribute's name in the error message.
#define PF_SET_ATTR(desc, attribute, type, count, values) (desc).set(attribute, type, count, values, #attribute)

// Reads one attribute; an error names it.
#define PF_GET_ATTR(desc, attribute, type, requested, count, values)                                          \
  do {                                                                                                       \
    const cudnnStatus_t pf_st_ = cudnn().cudnnBackendGetAttribute(desc, attribute, type, requested, count, values); \
    if (pf_st_ != CUDNN_STATUS_SUCCESS) throw_status(pf_st_, "reading " #attribute);                          \
  } while (0)

// The largest power of two up to 16 that divides the address (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT).
int64_t byte_alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int64_t alignment = 1;
  while (alignment < 16 && address % static_cast<uintptr_t>(alignment * 2) == 0) alignment *= 2;
  return alignment;
}

// The tensors' unique ids in the graph and the variant pack.
enum Uid : int64_t { kX = 1, kW, kBias, kAddend, kY, kConvOut, kBiasOut, kAddendOut };

// The call's operands as cuDNN sees them.
struct Operands {
  Image x, w, y;  // y: the output, or a temporary when the output is the addend's memory or strided
  Tensor bias;    // dense (O), or undefined
  std::optional<Image> z;
  std::string activation;
};

// A backend tensor descriptor (CUDNN_BACKEND_TENSOR_DESCRIPTOR), finalized.
Desc tensor_desc(int64_t uid, cudnnDataType_t type, const Shape& dims, const Shape& strides, int64_t alignment,
                 bool is_virtual) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  PF_SET_ATTR(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  PF_SET_ATTR(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  PF_SET_ATTR(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data());
  PF_SET_ATTR(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data());
  PF_SET_ATTR(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  if (is_virtual) {
    const bool yes = true;
    PF_SET_ATTR(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  t.finalize("a tensor descriptor");
  return t;
}

Desc image_desc(int64_t uid, cudnnDataType_t type, const Image& im) {
  return tensor_desc(uid, type, im.tensor.sizes(), packed_strides(im.tensor.sizes(), im.nhwc),
                     byte_alignment(im.tensor.data_ptr()), false);
}

// The operation graph and every descriptor it was built from (kept alive with it).
struct OpGraph {
  std::vector<Desc> parts;
  cudnnBackendDescriptor_t get() const { return parts.back().get(); }
};

// Builds and finalizes the operation graph of `ops` (Unsupported when cuDNN refuses it).
std::shared_ptr<const OpGraph> build_graph(const Operands& ops, const ConvProblem& p, cudnnHandle_t handle) {
  auto g = std::make_shared<OpGraph>();
  auto keep = [&](Desc d) -> cudnnBackendDescriptor_t {
    g->parts.push_back(std::move(d));
    return g->parts.back().get();
  };
  const cudnnDataType_t data = cudnn_types(p.dtype).data;
  const cudnnDataType_t accumulate = CUDNN_DATA_FLOAT;  // float16 / bfloat16 / float32: float arithmetic
  const Shape& y_dims = ops.y.tensor.sizes();
  const Shape between_strides = packed_strides(y_dims, ops.y.nhwc);  // the virtual tensors' layout
  const auto virtual_tensor = [&](int64_t uid) {
    return keep(tensor_desc(uid, accumulate, y_dims, between_strides, 16, true));
  };

  const cudnnBackendDescriptor_t x = keep(image_desc(kX, data, ops.x));
  const cudnnBackendDescriptor_t w = keep(image_desc(kW, data, ops.w));
  const cudnnBackendDescriptor_t y = keep(image_desc(kY, data, ops.y));

  // The convolution: cross-correlation with float accumulation; groups follow from the
  // tensors (x has C channels, w has C / groups).
  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t spatial = static_cast<int64_t>(p.stride.size());
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  PF_SET_ATTR(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &accumulate);
  PF_SET_ATTR(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  PF_SET_ATTR(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  PF_SET_ATTR(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, spatial, p.dilation.data());
  PF_SET_ATTR(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, spatial, p.stride.data());
  PF_SET_ATTR(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, spatial, p.padding.data());
  PF_SET_ATTR(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, spatial, p.padding.data());
  conv.finalize("the convolution descriptor");
  const cudnnBackendDescriptor_t conv_desc = keep(std::move(conv));

  std::vector<cudnnBackendDescriptor_t> operations;
  // The chain's last operation writes y; the others write virtual tensors.
  const bool has_act = ops.activation != "none";
  const int steps = 1 + ops.bias.defined() + ops.z.has_value() + has_act;
  int step = 0;
  const auto output_of_step = [&](int64_t virtual_uid) { return ++step == steps ? y : virtual_tensor(virtual_uid); };

  Desc conv_op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float one = 1.0f, zero = 0.0f;  // alpha and beta in the float compute type
  cudnnBackendDescriptor_t acc = output_of_step(kConvOut);
  PF_SET_ATTR(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  PF_SET_ATTR(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
  PF_SET_ATTR(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &acc);
  PF_SET_ATTR(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
              &conv_desc);
  PF_SET_ATTR(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one);
  PF_SET_ATTR(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero);
  conv_op.finalize("the convolution operation");
  operations.push_back(keep(std::move(conv_op)));

  // acc <- mode(acc[, b]) as the next operation of the chain.
  const auto pointwise = [&](cudnnPointwiseMode_t pw_mode, const cudnnBackendDescriptor_t* b, int64_t virtual_uid) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    PF_SET_ATTR(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &pw_mode);
    PF_SET_ATTR(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &accumulate);
    const double zero_d = 0.0, one_d = 1.0;
    if (pw_mode == CUDNN_POINTWISE_RELU_FWD) {  // max(x, 0): clipped below at 0 with slope 0, no upper clip
      PF_SET_ATTR(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &zero_d);
      PF_SET_ATTR(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, CUDNN_TYPE_DOUBLE, 1, &zero_d);
    }
    if (pw_mode == CUDNN_POINTWISE_SWISH_FWD)  // silu: x * sigmoid(beta x) with beta 1
      PF_SET_ATTR(pw, CUDNN_ATTR_POINTWISE_SWISH_BETA, CUDNN_TYPE_DOUBLE, 1, &one_d);
    pw.finalize("a pointwise descriptor");
    const cudnnBackendDescriptor_t pw_desc = keep(std::move(pw));
    const cudnnBackendDescriptor_t out = output_of_step(virtual_uid);
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    PF_SET_ATTR(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw_desc);
    PF_SET_ATTR(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &acc);
    if (b != nullptr) PF_SET_ATTR(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, b);
    PF_SET_ATTR(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out);
    op.finalize("a pointwise operation");
    operations.push_back(keep(std::move(op)));
    acc = out;
  };
  if (ops.bias.defined()) {
    // (1, O, 1, 1): broadcast over the batch and every position
    const int64_t o = ops.bias.numel();
    const cudnnBackendDescriptor_t b =
        keep(tensor_desc(kBias, data, {1, o, 1, 1}, {o, 1, 1, 1}, byte_alignment(ops.bias.data_ptr()), false));
    pointwise(CUDNN_POINTWISE_ADD, &b, kBiasOut);
  }
  if (ops.z) {
    const cudnnBackendDescriptor_t z = keep(image_desc(kAddend, data, *ops.z));
    pointwise(CUDNN_POINTWISE_ADD, &z, kAddendOut);
  }
  // relu: RELU_FWD; silu: SWISH_FWD. The chain's last step, so it writes y (no virtual tensor).
  if (has_act) pointwise(ops.activation == "relu" ? CUDNN_POINTWISE_RELU_FWD : CUDNN_POINTWISE_SWISH_FWD, nullptr, 0);

  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  PF_SET_ATTR(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
              static_cast<int64_t>(operations.size()), operations.data());
  graph.set_handle(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle);
  graph.finalize("the operation graph");
  keep(std::move(graph));
  return g;
}

// One entry of cuDNN's heuristic list.
struct Candidate {
  std::string name;  // conv_fusion::engine_config_name
  bool permitted;    // conv_fusion::engine_permitted
  std::unique_ptr<Desc> config;
};

// An engine configuration with its cache name and whether this call may run it.
Candidate describe(std::unique_ptr<Desc> config, DType dtype, bool allow_tf32) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  cudnnBackendDescriptor_t engine_raw = engine.get();
  PF_GET_ATTR(config->get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine_raw);
  int64_t index = -1;
  PF_GET_ATTR(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);

  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t note_count = 0;
  PF_GET_ATTR(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
              CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &note_count, notes);
  conv_fusion::EngineNotes flags;
  for (int64_t i = 0; i < std::min<int64_t>(note_count, CUDNN_NUMERICAL_NOTE_TYPE_COUNT); ++i) {
    flags.tensor_core |= notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
    flags.down_convert_inputs |= notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
    flags.reduced_precision_reduction |= notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
  }

  // The knob choices name the configuration among the engine's variants.
  std::vector<Desc> choices;
  std::vector<cudnnBackendDescriptor_t> choices_raw;
  for (int k = 0; k < CUDNN_KNOB_TYPE_COUNTS; ++k) {
    choices.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    choices_raw.push_back(choices.back().get());
  }
  int64_t choice_count = 0;
  PF_GET_ATTR(config->get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS,
              &choice_count, choices_raw.data());
  std::vector<std::pair<int64_t, int64_t>> knobs;
  for (int64_t k = 0; k < std::min<int64_t>(choice_count, CUDNN_KNOB_TYPE_COUNTS); ++k) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0;
    PF_GET_ATTR(choices_raw[k], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n, &type);
    PF_GET_ATTR(choices_raw[k], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &n, &value);
    knobs.emplace_back(static_cast<int64_t>(type), value);
  }
  return {conv_fusion::engine_config_name(index, knobs), conv_fusion::engine_permitted(dtype, allow_tf32, flags),
          std::move(config)};
}

// cuDNN's engine configurations for `graph`, in the heuristic's order (CUDNN_HEUR_MODE_A).
std::vector<Candidate> heuristic_list(const OpGraph& graph, DType dtype, bool allow_tf32) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendDescriptor_t g = graph.get();
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  PF_SET_ATTR(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
  PF_SET_ATTR(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  heur.finalize("the engine heuristics");
  int64_t count = 0;
  PF_GET_ATTR(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
  std::vector<std::unique_ptr<Desc>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  int64_t returned = 0;
  PF_GET_ATTR(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, raw.data());
  configs.resize(static_cast<size_t>(std::clamp<int64_t>(returned, 0, count)));
  std::vector<Candidate> list;
  for (auto& config : configs) list.push_back(describe(std::move(config), dtype, allow_tf32));
  return list;
}

// A finalized execution plan and what it needs to stay valid.
struct FusedPlan {
  std::shared_ptr<const OpGraph> graph;
  std::unique_ptr<Desc> config;
  Desc plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
  int64_t workspace = 0;
  std::string name;
};

// The plan of `c`, or nothing (and why, in `refused`) when it does not finalize or needs more
// workspace than `limit`.
std::unique_ptr<FusedPlan> finalize_plan(const std::shared_ptr<const OpGraph>& graph, Candidate& c,
                                         cudnnHandle_t handle, size_t limit, std::vector<std::string>& refused) {
  auto p = std::make_unique<FusedPlan>();
  const cudnnBackendDescriptor_t config = c.config->get();
  PF_SET_ATTR(p->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config);
  p->plan.set_handle(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle);
  if (const cudnnStatus_t st = p->plan.try_finalize(); st != CUDNN_STATUS_SUCCESS) {
    refused.push_back(c.name + ": " + cudnn().cudnnGetErrorString(st));
    return nullptr;
  }
  PF_GET_ATTR(p->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, nullptr, &p->workspace);
  if (p->workspace < 0 || static_cast<size_t>(p->workspace) > limit) {
    refused.push_back(c.name + ": workspace of " + std::to_string(p->workspace) + " bytes");
    return nullptr;
  }
  p->graph = graph;
  p->config = std::move(c.config);
  p->name = c.name;
  return p;
}

// Runs `plan` on the operands' memory.
void execute(const FusedPlan& plan, const Operands& ops, cudnnHandle_t handle, int device) {
  std::vector<int64_t> uids{kX, kW, kY};
  std::vector<void*> pointers{ops.x.tensor.data_ptr(), ops.w.tensor.data_ptr(), ops.y.tensor.data_ptr()};
  if (ops.bias.defined()) {
    uids.push_back(kBias);
    pointers.push_back(ops.bias.data_ptr());
  }
  if (ops.z) {
    uids.push_back(kAddend);
    pointers.push_back(ops.z->tensor.data_ptr());
  }
  Workspace ws(device, static_cast<size_t>(plan.workspace));
  void* ws_ptr = plan.workspace > 0 ? ws.as<void>() : nullptr;
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const auto n = static_cast<int64_t>(uids.size());
  PF_SET_ATTR(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data());
  PF_SET_ATTR(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers.data());
  PF_SET_ATTR(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws_ptr);
  const cudnnStatus_t st = pack.try_finalize();
  if (st != CUDNN_STATUS_SUCCESS) throw_status(st, "finalizing the variant pack");
  const cudnnStatus_t run = cudnn().cudnnBackendExecute(handle, plan.plan.get(), pack.get());
  if (run != CUDNN_STATUS_SUCCESS) throw_status(run, "executing plan " + plan.name);
}

// Seconds one run of `plan` takes on the stream (the exhaustive search's timer).
double time_plan(const FusedPlan& plan, const Operands& ops, cudnnHandle_t handle, int device, cudaStream_t stream) {
  struct Events {
    cudaEvent_t start = nullptr, stop = nullptr;
    Events() {
      PF_CUDA_CHECK(cudaEventCreate(&start));
      PF_CUDA_CHECK(cudaEventCreate(&stop));
    }
    ~Events() {
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
  } events;
  PF_CUDA_CHECK(cudaEventRecord(events.start, stream));
  execute(plan, ops, handle, device);
  PF_CUDA_CHECK(cudaEventRecord(events.stop, stream));
  PF_CUDA_CHECK(cudaEventSynchronize(events.stop));
  float ms = 0;
  PF_CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
  return ms / 1000.0;
}

// What a problem runs: its plan, or nullptr for the composed path.
struct PlanCache {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const FusedPlan>> plans;
};
PlanCache& plan_cache() {
  // Never destroyed: the process may end after the CUDA runtime is torn down (as the handles).
  static PlanCache* cache = new PlanCache;
  return *cache;
}

// Decides the problem `key` of `ops`: the chosen plan, or nullptr (and why) for the composed path.
std::shared_ptr<const FusedPlan> plan_problem(const Operands& ops, const ConvProblem& p, const std::string& key,
                                              const KernelContext& ctx, const KernelScope& scope,
                                              cudnnHandle_t handle) {
  const algo_search::Strategy strategy = conv_strategy(ctx);
  const auto composed = [&](const std::string& why) {
    report_algo_choice(AlgoChoice{"cuda", "conv2d_fused", key, "composed", "cudnn " + cudnn_version() + ": " + why,
                                  strategy == algo_search::Strategy::Exhaustive ? "search" : "heuristic"});
    return std::shared_ptr<const FusedPlan>();
  };
  std::shared_ptr<const OpGraph> graph;
  std::vector<Candidate> list;
  try {
    graph = build_graph(ops, p, handle);
    list = heuristic_list(*graph, p.dtype, p.allow_tf32);
  } catch (const Unsupported& u) {
    return composed(u.why);
  }

  std::map<std::string, std::unique_ptr<FusedPlan>> finalized;  // by name; an empty entry did not finalize
  std::vector<std::string> refused;                               // why the others did not
  const auto plan_of = [&](const std::string& name) -> FusedPlan* {
    if (const auto it = finalized.find(name); it != finalized.end()) return it->second.get();
    for (Candidate& c : list)
      if (c.name == name && c.permitted && c.config)
        return (finalized[name] = finalize_plan(graph, c, handle, p.workspace_limit, refused)).get();
    return nullptr;
  };
  algo_search::AlgoSource source;
  source.heuristic = [&]() -> std::optional<std::string> {
    for (const Candidate& c : list)
      if (c.permitted && plan_of(c.name) != nullptr) return c.name;
    return std::nullopt;
  };
  source.candidates = [&] {
    std::vector<std::string> names;
    for (const Candidate& c : list) {
      if (names.size() == conv_fusion::kMaxTimedPlans) break;
      if (c.permitted && plan_of(c.name) != nullptr) names.push_back(c.name);
    }
    return names;
  };
  source.usable = [&](const std::string& name) { return plan_of(name) != nullptr; };
  source.time = [&](const std::string& name) -> std::optional<double> {
    const FusedPlan* plan = plan_of(name);
    if (plan == nullptr) return std::nullopt;
    return time_plan(*plan, ops, handle, scope.device, scope.stream);
  };
  const auto choice = cudnn_selector(scope.device)
                          .choose(strategy, "conv2d_fused " + key, current_config().optimizations.algo_cache, source);
  FusedPlan* chosen = choice ? plan_of(choice->algorithm) : nullptr;
  if (chosen == nullptr) {
    const auto permitted = std::count_if(list.begin(), list.end(), [](const Candidate& c) { return c.permitted; });
    std::string why = "of " + std::to_string(list.size()) + " engine configurations (" + std::to_string(permitted) +
                      " permitted) no plan finalizes within the workspace limit";
    for (size_t i = 0; i < refused.size() && i < 4; ++i) why += (i == 0 ? ": " : "; ") + refused[i];
    return composed(why);
  }
  const std::string graph_ops = std::string("conv") + (ops.bias.defined() ? " + bias" : "") +
                                (ops.z ? " + addend" : "") + (ops.activation == "none" ? "" : " + " + ops.activation);
  report_algo_choice(AlgoChoice{"cuda", "conv2d_fused", key, chosen->name,
                                "cudnn " + cudnn_version() + " graph: " + graph_ops, choice->source});
  return std::shared_ptr<const FusedPlan>(std::move(finalized[chosen->name]));
}

// The problem of a conv2d_fused call.
ConvProblem problem_of(const KernelContext& ctx) {
  const ConvSettings settings = conv_settings();
  return {ctx.output(0).dtype(),
          settings.allow_tf32,
          settings.workspace_limit_bytes,
          ctx.attr<Shape>("stride"),
          ctx.attr<Shape>("padding"),
          ctx.attr<Shape>("dilation"),
          ctx.attr<int64_t>("groups")};
}

// The operands' layouts as cuDNN will see them, before any copy (`copied`: one is needed).
Operands layouts_of(const KernelContext& ctx) {
  const bool has_bias = ctx.attr<bool>("has_bias"), has_addend = ctx.attr<bool>("has_addend");
  const Tensor& out = ctx.output(0);
  Operands ops;
  ops.activation = ctx.attr<std::string>("activation");
  ops.x = image_layout(ctx.input(0));
  ops.w = image_layout(ctx.input(1));
  if (has_bias) ops.bias = ctx.input(2);
  if (has_addend) ops.z = image_layout(ctx.inputs.back());
  ops.y = image_layout(out);
  // The output is the addend's memory (the graph's in-place sum over a dying addend): cuDNN's
  // epilogue is not promised to read each addend element before writing it, so the graph writes
  // a temporary in the output's layout, copied back.
  ops.y.copied |= has_addend && ctx.inputs.back().data_ptr() == out.data_ptr();
  return ops;
}

}  // namespace

std::optional<std::string> check_conv2d_fused_graph(const KernelContext& ctx) {
  try {
    build_graph(layouts_of(ctx), problem_of(ctx), nullptr);
  } catch (const Unsupported& u) {
    return u.why;
  }
  return std::nullopt;
}

bool run_conv2d_fused_cudnn(KernelContext& ctx) {
  const bool has_bias = ctx.attr<bool>("has_bias"), has_addend = ctx.attr<bool>("has_addend");
  const std::string& activation = ctx.attr<std::string>("activation");
  Tensor& out = ctx.output(0);
  if (conv_fusion::refusal({out.dtype(), activation, has_bias, has_addend})) return false;
  // Empty problems (no output, or an empty reduction) are the composed path's: zeros plus the epilogue.
  if (out.numel() == 0 || ctx.input(0).numel() == 0 || ctx.input(1).numel() == 0) return false;

  KernelScope scope(ctx);
  const ConvProblem p = problem_of(ctx);
  // Copies are made only once the problem is known to run fused.
  Operands ops = layouts_of(ctx);
  const bool bias_strided = has_bias && ops.bias.numel() > 1 && ops.bias.strides()[0] != 1;

  // A copy comes from the caching allocator, whose blocks are aligned far beyond 16 bytes.
  const auto alignment = [](const Image& im) { return im.copied ? 16 : byte_alignment(im.tensor.data_ptr()); };
  std::string key = conv_problem_key(p, ops.x, ops.w, ops.y, /*weight_layout=*/true) + (has_bias ? " bias" : "") +
                    (has_addend ? (ops.z->nhwc ? " addend:nhwc" : " addend") : "") + " act=" + activation +
                    " align=" + std::to_string(alignment(ops.x)) + "," + std::to_string(alignment(ops.w)) + "," +
                    std::to_string(alignment(ops.y));
  if (has_bias) key += "," + std::to_string(bias_strided ? 16 : byte_alignment(ops.bias.data_ptr()));
  if (has_addend) key += "," + std::to_string(alignment(*ops.z));
  const bool exhaustive = conv_strategy(ctx) == algo_search::Strategy::Exhaustive;
  const std::string cache_key = std::to_string(scope.device) + (exhaustive ? " exhaustive " : " heuristic ") + key;
  std::shared_ptr<const FusedPlan> plan;
  bool known = false;
  {
    std::lock_guard lock(plan_cache().mutex);
    if (const auto it = plan_cache().plans.find(cache_key); it != plan_cache().plans.end()) {
      plan = it->second;
      known = true;
    }
  }
  if (known && !plan) return false;

  // Runs fused, or is planned now: the operands in cuDNN's layouts.
  const auto materialize = [&](Image& im, bool is_output) {
    if (!im.copied) return;
    const Tensor& t = im.tensor;
    const MemoryFormat format = im.nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
    Tensor dense = Tensor::empty(t.sizes(), t.dtype(), t.device(), format);
    if (!is_output) launch_copy(dense, t, scope.stream);
    im.tensor = dense;
  };
  materialize(ops.x, false);
  materialize(ops.w, false);
  if (ops.z) materialize(*ops.z, false);
  materialize(ops.y, true);
  if (bias_strided) {  // an expanded or strided view
    Tensor dense = Tensor::empty(ops.bias.sizes(), ops.bias.dtype(), ops.bias.device());
    launch_copy(dense, ops.bias, scope.stream);
    ops.bias = dense;
  }

  CudnnLease lease(scope.device, scope.stream);
  if (!known) {
    plan = plan_problem(ops, p, key, ctx, scope, lease.get());
    std::lock_guard lock(plan_cache().mutex);
    plan_cache().plans.emplace(cache_key, plan);
  }
  if (!plan) return false;
  execute(*plan, ops, lease.get(), scope.device);
  if (ops.y.copied) launch_copy(out, ops.y.tensor, scope.stream);
  return true;
}

}  // namespace plugflow::cuda
