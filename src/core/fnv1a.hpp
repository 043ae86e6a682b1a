#pragma once
// FNV-1a, 64-bit: a cheap exact fingerprint of bytes (not for security).
#include <cstddef>
#include <cstdint>

namespace tandem {

class Fnv1a {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) hash_ = (hash_ ^ p[i]) * 1099511628211ull;
  }
  template <class T>
  void addValue(const T& value) {
    add(&value, sizeof(value));
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 1469598103934665603ull;
};

}  // namespace tandem
