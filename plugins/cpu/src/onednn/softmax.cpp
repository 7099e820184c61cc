#include "../kernels.h"

namespace plugflow::cpu {

void register_onednn_softmax_kernels(Registrar&) {}

}  // namespace plugflow::cpu
