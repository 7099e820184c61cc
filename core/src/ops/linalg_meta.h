// Core-internal: the meta functions of core/opdefs/linalg.yaml's ops written with their ops
// (least squares in lstsq.cpp, norm in reduction_extra.cpp, the decompositions in
// linalg_decompositions.cpp), for meta.cpp, which registers the
// family's catalog entries (PF_OPDEFS_LINALG) beside mm's and bmm's metas.
#pragma once
#include <span>
#include <vector>

#include "plugflow/op.h"

namespace plugflow::internal {

std::vector<TensorMeta> lstsq_meta(std::span<const Tensor> in, const Attrs& attrs);
std::vector<TensorMeta> norm_meta(std::span<const Tensor> in, const Attrs& attrs);
// linalg_decompositions.cpp
std::vector<TensorMeta> linalg_solve_meta(std::span<const Tensor> in, const Attrs& attrs);
std::vector<TensorMeta> linalg_solve_triangular_meta(std::span<const Tensor> in, const Attrs& attrs);
std::vector<TensorMeta> linalg_cholesky_meta(std::span<const Tensor> in, const Attrs& attrs);
std::vector<TensorMeta> linalg_slogdet_meta(std::span<const Tensor> in, const Attrs& attrs);
std::vector<TensorMeta> linalg_qr_meta(std::span<const Tensor> in, const Attrs& attrs);
std::vector<TensorMeta> linalg_svd_meta(std::span<const Tensor> in, const Attrs& attrs);
std::vector<TensorMeta> linalg_eigh_meta(std::span<const Tensor> in, const Attrs& attrs);

}  // namespace plugflow::internal
