#include "conv_fusion.h"

namespace plugflow::cuda::conv_fusion {

std::optional<std::string> refusal(const Request& r) {
  if (r.dtype != DType::Float32 && r.dtype != DType::Float16 && r.dtype != DType::BFloat16)
    return "cuDNN's runtime fusion has no " + std::string(dtype_name(r.dtype)) + " engines";
  if (r.activation == "gelu" || r.activation == "gelu_tanh")
    return "activation " + r.activation + ": cuDNN's GELU is not checked against PyTorch's on a GPU yet";
  if (r.activation == "none" && !r.has_bias && !r.has_addend) return std::string("nothing to fuse");
  return std::nullopt;
}

bool engine_permitted(DType dtype, bool allow_tf32, const EngineNotes& notes) {
  if (notes.reduced_precision_reduction) return false;
  if (dtype == DType::Float32 && !allow_tf32 && (notes.tensor_core || notes.down_convert_inputs)) return false;
  return true;
}

std::string engine_config_name(int64_t engine, const std::vector<std::pair<int64_t, int64_t>>& knobs) {
  std::string name = "eng" + std::to_string(engine);
  for (size_t i = 0; i < knobs.size(); ++i)
    name += (i == 0 ? ":k" : ",k") + std::to_string(knobs[i].first) + "=" + std::to_string(knobs[i].second);
  return name;
}

}  // namespace plugflow::cuda::conv_fusion
