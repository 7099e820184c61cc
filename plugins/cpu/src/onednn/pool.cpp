// max_pool2d, avg_pool2d and avg_pool2d_backward (docs/kernels.md, "Conv family") on oneDNN's
// pooling_v2 for float32 (and max_pool2d for bfloat16: a maximum is exact in any type, so
// bfloat16 needs no float32 copies; averages stay on the widened kernels), registered with Priority::Optimized over the plugin's own kernels
// (pool.cpp), which stay the float64 path and this file's fallback. Max pooling's backward is
// a scatter through the indices in autograd (core/src/ops/conv.cpp): no kernel here.
//
// Layout: the primitives run on plain NCHW, or on NHWC where the image (forward input, backward
// output) is channels last: src (or diff_dst) dense and dst (diff_src) the caller's output;
// oneDNN's jit kernels take both plain layouts as they are (a forward src cannot be `any`), and a
// plain dst makes max pooling's workspace plain too, in the dst's layout. An input of other
// strides is reordered dense first, an expanded (stride-0) one copied dense.
//
// Where oneDNN's semantics differ from PyTorch's, and what this file does:
// - Max pooling skips NaN (PyTorch returns it, with its index), so an input holding a NaN runs
//   natively: one scan of the input decides (its cost is in the timings below).
// - Max pooling starts from -FLT_MAX, so a window of only -inf gives -FLT_MAX where PyTorch
//   gives -inf; any -FLT_MAX in the output (rare: -inf or -FLT_MAX inputs) reruns the call
//   natively.
// - The workspace holds the argmax's position in the window (kh * KW + kw; u8, or s32 for
//   windows of 256+ elements; first maximum wins, as in PyTorch); one pass turns it into
//   PyTorch's flat index ih * W + iw.
// - Average pooling with padding included divides by kh * kw everywhere; PyTorch divides by the
//   window clipped to the input plus the symmetric padding, which is smaller where ceil_mode
//   reaches past it (oneDNN's right padding is then larger than the left), and a
//   divisor_override divides by itself. Both are the include_padding average times a factor
//   per output row and column: applied to the output (forward) or to a copy of grad_output
//   (backward). Without the override, count_include_pad=False is exclude_padding as is.
//
// Timings, native -> oneDNN (ms, 2 threads, from Python: the best of 6 alternating runs of a
// median of 9 calls, on a 2-core machine busy with other work, so absolute numbers are high):
//   max 3x3/2 p1  16x64x112x112 (ResNet stem)     202.2 -> 58.4  (NaN scan included)
//   max 3x3/2     16x96x55x55                      72.0 -> 19.8
//   max 3x3/2 ceil 16x192x71x71 (Inception)       247.3 -> 66.6
//   max 2x2/2     16x256x28x28 (VGG)               33.9 -> 16.5
//   max 3x3/1 p1  16x512x14x14                     91.7 -> 24.2
//   max 3x3/2 p1  16x8x112x112                     23.3 -> 11.0
//   avg 2x2/2     16x128x56x56 (DenseNet)  fwd 16.3 -> 4.2,  bwd 18.8 -> 8.5
//   avg 3x3/1 p1 exclude pad 16x192x35x35  fwd 52.0 -> 12.0, bwd 52.9 -> 14.0
//   avg 3x3/1 p1  16x256x28x28             fwd 35.3 -> 7.1,  bwd 48.8 -> 10.7
//   avg 3x3/2 p1 ceil 8x512x15x15 (scaled) fwd 2.63 -> 0.22, bwd 1.70 -> 0.50
//   avg 3x3/2 p1 divisor 5 16x256x28x28    fwd 9.7 -> 1.4,   bwd 13.3 -> 6.7
//   avg 7x7 (global) 16x2048x7x7           fwd 0.4-1.1 both, bwd 0.5-1.3 both (within noise)
// The native kernel runs where it is faster: non-jit oneDNN code (see `jit`), inputs under
// kMinElements, and float32 channels-last max pooling, whose native loop makes values and
// indices in one pass vectorized over C: 5-6x faster than oneDNN on NHWC, where the NaN scan
// and the index pass cost more than the primitive (16x64x112x112, 3x3/2, on a quiet machine:
// 3.5 ms; NCHW on oneDNN 25-30 ms; PyTorch's channels-last kernel 5.3 ms). Channels-last
// average pooling runs here on NHWC: 16x128x56x56, 2x2/2, forward + backward from sum() 1.8 ms
// (NCHW 7.3-8.0 ms, PyTorch channels last 25-33 ms).
//
// Threads: see common.h; the thread count is part of every primitive's cache key.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../kernels.h"
#include "../loops.h"
#include "common.h"
#include "plugflow/error.h"

namespace plugflow::cpu::onednn {
namespace {

using tag = memory::format_tag;

enum class Kind { Max, Avg, AvgBackward };

// The factors that turn oneDNN's include_padding average into PyTorch's:
// out(n, c, oh, ow) *= all * rows[oh] * cols[ow]. Empty rows/cols are all 1.
struct AvgScale {
  float all = 1;
  std::vector<float> rows, cols;
  bool needed() const { return all != 1 || !rows.empty() || !cols.empty(); }
};

// One pooling problem: everything its primitive depends on, and the averages' scale.
struct Problem {
  Kind kind;
  int64_t N, C, H, W, OH, OW;  // H, W: the forward input's; OH, OW: the forward output's
  Dims kernel, stride, dilation, pad_l, pad_r;  // oneDNN's: dilation 0 is dense
  dnnl::algorithm algorithm;
  Operand input;  // src, or diff_dst
  AvgScale scale;
  memory::data_type dt = memory::data_type::f32;  // f32, or bf16 (max pooling only)
  bool channels_last = false;  // NHWC activations (the image is channels last), else NCHW

  Dims src_dims() const { return {N, C, H, W}; }
  Dims dst_dims() const { return {N, C, OH, OW}; }
  tag layout() const { return channels_last ? tag::nhwc : tag::nchw; }
  memory::desc src_desc() const { return memory::desc(src_dims(), dt, layout()); }
  memory::desc dst_desc() const { return memory::desc(dst_dims(), dt, layout()); }
  // The primitive's input: dense in the problem's layout.
  memory::desc input_desc() const { return kind == Kind::AvgBackward ? dst_desc() : src_desc(); }

  std::string key() const {
    std::ostringstream k;
    const auto dims = [&](const Dims& d) {
      for (size_t i = 0; i < d.size(); ++i) k << (i ? "x" : "") << d[i];
    };
    k << "pool" << static_cast<int>(kind) << (dt == memory::data_type::bf16 ? " bf16" : "")
      << (channels_last ? " nhwc" : "") << " alg" << static_cast<int>(algorithm) << " in=";
    dims(src_dims());
    k << " out=";
    dims(dst_dims());
    for (const Dims* d : {&kernel, &stride, &dilation, &pad_l, &pad_r}) {
      k << " ";
      dims(*d);
    }
    return k.str();
  }
};

// PyTorch's count_include_pad divisor along one dim over oneDNN's kernel size, per output:
// the window clipped to [-pad, in + pad); empty when every window is whole.
std::vector<float> edge_factors(int64_t in, int64_t out, int64_t k, int64_t s, int64_t pad) {
  std::vector<float> f;
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * s - pad, clipped = std::min(start + k, in + pad) - start;
    if (clipped == k) continue;
    f.resize(out, 1.0f);
    f[o] = static_cast<float>(k) / static_cast<float>(clipped);
  }
  return f;
}

// Below this many input elements the native kernel, which then runs on the calling thread, is
// faster: oneDNN always starts its threads (1x16x8x8, 3x3/2 max pooling: 7.6 us native, 11.3
// us oneDNN; 1x16x16x16: 19.6 and 19.1 us).
constexpr int64_t kMinElements = 4096;

// The problem of a call, or nothing when oneDNN cannot take it (then the native kernel runs).
std::optional<Problem> make_problem(Kind kind, const KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const Tensor& out = ctx.output(0);
  const bool bf16 = kind == Kind::Max && in.dtype() == DType::BFloat16;
  if ((in.dtype() != DType::Float32 && !bf16) || out.dtype() != in.dtype() || in.numel() == 0 || out.numel() == 0)
    return std::nullopt;
  const Tensor& image = kind == Kind::AvgBackward ? out : in;   // (N, C, H, W)
  const Tensor& result = kind == Kind::AvgBackward ? in : out;  // (N, C, OH, OW)
  // The image's layout decides (a 1x1 forward output is both); the outputs are dense in it.
  const MemoryFormat format = image.suggest_memory_format();
  for (const Tensor& t : ctx.outputs)
    if (!t.is_contiguous(format)) return std::nullopt;
  // float32 channels-last max pooling: the native loop is faster (see the top).
  if (kind == Kind::Max && !bf16 && format == MemoryFormat::ChannelsLast) return std::nullopt;
  if (image.numel() < kMinElements) return std::nullopt;
  const Shape& kernel = ctx.attr<Shape>("kernel_size");
  const Shape& stride = ctx.attr<Shape>("stride");
  const Shape& padding = ctx.attr<Shape>("padding");
  const Shape dilation = kind == Kind::Max ? ctx.attr<Shape>("dilation") : Shape{1, 1};
  Problem p{kind,
            image.sizes()[0],
            image.sizes()[1],
            image.sizes()[2],
            image.sizes()[3],
            result.sizes()[2],
            result.sizes()[3],
            {kernel[0], kernel[1]},
            {stride[0], stride[1]},
            {dilation[0] - 1, dilation[1] - 1},
            {padding[0], padding[1]},
            {0, 0},
            dnnl::algorithm::pooling_max,
            operand(in, in.sizes()),
            {}};
  p.channels_last = format == MemoryFormat::ChannelsLast;
  for (int i = 0; i < 2; ++i) {
    const auto pr = right_padding(i == 0 ? p.H : p.W, i == 0 ? p.OH : p.OW, kernel[i], stride[i], dilation[i],
                                  padding[i]);
    if (!pr) return std::nullopt;
    p.pad_r[i] = *pr;
  }
  if (bf16) {
    if (p.input.copy) return std::nullopt;  // an expanded bfloat16 input: the widened kernel
    p.dt = memory::data_type::bf16;
  }
  if (kind != Kind::Max) {
    const int64_t divisor = ctx.attr<int64_t>("divisor");
    const bool include_pad = ctx.attr<bool>("count_include_pad");
    p.algorithm = include_pad || divisor ? dnnl::algorithm::pooling_avg_include_padding
                                         : dnnl::algorithm::pooling_avg_exclude_padding;
    if (divisor) {
      p.scale.all = static_cast<float>(static_cast<double>(kernel[0] * kernel[1]) / static_cast<double>(divisor));
    } else if (include_pad) {
      p.scale.rows = edge_factors(p.H, p.OH, kernel[0], stride[0], padding[0]);
      p.scale.cols = edge_factors(p.W, p.OW, kernel[1], stride[1], padding[1]);
    }
  }
  return p;
}

// A built problem: its primitive, and the reorder of the caller's input into the primitive's
// dense NCHW (empty when the input is dense NCHW already or is copied dense).
struct Plan {
  dnnl::primitive primitive, input_reorder;
  memory::desc user_input, workspace;
};

// The workspace oneDNN 2.6 gives a max pooling with a plain dst: the dst's layout, u8 or s32.
// Anything else (another oneDNN) is left to the native kernel rather than misread.
bool plain_workspace(const memory::desc& ws, const Problem& p) {
  for (auto dt : {memory::data_type::u8, memory::data_type::s32})
    if (ws == memory::desc(p.dst_dims(), dt, p.layout())) return true;
  return false;
}

// Only oneDNN's jit kernels beat the native ones: its plain-NCHW code (simple_nchw, which it
// picks for 1-3 channels) and its reference code (dilated max pooling) are slower (16x3x224x224,
// 2x2/2: max 24 -> 50 ms, avg 4 -> 27 ms; 16x64x56x56 3x3/1 dilation 2 max: 206 -> 1251 ms).
bool jit(const char* implementation) { return std::strncmp(implementation, "jit", 3) == 0; }

// The plan of `p`; an empty primitive when oneDNN cannot run it or would be slower.
Plan make_plan(const Problem& p) {
  Plan plan;
  plan.user_input = user_desc(p.input, p.dt);
  const dnnl::engine& eng = engine();
  plan.primitive = cached_primitive(p.key(), [&]() -> dnnl::primitive {
    try {
      const dnnl::pooling_v2_forward::primitive_desc pd(
          {dnnl::prop_kind::forward_training, p.algorithm, p.src_desc(), p.dst_desc(), p.stride, p.kernel, p.dilation,
           p.pad_l, p.pad_r},
          eng);
      if (!jit(pd.impl_info_str())) return dnnl::primitive();
      if (p.kind != Kind::AvgBackward)
        return p.kind == Kind::Max && !plain_workspace(pd.workspace_desc(), p) ? dnnl::primitive()
                                                                                            : dnnl::pooling_v2_forward(pd);
      const dnnl::pooling_v2_backward::primitive_desc bwd(
          {p.algorithm, p.src_desc(), p.dst_desc(), p.stride, p.kernel, p.dilation, p.pad_l, p.pad_r}, eng, pd);
      return jit(bwd.impl_info_str()) ? dnnl::pooling_v2_backward(bwd) : dnnl::primitive();
    } catch (const dnnl::error& e) {
      // Geometry PyTorch allows but oneDNN rejects (e.g. exclude_padding with a right padding
      // as large as the window): the native kernel runs it.
      if (e.status == dnnl_invalid_arguments || e.status == dnnl_unimplemented) return dnnl::primitive();
      throw;
    }
  });
  if (p.kind == Kind::Max && plan.primitive)
    plan.workspace = memory::desc(
        *dnnl_primitive_desc_query_md(plan.primitive.get_primitive_desc(), dnnl_query_workspace_md, 0));
  const memory::desc dense = p.input_desc();
  if (plan.primitive && !p.input.copy && plan.user_input != dense) {
    std::ostringstream k;
    k << "pool reorder " << p.key() << " st=";
    for (int64_t s : p.input.strides) k << s << ".";
    plan.input_reorder = cached_primitive(
        k.str(), [&] { return dnnl::reorder(dnnl::reorder::primitive_desc(eng, plan.user_input, eng, dense)); });
  }
  return plan;
}

// The call's input as the primitive's dense memory: the tensor itself (unless `writable`), a
// dense copy (kept in `buffer`, or for NHWC in `temporary`) or a reorder (into `temporary`).
memory dense_input(const Problem& p, const Plan& plan, const Tensor& t, bool writable,
                   std::unique_ptr<float[]>& buffer, Tensor& temporary) {
  const dnnl::engine& eng = engine();
  const memory::desc dense = p.input_desc();
  if (p.input.copy && p.channels_last) {
    temporary = Tensor::empty(t.sizes(), t.dtype(), t.device(), MemoryFormat::ChannelsLast);
    copy_tensor(temporary, t);
    return memory(dense, eng, temporary.data_ptr());
  }
  if (p.input.copy) {
    buffer = dense_copy(t);
    return memory(dense, eng, buffer.get());
  }
  memory user(plan.user_input, eng, t.data_ptr());
  if (!plan.input_reorder && !writable) return user;
  memory m = temporary_memory(dense, temporary);
  if (plan.input_reorder) plan.input_reorder.execute(stream(), {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, m}});
  else std::memcpy(m.get_data_handle(), t.data_ptr(), dense.get_size());
  return m;
}

// x(n, c, oh, ow) *= s.all * s.rows[oh] * s.cols[ow] for a dense (N*C, OH, OW) buffer, or with
// `channels` > 1 a dense (N, OH, OW, channels) one.
void apply_scale(float* x, int64_t rows, int64_t OH, int64_t OW, int64_t channels, const AvgScale& s) {
  const int64_t width = OW * channels;
  parallel_for(rows * OH, std::max<int64_t>(1, kGrainSize / width), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float f = s.all * (s.rows.empty() ? 1.0f : s.rows[r % OH]);
      float* row = x + r * width;
      if (s.cols.empty())
        for (int64_t j = 0; j < width; ++j) row[j] *= f;
      else
        for (int64_t j = 0; j < width; ++j) row[j] *= f * s.cols[j / channels];
    }
  });
}

// NaN and the lowest finite value, for float32 and for bfloat16 bits (0xff7f: oneDNN starts a
// bfloat16 maximum from it as it starts a float32 one from -FLT_MAX).
inline bool is_nan(float x) { return x != x; }
inline bool is_nan(uint16_t bits) { return (bits & 0x7fffu) > 0x7f80u; }
inline bool is_lowest(float x) { return x == std::numeric_limits<float>::lowest(); }
inline bool is_lowest(uint16_t bits) { return bits == 0xff7fu; }

// Whether x[0, n) holds a NaN (max pooling's fallback test, see the top of the file).
template <typename T>
bool has_nan(const T* x, int64_t n) {
  std::atomic<bool> found{false};
  parallel_for(n, kGrainSize, [&](int64_t b, int64_t e) {
    constexpr int64_t kBlock = 1 << 14;  // stop early once another slice found one
    for (int64_t i = b; i < e && !found.load(std::memory_order_relaxed); i += kBlock) {
      int nan = 0;
      const int64_t end = std::min(e, i + kBlock);
#pragma omp simd reduction(| : nan)
      for (int64_t j = i; j < end; ++j) nan |= is_nan(x[j]);
      if (nan) found = true;
    }
  });
  return found;
}

// Turns the workspace's window positions into PyTorch's flat indices; false when an output is
// the type's lowest finite value (a window of -inf: see the top of the file).
// Workspace, values and indices share the dst's layout: rows of OW (NCHW) or OW * C (NHWC)
// elements, one per (n, c, oh) or (n, oh).
template <typename Pos, typename T>
bool workspace_to_indices(const Problem& p, const Pos* ws, const T* out, int64_t* idx) {
  std::atomic<bool> lowest{false};
  const int64_t KW = p.kernel[1], sh = p.stride[0], sw = p.stride[1], dh = p.dilation[0] + 1, dw = p.dilation[1] + 1;
  const int64_t channels = p.channels_last ? p.C : 1, rows = p.N * (p.channels_last ? 1 : p.C) * p.OH;
  parallel_for(rows, std::max<int64_t>(1, kGrainSize / (p.OW * channels)), [&](int64_t b, int64_t e) {
    bool low = false;
    for (int64_t r = b; r < e; ++r) {
      const int64_t h0 = (r % p.OH) * sh - p.pad_l[0];
      for (int64_t ow = 0; ow < p.OW; ++ow) {
        const int64_t w0 = ow * sw - p.pad_l[1];
        for (int64_t c = 0; c < channels; ++c) {
          const int64_t o = (r * p.OW + ow) * channels + c, pos = ws[o];
          idx[o] = (h0 + pos / KW * dh) * p.W + w0 + pos % KW * dw;
          low |= is_lowest(out[o]);
        }
      }
    }
    if (low) lowest = true;
  });
  return !lowest;
}

// Max pooling of `in` into `out` (values) and `idx` (PyTorch's indices); `values` is `out` as
// the element type (float, or bfloat16's bits). False when the native kernel must run it.
template <typename T>
bool run_max(const Problem& p, const Plan& plan, const memory& in, void* out, int64_t* idx, const T* values) {
  Tensor workspace_temporary;
  dnnl::stream& s = stream();
  memory dst(p.dst_desc(), engine(), out);
  memory ws = temporary_memory(plan.workspace, workspace_temporary);
  plan.primitive.execute(s, {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, dst}, {DNNL_ARG_WORKSPACE, ws}});
  s.wait();
  const void* pos = ws.get_data_handle();
  return plan.workspace.data_type() == memory::data_type::u8
             ? workspace_to_indices(p, static_cast<const uint8_t*>(pos), values, idx)
             : workspace_to_indices(p, static_cast<const int32_t*>(pos), values, idx);
}

// Runs the problem on oneDNN; false when the native kernel must run it instead.
bool run(const Problem& p, const KernelContext& ctx) {
  const Plan plan = make_plan(p);
  if (!plan.primitive) return false;
  const dnnl::engine& eng = engine();
  dnnl::stream& s = stream();
  const bool scale_input = p.kind == Kind::AvgBackward && p.scale.needed();
  std::unique_ptr<float[]> buffer;
  Tensor input_temporary;
  memory in = dense_input(p, plan, ctx.input(0), scale_input, buffer, input_temporary);
  s.wait();
  if (p.dt == memory::data_type::bf16) {  // max pooling
    if (has_nan(static_cast<const uint16_t*>(in.get_data_handle()), p.N * p.C * p.H * p.W)) return false;
    return run_max(p, plan, in, ctx.output(0).data_ptr(), ctx.output(1).data<int64_t>(),
                   static_cast<const uint16_t*>(ctx.output(0).data_ptr()));
  }
  float* in_data = static_cast<float*>(in.get_data_handle());
  if (p.kind == Kind::Max && has_nan(in_data, p.N * p.C * p.H * p.W)) return false;
  // (N*C, OH, OW) planes, or (N, OH, OW, C) rows
  const int64_t scale_rows = p.channels_last ? p.N : p.N * p.C, scale_channels = p.channels_last ? p.C : 1;
  if (scale_input) apply_scale(in_data, scale_rows, p.OH, p.OW, scale_channels, p.scale);
  float* out_data = ctx.output(0).data<float>();
  if (p.kind == Kind::AvgBackward) {
    memory out(p.src_desc(), eng, out_data);
    plan.primitive.execute(s, {{DNNL_ARG_DIFF_DST, in}, {DNNL_ARG_DIFF_SRC, out}});
    s.wait();
    return true;
  }
  memory out(p.dst_desc(), eng, out_data);
  if (p.kind == Kind::Avg) {
    plan.primitive.execute(s, {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, out}});
    s.wait();
    if (p.scale.needed()) apply_scale(out_data, scale_rows, p.OH, p.OW, scale_channels, p.scale);
    return true;
  }
  return run_max(p, plan, in, out_data, ctx.output(1).data<int64_t>(), out_data);
}

template <Kind kind>
void pool_kernel(KernelContext& ctx) {
  const auto problem = make_problem(kind, ctx);
  run_or_fall_back(ctx, [&] { return problem && run(*problem, ctx); }, [&] {
    switch (kind) {
      case Kind::Max:
        if (ctx.input(0).dtype() == DType::BFloat16) run_widened(ctx, max_pool_native);
        else max_pool_native(ctx);
        break;
      case Kind::Avg: avg_pool_native(ctx); break;
      case Kind::AvgBackward: avg_pool_backward_native(ctx); break;
    }
  });
}

}  // namespace
}  // namespace plugflow::cpu::onednn

namespace plugflow::cpu {

void register_onednn_pool_kernels(Registrar& reg) {
  using onednn::Kind;
  const auto f32 = {DType::Float32};
  reg.kernel("max_pool2d", DeviceType::CPU, {DType::Float32, DType::BFloat16}, onednn::pool_kernel<Kind::Max>,
             Priority::Optimized);
  reg.kernel("avg_pool2d", DeviceType::CPU, f32, onednn::pool_kernel<Kind::Avg>, Priority::Optimized);
  reg.kernel("avg_pool2d_backward", DeviceType::CPU, f32, onednn::pool_kernel<Kind::AvgBackward>,
             Priority::Optimized);
}

}  // namespace plugflow::cpu
