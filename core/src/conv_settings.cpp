// The process-wide value behind plugflow/conv_settings.h.
#include "plugflow/conv_settings.h"

#include <mutex>

namespace plugflow {
namespace {
std::mutex settings_mutex;
ConvSettings settings;
}  // namespace

ConvSettings conv_settings() {
  std::lock_guard lock(settings_mutex);
  return settings;
}

void set_conv_settings(const ConvSettings& s) {
  std::lock_guard lock(settings_mutex);
  settings = s;
}

}  // namespace plugflow
