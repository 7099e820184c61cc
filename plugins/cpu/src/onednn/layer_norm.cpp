#include "../kernels.h"

namespace plugflow::cpu {

void register_onednn_layer_norm_kernels(Registrar&) {}

}  // namespace plugflow::cpu
