#include "train/checkpoint_format.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace tandem::train {
namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxMetaBytes = 16u << 20;
static_assert(kCheckpointHeaderBytes == 8 + 4 + 8 + 8 + 4);

template <class T>
void putLe(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff));
}

template <class T>
T getLe(const char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

DecodedCheckpoint readCheckpointFile(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("checkpoint {}: cannot open: {}", name, std::strerror(errno)));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("checkpoint {}: read failed: {}", name, std::strerror(errno)));
  return decodeCheckpoint(bytes.str(), name);
}

uint32_t checkpointChecksum(std::string_view meta, std::string_view payload) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(meta.data()), meta.size());
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(payload.data()), payload.size());
  return static_cast<uint32_t>(crc);
}

std::string encodeCheckpoint(const CheckpointMeta& meta, std::string_view payload) {
  const nlohmann::json j = {{"config", meta.config},
                            {"global_step", meta.global_step},
                            {"epoch", meta.epoch},
                            {"model_fingerprint", meta.model_fingerprint}};
  const std::string meta_bytes = j.dump();
  std::string file;
  file.reserve(kCheckpointHeaderBytes + meta_bytes.size() + payload.size());
  file.append(kMagic, sizeof(kMagic));
  putLe<uint32_t>(file, kVersion);
  putLe<uint64_t>(file, meta_bytes.size());
  putLe<uint64_t>(file, payload.size());
  putLe<uint32_t>(file, checkpointChecksum(meta_bytes, payload));
  file += meta_bytes;
  file += payload;
  return file;
}

DecodedCheckpoint decodeCheckpoint(std::string_view file, const std::string& name) {
  if (file.size() < kCheckpointHeaderBytes || std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) {
    throw InputError(fmt::format("checkpoint {}: not a Tandem checkpoint (bad magic or too short)", name));
  }
  const auto version = getLe<uint32_t>(file.data() + 8);
  if (version != kVersion) {
    throw InputError(fmt::format("checkpoint {}: format version {} is not supported (expected {})", name, version,
                                 kVersion));
  }
  const auto meta_size = getLe<uint64_t>(file.data() + kCheckpointMetaSizeOffset);
  const auto payload_size = getLe<uint64_t>(file.data() + 20);
  const auto crc = getLe<uint32_t>(file.data() + kCheckpointChecksumOffset);
  const uint64_t body = file.size() - kCheckpointHeaderBytes;
  // Compared without adding the two claims: their sum may wrap.
  if (meta_size > kMaxMetaBytes || meta_size > body || payload_size != body - meta_size) {
    throw InputError(fmt::format("checkpoint {}: truncated or corrupt (header claims {} + {} bytes, file has {})", name,
                                 meta_size, payload_size, body));
  }
  const std::string_view meta_bytes = file.substr(kCheckpointHeaderBytes, meta_size);
  const std::string_view payload = file.substr(kCheckpointHeaderBytes + meta_size);
  if (checkpointChecksum(meta_bytes, payload) != crc) {
    throw InputError(fmt::format("checkpoint {}: checksum mismatch, the file is corrupt", name));
  }
  DecodedCheckpoint decoded;
  try {
    const auto j = nlohmann::json::parse(meta_bytes);
    decoded.meta.config = j.at("config");
    decoded.meta.global_step = j.at("global_step").get<int64_t>();
    decoded.meta.epoch = j.at("epoch").get<int64_t>();
    decoded.meta.model_fingerprint = j.at("model_fingerprint").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("checkpoint {}: bad metadata: {}", name, e.what()));
  }
  decoded.payload.assign(payload);
  return decoded;
}

}  // namespace tandem::train
