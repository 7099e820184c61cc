// torch.linalg.lstsq (plugflow/ops_linalg.h): the catalog entry linalg_lstsq and the functional
// API (PyTorch 1.13's checks, batch broadcasting, the vector case, the driver-dependent fields,
// and the solution's gradient).
//
// Kernels (docs/kernels.md, "Least squares") see contiguous A (batch, m, n) and B (batch, m, k)
// of one floating dtype with m, n >= 1, and write the LAPACK driver's B in place form: solution
// (batch, max(m, n), k) whose rows [0, n) are X and, for m > n, rows [n, m) hold the residual
// components; rank (batch) int64 and singular_values (batch, min(m, n)) where the driver
// computes them (zeros otherwise).
#include <limits>
#include <string>

#include "../autograd/grad_utils.h"
#include "linalg_meta.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/linalg_error.h"
#include "plugflow/op.h"
#include "plugflow/ops.h"

namespace plugflow {
namespace {

using Tensors = std::vector<Tensor>;

bool is_driver(const std::string& d) { return d == "gels" || d == "gelsy" || d == "gelsd" || d == "gelss"; }

}  // namespace

// The catalog entry is core/opdefs/linalg.yaml's (registered by meta.cpp).
std::vector<TensorMeta> internal::lstsq_meta(std::span<const Tensor> in, const Attrs& attrs) {
  attrs.get<double>("rcond");
  PF_CHECK(is_driver(attrs.get<std::string>("driver")),
           "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  const Tensor &a = in[0], &b = in[1];
  PF_CHECK(a.dim() == 3 && b.dim() == 3 && a.sizes()[0] == b.sizes()[0] && a.sizes()[1] == b.sizes()[1],
           "linalg_lstsq: expected A (batch, m, n) and B (batch, m, k), got ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()));
  PF_CHECK(a.dtype() == b.dtype() && a.device() == b.device(), "linalg_lstsq: A and B differ in dtype or device");
  const int64_t batch = a.sizes()[0], m = a.sizes()[1], n = a.sizes()[2], k = b.sizes()[2];
  return {{{batch, std::max(m, n), k}, a.dtype(), a.device()},
          {{batch}, DType::Int64, a.device()},
          {{batch, std::min(m, n)}, a.dtype(), a.device()}};
}

namespace ops {

LstsqResult linalg_lstsq(const Tensor& a, const Tensor& b, std::optional<double> rcond_opt,
                         const std::optional<std::string>& driver_opt) {
  static const OpDef& op = find_op("linalg_lstsq");
  PF_CHECK(a.dim() >= 2, "torch.linalg.lstsq: input must have at least 2 dimensions.");
  PF_CHECK(b.dim() >= 1, "torch.linalg.lstsq: other must have at least 1 dimension.");
  PF_CHECK(a.dtype() == b.dtype(), "torch.linalg.lstsq: Expected input and other to have the same dtype, but got ",
           "input's dtype ", dtype_name(a.dtype()), " and other's dtype ", dtype_name(b.dtype()));
  PF_CHECK(a.dtype() == DType::Float32 || a.dtype() == DType::Float64,
           "This function doesn't handle types other than float and double");
  const int64_t dim_diff = a.dim() - b.dim();
  PF_CHECK(dim_diff == 0 || dim_diff == 1,
           "torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and (input.dim() - other.dim()) "
           "<= 1");
  const bool vector = dim_diff == 1;
  const Tensor b2 = vector ? unsqueeze(b, -1) : b;
  PF_CHECK(a.sizes()[a.dim() - 2] == b2.sizes()[b2.dim() - 2],
           vector ? "torch.linalg.lstsq: input.size(-2) should match other.size(-1)"
                  : "torch.linalg.lstsq: input.size(-2) should match other.size(-2)");
  PF_CHECK(a.device() == b.device(), "torch.linalg.lstsq: Expected input and other to be on the same device");
  // PyTorch's drivers: 'gelsy' by default; on CUDA only 'gels' (its QR path), the default there.
  const bool on_cuda = a.device().type == DeviceType::CUDA;
  const std::string driver = driver_opt.value_or(on_cuda ? "gels" : "gelsy");
  PF_CHECK(!on_cuda || driver == "gels", "torch.linalg.lstsq: `driver` other than `gels` is not supported on CUDA");
  PF_CHECK(is_driver(driver), "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  const int64_t m = a.sizes()[a.dim() - 2], n = a.sizes()[a.dim() - 1], k = b2.sizes()[b2.dim() - 1];
  const double eps = a.dtype() == DType::Float64 ? std::numeric_limits<double>::epsilon()
                                                 : std::numeric_limits<float>::epsilon();
  const double rcond = rcond_opt.value_or(eps * static_cast<double>(std::max(m, n)));

  // Broadcast the batch dims (differentiable views: autograd sums the gradients back).
  const Shape batch = broadcast_shapes(Shape(a.sizes().begin(), a.sizes().end() - 2),
                                       Shape(b2.sizes().begin(), b2.sizes().end() - 2));
  auto with = [&batch](int64_t r, int64_t c) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return s;
  };
  const Tensor a_full = expand(a, with(m, n)), b_full = expand(b2, with(m, k));
  const int64_t count = shape_numel(batch);

  Tensor raw, rank, singular_values;
  {
    autograd::GradModeGuard no_grad(false);
    const Tensor b3 = contiguous(reshape(b_full, {count, m, k}));
    if (count == 0 || m == 0 || n == 0) {  // X = 0; the residual rows are B itself
      raw = zeros({count, std::max(m, n), k}, a.dtype(), a.device());
      Tensor top = narrow(raw, 1, 0, m);
      copy_(top, b3);
      rank = zeros({count}, DType::Int64, a.device());
      singular_values = zeros({count, std::min(m, n)}, a.dtype(), a.device());
    } else {
      const Tensor in[] = {contiguous(reshape(a_full, {count, m, n})), b3};
      std::vector<Tensor> outs;
      try {
        outs = call_op(op, in, Attrs{{"rcond", rcond}, {"driver", driver}});
      } catch (const LinAlgError& e) {
        // Kernels name the failing matrix, "(Batch element i): "; PyTorch names it only when
        // there are several (a batch of one is not named either).
        std::string message = e.what();
        const std::string element = "(Batch element 0): ";
        const size_t at = message.find(element);
        if (count > 1 || at == std::string::npos) throw;
        throw LinAlgError(message.erase(at, element.size()));
      }
      raw = outs[0];
      rank = outs[1];
      singular_values = outs[2];
    }
  }
  LstsqResult r;
  r.solution = contiguous(reshape(narrow(raw, 1, 0, n), with(n, k)));
  const bool has_rank = driver != "gels", has_sv = driver == "gelsd" || driver == "gelss";
  // rank and singular values describe A: they keep A's batch shape, not the broadcast one
  // (A has as many batch dims as the broadcast shape; a broadcast dim repeats one matrix).
  auto of_a = [&](Tensor t) {
    for (size_t d = 0; d < batch.size(); ++d)
      if (a.sizes()[d] == 1 && batch[d] != 1) t = narrow(t, static_cast<int64_t>(d), 0, 1);
    return contiguous(t);
  };
  r.rank = has_rank ? of_a(reshape(rank, batch)) : empty({0}, DType::Int64, a.device());
  Shape sv_shape = batch;
  sv_shape.push_back(std::min(m, n));
  r.singular_values = has_sv ? of_a(reshape(singular_values, sv_shape)) : empty({0}, a.dtype(), a.device());
  bool with_residuals = m > n && driver != "gelsy";
  if (with_residuals && has_sv)  // SVD drivers: only when every matrix has full rank, as PyTorch
    with_residuals = item(reduce("sum", rank, {}, false)).to_int() == count * n;
  if (with_residuals) {
    autograd::GradModeGuard no_grad(false);
    const Tensor tail = narrow(raw, 1, n, m - n);
    Shape residual_shape = batch;
    residual_shape.push_back(k);
    r.residuals = reshape(reduce("sum", binary("mul", tail, tail), {1}, false), residual_shape);
  } else {
    r.residuals = empty({0}, a.dtype(), a.device());
  }

  // The solution's gradient: PyTorch differentiates X = pinv(A) B. With P(Y) = pinv(A) Y and
  // Q(Y) = pinv(A)^T Y (both least-squares solves, of A and of A^T), G = dL/dX, R = B - A X:
  //   dL/dB = Q(G),  dL/dA = -Q(G) X^T + R P(Q(G))^T + Q(X) (G - P(A G))^T.
  // The second term vanishes for full column rank, the last one for full row rank.
  if (autograd::is_grad_enabled() && autograd::any_requires_grad({&a_full, &b_full})) {
    auto node = autograd::make_node("LinalgLstsqBackward0", [rcond](const Tensors& g, const Tensors& s) -> Tensors {
      const Tensor &A = s[0], &B = s[1], &X = s[2], &G = g[0];
      auto mT = [](const Tensor& t) { return transpose(t, -2, -1); };
      auto P = [&](const Tensor& y) { return linalg_lstsq(A, y, rcond, "gelsy").solution; };
      auto Q = [&](const Tensor& y) { return linalg_lstsq(mT(A), y, rcond, "gelsy").solution; };
      const Tensor gB = Q(G);
      const Tensor R = sub(B, matmul(A, X));
      Tensor gA = binary("mul", matmul(gB, mT(X)), Scalar(-1));
      gA = add(gA, matmul(R, mT(P(gB))));
      gA = add(gA, matmul(Q(X), mT(sub(G, P(matmul(A, G))))));
      return {gA, gB};
    });
    node->save(a_full);
    node->save(b_full);
    node->save_output(r.solution, 0);
    autograd::record(node, {a_full, b_full}, {r.solution});
  }
  if (vector) r.solution = squeeze(r.solution, -1);
  return r;
}

}  // namespace ops
}  // namespace plugflow
