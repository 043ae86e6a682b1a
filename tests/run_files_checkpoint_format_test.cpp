#include "train/checkpoint_format.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"

namespace tandem::train {
namespace {

CheckpointMeta sampleMeta() {
  CheckpointMeta meta;
  meta.config = {{"model", "mlp"}, {"batch_size", 16}};
  meta.global_step = 40;
  meta.epoch = 2;
  meta.model_fingerprint = "fc.weight:4x3x;";
  return meta;
}

void expectRefused(const std::string& file, const std::string& phrase) {
  try {
    decodeCheckpoint(file, "x.ckpt");
    ADD_FAILURE() << "decoded; expected '" << phrase << "'";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("checkpoint x.ckpt: "), std::string::npos) << what;
    EXPECT_NE(what.find(phrase), std::string::npos) << what;
  }
}

void expectRefusedFile(const std::filesystem::path& path, const std::string& phrase) {
  try {
    readCheckpointFile(path);
    ADD_FAILURE() << "read " << path << "; expected '" << phrase << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

TEST(CheckpointFormat, RoundTripsMetadataAndPayload) {
  const std::string payload("\0torch archive\xff", 15);
  const auto decoded = decodeCheckpoint(encodeCheckpoint(sampleMeta(), payload), "x.ckpt");
  EXPECT_EQ(decoded.payload, payload);
  EXPECT_EQ(decoded.meta.global_step, 40);
  EXPECT_EQ(decoded.meta.epoch, 2);
  EXPECT_EQ(decoded.meta.config, sampleMeta().config);
  EXPECT_EQ(decoded.meta.model_fingerprint, "fc.weight:4x3x;");
}

TEST(CheckpointFormat, EveryTruncationAndFlippedByteIsRefused) {
  const std::string file = encodeCheckpoint(sampleMeta(), "payload");
  for (size_t n = 0; n < file.size(); ++n) {
    EXPECT_THROW(decodeCheckpoint(file.substr(0, n), "x.ckpt"), InputError) << "truncated to " << n;
  }
  for (size_t i = 0; i < file.size(); ++i) {
    std::string flipped = file;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x10);
    EXPECT_THROW(decodeCheckpoint(flipped, "x.ckpt"), InputError) << "byte " << i;
  }
  expectRefused("not a checkpoint at all, but long enough", "not a Tandem checkpoint");
  expectRefused(file + "x", "truncated or corrupt");
}

TEST(CheckpointFormat, SizesThatWrapOrOverclaimAreRefused) {
  std::string file = encodeCheckpoint(sampleMeta(), "payload");
  // Metadata size near 2^64: the two sizes would add up to the real body.
  const uint64_t huge = ~uint64_t{0} - 3;
  std::memcpy(file.data() + kCheckpointMetaSizeOffset, &huge, sizeof huge);
  expectRefused(file, "truncated or corrupt");
}

TEST(CheckpointFormat, MetadataIsCheckedBehindAValidChecksum) {
  // A well-formed envelope around metadata that lacks fields.
  std::string file = encodeCheckpoint(sampleMeta(), "p");
  const size_t meta_begin = kCheckpointHeaderBytes;
  const size_t at = file.find("global_step", meta_begin);
  ASSERT_NE(at, std::string::npos);
  file[at] = 'G';
  uint64_t meta_size = 0;
  std::memcpy(&meta_size, file.data() + kCheckpointMetaSizeOffset, sizeof meta_size);
  const uint32_t crc = checkpointChecksum(std::string_view(file).substr(meta_begin, meta_size),
                                          std::string_view(file).substr(meta_begin + meta_size));
  std::memcpy(file.data() + kCheckpointChecksumOffset, &crc, sizeof crc);
  expectRefused(file, "bad metadata");
}

TEST(CheckpointFormat, ReadsAFileAndNamesOneItCannotOpen) {
  const auto path = std::filesystem::temp_directory_path() / "tandem-checkpoint-format-test.ckpt";
  std::ofstream(path, std::ios::binary) << encodeCheckpoint(sampleMeta(), "payload");
  EXPECT_EQ(readCheckpointFile(path).meta.global_step, 40);
  std::filesystem::remove(path);
  expectRefusedFile(path, "cannot open");
}

}  // namespace
}  // namespace tandem::train
