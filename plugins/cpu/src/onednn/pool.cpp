#include "../kernels.h"

namespace plugflow::cpu {

void register_onednn_pool_kernels(Registrar&) {}

}  // namespace plugflow::cpu
