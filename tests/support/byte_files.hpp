#pragma once
// Writes raw bytes to a file: the data tests build their inputs byte by byte.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

namespace tandem::testing {

inline void writeBytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace tandem::testing
