// Matrix products. matmul follows numpy/PyTorch: 1-D operands are promoted to matrices and
// the promoted dims removed again; batch dims broadcast.
#include "../autograd/grad_utils.h"
#include "plugflow/autocast.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"

namespace plugflow::ops {
namespace {

using Tensors = std::vector<Tensor>;

// d(a@b)/da = g @ b^T, d/db = a^T @ g, on the last two dims (mm and bmm alike; mm in PyTorch's
// layout-keeping form, autograd::mm_grad_a / mm_grad_b).
void record_matmul(const char* name, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (!is_floating(out.dtype()) || !autograd::any_requires_grad({&a, &b})) return;
  const bool batched = a.dim() == 3;
  auto node = autograd::make_node(name, [batched](const Tensors& g, const Tensors& s) -> Tensors {
    const Tensor &a = s[0], &b = s[1];
    if (batched) return {bmm(g[0], transpose(b, 1, 2)), bmm(transpose(a, 1, 2), g[0])};
    return {autograd::mm_grad_a(g[0], b, autograd::column_major(a)), autograd::mm_grad_b(g[0], a, autograd::column_major(b))};
  });
  node->save(a);
  node->save(b);
  autograd::record(node, {a, b}, {out});
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"mm", {a, b}}) return mm(cast[0], cast[1]);
  static const OpDef& op = find_op("mm");
  const Tensor in[] = {a, b};
  PF_CHECK(a.dim() == 2, "self must be a matrix");
  PF_CHECK(b.dim() == 2, "mat2 must be a matrix");
  Tensor out = a.sizes()[1] == 0 && a.sizes()[1] == b.sizes()[0] && a.dtype() == b.dtype()
                   ? zeros({a.sizes()[0], b.sizes()[1]}, a.dtype(), a.device())  // empty inner dim: zeros
                   : call_op(op, in)[0];
  record_matmul("MmBackward0", a, b, out);
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"bmm", {a, b}}) return bmm(cast[0], cast[1]);
  static const OpDef& op = find_op("bmm");
  PF_CHECK(a.dim() == 3, "batch1 must be a 3D tensor");
  PF_CHECK(b.dim() == 3, "batch2 must be a 3D tensor");
  const Tensor in[] = {a, b};
  Tensor out = a.sizes()[2] == 0 && a.sizes()[2] == b.sizes()[1] && a.sizes()[0] == b.sizes()[0] &&
                       a.dtype() == b.dtype()
                   ? zeros({a.sizes()[0], a.sizes()[1], b.sizes()[2]}, a.dtype(), a.device())
                   : call_op(op, in)[0];
  record_matmul("BmmBackward0", a, b, out);
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{"matmul", {a, b}}) return matmul(cast[0], cast[1]);
  PF_CHECK(a.dim() > 0 && b.dim() > 0, "both arguments to matmul need to be at least 1D, but they are ", a.dim(),
           "D and ", b.dim(), "D");
  PF_CHECK(a.dtype() == b.dtype(), "expected scalar type ", dtype_name(a.dtype()), " but found ", dtype_name(b.dtype()));
  if (a.dim() == 1 && b.dim() == 1) {
    PF_CHECK(a.sizes()[0] == b.sizes()[0], "inconsistent tensor size, expected tensor [", a.sizes()[0],
             "] and src [", b.sizes()[0], "] to have the same number of elements, but got ", a.sizes()[0], " and ",
             b.sizes()[0], " elements respectively");
    return reshape(mm(unsqueeze(a, 0), unsqueeze(b, 1)), {});
  }
  if (a.dim() == 2 && b.dim() == 1) return squeeze(mm(a, unsqueeze(b, 1)), 1);
  if (a.dim() == 1 && b.dim() == 2) return squeeze(mm(unsqueeze(a, 0), b), 0);
  if (a.dim() == 2 && b.dim() == 2) return mm(a, b);

  // Batched. Fold a's batch dims into rows when b is a plain matrix (one big GEMM).
  const bool a_vec = a.dim() == 1, b_vec = b.dim() == 1;
  const Tensor A = a_vec ? unsqueeze(a, 0) : a;
  const Tensor B = b_vec ? unsqueeze(b, 1) : b;
  const int64_t n = A.sizes()[A.dim() - 2], k = A.sizes()[A.dim() - 1];
  const int64_t k2 = B.sizes()[B.dim() - 2], p = B.sizes()[B.dim() - 1];
  if (k != k2) {
    // PyTorch reports the operands as 2-D views.
    PF_THROW(Error, "mat1 and mat2 shapes cannot be multiplied (", A.numel() / std::max<int64_t>(k, 1), "x", k,
             " and ", k2, "x", p, ")");
  }
  Shape out_shape;
  if (B.dim() == 2) {
    Shape batch(A.sizes().begin(), A.sizes().end() - 2);
    Tensor r = mm(reshape(A, {shape_numel(batch) * n, k}), B);  // (not -1: k may be 0)
    out_shape = batch;
    out_shape.push_back(n);
    out_shape.push_back(p);
    r = reshape(r, out_shape);
    if (a_vec) r = squeeze(r, -2);
    if (b_vec) r = squeeze(r, -1);
    return r;
  }
  const Shape batch_a(A.sizes().begin(), A.sizes().end() - 2);
  const Shape batch_b(B.sizes().begin(), B.sizes().end() - 2);
  const Shape batch = broadcast_shapes(batch_a, batch_b);
  const int64_t nb = shape_numel(batch);
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {n, k});
  eb.insert(eb.end(), {k, p});
  Tensor r = bmm(reshape(expand(A, ea), {nb, n, k}), reshape(expand(B, eb), {nb, k, p}));
  out_shape = batch;
  out_shape.insert(out_shape.end(), {n, p});
  r = reshape(r, out_shape);
  if (a_vec) r = squeeze(r, -2);
  if (b_vec) r = squeeze(r, -1);
  return r;
}

}  // namespace plugflow::ops
