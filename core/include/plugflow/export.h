// Symbol visibility for libplugflow_core.so. Everything not marked PF_API stays internal.
#pragma once

#define PF_API __attribute__((visibility("default")))
