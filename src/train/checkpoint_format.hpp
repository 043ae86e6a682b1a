#pragma once
// A checkpoint file's envelope, without torch: a fixed header (magic,
// version, sizes, CRC-32), a JSON metadata block, then an opaque payload
// (the torch archive checkpoint.hpp writes and reads). Decoding trusts
// nothing: every size is checked against the bytes there are, and the
// checksum before the metadata is parsed. Torch-free, so that the fuzzer
// and the sanitizer build reach it.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tandem::train {

struct CheckpointMeta {
  nlohmann::json config;  // toJson(TrainConfig)
  int64_t global_step = 0;
  int64_t epoch = 0;
  std::string model_fingerprint;  // modelFingerprint() of the saved model
};

// The file's bytes: header, metadata, `payload`.
std::string encodeCheckpoint(const CheckpointMeta& meta, std::string_view payload);

struct DecodedCheckpoint {
  CheckpointMeta meta;
  std::string payload;
};

// Decodes a whole file's bytes. Throws InputError "checkpoint <name>: ..."
// naming what is wrong: not a checkpoint, another version, truncated,
// checksum mismatch, bad metadata.
DecodedCheckpoint decodeCheckpoint(std::string_view file, const std::string& name);
// Reads and decodes the file at `path`; also InputError when it cannot be read.
DecodedCheckpoint readCheckpointFile(const std::filesystem::path& path);

// The CRC-32 the header carries for this metadata and payload (for tests
// and the fuzzer, which rewrites it to reach the metadata parser).
uint32_t checkpointChecksum(std::string_view meta, std::string_view payload);
// Where the header's metadata size, payload size and checksum start.
inline constexpr size_t kCheckpointHeaderBytes = 32;
inline constexpr size_t kCheckpointMetaSizeOffset = 12;
inline constexpr size_t kCheckpointChecksumOffset = 28;

}  // namespace tandem::train
