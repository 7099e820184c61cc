// Where the CUDA suites find the plugins they load.
#pragma once
#include <cstdlib>
#include <string>

namespace cuda_test {

// A plugin's path: the build tree's (compiled in), or the file of that name in
// $PF_CUDA_TEST_PLUGIN_DIR when the binaries run away from their build tree (tests/gpu/run.sh
// runs them from the GPU bundle on the lent machine).
inline std::string plugin_path(const std::string& built) {
  const char* dir = std::getenv("PF_CUDA_TEST_PLUGIN_DIR");
  if (dir == nullptr || *dir == '\0') return built;
  return std::string(dir) + "/" + built.substr(built.rfind('/') + 1);
}

}  // namespace cuda_test
