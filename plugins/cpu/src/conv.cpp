// conv2d, conv3d and their input and weight gradients (docs/kernels.md, "Conv family") for
// float32/float64: im2col (vol2col for 3-d) / col2im around OpenBLAS sgemm/dgemm. A 2-d
// convolution is the 3-d one with a depth of 1 (input, kernel and output), so one code path
// serves both; the depth loops cost nothing there.
//
// With K = C/groups * kD * kH * kW rows per group and P = OD * OH * OW output positions, the
// "column" matrix of an image holds, for each (channel, kernel tap) row, the input value each
// output position reads (0 in the padding). Then per image and group g:
//   forward       out_g (O/g x P) = W_g (O/g x K) @ col_g (K x P)          (+ bias)
//   grad input    col_g (K x P)   = W_g^T @ G_g (O/g x P), then col2im adds col back into the image
//   grad weight   dW_g (O/g x K) += G_g @ col_g^T
//
// Threads: images run in parallel (parallel_for), each thread with its own column buffer and
// single-threaded GEMMs (blas.h). With fewer images than threads, the images run one after
// another, each GEMM split over the threads, with serial copies.
//
// A 1x1(x1), stride-1, unpadded convolution of a dense image needs no im2col: the image itself
// is the column matrix (and, for the input gradient, the col2im target).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "blas.h"
#include "kernels.h"
#include "row_major_outputs.h"
#include "loops.h"


namespace plugflow::cpu {
namespace {

// Sizes of one convolution, taken from the tensors (N, C, [D,] H, W) / (N, O, [OD,] OH, OW) and
// attrs; a 2-d convolution has D = OD = kd = sd = dd = 1 and pd = 0.
struct Geometry {
  int64_t N, C, D, H, W, O, OD, OH, OW, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, groups;
  int64_t Cg() const { return C / groups; }
  int64_t Og() const { return O / groups; }
  int64_t taps() const { return kd * kh * kw; }
  int64_t K() const { return Cg() * taps(); }
  int64_t P() const { return OD * OH * OW; }
  int64_t volume() const { return D * H * W; }
  // 1x1(x1), stride 1, no padding, and image and output of one size (a transposed
  // convolution's output_padding adds positions no output reads): the image is its own column
  // matrix.
  bool pointwise() const {
    return taps() == 1 && sd == 1 && sh == 1 && sw == 1 && pd == 0 && ph == 0 && pw == 0 && D == OD && H == OH &&
           W == OW;
  }
};

// An (N, C, [D,] H, W) tensor's sizes and element strides, depth 1 for a 4-d one.
struct Dims5 {
  int64_t size[5], stride[5];
  explicit Dims5(const Tensor& t) {
    const bool three = t.dim() == 5;
    for (int i = 0, j = 0; i < 5; ++i) {
      if (i == 2 && !three) {
        size[i] = 1;
        stride[i] = 0;  // never used to address (index 0 only)
        continue;
      }
      size[i] = t.sizes()[j];
      stride[i] = t.strides()[j];
      ++j;
    }
  }
};

Geometry geometry(const KernelContext& ctx, const Tensor& image, const Tensor& grad_or_out, const Tensor& weight_like) {
  const auto& stride = ctx.attr<Shape>("stride");
  const auto& padding = ctx.attr<Shape>("padding");
  const auto& dilation = ctx.attr<Shape>("dilation");
  const bool three = stride.size() == 3;
  // attr i of the 3-d layout (depth, height, width); a 2-d attr has no depth
  const auto at = [&](const Shape& v, int i, int64_t depth_default) { return three ? v[i] : i == 0 ? depth_default : v[i - 1]; };
  const Dims5 x(image), y(grad_or_out), k(weight_like);
  return {x.size[0], x.size[1], x.size[2], x.size[3], x.size[4], y.size[1], y.size[2], y.size[3], y.size[4],
          k.size[2], k.size[3], k.size[4], at(stride, 0, 1), at(stride, 1, 1), at(stride, 2, 1),
          at(padding, 0, 0), at(padding, 1, 0), at(padding, 2, 0), at(dilation, 0, 1), at(dilation, 1, 1),
          at(dilation, 2, 1), ctx.attr<int64_t>("groups")};
}

// The output positions ow with 0 <= ow * stride + offset < size: [lo, hi).
inline void valid_range(int64_t offset, int64_t stride, int64_t size, int64_t out, int64_t& lo, int64_t& hi) {
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  hi = size - 1 - offset < 0 ? 0 : std::min(out, (size - 1 - offset) / stride + 1);
  lo = std::min(lo, hi);
}

// Writes the kd*kh*kw column rows of one input channel volume (element strides xs_d, xs_h,
// xs_w) starting at `col`, rows `ld` apart, P columns each.
template <typename T>
void im2col_volume(const T* x, int64_t xs_d, int64_t xs_h, int64_t xs_w, const Geometry& g, T* col, int64_t ld) {
  const int64_t plane = g.OH * g.OW;
  for (int64_t t = 0; t < g.kd; ++t) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((t * g.kh + i) * g.kw + j) * ld;
        const int64_t woff = j * g.dw - g.pw;
        int64_t lo, hi;
        valid_range(woff, g.sw, g.W, g.OW, lo, hi);
        for (int64_t od = 0; od < g.OD; ++od) {
          T* rows = row + od * plane;
          const int64_t id = od * g.sd - g.pd + t * g.dd;
          if (id < 0 || id >= g.D) {
            std::fill(rows, rows + plane, T(0));
            continue;
          }
          const T* xd = x + id * xs_d;
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            T* r = rows + oh * g.OW;
            const int64_t ih = oh * g.sh - g.ph + i * g.dh;
            if (ih < 0 || ih >= g.H) {
              std::fill(r, r + g.OW, T(0));
              continue;
            }
            std::fill(r, r + lo, T(0));
            if (hi > lo) {
              const T* src = xd + ih * xs_h + (lo * g.sw + woff) * xs_w;  // input of output column lo
              const int64_t step = g.sw * xs_w;
              if (step == 1) std::memcpy(r + lo, src, (hi - lo) * sizeof(T));
              else
                for (int64_t k = 0; k < hi - lo; ++k) r[lo + k] = src[k * step];
            }
            std::fill(r + hi, r + g.OW, T(0));
          }
        }
      }
    }
  }
}

// Adds the kd*kh*kw column rows of one channel back into a dense (D, H, W) volume.
template <typename T>
void col2im_volume(const T* col, int64_t ld, const Geometry& g, T* x) {
  for (int64_t t = 0; t < g.kd; ++t) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((t * g.kh + i) * g.kw + j) * ld;
        const int64_t woff = j * g.dw - g.pw;
        int64_t lo, hi;
        valid_range(woff, g.sw, g.W, g.OW, lo, hi);
        if (lo >= hi) continue;  // this tap reads only padding
        for (int64_t od = 0; od < g.OD; ++od) {
          const int64_t id = od * g.sd - g.pd + t * g.dd;
          if (id < 0 || id >= g.D) continue;
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            const int64_t ih = oh * g.sh - g.ph + i * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            const T* r = row + (od * g.OH + oh) * g.OW + lo;
            T* dst = x + (id * g.H + ih) * g.W + lo * g.sw + woff;  // input of output column lo
            const int64_t n = hi - lo;
            if (g.sw == 1) {
#pragma omp simd
              for (int64_t k = 0; k < n; ++k) dst[k] += r[k];
            } else {
              for (int64_t k = 0; k < n; ++k) dst[k * g.sw] += r[k];
            }
          }
        }
      }
    }
  }
}

// A matrix operand for GEMM: a pointer with its row stride, either into a tensor or into `buf`.
template <typename T>
struct MatRef {
  const T* data;
  int64_t ld;
};

// Whether the spatial dims of an (N, C, [D,] H, W) tensor are dense (row-major) with `h`, `w`
// their sizes: a channel is then one run of D * H * W elements.
inline bool dense_volume(const Dims5& s) {
  return s.stride[4] == 1 && s.stride[3] == s.size[4] && (s.size[2] == 1 || s.stride[2] == s.size[3] * s.size[4]);
}

// The column matrix (C*kd*kh*kw x P) of image n of x, in `buf` or (pointwise) x itself.
template <typename T>
MatRef<T> columns(const Tensor& x, const Geometry& g, int64_t n, T* buf) {
  const Dims5 s(x);
  const T* image = x.data<T>() + n * s.stride[0];
  if (g.pointwise() && dense_volume(s) && s.stride[1] >= g.P()) return {image, s.stride[1]};
  const int64_t rows = g.taps();
  for (int64_t c = 0; c < g.C; ++c)
    im2col_volume(image + c * s.stride[1], s.stride[2], s.stride[3], s.stride[4], g, buf + c * rows * g.P(), g.P());
  return {buf, g.P()};
}

// Image n of an (N, O, [OD,] OH, OW) tensor as an (O x P) matrix, in place when its volumes
// are dense.
template <typename T>
MatRef<T> output_matrix(const Tensor& t, const Geometry& g, int64_t n, T* buf) {
  const Dims5 s(t);
  const T* image = t.data<T>() + n * s.stride[0];
  if (dense_volume(s) && s.stride[1] >= g.P()) return {image, s.stride[1]};
  T* out = buf;
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t od = 0; od < g.OD; ++od)
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow)
          *out++ = image[o * s.stride[1] + od * s.stride[2] + oh * s.stride[3] + ow * s.stride[4]];
  return {buf, g.P()};
}

// The weight as a dense (O x K) matrix (a packed copy when it is not contiguous).
template <typename T>
const T* dense_weight(const Tensor& w, std::unique_ptr<T[]>& buf) {
  if (w.is_contiguous()) return w.data<T>();
  buf.reset(new T[w.numel()]);
  const Dims5 s(w);
  const T* src = w.data<T>();
  T* out = buf.get();
  for (int64_t a = 0; a < s.size[0]; ++a)
    for (int64_t b = 0; b < s.size[1]; ++b)
      for (int64_t t = 0; t < s.size[2]; ++t)
        for (int64_t c = 0; c < s.size[3]; ++c)
          for (int64_t d = 0; d < s.size[4]; ++d)
            *out++ = src[a * s.stride[0] + b * s.stride[1] + t * s.stride[2] + c * s.stride[3] + d * s.stride[4]];
  return buf.get();
}

// Calls f(begin, end, slice) for slices of the N images: in parallel with single-threaded
// BLAS when there are at least as many images as threads, else as one slice on this thread
// (each GEMM then splits over the threads). `slice` numbers the slices (for per-slice buffers).
template <typename F>
void for_image_slices(int64_t N, const F& f) {
  const int slices = parallel_slices(N, 1);
  if (slices <= 1 || N < num_threads()) {
    f(int64_t{0}, N, 0);
    return;
  }
  std::atomic<int> next_slice{0};
  parallel_for(N, 1, [&](int64_t b, int64_t e) { f(b, e, next_slice++); });
}

void check_inputs(const KernelContext& ctx) {
  for (const Tensor& t : ctx.inputs)
    PF_CHECK_T(t.dtype() == ctx.input(0).dtype(), ValueError, "cpu '", ctx.op.name, "' expects one dtype, got ",
               dtype_name(t.dtype()), " and ", dtype_name(ctx.input(0).dtype()));
  PF_CHECK_T(ctx.output(0).is_contiguous(), ValueError, "cpu '", ctx.op.name, "' writes a contiguous output");
}

// ---- forward ---------------------------------------------------------------------------------

template <typename T>
void conv_typed(const KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &w = ctx.input(1);
  Tensor& out = ctx.output(0);
  const Geometry g = geometry(ctx, x, out, w);
  std::unique_ptr<T[]> wbuf;
  const T* wd = dense_weight<T>(w, wbuf);
  const Tensor* bias = ctx.inputs.size() > 2 ? &ctx.input(2) : nullptr;
  const int64_t P = g.P(), K = g.K(), Og = g.Og();
  T* od = out.data<T>();
  for_image_slices(g.N, [&](int64_t n0, int64_t n1, int) {
    std::unique_ptr<T[]> col(new T[g.C * g.taps() * P]);
    for (int64_t n = n0; n < n1; ++n) {
      const MatRef<T> cm = columns<T>(x, g, n, col.get());
      T* o = od + n * g.O * P;
      for (int64_t grp = 0; grp < g.groups; ++grp)
        gemm<T>(false, false, Og, P, K, wd + grp * Og * K, K, cm.data + grp * K * cm.ld, cm.ld, T(0), o + grp * Og * P,
                P);
      if (!bias) continue;
      for (int64_t oc = 0; oc < g.O; ++oc) {
        const T b = bias->data<T>()[oc * bias->strides()[0]];
        T* row = o + oc * P;
#pragma omp simd
        for (int64_t p = 0; p < P; ++p) row[p] += b;
      }
    }
  });
}

// ---- input gradient ----------------------------------------------------------------------------

template <typename T>
void conv_grad_input_typed(const KernelContext& ctx) {
  const Tensor &go = ctx.input(0), &w = ctx.input(1);
  Tensor& gi = ctx.output(0);
  const Geometry g = geometry(ctx, gi, go, w);
  std::unique_ptr<T[]> wbuf;
  const T* wd = dense_weight<T>(w, wbuf);
  const int64_t P = g.P(), K = g.K(), Og = g.Og(), rows = g.taps(), V = g.volume();
  // A pointwise gradient image is its own column matrix: GEMM writes it directly.
  const bool direct = g.pointwise();
  T* gid = gi.data<T>();
  for_image_slices(g.N, [&](int64_t n0, int64_t n1, int) {
    std::unique_ptr<T[]> col(direct ? nullptr : new T[g.C * rows * P]);
    std::unique_ptr<T[]> gbuf(new T[g.O * P]);
    for (int64_t n = n0; n < n1; ++n) {
      const MatRef<T> gm = output_matrix<T>(go, g, n, gbuf.get());
      T* image = gid + n * g.C * V;
      T* cd = direct ? image : col.get();
      for (int64_t grp = 0; grp < g.groups; ++grp)
        gemm<T>(true, false, K, P, Og, wd + grp * Og * K, K, gm.data + grp * Og * gm.ld, gm.ld, T(0), cd + grp * K * P,
                P);
      if (direct) continue;
      std::fill(image, image + g.C * V, T(0));
      for (int64_t c = 0; c < g.C; ++c) col2im_volume(cd + c * rows * P, P, g, image + c * V);
    }
  });
}

// ---- weight gradient ------------------------------------------------------------------------------

template <typename T>
void conv_grad_weight_typed(const KernelContext& ctx) {
  const Tensor &go = ctx.input(0), &x = ctx.input(1);
  Tensor& gw = ctx.output(0);
  const Geometry g = geometry(ctx, x, go, gw);
  const int64_t P = g.P(), K = g.K(), Og = g.Og();
  // Each slice of images sums into its own (O x K) partial; slice 0 writes gw itself.
  const int slices = std::max(1, parallel_slices(g.N, 1));
  std::unique_ptr<T[]> partials(slices > 1 ? new T[(slices - 1) * g.O * K] : nullptr);
  std::vector<char> used(slices, 0);  // not vector<bool>: slices write their flags concurrently
  T* gwd = gw.data<T>();
  for_image_slices(g.N, [&](int64_t n0, int64_t n1, int slice) {
    T* acc = slice == 0 ? gwd : partials.get() + (slice - 1) * g.O * K;
    std::unique_ptr<T[]> col(new T[g.C * g.taps() * P]);
    std::unique_ptr<T[]> gbuf(new T[g.O * P]);
    for (int64_t n = n0; n < n1; ++n) {
      const MatRef<T> cm = columns<T>(x, g, n, col.get());
      const MatRef<T> gm = output_matrix<T>(go, g, n, gbuf.get());
      const T beta = n == n0 ? T(0) : T(1);  // the slice's first image initializes its sum
      for (int64_t grp = 0; grp < g.groups; ++grp)
        gemm<T>(false, true, Og, K, P, gm.data + grp * Og * gm.ld, gm.ld, cm.data + grp * K * cm.ld, cm.ld, beta,
                acc + grp * Og * K, K);
    }
    used[slice] = 1;
  });
  if (!used[0]) std::fill(gwd, gwd + g.O * K, T(0));
  for (int s = 1; s < slices; ++s) {
    if (!used[s]) continue;
    const T* part = partials.get() + (s - 1) * g.O * K;
    for (int64_t i = 0; i < g.O * K; ++i) gwd[i] += part[i];
  }
}

template <template <typename> class Fn>
void dispatch_float(KernelContext& ctx) {
  check_inputs(ctx);
  switch (ctx.input(0).dtype()) {
    case DType::Float32: Fn<float>::run(ctx); break;
    case DType::Float64: Fn<double>::run(ctx); break;
    default: PF_THROW(NotImplementedError, "cpu '", ctx.op.name, "' supports float32 and float64, got ",
                      dtype_name(ctx.input(0).dtype()));
  }
}

template <typename T>
struct Forward {
  static void run(const KernelContext& ctx) { conv_typed<T>(ctx); }
};
template <typename T>
struct GradInput {
  static void run(const KernelContext& ctx) { conv_grad_input_typed<T>(ctx); }
};
template <typename T>
struct GradWeight {
  static void run(const KernelContext& ctx) { conv_grad_weight_typed<T>(ctx); }
};

}  // namespace

void conv_im2col(KernelContext& ctx) { dispatch_float<Forward>(ctx); }
void conv_grad_input_im2col(KernelContext& ctx) { dispatch_float<GradInput>(ctx); }
void conv_grad_weight_im2col(KernelContext& ctx) { dispatch_float<GradWeight>(ctx); }

namespace {
// bfloat16 (autocast's conv3d; conv2d has oneDNN's bf16 kernels above these) through float32
// copies: one rounding of the result, float32 accumulation.
template <KernelFn fn>
void widened(KernelContext& ctx) {
  run_widened(ctx, fn);
}
}  // namespace

void register_conv_kernels(Registrar& reg) {
  const auto floats = {DType::Float32, DType::Float64};
  for (const char* rank : {"2d", "3d"}) {
    const std::string conv = std::string("conv") + rank;
    reg.kernel(conv, DeviceType::CPU, floats, with_row_major_outputs<conv_im2col>);
    reg.kernel(conv + "_grad_input", DeviceType::CPU, floats, with_row_major_outputs<conv_grad_input_im2col>);
    reg.kernel(conv + "_grad_weight", DeviceType::CPU, floats, conv_grad_weight_im2col);
    reg.kernel(conv, DeviceType::CPU, {DType::BFloat16}, widened<conv_im2col>);
    reg.kernel(conv + "_grad_input", DeviceType::CPU, {DType::BFloat16}, widened<conv_grad_input_im2col>);
    reg.kernel(conv + "_grad_weight", DeviceType::CPU, {DType::BFloat16}, widened<conv_grad_weight_im2col>);
  }
}

}  // namespace plugflow::cpu
