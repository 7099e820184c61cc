// The dependency of test_missing_dep.
extern "C" __attribute__((visibility("default"))) int plugflow_test_helper_value() { return 7; }
