// The imagefolder dataset on folders written by tests/support/make_image_folder.py
// (PNG and JPEG, RGB, grayscale and RGBA, one corrupt file).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/image_folder_dataset.hpp"
#include "data/prefetcher.hpp"
#include "support/expect_input_error.hpp"
#include "support/process.hpp"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;
using tandem::testing::expectInputError;
using tandem::testing::TempDir;

void makeFolder(const fs::path& dir, const std::string& extra = "") {
  auto run = tandem::testing::runCommand(TANDEM_PYTHON " " TANDEM_SOURCE_DIR "/tests/support/make_image_folder.py " +
                                         dir.string() + " " + extra);
  ASSERT_EQ(run.exit_code, 0) << run.output;
}

DatasetOptions folderOptions(const fs::path& dir, int64_t size = 32) {
  DatasetOptions o;
  o.name = "imagefolder";
  o.data_dir = dir.string();
  o.image_size = size;
  return o;
}

std::vector<int64_t> allIndices(const Dataset& d) {
  std::vector<int64_t> idx(static_cast<size_t>(d.size()));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
  return idx;
}

class DataImageFolder : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    makeFolder(dir_->path(), "--corrupt");
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static inline std::unique_ptr<TempDir> dir_;
};

TEST_F(DataImageFolder, SortedClassesAndReadableFilesOnly) {
  auto splits = openDataset(folderOptions(dir_->path()));
  EXPECT_EQ(splits.train->numClasses(), 3);
  EXPECT_EQ(splits.test->numClasses(), 3);
  EXPECT_EQ(splits.train->size(), 36);  // 37 files, broken.jpg left out
  EXPECT_EQ(splits.test->size(), 12);
  auto shape = splits.train->shape();
  EXPECT_EQ(shape.channels, 3);
  EXPECT_EQ(shape.height, 32);
  EXPECT_EQ(shape.width, 32);
  const auto& files = dynamic_cast<const ImageFolderDataset&>(*splits.train).files();
  for (const auto& f : files) {
    EXPECT_EQ(f.path.find("broken"), std::string::npos);
    EXPECT_NE(f.path.find("class_0" + std::to_string(f.label)), std::string::npos) << f.path;
  }
  EXPECT_TRUE(std::is_sorted(files.begin(), files.end(),
                             [](const ImageFile& a, const ImageFile& b) { return a.path < b.path; }));
}

// Class c is drawn bright in channel c and dark in channel c + 2 (mod 3);
// the mean over a class's images shows it through decode, crop and
// normalisation (undone here).
void expectClassColours(const DatasetSplits& splits, int64_t per_class) {
  auto idx = allIndices(*splits.test);
  auto batch = splits.test->getBatch(idx, 0);
  ASSERT_TRUE(torch::isfinite(batch.inputs).all().item<bool>());
  auto norm = imagenetNormalization();
  auto mean = torch::tensor(norm.mean).view({1, 3, 1, 1});
  auto stdev = torch::tensor(norm.std).view({1, 3, 1, 1});
  auto pixels = (batch.inputs * stdev + mean) * 255;
  for (int64_t c = 0; c < 3; ++c) {
    auto of_class = pixels.index({batch.targets == c});
    ASSERT_EQ(of_class.size(0), per_class);
    auto channel_means = of_class.mean({0, 2, 3});
    EXPECT_GT(channel_means[c].item<float>(), channel_means[(c + 2) % 3].item<float>() + 30) << c;
  }
}

TEST_F(DataImageFolder, DecodedPixelsCarryEachClassColour) {
  expectClassColours(openDataset(folderOptions(dir_->path())), 4);
}

TEST(DataImageFolderLayout, ChromaSubsampledJpegsDecode) {
  TempDir tmp;
  makeFolder(tmp.path(), "--jpeg-only --subsample 420 --train-per-class 1 --val-per-class 2 --size 50x40");
  expectClassColours(openDataset(folderOptions(tmp.path())), 2);
}

TEST_F(DataImageFolder, BatchesAreReproducibleFromSeedAndIndexOnAnyThread) {
  auto splits = openDataset(folderOptions(dir_->path()));
  std::vector<int64_t> idx{5, 0, 17, 35, 5};
  auto a = splits.train->getBatch(idx, 11);
  Batch b;
  std::thread([&] { b = splits.train->getBatch(idx, 11); }).join();
  EXPECT_TRUE(torch::equal(a.inputs, b.inputs));
  EXPECT_TRUE(torch::equal(a.targets, b.targets));
  // Index 5 twice in one batch: the draw depends on the index, not the slot.
  EXPECT_TRUE(torch::equal(a.inputs[0], a.inputs[4]));
  auto c = splits.train->getBatch(idx, 12);
  EXPECT_FALSE(torch::equal(a.inputs, c.inputs));
  EXPECT_TRUE(torch::equal(a.targets, c.targets));
  // The val split is not augmented: the seed changes nothing.
  std::vector<int64_t> v{0, 3};
  EXPECT_TRUE(torch::equal(splits.test->getBatch(v, 1).inputs, splits.test->getBatch(v, 2).inputs));
}

TEST_F(DataImageFolder, StrictDataNamesTheCorruptFile) {
  auto o = folderOptions(dir_->path());
  o.strict_data = true;
  expectInputError([&] { openDataset(o); }, {"broken.jpg", "--strict-data"});
}

TEST(DataImageFolderLayout, ValClassesMustMatchTrain) {
  TempDir tmp;
  makeFolder(tmp.path(), "--train-per-class 2 --val-per-class 1");
  fs::rename(tmp.path() / "val" / "class_02", tmp.path() / "val" / "zebra");
  expectInputError([&] { openDataset(folderOptions(tmp.path())); },
                   {"class_00, class_01, class_02", "class_00, class_01, zebra", "val"});
  fs::remove_all(tmp.path() / "val");
  expectInputError([&] { openDataset(folderOptions(tmp.path())); }, {(tmp.path() / "val").string(), "missing"});
}

TEST(DataImageFolderLayout, ClassWithoutImagesAndBadOptionsAreNamed) {
  TempDir tmp;
  makeFolder(tmp.path(), "--train-per-class 2 --val-per-class 1");
  for (const auto& e : fs::directory_iterator(tmp.path() / "train" / "class_01")) fs::remove(e.path());
  std::ofstream(tmp.path() / "train" / "class_01" / "README.txt") << "not an image, and ignored by extension\n";
  expectInputError([&] { openDataset(folderOptions(tmp.path())); }, {"class_01", "no readable"});

  TempDir ok;
  makeFolder(ok.path(), "--train-per-class 2 --val-per-class 1");
  auto o = folderOptions(ok.path());
  o.image_size = 0;
  expectInputError([&] { openDataset(o); }, {"--image-size", "0"});
  o = folderOptions(ok.path());
  o.normalize_mean = {0.5f};
  expectInputError([&] { openDataset(o); }, {"--normalize-mean", "3 channel"});
  o = folderOptions(ok.path());
  o.data_dir.clear();
  expectInputError([&] { openDataset(o); }, {"imagefolder", "--data-dir"});
}

TEST(DataImageFolderLayout, FileThatFailsLateIsReplacedByTheNextOrIsAnErrorWhenStrict) {
  TempDir tmp;
  makeFolder(tmp.path(), "--train-per-class 3 --val-per-class 1 --jpeg-only --size 64x64");
  // Cut a JPEG after its header: it passes the check at open and fails to decode.
  const fs::path victim = tmp.path() / "train" / "class_01" / "img_0000.jpg";
  auto size = fs::file_size(victim);
  fs::resize_file(victim, size / 2);
  auto splits = openDataset(folderOptions(tmp.path()));
  ASSERT_EQ(splits.train->size(), 9);
  const auto& files = dynamic_cast<const ImageFolderDataset&>(*splits.train).files();
  ASSERT_EQ(files[3].path, victim.string());
  std::vector<int64_t> idx{3, 4};
  auto batch = splits.train->getBatch(idx, 7);
  // Sample 4 stands in for sample 3, drawn with sample 3's crop.
  EXPECT_EQ(batch.targets[0].item<int64_t>(), files[4].label);
  auto again = splits.train->getBatch(idx, 7);
  EXPECT_TRUE(torch::equal(batch.inputs, again.inputs));
  EXPECT_FALSE(torch::equal(batch.inputs[0], batch.inputs[1]));

  auto o = folderOptions(tmp.path());
  o.strict_data = true;
  auto strict = openDataset(o);
  expectInputError([&] { strict.train->getBatch(idx, 7); }, {victim.string(), "decode", "truncated"});
}

TEST(DataImageFolderLayout, PrefetcherBuildsFullBatches) {
  TempDir tmp;
  makeFolder(tmp.path(), "--train-per-class 4 --val-per-class 1 --corrupt");
  auto splits = openDataset(folderOptions(tmp.path(), 24));
  ShardSampler sampler(splits.train->size(), 4, 0, 1, 3);
  Prefetcher prefetcher(splits.train, sampler, 0, 6, {2, 2, 3});
  for (int s = 0; s < 6; ++s) {
    auto b = prefetcher.next();
    EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{4, 3, 24, 24}));
    EXPECT_TRUE(torch::isfinite(b.inputs).all().item<bool>());
  }
}

}  // namespace
}  // namespace tandem::data
