#pragma once
// TensorBoard event files: TFRecord-framed Event protos, so that
// `tensorboard --logdir OUT` charts a run's scalars. The generated protobuf
// types stay inside tfevents.cpp.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace tandem::obs {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), continuing from
// `crc` (0 to start). Thread-safe.
uint32_t crc32c(std::string_view bytes, uint32_t crc = 0);

// TFRecord's masked CRC: a CRC of data that itself holds CRCs is a poor
// check, so the stored value is rotated and offset. Thread-safe.
uint32_t maskedCrc32c(std::string_view bytes);

// One TFRecord: uint64 length (little endian), masked CRC of those 8 bytes,
// the data, masked CRC of the data. Thread-safe.
std::string tfRecord(std::string_view data);

struct Scalar {
  std::string tag;
  float value = 0;  // TensorBoard's simple_value is a float
};

class EventFileWriter {
 public:
  // Creates a new events.out.tfevents.<unix seconds>.<host>.<pid>.<n> in
  // `dir` (which must exist; n makes the name unique) and writes the
  // file_version record. Throws InputError naming the path on failure.
  EventFileWriter(const std::filesystem::path& dir, double wall_time);
  ~EventFileWriter();
  EventFileWriter(EventFileWriter&& other) noexcept;
  EventFileWriter& operator=(EventFileWriter&& other) noexcept;
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Appends one Event holding `scalars` at `step`. Each record reaches the
  // file with one write(2), so a killed run keeps every finished record.
  // Throws Error naming the path on an I/O failure. Not thread-safe.
  void writeScalars(int64_t step, double wall_time, std::span<const Scalar> scalars);

  const std::filesystem::path& path() const { return path_; }

 private:
  void writeRecord(std::string_view data);

  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace tandem::obs
