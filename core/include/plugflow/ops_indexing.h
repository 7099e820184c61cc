// The C++ functional API of the indexing family (core/src/ops/indexing.cpp): gather/scatter,
// index_select/index_add, masked ops, where/nonzero, take and advanced indexing (t[idx]).
// PyTorch's argument order, defaults, dtype rules and errors; every differentiable op records
// its backward, written with these same ops so that double backward works.
//
// Index tensors are int64 (index_select and index_add also take int32); out-of-range indices
// raise on CPU with PyTorch's exception type and message.
#pragma once
#include <vector>

#include "plugflow/export.h"
#include "plugflow/scalar.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// out[i][j][k] = self[i][index[i][j][k]][k] (dim == 1). index has self's number of dims and
// index.size(d) <= self.size(d) for d != dim. Negative indices are errors.
PF_API Tensor gather(const Tensor& self, int64_t dim, const Tensor& index);

// self[i][index[i][j][k]][k] = src[i][j][k] (dim == 1), on a copy / in place. The value form
// writes one number. Duplicate indices: one of the values wins (unspecified which, as in PyTorch).
PF_API Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
PF_API Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, Scalar value);
PF_API Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
PF_API Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, Scalar value);
// Same, adding: duplicates accumulate.
PF_API Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
PF_API Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

// The slices self.select(dim, index[i]) stacked along dim; index is 0-d or 1-d.
PF_API Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index);
// self.select(dim, index[i]) += alpha * source.select(dim, i); duplicates accumulate.
PF_API Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                        Scalar alpha = Scalar(int64_t{1}));
PF_API Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                          Scalar alpha = Scalar(int64_t{1}));

// Elements where mask (bool, broadcast) is true set to value (a number or a 0-d tensor; a
// tensor value receives a gradient). Out of place, self and mask broadcast together; in place,
// mask must broadcast to self.
PF_API Tensor masked_fill(const Tensor& self, const Tensor& mask, Scalar value);
PF_API Tensor masked_fill(const Tensor& self, const Tensor& mask, const Tensor& value);
PF_API Tensor& masked_fill_(Tensor& self, const Tensor& mask, Scalar value);
PF_API Tensor& masked_fill_(Tensor& self, const Tensor& mask, const Tensor& value);
// The elements of self (broadcast with mask) where mask is true, as a 1-d tensor.
PF_API Tensor masked_select(const Tensor& self, const Tensor& mask);

// condition ? self : other, broadcasting all three; self and other promoted together (a
// Scalar counts as a wrapped Python number).
PF_API Tensor where(const Tensor& condition, const Tensor& self, const Tensor& other);
PF_API Tensor where(const Tensor& condition, const Tensor& self, Scalar other);
PF_API Tensor where(const Tensor& condition, Scalar self, const Tensor& other);
PF_API Tensor where(const Tensor& condition, Scalar self, Scalar other);

// (n, ndim) int64 coordinates of the non-zero elements, in row-major order.
PF_API Tensor nonzero(const Tensor& self);
// nonzero(as_tuple=True) / where(condition): one 1-d int64 tensor per dim (one for a 0-d input).
PF_API std::vector<Tensor> nonzero_numpy(const Tensor& self);

// self viewed as 1-d, indexed by index (negative indices count from the end); result has
// index's shape.
PF_API Tensor take(const Tensor& self, const Tensor& index);

// Advanced indexing, PyTorch's aten::index: indices[d] (int64 or bool/uint8 mask; undefined
// = the whole dim) indexes dim d. Index tensors broadcast together; the result's indexed dims
// replace the indexed ones in place when the indices are adjacent and come first otherwise.
// Negative indices count from the end. IndexError for out-of-range indices.
PF_API Tensor index(const Tensor& self, const std::vector<Tensor>& indices);
// self[indices] = values (values broadcast to the indexing result, self's dtype), on a copy /
// in place; accumulate adds instead, duplicates included.
PF_API Tensor index_put(const Tensor& self, const std::vector<Tensor>& indices, const Tensor& values,
                        bool accumulate = false);
PF_API Tensor& index_put_(Tensor& self, const std::vector<Tensor>& indices, const Tensor& values,
                          bool accumulate = false);

}  // namespace plugflow::ops
