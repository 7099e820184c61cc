// mm_fused (docs/kernels.md, "Fused ops") on oneDNN's matmul primitive for float32, registered
// with Priority::Optimized over the plugin's own kernel (fused.cpp: mm, then the epilogue with
// the add and activation kernels), which stays the float64 path and this file's fallback.
//
// The epilogue is the primitive's: the bias, then post-ops sum (the addend, which the destination
// holds: the graph writes the sum in place of a dying addend, else it is copied there first) and
// eltwise (the activation), applied to each block of the product while it is in registers. On
// BERT-tiny and MLP shapes (2 threads, AVX-512) the primitive with bias and activation took the
// time of the bare sgemm that mm runs (M, K, N = 1024, 128, 384: 236 vs 219 us; 64, 256, 256:
// 24 vs 25 us), where the separate bias and activation passes added 30-80%. With save_pre (a
// training graph whose GELU/SiLU backward reads the value before the activation) the primitive
// writes that value and the activation runs as the plain kernel from it.
//
// Operands are described with their own strides (a Linear's weight arrives transposed); an
// expanded (stride-0) operand goes to the fallback.
#include <sstream>
#include <string>
#include <unordered_map>

#include "../blas.h"
#include "../kernels.h"
#include "../loops.h"
#include "common.h"
#include "plugflow/error.h"

namespace plugflow::cpu::onednn {
namespace {

std::string dims_str(const Dims& d) {
  std::ostringstream s;
  for (size_t i = 0; i < d.size(); ++i) s << (i ? "." : "") << d[i];
  return s.str();
}

void mm_fused_kernel(KernelContext& ctx) {
  const bool has_bias = ctx.attr<bool>("has_bias"), has_addend = ctx.attr<bool>("has_addend");
  const bool save_pre = ctx.attr<bool>("save_pre");
  const std::string& activation = ctx.attr<std::string>("activation");
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  Tensor& out = ctx.output(0);
  const Tensor& dst = save_pre ? ctx.output(1) : out;  // what the primitive writes
  const int64_t M = a.sizes()[0], K = a.sizes()[1], N = b.sizes()[1];
  const auto attempt = [&] {
    if (a.dtype() != DType::Float32 || !dst.is_contiguous() || M == 0 || N == 0 || K == 0) return false;
    const Operand sa = operand(a, {M, K}), sb = operand(b, {K, N});
    Operand sbias, sz;
    if (has_bias) sbias = operand(Tensor::view_of(ctx.input(2).storage(), {1, N}, {0, ctx.input(2).strides()[0]},
                                                  ctx.input(2).offset(), DType::Float32), {1, N});
    if (has_addend) sz = operand(ctx.inputs.back(), {M, N});
    if (sa.copy || sb.copy || (has_bias && sbias.copy) || (has_addend && sz.copy)) return false;
    const memory::desc ad = user_desc(sa), bd = user_desc(sb), cd({M, N}, memory::data_type::f32, Dims{N, 1});
    const memory::desc biasd = has_bias ? user_desc(sbias) : memory::desc();
    const std::string post = save_pre ? "none" : activation;
    std::ostringstream key;
    key << "mm_fused " << M << "x" << K << "x" << N << " a=" << dims_str(sa.strides) << " b=" << dims_str(sb.strides)
        << (has_bias ? " bias=" + dims_str(sbias.strides) : "") << (has_addend ? " +sum" : "") << " +" << post;
    const dnnl::primitive p = cached_primitive(key.str(), [&] {
      dnnl::post_ops ops;
      if (has_addend) ops.append_sum(1.0f);
      append_activation(ops, post);
      dnnl::primitive_attr attr;
      attr.set_post_ops(ops);
      const auto desc = has_bias ? dnnl::matmul::desc(ad, bd, biasd, cd) : dnnl::matmul::desc(ad, bd, cd);
      return dnnl::primitive(dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine())));
    });
    if (has_addend && ctx.inputs.back().data_ptr() != dst.data_ptr()) copy_tensor(dst, ctx.inputs.back());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(ad, engine(), a.data_ptr())},
                                         {DNNL_ARG_WEIGHTS, memory(bd, engine(), b.data_ptr())},
                                         {DNNL_ARG_DST, memory(cd, engine(), dst.data_ptr())}};
    if (has_bias) args.emplace(DNNL_ARG_BIAS, memory(biasd, engine(), ctx.input(2).data_ptr()));
    p.execute(stream(), args);
    stream().wait();
    return true;
  };
  bool by_onednn = false;
  run_or_fall_back(ctx, [&] { return by_onednn = attempt(); }, [&] { mm_fused_native(ctx); },
                   M * N * K < kGemmGrain ? 1 : num_threads());
  if (by_onednn && save_pre && activation != "none") fused_epilogue(ctx, dst, nullptr, nullptr, activation, out);
}

}  // namespace
}  // namespace plugflow::cpu::onednn

namespace plugflow::cpu {

void register_onednn_fused_kernels(Registrar& reg) {
  reg.kernel("mm_fused", DeviceType::CPU, {DType::Float32}, onednn::mm_fused_kernel, Priority::Optimized);
}

}  // namespace plugflow::cpu
