// The checkpoint envelope (train/checkpoint_format): each input is decoded
// as it is, then again with its checksum made right, so that mutations also
// reach the size checks and the metadata parser behind the CRC. Every input
// either decodes to an in-bounds payload or throws InputError.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "train/checkpoint_format.hpp"

namespace {

void decode(const std::string& file) {
  using namespace tandem;
  try {
    const auto decoded = train::decodeCheckpoint(file, "fuzz.ckpt");
    if (decoded.payload.size() > file.size()) __builtin_trap();
  } catch (const InputError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::train;
  std::string file(reinterpret_cast<const char*>(data), size);
  decode(file);
  if (file.size() < kCheckpointHeaderBytes) return 0;
  uint64_t meta_size = 0;
  std::memcpy(&meta_size, file.data() + kCheckpointMetaSizeOffset, sizeof meta_size);  // little-endian hosts
  const size_t body = file.size() - kCheckpointHeaderBytes;
  if (meta_size > body) return 0;
  const std::string_view meta = std::string_view(file).substr(kCheckpointHeaderBytes, meta_size);
  const std::string_view payload = std::string_view(file).substr(kCheckpointHeaderBytes + meta_size);
  const uint32_t crc = checkpointChecksum(meta, payload);
  for (size_t i = 0; i < sizeof crc; ++i) file[kCheckpointChecksumOffset + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  decode(file);
  return 0;
}
