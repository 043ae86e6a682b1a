#pragma once
// Bytes with whatever keeps them alive. Pure layers (the parameter server's
// chunk store) hand these out and take them in, so that they never name a
// transport type; the I/O side wraps them in its own messages without a
// copy (net::sharedPayload) and unwraps received ones the same way.
// A value type: copying one shares the owner, never the bytes.
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace tandem {

// Read-only bytes: a reply's payload. `owner` may be null when the bytes
// outlive every holder by other means (a retired chunk's values).
struct SharedBytes {
  std::shared_ptr<const void> owner{};
  std::span<const std::byte> bytes{};

  // void*, as ZeroMQ's messages have it, so byte views and messages read alike.
  const void* data() const { return bytes.data(); }
  size_t size() const { return bytes.size(); }
  bool empty() const { return bytes.empty(); }
  std::string_view text() const { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }
};

// Writable bytes: a received payload that its consumer may overwrite in
// place (an apply sums the step's gradients into the first one's buffer).
struct OwnedBytes {
  std::shared_ptr<void> owner{};
  std::span<std::byte> bytes{};

  void* data() const { return bytes.data(); }
  size_t size() const { return bytes.size(); }
  bool empty() const { return bytes.empty(); }
  std::span<const std::byte> view() const { return bytes; }
  std::string_view text() const { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }
};

// A fresh copy of `size` bytes at `data` (nothing for 0): for replies that
// are not a view of memory someone else keeps.
inline OwnedBytes copyBytes(const void* data, size_t size) {
  if (size == 0) return {};
  auto copy = std::make_shared<std::vector<std::byte>>(size);
  std::memcpy(copy->data(), data, size);
  return {copy, *copy};
}
inline OwnedBytes copyBytes(std::string_view text) { return copyBytes(text.data(), text.size()); }

inline SharedBytes shared(OwnedBytes bytes) { return {std::move(bytes.owner), bytes.bytes}; }

}  // namespace tandem
