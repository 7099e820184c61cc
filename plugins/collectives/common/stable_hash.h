// A 64-bit FNV-1a hash for names and tags that ranks compute independently and must agree
// on: unlike std::hash, its value is the same on every host, build and process.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace plugflow::collectives {

class StableHash {
 public:
  StableHash& add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
    return *this;
  }
  StableHash& add(const std::string& s) {
    add_value(static_cast<uint64_t>(s.size()));  // so that ("ab", "c") and ("a", "bc") differ
    return add(s.data(), s.size());
  }
  // Integers and enums, as little-endian 64-bit values whatever their type.
  template <typename T, typename = std::enable_if_t<std::is_integral_v<T> || std::is_enum_v<T>>>
  StableHash& add_value(T v) {
    const auto u = static_cast<uint64_t>(v);
    unsigned char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(u >> (8 * i));
    return add(bytes, sizeof bytes);
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace plugflow::collectives
