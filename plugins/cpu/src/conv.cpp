// conv2d, conv2d_grad_input and conv2d_grad_weight (docs/kernels.md, "Conv family") for
// float32/float64: im2col / col2im around OpenBLAS sgemm/dgemm.
//
// With K = C/groups * kH * kW rows per group and P = OH * OW output positions, the "column"
// matrix of an image holds, for each (channel, kernel tap) row, the input value each output
// position reads (0 in the padding). Then per image and group g:
//   forward       out_g (O/g x P) = W_g (O/g x K) @ col_g (K x P)          (+ bias)
//   grad input    col_g (K x P)   = W_g^T @ G_g (O/g x P), then col2im adds col back into the image
//   grad weight   dW_g (O/g x K) += G_g @ col_g^T
//
// Threads: images run in parallel (parallel_for), each thread with its own column buffer and
// single-threaded GEMMs (blas.h). With fewer images than threads, the images run one after
// another, each GEMM split over the threads, with serial copies.
//
// A 1x1, stride-1, unpadded convolution of a dense image needs no im2col: the image itself
// is the column matrix (and, for the input gradient, the col2im target).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "blas.h"
#include "kernels.h"
#include "loops.h"


namespace plugflow::cpu {
namespace {

// Sizes of one convolution, taken from the tensors (N, C, H, W) / (N, O, OH, OW) and attrs.
struct Geometry {
  int64_t N, C, H, W, O, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  int64_t Cg() const { return C / groups; }
  int64_t Og() const { return O / groups; }
  int64_t K() const { return Cg() * kh * kw; }
  int64_t P() const { return OH * OW; }
  // 1x1, stride 1, no padding, and image and output planes of one size (a transposed
  // convolution's output_padding adds rows/columns no output reads): the image is its own
  // column matrix.
  bool pointwise() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && H == OH && W == OW;
  }
};

Geometry geometry(const KernelContext& ctx, const Tensor& image, const Tensor& grad_or_out, int64_t kh, int64_t kw) {
  const auto& stride = ctx.attr<Shape>("stride");
  const auto& padding = ctx.attr<Shape>("padding");
  const auto& dilation = ctx.attr<Shape>("dilation");
  return {image.sizes()[0], image.sizes()[1], image.sizes()[2], image.sizes()[3], grad_or_out.sizes()[1],
          grad_or_out.sizes()[2], grad_or_out.sizes()[3], kh, kw, stride[0], stride[1], padding[0], padding[1],
          dilation[0], dilation[1], ctx.attr<int64_t>("groups")};
}

// An image tensor's strides in elements.
struct Strides {
  int64_t n, c, h, w;
  explicit Strides(const Tensor& t) : n(t.strides()[0]), c(t.strides()[1]), h(t.strides()[2]), w(t.strides()[3]) {}
};

// The output positions ow with 0 <= ow * stride + offset < size: [lo, hi).
inline void valid_range(int64_t offset, int64_t stride, int64_t size, int64_t out, int64_t& lo, int64_t& hi) {
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  hi = size - 1 - offset < 0 ? 0 : std::min(out, (size - 1 - offset) / stride + 1);
  lo = std::min(lo, hi);
}

// Writes the kh*kw column rows of one input channel plane (element strides xs_h, xs_w) starting
// at `col`, rows `ld` apart, P columns each.
template <typename T>
void im2col_plane(const T* x, int64_t xs_h, int64_t xs_w, const Geometry& g, T* col, int64_t ld) {
  for (int64_t i = 0; i < g.kh; ++i) {
    for (int64_t j = 0; j < g.kw; ++j) {
      T* row = col + (i * g.kw + j) * ld;
      const int64_t woff = j * g.dw - g.pw;
      int64_t lo, hi;
      valid_range(woff, g.sw, g.W, g.OW, lo, hi);
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        T* r = row + oh * g.OW;
        const int64_t ih = oh * g.sh - g.ph + i * g.dh;
        if (ih < 0 || ih >= g.H) {
          std::fill(r, r + g.OW, T(0));
          continue;
        }
        std::fill(r, r + lo, T(0));
        if (hi > lo) {
          const T* src = x + ih * xs_h + (lo * g.sw + woff) * xs_w;  // input of output column lo
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

// Adds the kh*kw column rows of one channel back into a dense (H, W) plane.
template <typename T>
void col2im_plane(const T* col, int64_t ld, const Geometry& g, T* x) {
  for (int64_t i = 0; i < g.kh; ++i) {
    for (int64_t j = 0; j < g.kw; ++j) {
      const T* row = col + (i * g.kw + j) * ld;
      const int64_t woff = j * g.dw - g.pw;
      int64_t lo, hi;
      valid_range(woff, g.sw, g.W, g.OW, lo, hi);
      if (lo >= hi) continue;  // this tap reads only padding
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const int64_t ih = oh * g.sh - g.ph + i * g.dh;
        if (ih < 0 || ih >= g.H) continue;
        const T* r = row + oh * g.OW + lo;
        T* dst = x + ih * g.W + lo * g.sw + woff;  // input of output column lo
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

// A matrix operand for GEMM: a pointer with its row stride, either into a tensor or into `buf`.
template <typename T>
struct MatRef {
  const T* data;
  int64_t ld;
};

// The column matrix (C*kh*kw x P) of image n of x, in `buf` or (pointwise) x itself.
template <typename T>
MatRef<T> columns(const Tensor& x, const Geometry& g, int64_t n, T* buf) {
  const Strides s(x);
  const T* image = x.data<T>() + n * s.n;
  if (g.pointwise() && s.w == 1 && s.h == g.W && s.c >= g.P()) return {image, s.c};
  const int64_t rows = g.kh * g.kw;
  for (int64_t c = 0; c < g.C; ++c) im2col_plane(image + c * s.c, s.h, s.w, g, buf + c * rows * g.P(), g.P());
  return {buf, g.P()};
}

// Image n of an (N, O, OH, OW) tensor as an (O x P) matrix, in place when its planes are dense.
template <typename T>
MatRef<T> output_matrix(const Tensor& t, const Geometry& g, int64_t n, T* buf) {
  const Strides s(t);
  const T* image = t.data<T>() + n * s.n;
  if (s.w == 1 && s.h == g.OW && s.c >= g.P()) return {image, s.c};
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) buf[(o * g.OH + oh) * g.OW + ow] = image[o * s.c + oh * s.h + ow * s.w];
  return {buf, g.P()};
}

// The weight as a dense (O x K) matrix (a packed copy when it is not contiguous).
template <typename T>
const T* dense_weight(const Tensor& w, std::unique_ptr<T[]>& buf) {
  if (w.is_contiguous()) return w.data<T>();
  buf.reset(new T[w.numel()]);
  const Shape& st = w.strides();
  const T* src = w.data<T>();
  int64_t i = 0;
  for (int64_t a = 0; a < w.sizes()[0]; ++a)
    for (int64_t b = 0; b < w.sizes()[1]; ++b)
      for (int64_t c = 0; c < w.sizes()[2]; ++c)
        for (int64_t d = 0; d < w.sizes()[3]; ++d) buf[i++] = src[a * st[0] + b * st[1] + c * st[2] + d * st[3]];
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
void conv2d_typed(const KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &w = ctx.input(1);
  Tensor& out = ctx.output(0);
  const Geometry g = geometry(ctx, x, out, w.sizes()[2], w.sizes()[3]);
  std::unique_ptr<T[]> wbuf;
  const T* wd = dense_weight<T>(w, wbuf);
  const Tensor* bias = ctx.inputs.size() > 2 ? &ctx.input(2) : nullptr;
  const int64_t P = g.P(), K = g.K(), Og = g.Og();
  T* od = out.data<T>();
  for_image_slices(g.N, [&](int64_t n0, int64_t n1, int) {
    std::unique_ptr<T[]> col(new T[g.C * g.kh * g.kw * P]);
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
void conv2d_grad_input_typed(const KernelContext& ctx) {
  const Tensor &go = ctx.input(0), &w = ctx.input(1);
  Tensor& gi = ctx.output(0);
  const Geometry g = geometry(ctx, gi, go, w.sizes()[2], w.sizes()[3]);
  std::unique_ptr<T[]> wbuf;
  const T* wd = dense_weight<T>(w, wbuf);
  const int64_t P = g.P(), K = g.K(), Og = g.Og(), rows = g.kh * g.kw;
  // A pointwise gradient image is its own column matrix: GEMM writes it directly.
  const bool direct = g.pointwise();
  T* gid = gi.data<T>();
  for_image_slices(g.N, [&](int64_t n0, int64_t n1, int) {
    std::unique_ptr<T[]> col(direct ? nullptr : new T[g.C * rows * P]);
    std::unique_ptr<T[]> gbuf(new T[g.O * P]);
    for (int64_t n = n0; n < n1; ++n) {
      const MatRef<T> gm = output_matrix<T>(go, g, n, gbuf.get());
      T* image = gid + n * g.C * g.H * g.W;
      T* cd = direct ? image : col.get();
      for (int64_t grp = 0; grp < g.groups; ++grp)
        gemm<T>(true, false, K, P, Og, wd + grp * Og * K, K, gm.data + grp * Og * gm.ld, gm.ld, T(0), cd + grp * K * P,
                P);
      if (direct) continue;
      std::fill(image, image + g.C * g.H * g.W, T(0));
      for (int64_t c = 0; c < g.C; ++c) col2im_plane(cd + c * rows * P, P, g, image + c * g.H * g.W);
    }
  });
}

// ---- weight gradient ------------------------------------------------------------------------------

template <typename T>
void conv2d_grad_weight_typed(const KernelContext& ctx) {
  const Tensor &go = ctx.input(0), &x = ctx.input(1);
  Tensor& gw = ctx.output(0);
  const Geometry g = geometry(ctx, x, go, gw.sizes()[2], gw.sizes()[3]);
  const int64_t P = g.P(), K = g.K(), Og = g.Og();
  // Each slice of images sums into its own (O x K) partial; slice 0 writes gw itself.
  const int slices = std::max(1, parallel_slices(g.N, 1));
  std::unique_ptr<T[]> partials(slices > 1 ? new T[(slices - 1) * g.O * K] : nullptr);
  std::vector<char> used(slices, 0);  // not vector<bool>: slices write their flags concurrently
  T* gwd = gw.data<T>();
  for_image_slices(g.N, [&](int64_t n0, int64_t n1, int slice) {
    T* acc = slice == 0 ? gwd : partials.get() + (slice - 1) * g.O * K;
    std::unique_ptr<T[]> col(new T[g.C * g.kh * g.kw * P]);
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
  static void run(const KernelContext& ctx) { conv2d_typed<T>(ctx); }
};
template <typename T>
struct GradInput {
  static void run(const KernelContext& ctx) { conv2d_grad_input_typed<T>(ctx); }
};
template <typename T>
struct GradWeight {
  static void run(const KernelContext& ctx) { conv2d_grad_weight_typed<T>(ctx); }
};

}  // namespace

void conv2d_im2col(KernelContext& ctx) { dispatch_float<Forward>(ctx); }
void conv2d_grad_input_im2col(KernelContext& ctx) { dispatch_float<GradInput>(ctx); }
void conv2d_grad_weight_im2col(KernelContext& ctx) { dispatch_float<GradWeight>(ctx); }

void register_conv_kernels(Registrar& reg) {
  const auto floats = {DType::Float32, DType::Float64};
  reg.kernel("conv2d", DeviceType::CPU, floats, conv2d_im2col);
  reg.kernel("conv2d_grad_input", DeviceType::CPU, floats, conv2d_grad_input_im2col);
  reg.kernel("conv2d_grad_weight", DeviceType::CPU, floats, conv2d_grad_weight_im2col);
}

}  // namespace plugflow::cpu
