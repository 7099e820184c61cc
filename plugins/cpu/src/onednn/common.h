// What the plugin's oneDNN kernels share: the engine, a stream per thread, the OpenMP thread
// scope, and how a strided plugflow tensor is described to oneDNN.
//
// Threads: this oneDNN uses OpenMP, like the plugin's loops. Its primitives size their work
// split with omp_get_max_threads() of the calling thread at creation and at execution, so every
// oneDNN call runs inside an OmpThreads scope, and the thread count is part of each primitive
// cache key.
#pragma once
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "../parallel.h"
#include "plugflow/error.h"
#include "plugflow/kernel.h"
#include "plugflow/tensor.h"

namespace plugflow::cpu::onednn {

using dnnl::memory;
using Dims = memory::dims;

inline dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// A CPU stream is a thin handle, but oneDNN does not promise a stream is safe to use from
// several threads at once; kernels may run on any thread, so each thread gets one.
inline dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// Sets the calling thread's OpenMP thread count to the plugin's (or `threads`: 1 for a problem
// below the plugin's grain size, as its own loops run those) for this scope.
class OmpThreads {
 public:
  explicit OmpThreads(int threads = num_threads()) : saved_(omp_get_max_threads()), threads_(threads) {
    if (saved_ != threads_) omp_set_num_threads(threads_);
  }
  ~OmpThreads() {
    if (saved_ != threads_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_, threads_;
};

// A tensor operand as oneDNN sees it: its dims and strides in elements. oneDNN wants positive,
// non-overlapping strides; a size-1 dim's stride is never used to address, so it gets the dense
// one. An operand whose elements share memory (an expanded one, such as the upstream gradient
// of sum(), or an overlapping as_strided view) is described as dense and copied dense first
// (`copy`).
struct Operand {
  Dims dims, strides;
  bool copy = false;
  // nn.Graph's channel-blocked layout (KernelContext::blocked_input): oneDNN's nChw16c.
  bool blocked = false;
};

// `t` seen with `dims`: its own sizes, or (for grouped convolution weights) (O, C/g, k...)
// split into (g, O/g, C/g, k...).
Operand operand(const Tensor& t, const Dims& dims);

// Appends a fused epilogue's activation ("none", "relu", "gelu", "gelu_tanh", "silu", as the
// fused ops name them) as an eltwise post-op. alpha is relu's negative slope and swish's
// sigmoid scale (silu: x * sigmoid(1 x)); the gelus ignore it.
void append_activation(dnnl::post_ops& ops, const std::string& activation);

// A dense row-major copy of a float tensor of any strides (for Operand::copy).
std::unique_ptr<float[]> dense_copy(const Tensor& t);

inline memory::desc user_desc(const Operand& op, memory::data_type dt = memory::data_type::f32) {
  return op.blocked ? memory::desc(op.dims, dt, memory::format_tag::nChw16c) : memory::desc(op.dims, dt, op.strides);
}
inline memory::desc any_desc(const Dims& dims, memory::data_type dt = memory::data_type::f32) {
  return memory::desc(dims, dt, memory::format_tag::any);
}

// A oneDNN memory of `desc` on a buffer of the plugin's caching allocator, which `owner` keeps
// alive (hold it until the primitive has run). For per-call temporaries (reorder targets,
// workspaces): the allocator recycles them step after step, where malloc/free of multi-MB
// buffers makes glibc raise its mmap threshold and keep freed memory, and memory_stats()
// counts them. (Scratchpads stay oneDNN's: its library mode shares one buffer across
// primitives, which per-call buffers of each primitive's size, cached by size class, did not
// match: +50 MB peak RSS on a ResNet-18 training step.)
memory temporary_memory(const memory::desc& desc, Tensor& owner);

// oneDNN's right padding for a window sweep (convolution, pooling) with `out` positions: it
// requires (in - ext + pad_l + pad_r) / stride + 1 == out with pad_r > -stride; `d` is
// PyTorch's dilation (1 is dense). Empty when impossible.
inline std::optional<int64_t> right_padding(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t pad_l) {
  const int64_t ext = (k - 1) * d + 1;
  if ((in - ext + 2 * pad_l) >= 0 && (in - ext + 2 * pad_l) / s + 1 == out) return pad_l;  // PyTorch's symmetric case
  const int64_t pad_r = (out - 1) * s + ext - in - pad_l;
  if (pad_r <= -s) return std::nullopt;
  return pad_r;
}

// The primitive `build` makes for `key` (the op and everything the primitive depends on),
// built once per key and OpenMP thread count (call it in the OmpThreads scope that runs it):
// a primitive_desc costs microseconds to create even when oneDNN's own primitive cache then
// hits, as much as a whole small softmax. `build` may return an empty primitive to mark a
// problem the kernel leaves to its fallback; that is cached too.
dnnl::primitive cached_primitive(const std::string& key, const std::function<dnnl::primitive()>& build);

// The body of a oneDNN kernel: `attempt` (false when oneDNN does not take the call) runs in an
// OpenMP thread scope of `threads` with oneDNN's errors raised as plugflow errors naming the op,
// and `fall_back` (the plugin's own kernel) runs the calls oneDNN did not take.
template <typename Attempt, typename FallBack>
void run_or_fall_back(const KernelContext& ctx, const Attempt& attempt, const FallBack& fall_back,
                      int threads = num_threads()) {
  bool done = false;
  try {
    OmpThreads scope(threads);
    done = attempt();
  } catch (const dnnl::error& e) {
    PF_THROW(Error, "cpu '", ctx.op.name, "' (oneDNN): ", e.what());
  }
  if (!done) fall_back();
}

}  // namespace plugflow::cpu::onednn
