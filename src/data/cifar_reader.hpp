#pragma once
// Reader for the CIFAR-10 and CIFAR-100 binary formats: records of label
// byte(s) followed by 3072 pixel bytes (R, G, B planes of 32x32), with no
// header, so the file size is the only structure there is to validate.
// Thread-safe (no shared state).
#include <filesystem>

#include "data/idx_reader.hpp"

namespace tandem::data {

inline constexpr int64_t kCifarSide = 32;
inline constexpr int64_t kCifarChannels = 3;
inline constexpr int64_t kCifarPixelBytes = kCifarChannels * kCifarSide * kCifarSide;

struct CifarFormat {
  const char* name;           // for messages
  int64_t label_bytes;        // label bytes before the pixels of each record
  int64_t label_offset;       // which of them is the label used
  const char* test_file;      // marks the directory
  const char* subdir;         // the official archive's directory
  constexpr int64_t record_bytes() const { return label_bytes + kCifarPixelBytes; }
};

// CIFAR-10: <label><3072 pixels>; the class count comes from the labels.
inline constexpr CifarFormat kCifar10{"CIFAR-10", 1, 0, "test_batch.bin", "cifar-10-batches-bin"};
// CIFAR-100: <coarse label><fine label><3072 pixels>; the fine label is used.
inline constexpr CifarFormat kCifar100{"CIFAR-100", 2, 1, "test.bin", "cifar-100-binary"};
inline constexpr int64_t kCifar100Classes = 100;

// One batch file: images uint8 [N, 3, 32, 32], labels int64 [N] (unchecked;
// see labels.hpp).
LabelledImages readCifarFile(const std::filesystem::path& path, const CifarFormat& format = kCifar10);

// `dir` itself if it holds the format's test file, else `dir/<subdir>` if
// that does; InputError naming both otherwise.
std::filesystem::path findCifarDir(const std::filesystem::path& dir, const CifarFormat& format = kCifar10);

}  // namespace tandem::data
