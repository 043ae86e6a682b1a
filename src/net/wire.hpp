#pragma once
// Fields inside a payload: little-endian integers and u32-length-prefixed
// strings. The reader checks every length against the bytes that actually
// arrived, so a lying length field is an InputError, never an overread or a
// huge allocation. Thread-compatible (no shared state).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::net {

class PayloadWriter {
 public:
  void putU32(uint32_t value);
  void putU64(uint64_t value);
  // u32 length, then the bytes.
  void putString(std::string_view text);
  void putStrings(const std::vector<std::string>& texts);  // u32 count, then each string
  void putRaw(const void* data, size_t size);

  const std::vector<char>& bytes() const { return bytes_; }
  std::vector<char> take() { return std::move(bytes_); }

 private:
  std::vector<char> bytes_;
};

class PayloadReader {
 public:
  // `peer` and `what` ("store-set payload") name the source in errors.
  PayloadReader(std::span<const std::byte> bytes, std::string_view peer, std::string_view what);

  uint32_t u32(std::string_view field);
  uint64_t u64(std::string_view field);
  std::string_view string(std::string_view field);
  // A count-prefixed list; the count is checked against the bytes left
  // before anything is reserved.
  std::vector<std::string> strings(std::string_view field);
  std::span<const std::byte> rest();
  size_t remaining() const { return bytes_.size() - pos_; }
  // Throws unless every byte was consumed.
  void expectEnd();

 private:
  std::span<const std::byte> take(size_t size, std::string_view field);

  std::span<const std::byte> bytes_;
  size_t pos_ = 0;
  std::string peer_;
  std::string what_;
};

}  // namespace tandem::net
