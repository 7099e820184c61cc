// Shape ops of the functional API: joining and splitting (cat, stack, split, chunk, unbind),
// rearranging (flip, roll, movedim, unflatten, repeat, tile, repeat_interleave, meshgrid),
// triangles (tril, triu), ordering (sort, argsort, topk, unique) and padding (pad, one_hot).
// Included by plugflow/ops.h; the same conventions apply (PyTorch's checks and messages,
// autograd recorded when an input requires grad).
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plugflow/export.h"
#include "plugflow/scalar.h"
#include "plugflow/tensor.h"

namespace plugflow::ops {

// ---- joining ---------------------------------------------------------------------------------
// torch.cat: type promotion over all inputs; 1-d empty tensors (shape [0]) are skipped, as in
// PyTorch's legacy rule. `out` (when given) is resized to the result's shape if it differs.
PF_API Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
PF_API Tensor& cat_out(Tensor& out, const std::vector<Tensor>& tensors, int64_t dim = 0);
PF_API Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
PF_API Tensor hstack(const std::vector<Tensor>& tensors);
PF_API Tensor vstack(const std::vector<Tensor>& tensors);
PF_API Tensor dstack(const std::vector<Tensor>& tensors);
PF_API Tensor column_stack(const std::vector<Tensor>& tensors);
// The joins above with out= (PyTorch's are cat_out of the reshaped inputs): each input is
// converted straight to out's dtype (an int64 into bfloat16 does not pass through a float16
// promotion); dim is stack's (ignored by the others).
enum class Join { Stack, HStack, VStack, DStack, ColumnStack };
PF_API Tensor& join_out(Tensor& out, Join join, const std::vector<Tensor>& tensors, int64_t dim = 0);
PF_API Tensor atleast_1d(const Tensor& t);
PF_API Tensor atleast_2d(const Tensor& t);
PF_API Tensor atleast_3d(const Tensor& t);

// ---- splitting (views) -------------------------------------------------------------------------
PF_API std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim = 0);
PF_API std::vector<Tensor> split_with_sizes(const Tensor& t, const Shape& sizes, int64_t dim = 0);
PF_API std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim = 0);
PF_API std::vector<Tensor> unbind(const Tensor& t, int64_t dim = 0);

// ---- rearranging ---------------------------------------------------------------------------------
PF_API Tensor flip(const Tensor& t, const Shape& dims);
// dims empty: roll the flattened tensor (shifts must then have one element).
PF_API Tensor roll(const Tensor& t, const Shape& shifts, const Shape& dims);
PF_API Tensor repeat(const Tensor& t, const Shape& repeats);
PF_API Tensor tile(const Tensor& t, const Shape& reps);
PF_API Tensor repeat_interleave(const Tensor& t, int64_t repeats, std::optional<int64_t> dim);
PF_API Tensor repeat_interleave(const Tensor& t, const Tensor& repeats, std::optional<int64_t> dim);
// torch.repeat_interleave(repeats): index i repeated repeats[i] times.
PF_API Tensor repeat_interleave(const Tensor& repeats);
PF_API Tensor movedim(const Tensor& t, const Shape& source, const Shape& destination);
PF_API Tensor unflatten(const Tensor& t, int64_t dim, const Shape& sizes);
// indexing: "ij" or "xy".
PF_API std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing);

// ---- triangles -------------------------------------------------------------------------------------
PF_API Tensor tril(const Tensor& t, int64_t diagonal = 0);
PF_API Tensor triu(const Tensor& t, int64_t diagonal = 0);

// ---- ordering ----------------------------------------------------------------------------------------
// (values, int64 indices). NaN sorts as the largest value; equal elements keep their order.
PF_API std::pair<Tensor, Tensor> sort(const Tensor& t, int64_t dim = -1, bool descending = false, bool stable = false);
PF_API Tensor argsort(const Tensor& t, int64_t dim = -1, bool descending = false, bool stable = false);
PF_API std::pair<Tensor, Tensor> topk(const Tensor& t, int64_t k, int64_t dim = -1, bool largest = true,
                                      bool sorted = true);
struct UniqueResult {
  Tensor values, inverse, counts;
};
// Always sorted (sorted=False is allowed to return any order in PyTorch).
PF_API UniqueResult unique(const Tensor& t, bool sorted = true, std::optional<int64_t> dim = std::nullopt);
PF_API UniqueResult unique_consecutive(const Tensor& t, std::optional<int64_t> dim = std::nullopt);

// ---- padding and encodings -----------------------------------------------------------------------------
// torch.nn.functional.pad: mode "constant" (negative pads crop), "reflect", "replicate", "circular".
PF_API Tensor pad(const Tensor& t, const Shape& pad, const std::string& mode = "constant",
                  std::optional<double> value = std::nullopt);
PF_API Tensor constant_pad_nd(const Tensor& t, const Shape& pad, Scalar value = Scalar(int64_t{0}));
// torch.nn.functional.one_hot: int64 input; num_classes -1 infers max + 1.
PF_API Tensor one_hot(const Tensor& t, int64_t num_classes = -1);

// ---- along-dim gather / scatter-add (torch.gather / scatter_add semantics, without broadcasting) ----------
// out[..i..] = t[..index[..i..]..] along dim; out has index's shape.
PF_API Tensor take_along_dim_internal(const Tensor& t, int64_t dim, const Tensor& index);
// A zero tensor of `sizes` with src added at index along dim (duplicates accumulate).
PF_API Tensor scatter_add_internal(const Tensor& src, int64_t dim, const Tensor& index, const Shape& sizes);

}  // namespace plugflow::ops
