// torch.linalg's LAPACK-backed solvers and decompositions (plugflow/ops_linalg.h): the catalog
// entries' meta functions (core/opdefs/linalg.yaml), the functional API (PyTorch 1.13's checks
// and messages, batch flattening, empty matrices answered here, LinAlgError from the kernels'
// info) and the backward formulas of PyTorch's derivatives.yaml for real inputs, written with
// differentiable ops so that they differentiate again.
//
// Kernels (docs/kernels.md, "Linear algebra") see contiguous (batch, rows, cols) operands of
// float32 or float64 with rows, cols >= 1.
#include <algorithm>
#include <cmath>
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

// ---- shapes --------------------------------------------------------------------------------------

int64_t rows_of(const Tensor& t) { return t.sizes()[t.dim() - 2]; }
int64_t cols_of(const Tensor& t) { return t.sizes()[t.dim() - 1]; }
Shape batch_of(const Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end() - 2); }
Shape with(Shape s, std::initializer_list<int64_t> tail) {
  s.insert(s.end(), tail);
  return s;
}

void check_matrix_operand(const Tensor& t, const char* fn, const char* name = "A") {
  PF_CHECK(t.dim() >= 2, fn, ": The input tensor ", name, " must have at least 2 dimensions.");
  PF_CHECK(is_floating(t.dtype()), fn, ": Expected a floating point or complex tensor as input. Got ",
           scalar_type_name(t.dtype()));
  PF_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::Float64, fn, ": Low precision dtypes not supported. Got ",
           scalar_type_name(t.dtype()));
}

void check_square(const Tensor& t, const char* fn, const char* name = "A") {
  check_matrix_operand(t, fn, name);
  PF_CHECK(rows_of(t) == cols_of(t), fn, ": ", name, " must be batches of square matrices, but they are ", rows_of(t),
           " by ", cols_of(t), " matrices");
}

// A (*, r, c) as the kernels' contiguous (count, r, c) (called with grad mode off).
Tensor flat(const Tensor& t) {
  const int64_t count = shape_numel(batch_of(t));
  return ops::contiguous(ops::reshape(t, {count, rows_of(t), cols_of(t)}));
}

Tensor mT(const Tensor& t) { return ops::transpose(t, -2, -1); }
Tensor eye(int64_t n, const Tensor& like) {
  return ops::tril(ops::triu(ops::ones({n, n}, like.dtype(), like.device())));
}
// v (*, n) on the diagonal of (*, n, n); the diagonal of X (*, n, n) as (*, n).
Tensor diag_embed(const Tensor& v) { return autograd::mul(ops::unsqueeze(v, -1), eye(v.sizes().back(), v)); }
Tensor diagonal(const Tensor& x) {
  return ops::reduce("sum", autograd::mul(x, eye(cols_of(x), x)), {x.dim() - 1}, false);
}

// Raises LinAlgError for the first non-zero info, "fn: (Batch element i): what"; the element is
// named only for a batched input, as PyTorch names it. `what` gets the info value.
template <typename What>
void check_info(const Tensor& info, const Shape& batch, const char* fn, What what) {
  const Tensor flat_info = ops::contiguous(ops::to(info, Device{}, DType::Int32));
  const int32_t* p = flat_info.data<int32_t>();
  for (int64_t i = 0; i < flat_info.numel(); ++i) {
    if (p[i] == 0) continue;
    const std::string element = batch.empty() ? "" : "(Batch element " + std::to_string(i) + "): ";
    PF_THROW(LinAlgError, fn, ": ", element, what(p[i]));
  }
}

// The kernels of svd and eigh throw "(Batch element i): ..." themselves; PyTorch drops it for an
// unbatched input.
Tensors call_naming_batch(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs, bool batched) {
  try {
    return call_op(op, in, attrs);
  } catch (const LinAlgError& e) {
    std::string message = e.what();
    const std::string element = "(Batch element 0): ";
    const size_t at = message.find(element);
    if (batched || at == std::string::npos) throw;
    throw LinAlgError(message.erase(at, element.size()));
  }
}

}  // namespace

// ---- meta functions (catalog entries: core/opdefs/linalg.yaml, registered by meta.cpp) -------------

namespace {
void check_kernel_operand(const Tensor& t, const char* op) {
  PF_CHECK(t.dim() == 3, op, ": expected a (batch, rows, cols) operand, got ", shape_str(t.sizes()));
  PF_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::Float64, op, ": expected float32 or float64, got ",
           dtype_name(t.dtype()));
}
void check_kernel_square(const Tensor& t, const char* op) {
  check_kernel_operand(t, op);
  PF_CHECK(t.sizes()[1] == t.sizes()[2], op, ": expected square matrices, got ", shape_str(t.sizes()));
}
}  // namespace

std::vector<TensorMeta> internal::linalg_solve_meta(std::span<const Tensor> in, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  check_kernel_square(a, "linalg_solve");
  check_kernel_operand(b, "linalg_solve");
  PF_CHECK(b.sizes()[0] == a.sizes()[0] && b.sizes()[1] == a.sizes()[1] && b.dtype() == a.dtype() &&
               b.device() == a.device(),
           "linalg_solve: expected B (batch, n, k) like A ", shape_str(a.sizes()), ", got ", shape_str(b.sizes()));
  return {{b.sizes(), a.dtype(), a.device()}, {{a.sizes()[0]}, DType::Int32, a.device()}};
}

std::vector<TensorMeta> internal::linalg_solve_triangular_meta(std::span<const Tensor> in, const Attrs& attrs) {
  attrs.get<bool>("upper");
  attrs.get<bool>("unitriangular");
  const Tensor &a = in[0], &b = in[1];
  check_kernel_square(a, "linalg_solve_triangular");
  check_kernel_operand(b, "linalg_solve_triangular");
  PF_CHECK(b.sizes()[0] == a.sizes()[0] && b.sizes()[1] == a.sizes()[1] && b.dtype() == a.dtype() &&
               b.device() == a.device(),
           "linalg_solve_triangular: expected B (batch, n, k) like A ", shape_str(a.sizes()), ", got ",
           shape_str(b.sizes()));
  return {{b.sizes(), a.dtype(), a.device()}};
}

std::vector<TensorMeta> internal::linalg_cholesky_meta(std::span<const Tensor> in, const Attrs& attrs) {
  attrs.get<bool>("upper");
  check_kernel_square(in[0], "linalg_cholesky");
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}, {{in[0].sizes()[0]}, DType::Int32, in[0].device()}};
}

std::vector<TensorMeta> internal::linalg_slogdet_meta(std::span<const Tensor> in, const Attrs&) {
  check_kernel_square(in[0], "linalg_slogdet");
  const Shape batch{in[0].sizes()[0]};
  return {{batch, in[0].dtype(), in[0].device()}, {batch, in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> internal::linalg_qr_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const std::string& mode = attrs.get<std::string>("mode");
  PF_CHECK(mode == "reduced" || mode == "complete" || mode == "r",
           "qr received unrecognized mode '", mode, "' but expected one of 'reduced' (default), 'r', or 'complete'");
  const Tensor& a = in[0];
  check_kernel_operand(a, "linalg_qr");
  const int64_t batch = a.sizes()[0], m = a.sizes()[1], n = a.sizes()[2], k = std::min(m, n);
  const Shape q = mode == "r" ? Shape{batch, 0, 0} : Shape{batch, m, mode == "complete" ? m : k};
  return {{q, a.dtype(), a.device()}, {{batch, mode == "complete" ? m : k, n}, a.dtype(), a.device()}};
}

std::vector<TensorMeta> internal::linalg_svd_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const bool full = attrs.get<bool>("full_matrices"), compute_uv = attrs.get<bool>("compute_uv");
  const Tensor& a = in[0];
  check_kernel_operand(a, "linalg_svd");
  const int64_t batch = a.sizes()[0], m = a.sizes()[1], n = a.sizes()[2], k = std::min(m, n);
  const Shape u = compute_uv ? Shape{batch, m, full ? m : k} : Shape{batch, 0, 0};
  const Shape vh = compute_uv ? Shape{batch, full ? n : k, n} : Shape{batch, 0, 0};
  return {{u, a.dtype(), a.device()}, {{batch, k}, a.dtype(), a.device()}, {vh, a.dtype(), a.device()}};
}

std::vector<TensorMeta> internal::linalg_eigh_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const std::string& uplo = attrs.get<std::string>("uplo");
  PF_CHECK(uplo == "L" || uplo == "U", "Expected UPLO argument to be 'L' or 'U', but got ", uplo);
  const bool compute_v = attrs.get<bool>("compute_v");
  const Tensor& a = in[0];
  check_kernel_square(a, "linalg_eigh");
  const int64_t batch = a.sizes()[0], n = a.sizes()[1];
  return {{{batch, n}, a.dtype(), a.device()},
          {compute_v ? Shape{batch, n, n} : Shape{batch, 0, 0}, a.dtype(), a.device()}};
}

namespace ops {

// ---- solve and inv ---------------------------------------------------------------------------------

namespace {

// X = A^-1 B for A (*, n, n) and B (*, n, k) of one broadcast batch shape; the info per matrix.
SolveResult solve_matrices(const Tensor& a, const Tensor& b) {
  static const OpDef& op = find_op("linalg_solve");
  const Shape batch = batch_of(a);
  const int64_t n = rows_of(a), k = cols_of(b), count = shape_numel(batch);
  SolveResult r;
  {
    autograd::GradModeGuard no_grad(false);
    if (count == 0 || n == 0 || k == 0) {
      r.result = zeros(with(batch, {n, k}), a.dtype(), a.device());
      r.info = zeros(batch, DType::Int32, a.device());
    } else {
      const Tensor in[] = {flat(a), flat(b)};
      const Tensors outs = call_op(op, in, {});
      r.result = reshape(outs[0], with(batch, {n, k}));
      r.info = reshape(outs[1], batch);
    }
  }
  // gB = A^-T G, gA = -gB X^T (PyTorch's linalg_solve backward)
  if (autograd::is_grad_enabled() && autograd::any_requires_grad({&a, &b})) {
    auto node = autograd::make_node("LinalgSolveExBackward0", [](const Tensors& g, const Tensors& s) -> Tensors {
      if (!g[0].defined()) return {Tensor(), Tensor()};
      const Tensor gB = linalg_solve(mT(s[0]), g[0]);
      return {autograd::neg(matmul(gB, mT(s[1]))), gB};
    });
    node->save(a);
    node->save_output(r.result, 0);
    autograd::record(node, {a, b}, {r.result, r.info});
  }
  return r;
}

}  // namespace

SolveResult linalg_solve_ex(const Tensor& a, const Tensor& b, bool left, bool check_errors) {
  check_square(a, "linalg.solve");
  PF_CHECK(a.dtype() == b.dtype(), "linalg.solve: Expected A and B to have the same dtype, but found A of type ",
           scalar_type_name(a.dtype()), " and B of type ", scalar_type_name(b.dtype()), " instead");
  PF_CHECK(a.device() == b.device(), "linalg.solve: Expected A and B to be on the same device");
  // B is a vector (or a batch of them) when it is 1-D or has A's shape without the last dim
  const bool vector = b.dim() == 1 ||
                      (b.dim() == a.dim() - 1 && std::equal(b.sizes().begin(), b.sizes().end(), a.sizes().begin()));
  const Tensor b2 = vector ? unsqueeze(b, -1) : b;
  PF_CHECK(b2.dim() >= 2, "linalg.solve: The input tensor B must have at least 2 dimensions.");
  const int64_t n = rows_of(a);
  const int64_t b_n = left ? rows_of(b2) : cols_of(b2);
  PF_CHECK(b_n == n, "linalg.solve: Incompatible shapes of A and B for the equation ", left ? "AX = B" : "XA = B", " (",
           n, "x", n, " and ", rows_of(b2), "x", cols_of(b2), ")");
  const Shape batch = broadcast_shapes(batch_of(a), batch_of(b2));
  const Tensor a_full = expand(left ? a : mT(a), with(batch, {n, n}));
  const int64_t k = left ? cols_of(b2) : rows_of(b2);
  const Tensor b_full = expand(left ? b2 : mT(b2), with(batch, {n, k}));
  SolveResult r = solve_matrices(a_full, b_full);
  if (check_errors)
    check_info(r.info, batch, "torch.linalg.solve",
               [](int) { return "The solver failed because the input matrix is singular."; });
  if (!left) r.result = mT(r.result);
  if (vector) r.result = squeeze(r.result, -1);
  return r;
}

Tensor linalg_solve(const Tensor& a, const Tensor& b, bool left) { return linalg_solve_ex(a, b, left, true).result; }

InvResult linalg_inv_ex(const Tensor& a, bool check_errors) {
  check_square(a, "linalg.inv");
  const Shape batch = batch_of(a);
  const int64_t n = rows_of(a);
  Tensor identity;
  {
    autograd::GradModeGuard no_grad(false);
    identity = expand(eye(n, a), with(batch, {n, n}));
  }
  // inv(A) = solve(A, I); its backward node gives -A^-T G A^-T, PyTorch's inv formula
  InvResult r;
  SolveResult s = solve_matrices(a, identity);
  r.inverse = s.result;
  r.info = s.info;
  if (check_errors)
    check_info(r.info, batch, "linalg.inv", [](int info) {
      return "The diagonal element " + std::to_string(info) +
             " is zero, the inversion could not be completed because the input matrix is singular.";
    });
  return r;
}

Tensor linalg_inv(const Tensor& a) { return linalg_inv_ex(a, true).inverse; }

// ---- triangular solve -------------------------------------------------------------------------------

Tensor linalg_solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool left, bool unitriangular) {
  static const OpDef& op = find_op("linalg_solve_triangular");
  PF_CHECK(a.dim() >= 2, "linalg.solve_triangular: The input tensor A must have at least 2 dimensions.");
  PF_CHECK(b.dim() >= 2, "linalg.solve_triangular: The input tensor B must have at least 2 dimensions.");
  PF_CHECK(rows_of(a) == cols_of(a), "linalg.solve_triangular: A must be batches of square matrices, but they are ",
           rows_of(a), " by ", cols_of(a), " matrices");
  PF_CHECK(a.device() == b.device(), "linalg.solve_triangular: Expected A and B to be on the same device");
  const int64_t n = rows_of(a);
  PF_CHECK((left ? rows_of(b) : cols_of(b)) == n, "linalg.solve_triangular: Incompatible shapes of A and B for the "
           "equation ", left ? "AX = B" : "XA = B", " (", n, "x", n, " and ", rows_of(b), "x", cols_of(b), ")");
  // mixed dtypes promote, as PyTorch's (float32 with float64 solves in float64)
  const DType dtype = promote_types(a.dtype(), b.dtype());
  PF_CHECK(dtype == DType::Float32 || dtype == DType::Float64, "\"triangular_solve_cpu\" not implemented for '",
           scalar_type_name(dtype), "'");
  const Tensor a2 = to(a, std::nullopt, dtype), b2 = to(b, std::nullopt, dtype);
  // X A = B is A^T X^T = B^T, A^T's triangle the other one
  const Shape batch = broadcast_shapes(batch_of(a2), batch_of(b2));
  const int64_t k = left ? cols_of(b2) : rows_of(b2);
  const Tensor a_full = expand(left ? a2 : mT(a2), with(batch, {n, n}));
  const Tensor b_full = expand(left ? b2 : mT(b2), with(batch, {n, k}));
  const bool solved_upper = left ? upper : !upper;
  Tensor x;
  {
    autograd::GradModeGuard no_grad(false);
    if (shape_numel(batch) == 0 || n == 0 || k == 0) {
      x = zeros(with(batch, {n, k}), dtype, a.device());
    } else {
      const Tensor in[] = {flat(a_full), flat(b_full)};
      x = reshape(call_op(op, in, Attrs{{"upper", solved_upper}, {"unitriangular", unitriangular}})[0],
                  with(batch, {n, k}));
    }
  }
  // PyTorch's linalg_solve_triangular backward: gB = A^-T G (A^T's triangle the other one),
  // gA = -gB X^T restricted to A's triangle (its strict part when unitriangular)
  if (autograd::is_grad_enabled() && autograd::any_requires_grad({&a_full, &b_full})) {
    auto backward = [solved_upper, unitriangular](const Tensors& g, const Tensors& s) -> Tensors {
      if (!g[0].defined()) return {Tensor(), Tensor()};
      const Tensor gB = linalg_solve_triangular(mT(s[0]), g[0], !solved_upper, true, unitriangular);
      const Tensor gA = autograd::neg(matmul(gB, mT(s[1])));
      const int64_t skip = unitriangular ? 1 : 0;
      return {solved_upper ? triu(gA, skip) : tril(gA, -skip), gB};
    };
    auto node = autograd::make_node("LinalgSolveTriangularBackward0", backward);
    node->save(a_full);
    node->save_output(x, 0);
    autograd::record(node, {a_full, b_full}, {x});
  }
  return left ? x : mT(x);
}

// ---- cholesky ----------------------------------------------------------------------------------------

CholeskyResult linalg_cholesky_ex(const Tensor& a, bool upper, bool check_errors) {
  static const OpDef& op = find_op("linalg_cholesky");
  check_square(a, "linalg.cholesky");
  const Shape batch = batch_of(a);
  const int64_t n = rows_of(a);
  CholeskyResult r;
  {
    autograd::GradModeGuard no_grad(false);
    if (shape_numel(batch) == 0 || n == 0) {
      r.L = zeros(a.sizes(), a.dtype(), a.device());
      r.info = zeros(batch, DType::Int32, a.device());
    } else {
      const Tensor in[] = {flat(a)};
      const Tensors outs = call_op(op, in, Attrs{{"upper", upper}});
      r.L = reshape(outs[0], a.sizes());
      r.info = reshape(outs[1], batch);
    }
  }
  if (check_errors)
    check_info(r.info, batch, "linalg.cholesky", [](int info) {
      return "The factorization could not be completed because the input is not positive-definite (the leading "
             "minor of order " + std::to_string(info) + " is not positive-definite).";
    });
  // PyTorch's cholesky_backward for L (upper: U = L^T):
  //   gA = sym(L^-T Φ(L^T gL) L^-1), Φ(X) = tril(X) with its diagonal halved, sym(X) = (X + X^T) / 2
  if (autograd::is_grad_enabled() && autograd::any_requires_grad({&a})) {
    auto backward = [upper](const Tensors& g, const Tensors& s) -> Tensors {
      if (!g[0].defined()) return {Tensor()};
      const Tensor L = upper ? mT(s[0]) : s[0], gL = upper ? mT(g[0]) : g[0];
      const Tensor L_inverse = linalg_inv(L);
      const int64_t size = cols_of(L);
      const Tensor halve_diagonal = sub(ops::tril(ops::ones({size, size}, L.dtype(), L.device())),
                                        autograd::mul(eye(size, L), Scalar(0.5)));
      const Tensor phi = autograd::mul(ops::tril(matmul(mT(L), gL)), halve_diagonal);
      const Tensor gA = matmul(matmul(mT(L_inverse), phi), L_inverse);
      return {autograd::mul(add(gA, mT(gA)), Scalar(0.5))};
    };
    auto node = autograd::make_node("LinalgCholeskyExBackward0", backward);
    node->save_output(r.L, 0);
    autograd::record(node, {a}, {r.L, r.info});
  }
  return r;
}

// ---- determinants --------------------------------------------------------------------------------------

SlogdetResult linalg_slogdet(const Tensor& a) {
  static const OpDef& op = find_op("linalg_slogdet");
  check_square(a, "linalg.slogdet");
  const Shape batch = batch_of(a);
  SlogdetResult r;
  {
    autograd::GradModeGuard no_grad(false);
    if (shape_numel(batch) == 0 || rows_of(a) == 0) {  // det of a 0x0 matrix is 1
      r.sign = ones(batch, a.dtype(), a.device());
      r.logabsdet = zeros(batch, a.dtype(), a.device());
    } else {
      const Tensor in[] = {flat(a)};
      const Tensors outs = call_op(op, in, {});
      r.sign = reshape(outs[0], batch);
      r.logabsdet = reshape(outs[1], batch);
    }
  }
  // d log|det A| = tr(A^-1 dA): gA = g A^-T (at a singular A, inv raises LinAlgError)
  if (autograd::is_grad_enabled() && autograd::any_requires_grad({&a})) {
    auto node = autograd::make_node("LinalgSlogdetBackward0", [](const Tensors& g, const Tensors& s) -> Tensors {
      if (!g[1].defined()) return {Tensor()};
      return {autograd::mul(unsqueeze(unsqueeze(g[1], -1), -1), linalg_inv(mT(s[0])))};
    });
    node->save(a);
    autograd::record(node, {a}, {r.sign, r.logabsdet});
  }
  return r;
}

// ---- qr ------------------------------------------------------------------------------------------------------

QrResult linalg_qr(const Tensor& a, const std::string& mode) {
  static const OpDef& op = find_op("linalg_qr");
  check_matrix_operand(a, "linalg.qr");
  PF_CHECK(mode == "reduced" || mode == "complete" || mode == "r",
           "qr received unrecognized mode '", mode, "' but expected one of 'reduced' (default), 'r', or 'complete'");
  const Shape batch = batch_of(a);
  const int64_t m = rows_of(a), n = cols_of(a), k = std::min(m, n);
  QrResult r;
  {
    autograd::GradModeGuard no_grad(false);
    if (shape_numel(batch) == 0 || k == 0) {
      r.Q = mode == "r"          ? empty({0}, a.dtype(), a.device())
            : mode == "complete" ? contiguous(expand(eye(m, a), with(batch, {m, m})))
                                 : zeros(with(batch, {m, k}), a.dtype(), a.device());
      r.R = zeros(with(batch, {mode == "complete" ? m : k, n}), a.dtype(), a.device());
    } else {
      const Tensor in[] = {flat(a)};
      const Tensors outs = call_op(op, in, Attrs{{"mode", mode}});
      r.Q = mode == "r" ? empty({0}, a.dtype(), a.device()) : reshape(outs[0], with(batch, {m, cols_of(outs[0])}));
      r.R = reshape(outs[1], with(batch, {rows_of(outs[1]), n}));
    }
  }
  // PyTorch's linalg_qr_backward (real inputs)
  if (autograd::is_grad_enabled() && autograd::any_requires_grad({&a})) {
    auto node = autograd::make_node("LinalgQrBackward0", [mode, m, n](const Tensors& g, const Tensors& s) -> Tensors {
      const Tensor &gQ = g[0], &gR = g[1];
      if (!gQ.defined() && !gR.defined()) return {Tensor()};
      PF_CHECK(mode != "r", "The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please use "
                            "linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.");
      PF_CHECK(mode == "reduced" || m <= n,
               "The QR decomposition is not differentiable when mode='complete' and nrows > ncols.");
      const Tensor &Q = s[0], &R = s[1];
      // m >= n: gA = [gQ + Q syminvadj(triu(gR R^T - Q^T gQ))] R^-T, syminvadj(X) = X + X^T with
      // its diagonal halved. m < n: A = [A1 A2] with A1 = Q R1 square and R2 = Q^T A2, so A2's
      // gradient is Q gR2 and A1's the square case's with gQ + A2 gR2^T in place of gQ.
      auto square_case = [&Q](Tensor gQ_, const Tensor& R_, const Tensor& gR_) {
        Tensor inner = gQ_.defined() ? autograd::neg(matmul(mT(Q), gQ_)) : Tensor();
        if (gR_.defined()) inner = inner.defined() ? add(matmul(gR_, mT(R_)), inner) : matmul(gR_, mT(R_));
        const Tensor upper = triu(inner);
        Tensor gA = matmul(Q, sub(add(upper, mT(upper)), diag_embed(diagonal(upper))));
        if (gQ_.defined()) gA = add(gA, gQ_);
        return matmul(gA, linalg_inv(mT(R_)));
      };
      if (m >= n) return {square_case(gQ, R, gR)};
      const Tensor R1 = narrow(R, -1, 0, m), R2 = narrow(R, -1, m, n - m);
      if (!gR.defined()) {
        const Tensor gA1 = square_case(gQ, R1, Tensor());
        Shape rest(R.sizes().begin(), R.sizes().end());
        rest.back() = n - m;
        return {cat({gA1, zeros(rest, gA1.dtype(), gA1.device())}, -1)};
      }
      const Tensor gR1 = narrow(gR, -1, 0, m), gR2 = narrow(gR, -1, m, n - m);
      const Tensor from_R2 = matmul(matmul(Q, R2), mT(gR2));  // A2 gR2^T
      const Tensor gA1 = square_case(gQ.defined() ? add(gQ, from_R2) : from_R2, R1, gR1);
      return {cat({gA1, matmul(Q, gR2)}, -1)};
    });
    node->save_output(r.Q, 0);
    node->save_output(r.R, 1);
    autograd::record(node, {a}, {r.Q, r.R});
  }
  return r;
}

// ---- svd -----------------------------------------------------------------------------------------------------

SvdResult linalg_svd(const Tensor& a, bool full_matrices, bool compute_uv) {
  static const OpDef& op = find_op("linalg_svd");
  check_matrix_operand(a, "linalg.svd");
  const Shape batch = batch_of(a);
  const int64_t m = rows_of(a), n = cols_of(a), k = std::min(m, n);
  // singular values alone are computed with the vectors when a gradient is wanted (PyTorch does so)
  const bool with_grad = autograd::is_grad_enabled() && autograd::any_requires_grad({&a});
  const bool vectors = compute_uv || with_grad;
  SvdResult r;
  {
    autograd::GradModeGuard no_grad(false);
    if (shape_numel(batch) == 0 || k == 0) {
      // full: the identity; reduced: k = 0 vectors
      auto basis = [&](int64_t size, const Shape& reduced) {
        return full_matrices ? contiguous(expand(eye(size, a), with(batch, {size, size})))
                             : zeros(reduced, a.dtype(), a.device());
      };
      r.U = basis(m, with(batch, {m, k}));
      r.Vh = basis(n, with(batch, {k, n}));
      Shape s = batch;
      s.push_back(k);
      r.S = zeros(s, a.dtype(), a.device());
    } else {
      const Tensor in[] = {flat(a)};
      const Tensors outs = call_naming_batch(
          op, in, Attrs{{"full_matrices", full_matrices && compute_uv}, {"compute_uv", vectors}}, !batch.empty());
      Shape s = batch;
      s.push_back(k);
      r.S = reshape(outs[1], s);
      if (vectors) {
        r.U = reshape(outs[0], with(batch, {m, cols_of(outs[0])}));
        r.Vh = reshape(outs[2], with(batch, {rows_of(outs[2]), n}));
      }
    }
  }
  if (with_grad) {
    // PyTorch's svd_backward (real inputs; the reduced vectors: full matrices narrowed to k)
    auto node = autograd::make_node("LinalgSvdBackward0", [m, n, k](const Tensors& g, const Tensors& s) -> Tensors {
      Tensor gU = g[0], gS = g[1], gVh = g[2];
      if (!gU.defined() && !gS.defined() && !gVh.defined()) return {Tensor()};
      Tensor U = narrow(s[0], -1, 0, k), S = s[1], Vh = narrow(s[2], -2, 0, k);
      if (gU.defined()) gU = narrow(gU, -1, 0, k);
      if (gVh.defined()) gVh = narrow(gVh, -2, 0, k);
      if (!gU.defined() && !gVh.defined())
        return {matmul(U, autograd::mul(unsqueeze(gS, -1), Vh))};
      const Tensor V = mT(Vh);
      const Tensor gV = gVh.defined() ? mT(gVh) : Tensor();
      auto skew = [](const Tensor& x) { return sub(x, mT(x)); };
      const Tensor UhgU = gU.defined() ? skew(matmul(mT(U), gU)) : Tensor();
      const Tensor VhgV = gV.defined() ? skew(matmul(Vh, gV)) : Tensor();
      // E_ij = S_j^2 - S_i^2, 1 on the diagonal
      const Tensor S2 = autograd::mul(S, S);
      const Tensor E = add(sub(unsqueeze(S2, -2), unsqueeze(S2, -1)), eye(k, S));
      Tensor gA;
      if (gU.defined() && gV.defined())
        gA = autograd::div(add(autograd::mul(UhgU, unsqueeze(S, -2)), autograd::mul(unsqueeze(S, -1), VhgV)), E);
      else if (gU.defined())
        gA = autograd::mul(autograd::div(UhgU, E), unsqueeze(S, -2));
      else
        gA = autograd::mul(unsqueeze(S, -1), autograd::div(VhgV, E));
      if (gS.defined()) gA = add(gA, diag_embed(gS));
      if (m > n && gU.defined()) {
        gA = matmul(U, gA);
        const Tensor gUSinv = autograd::div(gU, unsqueeze(S, -2));
        gA = sub(add(gA, gUSinv), matmul(U, matmul(mT(U), gUSinv)));
        return {matmul(gA, Vh)};
      }
      if (m < n && gV.defined()) {
        gA = matmul(gA, Vh);
        const Tensor gVSinv = autograd::div(gV, unsqueeze(S, -2));
        gA = sub(add(gA, mT(gVSinv)), matmul(matmul(mT(gVSinv), V), Vh));
        return {matmul(U, gA)};
      }
      return {m >= n ? matmul(U, matmul(gA, Vh)) : matmul(matmul(U, gA), Vh)};
    });
    node->save_output(r.U, 0);
    node->save_output(r.S, 1);
    node->save_output(r.Vh, 2);
    autograd::record(node, {a}, {r.U, r.S, r.Vh});
  }
  if (!compute_uv) {
    r.U = empty({0}, a.dtype(), a.device());
    r.Vh = empty({0}, a.dtype(), a.device());
  }
  return r;
}

// ---- eigh ------------------------------------------------------------------------------------------------------

EighResult linalg_eigh(const Tensor& a, const std::string& uplo, bool compute_v) {
  static const OpDef& op = find_op("linalg_eigh");
  check_square(a, "linalg.eigh");
  PF_CHECK(uplo == "L" || uplo == "U" || uplo == "l" || uplo == "u",
           "Expected UPLO argument to be 'L' or 'U', but got ", uplo);
  const std::string triangle = uplo == "U" || uplo == "u" ? "U" : "L";
  const Shape batch = batch_of(a);
  const int64_t n = rows_of(a);
  const bool with_grad = autograd::is_grad_enabled() && autograd::any_requires_grad({&a});
  const bool vectors = compute_v || with_grad;
  EighResult r;
  {
    autograd::GradModeGuard no_grad(false);
    Shape values = batch;
    values.push_back(n);
    if (shape_numel(batch) == 0 || n == 0) {
      r.eigenvalues = zeros(values, a.dtype(), a.device());
      r.eigenvectors = zeros(a.sizes(), a.dtype(), a.device());
    } else {
      const Tensor in[] = {flat(a)};
      const Tensors outs =
          call_naming_batch(op, in, Attrs{{"uplo", triangle}, {"compute_v", vectors}}, !batch.empty());
      r.eigenvalues = reshape(outs[0], values);
      if (vectors) r.eigenvectors = reshape(outs[1], a.sizes());
    }
  }
  if (with_grad) {
    // PyTorch's linalg_eig_backward for a symmetric A: gA = V (diag(gL) + skew(V^T gV) / E) V^T,
    // skew(X) = (X - X^T) / 2 (the projection on the tangent space of the orthogonal matrices),
    // E_ij = L_j - L_i (1 on the diagonal, where skew(X) is 0)
    auto node = autograd::make_node("LinalgEighBackward0", [n](const Tensors& g, const Tensors& s) -> Tensors {
      const Tensor &gL = g[0], &gV = g[1];
      if (!gL.defined() && !gV.defined()) return {Tensor()};
      const Tensor &L = s[0], &V = s[1];
      Tensor inner;
      if (gV.defined()) {
        const Tensor VtgV = matmul(mT(V), gV);
        const Tensor E = add(sub(unsqueeze(L, -2), unsqueeze(L, -1)), eye(n, L));
        inner = autograd::div(autograd::mul(sub(VtgV, mT(VtgV)), Scalar(0.5)), E);
      }
      if (gL.defined()) inner = inner.defined() ? add(inner, diag_embed(gL)) : diag_embed(gL);
      return {matmul(V, matmul(inner, mT(V)))};
    });
    node->save_output(r.eigenvalues, 0);
    node->save_output(r.eigenvectors, 1);
    autograd::record(node, {a}, {r.eigenvalues, r.eigenvectors});
  }
  if (!compute_v) r.eigenvectors = empty({0}, a.dtype(), a.device());
  return r;
}

}  // namespace ops
}  // namespace plugflow
