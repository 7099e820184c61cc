// A plugin as ABI 1 built them: the entry symbol is a data symbol (Boost.DLL's alias) holding
// the address of the entry function, whose struct starts with the version fields. The loader
// must not call the data as code: it follows the alias and refuses the ABI 1 entry.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace {

struct EntryV1 {  // PlugflowPluginEntry of ABI 1.1
  uint32_t struct_size, abi_major, abi_minor;
  const char* name;
  const char* version;
  int (*register_plugin)(void*, char*, size_t);
};

int register_must_not_run(void*, char* err, size_t err_len) noexcept {
  std::strncpy(err, "register_plugin of an ABI 1 plugin was called", err_len - 1);
  err[err_len - 1] = '\0';
  return 1;
}

EntryV1 entry = {sizeof(EntryV1), 1, 1, "test_abi1_alias", "0.0.1", &register_must_not_run};

extern "C" EntryV1* entry_fn() { return &entry; }

}  // namespace

extern "C" __attribute__((visibility("default"))) EntryV1* (*const plugflow_plugin_entry)() = &entry_fn;
