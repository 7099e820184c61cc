#include "row_major_outputs.h"

#include <vector>

#include "plugflow/dispatch.h"
#include "plugflow/op.h"

namespace plugflow {

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
  const OpDef& copy = find_op("copy");
  const Attrs no_attrs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].is_same(ctx.outputs[i])) continue;
    std::vector<Tensor> in{outputs[i]}, out{ctx.outputs[i]};
    KernelContext copy_ctx{copy, in, out, no_attrs, ctx.device, ctx.stream};
    find_kernel(copy, ctx.device.type, outputs[i].dtype())(copy_ctx);
  }
}

}  // namespace plugflow
