// IDX reading through openDataset("mnist-idx") and the reader functions,
// including every malformed-file case the reader promises to name.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/dataset.hpp"
#include "support/expect_input_error.hpp"
#include "support/process.hpp"
#include "data/idx_reader.hpp"
#include "support/byte_files.hpp"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

using tandem::testing::TempDir;

void putBigEndian(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

Bytes idxImages(uint32_t n, uint32_t h, uint32_t w, uint32_t magic = kIdxImagesMagic) {
  Bytes out;
  putBigEndian(out, magic);
  putBigEndian(out, n);
  putBigEndian(out, h);
  putBigEndian(out, w);
  for (uint32_t i = 0; i < n * h * w; ++i) out.push_back(static_cast<uint8_t>((i * 7 + 3) % 256));
  return out;
}

Bytes idxLabels(const std::vector<uint8_t>& labels) {
  Bytes out;
  putBigEndian(out, kIdxLabelsMagic);
  putBigEndian(out, static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

void writeGz(const fs::path& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

Bytes readAll(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

// A complete, valid mnist-idx directory: 6 train and 4 test images of 3x2.
void writeValidSet(const fs::path& dir, bool gz) {
  auto write = [&](const std::string& base, const Bytes& b) {
    if (gz) {
      writeGz(dir / (base + ".gz"), b);
    } else {
      testing::writeBytes(dir / base, b);
    }
  };
  write("train-images-idx3-ubyte", idxImages(6, 3, 2));
  write("train-labels-idx1-ubyte", idxLabels({0, 1, 2, 9, 4, 5}));
  write("t10k-images-idx3-ubyte", idxImages(4, 3, 2));
  write("t10k-labels-idx1-ubyte", idxLabels({3, 3, 7, 0}));
}

DatasetSplits openIdxDir(const fs::path& dir) {
  DatasetOptions o;
  o.name = "mnist-idx";
  o.data_dir = dir.string();
  return openDataset(o);
}

using tandem::testing::expectInputError;

TEST(DataIdx, ReadsValuesAndNormalises) {
  TempDir tmp;
  writeValidSet(tmp.path(), true);
  auto splits = openIdxDir(tmp.path());
  ASSERT_EQ(splits.train->size(), 6);
  ASSERT_EQ(splits.test->size(), 4);
  EXPECT_EQ(splits.train->numClasses(), 10);
  auto shape = splits.train->shape();
  EXPECT_EQ(shape.channels, 1);
  EXPECT_EQ(shape.height, 3);
  EXPECT_EQ(shape.width, 2);

  std::vector<int64_t> idx{3, 0};
  auto batch = splits.train->getBatch(idx, 0);
  ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{2, 1, 3, 2}));
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kFloat);
  EXPECT_EQ(batch.targets.scalar_type(), torch::kLong);
  EXPECT_EQ(batch.targets[0].item<int64_t>(), 9);
  EXPECT_EQ(batch.targets[1].item<int64_t>(), 0);
  // Normalised with the training set's own statistics, computed here the
  // plain way over its 36 pixels.
  double sum = 0;
  double sq = 0;
  for (uint32_t i = 0; i < 36; ++i) {
    const double v = ((i * 7 + 3) % 256) / 255.0;
    sum += v;
    sq += v * v;
  }
  const double mean = sum / 36;
  const double stdev = std::sqrt(sq / 36 - mean * mean);
  auto flat = batch.inputs.reshape({2, 6});
  for (int k = 0; k < 2; ++k) {
    for (int p = 0; p < 6; ++p) {
      uint32_t i = static_cast<uint32_t>(idx[k] * 6 + p);
      float raw = static_cast<float>((i * 7 + 3) % 256);
      float expected = static_cast<float>((raw / 255.0 - mean) / stdev);
      EXPECT_NEAR(flat[k][p].item<float>(), expected, 1e-5) << k << "," << p;
    }
  }
}

TEST(DataIdx, RawAndGzipReadIdentically) {
  TempDir gz;
  TempDir raw;
  writeValidSet(gz.path(), true);
  writeValidSet(raw.path(), false);
  auto a = openIdxDir(gz.path());
  auto b = openIdxDir(raw.path());
  std::vector<int64_t> idx{0, 1, 2, 3, 4, 5};
  EXPECT_TRUE(torch::equal(a.train->getBatch(idx, 0).inputs, b.train->getBatch(idx, 0).inputs));
  EXPECT_TRUE(torch::equal(a.train->getBatch(idx, 0).targets, b.train->getBatch(idx, 0).targets));
}

TEST(DataIdx, MissingFileNamesPath) {
  TempDir tmp;
  writeValidSet(tmp.path(), true);
  fs::remove(tmp.path() / "t10k-labels-idx1-ubyte.gz");
  expectInputError([&] { openIdxDir(tmp.path()); }, {"t10k-labels-idx1-ubyte", "missing"});
}

TEST(DataIdx, WrongMagicShowsExpectedAndFound) {
  TempDir tmp;
  auto path = tmp.path() / "imgs.gz";
  writeGz(path, idxLabels({1, 2, 3}));  // a label file where images are expected
  expectInputError([&] { readIdxImages(path); },
                   {"imgs.gz", "magic", "0x00000801", "0x00000803"});
  auto labels = tmp.path() / "labels";
  testing::writeBytes(labels, idxImages(2, 2, 2));
  expectInputError([&] { readIdxLabels(labels); }, {"labels", "magic", "0x00000803"});
}

TEST(DataIdx, TruncatedPayload) {
  TempDir tmp;
  auto bytes = idxImages(5, 4, 4);
  bytes.resize(bytes.size() - 3);
  auto path = tmp.path() / "short-images";
  testing::writeBytes(path, bytes);
  expectInputError([&] { readIdxImages(path); }, {"short-images", "truncated", "5 images"});
  writeGz(tmp.path() / "short.gz", bytes);
  expectInputError([&] { readIdxImages(tmp.path() / "short.gz"); }, {"short.gz", "truncated"});
}

TEST(DataIdx, TruncatedHeader) {
  TempDir tmp;
  auto bytes = idxImages(1, 2, 2);
  bytes.resize(10);
  testing::writeBytes(tmp.path() / "hdr", bytes);
  expectInputError([&] { readIdxImages(tmp.path() / "hdr"); }, {"hdr", "truncated", "header"});
  testing::writeBytes(tmp.path() / "tiny", {0, 0});
  expectInputError([&] { readIdxImages(tmp.path() / "tiny"); }, {"tiny", "truncated", "magic"});
}

TEST(DataIdx, CutGzipStream) {
  TempDir tmp;
  auto full = tmp.path() / "full.gz";
  writeGz(full, idxImages(50, 28, 28));
  auto compressed = readAll(full);
  compressed.resize(compressed.size() / 2);
  auto cut = tmp.path() / "cut.gz";
  testing::writeBytes(cut, compressed);
  expectInputError([&] { readIdxImages(cut); }, {"cut.gz", "truncated"});
}

TEST(DataIdx, TrailingGarbage) {
  TempDir tmp;
  auto bytes = idxLabels({1, 2, 3});
  bytes.push_back(0);
  bytes.push_back(0);
  writeGz(tmp.path() / "lab.gz", bytes);
  expectInputError([&] { readIdxLabels(tmp.path() / "lab.gz"); }, {"lab.gz", "trailing", "2"});
}

TEST(DataIdx, HugeHeaderIsRejectedWithoutAllocating) {
  TempDir tmp;
  Bytes bytes;
  putBigEndian(bytes, kIdxImagesMagic);
  putBigEndian(bytes, 1u << 27);  // claims 128M images of 16384x16384
  putBigEndian(bytes, 1u << 14);
  putBigEndian(bytes, 1u << 14);
  bytes.resize(bytes.size() + 100, 1);
  writeGz(tmp.path() / "liar.gz", bytes);
  expectInputError([&] { readIdxImages(tmp.path() / "liar.gz"); }, {"liar.gz", "truncated"});

  Bytes absurd;
  putBigEndian(absurd, kIdxImagesMagic);
  putBigEndian(absurd, 10);
  putBigEndian(absurd, 0xffffffffu);
  putBigEndian(absurd, 2);
  testing::writeBytes(tmp.path() / "absurd", absurd);
  expectInputError([&] { readIdxImages(tmp.path() / "absurd"); }, {"absurd", "dimension"});

  Bytes empty;
  putBigEndian(empty, kIdxLabelsMagic);
  putBigEndian(empty, 0);
  testing::writeBytes(tmp.path() / "empty", empty);
  expectInputError([&] { readIdxLabels(tmp.path() / "empty"); }, {"empty", "0 items"});
}

TEST(DataIdx, ClassCountComesFromTrainingLabels) {
  TempDir tmp;
  writeValidSet(tmp.path(), true);
  writeGz(tmp.path() / "train-labels-idx1-ubyte.gz", idxLabels({0, 1, 2, 12, 4, 5}));
  auto splits = openIdxDir(tmp.path());
  EXPECT_EQ(splits.train->numClasses(), 13);
  EXPECT_EQ(splits.test->numClasses(), 13);
  writeGz(tmp.path() / "train-labels-idx1-ubyte.gz", idxLabels({0, 1, 2, 3, 4, 7}));
  EXPECT_EQ(openIdxDir(tmp.path()).train->numClasses(), 8);
}

TEST(DataIdx, TestLabelOutOfTrainingRangeNamesTheFile) {
  TempDir tmp;
  writeValidSet(tmp.path(), true);  // training labels reach 9: 10 classes
  writeGz(tmp.path() / "t10k-labels-idx1-ubyte.gz", idxLabels({3, 3, 10, 0}));
  expectInputError([&] { openIdxDir(tmp.path()); },
                   {"t10k-labels-idx1-ubyte.gz", "label 10", "index 2", "10 classes",
                    "train-labels-idx1-ubyte.gz"});
}

TEST(DataIdx, NormalisationFlagsOverrideTheComputedStatistics) {
  TempDir tmp;
  writeValidSet(tmp.path(), false);
  DatasetOptions o;
  o.name = "mnist-idx";
  o.data_dir = tmp.str();
  o.normalize_mean = {0.5f};
  o.normalize_std = {0.25f};
  auto splits = openDataset(o);
  std::vector<int64_t> idx{1};
  auto x = splits.test->getBatch(idx, 0).inputs.flatten();
  for (uint32_t p = 0; p < 6; ++p) {
    const float raw = static_cast<float>(((6 + p) * 7 + 3) % 256);
    EXPECT_NEAR(x[p].item<float>(), (raw / 255.0f - 0.5f) / 0.25f, 1e-5) << p;
  }
  o.normalize_mean.clear();
  auto y = openDataset(o).test->getBatch(idx, 0).inputs.flatten();
  // Only the std given: the mean is still the training set's (not 0.5),
  // so every pixel moves by the same (0.5 - mean) / 0.25.
  auto shift = y - x;
  EXPECT_GT(shift.abs().min().item<float>(), 1e-3);
  EXPECT_LT((shift.max() - shift.min()).item<float>(), 1e-5);
  o.normalize_mean = {0.1f, 0.2f, 0.3f};
  expectInputError([&] { openDataset(o); }, {"--normalize-mean", "3 value", "1 channel"});
  o.normalize_mean = {0.1f};
  o.normalize_std = {0.0f};
  expectInputError([&] { openDataset(o); }, {"--normalize-std", "positive"});
}

TEST(DataIdx, CountMismatchGivesBothCounts) {
  TempDir tmp;
  writeValidSet(tmp.path(), true);
  writeGz(tmp.path() / "t10k-labels-idx1-ubyte.gz", idxLabels({3, 3, 7}));
  expectInputError([&] { openIdxDir(tmp.path()); },
                   {"mismatch", "t10k-images-idx3-ubyte.gz", "4 images",
                    "t10k-labels-idx1-ubyte.gz", "3 labels"});
}

TEST(DataIdx, FindIdxFilePrefersGzipAndFallsBackToRaw) {
  TempDir tmp;
  testing::writeBytes(tmp.path() / "a", {1});
  EXPECT_EQ(findIdxFile(tmp.path(), "a"), tmp.path() / "a");
  testing::writeBytes(tmp.path() / "a.gz", {1});
  EXPECT_EQ(findIdxFile(tmp.path(), "a"), tmp.path() / "a.gz");
  expectInputError([&] { findIdxFile(tmp.path(), "b"); }, {"b.gz", "missing"});
}

TEST(DataIdx, OptionErrors) {
  DatasetOptions o;
  o.name = "mnist-idx";
  expectInputError([&] { openDataset(o); }, {"mnist-idx", "data_dir"});
  o.name = "imagenet";
  expectInputError([&] { openDataset(o); }, {"imagenet", "fashion-mnist", "synthetic"});
  auto names = datasetNames();
  EXPECT_EQ(names.size(), 6u);
  for (const char* name : {"cifar100", "imagefolder"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

}  // namespace
}  // namespace tandem::data
