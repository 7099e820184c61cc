// A plugin whose dependency is missing: it links against helper/, whose recorded soname
// (libplugflow_test_vanished.so) exists nowhere, so dlopen must fail with the dynamic loader's
// message naming that library.
#include <plugflow/plugin.h>

#include <stdexcept>

extern "C" int plugflow_test_helper_value();

PLUGFLOW_PLUGIN("test_missing_dep", "0.0.1") {
  if (plugflow_test_helper_value() != 7) throw std::runtime_error("unexpected helper value");
}
