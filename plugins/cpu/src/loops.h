// The generic CPU loops every kernel family builds on: dtype helpers, the strided
// elementwise driver (any number of inputs, any input and output strides) and kernel
// registration helpers.
//
// An elementwise op is a functor `Out operator()(In...) const` on storage types. Each functor
// gets exactly one compiled loop, over contiguous operands (the one the auto-vectorizer
// handles); the driver (loops.cpp, compiled once for all of them) walks the coalesced layout
// from plugflow/layout.h and feeds that loop:
//   * all operands contiguous in an innermost run -> the run itself,
//   * anything else (a broadcast scalar, strides) -> the run in chunks staged through small
//     buffers: stride-0 inputs replicated, strided inputs gathered, a strided output
//     scattered afterwards.
// So layouts cost no code per functor and dtype (four specialized loops each once made the
// plugin slow to compile, under sanitizers above all). Work is split across OpenMP threads by
// flat element range, so a few long runs parallelize as well as many short ones.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>

#include "parallel.h"
#include "scalar_math.h"
#include "plugflow/dtype.h"
#include "plugflow/kernel.h"
#include "plugflow/layout.h"
#include "plugflow/plugin.h"
#include "plugflow/scalar.h"
#include "plugflow/tensor.h"

namespace plugflow::cpu {

// ---- dtype helpers ------------------------------------------------------------------------

template <typename T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
inline constexpr bool is_float_v = is_reduced_float_v<T> || std::is_floating_point_v<T>;
template <typename T>
inline constexpr bool is_int_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;  // no bool

// The type arithmetic happens in: float for the 16-bit floats (PyTorch's opmath_type).
template <typename T>
using opmath_t = std::conditional_t<is_reduced_float_v<T>, float, T>;

// Conversions between storage types with PyTorch's (x86) results, and without undefined
// behaviour for out-of-range floats: NaN and values outside the target range give the
// "integer indefinite" value INT_MIN, as cvttss2si does and as PyTorch shows on x86.
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<opmath_t<From>>(v) != opmath_t<From>(0);
  } else if constexpr (is_float_v<From> && std::is_integral_v<To>) {
    return scalar_math::float_to_int<To>(static_cast<double>(static_cast<opmath_t<From>>(v)));
  } else if constexpr (is_reduced_float_v<To>) {
    return To(static_cast<float>(static_cast<opmath_t<From>>(v)));
  } else {
    return static_cast<To>(static_cast<opmath_t<From>>(v));
  }
}

// A Scalar attribute as storage type T, with the same conversion rules as a tensor cast.
template <typename T>
inline T scalar_to(const Scalar& v) {
  if (v.is_floating()) return convert<T>(v.to_double());
  if (v.is_bool()) return convert<T>(v.to_bool());
  return convert<T>(v.to_int());
}

// Two's-complement wrapping arithmetic for integers (plugins/common/scalar_math.h, shared with
// the CUDA plugin). Vectorizes exactly like the plain operators.
using scalar_math::wrap_add;
using scalar_math::wrap_mul;
using scalar_math::wrap_sub;

// The dtypes an op template supports, for registration: OpT<T>::supported for each T.
template <template <typename> class OpT>
void register_supported(Registrar& reg, const std::string& name, KernelFn fn) {
  for (int d = 0; d < kNumDTypes; ++d) {
    const DType dt = static_cast<DType>(d);
    const bool ok = visit_dtype(dt, [](auto tag) { return OpT<typename decltype(tag)::type>::supported; });
    if (ok) reg.kernel(name, DeviceType::CPU, {dt}, fn);
  }
}

// Calls f(type_tag<T>) for the key dtype when OpT<T> supports it; otherwise a clear error
// (only reachable if registration and the functor disagree).
template <template <typename> class OpT, typename F>
void dispatch_supported(const KernelContext& ctx, DType dt, F&& f) {
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (OpT<T>::supported) {
      f(tag);
    } else {
      PF_THROW(NotImplementedError, "cpu kernel for '", ctx.op.name, "' does not support dtype ", dtype_name(dt));
    }
  });
}

// ---- iteration ------------------------------------------------------------------------------

// Calls f(ptrs, n) for the pieces of the flat element range [begin, end) of L (in L's
// iteration order): each piece lies within one innermost run, ptrs[k] points at operand k's
// first element of the piece and its elements are spaced by byte_strides[k][ndim-1].
template <typename F>
void for_each_piece(const StridedLayout& L, int64_t begin, int64_t end, F&& f) {
  if (begin >= end) return;
  std::array<char*, kMaxLayoutOperands> ptrs;
  if (L.ndim == 0) {  // a single element
    for (int k = 0; k < L.num_operands; ++k) ptrs[k] = L.data[k];
    f(ptrs.data(), int64_t{1});
    return;
  }
  const int inner = L.ndim - 1;
  const int64_t run_len = L.sizes[inner];
  std::array<int64_t, kMaxLayoutDims> idx{};
  int64_t run = begin / run_len, pos_in_run = begin % run_len;
  for (int d = inner - 1; d >= 0; --d) {
    idx[d] = run % L.sizes[d];
    run /= L.sizes[d];
  }
  int64_t pos = begin;
  while (pos < end) {
    const int64_t n = std::min(run_len - pos_in_run, end - pos);
    for (int k = 0; k < L.num_operands; ++k) {
      char* p = L.data[k] + pos_in_run * L.byte_strides[k][inner];
      for (int d = 0; d < inner; ++d) p += idx[d] * L.byte_strides[k][d];
      ptrs[k] = p;
    }
    f(ptrs.data(), n);
    pos += n;
    pos_in_run = 0;
    for (int d = inner - 1; d >= 0; --d) {
      if (++idx[d] < L.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

namespace detail {

// The loop of one functor: out[i] = f(in_0[i], ..., in_{N-1}[i]) for i < n, where p[0] is the
// output and p[1..N] the inputs, all contiguous; f points at the functor.
using ContiguousLoop = void (*)(char* const* p, int64_t n, const void* f);

// `omp simd`: iterations are independent even for in-place calls, where the output aliases
// an input element-for-element (same index), so the vectorizer needs no runtime alias checks.
template <typename F, typename Out, typename... In, size_t... I>
void contiguous_loop_impl(char* const* p, int64_t n, const F& f, std::index_sequence<I...>) {
  Out* out = reinterpret_cast<Out*>(p[0]);
  if constexpr (sizeof...(In) == 0) {
    const Out v = f();  // nullary functors are pure (fill): compute once
    for (int64_t i = 0; i < n; ++i) out[i] = v;
  } else {
    const std::tuple<const In*...> in{reinterpret_cast<const In*>(p[I + 1])...};
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = f(std::get<I>(in)[i]...);
  }
}

template <typename F, typename Out, typename... In>
[[gnu::target_clones("avx2", "default")]] void contiguous_loop(char* const* p, int64_t n, const void* f) {
  contiguous_loop_impl<F, Out, In...>(p, n, *static_cast<const F*>(f), std::index_sequence_for<In...>{});
}

// contiguous_loop for functors that call std::fma (lerp): its x86-64-v3 clone has the FMA
// instructions, where the avx2 one would call libm's fma per element. Other functors stay on
// contiguous_loop: with FMA, GCC contracts a * b + c into one rounding and their results would
// change.
template <typename F, typename Out, typename... In>
[[gnu::target_clones("arch=x86-64-v3", "default")]] void contiguous_fma_loop(char* const* p, int64_t n, const void* f) {
  contiguous_loop_impl<F, Out, In...>(p, n, *static_cast<const F*>(f), std::index_sequence_for<In...>{});
}

// The driver: operand 0 is the output; item_sizes[k] is operand k's storage size in bytes.
void run_elementwise(std::span<const Tensor* const> operands, std::span<const int64_t> item_sizes, ContiguousLoop loop,
                     const void* f);

}  // namespace detail

// out[i] = f(in_0[i], ..., in_{N-1}[i]) over out's shape. Inputs must have out's shape
// (broadcast ones as stride-0 views); any strides. Out and In are storage types.
// Whether a functor's loops are compiled for FMA: it says so with `fused_multiply_add` (its
// operator() calls std::fma). Passed as elementwise's last argument.
template <typename Op>
inline constexpr std::bool_constant<requires { Op::fused_multiply_add; }> fused_multiply_add_of{};

// With kFusedMultiplyAdd, f's dense loop is compiled for FMA (detail::contiguous_fma_loop).
template <typename Out, typename... In, typename F, bool kFusedMultiplyAdd = false>
void elementwise(const Tensor& out, std::array<const Tensor*, sizeof...(In)> ins, const F& f,
                 std::bool_constant<kFusedMultiplyAdd> = {}) {
  constexpr size_t N = sizeof...(In);
  std::array<const Tensor*, N + 1> ops{};
  ops[0] = &out;
  for (size_t k = 0; k < N; ++k) ops[k + 1] = ins[k];
  static constexpr std::array<int64_t, N + 1> item{static_cast<int64_t>(sizeof(Out)), static_cast<int64_t>(sizeof(In))...};
  constexpr detail::ContiguousLoop loop =
      kFusedMultiplyAdd ? &detail::contiguous_fma_loop<F, Out, In...> : &detail::contiguous_loop<F, Out, In...>;
  detail::run_elementwise(ops, item, loop, &f);
}

// float16/bfloat16 (T) <-> float32 over dense arrays of the 16-bit values' bits, vectorized for
// the CPU's ISA: the 16-bit path of kernels whose float32 loop is the fast one (a 16-bit value
// widens exactly; narrowing rounds to nearest even, as every conversion to T).
template <typename T>
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void widen_16bit(const uint16_t* in,
                                                                                               float* out, int64_t n) {
  _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) out[i] = T::to_float(in[i]);
}
template <typename T>
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void narrow_16bit(const float* in,
                                                                                                uint16_t* out, int64_t n) {
  _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) out[i] = T::from_float(in[i]);
}

// Writes f(i) to element i (row-major logical order) of a 1-d or contiguous output; used by
// index-dependent generators (arange, linspace, random). A non-contiguous output is filled
// through a contiguous temporary so "element i" keeps meaning the logical index.
void copy_tensor(const Tensor& dst, const Tensor& src);  // copy_fill.cpp

// Runs `kernel` on float32 copies of the call's float16/bfloat16 inputs and outputs, then
// rounds the outputs back: the 16-bit path of kernels that only the float32 path implements
// (oneDNN kernels' fallbacks). Other operands pass through. copy_fill.cpp.
void run_widened(KernelContext& ctx, KernelFn kernel);

template <typename T, typename F>
void generate_indexed(const Tensor& out, const F& f, int64_t grain = kGrainSize) {
  const int64_t numel = out.numel();
  if (numel == 0) return;
  if (!out.is_contiguous()) {
    Tensor tmp = Tensor::empty(out.sizes(), out.dtype(), out.device());
    generate_indexed<T>(tmp, f, grain);
    copy_tensor(out, tmp);
    return;
  }
  T* o = out.data<T>();
  parallel_for(numel, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] = f(i);
  });
}

}  // namespace plugflow::cpu
