// Grid sampling (plugflow/ops_sampling.h): the catalog entries of grid_sampler_2d/3d and their
// backward ops, defined in core/opdefs/grid_sample.yaml, with PyTorch's argument checks and
// messages (their meta functions), grid_sample with its autograd node, and affine_grid composed
// of linspace and bmm.
//
// Kernels (docs/kernels.md, "Grid sampling") see input (N, C, spatial) and grid (N, out spatial,
// S) of one floating dtype, any strides, N, C and the output non-empty (the functional layer
// answers empty problems with zeros), and write contiguous outputs. The backward op computes
// the input gradient only when asked (attr input_grad; else that output is empty) and the grid
// gradient always. It has no derivative of its own: under create_graph its results carry a
// node that raises PyTorch's error when differentiated.
#include <string>

#include "../autograd/grad_utils.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/op.h"
#include "plugflow/ops.h"
#include "opdefs.h"

namespace plugflow {
namespace {

using Tensors = std::vector<Tensor>;

// PyTorch's check_grid_sampler_common / _2d / _3d, in its order and words.
void check_grid_sampler(const Tensor& input, const Tensor& grid, const std::string& mode) {
  const int64_t S = input.dim() - 2;
  PF_CHECK(input.device() == grid.device(), "grid_sampler(): expected input and grid to be on same device, but "
           "input is on ", input.device().str(), " and grid is on ", grid.device().str());
  PF_CHECK(input.dim() == grid.dim() && (input.dim() == 4 || input.dim() == 5), "grid_sampler(): expected ",
           input.dim() == 5 ? "5D" : "4D", " input and grid with same number of dimensions, but got input with sizes ",
           shape_str(input.sizes()), " and grid with sizes ", shape_str(grid.sizes()));
  PF_CHECK(input.sizes()[0] == grid.sizes()[0], "grid_sampler(): expected grid and input to have same batch size, "
           "but got input with sizes ", shape_str(input.sizes()), " and grid with sizes ", shape_str(grid.sizes()));
  PF_CHECK(grid.sizes().back() == S, "grid_sampler(): expected grid to have size ", S,
           " in last dimension, but got grid with sizes ", shape_str(grid.sizes()));
  for (int64_t d = 2; d < input.dim(); ++d)
    PF_CHECK(input.sizes()[d] > 0, "grid_sampler(): expected input to have non-empty spatial dimensions, but input "
             "has sizes ", shape_str(input.sizes()), " with dimension ", d, " being empty");
  PF_CHECK(!(S == 3 && mode == "bicubic"), "grid_sampler(): bicubic interpolation only supports 4D input");
  PF_CHECK(input.dtype() == grid.dtype(), "grid_sampler(): expected input and grid to have the same dtype, but input "
           "is ", dtype_name(input.dtype()), " and grid is ", dtype_name(grid.dtype()));
}

void check_modes(const Attrs& attrs) {
  const std::string& mode = attrs.get<std::string>("mode");
  const std::string& padding = attrs.get<std::string>("padding_mode");
  PF_CHECK_T(mode == "bilinear" || mode == "nearest" || mode == "bicubic", ValueError,
             "nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: '", mode,
             "'");
  PF_CHECK_T(padding == "zeros" || padding == "border" || padding == "reflection", ValueError,
             "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or 'reflection', but got: '",
             padding, "'");
  attrs.get<bool>("align_corners");
}

// (N, C, out spatial): the output of sampling `input` at `grid`.
Shape sampled_shape(const Tensor& input, const Tensor& grid) {
  Shape out{input.sizes()[0], input.sizes()[1]};
  out.insert(out.end(), grid.sizes().begin() + 1, grid.sizes().end() - 1);
  return out;
}

template <int64_t S>
std::vector<TensorMeta> grid_sampler_meta(std::span<const Tensor> in, const Attrs& attrs) {
  check_modes(attrs);
  const Tensor &input = in[0], &grid = in[1];
  PF_CHECK_T(input.dim() == S + 2, ValueError, "grid_sampler_", S, "d: expected a ", S + 2, "-d input, got ",
             shape_str(input.sizes()));
  check_grid_sampler(input, grid, attrs.get<std::string>("mode"));
  return {{sampled_shape(input, grid), input.dtype(), input.device()}};
}

template <int64_t S>
std::vector<TensorMeta> grid_sampler_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor &g = in[0], &input = in[1], &grid = in[2];
  grid_sampler_meta<S>(in.subspan(1), attrs);
  PF_CHECK(g.sizes() == sampled_shape(input, grid) && g.dtype() == input.dtype(), "grid_sampler_", S,
           "d_backward: grad_output ", shape_str(g.sizes()), " (", dtype_name(g.dtype()),
           ") does not match the forward output ", shape_str(sampled_shape(input, grid)));
  const Shape grad_input = attrs.get<bool>("input_grad") ? input.sizes() : Shape{0};
  return {{grad_input, input.dtype(), input.device()}, {grid.sizes(), grid.dtype(), grid.device()}};
}

// The catalog entries of core/opdefs/grid_sample.yaml, with the meta functions above.
const bool kGridSampleOpsRegistered = [] {
#define PF_X(name, signature, meta, mutated) register_op(name, signature, meta, {PF_OPDEFS_UNPAREN mutated});
  PF_OPDEFS_GRID_SAMPLE(PF_X)
#undef PF_X
  return true;
}();

}  // namespace

namespace ops {
namespace {

// Marks results of the backward op (under create_graph) as not differentiable further: their
// node raises PyTorch's error when a second backward reaches it.
void record_no_double_backward(const char* op, const Tensors& inputs, const Tensors& outputs) {
  if (!autograd::any_requires_grad(inputs)) return;
  auto node = autograd::make_node("NotImplemented", [op = std::string(op)](const Tensors&, const Tensors&) -> Tensors {
    PF_THROW(Error, "derivative for aten::", op, " is not implemented");
  });
  autograd::record(node, inputs, outputs);
}

Tensors grid_sample_backward(const Tensor& g, const Tensor& input, const Tensor& grid, const Attrs& attrs,
                             bool need_input) {
  const int64_t S = input.dim() - 2;
  const std::string op = S == 3 ? "grid_sampler_3d_backward" : "grid_sampler_2d_backward";
  Attrs a = attrs;
  a.set("input_grad", need_input);
  const Tensor in[] = {g, input, grid};
  Tensors out;
  if (g.numel() == 0) {  // an empty batch, channel or grid: zero gradients
    out = {need_input ? zeros(input.sizes(), input.dtype(), input.device()) : Tensor(),
           zeros(grid.sizes(), grid.dtype(), grid.device())};
  } else {
    out = call_op(find_op(op), in, a);
    if (!need_input) out[0] = Tensor();
  }
  Tensors defined;
  for (const Tensor& t : out)
    if (t.defined()) defined.push_back(t);
  record_no_double_backward(op.c_str(), {g, input, grid}, defined);
  return out;
}

}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, const std::string& mode, const std::string& padding_mode,
                   bool align_corners) {
  const Attrs attrs{{"mode", mode}, {"padding_mode", padding_mode}, {"align_corners", align_corners}};
  check_modes(attrs);
  check_grid_sampler(input, grid, mode);
  const int64_t S = input.dim() - 2;
  PF_CHECK(is_floating(input.dtype()), "grid_sampler_", S, "d not implemented for ", dtype_name(input.dtype()));
  const Tensor in[] = {input, grid};
  const Shape out_shape = sampled_shape(input, grid);
  bool empty = false;
  for (int64_t s : out_shape) empty = empty || s == 0;
  Tensor out = empty ? zeros(out_shape, input.dtype(), input.device())
                     : call_op(find_op(S == 3 ? "grid_sampler_3d" : "grid_sampler_2d"), in, attrs)[0];
  const bool need_input = autograd::requires_grad(input), need_grid = autograd::requires_grad(grid);
  if (autograd::is_grad_enabled() && (need_input || need_grid)) {
    auto node = autograd::make_node(S == 3 ? "GridSampler3DBackward0" : "GridSampler2DBackward0",
                                    [attrs, need_input](const Tensors& g, const Tensors& s) -> Tensors {
                                      return grid_sample_backward(g[0], s[0], s[1], attrs, need_input);
                                    });
    node->save(input);
    node->save(grid);
    autograd::record(node, {input, grid}, {out});
  }
  return out;
}

namespace {
// PyTorch's linspace_from_neg_one: n points across [-1, 1] (align_corners) or the n pixel
// centres of [-1, 1] (scaled by (n - 1) / n), one point 0 for n <= 1.
Tensor linspace_from_neg_one(const Tensor& theta, int64_t n, bool align_corners) {
  if (n <= 1) return zeros({}, theta.dtype(), theta.device());
  Tensor range = linspace(-1, 1, n, theta.dtype(), theta.device());
  if (!align_corners) range = binary("div", binary("mul", range, Scalar(n - 1)), Scalar(n));
  return range;
}
}  // namespace

Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners) {
  PF_CHECK_T(size.size() == 4 || size.size() == 5, NotImplementedError,
             "affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, respectively. Got size ",
             shape_str(size), ".");
  const int64_t S = static_cast<int64_t>(size.size()) - 2;
  PF_CHECK_T(is_floating(theta.dtype()), ValueError, "Expected theta to have floating point type, but got ",
             dtype_name(theta.dtype()));
  PF_CHECK_T(theta.dim() == 3 && theta.sizes()[1] == S && theta.sizes()[2] == S + 1, ValueError,
             "Expected a batch of ", S, "D affine matrices of shape Nx", S, "x", S + 1, " for size ", shape_str(size),
             ". Got ", shape_str(theta.sizes()), ".");
  PF_CHECK(theta.sizes()[0] == size[0], "affine_grid: theta holds ", theta.sizes()[0],
           " affine matrices but size asks for a batch of ", size[0]);
  // base[..., i] = the x (i = 0), y, z coordinate of each output position, then a 1.
  const int64_t N = size[0];
  Shape base_shape{N};
  base_shape.insert(base_shape.end(), size.begin() + 2, size.end());
  base_shape.push_back(S + 1);
  Tensor base = empty(base_shape, theta.dtype(), theta.device());
  for (int64_t i = 0; i < S; ++i) {
    // coordinate i runs along spatial dim S - 1 - i (x along W): as a column over the dims after it
    Tensor line = linspace_from_neg_one(theta, size[2 + S - 1 - i], align_corners);
    for (int64_t k = 0; k < i && line.dim() > 0; ++k) line = unsqueeze(line, -1);
    Tensor slot = select(base, -1, i);
    copy_(slot, line);
  }
  Tensor ones_slot = select(base, -1, S);
  fill_(ones_slot, 1);
  int64_t positions = 1;
  for (int64_t d = 2; d < static_cast<int64_t>(size.size()); ++d) positions *= size[d];
  const Tensor grid = bmm(view(base, {N, positions, S + 1}), transpose(theta, 1, 2));
  Shape grid_shape(base_shape.begin(), base_shape.end() - 1);
  grid_shape.push_back(S);
  return view(grid, grid_shape);
}

}  // namespace ops
}  // namespace plugflow
