// copy (casting between every dtype pair, any strides), fill, arange, linspace.
#include <cuda_runtime_api.h>

#include <cstring>

#include "dmath.cuh"
#include "elementwise.cuh"
#include "launchers.h"
#include "opdefs.h"

namespace plugflow::cuda {

namespace {

template <size_t Size> struct bits;
template <> struct bits<1> { using type = uint8_t; };
template <> struct bits<2> { using type = uint16_t; };
template <> struct bits<4> { using type = uint32_t; };
template <> struct bits<8> { using type = uint64_t; };

struct IdentityFn {
  template <typename C> __device__ __forceinline__ C operator()(C v) const { return v; }
};

template <typename V>
struct ConstantFn {
  V value;
  __device__ __forceinline__ V operator()() const { return value; }
};

// True when the layout is one dense run in the same order for every operand: one memcpy or
// memset covers it.
bool dense(const StridedLayout& L, size_t itemsize) {
  if (L.ndim == 0) return true;
  if (L.ndim > 1) return false;
  for (int k = 0; k < L.num_operands; ++k)
    if (L.byte_strides[k][0] != static_cast<int64_t>(itemsize)) return false;
  return true;
}

void fill_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& out = ctx.output(0);
  if (out.numel() == 0) return;
  const Scalar& value = ctx.attr<Scalar>("value");
  const StridedLayout L = make_layout({&out});
  visit_dtype(out.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    const D v = scalar_to<D>(value);
    // Zero fills (zeros, gradients) of dense memory are the common case: one memset.
    const typename bits<sizeof(D)>::type zero_bits{};
    if (dense(L, sizeof(D)) && std::memcmp(&v, &zero_bits, sizeof(D)) == 0) {
      PF_CUDA_CHECK(cudaMemsetAsync(L.data[0], 0, static_cast<size_t>(L.numel) * sizeof(D), scope.stream));
      return;
    }
    // Filled as raw bits: 10 dtypes share 4 kernels.
    using U = typename bits<sizeof(D)>::type;
    launch_elementwise<U>(L, scope, ConstantFn<U>{scalar_math::bit_copy<U>(v)});
  });
}

template <typename T>
constexpr bool is_range_type_v = !is_bool_v<T>;  // arange and linspace: numeric dtypes

// The generators below round each multiply and add separately (no FMA), so their values are
// the CPU plugin's bit for bit.
struct ArangeFloatFn {  // in double
  double start, step;
  __device__ double operator()(int64_t i) const { return dm::add_rn(start, dm::mul_rn(static_cast<double>(i), step)); }
};
struct ArangeIntFn {  // in wrapping int64
  int64_t start, step;
  __device__ int64_t operator()(int64_t i) const { return wrap_add(start, wrap_mul(i, step)); }
};
template <typename C>
struct LinspaceFn {
  C start, end, step;
  int64_t halfway, steps;
  __device__ C operator()(int64_t i) const {
    return i < halfway ? dm::add_rn(start, dm::mul_rn(step, static_cast<C>(i)))
                       : dm::sub_rn(end, dm::mul_rn(step, static_cast<C>(steps - i - 1)));
  }
};

void arange_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& out = ctx.output(0);
  const Scalar& start = ctx.attr<Scalar>("start");
  const Scalar& step = ctx.attr<Scalar>("step");
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = dev_t<T>;
    if constexpr (!is_range_type_v<T>) {
      throw_unsupported_dtype(ctx, out.dtype());
    } else if constexpr (is_floating_v<T>) {
      launch_indexed<D>(out, scope, ArangeFloatFn{start.to_double(), step.to_double()});
    } else {
      launch_indexed<D>(out, scope, ArangeIntFn{start.to_int(), step.to_int()});
    }
  });
}

// PyTorch's linspace: the first half counts up from start, the second half down from end,
// so both ends are exact. The step is computed in the output's compute type (double for
// integers, whose range may exceed the type), start and end first rounded to the dtype.
void linspace_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& out = ctx.output(0);
  const double start_attr = ctx.attr<double>("start"), end_attr = ctx.attr<double>("end");
  const int64_t steps = out.numel();
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using D = dev_t<T>;
    if constexpr (!is_range_type_v<T>) {
      throw_unsupported_dtype(ctx, out.dtype());
    } else {
      using C = std::conditional_t<std::is_integral_v<D>, double, opmath_t<D>>;
      const C start = static_cast<C>(to_opmath(cast_to<D>(start_attr)));
      const C end = static_cast<C>(to_opmath(cast_to<D>(end_attr)));
      LinspaceFn<C> fn{start, end, C(0), steps / 2, steps};
      if (steps == 1) fn.halfway = 1;  // the single element is start (the step would be 0 / 0)
      else fn.step = (end - start) / static_cast<C>(steps - 1);
      launch_indexed<D>(out, scope, fn);
    }
  });
}

void copy_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  launch_copy(ctx.output(0), ctx.input(0), scope.stream);
}

}  // namespace

void launch_copy(const Tensor& dst, const Tensor& src, void* stream) {
  PF_CHECK_T(dst.sizes() == src.sizes(), ValueError, "copy: source shape ", shape_str(src.sizes()),
             " differs from destination shape ", shape_str(dst.sizes()), " (broadcast before the kernel)");
  if (dst.numel() == 0) return;
  KernelScope scope(dst.device().index, stream);
  const StridedLayout L = make_layout({&dst, &src});
  if (dst.dtype() == src.dtype()) {
    if (dense(L, dst.itemsize())) {
      if (L.data[0] != L.data[1])
        PF_CUDA_CHECK(cudaMemcpyAsync(L.data[0], L.data[1], static_cast<size_t>(L.numel) * dst.itemsize(),
                                      cudaMemcpyDeviceToDevice, scope.stream));
      return;
    }
    // Same type: move bits, so 10 dtypes share 4 kernels (and NaN payloads survive).
    visit_dtype(dst.dtype(), [&](auto tag) {
      using U = typename bits<sizeof(typename decltype(tag)::type)>::type;
      launch_elementwise<U, U>(L, scope, IdentityFn{});
    });
    return;
  }
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using Dst = dev_t<typename decltype(dtag)::type>;
    visit_dtype(src.dtype(), [&](auto stag) {
      using Src = dev_t<typename decltype(stag)::type>;
      if constexpr (!std::is_same_v<Dst, Src>) launch_elementwise<Dst, Src>(L, scope, IdentityFn{});
    });
  });
}

std::vector<KernelDef> copy_kernels() {
  // core/opdefs/creation.yaml names each op's kernel function and dtypes.
  return {
#define PF_X(name, cpu_dtypes, cuda_dtypes, fn) {name, {PF_OPDEFS_UNPAREN cuda_dtypes}, fn},
      PF_OPDEFS_CREATION_KERNELS(PF_X)
#undef PF_X
  };
}

}  // namespace plugflow::cuda
