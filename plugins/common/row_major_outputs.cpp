#include "row_major_outputs.h"

#include <utility>
#include <vector>

#include "plugflow/dispatch.h"
#include "plugflow/op.h"

namespace plugflow {
namespace {

// dst = src with the device's copy kernel (any layouts).
void copy_on_device(const KernelContext& ctx, const Tensor& src, const Tensor& dst) {
  static const OpDef& copy = find_op("copy");
  const Attrs no_attrs;
  std::vector<Tensor> in{src}, out{dst};
  KernelContext copy_ctx{copy, in, out, no_attrs, ctx.device, ctx.stream};
  find_kernel(copy, ctx.device.type, src.dtype())(copy_ctx);
}

}  // namespace

void run_with_row_major_outputs(KernelContext& ctx, KernelFn kernel) {
  bool all_contiguous = true;
  for (const Tensor& t : ctx.outputs) all_contiguous = all_contiguous && t.is_contiguous();
  if (all_contiguous) {
    kernel(ctx);
    return;
  }
  std::vector<Tensor> outputs;
  for (const Tensor& t : ctx.outputs)
    outputs.push_back(t.is_contiguous() ? t : Tensor::empty(t.sizes(), t.dtype(), t.device()));
  KernelContext row_major{ctx.op, ctx.inputs, outputs, ctx.attrs, ctx.device, ctx.stream};
  kernel(row_major);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i].is_same(ctx.outputs[i])) copy_on_device(ctx, outputs[i], ctx.outputs[i]);
}

void run_with_row_major_operands(KernelContext& ctx, KernelFn kernel) {
  std::vector<Tensor> inputs(ctx.inputs.begin(), ctx.inputs.end());
  std::vector<std::pair<Tensor, Tensor>> copies;  // (channels-last input, its row-major copy)
  for (Tensor& t : inputs) {
    if (!t.defined() || t.suggest_memory_format() != MemoryFormat::ChannelsLast) continue;
    Tensor row_major;
    for (const auto& [original, copy] : copies)  // one copy of an input passed twice (a placeholder)
      if (original.is_same(t)) row_major = copy;
    if (!row_major.defined()) {
      row_major = Tensor::empty(t.sizes(), t.dtype(), t.device());
      copy_on_device(ctx, t, row_major);
      copies.emplace_back(t, row_major);
    }
    t = row_major;
  }
  if (copies.empty()) return run_with_row_major_outputs(ctx, kernel);
  KernelContext row_major{ctx.op, inputs, ctx.outputs, ctx.attrs, ctx.device, ctx.stream};
  run_with_row_major_outputs(row_major, kernel);
}

}  // namespace plugflow
