// mm and bmm for bfloat16 on oneDNN's matmul primitive (docs/kernels.md, "Matrix products"):
// AMX or AVX512_BF16 kernels where the CPU has them, float32 accumulation and one rounding of
// each result, 5-7x faster than widening to float32 for sgemm on BERT-size products here.
// Registered with Priority::Optimized over the plugin's kernels (matmul.cpp), which widen and
// stay the fallback; float32 keeps sgemm (blas.h).
//
// Operands are described to oneDNN with their own strides (a transposed weight costs nothing);
// stride-0 (expanded) operands are copied dense first. Primitives are cached per shape, strides
// and thread count (cached_primitive).
#include <sstream>

#include "../blas.h"
#include "../kernels.h"
#include "../loops.h"
#include "common.h"

namespace plugflow::cpu::onednn {
namespace {

using memory_dt = memory::data_type;

// False when oneDNN does not take the call (then the plugin's kernel runs).
bool run_matmul(const KernelContext& ctx, bool batched) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  const Tensor& out = ctx.output(0);
  if (out.numel() == 0 || !out.is_contiguous() || a.dtype() != DType::BFloat16 || b.dtype() != DType::BFloat16 ||
      out.dtype() != DType::BFloat16)
    return false;
  const int64_t bd = batched ? 1 : 0;
  const int64_t M = a.sizes()[bd], K = a.sizes()[bd + 1], N = b.sizes()[bd + 1];
  if (K == 0) return false;  // an empty sum: zeros, from the plugin's kernel
  const Dims batch = batched ? Dims{a.sizes()[0]} : Dims{};
  auto dims = [&](int64_t r, int64_t c) {
    Dims d = batch;
    d.push_back(r);
    d.push_back(c);
    return d;
  };
  const Operand oa = operand(a, dims(M, K)), ob = operand(b, dims(K, N));
  const Dims dst = dims(M, N);
  std::ostringstream key;
  key << "matmul bf16";
  for (const Operand* o : {&oa, &ob}) {
    key << " ";
    for (size_t i = 0; i < o->dims.size(); ++i) key << (i ? "x" : "") << o->dims[i] << ":" << o->strides[i];
  }
  const dnnl::primitive primitive = cached_primitive(key.str(), [&]() -> dnnl::primitive {
    try {
      const memory::desc dst_md(dst, memory_dt::bf16, batched ? memory::format_tag::abc : memory::format_tag::ab);
      return dnnl::matmul(dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(user_desc(oa, memory_dt::bf16), user_desc(ob, memory_dt::bf16), dst_md), engine()));
    } catch (const dnnl::error& e) {
      if (e.status == dnnl_unimplemented) return {};
      throw;
    }
  });
  if (!primitive) return false;
  Tensor dense_a, dense_b;  // copies of expanded operands
  auto data = [](const Tensor& t, const Operand& o, Tensor& dense) {
    if (!o.copy) return t.data_ptr();
    dense = Tensor::empty(t.sizes(), t.dtype(), t.device());
    copy_tensor(dense, t);
    return dense.data_ptr();
  };
  const dnnl::engine& eng = engine();
  memory ma(user_desc(oa, memory_dt::bf16), eng, data(a, oa, dense_a));
  memory mb(user_desc(ob, memory_dt::bf16), eng, data(b, ob, dense_b));
  memory mc(memory::desc(dst, memory_dt::bf16, batched ? memory::format_tag::abc : memory::format_tag::ab), eng,
            out.data_ptr());
  primitive.execute(stream(), {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
  stream().wait();
  return true;
}

template <bool Batched>
void matmul_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1), &out = ctx.output(0);
  const int64_t bd = Batched ? 1 : 0;
  // Anything the plugin's kernel would refuse goes there, for its error message.
  const bool shapes_ok = a.dim() == bd + 2 && b.dim() == bd + 2 && out.dim() == bd + 2 &&
                         b.sizes()[bd] == a.sizes()[bd + 1] && out.sizes()[bd] == a.sizes()[bd] &&
                         out.sizes()[bd + 1] == b.sizes()[bd + 1] &&
                         (!Batched || (b.sizes()[0] == a.sizes()[0] && out.sizes()[0] == a.sizes()[0]));
  const int64_t madds =
      shapes_ok ? (Batched ? a.sizes()[0] : 1) * a.sizes()[bd] * a.sizes()[bd + 1] * b.sizes()[bd + 1] : 0;
  // Products too small to share run on one thread, as sgemm's do (blas.h).
  const int threads = omp_in_parallel() || madds < kGemmGrain ? 1 : num_threads();
  run_or_fall_back(
      ctx, [&] { return shapes_ok && run_matmul(ctx, Batched); }, [&] { Batched ? bmm_native(ctx) : mm_native(ctx); },
      threads);
}

}  // namespace
}  // namespace plugflow::cpu::onednn

namespace plugflow::cpu {

void register_onednn_matmul_kernels(Registrar& reg) {
  reg.kernel("mm", DeviceType::CPU, {DType::BFloat16}, onednn::matmul_kernel<false>, Priority::Optimized);
  reg.kernel("bmm", DeviceType::CPU, {DType::BFloat16}, onednn::matmul_kernel<true>, Priority::Optimized);
}

}  // namespace plugflow::cpu
