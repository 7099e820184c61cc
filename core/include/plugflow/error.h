// Typed errors. Each maps to the Python exception a PyTorch user expects
// (see python/src/errors.cpp); the classes are exported so that a plugin's throw is
// caught as the same type in the core.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

#include "plugflow/export.h"

namespace plugflow {

class PF_API Error : public std::runtime_error {  // -> RuntimeError
 public:
  using std::runtime_error::runtime_error;
};
class PF_API ValueError : public Error {  // -> ValueError
 public:
  using Error::Error;
};
class PF_API IndexError : public Error {  // -> IndexError
 public:
  using Error::Error;
};
class PF_API TypeError : public Error {  // -> TypeError
 public:
  using Error::Error;
};
class PF_API NotImplementedError : public Error {  // -> NotImplementedError
 public:
  using Error::Error;
};
class PF_API ConfigError : public Error {  // -> plugflow.ConfigError
 public:
  using Error::Error;
};
class PF_API PluginError : public Error {  // -> plugflow.PluginError
 public:
  using Error::Error;
};
class PF_API DeviceError : public Error {  // -> RuntimeError ("no CUDA device", ...)
 public:
  using Error::Error;
};
class PF_API TimeoutError : public Error {  // -> TimeoutError (collectives)
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace plugflow

// PF_CHECK(cond, ErrorType, message parts...): throw ErrorType with the streamed message.
#define PF_CHECK_T(cond, ErrorType, ...)                                   \
  do {                                                                     \
    if (!(cond)) throw ::plugflow::ErrorType(::plugflow::detail::str_cat(__VA_ARGS__)); \
  } while (0)
#define PF_CHECK(cond, ...) PF_CHECK_T(cond, Error, __VA_ARGS__)
#define PF_THROW(ErrorType, ...) throw ::plugflow::ErrorType(::plugflow::detail::str_cat(__VA_ARGS__))
