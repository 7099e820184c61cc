// A plugin whose registration throws; PLUGFLOW_PLUGIN's catch-all turns it into an error
// message that the loader must report.
#include <plugflow/plugin.h>

#include <stdexcept>

PLUGFLOW_PLUGIN("test_throws", "0.0.1") { throw std::runtime_error("boom from test plugin"); }
