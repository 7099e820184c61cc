// softmax (docs/kernels.md, "Reduction family") on oneDNN's softmax_v2 (softmax_accurate) for
// float32, registered with Priority::Optimized over the plugin's own kernel (reduction_extra.cpp),
// which stays the float64/16-bit path and this file's fallback. Its backward is composed from
// other ops in autograd: there is no backward kernel.
//
// oneDNN takes lines along the innermost dim of contiguous operands (seen as (rows, n)), where
// its jit kernel beats the native one from about 2048 elements (medians, us, 1 thread, oneDNN /
// native): (64, 100) 6.1 / 8.7, (8, 1000) 6.0 / 6.8, (1024, 1000) 650 / 850; below, the call's
// fixed cost loses ((64, 10) 5.5 / 4.1, (16, 64) 2.6 / 1.8). oneDNN has only its reference
// code for other axes and strided layouts: those run natively, as does any problem for which
// oneDNN offers only its reference code. Below the plugin's grain size oneDNN runs on the
// calling thread, as the native loops do (a parallel region would cost more than the work).
//
// log_softmax stays native: oneDNN 2.6's softmax_log subtracts a log of the sum that is 1e-6
// to 1e-5 relative off (a constant error per line: 1e-6 to 1e-4 relative on the outputs where
// PyTorch is within 3e-7), and the native kernel is as fast ((1024, 1000) 0.60 ms against
// oneDNN's 0.69, PyTorch 0.82).
//
// NaN and +inf: PyTorch makes such a line all NaN (its max is NaN or +inf). oneDNN's max and
// exp drop NaNs, so it gives a NaN only where the input was NaN or +inf (and 0 or -inf
// elsewhere). A finite line never gives a NaN and an all -inf line is already NaN, so a line
// with any NaN in oneDNN's output is made all NaN.
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

#include "../kernels.h"
#include "common.h"
#include "plugflow/error.h"

namespace plugflow::cpu::onednn {
namespace {

constexpr int64_t kMinElements = 2048;

// Lines with a NaN anywhere become all NaN (see above).
void propagate_nan(float* y, int64_t rows, int64_t n) {
  parallel_for(rows, std::max<int64_t>(1, kGrainSize / n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* line = y + r * n;
      int nan = 0;
#pragma omp simd reduction(| : nan)
      for (int64_t j = 0; j < n; ++j) nan |= line[j] != line[j];
      if (nan)
        for (int64_t j = 0; j < n; ++j) line[j] = std::numeric_limits<float>::quiet_NaN();
    }
  });
}

void softmax_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& out = ctx.output(0);
  const auto native = [&] { softmax_native(ctx); };
  const int64_t dim = ctx.attr<int64_t>("dim");
  bool innermost = dim >= 0 && dim < a.dim();
  for (int64_t d = dim + 1; innermost && d < a.dim(); ++d) innermost = a.sizes()[d] == 1;
  if (!innermost || a.numel() < kMinElements || a.dtype() != DType::Float32 || out.dtype() != DType::Float32 ||
      !a.is_contiguous() || !out.is_contiguous() || out.sizes() != a.sizes())
    return native();
  const int64_t n = a.sizes()[dim], rows = a.numel() / n;
  const memory::desc md({rows, n}, memory::data_type::f32, memory::format_tag::ab);
  const auto attempt = [&] {
    const std::string key = "softmax " + std::to_string(rows) + "x" + std::to_string(n);
    const dnnl::primitive p = cached_primitive(key, [&] {
      const dnnl::softmax_v2_forward::primitive_desc pd(
          {dnnl::prop_kind::forward_inference, dnnl::algorithm::softmax_accurate, md, md, 1},
          engine());
      return std::strncmp(pd.impl_info_str(), "ref", 3) == 0 ? dnnl::primitive() : dnnl::softmax_v2_forward(pd);
    });
    if (!p) return false;
    p.execute(stream(), {{DNNL_ARG_SRC, memory(md, engine(), a.data_ptr())},
                         {DNNL_ARG_DST, memory(md, engine(), out.data_ptr())}});
    stream().wait();
    propagate_nan(out.data<float>(), rows, n);
    return true;
  };
  run_or_fall_back(ctx, attempt, native, a.numel() < kGrainSize ? 1 : num_threads());
}

}  // namespace
}  // namespace plugflow::cpu::onednn

namespace plugflow::cpu {

void register_onednn_softmax_kernels(Registrar& reg) {
  const auto f32 = {DType::Float32};
  reg.kernel("softmax", DeviceType::CPU, f32, onednn::softmax_kernel, Priority::Optimized);
}

}  // namespace plugflow::cpu
