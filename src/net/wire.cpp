#include "net/wire.hpp"

#include <fmt/format.h>

#include <limits>

#include "core/error.hpp"

namespace tandem::net {

void PayloadWriter::putU32(uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void PayloadWriter::putU64(uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void PayloadWriter::putString(std::string_view text) {
  if (text.size() > std::numeric_limits<uint32_t>::max()) {
    throw InputError(fmt::format("string of {} bytes is too long for a payload field", text.size()));
  }
  putU32(static_cast<uint32_t>(text.size()));
  putRaw(text.data(), text.size());
}

void PayloadWriter::putStrings(const std::vector<std::string>& texts) {
  putU32(static_cast<uint32_t>(texts.size()));
  for (const auto& t : texts) putString(t);
}

void PayloadWriter::putRaw(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  bytes_.insert(bytes_.end(), p, p + size);
}

PayloadReader::PayloadReader(std::span<const std::byte> bytes, std::string_view peer, std::string_view what)
    : bytes_(bytes), peer_(peer), what_(what) {}

std::span<const std::byte> PayloadReader::take(size_t size, std::string_view field) {
  if (size > remaining()) {
    throw InputError(fmt::format("frame from {}: {} truncated at {}: needs {} bytes, {} left", peer_, what_, field,
                                 size, remaining()));
  }
  auto out = bytes_.subspan(pos_, size);
  pos_ += size;
  return out;
}

uint32_t PayloadReader::u32(std::string_view field) {
  auto b = take(4, field);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b[i]) << (8 * i);
  return v;
}

uint64_t PayloadReader::u64(std::string_view field) {
  auto b = take(8, field);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b[i]) << (8 * i);
  return v;
}

std::string_view PayloadReader::string(std::string_view field) {
  uint32_t size = u32(field);
  auto b = take(size, field);
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

std::vector<std::string> PayloadReader::strings(std::string_view field) {
  uint32_t count = u32(field);
  // Each entry needs at least its 4-byte length, so a count larger than
  // that cannot be honest; check before reserving.
  if (count > remaining() / 4) {
    throw InputError(fmt::format("frame from {}: {} claims {} entries in {} but only {} bytes follow", peer_, what_,
                                 count, field, remaining()));
  }
  std::vector<std::string> out;
  out.reserve(count);
  for (uint32_t i = 0; i < count; ++i) out.emplace_back(string(field));
  return out;
}

std::span<const std::byte> PayloadReader::rest() { return take(remaining(), "rest"); }

void PayloadReader::expectEnd() {
  if (remaining() != 0) {
    throw InputError(fmt::format("frame from {}: {} has {} unexpected trailing bytes", peer_, what_, remaining()));
  }
}

}  // namespace tandem::net
