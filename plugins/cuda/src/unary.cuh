// The generic entry point of unary elementwise ops (unary_math.cu, unary.cu).
#pragma once
#include "elementwise.cuh"
#include "launchers.h"

namespace plugflow::cuda {

template <typename Desc>
void unary_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor& a = ctx.input(0);
  Tensor& out = ctx.output(0);
  dispatch_supported<Desc>(ctx, a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    using Out = std::conditional_t<Desc::bool_out, bool, D>;
    PF_CHECK(out.dtype() == (Desc::bool_out ? DType::Bool : a.dtype()), "op '", ctx.op.name,
             "': unexpected output dtype ", dtype_name(out.dtype()));
    launch_elementwise<Out, D>(make_layout({&out, &a}), scope, Desc::template make<opmath_t<D>>(ctx.attrs));
  });
}

template <typename Desc>
KernelDef unary_def(const char* name) {
  return {name, supported_dtypes<Desc>(), &unary_kernel<Desc>};
}

}  // namespace plugflow::cuda
