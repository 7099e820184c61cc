// batch_norm and batch_norm_backward have no oneDNN kernels: measured, oneDNN 2.6 is slower than
// the plugin's own kernels (norm.cpp) on every shape tried, so float32 stays on those.
//
// The functional layer hands the kernels a contiguous (N, C, L). oneDNN 2.6 runs that layout,
// described as (N, C, L, 1) nchw, with ncsp_bnorm, a plain C++ implementation (3-d ncw gets
// bnorm_ref; (N, C) gets ncsp_bnorm too); its jit kernels need the blocked nChw16c layout, i.e. a
// reorder of x (and grad) in and of the result out. Medians in ms, AVX-512, float32, weight and
// bias, the best of 3 alternating runs under load (2 threads; 1 thread for the C++ probe of
// the blocked path, against native at 1 thread in brackets):
//
//   shape (N, C, L)    native fwd train/eval, bwd  oneDNN ncsp fwd train/eval, bwd  blocked+reorders fwd, bwd
//   16, 64, 32*32      0.30 / 0.18, 0.40           1.20 / 0.68, 4.2                 1.74, 2.31  [0.54, 0.74]
//   16, 128, 16*16     0.11 / 0.06, 0.16           3.28 / 1.30, 2.8                 0.64, 0.95  [0.30, 0.44]
//   8, 64, 112*112     5.1 / 2.6, 9.2              20.1 / 12.6, 33.7                14.1, 22.3  [6.2, 10.0]
//   8, 256, 56*56      1.4 / 0.97, 1.8             20.1 / 12.4, 26.7                15.0, 26.0  [7.3, 9.5]
//   8, 2048, 7*7       0.27 / 0.14, 0.44           1.28 / 0.71, 1.54                1.13, 1.48  [0.54, 0.76]
//   64, 256, 1         0.019 / 0.008, 0.021        0.096 / 0.048, 0.098             0.024, 0.034 [0.018, 0.022]
//
// Even the jit kernel alone on data already blocked (no reorders) only matches the native
// kernels (1 thread, forward training: 0.60 vs 0.54 at 16x64x1024, 7.6 vs 6.2 at 8x64x112*112).
// Revisit with a oneDNN whose plain-layout batch normalization is vectorized.
#include "../kernels.h"

namespace plugflow::cpu {

void register_onednn_batch_norm_kernels(Registrar&) {}

}  // namespace plugflow::cpu
