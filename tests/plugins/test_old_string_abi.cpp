// Built with -D_GLIBCXX_USE_CXX11_ABI=0 (tests/plugins/meson.build). Its registration body
// would pass the core std::strings of the other layout; the loader must never call it.
#include <plugflow/plugin.h>

PLUGFLOW_PLUGIN("test_old_string_abi", "0.0.1") {
  (void)reg;
}
