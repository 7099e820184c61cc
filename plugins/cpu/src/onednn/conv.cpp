// conv2d, conv2d_grad_input and conv2d_grad_weight (docs/kernels.md, "Conv family") on oneDNN
// for float32 and bfloat16, registered with Priority::Optimized over the im2col kernels
// (conv.cpp), which stay the float64 path and this file's fallback for what oneDNN cannot
// express (a transposed convolution's output_padding beyond the stride, mixed dtypes, ...);
// bfloat16 falls back through float32 copies. bfloat16 primitives take bfloat16 operands and
// accumulate in float32 (AVX512_BF16 dot products where the CPU has them).
//
// Each op is one oneDNN convolution primitive: forward, backward_data, backward_weights. The
// primitive chooses its own memory formats (format_tag::any; blocked nChw16c and friends on
// AVX-512), and reorders convert between them and plugflow's strided NCHW tensors. Per problem
// key (shapes, strides, dtype, stride, padding, dilation, groups, bias, the algorithm strategy
// and the thread count), the primitive and its reorders are built once and cached. The weights
// reordered into the primitive's format are kept per weight storage and version once a version
// is used a second time (inference reorders each weight once; training, whose weights change
// every step, keeps no copy).
//
// The algorithm is a strategy of optimizations.conv_algo_search: `heuristic` applies a rule on
// the problem's size (heuristic_algorithm below) and falls back to convolution_auto (oneDNN
// picks) where the rule's algorithm is not implemented; `exhaustive` builds convolution_direct and
// convolution_winograd (where oneDNN implements it for the shape), times both on the call's
// buffers, and keeps the faster. The choice is made by the plugins' shared AlgoSelector
// (plugins/common/algo_search.h), which persists it in optimizations.algo_cache.
// Every choice is reported to the core (plugflow/algo_choice.h) for `plugflow.info --algos`.
//
// Threads: see common.h; the thread count is part of the plan cache key.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "../kernels.h"
#include "../loops.h"
#include "algo_search.h"
#include "common.h"
#include "row_major_outputs.h"
#include "plugflow/algo_choice.h"
#include "plugflow/error.h"
#include "plugflow/runtime.h"
#include "plugflow/tensor.h"

namespace plugflow::cpu::onednn {
namespace {

enum class Kind { Forward, BackwardData, BackwardWeights };

const char* op_name(Kind k) {
  switch (k) {
    case Kind::Forward: return "conv2d";
    case Kind::BackwardData: return "conv2d_grad_input";
    case Kind::BackwardWeights: return "conv2d_grad_weight";
  }
  return "";
}

const char* algorithm_name(dnnl::algorithm a) {
  switch (a) {
    case dnnl::algorithm::convolution_direct: return "direct";
    case dnnl::algorithm::convolution_winograd: return "winograd";
    case dnnl::algorithm::convolution_auto: return "auto";
    default: return "?";
  }
}

std::optional<dnnl::algorithm> algorithm_from_name(const std::string& name) {
  if (name == "direct") return dnnl::algorithm::convolution_direct;
  if (name == "winograd") return dnnl::algorithm::convolution_winograd;
  return std::nullopt;
}

// One convolution problem: everything a primitive and its reorders depend on.
struct Problem {
  Kind kind;
  memory::data_type dt;  // of every operand: f32 or bf16
  int64_t N, C, H, W, O, OH, OW, kh, kw, groups;
  Dims stride, dilation, pad_l, pad_r;  // oneDNN's: dilation 0 is dense
  bool bias = false;
  // Channels-last activations (the caller's image and result are NHWC): the primitive takes
  // them as they are (format_tag::nhwc) instead of reordering to and from a blocked format.
  bool channels_last = false;
  // The caller's operands in oneDNN's argument order (forward: src, weights, bias; backward data:
  // diff_dst, weights; backward weights: diff_dst, src), then the output.
  std::vector<Operand> inputs;
  Operand output;
  // conv2d_fused's epilogue as post-ops: the sum of an addend (the last input), then an activation.
  std::optional<Operand> addend;
  std::string activation = "none";

  Dims src_dims() const { return {N, C, H, W}; }
  Dims dst_dims() const { return {N, O, OH, OW}; }
  Dims weight_dims() const {
    return groups == 1 ? Dims{O, C, kh, kw} : Dims{groups, O / groups, C / groups, kh, kw};
  }

  // The human-readable problem key of info's listing and the cache file.
  std::string key() const {
    std::ostringstream k;
    auto dims = [&](const Dims& d, char sep) {
      for (size_t i = 0; i < d.size(); ++i) k << (i ? std::string(1, sep) : "") << d[i];
    };
    k << (dt == memory::data_type::bf16 ? "bf16" : "f32") << " in=";
    dims(src_dims(), 'x');
    k << " out=";
    dims(dst_dims(), 'x');
    k << " k=" << kh << "x" << kw << " s=" << stride[0] << "x" << stride[1] << " p=" << pad_l[0] << "x" << pad_l[1]
      << " d=" << dilation[0] + 1 << "x" << dilation[1] + 1 << " g=" << groups << (bias ? " bias" : "");
    if (pad_r != pad_l) {
      k << " pr=";
      dims(pad_r, 'x');
    }
    for (const Operand& op : inputs) {
      k << " st=";
      if (op.copy) k << "copy:";
      if (op.blocked) k << "nChw16c";
      else dims(op.strides, '.');
    }
    if (output.blocked) k << " out=nChw16c";
    if (addend) {
      k << " +sum st=";
      if (addend->blocked) k << "nChw16c";
      else dims(addend->strides, '.');
    }
    if (activation != "none") k << " +" << activation;
    if (channels_last) k << " nhwc";
    return k.str();
  }
};

// The problem of a call, or nothing when oneDNN cannot take it (then im2col runs).
std::optional<Problem> make_problem(Kind kind, const KernelContext& ctx) {
  const Tensor& out = ctx.output(0);
  const DType dtype = out.dtype();
  if (dtype != DType::Float32 && dtype != DType::BFloat16) return std::nullopt;
  for (const Tensor& t : ctx.inputs)
    if (t.dtype() != dtype) return std::nullopt;  // im2col raises the mixed-dtype error
  if (!out.is_contiguous() && !out.is_contiguous(MemoryFormat::ChannelsLast)) return std::nullopt;
  // (image, output-gradient or output, kernel) per kind.
  const Tensor& image = kind == Kind::Forward ? ctx.input(0) : kind == Kind::BackwardData ? out : ctx.input(1);
  const Tensor& result = kind == Kind::Forward ? out : ctx.input(0);
  const Tensor& weight = kind == Kind::BackwardWeights ? out : ctx.input(1);
  const auto& stride = ctx.attr<Shape>("stride");
  const auto& padding = ctx.attr<Shape>("padding");
  const auto& dilation = ctx.attr<Shape>("dilation");
  Problem p{kind,
            dtype == DType::BFloat16 ? memory::data_type::bf16 : memory::data_type::f32,
            image.sizes()[0],
            image.sizes()[1],
            image.sizes()[2],
            image.sizes()[3],
            result.sizes()[1],
            result.sizes()[2],
            result.sizes()[3],
            weight.sizes()[2],
            weight.sizes()[3],
            ctx.attr<int64_t>("groups"),
            {stride[0], stride[1]},
            {dilation[0] - 1, dilation[1] - 1},
            {padding[0], padding[1]},
            {0, 0},
            false,
            false,
            {},
            {},
            std::nullopt,
            "none"};
  p.channels_last = image.suggest_memory_format() == MemoryFormat::ChannelsLast ||
                    result.suggest_memory_format() == MemoryFormat::ChannelsLast;
  for (int i = 0; i < 2; ++i) {
    const int64_t in = i == 0 ? p.H : p.W, outn = i == 0 ? p.OH : p.OW, k = i == 0 ? p.kh : p.kw;
    const auto pr = right_padding(in, outn, k, stride[i], dilation[i], padding[i]);
    if (!pr) return std::nullopt;
    p.pad_r[i] = *pr;
  }
  std::vector<std::pair<const Tensor*, Dims>> operands;
  const bool fused = ctx.op.name == "conv2d_fused";
  switch (kind) {
    case Kind::Forward:
      operands = {{&ctx.input(0), p.src_dims()}, {&ctx.input(1), p.weight_dims()}};
      p.bias = fused ? ctx.attr<bool>("has_bias") : ctx.inputs.size() > 2;
      if (p.bias) operands.push_back({&ctx.input(2), Dims{p.O}});
      if (fused) {
        p.activation = ctx.attr<std::string>("activation");
        if (ctx.attr<bool>("has_addend")) {
          p.addend = operand(ctx.inputs.back(), p.dst_dims());
          if (p.addend->copy) return std::nullopt;  // an expanded addend: the native kernel
        }
      }
      break;
    case Kind::BackwardData: operands = {{&ctx.input(0), p.dst_dims()}, {&ctx.input(1), p.weight_dims()}}; break;
    case Kind::BackwardWeights: operands = {{&ctx.input(0), p.dst_dims()}, {&ctx.input(1), p.src_dims()}}; break;
  }
  for (const auto& [t, dims] : operands) p.inputs.push_back(operand(*t, dims));
  const Dims out_dims = kind == Kind::Forward ? p.dst_dims() : kind == Kind::BackwardData ? p.src_dims() : p.weight_dims();
  p.output = operand(out, out_dims);  // contiguous: always representable
  // nn.Graph's channel-blocked activations (never the weights): described as nChw16c.
  for (size_t i = 0; i < p.inputs.size(); ++i) p.inputs[i].blocked = ctx.blocked_input(static_cast<int64_t>(i));
  p.output.blocked = ctx.blocked_output(0);
  if (p.addend) p.addend->blocked = ctx.blocked_input(static_cast<int64_t>(ctx.inputs.size()) - 1);
  return p;
}

// The post-ops of a fused convolution: sum (the addend already in the destination), then the
// activation, as out = act(conv + bias + addend).
dnnl::primitive_attr post_ops_attr(const Problem& p) {
  dnnl::post_ops ops;
  if (p.addend) ops.append_sum(1.0f);
  append_activation(ops, p.activation);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  return attr;
}

// Reordered weights of one weight storage at one version. The buffer exists only once that
// version was used twice (see reordered_weights).
struct WeightSlot {
  const Storage* storage = nullptr;  // identity; `alive` tells whether it is still this storage
  std::weak_ptr<Storage> alive;
  int64_t offset = 0;
  uint32_t version = 0;
  Tensor buffer;  // from the caching allocator: a buffer per step never reaches glibc
  memory reordered;
};

// A built primitive with its reorders.
struct Plan {
  dnnl::algorithm algorithm;
  std::string implementation;  // oneDNN's impl_info_str, e.g. "brg:avx512_core"
  dnnl::primitive primitive;
  std::vector<int> input_args;
  int output_arg;
  std::vector<memory::desc> user_inputs, primitive_inputs;
  std::vector<bool> copy_inputs;  // Operand::copy
  std::vector<std::optional<dnnl::reorder>> input_reorders;
  memory::desc user_output, primitive_output;
  std::optional<dnnl::reorder> output_reorder;
  // A fused sum: the addend as the caller holds it, and its reorder into the destination the
  // primitive accumulates into (the blocked temporary, or the caller's output).
  memory::desc user_addend;
  std::optional<dnnl::reorder> addend_reorder;
  int weight_input = -1;  // the input whose reordered form is cached (forward only)

  std::mutex weights_mutex;
  std::vector<WeightSlot> weights;  // a few: layers of one shape share a plan (ResNet blocks)
};

// Builds the plan of `p` with `algo`; throws dnnl::error (status unimplemented when oneDNN has no
// implementation of that algorithm for the problem).
std::shared_ptr<Plan> build_plan(const Problem& p, dnnl::algorithm algo) {
  auto plan = std::make_shared<Plan>();
  plan->algorithm = algo;
  const dnnl::engine& eng = engine();
  const auto activation_desc = [&](const Dims& dims) {
    return p.channels_last ? memory::desc(dims, p.dt, memory::format_tag::nhwc) : any_desc(dims, p.dt);
  };
  const auto src = activation_desc(p.src_dims()), weights = any_desc(p.weight_dims(), p.dt),
             dst = activation_desc(p.dst_dims());
  // Backward primitives need the forward one they belong to as a hint.
  const auto fwd_desc = [&](dnnl::prop_kind pk, bool with_bias) {
    return with_bias ? dnnl::convolution_forward::desc(pk, algo, src, weights, any_desc({p.O}, p.dt), dst, p.stride, p.dilation,
                                                 p.pad_l, p.pad_r)
                     : dnnl::convolution_forward::desc(pk, algo, src, weights, dst, p.stride, p.dilation, p.pad_l, p.pad_r);
  };
  std::vector<memory::desc> wanted;  // the primitive's input descs, in the order of p.inputs
  memory::desc out_md;
  switch (p.kind) {
    case Kind::Forward: {
      // forward_training: the same kernels as inference for convolution, and valid as a hint.
      const dnnl::convolution_forward::primitive_desc pd(fwd_desc(dnnl::prop_kind::forward_training, p.bias),
                                                         post_ops_attr(p), eng);
      plan->primitive = dnnl::convolution_forward(pd);
      plan->implementation = pd.impl_info_str();
      wanted = {pd.src_desc(), pd.weights_desc()};
      plan->input_args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS};
      if (p.bias) {
        wanted.push_back(pd.bias_desc());
        plan->input_args.push_back(DNNL_ARG_BIAS);
      }
      out_md = pd.dst_desc();
      plan->output_arg = DNNL_ARG_DST;
      plan->weight_input = 1;
      break;
    }
    case Kind::BackwardData: {
      const dnnl::convolution_forward::primitive_desc hint(fwd_desc(dnnl::prop_kind::forward_training, false), eng);
      const dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(algo, src, weights, dst, p.stride, p.dilation, p.pad_l, p.pad_r), eng, hint);
      plan->primitive = dnnl::convolution_backward_data(pd);
      plan->implementation = pd.impl_info_str();
      wanted = {pd.diff_dst_desc(), pd.weights_desc()};
      plan->input_args = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS};
      out_md = pd.diff_src_desc();
      plan->output_arg = DNNL_ARG_DIFF_SRC;
      // Weights are not cached here: in training each weight version reaches backward once,
      // so a cached copy would never be reused and would only hold memory.
      break;
    }
    case Kind::BackwardWeights: {
      const dnnl::convolution_forward::primitive_desc hint(fwd_desc(dnnl::prop_kind::forward_training, false), eng);
      const dnnl::convolution_backward_weights::primitive_desc pd(
          dnnl::convolution_backward_weights::desc(algo, src, weights, dst, p.stride, p.dilation, p.pad_l, p.pad_r), eng,
          hint);
      plan->primitive = dnnl::convolution_backward_weights(pd);
      plan->implementation = pd.impl_info_str();
      wanted = {pd.diff_dst_desc(), pd.src_desc()};
      plan->input_args = {DNNL_ARG_DIFF_DST, DNNL_ARG_SRC};
      out_md = pd.diff_weights_desc();
      plan->output_arg = DNNL_ARG_DIFF_WEIGHTS;
      break;
    }
  }
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const memory::desc user = user_desc(p.inputs[i], p.dt);
    plan->user_inputs.push_back(user);
    plan->copy_inputs.push_back(p.inputs[i].copy);
    plan->primitive_inputs.push_back(wanted[i]);
    plan->input_reorders.push_back(user == wanted[i] ? std::nullopt
                                                     : std::optional(dnnl::reorder(dnnl::reorder::primitive_desc(
                                                           eng, user, eng, wanted[i]))));
  }
  plan->user_output = user_desc(p.output, p.dt);
  plan->primitive_output = out_md;
  if (plan->user_output != out_md)
    plan->output_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(eng, out_md, eng, plan->user_output));
  // oneDNN has channels-last kernels for the common shapes; where it has only its reference
  // implementation, the blocked formats with reorders are much faster.
  if (p.channels_last && plan->implementation.rfind("ref", 0) == 0) {
    Problem blocked = p;
    blocked.channels_last = false;
    return build_plan(blocked, algo);
  }
  if (p.addend) {
    plan->user_addend = user_desc(*p.addend, p.dt);
    plan->addend_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(
        eng, plan->user_addend, eng, plan->output_reorder ? out_md : plan->user_output));
  }
  return plan;
}

// The weights of input `i` in the primitive's format. A weight version used a second time (an
// inference model, or a training model in eval) keeps its reordered form for every later call;
// a version used once (training: the optimizer changes every weight each step) is reordered into
// a temporary of the call, so training holds no reordered copy of its weights between calls
// (ResNet-18, 45 MB).
memory reordered_weights(Plan& plan, size_t i, const Tensor& w, memory user, std::vector<Tensor>& temporaries) {
  constexpr size_t kMaxSlots = 16;
  const auto& storage = w.storage();
  const uint32_t version = storage->version();
  std::lock_guard lock(plan.weights_mutex);
  std::erase_if(plan.weights, [](const WeightSlot& s) { return s.alive.expired(); });
  auto slot = std::find_if(plan.weights.begin(), plan.weights.end(), [&](const WeightSlot& s) {
    return s.storage == storage.get() && s.alive.lock() == storage && s.offset == w.offset();
  });
  if (slot == plan.weights.end()) {
    if (plan.weights.size() >= kMaxSlots) plan.weights.erase(plan.weights.begin());  // the oldest
    plan.weights.push_back(WeightSlot{storage.get(), storage, w.offset(), version, Tensor(), memory()});
    slot = plan.weights.end() - 1;
  } else if (slot->version == version) {
    if (!slot->buffer.defined()) {  // the second use of this version: keep it
      slot->reordered = temporary_memory(plan.primitive_inputs[i], slot->buffer);
      plan.input_reorders[i]->execute(stream(), user, slot->reordered);
      stream().wait();
    }
    return slot->reordered;
  }
  slot->version = version;
  slot->buffer = Tensor();
  slot->reordered = memory();
  memory once = temporary_memory(plan.primitive_inputs[i], temporaries.emplace_back());
  plan.input_reorders[i]->execute(stream(), user, once);
  return once;
}

// Runs the plan on the call's tensors.
void execute(Plan& plan, const KernelContext& ctx) {
  const dnnl::engine& eng = engine();
  dnnl::stream& s = stream();
  std::unordered_map<int, memory> args;
  std::vector<Tensor> copies;
  std::vector<Tensor> temporaries;  // reorder targets, until s.wait()
  for (size_t i = 0; i < plan.user_inputs.size(); ++i) {
    const Tensor& t = ctx.input(i);
    void* data = t.data_ptr();
    if (plan.copy_inputs[i]) {
      Tensor& dense = copies.emplace_back(Tensor::empty(t.sizes(), t.dtype(), t.device()));
      copy_tensor(dense, t);
      data = dense.data_ptr();
    }
    memory user(plan.user_inputs[i], eng, data);
    if (!plan.input_reorders[i]) {
      args.emplace(plan.input_args[i], user);
    } else if (static_cast<int>(i) == plan.weight_input) {
      args.emplace(plan.input_args[i], reordered_weights(plan, i, t, user, temporaries));
    } else {
      memory m = temporary_memory(plan.primitive_inputs[i], temporaries.emplace_back());
      plan.input_reorders[i]->execute(s, user, m);
      args.emplace(plan.input_args[i], m);
    }
  }
  memory user_out(plan.user_output, eng, ctx.output(0).data_ptr());
  memory out = plan.output_reorder ? temporary_memory(plan.primitive_output, temporaries.emplace_back()) : user_out;
  args.emplace(plan.output_arg, out);
  if (plan.addend_reorder) {  // the sum post-op adds what the destination holds: the addend
    const Tensor& addend = ctx.inputs.back();
    if (plan.output_reorder || addend.data_ptr() != ctx.output(0).data_ptr()) {
      memory user_addend(plan.user_addend, eng, addend.data_ptr());
      plan.addend_reorder->execute(s, user_addend, out);
    }
  }
  plan.primitive.execute(s, args);
  if (plan.output_reorder) plan.output_reorder->execute(s, out, user_out);
  s.wait();
}

// One timed run of `plan` on the call's buffers, in seconds.
double time_run(Plan& plan, const KernelContext& ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  execute(plan, ctx);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The algorithm choices, in memory and in the cache file's section for this oneDNN release on
// this CPU ISA.
algo_search::AlgoSelector& selector() {
  static algo_search::AlgoSelector instance = [] {
    const dnnl_version_t* v = dnnl_version();
    std::ostringstream s;
    s << "cpu onednn " << v->major << "." << v->minor << "." << v->patch << " isa "
      << static_cast<int>(dnnl::get_effective_cpu_isa());
    return algo_search::AlgoSelector(s.str());
  }();
  return instance;
}

// Plans by (strategy, thread count, problem key); a null plan marks a problem oneDNN cannot run.
struct PlanCache {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<Plan>> plans;
};
PlanCache& plan_cache() {
  static PlanCache c;
  return c;
}

void report(const Problem& p, const Plan& plan, const char* source) {
  report_algo_choice(
      AlgoChoice{"cpu", op_name(p.kind), p.key(), algorithm_name(plan.algorithm), plan.implementation, source});
}

// The heuristic strategy's algorithm for `p`. oneDNN's convolution_auto takes its float32
// Winograd kernel (F(4x4, 3x3)) by batch size alone, but that kernel transforms the weights on
// every call, 36 ic x oc matrices (38 MB at 512 channels), and each transformed matrix serves
// only the batch's 4x4 output tiles: with few tiles the transform costs more than the direct
// kernel's 2.25x more multiplications save. Measured on AVX-512 with 2 threads (oneDNN 2.6,
// docs/design.md): Winograd wins from ~48 tiles in the batch with 32+ channels each side, loses
// below (batch 16 at 4x4 with 512 channels: forward 4.5 against 2.8 ms, backward weights 5.2
// against 4.3; batch 1 at 7x7: 3.3 against 0.6 ms), and wins above where auto does not take it
// (batch 1 at 56x56, 64 channels: 0.35 against 0.60 ms). bfloat16 has no Winograd: auto.
std::string heuristic_algorithm(const Problem& p) {
  if (p.dt != memory::data_type::f32) return "auto";
  constexpr int64_t kMinTiles = 48, kMinChannels = 32;
  const int64_t tiles = p.N * ((p.OH + 3) / 4) * ((p.OW + 3) / 4);
  return tiles >= kMinTiles && std::min(p.C, p.O) >= kMinChannels ? "winograd" : "direct";
}

// Finds or builds the plan of `p` and runs it. False when oneDNN cannot run the problem.
bool run(const Problem& p, const KernelContext& ctx) {
  const Optimizations& opt = current_config().optimizations;
  // An nn.Graph may choose its own strategy (the `algo_search` attribute); else the config's.
  const std::string& strategy =
      ctx.attrs.has("algo_search") ? ctx.attr<std::string>("algo_search") : opt.conv_algo_search;
  const std::string key = std::string(op_name(p.kind)) + " " + p.key();  // the file's key
  const std::string cache_key = strategy + "|" + std::to_string(num_threads()) + "|" + key;
  PlanCache& cache = plan_cache();
  {
    std::lock_guard lock(cache.mutex);
    const auto it = cache.plans.find(cache_key);
    if (it != cache.plans.end()) {
      if (!it->second) return false;
      execute(*it->second, ctx);
      return true;
    }
  }
  // Building (and searching) happens outside the lock; two threads racing on a new key both
  // build, and the first one stored wins. Plans built while choosing are kept for the winner.
  std::map<std::string, std::shared_ptr<Plan>> built;  // by algorithm name; null: unimplemented
  const auto plan_of = [&](const std::string& name) -> std::shared_ptr<Plan> {
    if (const auto it = built.find(name); it != built.end()) return it->second;
    std::shared_ptr<Plan> plan;
    const auto algo = name == "auto" ? std::optional(dnnl::algorithm::convolution_auto) : algorithm_from_name(name);
    if (algo) {
      try {
        plan = build_plan(p, *algo);
      } catch (const dnnl::error& e) {
        if (e.status != dnnl_unimplemented) throw;
      }
    }
    return built[name] = plan;
  };
  algo_search::AlgoSource source;
  source.heuristic = [&]() -> std::optional<std::string> {
    for (std::string name : {heuristic_algorithm(p), std::string("auto")})
      if (plan_of(name)) return name;
    return std::nullopt;
  };
  source.candidates = [] { return std::vector<std::string>{"direct", "winograd"}; };
  source.usable = [&](const std::string& name) { return name != "auto" && plan_of(name) != nullptr; };
  // A fused problem is timed as its convolution without post-ops, on a scratch output: a sum
  // post-op would accumulate into the caller's output at every timing run.
  const bool fused = p.addend || p.activation != "none";
  Problem plain = p;
  plain.addend.reset();
  plain.activation = "none";
  std::map<std::string, std::shared_ptr<Plan>> plain_built;
  std::vector<Tensor> scratch;
  source.time = [&](const std::string& name) -> std::optional<double> {
    const auto plan = plan_of(name);
    if (!plan) return std::nullopt;
    if (!fused) return time_run(*plan, ctx);  // the first (warm-up) run also does the weight reorder
    auto& timed_plan = plain_built[name];
    if (!timed_plan) timed_plan = build_plan(plain, plan->algorithm);
    if (scratch.empty()) scratch.push_back(Tensor::empty(ctx.output(0).sizes(), ctx.output(0).dtype(), ctx.device));
    const KernelContext timed{ctx.op, ctx.inputs.first(plain.inputs.size()), scratch, ctx.attrs, ctx.device, ctx.stream};
    return time_run(*timed_plan, timed);
  };
  const auto choice = selector().choose(algo_search::parse_strategy(strategy), key, opt.algo_cache, source);
  std::shared_ptr<Plan> plan = choice ? plan_of(choice->algorithm) : nullptr;
  {
    std::lock_guard lock(cache.mutex);
    plan = cache.plans.emplace(cache_key, plan).first->second;
  }
  if (!plan) return false;
  if (choice->fresh) report(p, *plan, choice->source.c_str());
  execute(*plan, ctx);
  return true;
}

// True when an nn.Graph keeps an operand of this call channel-blocked (only oneDNN reads those).
bool any_blocked(const KernelContext& ctx) {
  return ctx.attrs.has("blocked_inputs") || ctx.attrs.has("blocked_outputs");
}

template <Kind kind>
void conv_kernel(KernelContext& ctx) {
  const auto problem = make_problem(kind, ctx);
  run_or_fall_back(ctx, [&] { return problem && run(*problem, ctx); }, [&] {
    PF_CHECK(!any_blocked(ctx), "cpu '", ctx.op.name,
             "': oneDNN cannot run this convolution on channel-blocked operands (an nn.Graph's blocked_layout pass "
             "should not have chosen them)");
    const KernelFn im2col = kind == Kind::Forward        ? (ctx.op.name == "conv2d_fused" ? conv2d_fused_native : conv_im2col)
                            : kind == Kind::BackwardData ? conv_grad_input_im2col
                                                         : conv_grad_weight_im2col;
    if (ctx.input(0).dtype() == DType::BFloat16) run_widened(ctx, im2col);  // row-major float32 outputs
    else run_with_row_major_outputs(ctx, im2col);
  });
}

}  // namespace
}  // namespace plugflow::cpu::onednn

namespace plugflow::cpu {

void register_onednn_conv_kernels(Registrar& reg) {
  using onednn::Kind;
  const auto dtypes = {DType::Float32, DType::BFloat16};
  reg.kernel("conv2d", DeviceType::CPU, dtypes, onednn::conv_kernel<Kind::Forward>, Priority::Optimized);
  reg.kernel("conv2d_fused", DeviceType::CPU, dtypes, onednn::conv_kernel<Kind::Forward>, Priority::Optimized);
  reg.kernel("conv2d_grad_input", DeviceType::CPU, dtypes, onednn::conv_kernel<Kind::BackwardData>,
             Priority::Optimized);
  reg.kernel("conv2d_grad_weight", DeviceType::CPU, dtypes, onednn::conv_kernel<Kind::BackwardWeights>,
             Priority::Optimized);
}

}  // namespace plugflow::cpu
