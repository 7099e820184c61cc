// plugflow::LinAlgError: a linalg op's input is singular or not positive-definite, or made the
// algorithm fail to converge. Python sees torch.linalg.LinAlgError (a RuntimeError), as PyTorch
// raises it. Its own header: only the linalg ops, their kernels and the Python translation need it.
#pragma once
#include "plugflow/error.h"

namespace plugflow {

class PF_API LinAlgError : public Error {
 public:
  using Error::Error;
};

}  // namespace plugflow
