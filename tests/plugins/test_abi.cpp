// Hand-written entries with a wrong ABI version, a truncated struct or a build fingerprint that
// differs from the core's; the loader must refuse each before calling register_plugin.
// TEST_ABI_MAJOR / TEST_ABI_MINOR / TEST_STRUCT_SIZE and, optionally, TEST_FINGERPRINT_EDIT (a
// statement on `f`) come from tests/plugins/meson.build.
#include <plugflow/plugin.h>

namespace {

int register_must_not_run(void*, char* err, size_t err_len) noexcept {
  // Reaching this means the loader accepted an entry it should have refused.
  std::strncpy(err, "register_plugin of a plugin with a refused ABI was called", err_len - 1);
  err[err_len - 1] = '\0';
  return 1;
}

PlugflowBuildFingerprint fingerprint() {
  PlugflowBuildFingerprint f = plugflow::build_fingerprint();
#ifdef TEST_FINGERPRINT_EDIT
  TEST_FINGERPRINT_EDIT;
#endif
  return f;
}

const PlugflowBuildFingerprint fp = fingerprint();
const PlugflowPluginEntry entry = {TEST_STRUCT_SIZE, TEST_ABI_MAJOR, TEST_ABI_MINOR, TEST_PLUGIN_NAME, "0.0.1", &fp,
                                   &register_must_not_run};

}  // namespace

extern "C" __attribute__((visibility("default"))) const PlugflowPluginEntry* plugflow_plugin_entry() noexcept {
  return &entry;
}
