// Crop/flip augmentation: the kernel's geometry, and that datasets apply it
// deterministically from (seed, index) and only to the training split.
#include <gtest/gtest.h>

#include <future>
#include <numeric>
#include <set>
#include <vector>

#include "data/augment.hpp"
#include "data/dataset.hpp"
#include "data/in_memory_dataset.hpp"

namespace tandem::data {
namespace {

std::vector<int> ramp(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 1);
  return v;
}

TEST(DataAugment, ZeroOffsetWithoutFlipIsIdentity) {
  auto src = ramp(2 * 3 * 4);
  std::vector<int> dst(src.size());
  applyCropFlip<int>(src.data(), dst.data(), 2, 3, 4, CropFlip{0, 0, false}, -1);
  EXPECT_EQ(dst, src);
}

TEST(DataAugment, FlipReversesRows) {
  auto src = ramp(2 * 4);  // 1 channel, 2 rows of 4
  std::vector<int> dst(src.size());
  applyCropFlip<int>(src.data(), dst.data(), 1, 2, 4, CropFlip{0, 0, true}, -1);
  EXPECT_EQ(dst, (std::vector<int>{4, 3, 2, 1, 8, 7, 6, 5}));
}

TEST(DataAugment, ShiftFillsUncoveredPixels) {
  auto src = ramp(3 * 3);
  std::vector<int> dst(src.size());
  // Output (y, x) reads source (y + 1, x - 2).
  applyCropFlip<int>(src.data(), dst.data(), 1, 3, 3, CropFlip{1, -2, false}, 0);
  EXPECT_EQ(dst, (std::vector<int>{0, 0, 4, 0, 0, 7, 0, 0, 0}));
  // Crop first, then flip: the flipped crop of the same offset.
  applyCropFlip<int>(src.data(), dst.data(), 1, 3, 3, CropFlip{1, -2, true}, 0);
  EXPECT_EQ(dst, (std::vector<int>{4, 0, 0, 7, 0, 0, 0, 0, 0}));
}

TEST(DataAugment, DrawIsDeterministicInRangeAndCoversChoices) {
  std::set<int> dys, dxs, flips;
  for (int64_t i = 0; i < 2000; ++i) {
    auto a = drawCropFlip(42, i);
    auto b = drawCropFlip(42, i);
    EXPECT_EQ(a.dy, b.dy);
    EXPECT_EQ(a.dx, b.dx);
    EXPECT_EQ(a.flip, b.flip);
    ASSERT_GE(a.dy, -kAugmentPad);
    ASSERT_LE(a.dy, kAugmentPad);
    ASSERT_GE(a.dx, -kAugmentPad);
    ASSERT_LE(a.dx, kAugmentPad);
    dys.insert(a.dy);
    dxs.insert(a.dx);
    flips.insert(a.flip);
  }
  EXPECT_EQ(dys.size(), 9u);
  EXPECT_EQ(dxs.size(), 9u);
  EXPECT_EQ(flips.size(), 2u);
  int differ = 0;
  for (int64_t i = 0; i < 100; ++i) {
    auto a = drawCropFlip(1, i);
    auto b = drawCropFlip(2, i);
    differ += (a.dy != b.dy || a.dx != b.dx || a.flip != b.flip);
  }
  EXPECT_GT(differ, 80);
}

std::shared_ptr<InMemoryDataset> randomImages(bool augment) {
  auto images = torch::randint(0, 256, {40, 3, 8, 8}, torch::TensorOptions(torch::kByte));
  auto labels = torch::arange(40, torch::kLong) % 10;
  Normalization norm{{0.5f, 0.4f, 0.3f}, {0.2f, 0.25f, 0.3f}};
  return std::make_shared<InMemoryDataset>("t", images, labels, 10, norm, augment);
}

TEST(DataAugment, InMemoryBatchIsDeterministicAndSeedDependent) {
  torch::manual_seed(3);
  auto ds = randomImages(true);
  std::vector<int64_t> idx(40);
  std::iota(idx.begin(), idx.end(), 0);
  auto a = ds->getBatch(idx, 7);
  auto b = ds->getBatch(idx, 7);
  EXPECT_TRUE(torch::equal(a.inputs, b.inputs));
  EXPECT_TRUE(torch::equal(a.targets, b.targets));
  auto c = ds->getBatch(idx, 8);
  EXPECT_FALSE(torch::equal(a.inputs, c.inputs));
  EXPECT_TRUE(torch::equal(a.targets, c.targets));

  // A sample's augmentation depends on its own index, not its batch position
  // or the thread that builds it.
  std::vector<int64_t> one{17};
  auto alone = std::async(std::launch::async, [&] { return ds->getBatch(one, 7); }).get();
  EXPECT_TRUE(torch::equal(alone.inputs[0], a.inputs[17]));
}

TEST(DataAugment, AugmentedSampleMatchesKernelOnRawPixels) {
  torch::manual_seed(4);
  auto images = torch::randint(0, 256, {40, 3, 8, 8}, torch::TensorOptions(torch::kByte));
  Normalization norm{{0.5f, 0.4f, 0.3f}, {0.2f, 0.25f, 0.3f}};
  auto labels = torch::zeros({40}, torch::kLong);
  InMemoryDataset ds("t", images, labels, 10, norm, true);
  InMemoryDataset plain("t", images, labels, 10, norm, false);
  for (int64_t i : {0, 5, 39}) {
    std::vector<int64_t> idx{i};
    auto cf = drawCropFlip(99, i);
    std::vector<uint8_t> expect(3 * 8 * 8);
    applyCropFlip<uint8_t>(images[i].contiguous().data_ptr<uint8_t>(), expect.data(), 3, 8, 8, cf, 0);
    auto expect_t = torch::from_blob(expect.data(), {1, 3, 8, 8}, torch::kByte).to(torch::kFloat);
    auto mean = torch::tensor({0.5f, 0.4f, 0.3f}).view({1, 3, 1, 1});
    auto sd = torch::tensor({0.2f, 0.25f, 0.3f}).view({1, 3, 1, 1});
    auto want = (expect_t / 255.0f - mean) / sd;
    EXPECT_TRUE(torch::allclose(ds.getBatch(idx, 99).inputs, want, 1e-5, 1e-5)) << i;
    auto unaug = (images[i].unsqueeze(0).to(torch::kFloat) / 255.0f - mean) / sd;
    EXPECT_TRUE(torch::allclose(plain.getBatch(idx, 99).inputs, unaug, 1e-5, 1e-5)) << i;
  }
}

TEST(DataAugment, OnlyTrainSplitIsAugmented) {
  DatasetOptions o;
  o.name = "synthetic";
  o.synthetic_shape = {3, 16, 16};
  o.synthetic_train_size = 64;
  o.synthetic_test_size = 64;
  auto plain = openDataset(o);
  o.augment = true;
  auto aug = openDataset(o);
  std::vector<int64_t> idx(64);
  std::iota(idx.begin(), idx.end(), 0);
  EXPECT_TRUE(torch::equal(plain.test->getBatch(idx, 5).inputs, aug.test->getBatch(idx, 5).inputs));
  EXPECT_FALSE(torch::equal(plain.train->getBatch(idx, 5).inputs, aug.train->getBatch(idx, 5).inputs));
  EXPECT_TRUE(torch::equal(aug.train->getBatch(idx, 5).inputs, aug.train->getBatch(idx, 5).inputs));
  EXPECT_TRUE(torch::equal(plain.train->getBatch(idx, 5).targets, aug.train->getBatch(idx, 5).targets));
}

}  // namespace
}  // namespace tandem::data
