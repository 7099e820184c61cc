// Hand-written entries with a wrong ABI version or a truncated struct; the loader must refuse
// each before calling register_plugin. TEST_ABI_MAJOR / TEST_ABI_MINOR / TEST_STRUCT_SIZE
// come from tests/plugins/meson.build.
#include <plugflow/plugin.h>

namespace {

int register_must_not_run(void*, char* err, size_t err_len) noexcept {
  // Reaching this means the loader accepted an entry it should have refused.
  std::strncpy(err, "register_plugin of a plugin with a refused ABI was called", err_len - 1);
  err[err_len - 1] = '\0';
  return 1;
}

PlugflowPluginEntry entry = {TEST_STRUCT_SIZE, TEST_ABI_MAJOR, TEST_ABI_MINOR, TEST_PLUGIN_NAME, "0.0.1",
                             &register_must_not_run};

}  // namespace

extern "C" PlugflowPluginEntry* test_abi_entry() { return &entry; }
BOOST_DLL_ALIAS(test_abi_entry, plugflow_plugin_entry)
