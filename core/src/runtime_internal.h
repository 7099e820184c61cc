// Core-internal helpers shared by config.cpp, loader.cpp and runtime.cpp.
#pragma once
#include <string>

namespace plugflow::internal {

// "~" and "~/x" -> $HOME/x, "~user/x" -> that user's home; anything else unchanged.
std::string expand_user(const std::string& path);

}  // namespace plugflow::internal
