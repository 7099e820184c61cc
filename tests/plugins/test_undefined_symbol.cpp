// A plugin that calls a function no library defines. Loaded lazily it would crash at the first
// call; the loader's RTLD_NOW must reject it at load time instead.
#include <plugflow/plugin.h>

extern "C" void plugflow_test_symbol_that_does_not_exist();

PLUGFLOW_PLUGIN("test_undefined_symbol", "0.0.1") { plugflow_test_symbol_that_does_not_exist(); }
