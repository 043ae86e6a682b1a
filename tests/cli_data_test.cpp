// `tandem train` on the user's own data: an image folder written by
// tests/support/make_image_folder.py, and a 12-class IDX set.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "models/registry.hpp"
#include "support/process.hpp"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::readFile;
using testing::runTandem;
using testing::TempDir;

size_t occurrences(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

void makeFolder(const fs::path& dir, const std::string& extra) {
  auto run = testing::runCommand(TANDEM_PYTHON " " TANDEM_SOURCE_DIR "/tests/support/make_image_folder.py " +
                                 dir.string() + " " + extra);
  ASSERT_EQ(run.exit_code, 0) << run.output;
}

std::string folderArgs(const TempDir& dir, const std::string& extra) {
  return "train --model cnn --dataset imagefolder --data-dir " + dir.str("images") +
         " --image-size 32 --batch-size 8 --threads 2 --log-every 2 --progress plain --out " + dir.str("run") + " " +
         extra;
}

TEST(CliData, ImageFolderTrainsPrintsClassesAndWarnsOncePerBadFile) {
  TempDir dir;
  makeFolder(dir.path() / "images", "--corrupt");
  // A JPEG cut after its header passes the check at open and fails on the
  // prefetch threads, in every epoch it is drawn.
  const fs::path cut = dir.path() / "images" / "train" / "class_02" / "img_0003.jpg";
  fs::resize_file(cut, fs::file_size(cut) / 2);
  // 36 training images in batches of 8: 4 steps an epoch, so 12 steps read
  // every file three times.
  auto run = runTandem(folderArgs(dir, "--max-steps 12 --eval-every 6 --prefetch-threads 2"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("3 classes: class_00=0, class_01=1, class_02=2"), std::string::npos) << run.output;
  EXPECT_EQ(occurrences(run.output, "broken.jpg"), 1u) << run.output;
  EXPECT_EQ(occurrences(run.output, "img_0003.jpg"), 1u) << run.output;
  auto summary = nlohmann::json::parse(readFile(dir.path() / "run" / "summary.json"));
  EXPECT_EQ(summary["steps"], 12);
  EXPECT_EQ(summary["dataset"], "imagefolder");
  EXPECT_GE(summary["test_accuracy"].get<double>(), 0.0);
  // The new data flags are part of the run's record, so --resume keeps them.
  auto record = nlohmann::json::parse(readFile(dir.path() / "run" / "run.json"));
  EXPECT_EQ(record["dataset"]["image_size"], 32);
  EXPECT_EQ(record["dataset"]["strict_data"], false);
}

TEST(CliData, StrictDataExitsTwoNamingTheFile) {
  TempDir dir;
  makeFolder(dir.path() / "images", "--corrupt --train-per-class 3 --val-per-class 1");
  auto run = runTandem(folderArgs(dir, "--max-steps 2 --strict-data"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("broken.jpg"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--strict-data"), std::string::npos) << run.output;
}

void putBigEndian(std::ofstream& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.put(static_cast<char>((v >> shift) & 0xff));
}

// Class k of 12 is a bright 3x3 patch at cell (k / 4, k % 4) of a 12x12
// image with noise: learnable, but not by a model with fewer outputs.
void writeTwelveClassIdx(const fs::path& dir, const std::string& prefix, uint32_t n, uint32_t seed) {
  std::ofstream images(dir / (prefix + "-images-idx3-ubyte"), std::ios::binary);
  std::ofstream labels(dir / (prefix + "-labels-idx1-ubyte"), std::ios::binary);
  putBigEndian(images, 0x00000803);
  putBigEndian(images, n);
  putBigEndian(images, 12);
  putBigEndian(images, 12);
  putBigEndian(labels, 0x00000801);
  putBigEndian(labels, n);
  uint32_t state = seed;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t k = i % 12;
    labels.put(static_cast<char>(k));
    for (uint32_t y = 0; y < 12; ++y) {
      for (uint32_t x = 0; x < 12; ++x) {
        state = state * 1664525u + 1013904223u;
        const bool lit = y / 3 == k / 4 && x / 3 == k % 4;
        images.put(static_cast<char>((lit ? 160 : 0) + (state >> 26)));
      }
    }
  }
}

TEST(CliData, TwelveClassIdxSetTrains) {
  TempDir dir;
  writeTwelveClassIdx(dir.path(), "train", 1200, 1);
  writeTwelveClassIdx(dir.path(), "t10k", 240, 2);
  auto run = runTandem("train --model mlp --mlp-widths 64 --dataset mnist-idx --data-dir " + dir.str() +
                       " --batch-size 32 --max-steps 80 --lr 0.1 --threads 2 --progress plain --out " +
                       dir.str("run"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The model was built with 12 outputs: its parameter count says so.
  const auto twelve = models::countParameters(*models::createModel("mlp", {1, 12, 12, 12}, {{64}}));
  const auto ten = models::countParameters(*models::createModel("mlp", {1, 12, 12, 10}, {{64}}));
  ASSERT_NE(twelve, ten);
  const std::string needle = fmt::format("({} parameters)", twelve);
  EXPECT_NE(run.output.find(needle), std::string::npos) << needle << "\n" << run.output;
  EXPECT_NE(run.output.find("12 classes"), std::string::npos) << run.output;
  auto summary = nlohmann::json::parse(readFile(dir.path() / "run" / "summary.json"));
  // Chance is 1/12; the patches are easy to tell apart.
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.5) << summary.dump();
}

TEST(CliData, NormalisationFlagsMustGiveOneValuePerChannel) {
  TempDir dir;
  writeTwelveClassIdx(dir.path(), "train", 24, 1);
  writeTwelveClassIdx(dir.path(), "t10k", 12, 2);
  auto run = runTandem("train --model mlp --mlp-widths 8 --dataset mnist-idx --data-dir " + dir.str() +
                       " --normalize-mean 0.1,0.2 --max-steps 1 --threads 1 --out " + dir.str("run"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--normalize-mean"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("1 channel"), std::string::npos) << run.output;
  run = runTandem("train --model mlp --mlp-widths 8 --dataset mnist-idx --data-dir " + dir.str() +
                  " --normalize-mean 0.1 --normalize-std 0.2 --max-steps 1 --batch-size 4 --threads 1 --out " +
                  dir.str("run2"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("mean 0.1000 std 0.2000"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace tandem
