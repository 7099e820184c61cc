// Run-time switches of the library-backed convolution kernels, mirroring PyTorch's
// torch.backends flags: set from Python (plugflow.backends.cudnn), read by the plugins on each
// call. The core only stores them; each plugin applies what its library offers.
#pragma once
#include <cstddef>

#include "plugflow/export.h"

namespace plugflow {

struct ConvSettings {
  // torch.backends.cudnn.allow_tf32: float32 convolutions may round their inputs to TF32 (a
  // 10-bit mantissa) on hardware with TF32 tensor math. PyTorch's default is true.
  bool allow_tf32 = true;
  // The most scratch memory (bytes) one convolution's algorithm may take; algorithms that want
  // more are not considered (neither by the heuristic nor by the exhaustive search).
  size_t workspace_limit_bytes = size_t{4} << 30;
};

PF_API ConvSettings conv_settings();
PF_API void set_conv_settings(const ConvSettings& settings);

}  // namespace plugflow
