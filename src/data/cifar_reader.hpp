#pragma once
// Reader for the CIFAR-10 binary format: records of 1 label byte followed by
// 3072 pixel bytes (R, G, B planes of 32x32), with no header, so the file
// size is the only structure there is to validate. Thread-safe (no shared state).
#include <filesystem>

#include "data/idx_reader.hpp"

namespace tandem::data {

inline constexpr int64_t kCifarSide = 32;
inline constexpr int64_t kCifarChannels = 3;
inline constexpr int64_t kCifarClasses = 10;
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarChannels * kCifarSide * kCifarSide;

// One batch file: images uint8 [N, 3, 32, 32], labels int64 [N].
LabelledImages readCifarFile(const std::filesystem::path& path);

// `dir` itself if it holds test_batch.bin, else `dir/cifar-10-batches-bin`
// if that does; InputError naming both otherwise.
std::filesystem::path findCifarDir(const std::filesystem::path& dir);

}  // namespace tandem::data
