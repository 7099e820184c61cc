// conv2d, conv2d_grad_input and conv2d_grad_weight (docs/kernels.md, "Conv family") for
// float32/float64: im2col / col2im around OpenBLAS sgemm/dgemm.
//
// With K = C/groups * kH * kW rows per group and P = OH * OW output positions per image, the
// "column" matrix of an image holds, for each (channel, kernel tap) row, the input value each
// output position reads (0 in the padding). Then per group g:
//   forward       out_g (O/g x P)  = W_g (O/g x K) @ col_g (K x P)          (+ bias)
//   grad input    col_g (K x P)    = W_g^T @ G_g (O/g x P), then col2im adds col back into the image
//   grad weight   dW_g (O/g x K)  += G_g @ col_g^T
// Images are processed in chunks side by side (columns n*P ... n*P + P - 1 belong to image n),
// so one large GEMM covers several images. That is how this kernel is "parallel over the
// batch": the Debian OpenBLAS is the pthreads build, which does not notice being called
// inside an OpenMP region, so a GEMM per image on each OpenMP thread would oversubscribe the
// cores; one GEMM over a chunk uses OpenBLAS's own threads fully, while im2col, col2im and the
// layout copies run under parallel_for over (image, channel) pairs.
//
// A 1x1, stride-1, unpadded convolution of a dense image needs no im2col: the image itself
// is the column matrix (and, for the input gradient, the col2im target).
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "kernels.h"
#include "loops.h"

namespace plugflow::cpu {
namespace {

// Elements of column buffer per chunk: large enough for long GEMMs, small enough to stay
// in the last-level cache's neighbourhood (16 MiB of float32).
constexpr int64_t kColumnBudget = int64_t{1} << 22;

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T beta, const T* a, int64_t lda, const T* b,
          int64_t ldb, T* c, int64_t ldc) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();  // cblas takes int sizes
  PF_CHECK(M <= kMax && N <= kMax && K <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
           "conv2d: a GEMM dimension beyond 2^31-1 is not supported by BLAS");
  const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, a, lda, b, ldb, beta, c, ldc);
}

// Sizes of one convolution, taken from the tensors (N, C, H, W) / (N, O, OH, OW) and attrs.
struct Geometry {
  int64_t N, C, H, W, O, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  int64_t Cg() const { return C / groups; }
  int64_t Og() const { return O / groups; }
  int64_t K() const { return Cg() * kh * kw; }
  int64_t P() const { return OH * OW; }
  // The column matrix is the image itself (the sizes can differ for a transposed convolution
  // with output_padding, whose extra rows/columns no output reads).
  bool pointwise() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && H == OH && W == OW;
  }
  // Images per chunk: the column buffer (C*kh*kw x chunk*P) within the budget, at least one.
  int64_t chunk() const {
    return std::max<int64_t>(1, std::min(N, kColumnBudget / std::max<int64_t>(1, C * kh * kw * P())));
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

// Writes the kh*kw column rows of one input channel plane (strides sh, sw) starting at `col`,
// rows `ld` apart, P columns each.
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
        const T* xr = x + ih * xs_h + woff * xs_w;
        const int64_t step = g.sw * xs_w;
        if (step == 1) std::memcpy(r + lo, xr + lo, (hi - lo) * sizeof(T));
        else
          for (int64_t ow = lo; ow < hi; ++ow) r[ow] = xr[ow * step];
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
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const int64_t ih = oh * g.sh - g.ph + i * g.dh;
        if (ih < 0 || ih >= g.H) continue;
        const T* r = row + oh * g.OW;
        T* xr = x + ih * g.W + woff;
        if (g.sw == 1) {
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) xr[ow] += r[ow];
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) xr[ow * g.sw] += r[ow];
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

// The column matrix (C*kh*kw x nb*P) of images [n0, n0 + nb) of x.
template <typename T>
MatRef<T> columns(const Tensor& x, const Geometry& g, int64_t n0, int64_t nb, T* buf) {
  const Strides s(x);
  const T* base = x.data<T>();
  if (g.pointwise() && nb == 1 && s.w == 1 && s.h == g.W && s.c >= g.P())
    return {base + n0 * s.n, s.c};  // the image is its own column matrix
  const int64_t ld = nb * g.P(), rows = g.kh * g.kw;
  parallel_for(nb * g.C, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, rows * g.P())),
               [&](int64_t b, int64_t e) {
                 for (int64_t k = b; k < e; ++k) {
                   const int64_t nn = k / g.C, c = k % g.C;
                   im2col_plane(base + (n0 + nn) * s.n + c * s.c, s.h, s.w, g, buf + c * rows * ld + nn * g.P(), ld);
                 }
               });
  return {buf, ld};
}

// The (O x nb*P) matrix of images [n0, n0 + nb) of an (N, O, OH, OW) tensor.
template <typename T>
MatRef<T> output_matrix(const Tensor& t, const Geometry& g, int64_t n0, int64_t nb, T* buf) {
  const Strides s(t);
  const T* base = t.data<T>();
  if (nb == 1 && s.w == 1 && s.h == g.OW && s.c >= g.P()) return {base + n0 * s.n, s.c};
  const int64_t ld = nb * g.P();
  parallel_for(nb * g.O, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, g.P())), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t nn = k / g.O, o = k % g.O;
      const T* src = base + (n0 + nn) * s.n + o * s.c;
      T* dst = buf + o * ld + nn * g.P();
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) dst[oh * g.OW + ow] = src[oh * s.h + ow * s.w];
    }
  });
  return {buf, ld};
}

// The weight as a dense (O x K) matrix (a packed copy when it is not contiguous).
template <typename T>
const T* dense_weight(const Tensor& w, std::unique_ptr<T[]>& buf) {
  if (w.is_contiguous()) return w.data<T>();
  const int64_t n = w.numel();
  buf.reset(new T[n]);
  const Shape& st = w.strides();
  const T* src = w.data<T>();
  int64_t i = 0;
  for (int64_t a = 0; a < w.sizes()[0]; ++a)
    for (int64_t b = 0; b < w.sizes()[1]; ++b)
      for (int64_t c = 0; c < w.sizes()[2]; ++c)
        for (int64_t d = 0; d < w.sizes()[3]; ++d) buf[i++] = src[a * st[0] + b * st[1] + c * st[2] + d * st[3]];
  return buf.get();
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
  const T* bias = nullptr;
  std::unique_ptr<T[]> bbuf;
  if (ctx.inputs.size() > 2) {
    const Tensor& b = ctx.input(2);
    bbuf.reset(new T[g.O]);
    for (int64_t o = 0; o < g.O; ++o) bbuf[o] = b.data<T>()[o * b.strides()[0]];
    bias = bbuf.get();
  }
  const int64_t P = g.P(), K = g.K(), Og = g.Og(), chunk = g.chunk();
  std::unique_ptr<T[]> col(new T[g.C * g.kh * g.kw * chunk * P]);
  std::unique_ptr<T[]> tmp(chunk > 1 ? new T[g.O * chunk * P] : nullptr);
  T* od = out.data<T>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    const MatRef<T> cm = columns<T>(x, g, n0, nb, col.get());
    // One image writes straight into out (rows P apart); several go through tmp.
    T* dst = nb == 1 ? od + n0 * g.O * P : tmp.get();
    const int64_t ldd = nb * P;
    for (int64_t grp = 0; grp < g.groups; ++grp)
      gemm<T>(false, false, Og, nb * P, K, T(0), wd + grp * Og * K, K, cm.data + grp * K * cm.ld, cm.ld,
              dst + grp * Og * ldd, ldd);
    if (nb == 1 && !bias) continue;
    parallel_for(nb * g.O, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, P)), [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int64_t nn = k / g.O, o = k % g.O;
        const T* src = dst + o * ldd + nn * P;
        T* o_row = od + ((n0 + nn) * g.O + o) * P;
        const T add = bias ? bias[o] : T(0);
#pragma omp simd
        for (int64_t p = 0; p < P; ++p) o_row[p] = src[p] + add;
      }
    });
  }
}

// ---- input gradient ----------------------------------------------------------------------------

template <typename T>
void conv2d_grad_input_typed(const KernelContext& ctx) {
  const Tensor &go = ctx.input(0), &w = ctx.input(1);
  Tensor& gi = ctx.output(0);
  const Geometry g = geometry(ctx, gi, go, w.sizes()[2], w.sizes()[3]);
  std::unique_ptr<T[]> wbuf;
  const T* wd = dense_weight<T>(w, wbuf);
  const int64_t P = g.P(), K = g.K(), Og = g.Og(), chunk = g.chunk();
  // A dense pointwise gradient image is its own column matrix: GEMM writes it directly.
  const bool direct = g.pointwise();
  const int64_t step = direct ? 1 : chunk;
  std::unique_ptr<T[]> col(direct ? nullptr : new T[g.C * g.kh * g.kw * chunk * P]);
  std::unique_ptr<T[]> gbuf(new T[g.O * step * P]);
  T* gid = gi.data<T>();
  for (int64_t n0 = 0; n0 < g.N; n0 += step) {
    const int64_t nb = std::min(step, g.N - n0);
    const MatRef<T> gm = output_matrix<T>(go, g, n0, nb, gbuf.get());
    T* cd = direct ? gid + n0 * g.C * P : col.get();
    const int64_t ldc = nb * P;
    for (int64_t grp = 0; grp < g.groups; ++grp)
      gemm<T>(true, false, K, nb * P, Og, T(0), wd + grp * Og * K, K, gm.data + grp * Og * gm.ld, gm.ld,
              cd + grp * K * ldc, ldc);
    if (direct) continue;
    const int64_t rows = g.kh * g.kw;
    parallel_for(nb * g.C, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, rows * P)), [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int64_t nn = k / g.C, c = k % g.C;
        T* plane = gid + ((n0 + nn) * g.C + c) * g.H * g.W;
        std::fill(plane, plane + g.H * g.W, T(0));
        col2im_plane(cd + c * rows * ldc + nn * P, ldc, g, plane);
      }
    });
  }
}

// ---- weight gradient ------------------------------------------------------------------------------

template <typename T>
void conv2d_grad_weight_typed(const KernelContext& ctx) {
  const Tensor &go = ctx.input(0), &x = ctx.input(1);
  Tensor& gw = ctx.output(0);
  const Geometry g = geometry(ctx, x, go, gw.sizes()[2], gw.sizes()[3]);
  const int64_t P = g.P(), K = g.K(), Og = g.Og(), chunk = g.chunk();
  std::unique_ptr<T[]> col(new T[g.C * g.kh * g.kw * chunk * P]);
  std::unique_ptr<T[]> gbuf(new T[g.O * chunk * P]);
  T* gwd = gw.data<T>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    const MatRef<T> cm = columns<T>(x, g, n0, nb, col.get());
    const MatRef<T> gm = output_matrix<T>(go, g, n0, nb, gbuf.get());
    const T beta = n0 == 0 ? T(0) : T(1);  // the first chunk initializes the sum
    for (int64_t grp = 0; grp < g.groups; ++grp)
      gemm<T>(false, true, Og, K, nb * P, beta, gm.data + grp * Og * gm.ld, gm.ld, cm.data + grp * K * cm.ld, cm.ld,
              gwd + grp * Og * K, K);
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

void register_conv_kernels(Registrar& reg) {
  const auto floats = {DType::Float32, DType::Float64};
  reg.kernel("conv2d", DeviceType::CPU, floats, dispatch_float<Forward>);
  reg.kernel("conv2d_grad_input", DeviceType::CPU, floats, dispatch_float<GradInput>);
  reg.kernel("conv2d_grad_weight", DeviceType::CPU, floats, dispatch_float<GradWeight>);
}

}  // namespace plugflow::cpu
