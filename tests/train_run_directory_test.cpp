#include "train/run_directory.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "support/expect_input_error.hpp"
#include "support/process.hpp"

namespace tandem::train {
namespace {
namespace fs = std::filesystem;

void touch(const fs::path& path) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "x";
}

TEST(RunDirectoryTest, LatestNamesAFileInsideTheRun) {
  testing::TempDir dir;
  EXPECT_FALSE(latestCheckpoint(dir.path()));
  touch(dir.path() / "checkpoints" / "step-5.ckpt");
  recordLatest(dir.path(), dir.path() / "checkpoints" / "step-5.ckpt");
  ASSERT_TRUE(latestCheckpoint(dir.path()));
  EXPECT_EQ(*latestCheckpoint(dir.path()), dir.path() / "checkpoints" / "step-5.ckpt");
  fs::remove(dir.path() / "checkpoints" / "step-5.ckpt");
  EXPECT_FALSE(latestCheckpoint(dir.path()));  // named but gone: nothing to resume
  std::ofstream(dir.path() / "checkpoints" / "latest") << "../elsewhere.ckpt\n";
  testing::expectInputError([&] { latestCheckpoint(dir.path()); }, {"latest", "../elsewhere.ckpt"});
}

TEST(RunDirectoryTest, PruneDropsLaterStepsAndKeepsTheNewest) {
  testing::TempDir dir;
  for (int step : {10, 20, 30, 40, 50}) touch(dir.path() / "checkpoints" / ("step-" + std::to_string(step) + ".ckpt"));
  touch(dir.path() / "checkpoints" / "notes.txt");
  // A killed chief's half-written checkpoint goes; this process's own stays.
  touch(dir.path() / "checkpoints" / "step-60.ckpt.tmp.999999999");
  const std::string own = "step-60.ckpt.tmp." + std::to_string(::getpid());
  touch(dir.path() / "checkpoints" / own);
  pruneCheckpoints(dir.path(), 40, 2);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path() / "checkpoints")) left.push_back(e.path().filename());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"notes.txt", "step-30.ckpt", "step-40.ckpt", own}));
}

TEST(RunDirectoryTest, ClearLeavesTheNamedEntryAlone) {
  testing::TempDir dir;
  touch(dir.path() / "metrics.jsonl");
  touch(dir.path() / "checkpoints" / "step-5.ckpt");
  touch(dir.path() / "ps" / "ps-0" / "timeline-ps-0.json");
  clearRunDirectory(dir.path(), "ps");
  EXPECT_FALSE(fs::exists(dir.path() / "metrics.jsonl"));
  EXPECT_FALSE(fs::exists(dir.path() / "checkpoints"));
  EXPECT_TRUE(fs::exists(dir.path() / "ps" / "ps-0" / "timeline-ps-0.json"));
  clearRunDirectory(dir.path());
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(RunDirectoryTest, TrajectoryDifferencesIgnoreLengthAndOutputButNotTheOptimizer) {
  nlohmann::json a = {{"model", "mlp"},       {"batch_size", 16},       {"max_steps", 10},
                      {"out_dir", "runs/a"},  {"seed", 42},
                      {"optimizer", {{"name", "sgd"}, {"lr", 0.1}, {"momentum", 0.9}}}};
  nlohmann::json b = a;
  b["max_steps"] = 99;
  b["out_dir"] = "runs/b";
  EXPECT_FALSE(firstTrajectoryDifference(a, b, false));
  b["optimizer"]["lr"] = 0.2;
  ASSERT_TRUE(firstTrajectoryDifference(a, b, false));
  EXPECT_EQ(firstTrajectoryDifference(a, b, false)->field, "optimizer/lr");
  EXPECT_FALSE(firstTrajectoryDifference(a, b, true));
  b["optimizer"]["momentum"] = 0.5;
  auto d = firstTrajectoryDifference(a, b, true);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->field, "optimizer/momentum");
  EXPECT_EQ(d->stored, "0.9");
  EXPECT_EQ(d->current, "0.5");
}

TEST(RunDirectoryTest, MergeTakesOnlyTheGivenFieldsFromTheFlags) {
  nlohmann::json stored = {{"batch_size", 16}, {"seed", 1}, {"optimizer", {{"lr", 0.1}, {"name", "adam"}}}};
  nlohmann::json flags = {{"batch_size", 64}, {"seed", 7}, {"optimizer", {{"lr", 0.5}, {"name", "sgd"}}}};
  auto merged = mergeGivenFields(stored, flags, {"/seed", "/optimizer/lr"});
  EXPECT_EQ(merged["batch_size"], 16);
  EXPECT_EQ(merged["seed"], 7);
  EXPECT_EQ(merged["optimizer"]["lr"], 0.5);
  EXPECT_EQ(merged["optimizer"]["name"], "adam");
}

}  // namespace
}  // namespace tandem::train
