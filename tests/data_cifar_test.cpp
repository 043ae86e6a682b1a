// CIFAR-10 and CIFAR-100 binary reading through openDataset and readCifarFile.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
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
#include "support/byte_files.hpp"

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

// Train batch b (1..5) has b+1 records; the test batch has 3.
void writeCifarSet(const fs::path& dir) {
  fs::create_directories(dir);
  for (int b = 1; b <= 5; ++b) testing::writeBytes(dir / ("data_batch_" + std::to_string(b) + ".bin"), records(b, b + 1, b));
  testing::writeBytes(dir / "test_batch.bin", records(0, 3, 0));
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
  // The training set's own statistics, computed the plain way over the 20
  // training records (data_batch_b holds b + 1 of them).
  float mean[3];
  float stdev[3];
  for (int c = 0; c < 3; ++c) {
    double sum = 0;
    double sq = 0;
    double n = 0;
    for (int f = 1; f <= 5; ++f)
      for (int r = 0; r <= f; ++r)
        for (int y = 0; y < 32; ++y)
          for (int x = 0; x < 32; ++x) {
            const double v = pixel(f, r, c, y, x) / 255.0;
            sum += v;
            sq += v * v;
            n += 1;
          }
    mean[c] = static_cast<float>(sum / n);
    stdev[c] = static_cast<float>(std::sqrt(sq / n - (sum / n) * (sum / n)));
  }
  EXPECT_GT(std::abs(mean[0] - mean[2]), 0.05f);  // the channels really differ
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
  testing::writeBytes(tmp.path() / "data_batch_4.bin", bytes);
  expectInputError([&] { openCifarDir(tmp.path()); }, {"data_batch_4.bin", "3073"});
  testing::writeBytes(tmp.path() / "data_batch_4.bin", {});
  expectInputError([&] { openCifarDir(tmp.path()); }, {"data_batch_4.bin", "3073"});
}

TEST(DataCifar, ClassCountFromTrainingLabelsAndTestLabelsChecked) {
  TempDir tmp;
  writeCifarSet(tmp.path());
  auto bytes = records(5, 6, 5);
  bytes[3 * kCifar10.record_bytes()] = 41;  // a 42-class CIFAR-format set
  testing::writeBytes(tmp.path() / "data_batch_5.bin", bytes);
  EXPECT_EQ(openCifarDir(tmp.path()).train->numClasses(), 42);

  writeCifarSet(tmp.path());  // labels 0..9 again
  bytes = records(0, 3, 0);
  bytes[2 * kCifar10.record_bytes()] = 10;
  testing::writeBytes(tmp.path() / "test_batch.bin", bytes);
  expectInputError([&] { openCifarDir(tmp.path()); }, {"test_batch.bin", "label 10", "index 2", "10 classes"});
}

// CIFAR-100 records: <coarse><fine><3072 pixels>; the fine label is the class.
Bytes records100(int f, int n) {
  Bytes out;
  for (int r = 0; r < n; ++r) {
    out.push_back(static_cast<uint8_t>(r % 20));        // coarse
    out.push_back(static_cast<uint8_t>((r * 37 + f) % 100));  // fine
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) out.push_back(pixel(f, r, c, y, x));
  }
  return out;
}

TEST(DataCifar, Cifar100ReadsFineLabelsWith100Classes) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "cifar-100-binary";
  fs::create_directories(dir);
  testing::writeBytes(dir / "train.bin", records100(1, 7));
  testing::writeBytes(dir / "test.bin", records100(2, 3));
  DatasetOptions o;
  o.name = "cifar100";
  o.data_dir = tmp.str();
  auto splits = openDataset(o);
  EXPECT_EQ(splits.train->numClasses(), 100);  // though the labels seen only reach 74
  EXPECT_EQ(splits.train->size(), 7);
  EXPECT_EQ(splits.test->size(), 3);
  EXPECT_EQ(splits.train->shape().channels, 3);
  std::vector<int64_t> idx{0, 1, 2, 3, 4, 5, 6};
  auto batch = splits.train->getBatch(idx, 0);
  for (int r = 0; r < 7; ++r) EXPECT_EQ(batch.targets[r].item<int64_t>(), (r * 37 + 1) % 100) << r;
  // Pixels start after both label bytes: normalisation is monotonic, so
  // record 0's first pixels keep their order (pixel() grows along x).
  EXPECT_LT(batch.inputs[0][0][0][0].item<float>(), batch.inputs[0][0][0][1].item<float>());
  auto raw = readCifarFile(dir / "train.bin", kCifar100);
  for (int x = 0; x < 32; ++x) EXPECT_EQ(raw.images[3][1][2][x].item<uint8_t>(), pixel(1, 3, 1, 2, x)) << x;

  auto bad = records100(2, 3);
  bad[1 * kCifar100.record_bytes() + 1] = 100;
  testing::writeBytes(dir / "test.bin", bad);
  expectInputError([&] { openDataset(o); }, {"test.bin", "label 100", "index 1", "100 classes"});
  // A CIFAR-10 file is not a whole number of CIFAR-100 records.
  testing::writeBytes(dir / "train.bin", records(1, 2, 0));
  expectInputError([&] { openDataset(o); }, {"train.bin", "3074", "CIFAR-100"});
}

}  // namespace
}  // namespace tandem::data
