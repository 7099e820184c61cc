// The CPU device backend (device.cpp).
#pragma once
#include <cstddef>
#include <memory>

#include "plugflow/device.h"

namespace plugflow::cpu {

std::shared_ptr<DeviceBackend> make_cpu_backend();
// The bytes the allocator reserves for an nbytes request (exposed for tests and stats).
size_t allocation_size_class(size_t nbytes);

}  // namespace plugflow::cpu
