// The generic elementwise launcher: out = f(in...) over operands of one shape with any
// strides, described by a StridedLayout (coalesced dims, byte strides; operand 0 is the
// output). f receives the inputs in opmath (float for f16/bf16) and its result is cast to
// the output type with cast_to.
//
// Two kernels: a linear one when the layout has at most one dim (contiguous, a broadcast
// scalar, or one constant stride: no index math), and an N-d one that maps a linear index
// to byte offsets with ElementwiseOffsets in 32-bit arithmetic (bigger spaces are split).
#pragma once
#include <climits>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "indexing.h"
#include "kernel_common.h"
#include "launchers.h"
#include "plugflow/layout.h"
#include "types.cuh"

namespace plugflow::cuda {

template <int N>
struct OperandPtrs {
  char* p[N];
};
template <int N>
struct OperandStrides {
  int64_t s[N];  // bytes
};

template <typename Out, typename... In, typename F, size_t... I>
__device__ __forceinline__ void apply_at(char* const (&p)[sizeof...(In) + 1], const F& f,
                                         std::index_sequence<I...>) {
  *reinterpret_cast<Out*>(p[0]) = cast_to<Out>(f(to_opmath(*reinterpret_cast<const In*>(p[I + 1]))...));
}

template <typename F, typename Out, typename... In>
__global__ void elementwise_linear_kernel(int64_t n, OperandPtrs<sizeof...(In) + 1> base,
                                          OperandStrides<sizeof...(In) + 1> stride, F f) {
  constexpr int N = sizeof...(In) + 1;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    char* p[N];
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = base.p[k] + i * stride.s[k];
    apply_at<Out, In...>(p, f, std::index_sequence_for<In...>{});
  }
}

template <typename F, typename Out, typename... In>
__global__ void elementwise_nd_kernel(uint32_t n, OperandPtrs<sizeof...(In) + 1> base,
                                      ElementwiseOffsets<sizeof...(In) + 1> calc, F f) {
  constexpr int N = sizeof...(In) + 1;
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[N];
    calc.get(i, off);
    char* p[N];
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = base.p[k] + off[k];
    apply_at<Out, In...>(p, f, std::index_sequence_for<In...>{});
  }
}

// Out, In...: device element types (dev_t<T>) of the output and the inputs, in layout order.
template <typename Out, typename... In, typename F>
void launch_elementwise(const StridedLayout& layout, const KernelScope& scope, const F& f) {
  constexpr int N = sizeof...(In) + 1;
  PF_CHECK(layout.num_operands == N, "elementwise launcher built for ", N, " operands got a layout of ",
           layout.num_operands);
  if (layout.numel == 0) return;
  OperandPtrs<N> base;
  if (layout.ndim <= 1) {  // 64-bit linear indexing: no divisions to save
    OperandStrides<N> strides;
    for (int k = 0; k < N; ++k) {
      base.p[k] = layout.data[k];
      strides.s[k] = layout.ndim == 0 ? 0 : layout.byte_strides[k][0];
    }
    elementwise_linear_kernel<F, Out, In...>
        <<<scope.blocks_for(layout.numel), kBlockThreads, 0, scope.stream>>>(layout.numel, base, strides, f);
    PF_CUDA_CHECK_LAUNCH();
    return;
  }
  for_each_32bit_piece(layout, [&](const StridedLayout& L) {
    for (int k = 0; k < N; ++k) base.p[k] = L.data[k];
    const auto calc = ElementwiseOffsets<N>::from_layout(L);
    // The grid-stride index may pass numel by one grid before the loop ends: keep that in
    // 32 bits too (numel <= 2^31 - 1 and the grid is far smaller than 2^31).
    elementwise_nd_kernel<F, Out, In...>
        <<<scope.blocks_for(L.numel), kBlockThreads, 0, scope.stream>>>(static_cast<uint32_t>(L.numel), base, calc, f);
    PF_CUDA_CHECK_LAUNCH();
  });
}

// ---- index-dependent generators (arange, linspace, random) ------------------------------

template <typename F, typename Out>
__global__ void indexed_kernel(int64_t n, Out* out, F f) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = cast_to<Out>(f(i));
}

// Writes f(i) to element i (row-major logical order) of `out`. A non-contiguous output is
// filled through a contiguous temporary, so "element i" keeps meaning the logical index
// (the CPU plugin does the same).
template <typename Out, typename F>
void launch_indexed(const Tensor& out, const KernelScope& scope, const F& f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (!out.is_contiguous()) {
    Tensor tmp = Tensor::empty(out.sizes(), out.dtype(), out.device());
    launch_indexed<Out>(tmp, scope, f);
    launch_copy(out, tmp, scope.stream);
    return;
  }
  indexed_kernel<F, Out><<<scope.blocks_for(n), kBlockThreads, 0, scope.stream>>>(n, static_cast<Out*>(out.data_ptr()), f);
  PF_CUDA_CHECK_LAUNCH();
}

// ---- op descriptors ----------------------------------------------------------------------
// A descriptor says for which element types an op exists (`supports<T>`, on plugflow's C++
// types) and builds the device functor for opmath type C from the call's attributes
// (`make<C>(attrs)`). The same `supports` decides the registered dtypes and the
// instantiated kernels, so the two cannot disagree.

// Type families; a descriptor derives from one.
struct AllTypes {
  template <typename T> static constexpr bool supports = true;
};
struct NumericTypes {  // everything but bool
  template <typename T> static constexpr bool supports = is_numeric_v<T>;
};
struct FloatTypes {
  template <typename T> static constexpr bool supports = is_floating_v<T>;
};
struct IntegralTypes {  // integers and bool (bitwise ops)
  template <typename T> static constexpr bool supports = !is_floating_v<T>;
};

// A descriptor for a functor without attributes.
template <typename Functor, typename Family, bool BoolOut = false>
struct Stateless : Family {
  static constexpr bool bool_out = BoolOut;
  template <typename C> static Functor make(const Attrs&) { return {}; }
};

template <typename Desc>
std::vector<DType> supported_dtypes() {
  std::vector<DType> out;
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    visit_dtype(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (Desc::template supports<T>) out.push_back(t);
    });
  }
  return out;
}

// Calls f(type_tag<T>) for dtype t when Desc supports it.
template <typename Desc, typename F>
void dispatch_supported(const KernelContext& ctx, DType t, F&& f) {
  visit_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (Desc::template supports<T>) f(tag);
    else throw_unsupported_dtype(ctx, t);
  });
}

// Optional attributes with a default (kernels are also called directly, by tests and by
// other kernels of the plugin).
template <typename T>
T attr_or(const Attrs& attrs, std::string_view name, T fallback) {
  return attrs.has(name) ? attrs.get<T>(name) : fallback;
}

}  // namespace plugflow::cuda
