// CIFAR-10 binary reading through openDataset("cifar10") and readCifarFile.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/cifar_reader.hpp"
#include "data/dataset.hpp"
#include "support/expect_input_error.hpp"
#include "support/process.hpp"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

using tandem::testing::TempDir;

// Pixel (c, y, x) of record r in file f is a known function, so a read can
// be checked exactly.
uint8_t pixel(int f, int r, int c, int y, int x) {
  return static_cast<uint8_t>(f * 31 + r * 17 + c * 80 + y * 3 + x);
}

Bytes records(int f, int n, int label_offset) {
  Bytes out;
  for (int r = 0; r < n; ++r) {
    out.push_back(static_cast<uint8_t>((r + label_offset) % 10));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) out.push_back(pixel(f, r, c, y, x));
  }
  return out;
}

void writeRaw(const fs::path& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Train batch b (1..5) has b+1 records; the test batch has 3.
void writeCifarSet(const fs::path& dir) {
  fs::create_directories(dir);
  for (int b = 1; b <= 5; ++b) writeRaw(dir / ("data_batch_" + std::to_string(b) + ".bin"), records(b, b + 1, b));
  writeRaw(dir / "test_batch.bin", records(0, 3, 0));
}

DatasetSplits openCifarDir(const fs::path& dir) {
  DatasetOptions o;
  o.name = "cifar10";
  o.data_dir = dir.string();
  return openDataset(o);
}

using tandem::testing::expectInputError;

TEST(DataCifar, ReadsAllBatchesInOrderWithPerChannelNormalisation) {
  TempDir tmp;
  writeCifarSet(tmp.path());
  auto splits = openCifarDir(tmp.path());
  ASSERT_EQ(splits.train->size(), 2 + 3 + 4 + 5 + 6);
  ASSERT_EQ(splits.test->size(), 3);
  EXPECT_EQ(splits.train->numClasses(), 10);
  EXPECT_EQ(splits.train->shape().channels, 3);
  EXPECT_EQ(splits.train->shape().height, 32);
  EXPECT_EQ(splits.train->shape().width, 32);

  // Global index 2 is the first record of data_batch_2.
  std::vector<int64_t> idx{2, 19};
  auto batch = splits.train->getBatch(idx, 0);
  ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{2, 3, 32, 32}));
  EXPECT_EQ(batch.targets[0].item<int64_t>(), 2);
  EXPECT_EQ(batch.targets[1].item<int64_t>(), (5 + 5) % 10);  // batch 5, record 5
  const float mean[3] = {0.4914f, 0.4822f, 0.4465f};
  const float stdev[3] = {0.2470f, 0.2435f, 0.2616f};
  for (int c = 0; c < 3; ++c) {
    for (auto [y, x] : {std::pair{0, 0}, std::pair{5, 31}, std::pair{31, 7}}) {
      float raw = pixel(2, 0, c, y, x);
      EXPECT_NEAR(batch.inputs[0][c][y][x].item<float>(), (raw / 255.0f - mean[c]) / stdev[c], 1e-4);
      raw = pixel(5, 5, c, y, x);
      EXPECT_NEAR(batch.inputs[1][c][y][x].item<float>(), (raw / 255.0f - mean[c]) / stdev[c], 1e-4);
    }
  }
}

TEST(DataCifar, FindsBatchesInSubdirectory) {
  TempDir tmp;
  writeCifarSet(tmp.path() / "cifar-10-batches-bin");
  auto splits = openCifarDir(tmp.path());
  EXPECT_EQ(splits.train->size(), 20);
  EXPECT_EQ(splits.test->size(), 3);
}

TEST(DataCifar, MissingTrainBatchIsNamed) {
  TempDir tmp;
  writeCifarSet(tmp.path());
  fs::remove(tmp.path() / "data_batch_3.bin");
  expectInputError([&] { openCifarDir(tmp.path()); }, {"data_batch_3.bin", "missing"});
}

TEST(DataCifar, MissingDirectoryNamesTestBatch) {
  TempDir tmp;
  expectInputError([&] { openCifarDir(tmp.path() / "nope"); }, {"nope", "test_batch.bin", "missing"});
}

TEST(DataCifar, SizeNotAMultipleOfRecord) {
  TempDir tmp;
  writeCifarSet(tmp.path());
  auto bytes = records(4, 4, 0);
  bytes.pop_back();
  writeRaw(tmp.path() / "data_batch_4.bin", bytes);
  expectInputError([&] { openCifarDir(tmp.path()); }, {"data_batch_4.bin", "3073"});
  writeRaw(tmp.path() / "data_batch_4.bin", {});
  expectInputError([&] { openCifarDir(tmp.path()); }, {"data_batch_4.bin", "3073"});
}

TEST(DataCifar, LabelOutOfRange) {
  TempDir tmp;
  auto bytes = records(0, 3, 0);
  bytes[2 * kCifarRecordBytes] = 10;
  writeRaw(tmp.path() / "bad.bin", bytes);
  expectInputError([&] { readCifarFile(tmp.path() / "bad.bin"); },
                   {"bad.bin", "label 10", "index 2", "10 classes"});
}

}  // namespace
}  // namespace tandem::data
