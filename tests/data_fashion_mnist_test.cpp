// The real Fashion-MNIST files from Debian's dataset-fashion-mnist, when
// installed. Also prints load and batch timings for the record.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <vector>

#include "data/dataset.hpp"
#include "data/idx_reader.hpp"
#include "data/normalization.hpp"
#include "data/sampler.hpp"

namespace tandem::data {
namespace {

constexpr const char* kDir = "/usr/share/datasets/fashion-mnist";

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

class DataFashionMnist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(std::filesystem::path(kDir) / "train-images-idx3-ubyte.gz")) return;
    DatasetOptions o;  // fashion-mnist from its default directory
    auto start = std::chrono::steady_clock::now();
    splits_ = openDataset(o);
    load_seconds_ = secondsSince(start);
    o.augment = true;
    augmented_ = openDataset(o);
  }
  static void TearDownTestSuite() {
    splits_ = {};
    augmented_ = {};
  }
  void SetUp() override {
    if (!splits_.train) GTEST_SKIP() << kDir << " is not installed";
  }

  static inline DatasetSplits splits_;
  static inline DatasetSplits augmented_;
  static inline double load_seconds_ = 0;
};

TEST_F(DataFashionMnist, SizesShapeAndClasses) {
  EXPECT_EQ(splits_.train->name(), "fashion-mnist");
  EXPECT_EQ(splits_.train->size(), 60000);
  EXPECT_EQ(splits_.test->size(), 10000);
  EXPECT_EQ(splits_.train->numClasses(), 10);
  auto shape = splits_.train->shape();
  EXPECT_EQ(shape.channels, 1);
  EXPECT_EQ(shape.height, 28);
  EXPECT_EQ(shape.width, 28);
  std::cout << "[ timing ] fashion-mnist open (train + test): " << load_seconds_ * 1e3 << " ms\n";
  EXPECT_LT(load_seconds_, 10.0);  // generous: shared machines; typical is far lower
}

TEST_F(DataFashionMnist, BalancedLabelsAndNormalisedPixels) {
  std::vector<int64_t> all(60000);
  std::iota(all.begin(), all.end(), 0);
  auto batch = splits_.train->getBatch(all, 0);
  auto counts = torch::bincount(batch.targets, {}, 10);
  EXPECT_TRUE(torch::equal(counts, torch::full({10}, 6000, torch::kLong)));
  // Statistics computed from the training set make it exactly N(0, 1)-scaled.
  EXPECT_NEAR(batch.inputs.mean().item<float>(), 0.0f, 1e-3f);
  EXPECT_NEAR(batch.inputs.std().item<float>(), 1.0f, 1e-3f);
}

TEST_F(DataFashionMnist, ComputedStatisticsMatchThePublishedOnes) {
  auto images = readIdxImages(std::filesystem::path(kDir) / "train-images-idx3-ubyte.gz");
  auto norm = computeNormalization(images);
  ASSERT_EQ(norm.mean.size(), 1u);
  EXPECT_NEAR(norm.mean[0], 0.2860f, 5e-4f);
  EXPECT_NEAR(norm.std[0], 0.3530f, 5e-4f);
}

TEST_F(DataFashionMnist, BatchTiming) {
  ShardSampler sampler(60000, 64, 0, 1, 1);
  auto time = [&](const DatasetPtr& ds) {
    const int reps = 200;
    auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < reps; ++s) {
      auto idx = sampler.batchIndices(s);
      auto b = ds->getBatch(idx, 9);
      ASSERT_EQ(b.inputs.size(0), 64);
    }
    double us = secondsSince(start) * 1e6 / reps;
    std::cout << "[ timing ] getBatch(64) " << (ds == augmented_.train ? "augmented" : "plain")
              << ": " << us << " us\n";
  };
  time(splits_.train);
  time(augmented_.train);
}

}  // namespace
}  // namespace tandem::data
