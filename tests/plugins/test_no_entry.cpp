// A valid shared library that is not a plugin: it exports a function, but no
// plugflow_plugin_entry.
extern "C" __attribute__((visibility("default"))) int plugflow_test_not_a_plugin() { return 42; }
