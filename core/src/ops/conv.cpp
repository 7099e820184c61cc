// The conv family (plugflow/ops_conv.h): catalog entries (defined in core/opdefs/conv.yaml and
// pooling.yaml) with their meta functions, PyTorch's argument checks and output sizes, the
// functional API, and backward formulas written with the family's own ops.
//
// Convolution and pooling come in 2-d (N, C, H, W) and 3-d (N, C, D, H, W) ops: one op name per
// spatial rank (conv2d / conv3d, max_pool2d / max_pool3d, ...), so a kernel registered for a name
// knows the rank it gets; the meta functions and the functional layer are written once over the
// rank S. Spatial attributes hold S values, outermost first.
//
// Kernels (docs/kernels.md, "Conv family") see float inputs of rank S + 2 with any strides and
// write the outputs the meta functions allocate: row-major, or channels last as PyTorch's CPU
// kernels return them (conv_memory_format, pool_memory_format, upsample_meta). The functional
// layer handles unbatched inputs, string padding, transposed convolution (= the input gradient
// of the convolution, plus a broadcast bias add), empty inputs (never sent to a kernel) and
// autograd:
//   * convN, convN_grad_input and convN_grad_weight are one bilinear map seen from its three
//     sides, so each one's backward is written with the other two (double backward works);
//   * pooling-by-average and upsampling are linear: each forward op and its `_backward` op
//     are adjoints, and each records the other as its backward;
//   * max pooling returns int64 indices into the input plane (volume); its backward scatters
//     through them with the shape family's scatter-add (whose backward is the matching gather).
#include <algorithm>
#include <cmath>

#include "../autograd/grad_utils.h"
#include "plugflow/autocast.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/op.h"
#include "plugflow/ops.h"
#include "opdefs.h"

namespace plugflow {
namespace {

using Tensors = std::vector<Tensor>;

// ---- shared checks and sizes ------------------------------------------------------------------

// The names of S spatial values in messages.
const char* spatial_names(int64_t S) { return S == 3 ? "(depth, height, width)" : "(height, width)"; }

const Shape& spatial_attr(const Attrs& attrs, const char* name, int64_t S) {
  const Shape& v = attrs.get<Shape>(name);
  PF_CHECK_T(static_cast<int64_t>(v.size()) == S, ValueError, "attribute '", name, "' must hold ", S, " values ",
             spatial_names(S), ", got ", shape_str(v));
  return v;
}

// The sizes after (N, C): the spatial ones.
Shape spatial_sizes(const Tensor& t) { return Shape(t.sizes().begin() + 2, t.sizes().end()); }

void check_rank(const Tensor& t, int64_t S, const char* op, const char* what) {
  PF_CHECK_T(t.dim() == S + 2, ValueError, op, ": expected a ", S + 2, "-d ", what,
             " (the functional layer batches unbatched inputs), got ", shape_str(t.sizes()));
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* what_a, const char* what_b) {
  PF_CHECK(a.dtype() == b.dtype(), what_a, " type (", dtype_name(a.dtype()), ") and ", what_b, " type (",
           dtype_name(b.dtype()), ") should be the same");
}

// An output's meta, refusing shapes whose element count overflows int64 (a huge size from a
// user's argument must not wrap around to a small allocation).
TensorMeta out_meta(const Shape& sizes, DType dtype, Device device, MemoryFormat format = MemoryFormat::Contiguous) {
  int64_t n = 1;
  for (int64_t s : sizes)
    PF_CHECK(s >= 0 && !__builtin_mul_overflow(n, s, &n), "Storage size calculation overflowed with sizes=",
             shape_str(sizes));
  return {sizes, dtype, device, format};
}

// A 2-d convolution's activations (output, input gradient) are channels last when its image or
// its weight is (PyTorch's rule for oneDNN and cuDNN convolutions); 3-d ones stay row-major, as
// PyTorch 1.13's CPU conv3d returns them.
MemoryFormat conv_memory_format(const Tensor& image, const Tensor& weight) {
  const bool channels_last = image.dim() == 4 && (image.suggest_memory_format() == MemoryFormat::ChannelsLast ||
                                                  weight.suggest_memory_format() == MemoryFormat::ChannelsLast);
  return channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

// "a x b x c", as PyTorch prints spatial sizes in its messages.
std::string sizes_x(const Shape& v, const char* sep = " x ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

// The spatial output size of a convolution or pooling window sweep.
int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// PyTorch's pooling_output_shape: with ceil_mode, a last window must start inside the input
// or its left padding.
int64_t pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // floor division (span may be negative when the window does not fit)
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// ---- convolution ------------------------------------------------------------------------------

struct ConvAttrs {
  Shape stride, padding, dilation;
  int64_t groups;
};

ConvAttrs conv_attrs(const Attrs& attrs, int64_t S) {
  ConvAttrs c{spatial_attr(attrs, "stride", S), spatial_attr(attrs, "padding", S),
              spatial_attr(attrs, "dilation", S), attrs.get<int64_t>("groups")};
  PF_CHECK(c.groups > 0, "non-positive groups is not supported");
  for (int64_t i = 0; i < S; ++i) {
    PF_CHECK(c.padding[i] >= 0, "negative padding is not supported");
    PF_CHECK(c.stride[i] > 0, "non-positive stride is not supported");
    PF_CHECK(c.dilation[i] > 0, "non-positive dilation is not supported");
  }
  return c;
}

const char* conv_name(int64_t S) { return S == 3 ? "conv3d" : "conv2d"; }

void check_weight(const Tensor& w, int64_t groups, int64_t S) {
  PF_CHECK(w.dim() == S + 2, "Expected ", S + 2, "-dimensional weight for ", conv_name(S), ", but got weight of size ",
           shape_str(w.sizes()));
  for (int64_t i = 0; i < S; ++i)
    PF_CHECK(w.sizes()[2 + i] > 0, "Expected a non-empty kernel, but got weight of size ", shape_str(w.sizes()));
  PF_CHECK(w.sizes()[0] >= groups, "Given groups=", groups, ", expected weight to be at least ", groups,
           " at dimension 0, but got weight of size ", shape_str(w.sizes()), " instead");
  PF_CHECK(w.sizes()[0] % groups == 0, "Given groups=", groups, ", expected weight to be divisible by ", groups,
           " at dimension 0, but got weight of size ", shape_str(w.sizes()), " instead");
}

template <int64_t S>
std::vector<TensorMeta> conv_meta(std::span<const Tensor> in, const Attrs& attrs) {
  PF_CHECK_T(in.size() == 2 || in.size() == 3, ValueError, conv_name(S),
             " takes (input, weight) or (input, weight, bias)");
  const Tensor &x = in[0], &w = in[1];
  const ConvAttrs c = conv_attrs(attrs, S);
  check_rank(x, S, conv_name(S), "input");
  check_weight(w, c.groups, S);
  check_same_dtype(x, w, "Input", "weight");
  PF_CHECK(x.sizes()[1] == w.sizes()[1] * c.groups, "Given groups=", c.groups, ", weight of size ",
           shape_str(w.sizes()), ", expected input", shape_str(x.sizes()), " to have ", w.sizes()[1] * c.groups,
           " channels, but got ", x.sizes()[1], " channels instead");
  if (in.size() == 3) {
    const Tensor& b = in[2];
    PF_CHECK(b.dim() == 1 && b.sizes()[0] == w.sizes()[0], "Given weight of size ", shape_str(w.sizes()),
             ", expected bias to be 1-dimensional with ", w.sizes()[0], " elements, but got bias of size ",
             shape_str(b.sizes()), " instead");
    check_same_dtype(x, b, "Input", "bias");
  }
  Shape out{x.sizes()[0], w.sizes()[0]}, padded(S), extent(S);
  bool fits = true;
  for (int64_t i = 0; i < S; ++i) {
    padded[i] = x.sizes()[2 + i] + 2 * c.padding[i];
    extent[i] = c.dilation[i] * (w.sizes()[2 + i] - 1) + 1;
    fits = fits && padded[i] >= extent[i];
    out.push_back(conv_out_size(x.sizes()[2 + i], w.sizes()[2 + i], c.stride[i], c.padding[i], c.dilation[i]));
  }
  PF_CHECK(fits, "Calculated padded input size per channel: (", sizes_x(padded), "). Kernel size: (", sizes_x(extent),
           "). Kernel size can't be greater than actual input size");
  return {out_meta(out, x.dtype(), x.device(), conv_memory_format(x, w))};
}

template <int64_t S>
std::vector<TensorMeta> conv_grad_input_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor &g = in[0], &w = in[1];
  const ConvAttrs c = conv_attrs(attrs, S);
  const Shape& size = spatial_attr(attrs, "input_size", S);
  check_rank(g, S, "conv_grad_input", "grad_output");
  check_weight(w, c.groups, S);
  check_same_dtype(g, w, "Input", "weight");
  PF_CHECK(g.sizes()[1] == w.sizes()[0], conv_name(S), "_grad_input: grad_output has ", g.sizes()[1],
           " channels but the weight ", shape_str(w.sizes()), " produces ", w.sizes()[0]);
  Shape out{g.sizes()[0], w.sizes()[1] * c.groups};
  for (int64_t s : size) {
    PF_CHECK(s >= 0, conv_name(S), "_grad_input: negative input size ", shape_str(size));
    out.push_back(s);
  }
  return {out_meta(out, g.dtype(), g.device(), conv_memory_format(g, w))};
}

template <int64_t S>
std::vector<TensorMeta> conv_grad_weight_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor &g = in[0], &x = in[1];
  const ConvAttrs c = conv_attrs(attrs, S);
  const Shape& k = spatial_attr(attrs, "kernel_size", S);
  check_rank(g, S, "conv_grad_weight", "grad_output");
  check_rank(x, S, "conv_grad_weight", "input");
  check_same_dtype(g, x, "Input", "grad_output");
  PF_CHECK(g.sizes()[0] == x.sizes()[0], conv_name(S), "_grad_weight: batch sizes differ: grad_output ",
           shape_str(g.sizes()), ", input ", shape_str(x.sizes()));
  PF_CHECK(g.sizes()[1] % c.groups == 0 && x.sizes()[1] % c.groups == 0, conv_name(S), "_grad_weight: groups=",
           c.groups, " must divide the channels of grad_output ", shape_str(g.sizes()), " and input ",
           shape_str(x.sizes()));
  Shape out{g.sizes()[1], x.sizes()[1] / c.groups};
  for (int64_t s : k) {
    PF_CHECK(s > 0, conv_name(S), "_grad_weight: non-positive kernel size ", shape_str(k));
    out.push_back(s);
  }
  return {out_meta(out, g.dtype(), g.device())};
}

// ---- pooling ----------------------------------------------------------------------------------

// The layout of a pooling result, as PyTorch 1.13's CPU kernels choose it: 2-d pooling keeps a
// channels-last input's layout (values and max-pooling indices alike); its 3-d kernels return
// row-major results whatever the input.
MemoryFormat pool_memory_format(const Tensor& x, int64_t S) {
  return S == 2 ? x.suggest_memory_format() : MemoryFormat::Contiguous;
}

struct PoolAttrs {
  Shape kernel, stride, padding, dilation;
  bool ceil_mode;
};

// PyTorch's pool2d/pool3d_shape_check: window, stride, dilation and padding limits, and a
// non-empty output; with `whole_windows` (3-d average pooling) the unpadded input must hold a
// window. The letters PyTorch names the dims with (kT: the depth of a 3-d window).
Shape pool_out_shape(const Tensor& x, const PoolAttrs& p, bool whole_windows = false) {
  const int64_t S = x.dim() - 2;
  const char* const letters[] = {"T", "H", "W"};
  const char* const* l = letters + (3 - S);
  const auto all_positive = [](const Shape& v) { return std::all_of(v.begin(), v.end(), [](int64_t e) { return e > 0; }); };
  const auto listing = [&](const char* prefix, const Shape& v) {
    std::string s;
    for (int64_t i = 0; i < S; ++i) s += (i ? " " : "") + std::string(prefix) + l[i] + ": " + std::to_string(v[i]);
    return s;
  };
  PF_CHECK(all_positive(p.kernel), "kernel size should be greater than zero, but got ", listing("k", p.kernel));
  PF_CHECK(all_positive(p.stride), "stride should be greater than zero, but got ", listing("d", p.stride));
  PF_CHECK(all_positive(p.dilation), "dilation should be greater than zero, but got ",
           listing("dilation", p.dilation));
  for (int64_t d = 1; d < x.dim(); ++d)
    PF_CHECK(x.sizes()[d] != 0, "Expected ", S + 1, "D or ", S + 2,
             "D (batch mode) tensor with optional 0 dim batch size for input, but got:", shape_str(x.sizes()));
  if (whole_windows) {
    bool fits = true;
    for (int64_t i = 0; i < S; ++i) fits = fits && x.sizes()[2 + i] >= p.kernel[i];
    PF_CHECK(fits, "input image (", listing("", spatial_sizes(x)), ") smaller than kernel size (",
             listing("k", p.kernel), ")");
  }
  for (int64_t i = 0; i < S; ++i) {
    PF_CHECK(p.padding[i] >= 0, "pad must be non-negative, but got pad: ", p.padding[i]);
    PF_CHECK(p.kernel[i] / 2 >= p.padding[i], "pad should be at most half of kernel size, but got pad=", p.padding[i],
             " and kernel_size=", p.kernel[i]);
  }
  Shape out{x.sizes()[0], x.sizes()[1]};
  bool fits = true;
  for (int64_t i = 0; i < S; ++i) {
    out.push_back(
        pool_out_size(x.sizes()[2 + i], p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], p.ceil_mode));
    fits = fits && out.back() >= 1;
  }
  const Shape in_plane(x.sizes().begin() + 1, x.sizes().end());
  Shape out_plane(out.begin() + 1, out.end());
  PF_CHECK(fits, "Given input size: (", sizes_x(in_plane, "x"), "). Calculated output size: (",
           sizes_x(out_plane, "x"), "). Output size is too small");
  return out;
}

template <int64_t S>
PoolAttrs max_pool_attrs(const Attrs& attrs) {
  return {spatial_attr(attrs, "kernel_size", S), spatial_attr(attrs, "stride", S),
          spatial_attr(attrs, "padding", S), spatial_attr(attrs, "dilation", S), attrs.get<bool>("ceil_mode")};
}

template <int64_t S>
std::vector<TensorMeta> max_pool_meta(std::span<const Tensor> in, const Attrs& attrs) {
  check_rank(in[0], S, "max_pool", "input");
  const Shape out = pool_out_shape(in[0], max_pool_attrs<S>(attrs));
  const MemoryFormat format = pool_memory_format(in[0], S);
  return {out_meta(out, in[0].dtype(), in[0].device(), format), out_meta(out, DType::Int64, in[0].device(), format)};
}

template <int64_t S>
PoolAttrs avg_pool_attrs(const Attrs& attrs) {
  attrs.get<bool>("count_include_pad");
  PF_CHECK(attrs.get<int64_t>("divisor") >= 0, "avg_pool: divisor (0 = none) must not be negative");
  return {spatial_attr(attrs, "kernel_size", S), spatial_attr(attrs, "stride", S),
          spatial_attr(attrs, "padding", S), Shape(S, 1), attrs.get<bool>("ceil_mode")};
}

template <int64_t S>
std::vector<TensorMeta> avg_pool_meta(std::span<const Tensor> in, const Attrs& attrs) {
  check_rank(in[0], S, "avg_pool", "input");
  return {out_meta(pool_out_shape(in[0], avg_pool_attrs<S>(attrs), S == 3), in[0].dtype(), in[0].device(),
                   pool_memory_format(in[0], S))};
}

// The backward of an (N, C, spatial) -> (N, C, out spatial) op: grad_output must have the
// forward's output shape for an input of `input_size`; the result has the input's shape, in
// `format`.
std::vector<TensorMeta> backward_meta(const Tensor& g, const Attrs& attrs, const char* op, const Shape& expected,
                                      int64_t S, MemoryFormat format) {
  check_rank(g, S, op, "grad_output");
  const Shape& size = spatial_attr(attrs, "input_size", S);
  PF_CHECK(spatial_sizes(g) == expected, op, ": grad_output ", shape_str(g.sizes()),
           " does not match the forward output size ", shape_str(expected));
  Shape out{g.sizes()[0], g.sizes()[1]};
  out.insert(out.end(), size.begin(), size.end());
  return {out_meta(out, g.dtype(), g.device(), format)};
}

// The pooling backward ops' gradient layout: the forward input's (attr channels_last; run_linear
// gives linear ops' gradients the input's layout), which grad_output cannot tell (a 1x1 output
// is both layouts at once). Set here, the kernel writes it with no copy.
MemoryFormat pool_grad_format(const Attrs& attrs) {
  return attrs.get<bool>("channels_last") ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

// A stand-in with the forward input's shape (all strides 0: the forward meta checks only sizes).
Tensor meta_input(const Tensor& g, const Attrs& attrs, int64_t S) {
  const Shape& size = spatial_attr(attrs, "input_size", S);
  for (int64_t s : size) PF_CHECK(s > 0, "input_size must be positive, got ", shape_str(size));
  Shape sizes{g.sizes()[0], g.sizes()[1]};
  sizes.insert(sizes.end(), size.begin(), size.end());
  return Tensor::view_of(g.storage(), sizes, Shape(S + 2, 0), 0, g.dtype());
}

template <int64_t S>
std::vector<TensorMeta> avg_pool_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Shape out = pool_out_shape(meta_input(in[0], attrs, S), avg_pool_attrs<S>(attrs), S == 3);
  return backward_meta(in[0], attrs, "avg_pool_backward", Shape(out.begin() + 2, out.end()), S,
                       pool_grad_format(attrs));
}

template <int64_t S>
std::vector<TensorMeta> adaptive_meta(std::span<const Tensor> in, const Attrs& attrs, bool with_indices) {
  const Tensor& x = in[0];
  check_rank(x, S, "adaptive pooling", "input");
  const Shape& os = spatial_attr(attrs, "output_size", S);
  PF_CHECK(std::all_of(os.begin(), os.end(), [](int64_t v) { return v >= 0; }),
           "adaptive pooling: elements of output_size must be greater than or equal to 0 but received {",
           sizes_x(os, ", "), "}");
  for (int64_t d = 1; d < S + 2; ++d)
    PF_CHECK(x.sizes()[d] > 0, "adaptive pooling: Expected input to have non-zero size for non-batch dimensions, but "
             "input has sizes ", shape_str(x.sizes()), " with dimension ", d, " being empty");
  Shape out{x.sizes()[0], x.sizes()[1]};
  out.insert(out.end(), os.begin(), os.end());
  const MemoryFormat format = pool_memory_format(x, S);
  if (with_indices)
    return {out_meta(out, x.dtype(), x.device(), format), out_meta(out, DType::Int64, x.device(), format)};
  return {out_meta(out, x.dtype(), x.device(), format)};
}

template <int64_t S>
std::vector<TensorMeta> adaptive_avg_pool_meta(std::span<const Tensor> in, const Attrs& attrs) {
  return adaptive_meta<S>(in, attrs, false);
}
template <int64_t S>
std::vector<TensorMeta> adaptive_max_pool_meta(std::span<const Tensor> in, const Attrs& attrs) {
  return adaptive_meta<S>(in, attrs, true);
}
template <int64_t S>
std::vector<TensorMeta> adaptive_avg_pool_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  meta_input(in[0], attrs, S);
  return backward_meta(in[0], attrs, "adaptive_avg_pool_backward", spatial_attr(attrs, "output_size", S), S,
                       pool_grad_format(attrs));
}

// ---- upsampling ---------------------------------------------------------------------------------

// PyTorch 1.13's nearest and bilinear upsampling keep a channels-last image's layout, forward
// and backward (there the gradient's); bicubic returns row-major results.
template <bool keeps_channels_last>
std::vector<TensorMeta> upsample_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[0];
  check_rank(x, 2, "upsample", "input");
  const Shape& os = spatial_attr(attrs, "output_size", 2);
  attrs.get<double>("scale_h");
  attrs.get<double>("scale_w");
  PF_CHECK(x.sizes()[2] > 0 && x.sizes()[3] > 0 && os[0] > 0 && os[1] > 0,
           "Input and output sizes should be greater than 0, but got input (H: ", x.sizes()[2], ", W: ", x.sizes()[3],
           ") output (H: ", os[0], ", W: ", os[1], ")");
  // an empty batch is fine, no channels is not (PyTorch's upsample_2d_common_check)
  PF_CHECK(x.sizes()[1] > 0, "Non-empty 4D data tensor expected but got a tensor with sizes ", shape_str(x.sizes()));
  if (attrs.has("align_corners")) attrs.get<bool>("align_corners");
  return {out_meta({x.sizes()[0], x.sizes()[1], os[0], os[1]}, x.dtype(), x.device(),
                   keeps_channels_last ? x.suggest_memory_format() : MemoryFormat::Contiguous)};
}

template <bool keeps_channels_last>
std::vector<TensorMeta> upsample_backward_meta(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor x = meta_input(in[0], attrs, 2);
  upsample_meta<keeps_channels_last>(std::span<const Tensor>(&x, 1), attrs);
  return backward_meta(in[0], attrs, "upsample_backward", spatial_attr(attrs, "output_size", 2), 2,
                       keeps_channels_last ? in[0].suggest_memory_format() : MemoryFormat::Contiguous);
}

// The catalog entries of core/opdefs/conv.yaml and pooling.yaml, with the meta functions above.
const bool kConvOpsRegistered = [] {
#define PF_X(name, signature, meta, mutated) register_op(name, signature, meta, {PF_OPDEFS_UNPAREN mutated});
  PF_OPDEFS_CONV(PF_X)
  PF_OPDEFS_POOLING(PF_X)
#undef PF_X
  return true;
}();

}  // namespace

namespace ops {
namespace {

// Runs op, or (when an input is empty, which kernels never see) returns zeros of the meta
// function's outputs: an empty sum is zero, e.g. a weight gradient over a batch of 0.
Tensors call_or_zeros(const OpDef& op, std::span<const Tensor> in, const Attrs& attrs) {
  for (const Tensor& t : in) {
    if (t.numel() != 0) continue;
    Tensors outs;
    for (const TensorMeta& m : op.meta(in, attrs)) {
      Tensor zero = Tensor::empty(m.sizes, m.dtype, m.device, m.memory_format);
      outs.push_back(zero_(zero));
    }
    return outs;
  }
  return call_op(op, in, attrs);
}

void check_float(const Tensor& t, const char* op) {
  PF_CHECK(is_floating(t.dtype()), "\"", op, "\" not implemented for '", dtype_name(t.dtype()),
           "' (floating inputs only)");
}

// An unbatched input (S + 1 dims) as a batch of one; `batched` tells the caller to squeeze it
// back.
Tensor batch_input(const Tensor& x, int64_t S, const char* op, bool& batched) {
  PF_CHECK(x.dim() == S + 1 || x.dim() == S + 2, "Expected ", S + 1, "D (unbatched) or ", S + 2,
           "D (batched) input to ", op, ", but got input of size: ", shape_str(x.sizes()));
  batched = x.dim() == S + 2;
  return batched ? x : unsqueeze(x, 0);
}

Tensor unbatch(const Tensor& out, bool batched) { return batched ? out : squeeze(out, 0); }

Shape check_spatial(const Shape& v, int64_t S, const char* name) {
  PF_CHECK(static_cast<int64_t>(v.size()) == S, "expected ", name, " to be a single integer value or a list of ", S,
           " values to match the convolution dimensions, but got ", name, "=", shape_str(v));
  return v;
}

Attrs make_conv_attrs(int64_t S, const Shape& stride, const Shape& padding, const Shape& dilation, int64_t groups) {
  return Attrs{{"stride", check_spatial(stride, S, "stride")},
               {"padding", check_spatial(padding, S, "padding")},
               {"dilation", check_spatial(dilation, S, "dilation")},
               {"groups", groups}};
}

// (1, C, 1, ...): a per-channel vector broadcast over an (N, C, spatial) tensor of rank `rank`.
Tensor channel_view(const Tensor& v, int64_t rank) {
  Shape s(rank, 1);
  s[1] = -1;
  return reshape(v, s);
}

// ---- convolution: three sides of one bilinear map ------------------------------------------------
// With y = conv(x, w): <g, y> = <grad_input(g, w), x> = <grad_weight(g, x), w>. Each function's
// backward follows from that identity and uses the other two. The spatial rank is the
// operands' (attrs hold that many values).

enum class ConvSide { Forward, GradInput, GradWeight };

const OpDef& conv_op(int64_t S, ConvSide side) {
  PF_CHECK_T(S == 2 || S == 3, ValueError, "convolution: expected 2 or 3 spatial dims, got ", S);
  static const OpDef* ops[2][3] = {
      {&find_op("conv2d"), &find_op("conv2d_grad_input"), &find_op("conv2d_grad_weight")},
      {&find_op("conv3d"), &find_op("conv3d_grad_input"), &find_op("conv3d_grad_weight")}};
  return *ops[S - 2][static_cast<int>(side)];
}

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Attrs& attrs);
Tensor conv_grad_input(const Tensor& g, const Tensor& w, const Shape& size, const Attrs& attrs);
Tensor conv_grad_weight(const Tensor& g, const Tensor& x, const Shape& kernel, const Attrs& attrs);

// conv(x, w) cropped or zero-extended to `size` output positions: the adjoint of a
// grad_input/grad_weight whose image size is not the convolution's inverse size (a transposed
// convolution's output_padding, or a caller's input_size) covers the positions that exist.
Tensor conv_forward_to(const Tensor& x, const Tensor& w, const Attrs& attrs, const Shape& size) {
  Tensor y = conv_forward(x, w, Tensor(), attrs);
  Shape pad;  // constant_pad_nd's order: last dim first; negative pads crop
  bool same = true;
  for (int64_t i = static_cast<int64_t>(size.size()) - 1; i >= 0; --i) {
    const int64_t extra = size[i] - y.sizes()[2 + i];
    same = same && extra == 0;
    pad.push_back(0);
    pad.push_back(extra);
  }
  return same ? y : constant_pad_nd(y, pad);
}

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Attrs& attrs) {
  const int64_t S = x.dim() - 2;
  const OpDef& op = conv_op(S, ConvSide::Forward);
  Tensor out;
  if (bias.defined()) {
    const Tensor in[] = {x, w, bias};
    out = call_or_zeros(op, in, attrs)[0];
    if (x.numel() == 0 || w.numel() == 0) out = binary("add", out, channel_view(bias, S + 2));
  } else {
    const Tensor in[] = {x, w};
    out = call_or_zeros(op, in, attrs)[0];
  }
  const bool need_x = autograd::requires_grad(x), need_w = autograd::requires_grad(w);
  const bool has_bias = bias.defined(), need_b = has_bias && autograd::requires_grad(bias);
  if (autograd::is_grad_enabled() && (need_x || need_w || need_b)) {
    auto node = autograd::make_node(
        "ConvolutionBackward0",
        [attrs, need_x, need_w, need_b, has_bias](const Tensors& g, const Tensors& s) -> Tensors {
          const Tensor &x = s[0], &w = s[1];
          // Channels-last convolutions take their output gradient channels last too (an
          // expanded one, from sum(), would otherwise make the input gradient row-major).
          const MemoryFormat format = conv_memory_format(x, w);
          const Tensor grad = format == MemoryFormat::ChannelsLast ? contiguous(g[0], format) : g[0];
          Tensors r(has_bias ? 3 : 2);
          if (need_x) r[0] = conv_grad_input(grad, w, spatial_sizes(x), attrs);
          if (need_w) r[1] = conv_grad_weight(grad, x, spatial_sizes(w), attrs);
          if (need_b) {
            Shape dims{0};
            for (int64_t d = 2; d < g[0].dim(); ++d) dims.push_back(d);
            r[2] = reduce("sum", g[0], dims, false);
          }
          return r;
        });
    node->save(x);
    node->save(w);
    if (has_bias) {
      autograd::record(node, {x, w, bias}, {out});
    } else {
      autograd::record(node, {x, w}, {out});
    }
  }
  return out;
}

Tensor conv_grad_input(const Tensor& g, const Tensor& w, const Shape& size, const Attrs& attrs) {
  Attrs a = attrs;
  a.set("input_size", size);
  const Tensor in[] = {g, w};
  Tensor out = call_or_zeros(conv_op(g.dim() - 2, ConvSide::GradInput), in, a)[0];
  if (autograd::any_requires_grad({&g, &w})) {
    const bool need_g = autograd::requires_grad(g), need_w = autograd::requires_grad(w);
    auto node = autograd::make_node(
        "ConvolutionBackward0", [attrs, need_g, need_w](const Tensors& h, const Tensors& s) -> Tensors {
          const Tensor &g = s[0], &w = s[1];
          Tensors r(2);
          if (need_g) r[0] = conv_forward_to(h[0], w, attrs, spatial_sizes(g));
          if (need_w) r[1] = conv_grad_weight(g, h[0], spatial_sizes(w), attrs);
          return r;
        });
    node->save(g);
    node->save(w);
    autograd::record(node, {g, w}, {out});
  }
  return out;
}

Tensor conv_grad_weight(const Tensor& g, const Tensor& x, const Shape& kernel, const Attrs& attrs) {
  Attrs a = attrs;
  a.set("kernel_size", kernel);
  const Tensor in[] = {g, x};
  Tensor out = call_or_zeros(conv_op(g.dim() - 2, ConvSide::GradWeight), in, a)[0];
  if (autograd::any_requires_grad({&g, &x})) {
    const bool need_g = autograd::requires_grad(g), need_x = autograd::requires_grad(x);
    auto node = autograd::make_node(
        "ConvolutionBackwardBackward0", [attrs, need_g, need_x](const Tensors& h, const Tensors& s) -> Tensors {
          const Tensor &g = s[0], &x = s[1];
          Tensors r(2);
          if (need_g) r[0] = conv_forward_to(x, h[0], attrs, spatial_sizes(g));
          if (need_x) r[1] = conv_grad_input(g, h[0], spatial_sizes(x), attrs);
          return r;
        });
    node->save(g);
    node->save(x);
    autograd::record(node, {g, x}, {out});
  }
  return out;
}

// ---- the public convolutions, written once over the spatial rank ---------------------------------

Tensor conv_nd(int64_t S, const char* name, const Tensor& input, const Tensor& weight, const Tensor& bias,
               const Shape& stride, const Shape& padding, const Shape& dilation, int64_t groups) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{name, {input, weight, bias}})
      return conv_nd(S, name, cast[0], cast[1], cast[2], stride, padding, dilation, groups);
  bool batched;
  const Tensor x = batch_input(input, S, name, batched);
  check_float(x, name);
  const Attrs attrs = make_conv_attrs(S, stride, padding, dilation, groups);
  return unbatch(conv_forward(x, weight, bias, attrs), batched);
}

// padding='same' (stride 1): total = dilation * (k - 1) per dim, the smaller half before, the
// rest after; an odd total pads the input's end by one more first (PyTorch's rule).
Tensor conv_nd_same(int64_t S, const char* name, const Tensor& input, const Tensor& weight, const Tensor& bias,
                    const Shape& stride, const Shape& dilation, int64_t groups) {
  check_spatial(stride, S, "stride");
  check_spatial(dilation, S, "dilation");
  PF_CHECK(std::all_of(stride.begin(), stride.end(), [](int64_t s) { return s == 1; }),
           "padding='same' is not supported for strided convolutions");
  PF_CHECK(weight.dim() == S + 2, "Expected ", S + 2, "-dimensional weight for ", name, ", but got weight of size ",
           shape_str(weight.sizes()));
  Shape pad(S), extra_pad;  // extra_pad: constant_pad_nd's order, last dim first
  bool odd = false;
  for (int64_t i = S - 1; i >= 0; --i) {
    const int64_t total = dilation[i] * (weight.sizes()[2 + i] - 1);
    pad[i] = total / 2;
    odd = odd || total % 2 != 0;
    extra_pad.push_back(0);
    extra_pad.push_back(total - 2 * pad[i]);
  }
  if (!odd) return conv_nd(S, name, input, weight, bias, stride, pad, dilation, groups);
  PF_CHECK(input.dim() == S + 1 || input.dim() == S + 2, "Expected ", S + 1, "D (unbatched) or ", S + 2,
           "D (batched) input to ", name, ", but got input of size: ", shape_str(input.sizes()));
  return conv_nd(S, name, constant_pad_nd(input, extra_pad), weight, bias, stride, pad, dilation, groups);
}

Tensor conv_nd(int64_t S, const char* name, const Tensor& input, const Tensor& weight, const Tensor& bias,
               const Shape& stride, const std::string& padding, const Shape& dilation, int64_t groups) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{name, {input, weight, bias}})
      return conv_nd(S, name, cast[0], cast[1], cast[2], stride, padding, dilation, groups);
  if (padding == "valid") return conv_nd(S, name, input, weight, bias, stride, Shape(S, 0), dilation, groups);
  PF_CHECK(padding == "same", "Invalid padding string: '", padding, "'");
  return conv_nd_same(S, name, input, weight, bias, stride, dilation, groups);
}

Tensor conv_transpose_nd(int64_t S, const char* name, const Tensor& input, const Tensor& weight, const Tensor& bias,
                         const Shape& stride, const Shape& padding, const Shape& output_padding, int64_t groups,
                         const Shape& dilation) {
  if (autocast::active()) [[unlikely]]
    if (autocast::OpScope cast{name, {input, weight, bias}})
      return conv_transpose_nd(S, name, cast[0], cast[1], cast[2], stride, padding, output_padding, groups, dilation);
  bool batched;
  const Tensor x = batch_input(input, S, name, batched);
  check_float(x, name);
  const Attrs attrs = make_conv_attrs(S, stride, padding, dilation, groups);
  check_spatial(output_padding, S, "output_padding");
  PF_CHECK(groups > 0, "non-positive groups is not supported");
  bool small_output_padding = true;
  for (int64_t i = 0; i < S; ++i) {
    PF_CHECK(padding[i] >= 0, "negative padding is not supported");
    PF_CHECK(output_padding[i] >= 0, "negative output_padding is not supported");
    PF_CHECK(stride[i] > 0, "non-positive stride is not supported");
    PF_CHECK(dilation[i] > 0, "non-positive dilation is not supported");
    small_output_padding = small_output_padding && (output_padding[i] < stride[i] || output_padding[i] < dilation[i]);
  }
  if (!small_output_padding) {
    const char* const names[] = {"depth", "height", "width"};
    const char* const* dim = names + (3 - S);
    std::string values;
    for (const auto& [what, v] : {std::pair{"output_padding", &output_padding}, std::pair{"stride", &stride},
                                  std::pair{"dilation", &dilation}})
      for (int64_t i = 0; i < S; ++i) values += std::string(" ") + what + "_" + dim[i] + ": " + std::to_string((*v)[i]);
    PF_THROW(Error, "output padding must be smaller than either stride or dilation, but got", values);
  }
  PF_CHECK(weight.dim() == S + 2, "Expected ", S + 2, "-dimensional weight for ", name, ", but got weight of size ",
           shape_str(weight.sizes()));
  PF_CHECK(weight.sizes()[0] % groups == 0, "Given groups=", groups, ", expected weight to be divisible by ", groups,
           " at dimension 0, but got weight of size ", shape_str(weight.sizes()), " instead");
  PF_CHECK(x.sizes()[1] == weight.sizes()[0], "Given transposed=1, weight of size ", shape_str(weight.sizes()),
           ", expected input", shape_str(x.sizes()), " to have ", weight.sizes()[0], " channels, but got ",
           x.sizes()[1], " channels instead");
  const int64_t c_out = weight.sizes()[1] * groups;
  if (bias.defined())
    PF_CHECK(bias.dim() == 1 && bias.sizes()[0] == c_out, "Given transposed=1, weight of size ",
             shape_str(weight.sizes()), ", expected bias to be 1-dimensional with ", c_out,
             " elements, but got bias of size ", shape_str(bias.sizes()), " instead");
  Shape size(S);
  bool positive = true;
  for (int64_t i = 0; i < S; ++i) {
    size[i] = (x.sizes()[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (weight.sizes()[2 + i] - 1) +
              output_padding[i] + 1;
    positive = positive && size[i] > 0;
  }
  PF_CHECK(positive, "Given input size per channel: (", sizes_x(spatial_sizes(x)),
           "). Calculated output size per channel: (", sizes_x(size), "). Output size is too small");
  Tensor out = conv_grad_input(x, weight, size, attrs);
  if (bias.defined()) {
    check_same_dtype(x, bias, "Input", "bias");
    out = binary("add", out, channel_view(bias, S + 2));
  }
  return unbatch(out, batched);
}

// ---- linear maps with an adjoint op (average pooling, upsampling) ---------------------------------

struct LinearOp {
  const char* op;
  const char* node;  // the autograd node's name
};

// y = A x with A = `fwd`; its backward is A^T = `adj` (with attrs `adj_attrs`), whose own
// backward is A again: gradients of every order. The gradient takes x's layout (a channels-last
// x gets a channels-last gradient, as PyTorch's pooling backward gives).
Tensor run_linear(const LinearOp& fwd, const LinearOp& adj, const Tensor& x, const Attrs& attrs,
                  const Attrs& adj_attrs) {
  const Tensor in[] = {x};
  Tensor out = call_or_zeros(find_op(fwd.op), in, attrs)[0];
  if (autograd::any_requires_grad({&x})) {
    auto node = autograd::make_node(fwd.node, [fwd, adj, attrs, adj_attrs, format = x.suggest_memory_format()](
                                                  const Tensors& g, const Tensors&) -> Tensors {
      return {contiguous(run_linear(adj, fwd, g[0], adj_attrs, attrs), format)};
    });
    autograd::record(node, {x}, {out});
  }
  return out;
}

// Runs the linear (N, C, spatial) -> (N, C, out spatial) op `op` with `op`_backward as its
// adjoint, whose attrs are op's plus the input size and `backward_attrs`.
Tensor run_linear_pair(const std::string& op, const char* node, const char* backward_node, const Tensor& x,
                       Attrs attrs, const Attrs& backward_attrs = {}) {
  Attrs back = attrs;
  back.set("input_size", spatial_sizes(x));
  for (const auto& [name, value] : backward_attrs.items()) back.set(name, value);
  // catalog names live forever
  const OpDef& forward_op = find_op(op);
  const OpDef& backward_op = find_op(op + "_backward");
  return run_linear({forward_op.name.c_str(), node}, {backward_op.name.c_str(), backward_node}, x, attrs, back);
}

// ---- max pooling ------------------------------------------------------------------------------------

// values and indices (into each input plane or volume); the backward scatters through the
// indices.
std::pair<Tensor, Tensor> run_max_pool(const std::string& op_name, const char* node_name, const Tensor& x,
                                       const Attrs& attrs) {
  const Tensor in[] = {x};
  Tensors outs = call_or_zeros(find_op(op_name), in, attrs);
  if (autograd::any_requires_grad({&x})) {
    // A channels-last input gets a channels-last gradient (as in PyTorch): the scatter then runs
    // along the (N, H * W * C) rows of the channels-last tensors, index h * W + w of channel c
    // becoming (h * W + w) * C + c (a scatter per channel plane would read with a stride of C:
    // 3x slower on ResNet's stem).
    const bool channels_last = pool_memory_format(x, x.dim() - 2) == MemoryFormat::ChannelsLast;
    auto node = autograd::make_node(node_name, [shape = x.sizes(), channels_last](const Tensors& g,
                                                                                  const Tensors& s) -> Tensors {
      const Tensor& idx = s[0];
      const int64_t n = shape[0], c = shape[1];
      int64_t in_volume = 1, out_volume = 1;
      for (size_t d = 2; d < shape.size(); ++d) {
        in_volume *= shape[d];
        out_volume *= idx.sizes()[d];
      }
      if (channels_last) {  // 2-d: (N, C, H, W) <-> (N, H, W, C)
        const Shape rows{n, out_volume * c};
        const Tensor channel = arange(int64_t{0}, c, int64_t{1}, DType::Int64, idx.device());
        const Tensor flat_g = reshape(permute(g[0], {0, 2, 3, 1}), rows);
        const Tensor flat_i = reshape(add(channel, permute(idx, {0, 2, 3, 1}), c), rows);
        const Tensor grad = scatter_add_internal(flat_g, 1, flat_i, {n, in_volume * c});
        return {permute(reshape(grad, {n, shape[2], shape[3], c}), {0, 3, 1, 2})};
      }
      const Shape flat{n, c, out_volume};  // no -1: the batch may be 0
      const Tensor flat_g = reshape(g[0], flat);
      const Tensor flat_i = reshape(idx, flat);
      return {reshape(scatter_add_internal(flat_g, 2, flat_i, {n, c, in_volume}), shape)};
    });
    node->save(outs[1]);
    autograd::record(node, {x}, {outs[0], outs[1]});
  }
  return {outs[0], outs[1]};
}

// A pooling argument of S values; PyTorch's message names the op and the argument.
Shape check_pool_arg(const Shape& v, int64_t S, const char* op, const char* name) {
  PF_CHECK(static_cast<int64_t>(v.size()) == S, op, ": ", name, " must be ", S, " values ", spatial_names(S),
           ", got ", shape_str(v));
  return v;
}

// The (S + 1)-d unbatched or (S + 2)-d batched input of a pooling op, as a batch.
Tensor pool_input(const Tensor& input, int64_t S, const char* op, bool& batched) {
  PF_CHECK(input.dim() == S + 1 || input.dim() == S + 2, "non-empty ", S + 1, "D or ", S + 2,
           "D (batch mode) tensor expected for input, but got ", shape_str(input.sizes()));
  check_float(input, op);
  batched = input.dim() == S + 2;
  return batched ? input : unsqueeze(input, 0);
}

std::pair<Tensor, Tensor> max_pool_nd(int64_t S, const Tensor& input, const Shape& kernel_size, const Shape& stride,
                                      const Shape& padding, const Shape& dilation, bool ceil_mode) {
  const std::string op = "max_pool" + std::to_string(S) + "d";
  bool batched;
  const Tensor x = pool_input(input, S, op.c_str(), batched);
  const Shape k = check_pool_arg(kernel_size, S, op.c_str(), "kernel_size");
  const Attrs attrs{{"kernel_size", k},
                    {"stride", check_pool_arg(stride.empty() ? k : stride, S, op.c_str(), "stride")},
                    {"padding", check_pool_arg(padding, S, op.c_str(), "padding")},
                    {"dilation", check_pool_arg(dilation, S, op.c_str(), "dilation")},
                    {"ceil_mode", ceil_mode}};
  auto [values, indices] =
      run_max_pool(op, S == 3 ? "MaxPool3DWithIndicesBackward0" : "MaxPool2DWithIndicesBackward0", x, attrs);
  return {unbatch(values, batched), unbatch(indices, batched)};
}

Tensor avg_pool_nd(int64_t S, const Tensor& input, const Shape& kernel_size, const Shape& stride,
                   const Shape& padding, bool ceil_mode, bool count_include_pad,
                   std::optional<int64_t> divisor_override) {
  const std::string op = "avg_pool" + std::to_string(S) + "d";
  bool batched;
  const Tensor x = pool_input(input, S, op.c_str(), batched);
  PF_CHECK(!divisor_override || *divisor_override != 0, "divisor must be not zero");
  const Shape k = check_pool_arg(kernel_size, S, op.c_str(), "kernel_size");
  const Attrs attrs{{"kernel_size", k},
                    {"stride", check_pool_arg(stride.empty() ? k : stride, S, op.c_str(), "stride")},
                    {"padding", check_pool_arg(padding, S, op.c_str(), "padding")},
                    {"ceil_mode", ceil_mode},
                    {"count_include_pad", count_include_pad},
                    {"divisor", divisor_override.value_or(0)}};
  const bool three = S == 3;
  const Attrs backward{{"channels_last", x.suggest_memory_format() == MemoryFormat::ChannelsLast}};
  return unbatch(run_linear_pair(op, three ? "AvgPool3DBackward0" : "AvgPool2DBackward0",
                                 three ? "AvgPool3DBackwardBackward0" : "AvgPool2DBackwardBackward0", x, attrs,
                                 backward),
                 batched);
}

// The adaptive ops' input as a batch and their output size (-1: the input's size there).
// (PyTorch's max pooling message has a colon after "got", the average's none.)
Tensor adaptive_input(const Tensor& input, int64_t S, const char* op, const Shape& output_size, Shape& out,
                      bool& batched, const char* got = "got") {
  PF_CHECK(input.dim() == S + 1 || input.dim() == S + 2, op, "(): Expected ", S + 1, "D or ", S + 2, "D tensor, but ",
           got, " ", shape_str(input.sizes()));
  check_float(input, op);
  const Shape os = check_pool_arg(output_size, S, op, "output_size");
  batched = input.dim() == S + 2;
  const Tensor x = batched ? input : unsqueeze(input, 0);
  out.resize(S);
  for (int64_t i = 0; i < S; ++i) out[i] = os[i] == -1 ? x.sizes()[2 + i] : os[i];
  return x;
}

Tensor adaptive_avg_pool_nd(int64_t S, const Tensor& input, const Shape& output_size) {
  const std::string op = "adaptive_avg_pool" + std::to_string(S) + "d";
  Shape out;
  bool batched;
  const Tensor x = adaptive_input(input, S, op.c_str(), output_size, out, batched);
  const bool three = S == 3;
  const Attrs backward{{"channels_last", x.suggest_memory_format() == MemoryFormat::ChannelsLast}};
  return unbatch(run_linear_pair(op, three ? "AdaptiveAvgPool3DBackward0" : "AdaptiveAvgPool2DBackward0",
                                 three ? "AdaptiveAvgPool3DBackwardBackward0" : "AdaptiveAvgPool2DBackwardBackward0",
                                 x, Attrs{{"output_size", out}}, backward),
                 batched);
}

std::pair<Tensor, Tensor> adaptive_max_pool_nd(int64_t S, const Tensor& input, const Shape& output_size) {
  const std::string op = "adaptive_max_pool" + std::to_string(S) + "d";
  Shape out;
  bool batched;
  const Tensor x = adaptive_input(input, S, op.c_str(), output_size, out, batched, "got:");
  auto [values, indices] = run_max_pool(op, S == 3 ? "AdaptiveMaxPool3DBackward0" : "AdaptiveMaxPool2DBackward0", x,
                                        Attrs{{"output_size", out}});
  return {unbatch(values, batched), unbatch(indices, batched)};
}

}  // namespace

// ---- public API ------------------------------------------------------------------------------------

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride, const Shape& padding,
              const Shape& dilation, int64_t groups) {
  return conv_nd(2, "conv2d", input, weight, bias, stride, padding, dilation, groups);
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
              const std::string& padding, const Shape& dilation, int64_t groups) {
  return conv_nd(2, "conv2d", input, weight, bias, stride, padding, dilation, groups);
}

Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride, const Shape& padding,
              const Shape& dilation, int64_t groups) {
  return conv_nd(3, "conv3d", input, weight, bias, stride, padding, dilation, groups);
}

Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
              const std::string& padding, const Shape& dilation, int64_t groups) {
  return conv_nd(3, "conv3d", input, weight, bias, stride, padding, dilation, groups);
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                        const Shape& padding, const Shape& output_padding, int64_t groups, const Shape& dilation) {
  return conv_transpose_nd(2, "conv_transpose2d", input, weight, bias, stride, padding, output_padding, groups,
                           dilation);
}

Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Shape& stride,
                        const Shape& padding, const Shape& output_padding, int64_t groups, const Shape& dilation) {
  return conv_transpose_nd(3, "conv_transpose3d", input, weight, bias, stride, padding, output_padding, groups,
                           dilation);
}

Tensor conv2d_grad_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_hw, const Shape& stride,
                         const Shape& padding, const Shape& dilation, int64_t groups) {
  return conv_grad_input(grad_output, weight, check_spatial(input_hw, 2, "input_size"),
                         make_conv_attrs(2, stride, padding, dilation, groups));
}

Tensor conv2d_grad_weight(const Tensor& grad_output, const Tensor& input, const Shape& kernel_hw, const Shape& stride,
                          const Shape& padding, const Shape& dilation, int64_t groups) {
  return conv_grad_weight(grad_output, input, check_spatial(kernel_hw, 2, "kernel_size"),
                          make_conv_attrs(2, stride, padding, dilation, groups));
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const Shape& kernel_size, const Shape& stride,
                                                  const Shape& padding, const Shape& dilation, bool ceil_mode) {
  return max_pool_nd(2, input, kernel_size, stride, padding, dilation, ceil_mode);
}

Tensor max_pool2d(const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding,
                  const Shape& dilation, bool ceil_mode) {
  return max_pool_nd(2, input, kernel_size, stride, padding, dilation, ceil_mode).first;
}

std::pair<Tensor, Tensor> max_pool3d_with_indices(const Tensor& input, const Shape& kernel_size, const Shape& stride,
                                                  const Shape& padding, const Shape& dilation, bool ceil_mode) {
  return max_pool_nd(3, input, kernel_size, stride, padding, dilation, ceil_mode);
}

Tensor avg_pool2d(const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  return avg_pool_nd(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
}

Tensor avg_pool3d(const Tensor& input, const Shape& kernel_size, const Shape& stride, const Shape& padding,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  return avg_pool_nd(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
}

Tensor adaptive_avg_pool2d(const Tensor& input, const Shape& output_size) {
  return adaptive_avg_pool_nd(2, input, output_size);
}

Tensor adaptive_avg_pool3d(const Tensor& input, const Shape& output_size) {
  return adaptive_avg_pool_nd(3, input, output_size);
}

std::pair<Tensor, Tensor> adaptive_max_pool2d(const Tensor& input, const Shape& output_size) {
  return adaptive_max_pool_nd(2, input, output_size);
}

std::pair<Tensor, Tensor> adaptive_max_pool3d(const Tensor& input, const Shape& output_size) {
  return adaptive_max_pool_nd(3, input, output_size);
}

namespace {
Attrs upsample_attrs(const Tensor& x, const Shape& output_size, const std::vector<double>& scales) {
  PF_CHECK(x.dim() == 4, "upsampling expects a 4-d input (N, C, H, W), got ", shape_str(x.sizes()));
  check_float(x, "upsample");
  PF_CHECK(output_size.size() == 2, "upsampling: output_size must be two values, got ", shape_str(output_size));
  PF_CHECK(scales.empty() || scales.size() == 2, "upsampling: expected 0 or 2 scale factors, got ", scales.size());
  // 0 means "no scale given" (PyTorch uses a scale only when it is > 0)
  return Attrs{{"output_size", output_size},
               {"scale_h", scales.empty() ? 0.0 : scales[0]},
               {"scale_w", scales.empty() ? 0.0 : scales[1]}};
}
}  // namespace

Tensor upsample_nearest2d(const Tensor& input, const Shape& output_size, const std::vector<double>& scales) {
  return run_linear_pair("upsample_nearest2d", "UpsampleNearest2DBackward0", "UpsampleNearest2DBackwardBackward0",
                         input, upsample_attrs(input, output_size, scales));
}

Tensor upsample_bilinear2d(const Tensor& input, const Shape& output_size, bool align_corners,
                           const std::vector<double>& scales) {
  Attrs attrs = upsample_attrs(input, output_size, scales);
  attrs.set("align_corners", align_corners);
  return run_linear_pair("upsample_bilinear2d", "UpsampleBilinear2DBackward0", "UpsampleBilinear2DBackwardBackward0",
                         input, attrs);
}

Tensor upsample_bicubic2d(const Tensor& input, const Shape& output_size, bool align_corners,
                          const std::vector<double>& scales) {
  Attrs attrs = upsample_attrs(input, output_size, scales);
  attrs.set("align_corners", align_corners);
  return run_linear_pair("upsample_bicubic2d", "UpsampleBicubic2DBackward0", "UpsampleBicubic2DBackwardBackward0",
                         input, attrs);
}

}  // namespace ops
}  // namespace plugflow
