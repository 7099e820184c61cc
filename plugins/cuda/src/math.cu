// The `math` family's fused ternary pointwise ops (docs/kernels.md): clamp, lerp, addcmul,
// addcdiv. The functional layer promotes and broadcasts, so the three inputs share the output's
// shape and dtype (any strides, broadcast ones stride 0; the output may alias input 0 element
// for element); each op is one functor for the generic elementwise launcher, computed in
// opmath (float for f16/bf16), with the same formulas as the CPU kernels.
#include <limits>
#include <type_traits>

#include "dmath.cuh"
#include "elementwise.cuh"
#include "opdefs.h"

namespace plugflow::cuda {
namespace {

// r = a; if has_min and r < min: r = min; if has_max and r > max: r = max (min > max gives
// max). Floats: NaN in a or in a present bound gives NaN. An absent bound's operand is a
// placeholder whose value is ignored.
template <typename C>
struct ClampFn {
  bool has_min, has_max;
  PF_DEVICE C operator()(C a, C lo, C hi) const {
    if constexpr (is_float_v<C>) {
      if (dm::isnan(a) || (has_min && dm::isnan(lo)) || (has_max && dm::isnan(hi)))
        return std::numeric_limits<C>::quiet_NaN();
    }
    C r = a;
    if (has_min && r < lo) r = lo;
    if (has_max && r > hi) r = hi;
    return r;
  }
};
struct ClampDesc : AllTypes {
  template <typename C> static ClampFn<C> make(const Attrs& at) {
    return {at.get<bool>("has_min"), at.get<bool>("has_max")};
  }
};

// lerp: scalar_math::lerp, shared with the CPU kernel.
struct LerpFn {
  template <typename C> PF_DEVICE C operator()(C a, C end, C w) const { return scalar_math::lerp(a, end, w); }
};
struct LerpDesc : Stateless<LerpFn, FloatTypes> {};

// self + value * t1 * t2; integers wrap. value converts like a cast to the dtype.
template <typename C>
struct AddcmulFn {
  C value;
  PF_DEVICE C operator()(C s, C a, C b) const {
    if constexpr (std::is_integral_v<C>) return wrap_add(s, wrap_mul(value, wrap_mul(a, b)));
    else return scalar_math::addcmul(s, value, a, b);
  }
};
struct AddcmulDesc : NumericTypes {
  template <typename C> static AddcmulFn<C> make(const Attrs& at) { return {scalar_to<C>(at.get<Scalar>("value"))}; }
};

// self + value * t1 / t2, in that order; floating only (the core refuses integer t1 and t2).
template <typename C>
struct AddcdivFn {
  C value;
  PF_DEVICE C operator()(C s, C a, C b) const { return s + value * a / b; }
};
struct AddcdivDesc : FloatTypes {
  template <typename C> static AddcdivFn<C> make(const Attrs& at) { return {scalar_to<C>(at.get<Scalar>("value"))}; }
};

template <typename Desc>
void ternary_kernel(KernelContext& ctx) {
  KernelScope scope(ctx);
  const Tensor &a = ctx.input(0), &b = ctx.input(1), &c = ctx.input(2);
  Tensor& out = ctx.output(0);
  PF_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype() && out.dtype() == a.dtype(), "op '", ctx.op.name,
           "' needs inputs and output of one dtype, got ", dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), ", ",
           dtype_name(c.dtype()), " -> ", dtype_name(out.dtype()), "; the functional layer promotes them first");
  dispatch_supported<Desc>(ctx, a.dtype(), [&](auto tag) {
    using D = dev_t<typename decltype(tag)::type>;
    launch_elementwise<D, D, D, D>(make_layout({&out, &a, &b, &c}), scope, Desc::template make<opmath_t<D>>(ctx.attrs));
  });
}

template <typename Desc>
KernelDef def(const char* name) {
  return {name, supported_dtypes<Desc>(), &ternary_kernel<Desc>};
}

}  // namespace

// The ops of the definitions (core/opdefs/math.yaml): each descriptor is named after its op
// (lerp -> LerpDesc) and covers the dtypes the definition declares.
#define PF_X(name, Camel, dtypes, sig)                         \
  static_assert(std::is_base_of_v<dtypes##Types, Camel##Desc>, \
                name ": the descriptor's dtypes differ from math.yaml's");
PF_OPDEFS_TERNARY(PF_X)
#undef PF_X

std::vector<KernelDef> math_kernels() {
  return {
#define PF_X(name, Camel, dtypes, sig) def<Camel##Desc>(name),
      PF_OPDEFS_TERNARY(PF_X)
#undef PF_X
  };
}

}  // namespace plugflow::cuda
