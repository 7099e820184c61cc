// Argument checks and buffer staging shared by the collectives plugins, so that Gloo and
// NCCL reject the same bad calls with the same messages.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "plugflow/communicator.h"
#include "plugflow/error.h"
#include "plugflow/ops.h"
#include "plugflow/tensor.h"

namespace plugflow::collectives {

// CPU is one device whatever its index says.
inline bool same_device(Device a, Device b) { return a.type == b.type && (a.is_cpu() || a.index == b.index); }

inline void check_defined(const Tensor& t, const char* op, const char* arg) {
  PF_CHECK_T(t.defined(), ValueError, op, ": ", arg, " is an undefined tensor");
}

inline void check_rank_arg(int r, int world_size, const char* op, const char* arg) {
  PF_CHECK_T(r >= 0 && r < world_size, ValueError, op, ": ", arg, " ", r, " is not a rank of this group (valid: 0 to ",
             world_size - 1, ")");
}

inline void check_all_gather_args(const std::vector<Tensor>& out, const Tensor& in, int world_size) {
  check_defined(in, "all_gather", "input");
  PF_CHECK_T(static_cast<int>(out.size()) == world_size, ValueError, "all_gather: the output list has ", out.size(),
             " tensors; it needs one per rank (", world_size, ")");
  for (size_t i = 0; i < out.size(); ++i) {
    check_defined(out[i], "all_gather", "an output");
    PF_CHECK_T(out[i].dtype() == in.dtype(), TypeError, "all_gather: output ", i, " has dtype ",
               dtype_name(out[i].dtype()), " but the input has ", dtype_name(in.dtype()));
    PF_CHECK_T(out[i].sizes() == in.sizes(), ValueError, "all_gather: output ", i, " has shape ",
               shape_str(out[i].sizes()), " but the input has ", shape_str(in.sizes()));
  }
}

inline void check_reduce_scatter_args(const Tensor& out, const Tensor& in, int world_size) {
  check_defined(out, "reduce_scatter", "output");
  check_defined(in, "reduce_scatter", "input");
  PF_CHECK_T(out.dtype() == in.dtype(), TypeError, "reduce_scatter: output has dtype ", dtype_name(out.dtype()),
             " but the input has ", dtype_name(in.dtype()));
  PF_CHECK_T(in.dim() >= 1 && in.size(0) % world_size == 0, ValueError, "reduce_scatter: the input (shape ",
             shape_str(in.sizes()), ") is split on dim 0 into one chunk per rank, so its first dimension must be a "
             "multiple of the world size (", world_size, ")");
  PF_CHECK_T(out.numel() * world_size == in.numel(), ValueError, "reduce_scatter: the output has ", out.numel(),
             " elements but each rank's chunk of the input (shape ", shape_str(in.sizes()), ") has ",
             in.numel() / world_size);
}

inline void check_avg_dtype(const Tensor& t, ReduceOp op, const char* opname) {
  PF_CHECK_T(!(op == ReduceOp::Avg && t.dtype() == DType::Bool), TypeError, opname,
             ": ReduceOp.AVG is not defined for bool tensors");
}

// A contiguous buffer on `device` with a tensor's elements: the tensor itself when it already
// is one, else a copy (strided or on another device), which write_back() copies back.
// Collectives work on flat buffers; this keeps strided views and device hops out of them.
class Staged {
 public:
  enum class Fill { Copy, Uninitialized };

  Staged(const Tensor& t, Device device, Fill fill) : original_(t) {
    if (same_device(t.device(), device) && t.is_contiguous()) {
      buffer_ = t;
      return;
    }
    staged_ = true;
    buffer_ = fill == Fill::Copy ? ops::contiguous(ops::to(t, device, std::nullopt))
                                 : ops::empty(t.sizes(), t.dtype(), device);
  }

  void* data() const { return buffer_.data_ptr(); }
  template <typename T>
  T* data() const { return buffer_.data<T>(); }
  size_t nbytes() const { return static_cast<size_t>(buffer_.numel()) * buffer_.itemsize(); }
  const Tensor& tensor() const { return buffer_; }

  // Makes the results visible in the original tensor.
  void write_back() {
    if (staged_) {
      ops::copy_(original_, buffer_);
    } else {
      original_.storage()->bump_version();  // written in place behind autograd's back
    }
  }

 private:
  Tensor original_;
  Tensor buffer_;
  bool staged_ = false;
};

}  // namespace plugflow::collectives
